/*
 * Split pre-tokeniser by PCRE2 (see tokenizer/regex.h for the semantics).
 *
 * A match that is empty is not a piece: the search goes on one character
 * further, and the character joins the stretch between matches. Text that
 * is valid UTF-8 (the common case, checked first) is matched in place with
 * PCRE2_NO_UTF_CHECK; otherwise a copy is made in which each invalid byte b
 * is the 4-byte character U+F0000 + b, with a table from the copy's
 * offsets back to the original's. This file does not know about tokens.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/pretok.h"

const char tok_gpt2_pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

struct tok_regex {
    pcre2_code *code;
};

/* The pattern with \s -> \p{White_Space}, \S -> \P{White_Space}; other
 * escapes (and \Q...\E quoting) copied unchanged. Malloc'ed, NUL-ended. */
static char *translate(const char *p, size_t n) {
    size_t cap = n + 1, o = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (p[i] == '\\') cap += 16, i++;
    char *out = malloc(cap);
    if (!out) return NULL;
    int quoted = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '\\' || i + 1 == n) { out[o++] = p[i]; continue; }
        char c = p[i + 1];
        i++;
        if (quoted) {
            if (c == 'E') quoted = 0;
            out[o++] = '\\';
            out[o++] = c;
        } else if (c == 's' || c == 'S') {
            o += (size_t)sprintf(out + o, "\\%c{White_Space}", c == 's' ? 'p' : 'P');
        } else {
            if (c == 'Q') quoted = 1;
            out[o++] = '\\';
            out[o++] = c;
        }
    }
    out[o] = 0;
    return out;
}

tok_regex *tok_regex_compile(const char *pattern, size_t len, char *msg, size_t msgcap) {
    char *pat = translate(pattern, len);
    tok_regex *re = calloc(1, sizeof *re);
    if (!pat || !re) {
        free(pat);
        free(re);
        snprintf(msg, msgcap, "out of memory");
        return NULL;
    }
    int code;
    PCRE2_SIZE off;
    re->code = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &code,
                             &off, NULL);
    free(pat);
    if (!re->code) {
        PCRE2_UCHAR buf[256];
        pcre2_get_error_message(code, buf, sizeof buf);
        snprintf(msg, msgcap, "%s (near offset %zu of the translated pattern)", (char *)buf,
                 (size_t)off);
        free(re);
        return NULL;
    }
    /* Without a JIT (some platforms) the interpreter gives the same matches. */
    (void)pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE);
    return re;
}

void tok_regex_free(tok_regex *re) {
    if (!re) return;
    pcre2_code_free(re->code);
    free(re);
}

/* Length of the longest valid UTF-8 prefix of s[0..n). */
static size_t valid_prefix(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) { i++; continue; }
        int32_t cp;
        size_t l = tok_utf8_decode(s + i, n - i, &cp);
        if (cp < 0) break;
        i += l;
    }
    return i;
}

/* text with each invalid byte replaced by U+F0000 + byte; orig[k] is the
 * original offset of the copy's offset k at every character start and at
 * the end. */
static int substitute(const unsigned char *s, size_t n, unsigned char **out, size_t **orig,
                      size_t *out_n) {
    if (n > SIZE_MAX / 4 - 1) return -1;
    unsigned char *c = malloc(4 * n + 1);
    size_t *o = malloc((4 * n + 1) * sizeof *o);
    if (!c || !o) { free(c); free(o); return -1; }
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        int32_t cp;
        size_t l = tok_utf8_decode(s + i, n - i, &cp);
        o[k] = i;
        if (cp < 0) {
            uint32_t sub = 0xF0000u + s[i];
            c[k++] = (unsigned char)(0xF0 | (sub >> 18));
            c[k++] = (unsigned char)(0x80 | ((sub >> 12) & 0x3F));
            c[k++] = (unsigned char)(0x80 | ((sub >> 6) & 0x3F));
            c[k++] = (unsigned char)(0x80 | (sub & 0x3F));
            i += 1;
        } else {
            memcpy(c + k, s + i, l);
            k += l;
            i += l;
        }
    }
    o[k] = n;
    *out = c;
    *orig = o;
    *out_n = k;
    return 0;
}

static size_t char_len(const unsigned char *s, size_t n) {
    int32_t cp;
    return tok_utf8_decode(s, n, &cp);
}

int tok_regex_split(const tok_regex *re, const unsigned char *text, size_t n, tok_piece_fn fn,
                    void *ctx, char *msg, size_t msgcap) {
    if (n == 0) return 0;
    const unsigned char *s = text;
    unsigned char *conv = NULL;
    size_t *orig = NULL, sn = n;
    if (valid_prefix(text, n) != n) {
        if (substitute(text, n, &conv, &orig, &sn) != 0) {
            snprintf(msg, msgcap, "out of memory");
            return -1;
        }
        s = conv;
    }
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re->code, NULL);
    if (!md) {
        free(conv);
        free(orig);
        snprintf(msg, msgcap, "out of memory");
        return -1;
    }
    int rc = 0;
    size_t done = 0, at = 0;   /* pieces end at done; the search starts at at */
#define EMIT(a, b)                                                                   \
    do {                                                                             \
        size_t oa_ = orig ? orig[a] : (a), ob_ = orig ? orig[b] : (b);               \
        if (ob_ > oa_ && (rc = fn(ctx, text + oa_, ob_ - oa_)) != 0) goto out;       \
    } while (0)
    while (at < sn) {
        int m = pcre2_match(re->code, s, sn, at, PCRE2_NO_UTF_CHECK, md, NULL);
        if (m == PCRE2_ERROR_NOMATCH) break;
        if (m < 0) {
            PCRE2_UCHAR buf[256];
            pcre2_get_error_message(m, buf, sizeof buf);
            snprintf(msg, msgcap, "pattern match failed: %s", (char *)buf);
            rc = -1;
            goto out;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) {   /* empty match: not a piece */
            if (ms >= sn) break;
            at = ms + char_len(s + ms, sn - ms);
            continue;
        }
        EMIT(done, ms);
        EMIT(ms, me);
        done = at = me;
    }
    EMIT(done, sn);
#undef EMIT
out:
    pcre2_match_data_free(md);
    free(conv);
    free(orig);
    return rc;
}
