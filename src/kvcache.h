/*
 * The paged KV cache: one pool of fixed-size blocks (block_size tokens,
 * K and V for every layer and KV head), a block table per sequence and a
 * free list. A sequence's position p lives in block table[p / block_size] at
 * slot p % block_size. Within a block the layout is
 *   [layer][K heads..., V heads...][slot][head_dim]
 * so one head's keys for a block are contiguous (what attention reads).
 *
 * Allocation policies share the pool and the kernels: PAGED allocates a
 * block when a sequence first needs it; RESERVE_MAX reserves n_ctx worth of
 * blocks when the sequence is created (the contiguous baseline).
 *
 * The cache also keeps each sequence's token ids, so the engine can
 * recompute a context (no-cache mode). It never touches model weights.
 */
#ifndef KVLM_KVCACHE_H
#define KVLM_KVCACHE_H

#include "kvlm.h"

typedef struct kv_seq {
    int live;
    int len;          /* tokens whose K/V are stored */
    int n_blocks;     /* entries used in blocks[] */
    int *blocks;      /* block table, capacity max_blocks_per_seq */
    int32_t *tokens;  /* token ids, capacity n_ctx */
} kv_seq;

struct kvlm_kv {
    int n_layer, n_kv_head, head_dim, n_ctx;
    int block_size, max_blocks_per_seq;
    kvlm_dtype dtype;
    kvlm_alloc_policy policy;
    size_t bytes_per_token, block_bytes, head_bytes; /* head_bytes: one head, one block */
    size_t n_blocks;
    unsigned char *pool;
    size_t pool_bytes;
    int *free_stack;
    size_t n_free;
    kv_seq *seqs;
    int max_seqs;
};

/* Makes sure seq has blocks for new_len tokens. On failure the blocks taken
 * by this call stay with the sequence; kv_seq_truncate gives them back. */
int kv_seq_reserve(kvlm_kv *kv, int seq, int new_len, kvlm_error *err);
/* Records n more tokens as stored (their K/V have been written). */
void kv_seq_append(kvlm_kv *kv, int seq, const int32_t *tokens, int n);
/* Shrinks seq to len tokens; paged sequences return blocks they no longer need. */
void kv_seq_truncate(kvlm_kv *kv, int seq, int len);
int kv_seq_valid(const kvlm_kv *kv, int seq);

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
