/*
 * The parsed form of a Jinja template, shared by the parser (parse.c) and
 * the evaluator (eval.c): one node type for statements and expressions.
 *
 * Invariants: nodes, names and string literals live in the template's own
 * arena and never change after parsing; every node records the line and
 * column where it starts (1-based) for error messages. A body is an array
 * of statement nodes.
 */
#ifndef KVLM_TEMPLATE_AST_H
#define KVLM_TEMPLATE_AST_H

#include "app/template/value.h"

typedef enum tn_kind {
    /* statements */
    TN_TEXT,     /* val: the text */
    TN_OUT,      /* a: expression printed */
    TN_IF,       /* a: condition, body, orelse */
    TN_FOR,      /* names[0..nnames), a: iterable, b: filter condition or NULL, body, orelse */
    TN_SET,      /* names[0] (and names[1] for ns.attr, sub=1), or a tuple of names (sub=2); a: value */
    TN_SETBLOCK, /* names[0]; body rendered; filters in args (TN_FILTER chain with a=NULL) */
    TN_MACRO,    /* names[0]: macro name, names[1..nnames): parameters; args: defaults (NULL each) */
    TN_FILTERBLOCK, /* body rendered then filtered by a (a TN_FILTER chain whose innermost a is NULL) */
    TN_BREAK,
    TN_CONTINUE,
    /* expressions */
    TN_LIT,    /* val */
    TN_NAME,   /* names[0] */
    TN_LIST,   /* args */
    TN_TUPLE,  /* args */
    TN_DICT,   /* args: key, value, key, value... */
    TN_ATTR,   /* a.names[0] */
    TN_ITEM,   /* a[b] */
    TN_SLICE,  /* a[args[0]:args[1]:args[2]] (NULL when omitted) */
    TN_CALL,   /* a(args, kwnames=kwargs) */
    TN_FILTER, /* a | names[0](args, kw) */
    TN_TEST,   /* a is [not: op=1] names[0](args) */
    TN_UNARY,  /* op '-', '+', '!' (not) on a */
    TN_BINARY, /* a op b: + - * / F(//) % P(**) ~ = (==) N (!=) < L (<=) > G (>=) I (in) J (not in) & (and) | (or) */
    TN_COND,   /* b if a else c (c NULL: Undefined) */
} tn_kind;

typedef struct tn tn;
struct tn {
    uint8_t kind;
    char op;
    uint8_t sub;
    int line, col;
    tn *a, *b, *c;
    tn **args; /* arguments / items / defaults */
    int nargs;
    tn **kwargs;
    const char **kwnames;
    int nkw;
    tn **body, **orelse;
    int nbody, norelse;
    const char **names;
    int nnames;
    tv val;
};

struct tpl_template {
    tpl_arena arena;
    tn **body;
    int nbody;
};

#endif
