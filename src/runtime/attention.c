/*
 * Attention of one query head over a context read through a block table:
 * scores block by block, one softmax, then the weighted sum of V block by
 * block. The engine and the attention benchmark both call it, so what is
 * measured is what runs. Blocks are scattered in the pool, where the
 * hardware prefetcher cannot follow, so the next block's keys (or values)
 * are prefetched while the current one is used.
 *
 * Also the writes of new K/V into the slots an append reserved: the layout
 * (runtime/kv_layout.h) stays between this file and runtime/kvcache.c.
 */
#include <string.h>

#include "runtime/attention.h"
#include "runtime/kv_layout.h"
#include "tensor.h"

static inline void prefetch(const void *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch((const char *)p + o, 0, 1);
}

void attn_head(const kern_ops *ops, const kvlm_kv *kv, const int *table, int layer, int kv_head, const float *q,
               int n, float scale, float *scores, float *out) {
    const int bs = kv->block_size, hd = kv->head_dim;
    for (int b0 = 0; b0 < n; b0 += bs) {
        const int cnt = n - b0 < bs ? n - b0 : bs;
        if (b0 + bs < n) prefetch(kv_head_ptr(kv, table[b0 / bs + 1], layer, kv_head, 0), kv->head_bytes);
        else prefetch(kv_head_ptr(kv, table[0], layer, kv_head, 1), kv->head_bytes);
        ops->attn_scores(q, kv_head_ptr(kv, table[b0 / bs], layer, kv_head, 0), kv->dtype, cnt, hd, scale, scores + b0);
    }
    kern_softmax(scores, n);
    memset(out, 0, (size_t)hd * sizeof(float));
    for (int b0 = 0; b0 < n; b0 += bs) {
        const int cnt = n - b0 < bs ? n - b0 : bs;
        if (b0 + bs < n) prefetch(kv_head_ptr(kv, table[b0 / bs + 1], layer, kv_head, 1), kv->head_bytes);
        ops->attn_accum(scores + b0, kv_head_ptr(kv, table[b0 / bs], layer, kv_head, 1), kv->dtype, cnt, hd, out);
    }
}

void attn_seq_head(const kern_ops *ops, const kvlm_kv *kv, int seq, int layer, int kv_head, const float *q, int n,
                   float scale, float *scores, float *out) {
    attn_head(ops, kv, kv->seqs[seq].blocks, layer, kv_head, q, n, scale, scores, out);
}

void attn_store_at(const kern_ops *ops, kvlm_kv *kv, const int *table, int pos, int layer, int kv_head, int is_v,
                   const float *x) {
    ops->store_row(kv_table_slot_ptr(kv, table, pos, layer, kv_head, is_v), kv->dtype, x, kv->head_dim);
}

void attn_store_kv(const kern_ops *ops, kvlm_kv *kv, int seq, int pos, int layer, const float *k, const float *v) {
    const int *table = kv->seqs[seq].blocks, hd = kv->head_dim;
    for (int h = 0; h < kv->n_kv_head; h++) {
        ops->store_row(kv_table_slot_ptr(kv, table, pos, layer, h, 0), kv->dtype, k + (size_t)h * hd, hd);
        ops->store_row(kv_table_slot_ptr(kv, table, pos, layer, h, 1), kv->dtype, v + (size_t)h * hd, hd);
    }
}

void attn_load_kv(const kvlm_kv *kv, int seq, int pos, int layer, int kv_head, int is_v, float *out) {
    const unsigned char *p = kv_table_slot_ptr(kv, kv->seqs[seq].blocks, pos, layer, kv_head, is_v);
    for (int i = 0; i < kv->head_dim; i++) out[i] = dtype_load(kv->dtype, p, (size_t)i);
}
