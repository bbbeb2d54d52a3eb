/*
 * The Jinja evaluator: renders a parsed template (ast.h) with jinja2's
 * semantics for scoping (a for loop or macro opens a scope; `set` writes the
 * innermost one; namespaces carry values out of loops), Undefined, Python
 * operators, loop variables, break/continue and macros, within the limits of
 * tpl_limits. Built-in filters, tests and methods are in builtins.c; the
 * JSON-to-value bridge and tpl_render are at the end of this file.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "app/template/eval.h"

enum { FN_RANGE = 1, FN_NAMESPACE, FN_DICT, FN_RAISE, FN_STRFTIME };
enum { RUN_OK = 0, RUN_BREAK = 1, RUN_CONTINUE = 2 };

int rx_fail(rctx *R, const tn *at, const char *fmt, ...) {
    if (R->err->code) return -1; /* keep the first error */
    char msg[KVLM_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (at) kvlm_error_set(R->err, KVLM_ERR_FORMAT, "template line %d: %s", at->line, msg);
    else kvlm_error_set(R->err, KVLM_ERR_FORMAT, "template: %s", msg);
    return -1;
}

int rx_oom(rctx *R, const tn *at) {
    return rx_fail(R, at, "rendering used more than the %zu bytes of memory allowed", R->a->limit);
}

tv *rargs_get(const rargs *g, int i, const char *name) {
    if (i >= 0 && i < g->npos) return &g->pos[i];
    for (int k = 0; name && k < g->nkw; k++)
        if (!strcmp(g->kwn[k], name)) return &g->kw[k];
    return NULL;
}

static const char *undef_msg(rctx *R, const char *fmt, const char *a, const char *b) {
    char m[300];
    snprintf(m, sizeof m, fmt, a, b);
    tv s = tv_str_copy(R->a, m, strlen(m));
    return s.k == TV_STR ? s.s.p : "undefined";
}

static int undefined_error(rctx *R, const tn *at, tv v) {
    return rx_fail(R, at, "%s", v.why ? v.why : "value is undefined");
}

int tpl_to_str(rctx *R, const tn *at, tv v, tv *out) {
    if (v.k == TV_STR) return *out = v, 0;
    tpl_buf b = {0};
    if (tv_str_of(&b, v)) return tpl_buf_free(&b), rx_fail(R, at, "%s", TV_TOO_DEEP);
    *out = tv_str_copy(R->a, b.p ? b.p : "", b.n);
    tpl_buf_free(&b);
    return out->k == TV_STR ? 0 : rx_oom(R, at);
}

int tpl_getattr(rctx *R, const tn *at, tv obj, const char *name, tv *out) {
    if (obj.k == TV_UNDEF) return undefined_error(R, at, obj);
    if (obj.k == TV_DICT || obj.k == TV_NS) {
        tv *v = tv_dict_gets(obj.d, name);
        if (v) return *out = *v, 0;
    }
    *out = tv_undef(obj.k == TV_NONE ? undef_msg(R, "'None' has no attribute '%s'%s", name, "")
                                     : undef_msg(R, "'%s object' has no attribute '%s'", tv_type_name(obj), name));
    return 0;
}

/* The end of the piece of a string that starts at i: the byte at i with the
 * continuation bytes after it (so stray continuation bytes at the start,
 * not UTF-8 but possible in a template's text, make one piece). */
static size_t piece_end(const char *p, size_t n, size_t i) {
    size_t j = i + 1;
    while (j < n && ((unsigned char)p[j] & 0xC0) == 0x80) j++;
    return j;
}

int tpl_iterate(rctx *R, const tn *at, tv v, tv_list **items) {
    static tv_list empty = {0, 0, NULL};
    tv l;
    switch (v.k) {
    case TV_UNDEF: *items = &empty; return 0;
    case TV_LIST: *items = v.l; return 0;
    case TV_DICT:
        l = tv_list_new(R->a, v.d->n, 0);
        if (l.k != TV_LIST) return rx_oom(R, at);
        tpl_copy(l.l->v, v.d->key, v.d->n * sizeof(tv));
        *items = l.l;
        return 0;
    case TV_STR: {
        size_t n = 0, k = 0;
        for (size_t i = 0; i < v.s.n; i = piece_end(v.s.p, v.s.n, i)) n++;
        l = tv_list_new(R->a, n, 0);
        if (l.k != TV_LIST) return rx_oom(R, at);
        for (size_t i = 0, j; i < v.s.n; i = j) {
            j = piece_end(v.s.p, v.s.n, i);
            l.l->v[k++] = tv_strn(v.s.p + i, j - i);
        }
        *items = l.l;
        return 0;
    }
    default: return rx_fail(R, at, "'%s' object is not iterable", tv_type_name(v));
    }
}

static tv lookup(rctx *R, const char *name) {
    for (rscope *s = R->top; s; s = s->parent) {
        tv *v = tv_dict_gets(s->vars, name);
        if (v) return *v;
    }
    static const char *const fns[] = {"", "range", "namespace", "dict", "raise_exception", "strftime_now", NULL};
    for (int i = 1; fns[i]; i++)
        if (!strcmp(name, fns[i])) return (tv){.k = TV_FUNC, .i = i};
    return tv_undef(undef_msg(R, "'%s' is undefined%s", name, ""));
}

static int assign(rctx *R, const tn *at, const char *name, tv v) {
    tv key = tv_cstr(name);
    return tv_dict_set(R->a, R->top->vars, key, v) ? rx_oom(R, at) : 0;
}

static int ev(rctx *R, const tn *n, tv *out);
static int run(rctx *R, tn *const *body, int nbody);

/* Evaluates a node's call arguments into g (arena arrays). */
static int eval_args(rctx *R, const tn *n, rargs *g) {
    memset(g, 0, sizeof *g);
    g->pos = tpl_alloc(R->a, (size_t)(n->nargs + 1) * sizeof(tv));
    g->kw = tpl_alloc(R->a, (size_t)(n->nkw + 1) * sizeof(tv));
    if (!g->pos || !g->kw) return rx_oom(R, n);
    for (int i = 0; i < n->nargs; i++)
        if (ev(R, n->args[i], &g->pos[i])) return -1;
    for (int i = 0; i < n->nkw; i++)
        if (ev(R, n->kwargs[i], &g->kw[i])) return -1;
    g->npos = n->nargs, g->kwn = n->kwnames, g->nkw = n->nkw;
    return 0;
}

/* Runs body with output captured into a new string. */
static int capture(rctx *R, const tn *at, tn *const *body, int nbody, tv *out) {
    tpl_buf b = {.limit = R->max_output}, *saved = R->out;
    R->out = &b;
    int rc = run(R, body, nbody);
    R->out = saved;
    if (rc >= 0) {
        *out = tv_str_copy(R->a, b.p ? b.p : "", b.n);
        if (out->k != TV_STR) rc = rx_oom(R, at);
    }
    tpl_buf_free(&b);
    return rc < 0 ? -1 : 0;
}

static int call_macro(rctx *R, const tn *at, const tn *m, const rargs *g, tv *out) {
    int np = m->nnames - 1;
    if (g->npos > np) return rx_fail(R, at, "macro '%s' takes no more than %d argument(s)", m->names[0], np);
    tv d = tv_dict_new(R->a, (size_t)np + 2);
    if (d.k != TV_DICT) return rx_oom(R, at);
    rscope sc = {R->top, d.d}, *saved = R->top;
    while (sc.parent && sc.parent->parent) sc.parent = sc.parent->parent; /* the template's top scope */
    for (int k = 0; k < g->nkw; k++) {
        int ok = 0;
        for (int i = 0; i < np; i++) ok |= !strcmp(m->names[i + 1], g->kwn[k]);
        if (!ok) return rx_fail(R, at, "macro '%s' has no parameter '%s'", m->names[0], g->kwn[k]);
    }
    R->top = &sc;
    for (int i = 0; i < np; i++) {
        tv *v = rargs_get(g, i, m->names[i + 1]), dv;
        if (!v && m->args[i]) {
            if (ev(R, m->args[i], &dv)) return R->top = saved, -1;
            v = &dv;
        }
        if (assign(R, at, m->names[i + 1], v ? *v : tv_undef(undef_msg(R, "'%s' is undefined%s", m->names[i + 1], ""))))
            return R->top = saved, -1;
    }
    int rc = capture(R, at, m->body, m->nbody, out);
    R->top = saved;
    return rc;
}

static int call_builtin(rctx *R, const tn *at, int fn, const rargs *g, tv *out) {
    tv *a0 = rargs_get(g, 0, NULL);
    switch (fn) {
    case FN_RAISE: {
        tv s = tv_cstr("");
        if (a0 && tpl_to_str(R, at, *a0, &s)) return -1;
        kvlm_error_set(R->err, KVLM_ERR_ARG, "%.*s", (int)s.s.n, s.s.p);
        R->raised = 1;
        return -1;
    }
    case FN_STRFTIME: {
        if (!a0 || a0->k != TV_STR) return rx_fail(R, at, "strftime_now() takes a format string");
        char fmt[256], buf[512];
        snprintf(fmt, sizeof fmt, "%.*s", (int)a0->s.n, a0->s.p);
        time_t t = R->now >= 0 ? (time_t)R->now : time(NULL);
        struct tm tm;
        if (R->now >= 0) gmtime_r(&t, &tm);
        else localtime_r(&t, &tm);
        size_t n = strftime(buf, sizeof buf, fmt, &tm);
        *out = tv_str_copy(R->a, buf, n);
        return out->k == TV_STR ? 0 : rx_oom(R, at);
    }
    case FN_NAMESPACE:
    case FN_DICT: {
        tv d = tv_dict_new(R->a, (size_t)g->nkw + 2);
        if (d.k != TV_DICT) return rx_oom(R, at);
        if (a0 && a0->k == TV_DICT)
            for (size_t i = 0; i < a0->d->n; i++)
                if (tv_dict_set(R->a, d.d, a0->d->key[i], a0->d->val[i])) return rx_oom(R, at);
        for (int k = 0; k < g->nkw; k++)
            if (tv_dict_set(R->a, d.d, tv_cstr(g->kwn[k]), g->kw[k])) return rx_oom(R, at);
        if (fn == FN_NAMESPACE) d.k = TV_NS;
        *out = d;
        return 0;
    }
    case FN_RANGE: {
        long long v[3] = {0, 0, 1};
        if (g->npos < 1 || g->npos > 3) return rx_fail(R, at, "range() takes 1 to 3 integers");
        for (int i = 0; i < g->npos; i++) {
            if (g->pos[i].k != TV_INT) return rx_fail(R, at, "range() takes integers");
            v[g->npos == 1 ? 1 : i] = g->pos[i].i;
        }
        if (v[2] == 0) return rx_fail(R, at, "range() arg 3 must not be zero");
        __int128 span = v[2] > 0 ? (__int128)v[1] - v[0] : (__int128)v[0] - v[1], st = v[2] > 0 ? v[2] : -(__int128)v[2];
        __int128 n128 = span <= 0 ? 0 : (span + st - 1) / st;
        if (n128 > R->max_iterations) return rx_fail(R, at, "range() of more items than the loop limit");
        long long n = (long long)n128;
        tv l = tv_list_new(R->a, (size_t)n, 0);
        if (l.k != TV_LIST) return rx_oom(R, at);
        for (long long i = 0; i < n; i++) l.l->v[i] = tv_int(v[0] + i * v[2]);
        *out = l;
        return 0;
    }
    }
    return rx_fail(R, at, "unknown function");
}

static int call(rctx *R, const tn *n, tv *out) {
    rargs g;
    if (n->a->kind == TN_ATTR) {
        tv obj;
        int found = 0;
        if (ev(R, n->a->a, &obj)) return -1;
        if (obj.k == TV_UNDEF) return undefined_error(R, n, obj);
        if (eval_args(R, n, &g) || tpl_method(R, n, obj, n->a->names[0], &g, out, &found)) return -1;
        if (found) return 0;
        tv f;
        if (tpl_getattr(R, n, obj, n->a->names[0], &f)) return -1;
        if (f.k == TV_MACRO) return call_macro(R, n, f.macro, &g, out);
        if (f.k == TV_FUNC) return call_builtin(R, n, (int)f.i, &g, out);
        return rx_fail(R, n, "'%s' object has no method '%s'", tv_type_name(obj), n->a->names[0]);
    }
    tv f;
    if (ev(R, n->a, &f)) return -1;
    if (f.k == TV_UNDEF) return undefined_error(R, n, f);
    if (eval_args(R, n, &g)) return -1;
    if (f.k == TV_MACRO) return call_macro(R, n, f.macro, &g, out);
    if (f.k == TV_FUNC) return call_builtin(R, n, (int)f.i, &g, out);
    return rx_fail(R, n, "'%s' object is not callable", tv_type_name(f));
}

static long long slice_at(long long i, long long len) { return i < 0 ? (i + len < 0 ? 0 : i + len) : i; }

/* How many of lo, lo + step, ... come before hi (step > 0) or after it
 * (step < 0); computed by division so a step near LLONG_MAX cannot overflow. */
static size_t slice_count(long long lo, long long hi, long long step) {
    if (step > 0) return lo < hi ? (size_t)((unsigned long long)(hi - lo - 1) / (unsigned long long)step) + 1 : 0;
    return lo > hi ? (size_t)((unsigned long long)(lo - hi - 1) / (0ULL - (unsigned long long)step)) + 1 : 0;
}

static int slice(rctx *R, const tn *n, tv obj, tv *out) {
    long long v[3];
    int given[3];
    for (int i = 0; i < 3; i++) {
        tv x = tv_none();
        if (n->args[i] && ev(R, n->args[i], &x)) return -1;
        given[i] = x.k != TV_NONE;
        if (given[i] && x.k != TV_INT && x.k != TV_BOOL) return rx_fail(R, n, "slice indices must be integers");
        v[i] = x.k == TV_INT ? x.i : x.b;
    }
    long long step = given[2] ? v[2] : 1;
    if (step == 0) return rx_fail(R, n, "slice step cannot be zero");
    tv_list *src;
    if (obj.k == TV_UNDEF) return undefined_error(R, n, obj);
    if (obj.k != TV_LIST && obj.k != TV_STR) return rx_fail(R, n, "'%s' object is not subscriptable", tv_type_name(obj));
    if (tpl_iterate(R, n, obj, &src)) return -1;
    long long len = (long long)src->n, lo, hi;
    if (step > 0) {
        lo = given[0] ? slice_at(v[0], len) : 0;
        hi = given[1] ? slice_at(v[1], len) : len;
        if (lo > len) lo = len;
        if (hi > len) hi = len;
    } else {
        lo = given[0] ? (v[0] < 0 ? v[0] + len : (v[0] >= len ? len - 1 : v[0])) : len - 1;
        hi = given[1] ? (v[1] < 0 ? (v[1] + len < 0 ? -1 : v[1] + len) : v[1]) : -1;
    }
    size_t cnt = slice_count(lo, hi, step);
    tv l = tv_list_new(R->a, cnt, 0);
    if (l.k != TV_LIST) return rx_oom(R, n);
    /* k * step stays inside [lo, hi) because k < cnt: no index past the range is formed. */
    for (size_t k = 0; k < cnt; k++) l.l->v[k] = src->v[lo + (long long)k * step];
    if (obj.k == TV_LIST) return *out = l, 0;
    tpl_buf b = {0};
    for (size_t i = 0; i < cnt; i++) tpl_buf_add(&b, l.l->v[i].s.p, l.l->v[i].s.n);
    *out = tv_str_copy(R->a, b.p ? b.p : "", b.n);
    tpl_buf_free(&b);
    return out->k == TV_STR ? 0 : rx_oom(R, n);
}

static int item(rctx *R, const tn *n, tv obj, tv key, tv *out) {
    if (obj.k == TV_UNDEF) return undefined_error(R, n, obj);
    if (obj.k == TV_DICT || obj.k == TV_NS) {
        tv *v = tv_dict_get(obj.d, key);
        if (v) return *out = *v, 0;
        if (key.k == TV_STR) {
            char k[200];
            snprintf(k, sizeof k, "%.*s", (int)(key.s.n > 190 ? 190 : key.s.n), key.s.p);
            return tpl_getattr(R, n, obj, k, out);
        }
        *out = tv_undef(undef_msg(R, "'%s object' has no attribute '%s'", tv_type_name(obj), "?"));
        return 0;
    }
    if ((obj.k == TV_LIST || obj.k == TV_STR) && (key.k == TV_INT || key.k == TV_BOOL)) {
        tv_list *items;
        if (tpl_iterate(R, n, obj, &items)) return -1;
        long long i = key.k == TV_INT ? key.i : key.b;
        if (i < 0) i += (long long)items->n;
        if (i >= 0 && i < (long long)items->n) return *out = items->v[i], 0;
        *out = tv_undef(undef_msg(R, "'%s object' has no element %s", tv_type_name(obj), "at that index"));
        return 0;
    }
    if (key.k == TV_STR) {
        char k[200];
        snprintf(k, sizeof k, "%.*s", (int)(key.s.n > 190 ? 190 : key.s.n), key.s.p);
        return tpl_getattr(R, n, obj, k, out);
    }
    *out = tv_undef(undef_msg(R, "'%s object' has no such item%s", tv_type_name(obj), ""));
    return 0;
}

/* markupsafe.escape of a string in place: & < > ' " to entities. */
static int escape(rctx *R, const tn *at, tv *s) {
    tpl_buf b = {0};
    for (size_t i = 0; i < s->s.n; i++) {
        char c = s->s.p[i];
        const char *e = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '\'' ? "&#39;" : c == '"' ? "&#34;" : NULL;
        if (e) tpl_buf_adds(&b, e);
        else tpl_buf_addc(&b, c);
    }
    *s = tv_str_copy(R->a, b.p ? b.p : "", b.n);
    tpl_buf_free(&b);
    return s->k == TV_STR ? 0 : rx_oom(R, at);
}

static int is_num(tv v) { return v.k == TV_INT || v.k == TV_FLOAT || v.k == TV_BOOL; }
static double fnum(tv v) { return v.k == TV_FLOAT ? v.f : v.k == TV_INT ? (double)v.i : v.b; }

static int arith(rctx *R, const tn *n, tv a, tv b, tv *out) {
    char op = n->op;
    if (a.k == TV_UNDEF || b.k == TV_UNDEF) return undefined_error(R, n, a.k == TV_UNDEF ? a : b);
    if (op == '+' && a.k == TV_STR && b.k == TV_STR) {
        /* markupsafe: Markup + str escapes the str (and str + Markup) */
        if (a.safe != b.safe && escape(R, n, a.safe ? &b : &a)) return -1;
        char *p = tpl_alloc(R->a, a.s.n + b.s.n + 1);
        if (!p) return rx_oom(R, n);
        tpl_copy(p, a.s.p, a.s.n), tpl_copy(p + a.s.n, b.s.p, b.s.n);
        *out = tv_strn(p, a.s.n + b.s.n);
        out->safe = a.safe || b.safe;
        return 0;
    }
    if (op == '+' && a.k == TV_LIST && b.k == TV_LIST) {
        tv l = tv_list_new(R->a, a.l->n + b.l->n, 0);
        if (l.k != TV_LIST) return rx_oom(R, n);
        tpl_copy(l.l->v, a.l->v, a.l->n * sizeof(tv));
        tpl_copy(l.l->v + a.l->n, b.l->v, b.l->n * sizeof(tv));
        return *out = l, 0;
    }
    if (op == '*' && (a.k == TV_STR || a.k == TV_LIST) && b.k == TV_INT) {
        long long k = b.i < 0 ? 0 : b.i;
        tv_list *items;
        if (tpl_iterate(R, n, a, &items)) return -1;
        size_t unit = a.k == TV_STR ? a.s.n : items->n;
        if (unit && (unsigned long long)k > R->max_output / unit) return rx_fail(R, n, "repetition too large");
        if (a.k == TV_STR) {
            tpl_buf bb = {0};
            for (long long i = 0; i < k; i++) tpl_buf_add(&bb, a.s.p, a.s.n);
            *out = tv_str_copy(R->a, bb.p ? bb.p : "", bb.n);
            tpl_buf_free(&bb);
            return out->k == TV_STR ? 0 : rx_oom(R, n);
        }
        tv l = tv_list_new(R->a, items->n * (size_t)k, 0);
        if (l.k != TV_LIST) return rx_oom(R, n);
        for (long long i = 0; i < k; i++) tpl_copy(l.l->v + (size_t)i * items->n, items->v, items->n * sizeof(tv));
        return *out = l, 0;
    }
    if (!is_num(a) || !is_num(b))
        return rx_fail(R, n, "unsupported operand type(s) for '%c': '%s' and '%s'", op == 'F' ? '/' : op,
                       tv_type_name(a), tv_type_name(b));
    int ints = a.k != TV_FLOAT && b.k != TV_FLOAT;
    long long x = a.k == TV_INT ? a.i : a.b, y = b.k == TV_INT ? b.i : b.b;
    double fx = fnum(a), fy = fnum(b);
    if ((op == '/' || op == 'F' || op == '%') && fy == 0) return rx_fail(R, n, "division by zero");
    long long r = 0;
    if (ints && ((op == '+' && __builtin_add_overflow(x, y, &r)) || (op == '-' && __builtin_sub_overflow(x, y, &r)) ||
                 (op == '*' && __builtin_mul_overflow(x, y, &r)) || ((op == 'F' || op == '%') && y == -1 && x == LLONG_MIN)))
        return rx_fail(R, n, "integer overflow in '%c' (kvlm's integers are 64-bit)", op == 'F' ? '/' : op);
    switch (op) {
    case '+':
    case '-':
    case '*': *out = ints ? tv_int(r) : tv_float(op == '+' ? fx + fy : op == '-' ? fx - fy : fx * fy); return 0;
    case '/': *out = tv_float(fx / fy); return 0;
    case 'F':
        if (ints) *out = tv_int(x / y - ((x % y != 0) && ((x < 0) != (y < 0))));
        else *out = tv_float(__builtin_floor(fx / fy));
        return 0;
    case '%':
        if (ints) {
            long long m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            *out = tv_int(m);
        } else {
            double m = __builtin_fmod(fx, fy);
            if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
            *out = tv_float(m);
        }
        return 0;
    case 'P': {
        if (ints && y >= 0) {
            long long p = 1;
            for (long long i = 0; i < y && p != 0 && !(p == 1 && (x == 1 || x == 0) && i > 0); i++)
                if (__builtin_mul_overflow(p, x, &p)) return rx_fail(R, n, "integer overflow in '**'");
            *out = tv_int(y == 0 ? 1 : x == 0 ? 0 : x == 1 ? 1 : p);
        } else *out = tv_float(__builtin_pow(fx, fy));
        return 0;
    }
    }
    return rx_fail(R, n, "unknown operator");
}

static int contains(rctx *R, const tn *n, tv needle, tv hay, int *res) {
    if (hay.k == TV_STR) {
        if (needle.k != TV_STR) return rx_fail(R, n, "'in <string>' requires string as left operand");
        *res = needle.s.n == 0 || (needle.s.n <= hay.s.n && memmem(hay.s.p, hay.s.n, needle.s.p, needle.s.n));
        return 0;
    }
    if (hay.k == TV_DICT || hay.k == TV_NS) return *res = tv_dict_get(hay.d, needle) != NULL, 0;
    if (hay.k == TV_LIST || hay.k == TV_UNDEF) {
        tv_list *l;
        if (tpl_iterate(R, n, hay, &l)) return -1;
        *res = 0;
        for (size_t i = 0; i < l->n && !*res; i++) *res = tv_equal(l->v[i], needle);
        return 0;
    }
    return rx_fail(R, n, "argument of type '%s' is not iterable", tv_type_name(hay));
}

static int binary(rctx *R, const tn *n, tv *out) {
    tv a, b;
    if (ev(R, n->a, &a)) return -1;
    if (n->op == '&' || n->op == '|') {
        if (tv_truthy(a) == (n->op == '|')) return *out = a, 0;
        return ev(R, n->b, out);
    }
    if (ev(R, n->b, &b)) return -1;
    int c = 0, r = 0;
    switch (n->op) {
    case '~': {
        tv sa, sb;
        if (tpl_to_str(R, n, a, &sa) || tpl_to_str(R, n, b, &sb)) return -1;
        char *p = tpl_alloc(R->a, sa.s.n + sb.s.n + 1);
        if (!p) return rx_oom(R, n);
        tpl_copy(p, sa.s.p, sa.s.n), tpl_copy(p + sa.s.n, sb.s.p, sb.s.n);
        return *out = tv_strn(p, sa.s.n + sb.s.n), 0;
    }
    case '=': return *out = tv_bool(tv_equal(a, b)), 0;
    case 'N': return *out = tv_bool(!tv_equal(a, b)), 0;
    case 'I':
    case 'J':
        if (contains(R, n, a, b, &r)) return -1;
        return *out = tv_bool(n->op == 'I' ? r : !r), 0;
    case '<': case 'L': case '>': case 'G':
        if (tv_compare(a, b, &c)) {
            static const char *const sym[] = {"<", "<=", ">", ">="};
            int k = n->op == '<' ? 0 : n->op == 'L' ? 1 : n->op == '>' ? 2 : 3;
            return rx_fail(R, n, "'%s' not supported between instances of '%s' and '%s'", sym[k], tv_type_name(a),
                           tv_type_name(b));
        }
        *out = tv_bool(n->op == '<' ? c < 0 : n->op == 'L' ? c <= 0 : n->op == '>' ? c > 0 : c >= 0);
        return 0;
    default: return arith(R, n, a, b, out);
    }
}

static int ev_in(rctx *R, const tn *n, tv *out) {
    tv a, b;
    switch (n->kind) {
    case TN_LIT: return *out = n->val, 0;
    case TN_NAME: return *out = lookup(R, n->names[0]), 0;
    case TN_LIST:
    case TN_TUPLE: {
        tv l = tv_list_new(R->a, (size_t)n->nargs, n->kind == TN_TUPLE);
        if (l.k != TV_LIST) return rx_oom(R, n);
        for (int i = 0; i < n->nargs; i++)
            if (ev(R, n->args[i], &l.l->v[i])) return -1;
        return *out = l, 0;
    }
    case TN_DICT: {
        tv d = tv_dict_new(R->a, (size_t)n->nargs / 2 + 1);
        if (d.k != TV_DICT) return rx_oom(R, n);
        for (int i = 0; i + 1 < n->nargs; i += 2) {
            if (ev(R, n->args[i], &a) || ev(R, n->args[i + 1], &b)) return -1;
            if (tv_dict_set(R->a, d.d, a, b)) return rx_oom(R, n);
        }
        return *out = d, 0;
    }
    case TN_ATTR:
        if (ev(R, n->a, &a)) return -1;
        return tpl_getattr(R, n, a, n->names[0], out);
    case TN_ITEM:
        if (ev(R, n->a, &a) || ev(R, n->b, &b)) return -1;
        return item(R, n, a, b, out);
    case TN_SLICE:
        if (ev(R, n->a, &a)) return -1;
        return slice(R, n, a, out);
    case TN_CALL: return call(R, n, out);
    case TN_FILTER: {
        rargs g;
        if (ev(R, n->a, &a) || eval_args(R, n, &g)) return -1;
        return tpl_filter(R, n, n->names[0], a, &g, out);
    }
    case TN_TEST: {
        rargs g;
        int r;
        if (ev(R, n->a, &a) || eval_args(R, n, &g) || tpl_test(R, n, n->names[0], a, &g, &r)) return -1;
        return *out = tv_bool(n->op ? !r : r), 0;
    }
    case TN_UNARY:
        if (ev(R, n->a, &a)) return -1;
        if (n->op == '!') return *out = tv_bool(!tv_truthy(a)), 0;
        if (a.k == TV_UNDEF) return undefined_error(R, n, a);
        if (!is_num(a)) return rx_fail(R, n, "bad operand type for unary %c: '%s'", n->op, tv_type_name(a));
        if (n->op == '+') return *out = a.k == TV_BOOL ? tv_int(a.b) : a, 0;
        if (a.k == TV_INT && a.i == LLONG_MIN) return rx_fail(R, n, "integer overflow in unary -");
        return *out = a.k == TV_FLOAT ? tv_float(-a.f) : tv_int(-(a.k == TV_INT ? a.i : a.b)), 0;
    case TN_BINARY: return binary(R, n, out);
    case TN_COND:
        if (ev(R, n->a, &a)) return -1;
        if (tv_truthy(a)) return ev(R, n->b, out);
        if (n->c) return ev(R, n->c, out);
        return *out = tv_undef("the conditional expression had no else"), 0;
    }
    return rx_fail(R, n, "not an expression");
}

static int ev(rctx *R, const tn *n, tv *out) {
    if (++R->depth > R->max_depth) return rx_fail(R, n, "nesting deeper than %d (macro recursion?)", R->max_depth);
    int rc = ev_in(R, n, out);
    R->depth--;
    if (!rc && R->a->exhausted) return rx_oom(R, n);
    return rc;
}

static int emit(rctx *R, const tn *n, const char *p, size_t len) {
    tpl_buf_add(R->out, p, len);
    if (R->out->over)
        return rx_fail(R, n, "rendered text exceeds the %zu bytes allowed (or memory ran out)", R->max_output);
    return 0;
}

static int run_for(rctx *R, const tn *n) {
    tv it;
    tv_list *items;
    if (ev(R, n->a, &it) || tpl_iterate(R, n, it, &items)) return -1;
    tv d = tv_dict_new(R->a, 8), loop = tv_dict_new(R->a, 12);
    if (d.k != TV_DICT || loop.k != TV_DICT) return rx_oom(R, n);
    rscope sc = {R->top, d.d}, *saved = R->top;
    R->top = &sc;
    int rc = 0;
    if (n->b) { /* `for x in y if cond`: filter first, as jinja2 does */
        tv l = tv_list_new(R->a, items->n, 0);
        if (l.k != TV_LIST) return R->top = saved, rx_oom(R, n);
        size_t k = 0;
        for (size_t i = 0; i < items->n && !rc; i++) {
            tv c;
            d.d->n = 0;
            if (n->nnames == 1) rc = assign(R, n, n->names[0], items->v[i]);
            else if (items->v[i].k == TV_LIST && (int)items->v[i].l->n == n->nnames)
                for (int j = 0; j < n->nnames && !rc; j++) rc = assign(R, n, n->names[j], items->v[i].l->v[j]);
            if (!rc && !(rc = ev(R, n->b, &c)) && tv_truthy(c)) l.l->v[k++] = items->v[i];
        }
        l.l->n = k;
        items = l.l;
    }
    size_t len = items->n;
    for (size_t i = 0; i < len && !rc; i++) {
        if (++R->iterations > R->max_iterations) {
            rc = rx_fail(R, n, "more than %ld loop iterations", R->max_iterations);
            break;
        }
        d.d->n = 0;
        loop.d->n = 0;
        tv x = items->v[i];
        if (n->nnames == 1) rc = assign(R, n, n->names[0], x);
        else {
            if (x.k != TV_LIST || (int)x.l->n != n->nnames) {
                rc = rx_fail(R, n, "cannot unpack a '%s' into %d names", tv_type_name(x), n->nnames);
                break;
            }
            for (int j = 0; j < n->nnames && !rc; j++) rc = assign(R, n, n->names[j], x.l->v[j]);
        }
        struct {
            const char *k;
            tv v;
        } f[] = {{"index", tv_int((long long)i + 1)},  {"index0", tv_int((long long)i)},
                 {"revindex", tv_int((long long)(len - i))}, {"revindex0", tv_int((long long)(len - i - 1))},
                 {"first", tv_bool(i == 0)},           {"last", tv_bool(i + 1 == len)},
                 {"length", tv_int((long long)len)},   {"depth", tv_int(1)},
                 {"depth0", tv_int(0)},                {"previtem", i ? items->v[i - 1] : tv_undef("no previtem")},
                 {"nextitem", i + 1 < len ? items->v[i + 1] : tv_undef("no nextitem")}};
        for (size_t k = 0; k < sizeof f / sizeof f[0] && !rc; k++)
            if (tv_dict_set(R->a, loop.d, tv_cstr(f[k].k), f[k].v)) rc = rx_oom(R, n);
        if (!rc) rc = assign(R, n, "loop", loop);
        if (rc) break;
        rc = run(R, n->body, n->nbody);
        if (rc == RUN_BREAK) {
            rc = 0;
            break;
        }
        if (rc == RUN_CONTINUE) rc = 0;
    }
    R->top = saved;
    if (rc < 0) return -1;
    if (len == 0 && n->norelse) return run(R, n->orelse, n->norelse);
    return 0;
}

/* Applies the filters of a block's chain (first: the outermost, linked
 * through ->a) to *v, innermost first, as `{% set x | f | g %}` and
 * `{% filter f | g %}` do. */
static int filter_chain(rctx *R, const tn *first, tv *v) {
    const tn *chain[32];
    int k = 0;
    for (const tn *f = first; f && k < 32; f = f->a) chain[k++] = f;
    while (k--) {
        rargs g;
        if (eval_args(R, chain[k], &g) || tpl_filter(R, chain[k], chain[k]->names[0], *v, &g, v)) return -1;
    }
    return 0;
}

static int run_set(rctx *R, const tn *n) {
    tv v;
    if (n->kind == TN_SETBLOCK) {
        if (capture(R, n, n->body, n->nbody, &v)) return -1;
        if (filter_chain(R, n->a, &v)) return -1;
        return assign(R, n, n->names[0], v);
    }
    if (ev(R, n->a, &v)) return -1;
    if (n->sub == 1) {
        tv ns = lookup(R, n->names[0]);
        if (ns.k != TV_NS) return rx_fail(R, n, "cannot assign attribute on non-namespace object '%s'", n->names[0]);
        return tv_dict_set(R->a, ns.d, tv_cstr(n->names[1]), v) ? rx_oom(R, n) : 0;
    }
    if (n->sub == 2) {
        if (v.k != TV_LIST || (int)v.l->n != n->nnames)
            return rx_fail(R, n, "cannot unpack into %d names", n->nnames);
        for (int i = 0; i < n->nnames; i++)
            if (assign(R, n, n->names[i], v.l->v[i])) return -1;
        return 0;
    }
    return assign(R, n, n->names[0], v);
}

static int run(rctx *R, tn *const *body, int nbody) {
    for (int i = 0; i < nbody; i++) {
        const tn *n = body[i];
        int rc = 0;
        tv v;
        switch (n->kind) {
        case TN_TEXT: rc = emit(R, n, n->val.s.p, n->val.s.n); break;
        case TN_OUT:
            if (ev(R, n->a, &v)) return -1;
            if (v.k == TV_STR) rc = emit(R, n, v.s.p, v.s.n);
            else {
                tpl_buf b = {0};
                if (tv_str_of(&b, v)) return tpl_buf_free(&b), rx_fail(R, n, "%s", TV_TOO_DEEP);
                rc = emit(R, n, b.p ? b.p : "", b.n);
                tpl_buf_free(&b);
            }
            break;
        case TN_IF:
            if (ev(R, n->a, &v)) return -1;
            rc = tv_truthy(v) ? run(R, n->body, n->nbody) : run(R, n->orelse, n->norelse);
            break;
        case TN_FOR: rc = run_for(R, n); break;
        case TN_SET:
        case TN_SETBLOCK: rc = run_set(R, n); break;
        case TN_MACRO: rc = assign(R, n, n->names[0], (tv){.k = TV_MACRO, .macro = n}); break;
        case TN_FILTERBLOCK: {
            if (capture(R, n, n->body, n->nbody, &v) || filter_chain(R, n->a, &v)) return -1;
            if (tpl_to_str(R, n, v, &v)) return -1;
            rc = emit(R, n, v.s.p, v.s.n);
            break;
        }
        case TN_BREAK: return RUN_BREAK;
        case TN_CONTINUE: return RUN_CONTINUE;
        default: return rx_fail(R, n, "not a statement");
        }
        if (rc) return rc;
    }
    return 0;
}

/* ------------------------------------------------------------ rendering */

static int from_json(rctx *R, const json_t *j, tv *out, int depth) {
    if (depth > 100) return rx_fail(R, NULL, "variables nested deeper than 100");
    switch (json_typeof(j)) {
    case JSON_NULL: *out = tv_none(); return 0;
    case JSON_TRUE: *out = tv_bool(1); return 0;
    case JSON_FALSE: *out = tv_bool(0); return 0;
    case JSON_INTEGER: *out = tv_int(json_integer_value(j)); return 0;
    case JSON_REAL: *out = tv_float(json_real_value(j)); return 0;
    case JSON_STRING: *out = tv_strn(json_string_value(j), json_string_length(j)); return 0;
    case JSON_ARRAY: {
        tv l = tv_list_new(R->a, json_array_size(j), 0);
        if (l.k != TV_LIST) return rx_oom(R, NULL);
        for (size_t i = 0; i < l.l->n; i++)
            if (from_json(R, json_array_get(j, i), &l.l->v[i], depth + 1)) return -1;
        return *out = l, 0;
    }
    case JSON_OBJECT: {
        tv d = tv_dict_new(R->a, json_object_size(j) + 1);
        if (d.k != TV_DICT) return rx_oom(R, NULL);
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)j, k, v) {
            tv x;
            if (from_json(R, v, &x, depth + 1) || tv_dict_set(R->a, d.d, tv_cstr(k), x)) return -1;
        }
        return *out = d, 0;
    }
    }
    return rx_fail(R, NULL, "unknown JSON type");
}

int tpl_render(const tpl_template *t, const json_t *vars, const tpl_render_opts *o, tpl_result *r) {
    memset(r, 0, sizeof *r);
    tpl_limits lim = o && o->limits ? *o->limits : (tpl_limits){0};
    if (!lim.max_output) lim.max_output = 4u << 20;
    if (!lim.max_memory) lim.max_memory = 64u << 20;
    if (!lim.max_iterations) lim.max_iterations = 1000000;
    if (!lim.max_depth) lim.max_depth = 200;
    tpl_arena a = {.limit = lim.max_memory};
    tpl_buf out = {.limit = lim.max_output};
    rctx R = {.a = &a, .out = &out, .max_output = lim.max_output, .max_iterations = lim.max_iterations,
              .max_depth = lim.max_depth, .now = o ? o->now : -1, .err = &r->err};
    tv top = tv_dict_new(&a, 16);
    rscope sc = {NULL, top.d};
    R.top = &sc;
    int rc = top.k == TV_DICT ? 0 : rx_oom(&R, NULL);
    if (!rc && vars && !json_is_object(vars)) rc = rx_fail(&R, NULL, "variables must be a JSON object");
    if (!rc && vars) {
        tv v;
        rc = from_json(&R, vars, &v, 0);
        if (!rc) sc.vars = v.d;
    }
    if (!rc) rc = run(&R, t->body, t->nbody) < 0 ? -1 : 0;
    tpl_arena_free(&a);
    if (rc) {
        tpl_buf_free(&out);
        r->raised = R.raised;
        return -1;
    }
    r->text = out.p ? out.p : calloc(1, 1);
    r->len = out.n;
    if (!r->text) return kvlm_error_set(&r->err, KVLM_ERR_NOMEM, "template: out of memory");
    return 0;
}

void tpl_result_free(tpl_result *r) {
    free(r->text);
    r->text = NULL;
}
