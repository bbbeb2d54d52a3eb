/*
 * Byte-pair merges: the table of ranked merges (token a, token b) -> merged
 * token, and the merge loop that turns one pre-token's bytes into token ids.
 *
 * Two semantics. "Rounds" (tok_bpe) are those of the original GPT-2
 * encoder: repeatedly take the adjacent pair of lowest rank and merge every
 * occurrence of it, left to right and without overlap, until no adjacent
 * pair has a rank. "One at a time" (tok_bpe_one) is Hugging Face's and
 * llama.cpp's: repeatedly merge the leftmost occurrence of the pair of
 * lowest rank, so a pair created by a merge can be merged before the other
 * occurrences of the pair that created it. They differ only for merge lists
 * where a merge outranks the merge that made one of its parts (never the
 * case for a trained list). A pair listed twice keeps its last rank. Token
 * ids stand for the strings of the vocabulary, which is a bijection, so
 * comparing ids is comparing strings.
 *
 * Two implementations of that loop give identical results (the tests check
 * it): a scan over small arrays for short words, and a linked list with a
 * binary heap of (rank, position) for long ones, which keeps a megabyte-long
 * run of punctuation O(n log n) instead of O(n^2).
 * This file knows nothing about files, pre-tokenisation or caching.
 */
#ifndef KVLM_TOKENIZER_BPE_H
#define KVLM_TOKENIZER_BPE_H

#include <stddef.h>
#include <stdint.h>

#define TOK_NO_RANK UINT32_MAX
/* Words up to this many bytes use the array scan; longer ones the heap. */
#define TOK_BPE_SCAN_MAX 64

typedef struct tok_merge {
    int32_t a, b, result;
} tok_merge;

typedef struct tok_merge_slot {
    uint64_t key;       /* (a << 32) | b, or TOK_EMPTY_KEY */
    uint32_t rank;
    int32_t result;
} tok_merge_slot;

typedef struct tok_merge_table {
    tok_merge_slot *slots;
    size_t mask;        /* capacity - 1; capacity is a power of two */
    size_t used;
    tok_merge *by_rank; /* every merge in file order; index = rank */
    size_t n, cap;
} tok_merge_table;

/* Scratch buffers for the heap path, owned by one encode call. */
typedef struct tok_bpe_scratch {
    int32_t *id, *prev, *next;
    uint64_t *heap;
    uint32_t *touched;
    size_t cap, heap_cap;
} tok_bpe_scratch;

int tok_merges_init(tok_merge_table *m, size_t expected);
void tok_merges_free(tok_merge_table *m);
/* Appends a merge with the next rank. Returns 0 or -1 (out of memory). */
int tok_merges_add(tok_merge_table *m, int32_t a, int32_t b, int32_t result);

static inline uint64_t tok_pair_key(int32_t a, int32_t b) {
    return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
}

/* Rank of the pair (a, b), or TOK_NO_RANK. */
static inline uint32_t tok_merges_rank(const tok_merge_table *m, int32_t a, int32_t b) {
    uint64_t key = tok_pair_key(a, b);
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & m->mask;
    for (;;) {
        const tok_merge_slot *s = &m->slots[i];
        if (s->key == key) return s->rank;
        if (s->key == UINT64_MAX) return TOK_NO_RANK;
        i = (i + 1) & m->mask;
    }
}

/* Merges ids[0..n) (the byte tokens of one word) in place and returns the
 * new count. Picks the scan or the heap by length; scratch is used (and
 * grown) only by the heap. Returns (size_t)-1 if scratch cannot grow. */
size_t tok_bpe(const tok_merge_table *m, int32_t *ids, size_t n, tok_bpe_scratch *scratch);
/* The two implementations, exposed for the equivalence test. */
size_t tok_bpe_scan(const tok_merge_table *m, int32_t *ids, size_t n);
size_t tok_bpe_heap(const tok_merge_table *m, int32_t *ids, size_t n, tok_bpe_scratch *scratch);
/* The same for one-at-a-time semantics. */
size_t tok_bpe_one(const tok_merge_table *m, int32_t *ids, size_t n, tok_bpe_scratch *scratch);
size_t tok_bpe_one_scan(const tok_merge_table *m, int32_t *ids, size_t n);
size_t tok_bpe_one_heap(const tok_merge_table *m, int32_t *ids, size_t n, tok_bpe_scratch *scratch);
/* Heap primitives over (key << 32 | position) entries, shared with the
 * SentencePiece score merge. */
void tok_heap_push(uint64_t *h, size_t *len, uint64_t v);
uint64_t tok_heap_pop(uint64_t *h, size_t *len);
/* Makes room for n symbols (and 3n heap entries) in scratch. */
int tok_bpe_scratch_reserve(tok_bpe_scratch *s, size_t n);
void tok_bpe_scratch_free(tok_bpe_scratch *s);

#endif
