/*
 * NFC (see tokenizer/nfc.h). The tables are built once: a bitmap of the
 * code points NFC may change (those with a decomposition or a non-zero
 * combining class, the second characters of compositions, Hangul vowel and
 * trailing jamo), and the composition pairs sorted for binary search.
 * Invalid bytes are carried as 0x80000000 | byte: combining class 0, no
 * decomposition, never composed.
 */
#include "tokenizer/nfc.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/pretok.h"

#define NFC_BITMAP_LIMIT 0x30000u   /* the generator checks nothing above */
#define INVALID_BYTE 0x80000000u
#define SBASE 0xAC00u
#define LBASE 0x1100u
#define VBASE 0x1161u
#define TBASE 0x11A7u
#define LCOUNT 19u
#define VCOUNT 21u
#define TCOUNT 28u
#define SCOUNT (LCOUNT * VCOUNT * TCOUNT)

typedef struct pair { uint32_t a, b, c; } pair;

static uint8_t maybe[NFC_BITMAP_LIMIT / 8];
static pair *pairs;
static size_t n_pairs;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void mark(uint32_t cp) {
    if (cp < NFC_BITMAP_LIMIT) maybe[cp >> 3] |= (uint8_t)(1u << (cp & 7));
}

static int cmp_pair(const void *x, const void *y) {
    const pair *p = x, *q = y;
    if (p->a != q->a) return p->a < q->a ? -1 : 1;
    return p->b < q->b ? -1 : p->b > q->b;
}

static void init(void) {
    pairs = malloc(tok_nfc_n_decomp * sizeof *pairs);
    for (size_t i = 0; i < tok_nfc_n_decomp; i++) {
        const tok_nfc_decomp_entry *e = &tok_nfc_decomp[i];
        mark(e->cp);
        if (e->primary && pairs) {
            pairs[n_pairs++] = (pair){e->first, e->second, e->cp};
            mark(e->second);
        }
    }
    if (pairs) qsort(pairs, n_pairs, sizeof *pairs, cmp_pair);
    for (size_t i = 0; i < tok_nfc_n_ccc; i++)
        for (uint32_t cp = tok_nfc_ccc[i].lo; cp <= tok_nfc_ccc[i].hi; cp++) mark(cp);
    for (uint32_t cp = VBASE; cp < VBASE + VCOUNT; cp++) mark(cp);
    for (uint32_t cp = TBASE + 1; cp < TBASE + TCOUNT; cp++) mark(cp);
}

static unsigned ccc_of(uint32_t cp) {
    size_t lo = 0, hi = tok_nfc_n_ccc;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (tok_nfc_ccc[mid].hi < cp) lo = mid + 1;
        else hi = mid;
    }
    return lo < tok_nfc_n_ccc && tok_nfc_ccc[lo].lo <= cp ? tok_nfc_ccc[lo].ccc : 0;
}

static const tok_nfc_decomp_entry *find_decomp(uint32_t cp) {
    size_t lo = 0, hi = tok_nfc_n_decomp;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (tok_nfc_decomp[mid].cp < cp) lo = mid + 1;
        else hi = mid;
    }
    return lo < tok_nfc_n_decomp && tok_nfc_decomp[lo].cp == cp ? &tok_nfc_decomp[lo] : NULL;
}

/* Full canonical decomposition of cp appended at out[*m]. */
static void decompose(uint32_t cp, uint32_t *out, size_t *m) {
    if (cp >= SBASE && cp < SBASE + SCOUNT) {
        uint32_t s = cp - SBASE;
        out[(*m)++] = LBASE + s / (VCOUNT * TCOUNT);
        out[(*m)++] = VBASE + (s % (VCOUNT * TCOUNT)) / TCOUNT;
        if (s % TCOUNT) out[(*m)++] = TBASE + s % TCOUNT;
        return;
    }
    const tok_nfc_decomp_entry *e = cp < NFC_BITMAP_LIMIT ? find_decomp(cp) : NULL;
    if (!e) {
        out[(*m)++] = cp;
        return;
    }
    decompose(e->first, out, m);
    if (e->second) decompose(e->second, out, m);
}

/* The primary composite of a + b, or 0. */
static uint32_t compose(uint32_t a, uint32_t b) {
    if (a >= LBASE && a < LBASE + LCOUNT && b >= VBASE && b < VBASE + VCOUNT)
        return SBASE + ((a - LBASE) * VCOUNT + (b - VBASE)) * TCOUNT;
    if (a >= SBASE && a < SBASE + SCOUNT && (a - SBASE) % TCOUNT == 0 && b > TBASE &&
        b < TBASE + TCOUNT)
        return a + (b - TBASE);
    pair key = {a, b, 0};
    const pair *p = bsearch(&key, pairs, n_pairs, sizeof *pairs, cmp_pair);
    return p ? p->c : 0;
}

static size_t put_utf8(uint32_t cp, unsigned char *o) {
    if (cp & INVALID_BYTE) { o[0] = (unsigned char)cp; return 1; }
    if (cp < 0x80) { o[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

static int needs_work(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        if (s[i] < 0x80) { i++; continue; }
        int32_t cp;
        i += tok_utf8_decode(s + i, n - i, &cp);
        if (cp >= 0 && (uint32_t)cp < NFC_BITMAP_LIMIT && (maybe[cp >> 3] >> (cp & 7) & 1))
            return 1;
    }
    return 0;
}

int tok_nfc(const unsigned char *s, size_t n, unsigned char **buf, size_t *cap, size_t *out_n) {
    pthread_once(&once, init);
    if (!pairs) return -1;
    if (!needs_work(s, n)) return 0;
    if (n > SIZE_MAX / (4 * sizeof(uint32_t))) return -1;
    uint32_t *cps = malloc(4 * n * sizeof *cps);
    if (!cps) return -1;
    size_t m = 0;
    for (size_t i = 0; i < n;) {
        int32_t cp;
        size_t l = tok_utf8_decode(s + i, n - i, &cp);
        if (cp < 0) cps[m++] = INVALID_BYTE | s[i];
        else decompose((uint32_t)cp, cps, &m);
        i += l;
    }
    /* Canonical ordering: a stable sort of each run of non-starters. */
    for (size_t i = 1; i < m; i++) {
        unsigned c = (cps[i] & INVALID_BYTE) ? 0 : ccc_of(cps[i]);
        if (c == 0) continue;
        uint32_t x = cps[i];
        size_t j = i;
        while (j > 0 && !(cps[j - 1] & INVALID_BYTE) && ccc_of(cps[j - 1]) > c) {
            cps[j] = cps[j - 1];
            j--;
        }
        cps[j] = x;
    }
    /* Canonical composition. */
    if (m > 0) {
        size_t starter = 0, w = 1;
        unsigned last = (cps[0] & INVALID_BYTE) ? 0 : ccc_of(cps[0]);
        if (last != 0) last = 256;   /* no starter yet: nothing composes */
        for (size_t i = 1; i < m; i++) {
            uint32_t ch = cps[i];
            unsigned c = (ch & INVALID_BYTE) ? 0 : ccc_of(ch);
            uint32_t comp = 0;
            if ((last < c || last == 0) && !(ch & INVALID_BYTE) && !(cps[starter] & INVALID_BYTE))
                comp = compose(cps[starter], ch);
            if (comp && last != 256) {
                cps[starter] = comp;
                continue;
            }
            if (c == 0) {
                starter = w;
                last = 0;
            } else {
                last = c;
            }
            cps[w++] = ch;
        }
        m = w;
    }
    size_t need = 4 * m + 1;
    if (need > *cap) {
        unsigned char *p = realloc(*buf, need);
        if (!p) { free(cps); return -1; }
        *buf = p;
        *cap = need;
    }
    size_t o = 0;
    for (size_t i = 0; i < m; i++) o += put_utf8(cps[i], *buf + o);
    free(cps);
    *out_n = o;
    return o == n && memcmp(*buf, s, n) == 0 ? 0 : 1;
}
