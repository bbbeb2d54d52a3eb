/*
 * The Jinja lexer: template source to tokens, with jinja2's whitespace
 * handling as Hugging Face configures it (trim_blocks, lstrip_blocks,
 * keep_trailing_newline off) and the "-" / "+" markers of {%- -%} {{- -}}
 * {#- -#}. Comments vanish here. See lex.h.
 *
 * Newlines are normalised first (\r\n and \r become \n, as jinja2 does) and
 * one trailing newline of the template is dropped. Line and column of each
 * token are counted on that normalised text.
 */
#include "app/template/lex.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


typedef struct lexer {
    const char *s;
    size_t n, pos;
    size_t line_at; /* offset of the start of the current line */
    int line;
    size_t counted; /* offset up to which lines were counted */
    tpl_arena *a;
    tpl_tokens *out;
    kvlm_error *err;
} lexer;

static void where(lexer *L, size_t off, int *line, int *col) {
    if (off < L->counted) L->counted = 0, L->line = 1, L->line_at = 0; /* an error at an earlier place */
    for (; L->counted < off; L->counted++)
        if (L->s[L->counted] == '\n') L->line++, L->line_at = L->counted + 1;
    *line = L->line;
    *col = (int)tv_utf8_len(L->s + L->line_at, off - L->line_at) + 1;
}

static int fail(lexer *L, size_t off, const char *msg) {
    int line, col;
    where(L, off, &line, &col);
    return kvlm_error_set(L->err, KVLM_ERR_FORMAT, "template line %d, column %d: %s", line, col, msg);
}

static tpl_token *push(lexer *L, int kind, size_t off, const char *p, size_t n) {
    tpl_tokens *t = L->out;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 256;
        tpl_token *v = tpl_alloc(L->a, cap * sizeof *v);
        if (!v) return NULL;
        if (t->n) memcpy(v, t->v, t->n * sizeof *v);
        t->v = v, t->cap = cap;
    }
    tpl_token *k = &t->v[t->n++];
    memset(k, 0, sizeof *k);
    k->kind = kind;
    k->p = p, k->n = n;
    where(L, off, &k->line, &k->col);
    return k;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_name0(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int is_name(char c) { return is_name0(c) || is_digit(c); }

static int put_utf8(char *o, unsigned long cp) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xC0 | (cp >> 6)), o[1] = (char)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)), o[1] = (char)(0x80 | ((cp >> 6) & 0x3F)), o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)), o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)), o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

static int hexval(char c) {
    return is_digit(c) ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
}

/* A string literal at L->pos (quote included), unescaped as Python's
 * unicode-escape codec does; unknown escapes keep their backslash. */
static int lex_string(lexer *L) {
    size_t start = L->pos;
    char q = L->s[L->pos++];
    size_t end = L->pos;
    while (end < L->n && L->s[end] != q) end += L->s[end] == '\\' ? 2 : 1;
    if (end >= L->n) return fail(L, start, "unterminated string literal");
    char *o = tpl_alloc(L->a, end - L->pos + 1);
    if (!o) return fail(L, start, "template too large");
    size_t k = 0;
    for (size_t i = L->pos; i < end; i++) {
        char c = L->s[i];
        if (c != '\\') {
            o[k++] = c;
            continue;
        }
        char e = L->s[++i];
        int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        const char *simple = strchr("ntr\\'\"abfv0\n", e);
        if (digits) {
            unsigned long cp = 0;
            int ok = i + (size_t)digits < end;
            for (int d = 1; ok && d <= digits; d++) {
                int h = hexval(L->s[i + d]);
                if (h < 0) ok = 0;
                else cp = cp * 16 + (unsigned long)h;
            }
            if (!ok || cp > 0x10FFFF) return fail(L, i - 1, "truncated \\x, \\u or \\U escape");
            k += (size_t)put_utf8(o + k, cp);
            i += (size_t)digits;
        } else if (simple && e) {
            static const char from[] = "ntr\\'\"abfv0", to[] = "\n\t\r\\'\"\a\b\f\v";
            if (e == '\n') continue; /* backslash-newline: nothing */
            if (e == '0') {
                o[k++] = 0;
                continue;
            }
            o[k++] = to[strchr(from, e) - from];
        } else {
            o[k++] = '\\';
            o[k++] = e;
        }
    }
    tpl_token *t = push(L, TK_STR, start, o, k);
    if (!t) return fail(L, start, "template too large");
    L->pos = end + 1;
    return 0;
}

static int lex_number(lexer *L) {
    size_t start = L->pos, i = L->pos;
    char buf[64];
    size_t k = 0;
    int is_float = 0;
    while (i < L->n && (is_digit(L->s[i]) || (L->s[i] == '_' && i + 1 < L->n && is_digit(L->s[i + 1])))) {
        if (L->s[i] != '_' && k < 60) buf[k++] = L->s[i];
        i++;
    }
    if (i + 1 < L->n && L->s[i] == '.' && is_digit(L->s[i + 1]) && !(start > 0 && L->s[start - 1] == '.')) {
        is_float = 1;
        buf[k++] = L->s[i++];
        while (i < L->n && (is_digit(L->s[i]) || L->s[i] == '_'))
            if (L->s[i++] != '_' && k < 60) buf[k++] = L->s[i - 1];
    }
    if (i < L->n && (L->s[i] == 'e' || L->s[i] == 'E')) {
        size_t j = i + 1;
        if (j < L->n && (L->s[j] == '+' || L->s[j] == '-')) j++;
        if (j < L->n && is_digit(L->s[j])) {
            is_float = 1;
            while (i < j && k < 60) buf[k++] = L->s[i++];
            while (i < L->n && is_digit(L->s[i]))
                if (k < 60) buf[k++] = L->s[i++];
                else i++;
        }
    }
    buf[k] = 0;
    tpl_token *t = push(L, is_float ? TK_FLOAT : TK_INT, start, L->s + start, i - start);
    if (!t) return fail(L, start, "template too large");
    if (k >= 60) return fail(L, start, "number literal longer than 59 digits");
    if (is_float) t->f = strtod(buf, NULL);
    else {
        errno = 0;
        t->i = strtoll(buf, NULL, 10);
        if (errno == ERANGE) return fail(L, start, "integer literal out of range (64-bit integers only)");
    }
    L->pos = i;
    return 0;
}

static const char *const ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "/", "*", "%", "~", "[", "]",
                                  "(",  ")",  "{",  "}",  "<",  ">",  "=", ".", ":", "|", ",", ";", NULL};

/* Tokens of one {{ }} or {% %} up to its end marker. kind is '{' or '%'. */
static int lex_tag(lexer *L, char kind, size_t open, int *line_starting) {
    char stack[64]; /* closing brackets expected, as jinja2's lexer checks them */
    int depth = 0;
    for (;;) {
        while (L->pos < L->n && is_space(L->s[L->pos])) L->pos++;
        if (L->pos >= L->n)
            return fail(L, open, kind == '%' ? "unexpected end of template: '{%' is never closed by '%}'"
                                             : "unexpected end of template: '{{' is never closed by '}}'");
        const char *p = L->s + L->pos;
        size_t left = L->n - L->pos;
        char c1 = kind == '%' ? '%' : '}';
        if ((p[0] == '-' || p[0] == '+') && left >= 3 && p[1] == c1 && p[2] == '}' && (kind == '%' || p[0] == '-')) {
            if (!push(L, kind == '%' ? TK_BLOCK_END : TK_VAR_END, L->pos, p, 3)) return fail(L, L->pos, "too large");
            L->pos += 3;
            if (p[0] == '-') {
                while (L->pos < L->n && is_space(L->s[L->pos])) L->pos++;
            }
            *line_starting = L->s[L->pos - 1] == '\n';
            return 0;
        }
        if (left >= 2 && p[0] == c1 && p[1] == '}') {
            if (!push(L, kind == '%' ? TK_BLOCK_END : TK_VAR_END, L->pos, p, 2)) return fail(L, L->pos, "too large");
            L->pos += 2;
            if (kind == '%' && L->pos < L->n && L->s[L->pos] == '\n') L->pos++; /* trim_blocks */
            *line_starting = L->s[L->pos - 1] == '\n';
            return 0;
        }
        if (p[0] == '"' || p[0] == '\'') {
            if (lex_string(L)) return -1;
            continue;
        }
        if (is_digit(p[0])) {
            if (lex_number(L)) return -1;
            continue;
        }
        if (is_name0(p[0])) {
            size_t i = L->pos;
            while (i < L->n && is_name(L->s[i])) i++;
            if (!push(L, TK_NAME, L->pos, p, i - L->pos)) return fail(L, L->pos, "template too large");
            L->pos = i;
            continue;
        }
        int found = 0;
        for (int o = 0; ops[o]; o++) {
            size_t m = strlen(ops[o]);
            if (left >= m && !memcmp(p, ops[o], m)) {
                char c = ops[o][0];
                if (m == 1 && (c == '(' || c == '[' || c == '{')) {
                    if (depth == 64) return fail(L, L->pos, "brackets nested too deeply");
                    stack[depth++] = c == '(' ? ')' : c == '[' ? ']' : '}';
                } else if (m == 1 && (c == ')' || c == ']' || c == '}')) {
                    char msg[64];
                    if (!depth || stack[depth - 1] != c) {
                        if (depth) snprintf(msg, sizeof msg, "unexpected '%c', expected '%c'", c, stack[depth - 1]);
                        else snprintf(msg, sizeof msg, "unexpected '%c'", c);
                        return fail(L, L->pos, msg);
                    }
                    depth--;
                }
                if (!push(L, TK_OP, L->pos, ops[o], m)) return fail(L, L->pos, "template too large");
                L->pos += m;
                found = 1;
                break;
            }
        }
        if (!found) {
            char msg[64];
            snprintf(msg, sizeof msg, "unexpected character '%c'", p[0]);
            return fail(L, L->pos, msg);
        }
    }
}

int tpl_lex(const char *src, size_t n, tpl_arena *a, tpl_tokens *out, kvlm_error *err) {
    /* normalise newlines, drop one trailing newline */
    char *s = tpl_alloc(a, n + 1);
    if (!s) return kvlm_error_set(err, KVLM_ERR_NOMEM, "template: out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (src[i] == '\r') {
            s[k++] = '\n';
            if (i + 1 < n && src[i + 1] == '\n') i++;
        } else s[k++] = src[i];
    }
    if (k && s[k - 1] == '\n') k--;
    memset(out, 0, sizeof *out);
    lexer L = {.s = s, .n = k, .line = 1, .a = a, .out = out, .err = err};
    int line_starting = 1;
    while (L.pos < L.n) {
        size_t t = L.pos;
        while (t + 1 < L.n && !(s[t] == '{' && (s[t + 1] == '{' || s[t + 1] == '%' || s[t + 1] == '#'))) t++;
        if (t + 1 >= L.n) {
            if (!push(&L, TK_TEXT, L.pos, s + L.pos, L.n - L.pos)) return fail(&L, L.pos, "template too large");
            break;
        }
        char kind = s[t + 1], sign = t + 2 < L.n && (s[t + 2] == '-' || s[t + 2] == '+') ? s[t + 2] : 0;
        size_t end = t;
        if (sign == '-') {
            while (end > L.pos && is_space(s[end - 1])) end--;
        } else if (sign != '+' && kind != '{') {
            size_t l = end;
            while (l > L.pos && s[l - 1] != '\n') l--;
            int nl = l > L.pos;
            size_t w = l;
            while (w < end && is_space(s[w])) w++;
            if ((nl || line_starting) && w == end) end = l;
        }
        if (end > L.pos && !push(&L, TK_TEXT, L.pos, s + L.pos, end - L.pos))
            return fail(&L, L.pos, "template too large");
        L.pos = t + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            const char *c = NULL;
            for (size_t i = L.pos; i + 1 < L.n; i++)
                if (s[i] == '#' && s[i + 1] == '}') {
                    c = s + i;
                    break;
                }
            if (!c) return fail(&L, t, "missing end of comment tag '#}'");
            size_t ce = (size_t)(c - s);
            L.pos = ce + 2;
            if (ce > t + 2 && s[ce - 1] == '-') {
                while (L.pos < L.n && is_space(s[L.pos])) L.pos++;
            } else if (!(ce > t + 2 && s[ce - 1] == '+') && L.pos < L.n && s[L.pos] == '\n') {
                L.pos++;
            }
            line_starting = s[L.pos - 1] == '\n';
            continue;
        }
        if (!push(&L, kind == '%' ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, t, s + t, L.pos - t))
            return fail(&L, t, "template too large");
        if (lex_tag(&L, kind, t, &line_starting)) return -1;
    }
    if (!push(&L, TK_EOF, L.n, s + L.n, 0)) return fail(&L, L.n, "template too large");
    return 0;
}
