/*
 * Regular expressions compiled to GBNF expressions, then to byte grammars
 * by the GBNF parser. The subset: literals and escapes (\n \t \r \f \v
 * \xHH \uHHHH, escaped punctuation), '.', classes [...] with ranges and
 * negation, \d \w \s and their negations, groups ( ) and (?: ),
 * alternation |, quantifiers ? * + {m} {m,} {m,n} (a lazy '?' after one is
 * accepted and means the same here: the grammar only constrains which
 * strings are possible). The expression matches the whole output: a
 * leading ^ and a trailing $ are accepted and implied anyway. Refused with
 * the position: lookaround, backreferences, \b, anchors elsewhere.
 *
 * Inside a JSON string (a schema's "pattern"), the characters JSON must
 * escape (quote, backslash, control characters) are taken out of every
 * class and '.', and refused as literals, so the generated string needs
 * no escapes and its JSON text is the matched text itself.
 */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "grammar/grammar.h"

#define RX_MAX_RANGES 256
#define RX_MAX_DEPTH 100

typedef struct rx {
    const char *s, *p, *end;
    int json;
    gr_text *out;
    kvlm_error *err;
    int failed, depth;
} rx;

typedef struct rx_set {
    uint32_t r[RX_MAX_RANGES][2];
    int n;
} rx_set;

static int rx_fail(rx *x, const char *msg) {
    if (!x->failed)
        kvlm_error_set(x->err, KVLM_ERR_ARG, "regex: %s at offset %d", msg, (int)(x->p - x->s));
    x->failed = 1;
    return -1;
}

static int set_add(rx *x, rx_set *s, uint32_t lo, uint32_t hi) {
    if (s->n == RX_MAX_RANGES) return rx_fail(x, "character class too large");
    s->r[s->n][0] = lo;
    s->r[s->n][1] = hi;
    s->n++;
    return 0;
}

static int cmp_r(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

static void set_normalize(rx_set *s) {
    qsort(s->r, (size_t)s->n, sizeof s->r[0], cmp_r);
    int m = 0;
    for (int i = 0; i < s->n; i++) {
        if (m && s->r[i][0] <= s->r[m - 1][1] + 1) {
            if (s->r[i][1] > s->r[m - 1][1]) s->r[m - 1][1] = s->r[i][1];
        } else {
            s->r[m][0] = s->r[i][0];
            s->r[m][1] = s->r[i][1];
            m++;
        }
    }
    s->n = m;
}

static void set_negate(rx_set *s) {
    set_normalize(s);
    rx_set c = {.n = 0};
    uint32_t next = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->r[i][0] > next) {
            c.r[c.n][0] = next;
            c.r[c.n][1] = s->r[i][0] - 1;
            c.n++;
        }
        next = s->r[i][1] + 1;
    }
    if (next <= 0x10FFFF) {
        c.r[c.n][0] = next;
        c.r[c.n][1] = 0x10FFFF;
        c.n++;
    }
    *s = c;
}

/* Removes what a JSON string must escape: U+0000..U+001F, '"', '\'. */
static void set_json(rx_set *s) {
    set_normalize(s);
    rx_set c = {.n = 0};
    static const uint32_t bad[3][2] = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
    for (int i = 0; i < s->n; i++) {
        uint32_t lo = s->r[i][0], hi = s->r[i][1];
        for (int b = 0; b < 3 && lo <= hi; b++) {
            if (hi < bad[b][0] || lo > bad[b][1]) continue;
            if (lo < bad[b][0] && c.n < RX_MAX_RANGES) {
                c.r[c.n][0] = lo;
                c.r[c.n][1] = bad[b][0] - 1;
                c.n++;
            }
            lo = bad[b][1] + 1;
        }
        if (lo <= hi && c.n < RX_MAX_RANGES) {
            c.r[c.n][0] = lo;
            c.r[c.n][1] = hi;
            c.n++;
        }
    }
    *s = c;
}

static int emit_set(rx *x, rx_set *s) {
    if (x->json) set_json(s);
    else set_normalize(s);
    if (s->n == 0) return rx_fail(x, "character class matches nothing");
    gr_text_add(x->out, "[", 1);
    for (int i = 0; i < s->n; i++) {
        gr_text_printf(x->out, "\\U%08X", s->r[i][0]);
        if (s->r[i][1] != s->r[i][0]) gr_text_printf(x->out, "-\\U%08X", s->r[i][1]);
    }
    gr_text_add(x->out, "]", 1);
    return 0;
}

/* \d \w \s (and negations) into s; returns 1 if c names one. */
static int shorthand(rx *x, char c, rx_set *s) {
    rx_set t = {.n = 0};
    switch (c) {
    case 'd': case 'D': set_add(x, &t, '0', '9'); break;
    case 'w': case 'W':
        set_add(x, &t, '0', '9');
        set_add(x, &t, 'A', 'Z');
        set_add(x, &t, '_', '_');
        set_add(x, &t, 'a', 'z');
        break;
    case 's': case 'S':
        set_add(x, &t, '\t', '\r');
        set_add(x, &t, ' ', ' ');
        break;
    default: return 0;
    }
    if (c >= 'A' && c <= 'Z') set_negate(&t);
    for (int i = 0; i < t.n; i++) set_add(x, s, t.r[i][0], t.r[i][1]);
    return 1;
}

static int hexv(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* One literal code point (after a backslash when esc); p advances. */
static int read_cp(rx *x, int esc, uint32_t *cp) {
    if (x->p >= x->end) return rx_fail(x, "unexpected end");
    if (esc) {
        char e = *x->p++;
        int digits = e == 'x' ? 2 : e == 'u' ? 4 : 0;
        if (digits) {
            uint32_t v = 0;
            for (int i = 0; i < digits; i++) {
                int h = x->p < x->end ? hexv(*x->p) : -1;
                if (h < 0) return rx_fail(x, "escape needs hexadecimal digits");
                v = v * 16 + (uint32_t)h;
                x->p++;
            }
            *cp = v;
            return 0;
        }
        switch (e) {
        case 'n': *cp = '\n'; return 0;
        case 't': *cp = '\t'; return 0;
        case 'r': *cp = '\r'; return 0;
        case 'f': *cp = '\f'; return 0;
        case 'v': *cp = '\v'; return 0;
        default:
            if ((e >= 0x21 && e <= 0x2F) || (e >= 0x3A && e <= 0x40) || (e >= 0x5B && e <= 0x60) ||
                (e >= 0x7B && e <= 0x7E)) {
                *cp = (uint32_t)e;
                return 0;
            }
            x->p--;
            return rx_fail(x, "unsupported escape");
        }
    }
    unsigned char c = (unsigned char)*x->p;
    int n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!n || x->end - x->p < n) return rx_fail(x, "invalid UTF-8");
    uint32_t v = n == 1 ? c : c & (0x7F >> n);
    for (int i = 1; i < n; i++) {
        if (((unsigned char)x->p[i] & 0xC0) != 0x80) return rx_fail(x, "invalid UTF-8");
        v = v << 6 | ((unsigned char)x->p[i] & 63);
    }
    x->p += n;
    *cp = v;
    return 0;
}

static int parse_class(rx *x) {
    x->p++; /* [ */
    rx_set s = {.n = 0};
    int neg = 0;
    if (x->p < x->end && *x->p == '^') {
        neg = 1;
        x->p++;
    }
    int first = 1;
    for (;;) {
        if (x->p >= x->end) return rx_fail(x, "character class is not closed with ]");
        if (*x->p == ']' && !first) {
            x->p++;
            break;
        }
        first = 0;
        if (*x->p == '\\' && x->p + 1 < x->end && shorthand(x, x->p[1], &s)) {
            x->p += 2;
            continue;
        }
        int esc = *x->p == '\\';
        x->p += esc;
        uint32_t lo, hi;
        if (read_cp(x, esc, &lo)) return -1;
        hi = lo;
        if (x->end - x->p >= 2 && x->p[0] == '-' && x->p[1] != ']') {
            x->p++;
            int e2 = *x->p == '\\';
            x->p += e2;
            if (read_cp(x, e2, &hi)) return -1;
            if (hi < lo) return rx_fail(x, "character range runs backwards");
        }
        if (set_add(x, &s, lo, hi)) return -1;
    }
    if (neg) set_negate(&s);
    return emit_set(x, &s);
}

static int parse_alt(rx *x);

static int parse_quant(rx *x) {
    if (x->p >= x->end) return 0;
    char q = *x->p;
    if (q == '*' || q == '+' || q == '?') {
        gr_text_add(x->out, &q, 1);
        x->p++;
    } else if (q == '{') {
        const char *start = x->p++;
        long m = -1, n = -1;
        int comma = 0;
        while (x->p < x->end && *x->p >= '0' && *x->p <= '9') {
            m = (m < 0 ? 0 : m) * 10 + (*x->p++ - '0');
            if (m > 10000) return rx_fail(x, "repetition count above 10000");
        }
        if (x->p < x->end && *x->p == ',') {
            comma = 1;
            x->p++;
            while (x->p < x->end && *x->p >= '0' && *x->p <= '9') {
                n = (n < 0 ? 0 : n) * 10 + (*x->p++ - '0');
                if (n > 10000) return rx_fail(x, "repetition count above 10000");
            }
        }
        if (m < 0 || x->p >= x->end || *x->p != '}') {
            x->p = start;
            return rx_fail(x, "malformed {m,n}");
        }
        x->p++;
        if (comma && n >= 0 && n < m) return rx_fail(x, "{m,n} with n below m");
        if (!comma) gr_text_printf(x->out, "{%ld}", m);
        else if (n < 0) gr_text_printf(x->out, "{%ld,}", m);
        else gr_text_printf(x->out, "{%ld,%ld}", m, n);
    } else {
        return 0;
    }
    if (x->p < x->end && *x->p == '?') x->p++; /* lazy: the same set of strings */
    if (x->p < x->end && (*x->p == '*' || *x->p == '+' || *x->p == '{'))
        return rx_fail(x, "a quantifier cannot follow a quantifier");
    return 0;
}

static int parse_atom(rx *x) {
    char c = *x->p;
    if (c == '(') {
        x->p++;
        if (x->end - x->p >= 2 && x->p[0] == '?') {
            if (x->p[1] != ':') return rx_fail(x, "lookaround and named groups are not supported");
            x->p += 2;
        }
        if (++x->depth > RX_MAX_DEPTH) return rx_fail(x, "groups nested too deeply");
        gr_text_add(x->out, "(", 1);
        if (parse_alt(x)) return -1;
        x->depth--;
        if (x->p >= x->end || *x->p != ')') return rx_fail(x, "group is not closed with )");
        x->p++;
        gr_text_add(x->out, ")", 1);
        return 0;
    }
    if (c == '[') return parse_class(x);
    if (c == '.') {
        x->p++;
        rx_set s = {.n = 0};
        set_add(x, &s, '\n', '\n');
        set_negate(&s);
        return emit_set(x, &s);
    }
    if (c == '*' || c == '+' || c == '?' || c == '{') return rx_fail(x, "quantifier with nothing to repeat");
    if (c == '^' || c == '$') return rx_fail(x, "anchors are only supported at the ends");
    int esc = c == '\\';
    if (esc) {
        if (x->p + 1 >= x->end) return rx_fail(x, "unfinished escape");
        char e = x->p[1];
        rx_set s = {.n = 0};
        if (shorthand(x, e, &s)) {
            x->p += 2;
            return emit_set(x, &s);
        }
        if ((e >= '1' && e <= '9') || e == 'b' || e == 'B' || e == 'k')
            return rx_fail(x, "backreferences and word boundaries are not supported");
        x->p++;
    }
    uint32_t cp;
    if (read_cp(x, esc, &cp)) return -1;
    if (x->json && (cp < 0x20 || cp == '"' || cp == '\\'))
        return rx_fail(x, "a pattern may not match a quote, backslash or control character");
    rx_set s = {.n = 0};
    set_add(x, &s, cp, cp);
    return emit_set(x, &s);
}

static int parse_seq(rx *x) {
    int items = 0;
    gr_text_add(x->out, "(", 1);
    while (x->p < x->end && *x->p != '|' && *x->p != ')') {
        if (*x->p == '$' && x->p + 1 == x->end && x->depth == 0) {
            x->p++;
            break;
        }
        if (items++) gr_text_add(x->out, " ", 1);
        if (parse_atom(x) || parse_quant(x)) return -1;
    }
    gr_text_add(x->out, ")", 1);
    return 0;
}

static int parse_alt(rx *x) {
    if (parse_seq(x)) return -1;
    while (x->p < x->end && *x->p == '|') {
        x->p++;
        gr_text_add(x->out, " | ", 3);
        if (parse_seq(x)) return -1;
    }
    return 0;
}

int gr_regex_to_gbnf(const char *re, size_t len, int json_string, gr_text *out, kvlm_error *err) {
    rx x = {.s = re, .p = re, .end = re + len, .json = json_string, .out = out, .err = err};
    if (x.p < x.end && *x.p == '^') x.p++;
    gr_text_add(out, "(", 1);
    if (parse_alt(&x)) return KVLM_ERR_ARG;
    if (x.p < x.end) return rx_fail(&x, "unbalanced )"), KVLM_ERR_ARG;
    gr_text_add(out, ")", 1);
    if (out->oom) return kvlm_error_set(err, KVLM_ERR_NOMEM, "regex: out of memory");
    return 0;
}
