/*
 * The matcher's layout, shared by recognizer.c (stacks, steps) and
 * token_mask.c (the per-state mask cache). Nothing outside src/grammar/
 * includes it.
 */
#ifndef KVLM_GRAMMAR_MATCHER_H
#define KVLM_GRAMMAR_MATCHER_H

#include "grammar/grammar.h"

typedef struct gr_vec {
    int32_t *a;
    size_t n, cap;
} gr_vec;

#define GR_MASK_CACHE 32

typedef struct gr_mask_entry {
    uint64_t hash;
    int32_t *ids;       /* the state (NULL: empty slot) */
    int n_ids;
    uint64_t *bits;
    int count;
    int limit;          /* the closing limit it was computed for */
    int max_close;      /* the most closing bytes after any allowed token (an upper bound) */
    int cut;            /* 1: the limit left tokens out, the mask holds for `limit` only */
} gr_mask_entry;

struct gr_matcher {
    const kvlm_grammar *g;
    /* stack nodes: position on top, parent stack, memo (see recognizer.c) */
    int32_t *pos, *parent, *memo_off, *memo_len;
    int32_t *dist;      /* per node: the fewest bytes that empty the stack (GR_NO_CLOSE: none) */
    int32_t *suffix;    /* per element position: the fewest bytes from it to its alternative's end */
    int32_t n_nodes, cap_nodes;
    int32_t *slots;     /* hash of (pos, parent) -> node */
    size_t slot_mask;
    gr_vec memo;        /* memo lists, back to back */
    int depth;
    gr_vec init, cur, tmp;
    /* token masks of recent states, for one trie */
    const gr_trie *cache_trie;
    gr_mask_entry cache[GR_MASK_CACHE];
    int cache_next;
    int cache_off;      /* 1: every mask computed (the benchmark's cold figure) */
    uint64_t cache_hits, cache_misses;
};

int gr_matcher_reset_state(gr_matcher *m);
void gr_mask_cache_free(gr_matcher *m);

#endif
