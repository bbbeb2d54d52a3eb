/*
 * GPT-2 pre-tokeniser (see tokenizer/pretok.h for the pattern and the
 * character classes).
 *
 * Why a scanner and not PCRE2: the pattern only ever asks "which class is
 * this character", so a loop over classes is exact and several times faster
 * than a regex match per piece; and it gives invalid UTF-8 a defined meaning
 * (one "other" character per bad byte), which a UTF-mode regex cannot.
 * tests/test_tokenizer.c proves the equivalence: it compares the class of
 * every code point with PCRE2's, and the pieces of random valid text with a
 * PCRE2 match of the pattern.
 *
 * Invariant: tok_pretok_next always advances (returns > i), so a loop over
 * it terminates on any input. It does not allocate.
 */
#include "tokenizer/pretok.h"

#include <pthread.h>

/* Classes of the ASCII range, filled from the definition once. */
static uint8_t ascii_class[128];
/* Classes of the Basic Multilingual Plane, built from tok_uranges once;
 * code points above it use a binary search over the ranges. */
static uint8_t bmp_class[0x10000];
static pthread_once_t class_once = PTHREAD_ONCE_INIT;

static void build_class_tables(void) {
    for (int c = 0; c < 128; c++) {
        int cls = TOK_O;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) cls = TOK_L;
        else if (c >= '0' && c <= '9') cls = TOK_N;
        else if (c == ' ' || (c >= 0x09 && c <= 0x0D)) cls = TOK_S;
        ascii_class[c] = (uint8_t)cls;
        bmp_class[c] = (uint8_t)cls;
    }
    for (size_t k = 0; k < tok_n_uranges && tok_uranges[k].lo < 0x10000; k++) {
        uint32_t hi = tok_uranges[k].hi < 0xFFFF ? tok_uranges[k].hi : 0xFFFF;
        for (uint32_t cp = tok_uranges[k].lo; cp <= hi; cp++)
            bmp_class[cp] = (uint8_t)tok_uranges[k].cls;
    }
}

static inline void ensure_tables(void) { pthread_once(&class_once, build_class_tables); }

int tok_class_of(int32_t cp) {
    ensure_tables();
    if (cp < 0) return TOK_O;
    if (cp < 0x10000) return bmp_class[cp];
    size_t lo = 0, hi = tok_n_uranges;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (tok_uranges[mid].hi < (uint32_t)cp) lo = mid + 1;
        else hi = mid;
    }
    if (lo < tok_n_uranges && tok_uranges[lo].lo <= (uint32_t)cp) return (int)tok_uranges[lo].cls;
    return TOK_O;
}

static inline int is_cont(unsigned char c) { return (c & 0xC0) == 0x80; }

size_t tok_utf8_decode(const unsigned char *s, size_t n, int32_t *cp) {
    unsigned char c = s[0];
    *cp = -1;
    if (c < 0x80) { *cp = c; return 1; }
    if (c < 0xC2 || c > 0xF4) return 1;   /* continuation, overlong lead, > U+10FFFF */
    if (c < 0xE0) {
        if (n < 2 || !is_cont(s[1])) return 1;
        *cp = ((int32_t)(c & 0x1F) << 6) | (s[1] & 0x3F);
        return 2;
    }
    if (c < 0xF0) {
        unsigned char lo = c == 0xE0 ? 0xA0 : 0x80;   /* no overlongs */
        unsigned char hi = c == 0xED ? 0x9F : 0xBF;   /* no surrogates */
        if (n < 3 || s[1] < lo || s[1] > hi || !is_cont(s[2])) return 1;
        *cp = ((int32_t)(c & 0x0F) << 12) | ((int32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
        return 3;
    }
    unsigned char lo = c == 0xF0 ? 0x90 : 0x80;
    unsigned char hi = c == 0xF4 ? 0x8F : 0xBF;
    if (n < 4 || s[1] < lo || s[1] > hi || !is_cont(s[2]) || !is_cont(s[3])) return 1;
    *cp = ((int32_t)(c & 0x07) << 18) | ((int32_t)(s[1] & 0x3F) << 12) |
          ((int32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    return 4;
}

/* Class of the character at s[i] and its length in bytes. */
static inline int class_at(const unsigned char *s, size_t n, size_t i, size_t *len) {
    if (s[i] < 0x80) { *len = 1; return ascii_class[s[i]]; }
    int32_t cp;
    *len = tok_utf8_decode(s + i, n - i, &cp);
    if (cp < 0) return TOK_O;
    if (cp < 0x10000) return bmp_class[cp];
    return tok_class_of(cp);
}

/* End of the run of characters of class cls starting at i. */
static inline size_t run_end(const unsigned char *s, size_t n, size_t i, int cls) {
    while (i < n) {
        if (s[i] < 0x80) {
            if (ascii_class[s[i]] != cls) break;
            i++;
            continue;
        }
        size_t len;
        if (class_at(s, n, i, &len) != cls) break;
        i += len;
    }
    return i;
}

size_t tok_pretok_next(const unsigned char *s, size_t n, size_t i) {
    ensure_tables();
    /* 's|'t|'re|'ve|'m|'ll|'d (case-sensitive) */
    if (s[i] == '\'' && i + 1 < n) {
        unsigned char a = s[i + 1];
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if (i + 2 < n) {
            unsigned char b = s[i + 2];
            if ((a == 'r' || a == 'v') && b == 'e') return i + 3;
            if (a == 'l' && b == 'l') return i + 3;
        }
    }
    /* ' ?X+' for X in letters, numbers, other: a leading space joins the
     * run that follows it, whatever its class. */
    if (s[i] == ' ' && i + 1 < n) {
        size_t len;
        int cls = class_at(s, n, i + 1, &len);
        if (cls != TOK_S) return run_end(s, n, i + 1 + len, cls);
    }
    size_t len;
    int cls = class_at(s, n, i, &len);
    if (cls != TOK_S) return run_end(s, n, i + len, cls);
    /* \s+(?!\S): the whole run at the end of the text; otherwise the run
     * minus its last character, which then starts the next piece. A run of
     * one character before a non-space falls to \s+ and is taken whole. */
    size_t last = i, j = i + len;
    while (j < n) {
        size_t l;
        if (class_at(s, n, j, &l) != TOK_S) break;
        last = j;
        j += l;
    }
    if (j == n) return n;
    return last > i ? last : j;
}
