/*
 * GBNF, llama.cpp's grammar syntax, parsed into a byte grammar:
 *
 *     name ::= alternative | alternative ...     (the start rule is "root")
 *     "literal"  [class]  [^negated]  .  name  ( group )
 *     x*  x+  x?  x{m}  x{m,}  x{m,n}            # comment to end of line
 *
 * Literals and classes are Unicode code points (escapes \xHH, \uHHHH,
 * \UHHHHHHHH, \t \n \r \\ \" \[ \] \- and other punctuation); they are
 * compiled to UTF-8 byte sequences. '.' is any code point. Whitespace and
 * comments may appear anywhere between items; a rule ends where the next
 * "name ::=" begins. Repetitions become right-recursive helper rules
 * (x* is R ::= x R | empty), which the matcher runs as tail calls, so
 * their stacks do not grow with the count. Not supported (an error names
 * them): llama.cpp's token references <...>.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "grammar/grammar.h"

#define GBNF_MAX_REPEAT 10000
#define GBNF_MAX_DEPTH 200

typedef struct gp {
    const char *s, *end, *p;
    const char *what;
    gr_builder *b;
    kvlm_error *err;
    int failed, depth;
} gp;

static int line_of(const gp *g, const char *at, int *col) {
    int line = 1;
    const char *ls = g->s;
    for (const char *q = g->s; q < at && q < g->end; q++)
        if (*q == '\n') {
            line++;
            ls = q + 1;
        }
    *col = (int)(at - ls) + 1;
    return line;
}

static int fail(gp *g, const char *at, const char *msg) {
    if (g->failed) return -1;
    int col, line = line_of(g, at, &col);
    kvlm_error_set(g->err, KVLM_ERR_ARG, "%s: line %d column %d: %s", g->what, line, col, msg);
    g->failed = 1;
    return -1;
}

static void skip_space(gp *g) {
    while (g->p < g->end) {
        if (*g->p == '#') {
            while (g->p < g->end && *g->p != '\n') g->p++;
        } else if (*g->p == ' ' || *g->p == '\t' || *g->p == '\n' || *g->p == '\r') {
            g->p++;
        } else {
            break;
        }
    }
}

static int is_name_char(char c) { return isalnum((unsigned char)c) || c == '-' || c == '_'; }

/* At "name ::=": the start of the next rule. */
static int at_rule_start(const gp *g) {
    const char *q = g->p;
    if (q >= g->end || !is_name_char(*q)) return 0;
    while (q < g->end && is_name_char(*q)) q++;
    while (q < g->end && (*q == ' ' || *q == '\t')) q++;
    return g->end - q >= 3 && !memcmp(q, "::=", 3);
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One code point of a literal or class, escapes decoded and UTF-8 read. */
static int read_char(gp *g, uint32_t *cp) {
    const char *at = g->p;
    if (g->p >= g->end) return fail(g, at, "unexpected end of the grammar");
    unsigned char c = (unsigned char)*g->p;
    if (c == '\\') {
        if (++g->p >= g->end) return fail(g, at, "unfinished escape");
        char e = *g->p++;
        int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (digits) {
            uint32_t v = 0;
            for (int i = 0; i < digits; i++) {
                int h = g->p < g->end ? hex_value(*g->p) : -1;
                if (h < 0) return fail(g, at, "escape needs hexadecimal digits");
                v = v * 16 + (uint32_t)h;
                g->p++;
            }
            if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return fail(g, at, "escape is not a Unicode scalar value");
            *cp = v;
            return 0;
        }
        switch (e) {
        case 'n': *cp = '\n'; return 0;
        case 't': *cp = '\t'; return 0;
        case 'r': *cp = '\r'; return 0;
        case '0': *cp = 0; return 0;
        default:
            if (ispunct((unsigned char)e)) {
                *cp = (uint32_t)e;
                return 0;
            }
            return fail(g, at, "unknown escape");
        }
    }
    int n = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!n || g->end - g->p < n) return fail(g, at, "invalid UTF-8");
    uint32_t v = n == 1 ? c : c & (0x7F >> n);
    for (int i = 1; i < n; i++) {
        unsigned char d = (unsigned char)g->p[i];
        if ((d & 0xC0) != 0x80) return fail(g, at, "invalid UTF-8");
        v = v << 6 | (d & 63);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < min[n] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return fail(g, at, "invalid UTF-8");
    g->p += n;
    *cp = v;
    return 0;
}

static int cmp_range(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

#define GBNF_MAX_RANGES 512

static int parse_class(gp *g, int r, int alt) {
    const char *at = g->p++;
    int neg = 0;
    if (g->p < g->end && *g->p == '^') {
        neg = 1;
        g->p++;
    }
    uint32_t rg[GBNF_MAX_RANGES][2], out[GBNF_MAX_RANGES + 1][2];
    int n = 0;
    for (;;) {
        if (g->p >= g->end) return fail(g, at, "character class is not closed with ]");
        if (*g->p == ']') {
            g->p++;
            break;
        }
        uint32_t lo, hi;
        if (read_char(g, &lo)) return -1;
        hi = lo;
        if (g->end - g->p >= 2 && g->p[0] == '-' && g->p[1] != ']') {
            g->p++;
            if (read_char(g, &hi)) return -1;
            if (hi < lo) return fail(g, at, "character range runs backwards");
        }
        if (n == GBNF_MAX_RANGES) return fail(g, at, "character class has too many ranges");
        rg[n][0] = lo;
        rg[n][1] = hi;
        n++;
    }
    qsort(rg, (size_t)n, sizeof rg[0], cmp_range);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m && rg[i][0] <= out[m - 1][1] + 1) {
            if (rg[i][1] > out[m - 1][1]) out[m - 1][1] = rg[i][1];
        } else {
            out[m][0] = rg[i][0];
            out[m][1] = rg[i][1];
            m++;
        }
    }
    if (neg) {
        uint32_t c[GBNF_MAX_RANGES + 1][2];
        int k = 0;
        uint32_t next = 0;
        for (int i = 0; i < m; i++) {
            if (out[i][0] > next) {
                c[k][0] = next;
                c[k][1] = out[i][0] - 1;
                k++;
            }
            next = out[i][1] + 1;
        }
        if (next <= 0x10FFFF) {
            c[k][0] = next;
            c[k][1] = 0x10FFFF;
            k++;
        }
        memcpy(out, c, sizeof c);
        m = k;
    }
    if (m == 0) return fail(g, at, "character class matches nothing");
    gr_push_codepoints(g->b, r, alt, (const uint32_t(*)[2])out, m);
    return 0;
}

static int parse_literal(gp *g, int r, int alt) {
    const char *at = g->p++;
    for (;;) {
        if (g->p >= g->end || *g->p == '\n') return fail(g, at, "string literal is not closed with \"");
        if (*g->p == '"') {
            g->p++;
            return 0;
        }
        uint32_t cp;
        if (read_char(g, &cp)) return -1;
        char buf[4];
        int n;
        if (cp < 0x80) { buf[0] = (char)cp; n = 1; }
        else if (cp < 0x800) { buf[0] = (char)(0xC0 | cp >> 6); buf[1] = (char)(0x80 | (cp & 63)); n = 2; }
        else if (cp < 0x10000) {
            buf[0] = (char)(0xE0 | cp >> 12); buf[1] = (char)(0x80 | ((cp >> 6) & 63)); buf[2] = (char)(0x80 | (cp & 63));
            n = 3;
        } else {
            buf[0] = (char)(0xF0 | cp >> 18); buf[1] = (char)(0x80 | ((cp >> 12) & 63));
            buf[2] = (char)(0x80 | ((cp >> 6) & 63)); buf[3] = (char)(0x80 | (cp & 63));
            n = 4;
        }
        gr_push_literal(g->b, r, alt, buf, (size_t)n);
    }
}

static int parse_alternates(gp *g, int r);

static void push(gp *g, int r, int alt, int type, int arg) {
    if (!g->b->oom) gr_seq_push(g->b, &g->b->rules[r].alts[alt], type, arg);
}

/* rule X ::= e X | empty, as an element */
static gr_elem star_of(gp *g, gr_elem e) {
    int s = gr_rule_new(g->b);
    gr_alt_new(g->b, s);
    gr_alt_new(g->b, s);
    push(g, s, 0, e.type, e.arg);
    push(g, s, 0, GR_RULE, s);
    return (gr_elem){GR_RULE, s};
}

static int parse_number(gp *g, int *v) {
    const char *at = g->p;
    long x = 0;
    if (g->p >= g->end || !isdigit((unsigned char)*g->p)) return fail(g, at, "expected a number in {m,n}");
    while (g->p < g->end && isdigit((unsigned char)*g->p)) {
        x = x * 10 + (*g->p++ - '0');
        if (x > GBNF_MAX_REPEAT) return fail(g, at, "repetition count above 10000");
    }
    *v = (int)x;
    return 0;
}

/* Applies a quantifier to the elements appended since index k. */
static int quantify(gp *g, int r, int alt, int k) {
    const char *at = g->p;
    char q = *g->p;
    int lo, hi; /* hi -1: unbounded */
    if (q == '*') { lo = 0; hi = -1; g->p++; }
    else if (q == '+') { lo = 1; hi = -1; g->p++; }
    else if (q == '?') { lo = 0; hi = 1; g->p++; }
    else {
        g->p++;
        skip_space(g);
        if (parse_number(g, &lo)) return -1;
        skip_space(g);
        hi = lo;
        if (g->p < g->end && *g->p == ',') {
            g->p++;
            skip_space(g);
            hi = -1;
            if (g->p < g->end && *g->p != '}' && parse_number(g, &hi)) return -1;
            skip_space(g);
        }
        if (g->p >= g->end || *g->p != '}') return fail(g, at, "expected } to close {m,n}");
        g->p++;
        if (hi >= 0 && hi < lo) return fail(g, at, "{m,n} with n below m");
    }
    if (g->b->oom) return 0;
    gr_seq *s = &g->b->rules[r].alts[alt];
    gr_elem e;
    if (s->n - k == 1) {
        e = s->e[k];
    } else {
        int w = gr_rule_new(g->b);
        gr_alt_new(g->b, w);
        s = &g->b->rules[r].alts[alt];
        for (int i = k; i < s->n && !g->b->oom; i++) {
            gr_elem x = g->b->rules[r].alts[alt].e[i];
            push(g, w, 0, x.type, x.arg);
        }
        e = (gr_elem){GR_RULE, w};
    }
    if (g->b->oom) return 0;
    g->b->rules[r].alts[alt].n = k;
    for (int i = 0; i < lo; i++) push(g, r, alt, e.type, e.arg);
    if (hi < 0) {
        gr_elem st = star_of(g, e);
        push(g, r, alt, st.type, st.arg);
    } else if (hi > lo) {
        /* O1 ::= e | empty; Ok ::= e O(k-1) | empty */
        int prev = -1;
        for (int i = 0; i < hi - lo && !g->b->oom; i++) {
            int o = gr_rule_new(g->b);
            gr_alt_new(g->b, o);
            gr_alt_new(g->b, o);
            push(g, o, 0, e.type, e.arg);
            if (prev >= 0) push(g, o, 0, GR_RULE, prev);
            prev = o;
        }
        push(g, r, alt, GR_RULE, prev);
    }
    return 0;
}

static int parse_sequence(gp *g, int r, int alt) {
    for (;;) {
        skip_space(g);
        if (g->p >= g->end || *g->p == '|' || *g->p == ')' || at_rule_start(g)) return 0;
        if (g->b->oom) return 0;
        int k = g->b->rules[r].alts[alt].n;
        const char *at = g->p;
        char c = *g->p;
        if (c == '"') {
            if (parse_literal(g, r, alt)) return -1;
        } else if (c == '[') {
            if (parse_class(g, r, alt)) return -1;
        } else if (c == '.') {
            g->p++;
            const uint32_t any[1][2] = {{0, 0x10FFFF}};
            gr_push_codepoints(g->b, r, alt, any, 1);
        } else if (c == '(') {
            g->p++;
            if (++g->depth > GBNF_MAX_DEPTH) return fail(g, at, "groups nested too deeply");
            int grp = gr_rule_new(g->b);
            if (parse_alternates(g, grp)) return -1;
            g->depth--;
            skip_space(g);
            if (g->p >= g->end || *g->p != ')') return fail(g, at, "group is not closed with )");
            g->p++;
            push(g, r, alt, GR_RULE, grp);
        } else if (is_name_char(c)) {
            const char *n0 = g->p;
            while (g->p < g->end && is_name_char(*g->p)) g->p++;
            int line, col;
            line = line_of(g, n0, &col);
            int ref = gr_rule_named(g->b, n0, (size_t)(g->p - n0), line);
            push(g, r, alt, GR_RULE, ref);
        } else if (c == '<') {
            return fail(g, at, "token references <...> are not supported");
        } else {
            return fail(g, at, "unexpected character (expected a literal, [class], rule name, ( or .)");
        }
        if (g->p < g->end && (*g->p == '*' || *g->p == '+' || *g->p == '?' || *g->p == '{')) {
            if (g->b->oom) return 0;
            if (g->b->rules[r].alts[alt].n == k) return fail(g, g->p, "quantifier after an empty literal");
            if (quantify(g, r, alt, k)) return -1;
        }
    }
}

static int parse_alternates(gp *g, int r) {
    for (;;) {
        gr_alt_new(g->b, r);
        if (g->b->oom) return 0;
        if (parse_sequence(g, r, g->b->rules[r].n_alts - 1)) return -1;
        if (g->p < g->end && *g->p == '|') {
            g->p++;
            continue;
        }
        return 0;
    }
}

kvlm_grammar *gr_parse_gbnf(const char *text, size_t len, const char *what, kvlm_error *err) {
    gr_builder b;
    gr_builder_init(&b);
    gp g = {.s = text, .end = text + len, .p = text, .what = what, .b = &b, .err = err};
    if (!text) {
        kvlm_error_set(err, KVLM_ERR_ARG, "%s: no grammar text", what);
        return NULL;
    }
    int root = -1;
    for (;;) {
        skip_space(&g);
        if (g.p >= g.end) break;
        const char *at = g.p;
        if (!at_rule_start(&g)) {
            fail(&g, at, "expected a rule definition (name ::= ...)");
            break;
        }
        const char *n0 = g.p;
        while (g.p < g.end && is_name_char(*g.p)) g.p++;
        int col, line = line_of(&g, n0, &col);
        int r = gr_rule_named(&b, n0, (size_t)(g.p - n0), line);
        if (b.oom) break;
        if (b.rules[r].defined) {
            fail(&g, at, "rule defined twice");
            break;
        }
        b.rules[r].defined = 1;
        b.rules[r].line = line;
        if (g.p - n0 == 4 && !memcmp(n0, "root", 4)) root = r;
        skip_space(&g);
        g.p += 3; /* "::=", checked by at_rule_start */
        if (parse_alternates(&g, r)) break;
        if (g.p < g.end && *g.p == ')') {
            fail(&g, g.p, "unbalanced )");
            break;
        }
    }
    kvlm_grammar *out = NULL;
    if (!g.failed) {
        if (root < 0 && !b.oom) kvlm_error_set(err, KVLM_ERR_ARG, "%s: no rule named \"root\"", what);
        else out = gr_builder_finish(&b, root, what, err);
    }
    gr_builder_free(&b);
    return out;
}

kvlm_grammar *kvlm_grammar_from_gbnf(const char *text, size_t len, kvlm_error *err) {
    return gr_parse_gbnf(text, len, "gbnf", err);
}
