/*
 * Values of the Jinja interpreter: the arena, containers, Python equality,
 * ordering and truthiness, str()/repr() and json.dumps (see value.h).
 */
#include "app/template/value.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ arena */

struct tpl_chunk {
    struct tpl_chunk *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

void *tpl_alloc(tpl_arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    if (a->limit && a->used + n > a->limit) {
        a->exhausted = 1;
        return NULL;
    }
    struct tpl_chunk *c = a->head;
    if (!c || c->size - c->used < n) {
        size_t size = n > 65536 ? n : 65536;
        c = malloc(sizeof *c + size);
        if (!c) {
            a->exhausted = 1;
            return NULL;
        }
        c->size = size;
        c->used = 0;
        c->next = a->head;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += n;
    a->used += n;
    memset(p, 0, n);
    return p;
}

void tpl_arena_free(tpl_arena *a) {
    for (struct tpl_chunk *c = a->head, *nx; c; c = nx) {
        nx = c->next;
        free(c);
    }
    a->head = NULL;
    a->used = 0;
}

/* -------------------------------------------------------------- makers */

tv tv_str_copy(tpl_arena *a, const char *p, size_t n) {
    char *q = tpl_alloc(a, n + 1);
    if (!q) return tv_undef(NULL);
    if (n) memcpy(q, p, n);
    return tv_strn(q, n);
}

tv tv_cstr(const char *s) { return tv_strn(s, strlen(s)); }

tv tv_list_new(tpl_arena *a, size_t n, int tuple) {
    tv_list *l = tpl_alloc(a, sizeof *l);
    tv *v = l ? tpl_alloc(a, (n ? n : 1) * sizeof *v) : NULL;
    if (!v) return tv_undef(NULL);
    l->n = n;
    l->tuple = tuple;
    l->v = v;
    return (tv){.k = TV_LIST, .l = l};
}

tv tv_dict_new(tpl_arena *a, size_t cap) {
    tv_dict *d = tpl_alloc(a, sizeof *d);
    if (!d) return tv_undef(NULL);
    d->cap = cap ? cap : 4;
    d->key = tpl_alloc(a, d->cap * sizeof *d->key);
    d->val = tpl_alloc(a, d->cap * sizeof *d->val);
    if (!d->key || !d->val) return tv_undef(NULL);
    return (tv){.k = TV_DICT, .d = d};
}

tv *tv_dict_get(const tv_dict *d, tv key) {
    for (size_t i = 0; i < d->n; i++)
        if (tv_equal(d->key[i], key)) return &d->val[i];
    return NULL;
}

tv *tv_dict_gets(const tv_dict *d, const char *key) { return tv_dict_get(d, tv_cstr(key)); }

int tv_dict_set(tpl_arena *a, tv_dict *d, tv key, tv val) {
    tv *slot = tv_dict_get(d, key);
    if (slot) {
        *slot = val;
        return 0;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap * 2;
        tv *k = tpl_alloc(a, cap * sizeof *k), *v = tpl_alloc(a, cap * sizeof *v);
        if (!k || !v) return -1;
        memcpy(k, d->key, d->n * sizeof *k);
        memcpy(v, d->val, d->n * sizeof *v);
        d->key = k, d->val = v, d->cap = cap;
    }
    d->key[d->n] = key;
    d->val[d->n++] = val;
    return 0;
}

/* ------------------------------------------------------------ semantics */

int tv_truthy(tv v) {
    switch (v.k) {
    case TV_BOOL: return v.b;
    case TV_INT: return v.i != 0;
    case TV_FLOAT: return v.f != 0;
    case TV_STR: return v.s.n != 0;
    case TV_LIST: return v.l->n != 0;
    case TV_DICT: return v.d->n != 0;
    case TV_NS: case TV_MACRO: case TV_FUNC: return 1;
    default: return 0;
    }
}

static int is_num(tv v) { return v.k == TV_BOOL || v.k == TV_INT || v.k == TV_FLOAT; }
static double num(tv v) { return v.k == TV_FLOAT ? v.f : v.k == TV_INT ? (double)v.i : v.b; }
static long long inum(tv v) { return v.k == TV_INT ? v.i : v.b; }

/* Values nested deeper than this (loops can build them) compare unequal
 * and print as an error instead of exhausting the C stack. */
#define TV_MAX_NESTING 200

static int equal_at(tv a, tv b, int depth) {
    if (depth > TV_MAX_NESTING) return 0;
    if (is_num(a) && is_num(b)) {
        if (a.k != TV_FLOAT && b.k != TV_FLOAT) return inum(a) == inum(b);
        return num(a) == num(b);
    }
    if (a.k != b.k) return 0;
    switch (a.k) {
    case TV_UNDEF: case TV_NONE: return 1;
    case TV_STR: return a.s.n == b.s.n && !memcmp(a.s.p, b.s.p, a.s.n);
    case TV_LIST:
        if (a.l == b.l) return 1; /* the same list, as Python's identity shortcut */
        if (a.l->n != b.l->n) return 0;
        for (size_t i = 0; i < a.l->n; i++)
            if (!equal_at(a.l->v[i], b.l->v[i], depth + 1)) return 0;
        return 1;
    case TV_DICT:
        if (a.d == b.d) return 1;
        if (a.d->n != b.d->n) return 0;
        for (size_t i = 0; i < a.d->n; i++) {
            tv *o = tv_dict_get(b.d, a.d->key[i]);
            if (!o || !equal_at(a.d->val[i], *o, depth + 1)) return 0;
        }
        return 1;
    case TV_NS: return a.d == b.d;
    case TV_MACRO: return a.macro == b.macro;
    case TV_FUNC: return a.i == b.i;
    default: return 0;
    }
}

int tv_equal(tv a, tv b) { return equal_at(a, b, 0); }

static int compare_at(tv a, tv b, int *cmp, int depth) {
    if (depth > TV_MAX_NESTING) return -1;
    if (is_num(a) && is_num(b)) {
        if (a.k != TV_FLOAT && b.k != TV_FLOAT) *cmp = (inum(a) > inum(b)) - (inum(a) < inum(b));
        else *cmp = (num(a) > num(b)) - (num(a) < num(b));
        return 0;
    }
    if (a.k == TV_STR && b.k == TV_STR) {
        size_t n = a.s.n < b.s.n ? a.s.n : b.s.n;
        int c = n ? memcmp(a.s.p, b.s.p, n) : 0;
        *cmp = c ? (c > 0) - (c < 0) : (a.s.n > b.s.n) - (a.s.n < b.s.n);
        return 0;
    }
    if (a.k == TV_LIST && b.k == TV_LIST) {
        for (size_t i = 0; i < a.l->n && i < b.l->n; i++) {
            if (equal_at(a.l->v[i], b.l->v[i], depth + 1)) continue;
            return compare_at(a.l->v[i], b.l->v[i], cmp, depth + 1);
        }
        *cmp = (a.l->n > b.l->n) - (a.l->n < b.l->n);
        return 0;
    }
    return -1;
}

int tv_compare(tv a, tv b, int *cmp) { return compare_at(a, b, cmp, 0); }

size_t tv_utf8_len(const char *p, size_t n) {
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)p[i] & 0xC0) != 0x80;
    return c;
}

const char *tv_type_name(tv v) {
    static const char *const names[] = {"Undefined", "NoneType", "bool", "int", "float", "str",
                                        "list", "dict", "Namespace", "Macro", "builtin_function_or_method"};
    if (v.k == TV_LIST && v.l->tuple) return "tuple";
    return names[v.k];
}

/* ----------------------------------------------------- growing byte text */

void tpl_buf_add(tpl_buf *b, const char *p, size_t n) {
    if (b->over || n == 0) return;
    if (b->limit && b->n + n > b->limit) {
        b->over = 1;
        return;
    }
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->over = 1;
            return;
        }
        b->p = q, b->cap = cap;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
}

void tpl_buf_adds(tpl_buf *b, const char *s) { tpl_buf_add(b, s, strlen(s)); }
void tpl_buf_addc(tpl_buf *b, char c) { tpl_buf_add(b, &c, 1); }

void tpl_buf_free(tpl_buf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* ---------------------------------------------------------- str / repr */

void tv_float_repr(tpl_buf *b, double f) {
    if (isnan(f)) return tpl_buf_adds(b, "nan");
    if (isinf(f)) return tpl_buf_adds(b, f < 0 ? "-inf" : "inf");
    char s[40];
    int p = 1;
    for (; p < 17; p++) {
        snprintf(s, sizeof s, "%.*e", p - 1, f);
        if (strtod(s, NULL) == f) break;
    }
    snprintf(s, sizeof s, "%.*e", p - 1, f);
    /* s: [-]d[.ddd]e[+-]XX */
    char digits[24];
    int nd = 0, neg = s[0] == '-';
    const char *q = s + neg;
    for (; *q && *q != 'e'; q++)
        if (*q != '.') digits[nd++] = *q;
    int exp = atoi(q + 1);
    if (neg) tpl_buf_addc(b, '-');
    if (exp < -4 || exp >= 16) {
        tpl_buf_addc(b, digits[0]);
        if (nd > 1) tpl_buf_addc(b, '.'), tpl_buf_add(b, digits + 1, (size_t)nd - 1);
        char e[16];
        snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
        tpl_buf_adds(b, e);
    } else if (exp < 0) {
        tpl_buf_adds(b, "0.");
        for (int i = 0; i < -exp - 1; i++) tpl_buf_addc(b, '0');
        tpl_buf_add(b, digits, (size_t)nd);
    } else {
        for (int i = 0; i <= exp; i++) tpl_buf_addc(b, i < nd ? digits[i] : '0');
        tpl_buf_addc(b, '.');
        if (nd > exp + 1) tpl_buf_add(b, digits + exp + 1, (size_t)(nd - exp - 1));
        else tpl_buf_addc(b, '0');
    }
}

static void str_repr(tpl_buf *b, const char *p, size_t n) {
    int sq = memchr(p, '\'', n) != NULL, dq = memchr(p, '"', n) != NULL;
    char quote = sq && !dq ? '"' : '\'';
    tpl_buf_addc(b, quote);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        char e[8];
        if (c == '\\' || c == (unsigned char)quote) tpl_buf_addc(b, '\\'), tpl_buf_addc(b, (char)c);
        else if (c == '\n') tpl_buf_adds(b, "\\n");
        else if (c == '\r') tpl_buf_adds(b, "\\r");
        else if (c == '\t') tpl_buf_adds(b, "\\t");
        else if (c < 0x20 || c == 0x7f) snprintf(e, sizeof e, "\\x%02x", c), tpl_buf_adds(b, e);
        else tpl_buf_addc(b, (char)c);
    }
    tpl_buf_addc(b, quote);
}

/* The containers being printed, outermost first: one met again inside
 * itself (a namespace holding itself) prints as Python's "[...]" / "{...}". */
typedef struct repr_path {
    const void *at[TV_MAX_NESTING + 1];
    int n;
} repr_path;

static int repr_in(tpl_buf *b, tv v, int top, repr_path *path) {
    const void *box = v.k == TV_LIST ? (const void *)v.l : v.k == TV_DICT || v.k == TV_NS ? (const void *)v.d : NULL;
    if (box) {
        for (int i = 0; i < path->n; i++)
            if (path->at[i] == box) {
                tpl_buf_adds(b, v.k == TV_LIST ? (v.l->tuple ? "(...)" : "[...]") : v.k == TV_NS ? "<Namespace {...}>" : "{...}");
                return 0;
            }
        if (path->n > TV_MAX_NESTING) return -1;
        path->at[path->n++] = box;
    }
    switch (v.k) {
    case TV_UNDEF: if (!top) tpl_buf_adds(b, "Undefined"); break;
    case TV_NONE: tpl_buf_adds(b, "None"); break;
    case TV_BOOL: tpl_buf_adds(b, v.b ? "True" : "False"); break;
    case TV_INT: {
        char s[24];
        snprintf(s, sizeof s, "%lld", v.i);
        tpl_buf_adds(b, s);
        break;
    }
    case TV_FLOAT: tv_float_repr(b, v.f); break;
    case TV_STR:
        if (top) tpl_buf_add(b, v.s.p, v.s.n);
        else str_repr(b, v.s.p, v.s.n);
        break;
    case TV_LIST:
        tpl_buf_addc(b, v.l->tuple ? '(' : '[');
        for (size_t i = 0; i < v.l->n; i++) {
            if (i) tpl_buf_adds(b, ", ");
            if (repr_in(b, v.l->v[i], 0, path)) return -1;
        }
        if (v.l->tuple && v.l->n == 1) tpl_buf_addc(b, ',');
        tpl_buf_addc(b, v.l->tuple ? ')' : ']');
        break;
    case TV_DICT:
    case TV_NS:
        tpl_buf_adds(b, v.k == TV_NS ? "<Namespace {" : "{");
        for (size_t i = 0; i < v.d->n; i++) {
            if (i) tpl_buf_adds(b, ", ");
            if (repr_in(b, v.d->key[i], 0, path)) return -1;
            tpl_buf_adds(b, ": ");
            if (repr_in(b, v.d->val[i], 0, path)) return -1;
        }
        tpl_buf_adds(b, v.k == TV_NS ? "}>" : "}");
        break;
    case TV_MACRO: tpl_buf_adds(b, "<Macro>"); break;
    default: tpl_buf_adds(b, "<built-in function>"); break;
    }
    if (box) path->n--;
    return 0;
}

int tv_str_of(tpl_buf *b, tv v) {
    repr_path path = {.n = 0};
    return repr_in(b, v, 1, &path);
}

/* ------------------------------------------------------------------- json */

/* One code point of UTF-8 at p[*i] (advancing *i); invalid bytes give themselves. */
static unsigned long utf8_next(const char *p, size_t n, size_t *i) {
    unsigned char c = (unsigned char)p[*i];
    int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (*i + (size_t)len > n) len = 1;
    unsigned long cp = len == 1 ? c : c & (0x3F >> (len - 1));
    for (int k = 1; k < len; k++) cp = (cp << 6) | ((unsigned char)p[*i + (size_t)k] & 0x3F);
    *i += (size_t)len;
    return cp;
}

static void json_str(tpl_buf *b, const char *p, size_t n, int ascii) {
    tpl_buf_addc(b, '"');
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (ascii && c >= 0x80) { /* ensure_ascii: \uXXXX, astral code points as a surrogate pair */
            tpl_buf_add(b, p + run, i - run);
            size_t j = i;
            unsigned long cp = utf8_next(p, n, &j);
            char u[32];
            if (cp >= 0x10000)
                snprintf(u, sizeof u, "\\u%04lx\\u%04lx", 0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + ((cp - 0x10000) & 0x3FF));
            else snprintf(u, sizeof u, "\\u%04lx", cp);
            tpl_buf_adds(b, u);
            i = j - 1;
            run = j;
            continue;
        }
        const char *e = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                      : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
        if (!e && c >= 0x20) continue;
        tpl_buf_add(b, p + run, i - run);
        run = i + 1;
        char u[8];
        if (!e) snprintf(u, sizeof u, "\\u%04x", c), e = u;
        tpl_buf_adds(b, e);
    }
    tpl_buf_add(b, p + run, n - run);
    tpl_buf_addc(b, '"');
}

typedef struct json_fmt {
    const char *indent, *item_sep, *key_sep;
    int sort_keys, ascii;
    const char **bad;
} json_fmt;

static void newline(tpl_buf *b, const json_fmt *f, int depth) {
    tpl_buf_addc(b, '\n');
    for (int i = 0; i < depth; i++) tpl_buf_adds(b, f->indent);
}

static int key_less(tv a, tv b) {
    int c = 0;
    return !tv_compare(a, b, &c) && c < 0;
}

static int json_in(tpl_buf *b, tv v, const json_fmt *f, int depth) {
    if (depth > 200) {
        *f->bad = "nesting deeper than 200";
        return -1;
    }
    switch (v.k) {
    case TV_NONE: tpl_buf_adds(b, "null"); return 0;
    case TV_BOOL: tpl_buf_adds(b, v.b ? "true" : "false"); return 0;
    case TV_INT: tv_str_of(b, v); return 0;
    case TV_FLOAT:
        if (isnan(v.f)) tpl_buf_adds(b, "NaN");
        else if (isinf(v.f)) tpl_buf_adds(b, v.f < 0 ? "-Infinity" : "Infinity");
        else tv_float_repr(b, v.f);
        return 0;
    case TV_STR: json_str(b, v.s.p, v.s.n, f->ascii); return 0;
    case TV_LIST:
        if (v.l->n == 0) {
            tpl_buf_adds(b, "[]");
            return 0;
        }
        tpl_buf_addc(b, '[');
        for (size_t i = 0; i < v.l->n; i++) {
            if (i) tpl_buf_adds(b, f->item_sep);
            if (f->indent) newline(b, f, depth + 1);
            if (json_in(b, v.l->v[i], f, depth + 1)) return -1;
        }
        if (f->indent) newline(b, f, depth);
        tpl_buf_addc(b, ']');
        return 0;
    case TV_DICT: {
        if (v.d->n == 0) {
            tpl_buf_adds(b, "{}");
            return 0;
        }
        size_t n = v.d->n, order[n ? n : 1];
        for (size_t i = 0; i < n; i++) order[i] = i;
        if (f->sort_keys) /* insertion sort: stable, dicts are small */
            for (size_t i = 1; i < n; i++)
                for (size_t j = i; j > 0 && key_less(v.d->key[order[j]], v.d->key[order[j - 1]]); j--) {
                    size_t t = order[j];
                    order[j] = order[j - 1], order[j - 1] = t;
                }
        tpl_buf_addc(b, '{');
        for (size_t i = 0; i < n; i++) {
            tv k = v.d->key[order[i]];
            if (i) tpl_buf_adds(b, f->item_sep);
            if (f->indent) newline(b, f, depth + 1);
            if (k.k == TV_STR) json_str(b, k.s.p, k.s.n, f->ascii);
            else if (k.k == TV_NONE) tpl_buf_adds(b, "\"null\"");
            else if (k.k == TV_BOOL) tpl_buf_adds(b, k.b ? "\"true\"" : "\"false\"");
            else if (k.k == TV_INT || k.k == TV_FLOAT) tpl_buf_addc(b, '"'), tv_str_of(b, k), tpl_buf_addc(b, '"');
            else {
                *f->bad = "keys must be str, int, float, bool or None";
                return -1;
            }
            tpl_buf_adds(b, f->key_sep);
            if (json_in(b, v.d->val[order[i]], f, depth + 1)) return -1;
        }
        if (f->indent) newline(b, f, depth);
        tpl_buf_addc(b, '}');
        return 0;
    }
    default: *f->bad = tv_type_name(v); return -1;
    }
}

int tv_to_json(tpl_buf *b, tv v, const char *indent, const char *item_sep, const char *key_sep, int sort_keys,
               int ensure_ascii, const char **bad) {
    json_fmt f = {indent, item_sep ? item_sep : indent ? "," : ", ", key_sep ? key_sep : ": ", sort_keys, ensure_ascii,
                  bad};
    return json_in(b, v, &f, 0);
}
