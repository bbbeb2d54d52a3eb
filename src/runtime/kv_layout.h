/*
 * The paged KV cache's private layout: the pool, its blocks, the sequences'
 * block tables and where one token's K or V sits. Included ONLY by
 * runtime/kvcache.c (which keeps it consistent) and runtime/attention.c
 * (which reads and writes K/V through it); everything else goes through
 * runtime/kvcache.h and runtime/attention.h.
 *
 * A sequence's position p lives in block blocks[p / block_size] at slot
 * p % block_size. With a sliding window of W, the first n_released entries
 * are -1: their blocks held only positions before len - W + 1, which no
 * later query reads, and the sequence gave its reference back. Within a block the layout is
 *   [layer][K heads..., V heads...][slot][head_dim]
 * so one head's keys for a block are contiguous (what attention reads).
 * A slot holds row_bytes: head_dim values of f32 or f16, or for q8_0
 * head_dim / 32 blocks of 34 bytes (an f16 scale d, then 32 int8 q; value
 * = d x q), the GGUF Q8_0 block, so rows stay whole blocks and a block's
 * slots are one contiguous run of blocks.
 *
 * Block states: free (on the free stack), used (refcount > 0), or cached
 * (refcount 0 but registered in the prefix index, on an LRU list, reclaimed
 * only when no free block is left).
 *
 * A pending append (kv_append_reserve .. commit / abort) is recorded in the
 * sequence: pend_n positions past len have private, unindexed blocks;
 * pend_blocks is n_blocks before the reservation, and pend_cow the shared or
 * indexed tail block the reservation replaced by a private copy (still
 * referenced by the sequence until commit; put back by abort).
 */
#ifndef KVLM_KV_LAYOUT_H
#define KVLM_KV_LAYOUT_H

#include "runtime/kvcache.h"

typedef struct kv_seq {
    int live;
    int len;           /* tokens whose K/V are stored */
    int n_blocks;      /* entries used in blocks[] */
    int n_indexed;     /* leading full blocks registered or matched in the index */
    int n_released;    /* leading table entries released by the sliding window (-1 in blocks[]) */
    int pend_n;        /* positions reserved past len, not yet committed (0: none) */
    int pend_blocks;   /* n_blocks before the pending reservation */
    int pend_cow;      /* tail block replaced by a copy for the pending append (-1: none) */
    int *blocks;       /* block table, capacity max_blocks_per_seq */
    uint64_t *bhash;   /* chain hash of each indexed block */
    uint64_t *bnode;   /* registration number of each indexed block */
    int32_t *tokens;   /* token ids, capacity n_ctx */
} kv_seq;

typedef struct kv_block {
    int refcount;
    int filled;        /* slots written (max over the sequences holding it) */
    uint64_t hash;     /* when registered */
    uint64_t node;     /* registration number, 0 when not in the index */
    uint64_t parent;   /* parent's registration number (0: first block) */
    int next_in_bucket;
    int lru_prev, lru_next, in_lru;
} kv_block;

struct kvlm_kv {
    int n_layer, n_kv_head, head_dim, n_ctx;
    int block_size, max_blocks_per_seq;
    kvlm_dtype dtype;
    int reserve_blocks;          /* every sequence holds at least this many (reserve_tokens) */
    int window;                  /* the model's sliding window (0: none); blocks wholly before
                                    every future query's window are released when > 0 and
                                    reserve_blocks == 0 */
    int prefix_cache;
    kv_block_hash_fn hash;
    size_t row_bytes;            /* one head's K or V of one token (kv_row_bytes) */
    size_t bytes_per_token, block_bytes, head_bytes; /* head_bytes: one head, one block */
    size_t n_blocks;
    unsigned char *pool;
    size_t pool_bytes;
    kv_block *blk;
    int32_t *blk_tokens;         /* n_blocks x block_size: token ids of indexed blocks */
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
};

/* Start of head h's keys (or values) for layer l in block b. */
static inline unsigned char *kv_head_ptr(const kvlm_kv *kv, int b, int l, int h, int is_v) {
    return kv->pool + (size_t)b * kv->block_bytes +
           ((size_t)l * 2 * kv->n_kv_head + (size_t)is_v * kv->n_kv_head + h) * kv->head_bytes;
}

/* Address of the K (or V) vector of position pos through a block table. */
static inline unsigned char *kv_table_slot_ptr(const kvlm_kv *kv, const int *table, int pos, int l, int h,
                                               int is_v) {
    return kv_head_ptr(kv, table[pos / kv->block_size], l, h, is_v) +
           (size_t)(pos % kv->block_size) * kv->row_bytes;
}

#endif
