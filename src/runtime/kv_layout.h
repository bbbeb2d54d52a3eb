/*
 * The paged KV cache's private layout: the pool, its blocks, the sequences'
 * block tables and where one token's K or V sits. Included ONLY by
 * runtime/kvcache.c, runtime/kv_check.c (which keep it consistent),
 * runtime/kv_types.c (which reads the slices' windows), runtime/kv_save.c
 * (which reads and writes a sequence's rows for kvlm_kv_seq_save / _restore),
 * runtime/kv_pin.c (the pinned prefixes), runtime/kv_tier_hooks.c (which
 * spills and restores blocks) and
 * runtime/attention.c (which reads and writes K/V through it); everything
 * else goes through runtime/kvcache.h and runtime/attention.h.
 *
 * Layer slices: the layers are grouped by the window they attend over (0:
 * global), and each group is cut into slices of slice_layers layers, the
 * greatest common divisor of the groups' sizes (a model with one window
 * for every layer has one slice of all its layers). A block holds
 * block_size tokens of ONE slice, so every block of the pool has the same
 * size and any block serves any slice; each sequence has one block table
 * per slice, all of n_blocks entries. Layer l lives in slice layer_slice[l]
 * at place layer_pos[l] of its blocks.
 *
 * A sequence's position p of slice s lives in block tab(s)[p / block_size]
 * at slot p % block_size. In a slice with a window W, the first
 * n_released[s] entries are -1: their blocks held only positions before
 * len - W + 1, which no later query of that slice reads, and the sequence
 * gave its reference back. Within a block the layout is
 *   [layer of the slice][K heads..., V heads...][slot][head_dim]
 * so one head's keys for a block are contiguous (what attention reads).
 * A slot holds row_bytes: head_dim values of f32 or f16, or for q8_0
 * head_dim / 32 blocks of 34 bytes (an f16 scale d, then 32 int8 q; value
 * = d x q), the GGUF Q8_0 block, so rows stay whole blocks and a block's
 * slots are one contiguous run of blocks.
 *
 * Block states: free (on the free stack), used (refcount > 0, or pinned:
 * pins > 0), or cached (refcount 0, no pin, registered in the prefix
 * index, on an LRU list, reclaimed only when no free block is left).
 *
 * The prefix index verifies token ids on one slice's chain, the anchor (a
 * global slice when the model has one): its blocks are registered under
 * hash(parent hash, tokens) with their tokens and parent's registration
 * number. A block of another slice is registered under (the anchor's
 * registration number for the same positions, its slice): that number
 * names one exact prefix, so the other slices need no chain of their own
 * and a window slice's block is found without the blocks its window left.
 *
 * A pending append (kv_append_reserve .. commit / abort) is recorded in the
 * sequence: pend_n positions past len have private, unindexed blocks in
 * every slice; pend_blocks is n_blocks before the reservation, and
 * pend_cow[s] the shared or indexed tail block of slice s the reservation
 * replaced by a private copy (still referenced by the sequence until
 * commit; put back by abort).
 */
#ifndef KVLM_KV_LAYOUT_H
#define KVLM_KV_LAYOUT_H

#include "runtime/kvcache.h"

typedef struct kv_seq {
    int live;
    int len;           /* tokens whose K/V are stored */
    int n_blocks;      /* entries used in each slice's table */
    int n_indexed;     /* leading full blocks whose anchor chain is known (bhash, bnode) */
    int pend_n;        /* positions reserved past len, not yet committed (0: none) */
    int pend_blocks;   /* n_blocks before the pending reservation */
    int *n_released;   /* [n_slices] leading entries released by the slice's window (-1 in its table) */
    int *pend_cow;     /* [n_slices] tail block replaced by a copy for the pending append (-1: none) */
    int *blocks;       /* n_slices block tables of max_blocks_per_seq entries each */
    uint64_t *bhash;   /* anchor chain hash of each indexed block */
    uint64_t *bnode;   /* anchor registration number of each indexed block */
    int32_t *tokens;   /* token ids, capacity n_ctx */
} kv_seq;

typedef struct kv_block {
    int refcount;
    int filled;        /* slots written (max over the sequences holding it) */
    int slice;         /* the slice it was registered for (when registered) */
    uint64_t hash;     /* when registered */
    uint64_t phash;    /* anchor slice: the parent block's chain hash (0: first block) */
    uint64_t node;     /* registration number, 0 when not in the index */
    uint64_t parent;   /* anchor slice: parent's registration number (0: first block);
                          other slices: the anchor's registration number of the same positions */
    int next_in_bucket;
    int lru_prev, lru_next, in_lru;
    int pins;          /* pins holding it (runtime/kv_pin.c): a pinned block is indexed and used,
                          never on the LRU list, so never evicted */
} kv_block;

struct kv_pins;

struct kvlm_kv {
    int n_layer, n_kv_head, head_dim, n_ctx;
    int block_size, max_blocks_per_seq;
    kvlm_dtype dtype;
    int reserve_blocks;          /* every sequence holds at least this many (reserve_tokens) */
    int n_slices, slice_layers;  /* slices of slice_layers layers each */
    int *layer_slice, *layer_pos;/* [n_layer] */
    int *layer_window;           /* [n_layer] the window of each layer (0: global) */
    int *slice_window;           /* [n_slices] window of the slice's layers (0: global) */
    int *slice_release;          /* [n_slices] window under which the slice gives blocks back
                                    (0: keeps them: global, keep_whole or a reservation) */
    int anchor;                  /* the slice whose chain the prefix index verifies */
    int keep_whole;              /* kvlm_kv_options.keep_whole */
    int prefix_cache;
    kv_block_hash_fn hash;
    size_t row_bytes;            /* one head's K or V of one token (kv_row_bytes) */
    size_t bytes_per_token;      /* all layers (kvlm_kv_bytes_per_token) */
    size_t slice_bytes_per_token;/* one slice: bytes_per_token x slice_layers / n_layer */
    size_t block_bytes, head_bytes; /* block_bytes: block_size tokens of one slice; head_bytes: one head, one block */
    size_t n_blocks;
    unsigned char *pool;
    size_t pool_bytes;
    kv_block *blk;
    int32_t *blk_tokens;         /* n_blocks x block_size: token ids of indexed anchor blocks */
    int *free_stack;
    size_t n_free;
    int lru_head, lru_tail;      /* least recently used at the head */
    size_t n_lru;
    int *bucket;                 /* prefix index: heads of block chains */
    size_t n_bucket;             /* power of two */
    uint64_t next_node;
    size_t n_used;
    kv_seq *seqs;
    int max_seqs;
    kvlm_kv_stats counters;      /* only the prefix/eviction/cow counters are kept here */
    struct kv_pins *pins;        /* the pinned prefixes (runtime/kv_pin.c), or NULL */
    size_t n_pinned;             /* blocks with pins > 0 */
    struct kv_tiers *tiers;      /* memory and disk tiers (runtime/kv_tiers.h), or NULL */
};

/* Takes / drops one pin of block b (kvcache.c): the first pin of a block no
 * sequence holds takes it off the LRU list into the used blocks, the last
 * one puts it back (indexed, so on the LRU list). */
void kv_block_pin(kvlm_kv *kv, int b);
void kv_block_unpin(kvlm_kv *kv, int b);
/* A new sequence holding the cached prefix of prompt: like
 * kvlm_kv_seq_new_prefixed, but with every whole block of the n tokens
 * (none left to compute) and without counting a prefix query. */
int kv_seq_new_cached(kvlm_kv *kv, const int32_t *prompt, int n, int *n_cached, kvlm_error *err);
/* kv_pin.c: frees the pin table; checks it against the blocks' pin counts. */
void kv_pins_free(kvlm_kv *kv);
int kv_pins_check(const kvlm_kv *kv, kvlm_error *err);
/* Reads the pin record of the disk tier's directory (runtime/kv_pin.c). */
int kv_pins_load(kvlm_kv *kv, kvlm_error *err);

/* kvcache.c's block allocation, for runtime/kv_tier_hooks.c: a private
 * block (free first, else the LRU's oldest, which may spill), -1 when the
 * pool is exhausted; and giving a reference back. */
int kv_alloc_block(kvlm_kv *kv);
void kv_unref_block(kvlm_kv *kv, int b);
/* An indexed anchor block with this hash, parent node and exactly these
 * tokens, or -1. */
int kv_index_find(const kvlm_kv *kv, uint64_t h, uint64_t parent, const int32_t *tokens);
/* An indexed block of slice s (not the anchor) for the prefix of anchor node. */
int kv_index_find_slice(const kvlm_kv *kv, uint64_t node, int s);

/* runtime/kv_tier_hooks.c: the pool's side of the tiers. On eviction of
 * block b (still indexed); after block position j of q entered the index
 * (h its chain hash, ph its parent's); and at a lookup, past J pool hits
 * (the table rows 0..J-1 set): restores block positions J.. of prompt
 * while the tiers hold them, up to max_blocks, into fresh blocks of every
 * slice (q->n_blocks follows); returns the new count. */
void kv_tier_on_evict(kvlm_kv *kv, int b);
void kv_tier_on_index(kvlm_kv *kv, const kv_seq *q, int j, uint64_t h, uint64_t ph);
int kv_tier_restore(kvlm_kv *kv, kv_seq *q, const int32_t *prompt, int J, int max_blocks);

/* Slice s's block table of sequence q. */
static inline int *kv_tab(const kvlm_kv *kv, const kv_seq *q, int s) {
    return q->blocks + (size_t)s * kv->max_blocks_per_seq;
}

/* The first position any later query of a sequence of len tokens reads
 * under a window of W (0: none). */
static inline int kv_window_start(int W, int len) { return W && len + 1 > W ? len + 1 - W : 0; }

/* The prefix index's bucket of a hash (n_bucket a power of two). */
static inline size_t kv_bucket_of(const kvlm_kv *kv, uint64_t h) {
    return (size_t)(h ^ (h >> 31)) & (kv->n_bucket - 1);
}

/* Start of head h's keys (or values) for layer l (of the block's slice) in block b. */
static inline unsigned char *kv_head_ptr(const kvlm_kv *kv, int b, int l, int h, int is_v) {
    return kv->pool + (size_t)b * kv->block_bytes +
           ((size_t)kv->layer_pos[l] * 2 * kv->n_kv_head + (size_t)is_v * kv->n_kv_head + h) * kv->head_bytes;
}

/* Address of the K (or V) vector of position pos through a block table. */
static inline unsigned char *kv_table_slot_ptr(const kvlm_kv *kv, const int *table, int pos, int l, int h,
                                               int is_v) {
    return kv_head_ptr(kv, table[pos / kv->block_size], l, h, is_v) +
           (size_t)(pos % kv->block_size) * kv->row_bytes;
}

/* The block table layer l's attention reads for sequence seq. */
static inline const int *kv_layer_table(const kvlm_kv *kv, int seq, int l) {
    return kv_tab(kv, &kv->seqs[seq], kv->layer_slice[l]);
}

#endif
