/*
 * The paged KV cache: one pool of fixed-size blocks (block_size tokens,
 * K and V for every layer and KV head), a block table per sequence, and
 * reference counts so sequences can share blocks. A sequence's position p
 * lives in block table[p / block_size] at slot p % block_size. Within a
 * block the layout is
 *   [layer][K heads..., V heads...][slot][head_dim]
 * so one head's keys for a block are contiguous (what attention reads).
 *
 * Block states: free (on the free stack), used (refcount > 0), or cached
 * (refcount 0 but registered in the prefix index, on an LRU list, reclaimed
 * only when no free block is left).
 *
 * Sharing: fork copies a block table and takes a reference on each block.
 * A block is written only when its writer holds the sole reference and it
 * is not in the prefix index; otherwise kv_seq_reserve copies it first
 * (copy-on-write). Full blocks are immutable once indexed.
 *
 * Prefix index: each full block is registered under hash(parent hash,
 * tokens) with its token ids and its parent's registration number. A lookup
 * accepts a block only if the hash, the parent registration and every token
 * id match, so a hash collision can never hand out another prefix's KV, and
 * a child of an evicted parent can never be reached again.
 *
 * Allocation policies share the pool and the kernels: PAGED allocates a
 * block when a sequence first needs it; RESERVE_MAX reserves n_ctx worth of
 * blocks when the sequence is created (the contiguous baseline).
 */
#ifndef KVLM_KVCACHE_H
#define KVLM_KVCACHE_H

#include "kvlm.h"

typedef struct kv_seq {
    int live;
    int len;           /* tokens whose K/V are stored */
    int n_blocks;      /* entries used in blocks[] */
    int n_indexed;     /* leading full blocks registered or matched in the index */
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
    kvlm_alloc_policy policy;
    int prefix_cache;
    kvlm_block_hash_fn hash;
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

/* Makes sure seq has private, writable blocks for positions [len, new_len).
 * On failure nothing the sequence could read has changed; blocks taken by
 * this call stay with it and kv_seq_truncate gives them back. */
int kv_seq_reserve(kvlm_kv *kv, int seq, int new_len, kvlm_error *err);
/* Records n more tokens as stored (their K/V have been written); full
 * blocks enter the prefix index. */
void kv_seq_append(kvlm_kv *kv, int seq, const int32_t *tokens, int n);
/* Shrinks seq to len tokens; paged sequences return blocks they no longer need. */
void kv_seq_truncate(kvlm_kv *kv, int seq, int len);
/* Releases every block of seq but keeps its tokens and length (the
 * no-cache engine recomputes all K/V at each step). */
void kv_seq_drop_blocks(kvlm_kv *kv, int seq);
int kv_seq_valid(const kvlm_kv *kv, int seq);
/* Checks every structural invariant (reference counts against block
 * tables, free/LRU/used partition, index consistency, fill counts).
 * Returns 0 or KVLM_ERR_FORMAT with err describing the first violation. */
int kv_check_invariants(const kvlm_kv *kv, kvlm_error *err);

/* Start of head h's keys (or values) for layer l in block b. */
static inline unsigned char *kv_head_ptr(const kvlm_kv *kv, int b, int l, int h, int is_v) {
    return kv->pool + (size_t)b * kv->block_bytes +
           ((size_t)l * 2 * kv->n_kv_head + (size_t)is_v * kv->n_kv_head + h) * kv->head_bytes;
}

/* Address of the K (or V) vector of position pos of seq for layer l, head h. */
static inline unsigned char *kv_slot_ptr(const kvlm_kv *kv, const kv_seq *s, int pos, int l, int h, int is_v) {
    return kv_head_ptr(kv, s->blocks[pos / kv->block_size], l, h, is_v) +
           (size_t)(pos % kv->block_size) * kv->head_dim * kvlm_dtype_size(kv->dtype);
}

#endif
