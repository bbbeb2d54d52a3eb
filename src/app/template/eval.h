/*
 * What the evaluator (eval.c) shares with the built-ins (builtins.c): the
 * render state and the entry points of filters, tests and methods.
 *
 * Invariants: every function returning int returns 0 on success or -1
 * after filling R->err (R->raised set when the template called
 * raise_exception); values made are in R->a.
 */
#ifndef KVLM_TEMPLATE_EVAL_H
#define KVLM_TEMPLATE_EVAL_H

#include "app/template/ast.h"
#include "app/template/template.h"

typedef struct rscope {
    struct rscope *parent;
    tv_dict *vars;
} rscope;

typedef struct rctx {
    tpl_arena *a;
    tpl_buf *out;
    size_t max_output;
    long iterations, max_iterations;
    int depth, max_depth;
    long long now;
    rscope *top;
    int raised;
    kvlm_error *err;
} rctx;

/* Fills R->err with "line L: message" (node may be NULL) and returns -1. */
int rx_fail(rctx *R, const tn *at, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* -1 with the arena's "out of memory" error when v is a failed allocation. */
int rx_oom(rctx *R, const tn *at);

/* Arguments of a call: positional values and keyword values by name. */
typedef struct rargs {
    tv *pos;
    int npos;
    const char **kwn;
    tv *kw;
    int nkw;
} rargs;

/* The argument at position i or named name; NULL when absent. */
tv *rargs_get(const rargs *g, int i, const char *name);

/* The filter `name` applied to in. */
int tpl_filter(rctx *R, const tn *at, const char *name, tv in, const rargs *g, tv *out);
/* The test `name` on v. */
int tpl_test(rctx *R, const tn *at, const char *name, tv v, const rargs *g, int *result);
/* obj.name(args) for the Python methods of str, dict and list templates
 * use; *found = 0 when obj has no such method (nothing else done). */
int tpl_method(rctx *R, const tn *at, tv obj, const char *name, const rargs *g, tv *out, int *found);
/* Attribute access with jinja2's rules: a dict's key, a namespace's
 * attribute, else Undefined (an error for Undefined itself). */
int tpl_getattr(rctx *R, const tn *at, tv obj, const char *name, tv *out);
/* The items a for loop or filter iterates: a list's items, a dict's keys, a
 * string's characters; Undefined gives none. */
int tpl_iterate(rctx *R, const tn *at, tv v, tv_list **items);
/* str(v) as a new arena string. */
int tpl_to_str(rctx *R, const tn *at, tv v, tv *out);

#endif
