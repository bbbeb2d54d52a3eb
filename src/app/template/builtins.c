/*
 * Built-in filters, tests and methods of the Jinja interpreter, each with
 * jinja2's (or Python's) behaviour: filters trim, tojson (transformers'
 * json.dumps form), length/count, upper, lower, default/d, join, first,
 * last, items, list, string, replace, capitalize, title, map, select,
 * reject, selectattr, rejectattr, unique, indent, int, float, abs, round,
 * reverse, sort, safe, min, max, sum; tests defined, undefined, none,
 * string, mapping, iterable, sequence, number, integer, float, boolean,
 * true, false, callable, odd, even, divisibleby, eq/equalto/==, ne, lt, le,
 * gt, ge, in, lower, upper; str methods strip, lstrip, rstrip, split,
 * startswith, endswith, upper, lower, title, capitalize, replace, find,
 * count, join, splitlines, format; dict methods get, items, keys, values. Case
 * mapping is ASCII-only (Python maps all of Unicode); see
 * docs/chat-templates.md.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "app/template/eval.h"

#define IS(s) (!strcmp(name, s))

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

static int new_str(rctx *R, const tn *at, tpl_buf *b, tv *out) {
    if (b->over) {
        tpl_buf_free(b);
        return rx_fail(R, at, "string too large");
    }
    *out = tv_str_copy(R->a, b->p ? b->p : "", b->n);
    tpl_buf_free(b);
    return out->k == TV_STR ? 0 : rx_oom(R, at);
}

static int str_arg(rctx *R, const tn *at, tv *v, const char *what, tv *out) {
    if (!v || v->k != TV_STR) return rx_fail(R, at, "%s must be a string", what);
    *out = *v;
    return 0;
}

/* Strips chars (whitespace when none) from the left (1), right (2) or both. */
static tv strip(tv s, tv *chars, int sides) {
    size_t lo = 0, hi = s.s.n;
    const char *set = chars && chars->k == TV_STR ? chars->s.p : NULL;
    size_t nset = set ? chars->s.n : 0;
#define STRIPPED(c) (set ? memchr(set, (c), nset) != NULL : is_ws(c))
    if (sides & 1)
        while (lo < hi && STRIPPED(s.s.p[lo])) lo++;
    if (sides & 2)
        while (hi > lo && STRIPPED(s.s.p[hi - 1])) hi--;
#undef STRIPPED
    return tv_strn(s.s.p + lo, hi - lo);
}

static int case_map(rctx *R, const tn *at, tv s, int mode, tv *out) { /* 0 lower 1 upper 2 capitalize 3 title */
    char *p = tpl_alloc(R->a, s.s.n + 1);
    if (!p) return rx_oom(R, at);
    int word = 0;
    for (size_t i = 0; i < s.s.n; i++) {
        char c = s.s.p[i];
        int alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
        int up = mode == 1 || (mode == 2 && i == 0) || (mode == 3 && alpha && !word);
        if (up && c >= 'a' && c <= 'z') c = (char)(c - 32);
        else if (!up && mode != 1 && c >= 'A' && c <= 'Z') c = (char)(c + 32);
        word = mode == 3 ? alpha || ((unsigned char)c >= 0x80) : 0;
        p[i] = c;
    }
    *out = tv_strn(p, s.s.n);
    return 0;
}

static int replace(rctx *R, const tn *at, tv s, tv old, tv neu, long long count, tv *out) {
    tpl_buf b = {.limit = R->max_output};
    size_t i = 0;
    long long done = 0;
    if (old.s.n == 0) { /* Python inserts between every character */
        for (; i <= s.s.n; i++) {
            if (count < 0 || done < count) tpl_buf_add(&b, neu.s.p, neu.s.n), done++;
            if (i < s.s.n) tpl_buf_addc(&b, s.s.p[i]);
        }
        return new_str(R, at, &b, out);
    }
    while (i < s.s.n) {
        const char *hit = count >= 0 && done >= count ? NULL : memmem(s.s.p + i, s.s.n - i, old.s.p, old.s.n);
        if (!hit) break;
        tpl_buf_add(&b, s.s.p + i, (size_t)(hit - (s.s.p + i)));
        tpl_buf_add(&b, neu.s.p, neu.s.n);
        i = (size_t)(hit - s.s.p) + old.s.n;
        done++;
    }
    tpl_buf_add(&b, s.s.p + i, s.s.n - i);
    return new_str(R, at, &b, out);
}

static int split(rctx *R, const tn *at, tv s, tv *sep, long long maxsplit, tv *out) {
    tv parts[4096];
    size_t n = 0, i = 0;
    if (!sep || sep->k == TV_NONE) {
        while (i < s.s.n) {
            while (i < s.s.n && is_ws(s.s.p[i])) i++;
            if (i >= s.s.n) break;
            size_t j = i;
            if (maxsplit >= 0 && (long long)n >= maxsplit) j = s.s.n;
            else
                while (j < s.s.n && !is_ws(s.s.p[j])) j++;
            if (n == 4096) return rx_fail(R, at, "split() into more than 4096 parts");
            parts[n++] = tv_strn(s.s.p + i, j == s.s.n && maxsplit >= 0 ? (size_t)(j - i) : j - i);
            if (j == s.s.n && maxsplit >= 0 && (long long)n > maxsplit) {
                /* the remainder keeps its trailing whitespace stripped only on the left */
            }
            i = j;
        }
    } else {
        if (sep->k != TV_STR || sep->s.n == 0) return rx_fail(R, at, "split() separator must be a non-empty string");
        for (;;) {
            const char *hit = maxsplit >= 0 && (long long)n >= maxsplit ? NULL
                                                                        : memmem(s.s.p + i, s.s.n - i, sep->s.p, sep->s.n);
            if (n == 4096) return rx_fail(R, at, "split() into more than 4096 parts");
            if (!hit) {
                parts[n++] = tv_strn(s.s.p + i, s.s.n - i);
                break;
            }
            parts[n++] = tv_strn(s.s.p + i, (size_t)(hit - s.s.p) - i);
            i = (size_t)(hit - s.s.p) + sep->s.n;
        }
    }
    tv l = tv_list_new(R->a, n, 0);
    if (l.k != TV_LIST) return rx_oom(R, at);
    tpl_copy(l.l->v, parts, n * sizeof(tv));
    *out = l;
    return 0;
}

static int affix(rctx *R, const tn *at, tv s, tv *arg, int end, tv *out) {
    if (!arg) return rx_fail(R, at, "%s() takes an argument", end ? "endswith" : "startswith");
    tv_list one = {1, 1, arg}, *alts = arg->k == TV_LIST ? arg->l : &one;
    for (size_t i = 0; i < alts->n; i++) {
        tv a = alts->v[i];
        if (a.k != TV_STR) return rx_fail(R, at, "%s() arguments must be strings", end ? "endswith" : "startswith");
        if (a.s.n <= s.s.n && !memcmp(end ? s.s.p + s.s.n - a.s.n : s.s.p, a.s.p, a.s.n)) return *out = tv_bool(1), 0;
    }
    return *out = tv_bool(0), 0;
}

static int join(rctx *R, const tn *at, tv_list *items, tv sep, const char *attr, tv *out) {
    tpl_buf b = {.limit = R->max_output};
    for (size_t i = 0; i < items->n; i++) {
        tv x = items->v[i];
        if (attr && tpl_getattr(R, at, x, attr, &x)) return tpl_buf_free(&b), -1;
        if (i) tpl_buf_add(&b, sep.s.p, sep.s.n);
        if (tv_str_of(&b, x)) return tpl_buf_free(&b), rx_fail(R, at, "%s", TV_TOO_DEEP);
    }
    return new_str(R, at, &b, out);
}

/* Python's str.format for {} {0} {name} and {{ }}; format specs and
 * conversions (":>10", "!r") are not supported. */
static int str_format(rctx *R, const tn *at, tv fmt, const rargs *g, tv *out) {
    tpl_buf b = {.limit = R->max_output};
    int next = 0;
    for (size_t i = 0; i < fmt.s.n; i++) {
        char c = fmt.s.p[i];
        if ((c == '{' || c == '}') && i + 1 < fmt.s.n && fmt.s.p[i + 1] == c) {
            tpl_buf_addc(&b, c), i++;
            continue;
        }
        if (c == '}') return tpl_buf_free(&b), rx_fail(R, at, "format(): single '}' encountered");
        if (c != '{') {
            tpl_buf_addc(&b, c);
            continue;
        }
        size_t j = i + 1;
        while (j < fmt.s.n && fmt.s.p[j] != '}') j++;
        if (j >= fmt.s.n) return tpl_buf_free(&b), rx_fail(R, at, "format(): single '{' encountered");
        char field[64];
        snprintf(field, sizeof field, "%.*s", (int)(j - i - 1 > 60 ? 60 : j - i - 1), fmt.s.p + i + 1);
        if (strpbrk(field, ":![.")) return tpl_buf_free(&b), rx_fail(R, at, "format(): '{%s}' is not supported", field);
        tv *v = NULL;
        int autonum = !field[0], manual = field[0] >= '0' && field[0] <= '9';
        if ((autonum && next < 0) || (manual && next > 0))
            return tpl_buf_free(&b), rx_fail(R, at, "format(): cannot switch between automatic and manual field numbering");
        if (autonum) v = rargs_get(g, next++, NULL);
        else if (manual) v = rargs_get(g, atoi(field), NULL), next = -1;
        else v = rargs_get(g, -1, field);
        if (!v) return tpl_buf_free(&b), rx_fail(R, at, "format(): no argument for '{%s}'", field);
        if (tv_str_of(&b, *v)) return tpl_buf_free(&b), rx_fail(R, at, "%s", TV_TOO_DEEP);
        i = j;
    }
    return new_str(R, at, &b, out);
}

int tpl_method(rctx *R, const tn *at, tv obj, const char *name, const rargs *g, tv *out, int *found) {
    tv *a0 = rargs_get(g, 0, NULL), *a1 = rargs_get(g, 1, NULL), s = {0};
    *found = 1;
    if (obj.k == TV_STR) {
        if (IS("strip") || IS("lstrip") || IS("rstrip"))
            return *out = strip(obj, a0, IS("strip") ? 3 : IS("lstrip") ? 1 : 2), 0;
        if (IS("upper") || IS("lower") || IS("title") || IS("capitalize"))
            return case_map(R, at, obj, IS("lower") ? 0 : IS("upper") ? 1 : IS("capitalize") ? 2 : 3, out);
        if (IS("startswith") || IS("endswith")) return affix(R, at, obj, a0, IS("endswith"), out);
        if (IS("split")) {
            tv *ms = rargs_get(g, 1, "maxsplit");
            return split(R, at, obj, rargs_get(g, 0, "sep"), ms && ms->k == TV_INT ? ms->i : -1, out);
        }
        if (IS("replace")) {
            tv o = {0}, nw = {0};
            if (str_arg(R, at, a0, "replace() old", &o) || str_arg(R, at, a1, "replace() new", &nw)) return -1;
            tv *c = rargs_get(g, 2, "count");
            return replace(R, at, obj, o, nw, c && c->k == TV_INT ? c->i : -1, out);
        }
        if (IS("find") || IS("count")) {
            if (str_arg(R, at, a0, "the argument", &s)) return -1;
            const char *hit = s.s.n ? memmem(obj.s.p, obj.s.n, s.s.p, s.s.n) : obj.s.p;
            if (IS("find")) return *out = tv_int(hit ? (long long)tv_utf8_len(obj.s.p, (size_t)(hit - obj.s.p)) : -1), 0;
            long long c = 0;
            for (size_t i = 0; s.s.n && (hit = memmem(obj.s.p + i, obj.s.n - i, s.s.p, s.s.n)); c++)
                i = (size_t)(hit - obj.s.p) + s.s.n;
            return *out = tv_int(s.s.n ? c : (long long)tv_utf8_len(obj.s.p, obj.s.n) + 1), 0;
        }
        if (IS("join")) {
            tv_list *items;
            if (!a0 || tpl_iterate(R, at, *a0, &items)) return a0 ? -1 : rx_fail(R, at, "join() takes a list");
            return join(R, at, items, obj, NULL, out);
        }
        if (IS("format")) return str_format(R, at, obj, g, out);
        if (IS("splitlines")) {
            tv nl = tv_cstr("\n"), parts;
            if (split(R, at, obj, &nl, -1, &parts)) return -1;
            if (parts.l->n && parts.l->v[parts.l->n - 1].s.n == 0) parts.l->n--;
            return *out = parts, 0;
        }
    } else if (obj.k == TV_DICT) {
        if (IS("get")) {
            if (!a0) return rx_fail(R, at, "get() takes a key");
            tv *v = tv_dict_get(obj.d, *a0);
            return *out = v ? *v : a1 ? *a1 : tv_none(), 0;
        }
        if (IS("items") || IS("keys") || IS("values")) {
            tv l = tv_list_new(R->a, obj.d->n, 0);
            if (l.k != TV_LIST) return rx_oom(R, at);
            for (size_t i = 0; i < obj.d->n; i++) {
                if (IS("keys")) l.l->v[i] = obj.d->key[i];
                else if (IS("values")) l.l->v[i] = obj.d->val[i];
                else {
                    tv p = tv_list_new(R->a, 2, 1);
                    if (p.k != TV_LIST) return rx_oom(R, at);
                    p.l->v[0] = obj.d->key[i], p.l->v[1] = obj.d->val[i];
                    l.l->v[i] = p;
                }
            }
            return *out = l, 0;
        }
        if (IS("update") || IS("pop") || IS("setdefault") || IS("clear") || IS("popitem"))
            return rx_fail(R, at, "access to attribute '%s' of 'dict' object is unsafe.", name);
    } else if (obj.k == TV_LIST) {
        if (IS("append") || IS("extend") || IS("pop") || IS("insert") || IS("remove") || IS("sort") || IS("reverse") ||
            IS("clear"))
            return rx_fail(R, at, "access to attribute '%s' of '%s' object is unsafe.", name, tv_type_name(obj));
        if (IS("index") || IS("count")) {
            if (!a0) return rx_fail(R, at, "%s() takes an argument", name);
            long long c = 0;
            for (size_t i = 0; i < obj.l->n; i++)
                if (tv_equal(obj.l->v[i], *a0)) {
                    if (IS("index")) return *out = tv_int((long long)i), 0;
                    c++;
                }
            if (IS("index")) return rx_fail(R, at, "value is not in list");
            return *out = tv_int(c), 0;
        }
    }
    *found = 0;
    return 0;
}

/* ------------------------------------------------------------------ tests */

int tpl_test(rctx *R, const tn *at, const char *name, tv v, const rargs *g, int *res) {
    tv *a0 = rargs_get(g, 0, NULL);
    int c;
    if (IS("defined")) *res = v.k != TV_UNDEF;
    else if (IS("undefined")) *res = v.k == TV_UNDEF;
    else if (IS("none")) *res = v.k == TV_NONE;
    else if (IS("string")) *res = v.k == TV_STR;
    else if (IS("mapping")) *res = v.k == TV_DICT;
    else if (IS("iterable")) *res = v.k == TV_STR || v.k == TV_LIST || v.k == TV_DICT || v.k == TV_UNDEF;
    else if (IS("sequence")) *res = v.k == TV_STR || v.k == TV_LIST || v.k == TV_DICT || v.k == TV_UNDEF;
    else if (IS("number")) *res = v.k == TV_INT || v.k == TV_FLOAT || v.k == TV_BOOL;
    else if (IS("integer")) *res = v.k == TV_INT;
    else if (IS("float")) *res = v.k == TV_FLOAT;
    else if (IS("boolean")) *res = v.k == TV_BOOL;
    else if (IS("true")) *res = v.k == TV_BOOL && v.b;
    else if (IS("false")) *res = v.k == TV_BOOL && !v.b;
    else if (IS("callable")) *res = v.k == TV_MACRO || v.k == TV_FUNC;
    else if (IS("lower") || IS("upper")) {
        *res = v.k == TV_STR;
        for (size_t i = 0; *res && i < v.s.n; i++)
            if (IS("lower") ? (v.s.p[i] >= 'A' && v.s.p[i] <= 'Z') : (v.s.p[i] >= 'a' && v.s.p[i] <= 'z')) *res = 0;
    } else if (IS("odd") || IS("even") || IS("divisibleby")) {
        long long d = IS("divisibleby") ? (a0 && a0->k == TV_INT ? a0->i : 0) : 2;
        if (v.k != TV_INT || d == 0) return rx_fail(R, at, "test '%s' needs integers", name);
        long long m = ((v.i % d) + d) % d;
        *res = IS("odd") ? m == 1 : m == 0;
    } else if (IS("eq") || IS("equalto") || IS("==") || IS("ne") || IS("!=") || IS("sameas")) {
        if (!a0) return rx_fail(R, at, "test '%s' takes an argument", name);
        *res = tv_equal(v, *a0) == !(IS("ne") || IS("!="));
        if (IS("sameas")) *res = v.k == a0->k && tv_equal(v, *a0);
    } else if (IS("lt") || IS("le") || IS("gt") || IS("ge") || IS("lessthan") || IS("greaterthan")) {
        if (!a0 || tv_compare(v, *a0, &c)) return rx_fail(R, at, "test '%s' cannot compare these values", name);
        *res = IS("lt") || IS("lessthan") ? c < 0 : IS("le") ? c <= 0 : IS("gt") || IS("greaterthan") ? c > 0 : c >= 0;
    } else if (IS("in")) {
        if (!a0) return rx_fail(R, at, "test 'in' takes an argument");
        tv_list *l;
        if (a0->k == TV_STR) *res = v.k == TV_STR && (v.s.n == 0 || memmem(a0->s.p, a0->s.n, v.s.p, v.s.n));
        else if (a0->k == TV_DICT) *res = tv_dict_get(a0->d, v) != NULL;
        else {
            if (tpl_iterate(R, at, *a0, &l)) return -1;
            *res = 0;
            for (size_t i = 0; i < l->n && !*res; i++) *res = tv_equal(l->v[i], v);
        }
    } else return rx_fail(R, at, "no test named '%s'", name);
    return 0;
}

/* ---------------------------------------------------------------- filters */

static int as_int(tv v, long long *out) {
    if (v.k == TV_INT) return *out = v.i, 0;
    if (v.k == TV_BOOL) return *out = v.b, 0;
    if (v.k == TV_FLOAT) return *out = (long long)v.f, 0;
    return -1;
}

/* select/reject/selectattr/rejectattr/map over items. */
static int filter_items(rctx *R, const tn *at, const char *name, tv in, const rargs *g, tv *out) {
    tv_list *items, none = {0, 0, NULL};
    if (!tv_truthy(in)) items = &none; /* jinja2: `if value:` before iterating */
    else if (tpl_iterate(R, at, in, &items)) return -1;
    int attr = IS("selectattr") || IS("rejectattr"), keep_if = IS("select") || IS("selectattr"), map = IS("map");
    tv l = tv_list_new(R->a, items->n, 0);
    if (l.k != TV_LIST) return rx_oom(R, at);
    size_t k = 0;
    int skip = attr ? 1 : 0;
    tv *tname = rargs_get(g, skip, NULL);
    char test[64] = "";
    if (tname && tname->k == TV_STR) snprintf(test, sizeof test, "%.*s", (int)tname->s.n, tname->s.p);
    rargs rest = {g->npos > skip + 1 ? g->pos + skip + 1 : NULL, g->npos > skip + 1 ? g->npos - skip - 1 : 0,
                  g->kwn, g->kw, g->nkw};
    char aname[128] = "";
    tv *av = map ? rargs_get(g, -1, "attribute") : attr ? rargs_get(g, 0, NULL) : NULL;
    if ((attr || (map && av)) && (!av || av->k != TV_STR)) return rx_fail(R, at, "%s needs an attribute name", name);
    if (av) snprintf(aname, sizeof aname, "%.*s", (int)av->s.n, av->s.p);
    for (size_t i = 0; i < items->n; i++) {
        tv x = items->v[i];
        if (map) {
            if (av) {
                if (tpl_getattr(R, at, x, aname, &x)) return -1;
                tv *d = rargs_get(g, -1, "default");
                if (x.k == TV_UNDEF && d) x = *d;
            } else {
                if (!test[0]) return rx_fail(R, at, "map needs a filter name or attribute=");
                rargs fr = {g->npos > 1 ? g->pos + 1 : NULL, g->npos > 1 ? g->npos - 1 : 0, g->kwn, g->kw, g->nkw};
                if (tpl_filter(R, at, test, x, &fr, &x)) return -1;
            }
            l.l->v[k++] = x;
            continue;
        }
        tv y = x;
        if (attr && tpl_getattr(R, at, x, aname, &y)) return -1;
        int r = tv_truthy(y);
        if (test[0] && tpl_test(R, at, test, y, &rest, &r)) return -1;
        if (r == keep_if) l.l->v[k++] = x;
    }
    l.l->n = k;
    *out = l;
    return 0;
}

static int tojson(rctx *R, const tn *at, tv in, const rargs *g, tv *out) {
    tv *ind = rargs_get(g, 1, "indent"), *seps = rargs_get(g, 2, "separators"), *sk = rargs_get(g, 3, "sort_keys");
    tv *ea = rargs_get(g, 0, "ensure_ascii");
    char indent[64], *ip = NULL, isep[16], ksep[16];
    const char *is = NULL, *ks = NULL;
    if (ind && ind->k == TV_INT) {
        long long n = ind->i < 0 ? 0 : ind->i > 32 ? 32 : ind->i;
        memset(indent, ' ', (size_t)n), indent[n] = 0, ip = indent;
    } else if (ind && ind->k == TV_STR) {
        snprintf(indent, sizeof indent, "%.*s", (int)ind->s.n, ind->s.p), ip = indent;
    } else if (ind && ind->k != TV_NONE) return rx_fail(R, at, "tojson indent must be an integer or string");
    if (seps && seps->k == TV_LIST && seps->l->n == 2 && seps->l->v[0].k == TV_STR && seps->l->v[1].k == TV_STR) {
        snprintf(isep, sizeof isep, "%.*s", (int)seps->l->v[0].s.n, seps->l->v[0].s.p), is = isep;
        snprintf(ksep, sizeof ksep, "%.*s", (int)seps->l->v[1].s.n, seps->l->v[1].s.p), ks = ksep;
    } else if (seps && seps->k != TV_NONE) return rx_fail(R, at, "tojson separators must be two strings");
    tpl_buf b = {.limit = R->max_output};
    const char *bad = NULL;
    if (tv_to_json(&b, in, ip, is, ks, sk && tv_truthy(*sk), ea && tv_truthy(*ea), &bad)) {
        tpl_buf_free(&b);
        return rx_fail(R, at, "Object of type %s is not JSON serializable", bad ? bad : "?");
    }
    return new_str(R, at, &b, out);
}

static int indent_filter(rctx *R, const tn *at, tv s, const rargs *g, tv *out) {
    tv *w = rargs_get(g, 0, "width"), *first = rargs_get(g, 1, "first"), *blank = rargs_get(g, 2, "blank");
    tpl_buf pad = {0}, b = {.limit = R->max_output};
    if (!w || w->k == TV_INT) {
        for (long long i = 0; i < (w ? w->i : 4); i++) tpl_buf_addc(&pad, ' ');
    } else if (w->k == TV_STR) tpl_buf_add(&pad, w->s.p, w->s.n);
    size_t start = 0, lineno = 0;
    for (size_t i = 0; i <= s.s.n; i++) {
        if (i < s.s.n && s.s.p[i] != '\n') continue;
        size_t len = i - start;
        if (i == s.s.n && len == 0 && lineno > 0) break; /* what splitlines drops */
        if (lineno) tpl_buf_addc(&b, '\n');
        if ((lineno || (first && tv_truthy(*first))) && (len || (blank && tv_truthy(*blank))))
            tpl_buf_add(&b, pad.p, pad.n);
        tpl_buf_add(&b, s.s.p + start, len);
        start = i + 1, lineno++;
    }
    if (s.s.n && s.s.p[s.s.n - 1] == '\n') tpl_buf_addc(&b, '\n');
    tpl_buf_free(&pad);
    return new_str(R, at, &b, out);
}

static int cmp_sort(rctx *R, const tn *at, tv *v, size_t n, int reverse) {
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0; j--) {
            int c;
            if (tv_compare(v[j - 1], v[j], &c)) return rx_fail(R, at, "cannot sort these values");
            if (reverse ? c >= 0 : c <= 0) break;
            tv t = v[j];
            v[j] = v[j - 1], v[j - 1] = t;
        }
    return 0;
}

int tpl_filter(rctx *R, const tn *at, const char *name, tv in, const rargs *g, tv *out) {
    tv *a0 = rargs_get(g, 0, NULL), *a1 = rargs_get(g, 1, NULL);
    tv_list *items;
    long long n;
    if (IS("default") || IS("d")) {
        tv *b = rargs_get(g, 1, "boolean");
        int use = in.k == TV_UNDEF || (b && tv_truthy(*b) && !tv_truthy(in));
        *out = use ? (a0 ? *a0 : tv_cstr("")) : in;
        return 0;
    }
    if (IS("safe")) { /* a Markup: '+' with a plain string escapes the string */
        if (tpl_to_str(R, at, in, out)) return -1;
        out->safe = 1;
        return 0;
    }
    if (IS("tojson")) return tojson(R, at, in, g, out);
    if (IS("string")) return tpl_to_str(R, at, in, out);
    if (IS("length") || IS("count")) {
        if (in.k == TV_STR) return *out = tv_int((long long)tv_utf8_len(in.s.p, in.s.n)), 0;
        if (in.k == TV_DICT || in.k == TV_NS) return *out = tv_int((long long)in.d->n), 0;
        if (in.k == TV_LIST) return *out = tv_int((long long)in.l->n), 0;
        if (in.k == TV_UNDEF) return *out = tv_int(0), 0;
        return rx_fail(R, at, "object of type '%s' has no len()", tv_type_name(in));
    }
    if (IS("map") || IS("select") || IS("reject") || IS("selectattr") || IS("rejectattr"))
        return filter_items(R, at, name, in, g, out);
    if (IS("int")) {
        if (in.k == TV_STR) {
            char buf[64], *end;
            snprintf(buf, sizeof buf, "%.*s", (int)(in.s.n > 60 ? 60 : in.s.n), in.s.p);
            long long x = strtoll(buf, &end, 10);
            if (end != buf && !*end) return *out = tv_int(x), 0;
            double f = strtod(buf, &end);
            if (end != buf && !*end) return *out = tv_int((long long)f), 0;
            return *out = a0 ? *a0 : tv_int(0), 0;
        }
        if (as_int(in, &n)) return *out = a0 ? *a0 : tv_int(0), 0;
        return *out = tv_int(n), 0;
    }
    if (IS("float")) {
        if (in.k == TV_STR) {
            char buf[64], *end;
            snprintf(buf, sizeof buf, "%.*s", (int)(in.s.n > 60 ? 60 : in.s.n), in.s.p);
            double f = strtod(buf, &end);
            return *out = end != buf && !*end ? tv_float(f) : a0 ? *a0 : tv_float(0), 0;
        }
        if (in.k == TV_FLOAT) return *out = in, 0;
        if (as_int(in, &n)) return *out = a0 ? *a0 : tv_float(0), 0;
        return *out = tv_float((double)n), 0;
    }
    if (IS("abs")) {
        if (in.k == TV_INT && in.i == LLONG_MIN) return rx_fail(R, at, "integer overflow in abs");
        if (in.k == TV_INT) return *out = tv_int(in.i < 0 ? -in.i : in.i), 0;
        if (in.k == TV_FLOAT) return *out = tv_float(fabs(in.f)), 0;
        return rx_fail(R, at, "bad operand type for abs(): '%s'", tv_type_name(in));
    }
    if (IS("round")) {
        long long prec = a0 && a0->k == TV_INT ? a0->i : 0;
        double f = in.k == TV_FLOAT ? in.f : in.k == TV_INT ? (double)in.i : 0, m = pow(10, (double)prec);
        tv *method = rargs_get(g, 1, "method");
        int floor_m = method && method->k == TV_STR && method->s.n == 5 && !memcmp(method->s.p, "floor", 5);
        int ceil_m = method && method->k == TV_STR && method->s.n == 4 && !memcmp(method->s.p, "ceil", 4);
        double r = floor_m ? floor(f * m) / m : ceil_m ? ceil(f * m) / m : round(f * m) / m;
        return *out = tv_float(r), 0;
    }
    if (IS("trim") || IS("upper") || IS("lower") || IS("capitalize") || IS("title") || IS("replace") || IS("indent") ||
        IS("wordcount")) {
        if (tpl_to_str(R, at, in, &in)) return -1; /* jinja2 applies these to str(value): Undefined is "" */
        if (IS("trim")) return *out = strip(in, a0, 3), 0;
        if (IS("upper") || IS("lower") || IS("capitalize") || IS("title"))
            return case_map(R, at, in, IS("lower") ? 0 : IS("upper") ? 1 : IS("capitalize") ? 2 : 3, out);
        if (IS("replace")) {
            tv o = {0}, nw = {0};
            if (str_arg(R, at, a0, "replace old", &o) || str_arg(R, at, a1, "replace new", &nw)) return -1;
            tv *c = rargs_get(g, 2, "count");
            return replace(R, at, in, o, nw, c && c->k == TV_INT ? c->i : -1, out);
        }
        if (IS("indent")) return indent_filter(R, at, in, g, out);
        if (IS("wordcount")) {
            tv parts;
            if (split(R, at, in, NULL, -1, &parts)) return -1;
            return *out = tv_int((long long)parts.l->n), 0;
        }
    }
    if (IS("items")) {
        if (in.k == TV_UNDEF) return *out = tv_list_new(R->a, 0, 0), 0;
        if (in.k != TV_DICT) return rx_fail(R, at, "can only get item pairs from a mapping");
        int found;
        return tpl_method(R, at, in, "items", g, out, &found);
    }
    if (IS("dictsort")) {
        if (in.k != TV_DICT) return rx_fail(R, at, "dictsort needs a mapping");
        int found;
        if (tpl_method(R, at, in, "items", g, out, &found)) return -1;
        tv *v = out->l->v;
        for (size_t i = 1; i < out->l->n; i++)
            for (size_t j = i; j > 0; j--) {
                int c;
                if (tv_compare(v[j - 1].l->v[0], v[j].l->v[0], &c)) return rx_fail(R, at, "cannot sort keys");
                if (c <= 0) break;
                tv t = v[j];
                v[j] = v[j - 1], v[j - 1] = t;
            }
        return 0;
    }
    if (IS("join")) {
        tv sep = a0 && a0->k == TV_STR ? *a0 : tv_cstr(""), *attr = rargs_get(g, 1, "attribute");
        char an[128];
        if (attr && attr->k == TV_STR) snprintf(an, sizeof an, "%.*s", (int)attr->s.n, attr->s.p);
        if (tpl_iterate(R, at, in, &items)) return -1;
        return join(R, at, items, sep, attr && attr->k == TV_STR ? an : NULL, out);
    }
    if (IS("list") || IS("first") || IS("last") || IS("reverse") || IS("unique") || IS("sort") || IS("min") ||
        IS("max") || IS("sum")) {
        if (tpl_iterate(R, at, in, &items)) return -1;
        if (IS("first") || IS("last")) {
            if (!items->n) return *out = tv_undef("first/last of an empty sequence"), 0;
            return *out = items->v[IS("first") ? 0 : items->n - 1], 0;
        }
        if (IS("reverse") && in.k == TV_STR) {
            tpl_buf b = {0};
            for (size_t i = items->n; i-- > 0;) tpl_buf_add(&b, items->v[i].s.p, items->v[i].s.n);
            return new_str(R, at, &b, out);
        }
        tv l = tv_list_new(R->a, items->n, 0);
        if (l.k != TV_LIST) return rx_oom(R, at);
        tpl_copy(l.l->v, items->v, items->n * sizeof(tv));
        if (IS("reverse"))
            for (size_t i = 0; i < items->n / 2; i++) {
                tv t = l.l->v[i];
                l.l->v[i] = l.l->v[items->n - 1 - i], l.l->v[items->n - 1 - i] = t;
            }
        if (IS("unique")) { /* strings compare ignoring case unless case_sensitive=true, as jinja2's */
            tv *cs = rargs_get(g, 0, "case_sensitive");
            int ci = !(cs && tv_truthy(*cs));
            size_t k = 0;
            for (size_t i = 0; i < items->n; i++) {
                int dup = 0;
                for (size_t j = 0; j < k && !dup; j++) {
                    tv x = l.l->v[j], y = items->v[i];
                    dup = ci && x.k == TV_STR && y.k == TV_STR ? x.s.n == y.s.n && !strncasecmp(x.s.p, y.s.p, x.s.n)
                                                               : tv_equal(x, y);
                }
                if (!dup) l.l->v[k++] = items->v[i];
            }
            l.l->n = k;
        }
        if (IS("sort") || IS("min") || IS("max")) {
            tv *rev = rargs_get(g, 0, "reverse");
            if (cmp_sort(R, at, l.l->v, l.l->n, rev && tv_truthy(*rev))) return -1;
            if (IS("min") || IS("max")) {
                if (!l.l->n) return *out = tv_undef("min/max of an empty sequence"), 0;
                return *out = l.l->v[IS("min") ? 0 : l.l->n - 1], 0;
            }
        }
        if (IS("sum")) {
            tv acc = tv_int(0);
            for (size_t i = 0; i < items->n; i++) {
                tv x = items->v[i];
                if (x.k == TV_FLOAT || acc.k == TV_FLOAT)
                    acc = tv_float((acc.k == TV_FLOAT ? acc.f : (double)acc.i) +
                                   (x.k == TV_FLOAT ? x.f : x.k == TV_INT ? (double)x.i : x.b));
                else if (x.k == TV_INT || x.k == TV_BOOL) acc.i += x.k == TV_INT ? x.i : x.b;
                else return rx_fail(R, at, "sum of non-numbers");
            }
            return *out = acc, 0;
        }
        return *out = l, 0;
    }
    if (in.k == TV_UNDEF) return rx_fail(R, at, "%s", in.why ? in.why : "value is undefined");
    return rx_fail(R, at, "no filter named '%s' for a value of type '%s'", name, tv_type_name(in));
}
