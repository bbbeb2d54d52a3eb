/*
 * The Jinja parser: tokens (lex.c) to the tree of ast.h, with jinja2's
 * grammar and operator precedence. Statements: if/elif/else, for (tuple
 * targets, inline `if` filter, else), set (name, ns.attr, tuple, block
 * form), macro, filter blocks, break/continue, and Hugging Face's
 * generation block (rendered as its body). Anything else (call blocks,
 * include, extends, recursive loops) is a parse error naming line and
 * column, as is nesting deeper than MAX_NEST.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/template/ast.h"
#include "app/template/lex.h"
#include "app/template/template.h"

#define MAX_NEST 200

typedef struct parser {
    tpl_token *t;
    size_t i;
    tpl_arena *a;
    kvlm_error *err;
    int depth;
    int failed;
} parser;

static tpl_token *cur(parser *P) { return &P->t[P->i]; }
static tpl_token *peek(parser *P, size_t k) {
    size_t j = P->i;
    for (size_t s = 0; s < k && P->t[j].kind != TK_EOF; s++) j++;
    return &P->t[j];
}

static int fail_at(parser *P, const tpl_token *t, const char *fmt, const char *arg) {
    if (P->failed) return -1;
    P->failed = 1;
    char msg[300];
    snprintf(msg, sizeof msg, fmt, arg);
    return kvlm_error_set(P->err, KVLM_ERR_FORMAT, "template line %d, column %d: %s", t->line, t->col, msg);
}

static const char *tok_desc(const tpl_token *t) {
    static char buf[80];
    switch (t->kind) {
    case TK_EOF: return "end of template";
    case TK_BLOCK_END: return "end of statement block";
    case TK_VAR_END: return "end of print statement";
    case TK_TEXT: return "template text";
    default: snprintf(buf, sizeof buf, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->p); return buf;
    }
}

static int is_op(const tpl_token *t, const char *op) {
    return t->kind == TK_OP && t->n == strlen(op) && !memcmp(t->p, op, t->n);
}
static int is_name(const tpl_token *t, const char *name) {
    return t->kind == TK_NAME && t->n == strlen(name) && !memcmp(t->p, name, t->n);
}
static int accept_op(parser *P, const char *op) { return is_op(cur(P), op) ? (P->i++, 1) : 0; }
static int accept_name(parser *P, const char *nm) { return is_name(cur(P), nm) ? (P->i++, 1) : 0; }
static int expect_op(parser *P, const char *op) {
    if (accept_op(P, op)) return 0;
    char m[64];
    snprintf(m, sizeof m, "expected '%s', got %%s", op);
    return fail_at(P, cur(P), m, tok_desc(cur(P)));
}
static int expect_end(parser *P) {
    if (cur(P)->kind == TK_BLOCK_END) return P->i++, 0;
    return fail_at(P, cur(P), "expected end of statement block, got %s", tok_desc(cur(P)));
}

static tn *node(parser *P, int kind, const tpl_token *at) {
    tn *n = tpl_alloc(P->a, sizeof *n);
    if (!n) {
        fail_at(P, at, "%s", "template too large");
        return NULL;
    }
    n->kind = (uint8_t)kind;
    n->line = at->line, n->col = at->col;
    return n;
}

static const char *name_of(parser *P, const tpl_token *t) {
    tv s = tv_str_copy(P->a, t->p, t->n);
    return s.k == TV_STR ? s.s.p : "";
}

/* A growing array of node pointers, arena-backed. */
typedef struct nvec {
    tn **v;
    int n, cap;
} nvec;
static int nvec_push(parser *P, nvec *v, tn *x) {
    if (v->n == v->cap) {
        int cap = v->cap ? v->cap * 2 : 4;
        tn **q = tpl_alloc(P->a, (size_t)cap * sizeof *q);
        if (!q) return fail_at(P, cur(P), "%s", "template too large");
        if (v->n) memcpy(q, v->v, (size_t)v->n * sizeof *q);
        v->v = q, v->cap = cap;
    }
    v->v[v->n++] = x;
    return 0;
}
static int names_push(parser *P, const char ***names, int *n, const char *s) {
    const char **q = tpl_alloc(P->a, (size_t)(*n + 1) * sizeof *q);
    if (!q) return fail_at(P, cur(P), "%s", "template too large");
    if (*n) memcpy(q, *names, (size_t)*n * sizeof *q);
    q[(*n)++] = s;
    *names = q;
    return 0;
}

static tn *expr(parser *P, int with_cond);
static tn *unary(parser *P, int with_filter);

static tn *bin(parser *P, const tpl_token *at, char op, tn *a, tn *b) {
    if (!a || !b) return NULL;
    tn *n = node(P, TN_BINARY, at);
    if (n) n->op = op, n->a = a, n->b = b;
    return n;
}

/* Call arguments after '(' up to ')': positional then name=value. */
static int call_args(parser *P, tn *n) {
    nvec pos = {0}, kw = {0};
    const char **kwn = NULL;
    int nkw = 0;
    while (!accept_op(P, ")")) {
        if (pos.n + nkw && expect_op(P, ",")) return -1;
        if (accept_op(P, ")")) break;
        if (cur(P)->kind == TK_NAME && is_op(peek(P, 1), "=")) {
            const char *k = name_of(P, cur(P));
            P->i += 2;
            tn *v = expr(P, 1);
            if (!v || nvec_push(P, &kw, v) || names_push(P, &kwn, &nkw, k)) return -1;
        } else {
            if (nkw) return fail_at(P, cur(P), "%s", "positional argument after keyword argument");
            tn *v = expr(P, 1);
            if (!v || nvec_push(P, &pos, v)) return -1;
        }
    }
    n->args = pos.v, n->nargs = pos.n, n->kwargs = kw.v, n->kwnames = kwn, n->nkw = nkw;
    return 0;
}

/* expressions separated by commas; a tuple when a comma appears (or when
 * parenthesised and empty). */
static tn *tuple_expr(parser *P, int with_cond, int explicit_parens) {
    tpl_token *at = cur(P);
    nvec v = {0};
    int comma = 0;
    for (;;) {
        if (v.n && !accept_op(P, ",")) break;
        if (v.n) comma = 1;
        tpl_token *c = cur(P);
        if (c->kind == TK_BLOCK_END || c->kind == TK_VAR_END || is_op(c, ")") || is_name(c, "in") ||
            (v.n == 0 && explicit_parens && is_op(c, ")")))
            break;
        tn *e = expr(P, with_cond);
        if (!e || nvec_push(P, &v, e)) return NULL;
    }
    if (!comma && v.n == 1) return v.v[0];
    if (v.n == 0 && !explicit_parens) {
        fail_at(P, cur(P), "expected an expression, got %s", tok_desc(cur(P)));
        return NULL;
    }
    tn *n = node(P, TN_TUPLE, at);
    if (n) n->args = v.v, n->nargs = v.n;
    return n;
}

static tn *primary(parser *P) {
    tpl_token *t = cur(P);
    tn *n;
    switch (t->kind) {
    case TK_NAME:
        P->i++;
        if (!(n = node(P, TN_LIT, t))) return NULL;
        if (is_name(t, "true") || is_name(t, "True")) n->val = tv_bool(1);
        else if (is_name(t, "false") || is_name(t, "False")) n->val = tv_bool(0);
        else if (is_name(t, "none") || is_name(t, "None")) n->val = tv_none();
        else {
            n->kind = TN_NAME;
            if (names_push(P, &n->names, &n->nnames, name_of(P, t))) return NULL;
        }
        return n;
    case TK_STR: {
        size_t len = 0, k = P->i;
        for (; P->t[k].kind == TK_STR; k++) len += P->t[k].n;
        if (!(n = node(P, TN_LIT, t))) return NULL;
        char *s = tpl_alloc(P->a, len + 1);
        if (!s) return fail_at(P, t, "%s", "template too large"), NULL;
        len = 0;
        for (; P->i < k; P->i++) memcpy(s + len, P->t[P->i].p, P->t[P->i].n), len += P->t[P->i].n;
        n->val = tv_strn(s, len);
        return n;
    }
    case TK_INT:
    case TK_FLOAT:
        P->i++;
        if (!(n = node(P, TN_LIT, t))) return NULL;
        n->val = t->kind == TK_INT ? tv_int(t->i) : tv_float(t->f);
        return n;
    default: break;
    }
    if (accept_op(P, "(")) {
        tn *e = tuple_expr(P, 1, 1);
        if (!e || expect_op(P, ")")) return NULL;
        return e;
    }
    if (accept_op(P, "[")) {
        if (!(n = node(P, TN_LIST, t))) return NULL;
        nvec v = {0};
        while (!accept_op(P, "]")) {
            if (v.n && expect_op(P, ",")) return NULL;
            if (accept_op(P, "]")) break;
            tn *e = expr(P, 1);
            if (!e || nvec_push(P, &v, e)) return NULL;
        }
        n->args = v.v, n->nargs = v.n;
        return n;
    }
    if (accept_op(P, "{")) {
        if (!(n = node(P, TN_DICT, t))) return NULL;
        nvec v = {0};
        while (!accept_op(P, "}")) {
            if (v.n && expect_op(P, ",")) return NULL;
            if (accept_op(P, "}")) break;
            tn *k = expr(P, 1);
            if (!k || expect_op(P, ":")) return NULL;
            tn *e = expr(P, 1);
            if (!e || nvec_push(P, &v, k) || nvec_push(P, &v, e)) return NULL;
        }
        n->args = v.v, n->nargs = v.n;
        return n;
    }
    fail_at(P, t, "unexpected %s", tok_desc(t));
    return NULL;
}

static tn *subscript(parser *P, tn *obj) {
    tpl_token *at = cur(P);
    tn *parts[3] = {0};
    int np = 0, is_slice = 0;
    for (;;) {
        tpl_token *c = cur(P);
        if (is_op(c, ":")) {
            is_slice = 1;
            P->i++;
            np++;
            if (np > 2) return fail_at(P, c, "%s", "too many ':' in a slice"), NULL;
            continue;
        }
        if (is_op(c, "]")) break;
        if (parts[np]) return fail_at(P, c, "expected ']', got %s", tok_desc(c)), NULL;
        if (!(parts[np] = expr(P, 1))) return NULL;
    }
    if (expect_op(P, "]")) return NULL;
    tn *n = node(P, is_slice ? TN_SLICE : TN_ITEM, at);
    if (!n) return NULL;
    n->a = obj;
    if (!is_slice) {
        if (!parts[0]) return fail_at(P, at, "%s", "empty subscript"), NULL;
        n->b = parts[0];
        return n;
    }
    n->args = tpl_alloc(P->a, 3 * sizeof *n->args);
    if (!n->args) return fail_at(P, at, "%s", "template too large"), NULL;
    memcpy(n->args, parts, sizeof parts);
    n->nargs = 3;
    return n;
}

static tn *postfix(parser *P, tn *n) {
    while (n) {
        tpl_token *t = cur(P);
        if (accept_op(P, ".")) {
            tpl_token *a = cur(P);
            if (a->kind == TK_INT) {
                tn *it = node(P, TN_ITEM, a), *lit = node(P, TN_LIT, a);
                if (!it || !lit) return NULL;
                lit->val = tv_int(a->i);
                it->a = n, it->b = lit, n = it;
                P->i++;
            } else if (a->kind == TK_NAME) {
                tn *at = node(P, TN_ATTR, a);
                if (!at || names_push(P, &at->names, &at->nnames, name_of(P, a))) return NULL;
                at->a = n, n = at;
                P->i++;
            } else return fail_at(P, a, "expected a name after '.', got %s", tok_desc(a)), NULL;
        } else if (accept_op(P, "[")) {
            n = subscript(P, n);
        } else if (accept_op(P, "(")) {
            tn *c = node(P, TN_CALL, t);
            if (!c || call_args(P, c)) return NULL;
            c->a = n, n = c;
        } else break;
    }
    return n;
}

static tn *filter_chain(parser *P, tn *n) {
    while (n) {
        tpl_token *t = cur(P);
        if (accept_op(P, "|")) {
            tpl_token *nm = cur(P);
            if (nm->kind != TK_NAME) return fail_at(P, nm, "expected a filter name, got %s", tok_desc(nm)), NULL;
            P->i++;
            tn *f = node(P, TN_FILTER, nm);
            if (!f || names_push(P, &f->names, &f->nnames, name_of(P, nm))) return NULL;
            if (accept_op(P, "(") && call_args(P, f)) return NULL;
            f->a = n, n = f;
        } else if (accept_name(P, "is")) {
            tn *x = node(P, TN_TEST, t);
            if (!x) return NULL;
            if (accept_name(P, "not")) x->op = 1;
            tpl_token *nm = cur(P);
            if (nm->kind != TK_NAME) return fail_at(P, nm, "expected a test name, got %s", tok_desc(nm)), NULL;
            P->i++;
            if (names_push(P, &x->names, &x->nnames, name_of(P, nm))) return NULL;
            tpl_token *c = cur(P);
            if (accept_op(P, "(")) {
                if (call_args(P, x)) return NULL;
            } else if ((c->kind == TK_NAME && !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) ||
                       c->kind == TK_STR || c->kind == TK_INT || c->kind == TK_FLOAT || is_op(c, "[") ||
                       is_op(c, "{")) {
                tn *arg = postfix(P, primary(P));
                if (!arg) return NULL;
                x->args = tpl_alloc(P->a, sizeof *x->args);
                if (!x->args) return NULL;
                x->args[0] = arg, x->nargs = 1;
            }
            x->a = n, n = x;
        } else if (accept_op(P, "(")) {
            tn *c = node(P, TN_CALL, t);
            if (!c || call_args(P, c)) return NULL;
            c->a = n, n = c;
        } else break;
    }
    return n;
}

static tn *unary(parser *P, int with_filter) {
    tpl_token *t = cur(P);
    if (++P->depth > MAX_NEST) return fail_at(P, t, "%s", "expression nested too deeply"), NULL;
    tn *n;
    if (is_op(t, "-") || is_op(t, "+")) {
        P->i++;
        n = node(P, TN_UNARY, t);
        if (n) n->op = t->p[0], n->a = unary(P, 0);
        if (n && !n->a) n = NULL;
    } else n = primary(P);
    n = postfix(P, n);
    if (with_filter) n = filter_chain(P, n);
    P->depth--;
    return n;
}

static tn *power(parser *P) {
    tn *a = unary(P, 1);
    while (a && is_op(cur(P), "**")) {
        tpl_token *t = cur(P);
        P->i++;
        a = bin(P, t, 'P', a, unary(P, 1));
    }
    return a;
}

static tn *math2(parser *P) {
    tn *a = power(P);
    for (;;) {
        tpl_token *t = cur(P);
        char op = is_op(t, "*") ? '*' : is_op(t, "/") ? '/' : is_op(t, "//") ? 'F' : is_op(t, "%") ? '%' : 0;
        if (!a || !op) return a;
        P->i++;
        a = bin(P, t, op, a, power(P));
    }
}

static tn *concat(parser *P) {
    tn *a = math2(P);
    while (a && is_op(cur(P), "~")) {
        tpl_token *t = cur(P);
        P->i++;
        a = bin(P, t, '~', a, math2(P));
    }
    return a;
}

static tn *math1(parser *P) {
    tn *a = concat(P);
    for (;;) {
        tpl_token *t = cur(P);
        char op = is_op(t, "+") ? '+' : is_op(t, "-") ? '-' : 0;
        if (!a || !op) return a;
        P->i++;
        a = bin(P, t, op, a, concat(P));
    }
}

static tn *compare(parser *P) {
    tn *a = math1(P), *chain = NULL;
    for (;;) {
        tpl_token *t = cur(P);
        char op = is_op(t, "==") ? '=' : is_op(t, "!=") ? 'N' : is_op(t, "<") ? '<' : is_op(t, "<=") ? 'L'
                : is_op(t, ">") ? '>' : is_op(t, ">=") ? 'G' : is_name(t, "in") ? 'I' : 0;
        if (!op && is_name(t, "not") && is_name(peek(P, 1), "in")) op = 'J', P->i++;
        if (!a || !op) break;
        P->i++;
        tn *b = math1(P);
        tn *c = bin(P, t, op, a, b);
        chain = chain ? bin(P, t, '&', chain, c) : c;
        a = b;
        if (!chain) return NULL;
    }
    return chain ? chain : a;
}

static tn *not_expr(parser *P) {
    tpl_token *t = cur(P);
    if (accept_name(P, "not")) {
        tn *n = node(P, TN_UNARY, t);
        if (n) n->op = '!', n->a = not_expr(P);
        return n && n->a ? n : NULL;
    }
    return compare(P);
}

static tn *and_expr(parser *P) {
    tn *a = not_expr(P);
    while (a && is_name(cur(P), "and")) {
        tpl_token *t = cur(P);
        P->i++;
        a = bin(P, t, '&', a, not_expr(P));
    }
    return a;
}

static tn *or_expr(parser *P) {
    tn *a = and_expr(P);
    while (a && is_name(cur(P), "or")) {
        tpl_token *t = cur(P);
        P->i++;
        a = bin(P, t, '|', a, and_expr(P));
    }
    return a;
}

static tn *expr(parser *P, int with_cond) {
    if (++P->depth > MAX_NEST) return fail_at(P, cur(P), "%s", "expression nested too deeply"), NULL;
    tn *a = or_expr(P);
    while (with_cond && a && is_name(cur(P), "if")) {
        tpl_token *t = cur(P);
        P->i++;
        tn *c = node(P, TN_COND, t);
        if (!c || !(c->a = or_expr(P))) return NULL;
        c->b = a;
        if (accept_name(P, "else") && !(c->c = expr(P, 1))) return NULL;
        a = c;
    }
    P->depth--;
    return a;
}

/* ------------------------------------------------------------- statements */

static int body(parser *P, nvec *out, const char *const *ends, const char **which);

static int assign_names(parser *P, tn *n) {
    int paren = accept_op(P, "(");
    do {
        tpl_token *t = cur(P);
        if (t->kind != TK_NAME) return fail_at(P, t, "expected a name, got %s", tok_desc(t));
        if (names_push(P, &n->names, &n->nnames, name_of(P, t))) return -1;
        P->i++;
    } while (accept_op(P, ","));
    return paren ? expect_op(P, ")") : 0;
}

static tn *stmt_for(parser *P, tpl_token *at) {
    tn *n = node(P, TN_FOR, at);
    if (!n || assign_names(P, n)) return NULL;
    if (!accept_name(P, "in")) return fail_at(P, cur(P), "expected 'in', got %s", tok_desc(cur(P))), NULL;
    if (!(n->a = tuple_expr(P, 0, 0))) return NULL;
    if (accept_name(P, "if") && !(n->b = expr(P, 1))) return NULL;
    if (is_name(cur(P), "recursive")) return fail_at(P, cur(P), "%s", "recursive loops are not supported"), NULL;
    if (expect_end(P)) return NULL;
    static const char *const ends[] = {"else", "endfor", NULL};
    const char *w;
    nvec b = {0}, e = {0};
    if (body(P, &b, ends, &w)) return NULL;
    if (!strcmp(w, "else")) {
        static const char *const ends2[] = {"endfor", NULL};
        if (expect_end(P) || body(P, &e, ends2, &w)) return NULL;
    }
    n->body = b.v, n->nbody = b.n, n->orelse = e.v, n->norelse = e.n;
    return expect_end(P) ? NULL : n;
}

static tn *stmt_if(parser *P, tpl_token *at) {
    tn *n = node(P, TN_IF, at);
    if (!n || !(n->a = expr(P, 0)) || expect_end(P)) return NULL;
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    const char *w;
    nvec b = {0};
    if (body(P, &b, ends, &w)) return NULL;
    n->body = b.v, n->nbody = b.n;
    if (!strcmp(w, "elif")) {
        tn *e = stmt_if(P, &P->t[P->i - 1]);
        if (!e) return NULL;
        n->orelse = tpl_alloc(P->a, sizeof *n->orelse);
        if (!n->orelse) return NULL;
        n->orelse[0] = e, n->norelse = 1;
        return n; /* the nested if consumed endif */
    }
    if (!strcmp(w, "else")) {
        static const char *const ends2[] = {"endif", NULL};
        nvec e = {0};
        if (expect_end(P) || body(P, &e, ends2, &w)) return NULL;
        n->orelse = e.v, n->norelse = e.n;
    }
    return expect_end(P) ? NULL : n;
}

/* A filter chain `name(args) | name ...` applied to nothing (a = NULL),
 * for filter blocks and `set x | filter`. */
static tn *bare_filters(parser *P) {
    tn *n = NULL;
    do {
        tpl_token *nm = cur(P);
        if (nm->kind != TK_NAME) return fail_at(P, nm, "expected a filter name, got %s", tok_desc(nm)), NULL;
        P->i++;
        tn *f = node(P, TN_FILTER, nm);
        if (!f || names_push(P, &f->names, &f->nnames, name_of(P, nm))) return NULL;
        if (accept_op(P, "(") && call_args(P, f)) return NULL;
        f->a = n, n = f;
    } while (accept_op(P, "|"));
    return n;
}

static tn *stmt_set(parser *P, tpl_token *at) {
    tn *n = node(P, TN_SET, at);
    if (!n) return NULL;
    tpl_token *t = cur(P);
    if (t->kind == TK_NAME && is_op(peek(P, 1), ".")) {
        tpl_token *attr = peek(P, 2);
        if (attr->kind != TK_NAME) return fail_at(P, attr, "expected a name, got %s", tok_desc(attr)), NULL;
        if (names_push(P, &n->names, &n->nnames, name_of(P, t)) ||
            names_push(P, &n->names, &n->nnames, name_of(P, attr)))
            return NULL;
        n->sub = 1;
        P->i += 3;
    } else if (assign_names(P, n)) return NULL;
    else if (n->nnames > 1) n->sub = 2;
    if (accept_op(P, "=")) {
        if (!(n->a = tuple_expr(P, 1, 0)) || expect_end(P)) return NULL;
        return n;
    }
    if (n->sub) return fail_at(P, cur(P), "expected '=', got %s", tok_desc(cur(P))), NULL;
    n->kind = TN_SETBLOCK;
    if (accept_op(P, "|") && !(n->a = bare_filters(P))) return NULL;
    if (expect_end(P)) return NULL;
    static const char *const ends[] = {"endset", NULL};
    const char *w;
    nvec b = {0};
    if (body(P, &b, ends, &w) || expect_end(P)) return NULL;
    n->body = b.v, n->nbody = b.n;
    return n;
}

static tn *stmt_macro(parser *P, tpl_token *at) {
    tn *n = node(P, TN_MACRO, at);
    tpl_token *t = cur(P);
    if (!n) return NULL;
    if (t->kind != TK_NAME) return fail_at(P, t, "expected a macro name, got %s", tok_desc(t)), NULL;
    if (names_push(P, &n->names, &n->nnames, name_of(P, t))) return NULL;
    P->i++;
    if (expect_op(P, "(")) return NULL;
    nvec defs = {0};
    while (!accept_op(P, ")")) {
        if (n->nnames > 1 && expect_op(P, ",")) return NULL;
        tpl_token *p = cur(P);
        if (p->kind != TK_NAME) return fail_at(P, p, "expected a parameter name, got %s", tok_desc(p)), NULL;
        P->i++;
        tn *d = NULL;
        if (accept_op(P, "=") && !(d = expr(P, 1))) return NULL;
        if (names_push(P, &n->names, &n->nnames, name_of(P, p)) || nvec_push(P, &defs, d)) return NULL;
    }
    n->args = defs.v, n->nargs = defs.n;
    if (expect_end(P)) return NULL;
    static const char *const ends[] = {"endmacro", NULL};
    const char *w;
    nvec b = {0};
    if (body(P, &b, ends, &w) || expect_end(P)) return NULL;
    n->body = b.v, n->nbody = b.n;
    return n;
}

static tn *statement(parser *P) {
    tpl_token *kw = cur(P);
    if (kw->kind != TK_NAME) return fail_at(P, kw, "expected a statement name, got %s", tok_desc(kw)), NULL;
    P->i++;
    if (is_name(kw, "if")) return stmt_if(P, kw);
    if (is_name(kw, "for")) return stmt_for(P, kw);
    if (is_name(kw, "set")) return stmt_set(P, kw);
    if (is_name(kw, "macro")) return stmt_macro(P, kw);
    if (is_name(kw, "break") || is_name(kw, "continue")) {
        tn *n = node(P, is_name(kw, "break") ? TN_BREAK : TN_CONTINUE, kw);
        return n && !expect_end(P) ? n : NULL;
    }
    if (is_name(kw, "filter") || is_name(kw, "generation")) {
        int gen = is_name(kw, "generation");
        tn *n = node(P, gen ? TN_IF : TN_FILTERBLOCK, kw);
        if (!n) return NULL;
        if (gen) {
            if (!(n->a = node(P, TN_LIT, kw))) return NULL;
            n->a->val = tv_bool(1);
        } else if (!(n->a = bare_filters(P))) return NULL;
        if (expect_end(P)) return NULL;
        const char *const ends[] = {gen ? "endgeneration" : "endfilter", NULL};
        const char *w;
        nvec b = {0};
        if (body(P, &b, ends, &w) || expect_end(P)) return NULL;
        n->body = b.v, n->nbody = b.n;
        return n;
    }
    return fail_at(P, kw, "unknown or unsupported statement %s", tok_desc(kw)), NULL;
}

/* Statements up to a {% name %} with name in ends (ends NULL: up to the end
 * of the template); *which is that name, the parser left after it. */
static int body(parser *P, nvec *out, const char *const *ends, const char **which) {
    if (++P->depth > MAX_NEST) return fail_at(P, cur(P), "%s", "statements nested too deeply");
    for (;;) {
        tpl_token *t = cur(P);
        if (t->kind == TK_EOF) {
            if (!ends) break;
            char m[120];
            snprintf(m, sizeof m, "unexpected end of template: expected {%% %s %%}", ends[ends[1] ? 1 : 0]);
            for (int i = 0; ends[i]; i++)
                if (!strncmp(ends[i], "end", 3)) snprintf(m, sizeof m, "unexpected end of template: expected {%% %s %%}", ends[i]);
            return fail_at(P, t, "%s", m);
        }
        tn *n = NULL;
        if (t->kind == TK_TEXT) {
            P->i++;
            if ((n = node(P, TN_TEXT, t))) n->val = tv_strn(t->p, t->n);
        } else if (t->kind == TK_VAR_BEGIN) {
            P->i++;
            if ((n = node(P, TN_OUT, t)) && !(n->a = tuple_expr(P, 1, 0))) n = NULL;
            if (n && cur(P)->kind != TK_VAR_END)
                return fail_at(P, cur(P), "expected end of print statement, got %s", tok_desc(cur(P)));
            P->i++;
        } else if (t->kind == TK_BLOCK_BEGIN) {
            tpl_token *kw = peek(P, 1);
            for (int i = 0; ends && ends[i]; i++)
                if (is_name(kw, ends[i])) {
                    *which = ends[i];
                    P->i += 2;
                    P->depth--;
                    return 0;
                }
            if (kw->kind == TK_NAME && (!strncmp(kw->p, "end", 3) || is_name(kw, "elif") || is_name(kw, "else")))
                return fail_at(P, kw, "unexpected %s", tok_desc(kw));
            P->i++;
            n = statement(P);
        } else return fail_at(P, t, "unexpected %s", tok_desc(t));
        if (!n || nvec_push(P, out, n)) return -1;
    }
    P->depth--;
    return 0;
}

tpl_template *tpl_parse(const char *src, size_t n, kvlm_error *err) {
    tpl_template *t = calloc(1, sizeof *t);
    if (!t) {
        kvlm_error_set(err, KVLM_ERR_NOMEM, "template: out of memory");
        return NULL;
    }
    t->arena.limit = 64u << 20;
    tpl_tokens toks;
    if (tpl_lex(src, n, &t->arena, &toks, err)) {
        tpl_free(t);
        return NULL;
    }
    parser P = {.t = toks.v, .a = &t->arena, .err = err};
    nvec b = {0};
    const char *w = NULL;
    if (body(&P, &b, NULL, &w)) {
        tpl_free(t);
        return NULL;
    }
    t->body = b.v, t->nbody = b.n;
    return t;
}

void tpl_free(tpl_template *t) {
    if (!t) return;
    tpl_arena_free(&t->arena);
    free(t);
}
