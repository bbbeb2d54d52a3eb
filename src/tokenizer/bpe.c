/*
 * Byte-pair merges (see tokenizer/bpe.h for the semantics).
 *
 * The rank table is open addressing with linear probing over 16-byte slots
 * (key, rank, result), at most half full, so a lookup is one or two cache
 * lines. Both merge loops work in "rounds": a round picks the lowest rank
 * present and merges all of its occurrences left to right before any pair
 * created by those merges is considered, exactly as the reference does.
 * No function here allocates except the scratch growth of the heap path.
 */
#include "tokenizer/bpe.h"

#include <stdlib.h>
#include <string.h>

#define TOK_EMPTY_KEY UINT64_MAX

int tok_merges_init(tok_merge_table *m, size_t expected) {
    memset(m, 0, sizeof *m);
    size_t cap = 64;
    while (cap < expected * 2 + 2) cap *= 2;
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return -1;
    for (size_t i = 0; i < cap; i++) m->slots[i].key = TOK_EMPTY_KEY;
    m->mask = cap - 1;
    return 0;
}

void tok_merges_free(tok_merge_table *m) {
    free(m->slots);
    free(m->by_rank);
    memset(m, 0, sizeof *m);
}

static int merges_grow(tok_merge_table *m) {
    size_t cap = (m->mask + 1) * 2;
    tok_merge_slot *slots = malloc(cap * sizeof *slots);
    if (!slots) return -1;
    for (size_t i = 0; i < cap; i++) slots[i].key = TOK_EMPTY_KEY;
    for (size_t i = 0; i <= m->mask; i++) {
        if (m->slots[i].key == TOK_EMPTY_KEY) continue;
        size_t j = (size_t)((m->slots[i].key * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
        while (slots[j].key != TOK_EMPTY_KEY) j = (j + 1) & (cap - 1);
        slots[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = slots;
    m->mask = cap - 1;
    return 0;
}

int tok_merges_add(tok_merge_table *m, int32_t a, int32_t b, int32_t result) {
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 1024;
        tok_merge *p = realloc(m->by_rank, cap * sizeof *p);
        if (!p) return -1;
        m->by_rank = p;
        m->cap = cap;
    }
    if ((m->used + 1) * 2 > m->mask + 1 && merges_grow(m) != 0) return -1;
    uint32_t rank = (uint32_t)m->n;
    m->by_rank[m->n++] = (tok_merge){a, b, result};
    uint64_t key = tok_pair_key(a, b);
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & m->mask;
    while (m->slots[i].key != TOK_EMPTY_KEY && m->slots[i].key != key) i = (i + 1) & m->mask;
    if (m->slots[i].key == TOK_EMPTY_KEY) m->used++;
    m->slots[i] = (tok_merge_slot){key, rank, result};   /* last rank wins */
    return 0;
}

/* ------------------------------------------------------------ array scan */

size_t tok_bpe_scan(const tok_merge_table *m, int32_t *ids, size_t n) {
    if (n < 2) return n;
    uint32_t rk_small[TOK_BPE_SCAN_MAX];
    uint32_t src_small[TOK_BPE_SCAN_MAX];
    uint32_t *rk = rk_small, *src = src_small;
    if (n > TOK_BPE_SCAN_MAX) {
        rk = malloc(n * sizeof *rk);
        src = malloc(n * sizeof *src);
        if (!rk || !src) { free(rk); free(src); return (size_t)-1; }
    }
    /* rk[k]: rank of the pair (ids[k], ids[k+1]). */
    for (size_t k = 0; k + 1 < n; k++) rk[k] = tok_merges_rank(m, ids[k], ids[k + 1]);
    for (;;) {
        uint32_t best = TOK_NO_RANK;
        for (size_t k = 0; k + 1 < n; k++)
            if (rk[k] < best) best = rk[k];
        if (best == TOK_NO_RANK) break;
        int32_t merged = m->by_rank[best].result;
        /* One left-to-right pass. A rank names one pair, so rk[k] == best
         * means ids[k], ids[k+1] is the pair. src[w] is the old index of
         * an unchanged symbol, or UINT32_MAX for a merged one. */
        size_t w = 0;
        for (size_t k = 0; k < n;) {
            if (k + 1 < n && rk[k] == best) {
                ids[w] = merged;
                src[w++] = UINT32_MAX;
                k += 2;
            } else {
                ids[w] = ids[k];
                src[w++] = (uint32_t)k;
                k += 1;
            }
        }
        /* New ranks: a pair of two unchanged, still adjacent symbols keeps
         * its old rank (read before it is overwritten: src[k] >= k). */
        for (size_t k = 0; k + 1 < w; k++) {
            if (src[k] != UINT32_MAX && src[k + 1] != UINT32_MAX) rk[k] = rk[src[k]];
            else rk[k] = tok_merges_rank(m, ids[k], ids[k + 1]);
        }
        n = w;
        if (n < 2) break;
    }
    if (rk != rk_small) { free(rk); free(src); }
    return n;
}

/* ------------------------------------------------------------- heap path */

void tok_heap_push(uint64_t *h, size_t *len, uint64_t v) {
    size_t i = (*len)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= v) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

uint64_t tok_heap_pop(uint64_t *h, size_t *len) {
    uint64_t top = h[0], v = h[--(*len)];
    size_t i = 0, n = *len;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && h[c + 1] < h[c]) c++;
        if (v <= h[c]) break;
        h[i] = h[c];
        i = c;
    }
    if (n) h[i] = v;
    return top;
}

int tok_bpe_scratch_reserve(tok_bpe_scratch *s, size_t n) {
    if (n <= s->cap) return 0;
    size_t cap = s->cap ? s->cap : 256;
    while (cap < n) cap *= 2;
    int32_t *id = realloc(s->id, cap * sizeof *id);
    if (id) s->id = id;
    int32_t *prev = realloc(s->prev, cap * sizeof *prev);
    if (prev) s->prev = prev;
    int32_t *next = realloc(s->next, cap * sizeof *next);
    if (next) s->next = next;
    uint32_t *touched = realloc(s->touched, cap * sizeof *touched);
    if (touched) s->touched = touched;
    /* Each round pushes at most two pairs per merge it made, and there are
     * at most n - 1 merges in all, on top of the n - 1 initial pairs. */
    uint64_t *heap = realloc(s->heap, 3 * cap * sizeof *heap);
    if (heap) s->heap = heap;
    if (!id || !prev || !next || !touched || !heap) return -1;
    s->cap = cap;
    s->heap_cap = 3 * cap;
    return 0;
}

void tok_bpe_scratch_free(tok_bpe_scratch *s) {
    free(s->id);
    free(s->prev);
    free(s->next);
    free(s->heap);
    free(s->touched);
    memset(s, 0, sizeof *s);
}

static void push_pair(const tok_merge_table *m, tok_bpe_scratch *s, size_t *hlen, int32_t left) {
    int32_t right = s->next[left];
    if (right < 0) return;
    uint32_t r = tok_merges_rank(m, s->id[left], s->id[right]);
    if (r != TOK_NO_RANK) tok_heap_push(s->heap, hlen, ((uint64_t)r << 32) | (uint32_t)left);
}

/* Is the heap entry (rank r at node left) still an occurrence of merge r? */
static int entry_valid(const tok_merge_table *m, const tok_bpe_scratch *s, uint32_t r, int32_t left) {
    int32_t right = s->next[left];
    if (s->id[left] < 0 || right < 0) return 0;
    return s->id[left] == m->by_rank[r].a && s->id[right] == m->by_rank[r].b;
}

size_t tok_bpe_heap(const tok_merge_table *m, int32_t *ids, size_t n, tok_bpe_scratch *s) {
    if (n < 2) return n;
    if (n > INT32_MAX || tok_bpe_scratch_reserve(s, n) != 0) return (size_t)-1;
    size_t hlen = 0;
    for (size_t k = 0; k < n; k++) {
        s->id[k] = ids[k];
        s->prev[k] = (int32_t)k - 1;
        s->next[k] = k + 1 < n ? (int32_t)k + 1 : -1;
    }
    for (size_t k = 0; k + 1 < n; k++) push_pair(m, s, &hlen, (int32_t)k);
    while (hlen > 0) {
        uint64_t e = tok_heap_pop(s->heap, &hlen);
        uint32_t r = (uint32_t)(e >> 32);
        if (!entry_valid(m, s, r, (int32_t)(uint32_t)e)) continue;
        /* A round: every valid entry of rank r, in position order (the heap
         * orders equal ranks by node index, which is text order). */
        size_t n_touched = 0;
        for (;;) {
            int32_t left = (int32_t)(uint32_t)e;
            if (entry_valid(m, s, r, left)) {
                int32_t right = s->next[left];
                s->id[left] = m->by_rank[r].result;
                s->id[right] = -1;
                s->next[left] = s->next[right];
                if (s->next[right] >= 0) s->prev[s->next[right]] = left;
                s->touched[n_touched++] = (uint32_t)left;
            }
            if (hlen == 0 || (uint32_t)(s->heap[0] >> 32) != r) break;
            e = tok_heap_pop(s->heap, &hlen);
        }
        /* Pairs created by this round enter the heap only now, so none of
         * them can be merged before the round is over. */
        for (size_t k = 0; k < n_touched; k++) {
            int32_t t = (int32_t)s->touched[k];
            if (s->id[t] < 0) continue;
            if (s->prev[t] >= 0) push_pair(m, s, &hlen, s->prev[t]);
            push_pair(m, s, &hlen, t);
        }
    }
    size_t w = 0;
    for (int32_t k = 0; k >= 0; k = s->next[k]) ids[w++] = s->id[k];
    return w;
}

size_t tok_bpe(const tok_merge_table *m, int32_t *ids, size_t n, tok_bpe_scratch *scratch) {
    if (n <= TOK_BPE_SCAN_MAX) return tok_bpe_scan(m, ids, n);
    return tok_bpe_heap(m, ids, n, scratch);
}

/* -------------------------------------------------- one pair at a time */

size_t tok_bpe_one_scan(const tok_merge_table *m, int32_t *ids, size_t n) {
    if (n < 2) return n;
    uint32_t rk_small[TOK_BPE_SCAN_MAX];
    uint32_t *rk = rk_small;
    if (n > TOK_BPE_SCAN_MAX && !(rk = malloc(n * sizeof *rk))) return (size_t)-1;
    for (size_t k = 0; k + 1 < n; k++) rk[k] = tok_merges_rank(m, ids[k], ids[k + 1]);
    while (n > 1) {
        uint32_t best = TOK_NO_RANK;
        size_t at = 0;
        for (size_t k = 0; k + 1 < n; k++)
            if (rk[k] < best) { best = rk[k]; at = k; }   /* strict: the leftmost */
        if (best == TOK_NO_RANK) break;
        ids[at] = m->by_rank[best].result;
        memmove(ids + at + 1, ids + at + 2, (n - at - 2) * sizeof *ids);
        if (at + 2 < n) memmove(rk + at + 1, rk + at + 2, (n - at - 3) * sizeof *rk);
        n--;
        if (at > 0) rk[at - 1] = tok_merges_rank(m, ids[at - 1], ids[at]);
        if (at + 1 < n) rk[at] = tok_merges_rank(m, ids[at], ids[at + 1]);
    }
    if (rk != rk_small) free(rk);
    return n;
}

size_t tok_bpe_one_heap(const tok_merge_table *m, int32_t *ids, size_t n, tok_bpe_scratch *s) {
    if (n < 2) return n;
    if (n > INT32_MAX || tok_bpe_scratch_reserve(s, n) != 0) return (size_t)-1;
    size_t hlen = 0;
    for (size_t k = 0; k < n; k++) {
        s->id[k] = ids[k];
        s->prev[k] = (int32_t)k - 1;
        s->next[k] = k + 1 < n ? (int32_t)k + 1 : -1;
    }
    for (size_t k = 0; k + 1 < n; k++) push_pair(m, s, &hlen, (int32_t)k);
    /* Each merge pushes at most two entries and there are at most n - 1
     * merges, so 3n entries always suffice. Equal ranks pop in node order,
     * which is text order: the leftmost occurrence first. */
    while (hlen > 0) {
        uint64_t e = tok_heap_pop(s->heap, &hlen);
        uint32_t r = (uint32_t)(e >> 32);
        int32_t left = (int32_t)(uint32_t)e;
        if (!entry_valid(m, s, r, left)) continue;
        int32_t right = s->next[left];
        s->id[left] = m->by_rank[r].result;
        s->id[right] = -1;
        s->next[left] = s->next[right];
        if (s->next[right] >= 0) s->prev[s->next[right]] = left;
        if (s->prev[left] >= 0) push_pair(m, s, &hlen, s->prev[left]);
        push_pair(m, s, &hlen, left);
    }
    size_t w = 0;
    for (int32_t k = 0; k >= 0; k = s->next[k]) ids[w++] = s->id[k];
    return w;
}

size_t tok_bpe_one(const tok_merge_table *m, int32_t *ids, size_t n, tok_bpe_scratch *scratch) {
    if (n <= TOK_BPE_SCAN_MAX) return tok_bpe_one_scan(m, ids, n);
    return tok_bpe_one_heap(m, ids, n, scratch);
}
