/*
 * Attention of one query head over a context read through a block table:
 * scores block by block, one softmax, then the weighted sum of V block by
 * block. The context is a range of positions [lo, n): lo > 0 is a sliding
 * window, whose earlier blocks may already be released (never read). The engine and the attention benchmark both call it, so what is
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

/* Attention over positions [lo, n): block by block from the block holding
 * lo (its first lo % block_size slots skipped); scores[i] is position lo + i. */
static void attn_range(const kern_ops *ops, const kvlm_kv *kv, const int *table, int layer, int kv_head,
                       const float *q, int lo, int n, float scale, float *scores, float *out) {
    const int bs = kv->block_size, hd = kv->head_dim;
    const size_t row = (size_t)hd * kvlm_dtype_size(kv->dtype);
    for (int p = lo; p < n;) {
        const int j = p / bs, off = p % bs, cnt = (j + 1) * bs < n ? (j + 1) * bs - p : n - p;
        if ((j + 1) * bs < n) prefetch(kv_head_ptr(kv, table[j + 1], layer, kv_head, 0), kv->head_bytes);
        else prefetch(kv_head_ptr(kv, table[lo / bs], layer, kv_head, 1), kv->head_bytes);
        ops->attn_scores(q, kv_head_ptr(kv, table[j], layer, kv_head, 0) + off * row, kv->dtype, cnt, hd, scale,
                         scores + (p - lo));
        p += cnt;
    }
    kern_softmax(scores, n - lo);
    memset(out, 0, (size_t)hd * sizeof(float));
    for (int p = lo; p < n;) {
        const int j = p / bs, off = p % bs, cnt = (j + 1) * bs < n ? (j + 1) * bs - p : n - p;
        if ((j + 1) * bs < n) prefetch(kv_head_ptr(kv, table[j + 1], layer, kv_head, 1), kv->head_bytes);
        ops->attn_accum(scores + (p - lo), kv_head_ptr(kv, table[j], layer, kv_head, 1) + off * row, kv->dtype, cnt, hd,
                        out);
        p += cnt;
    }
}

void attn_head(const kern_ops *ops, const kvlm_kv *kv, const int *table, int layer, int kv_head, const float *q,
               int n, float scale, float *scores, float *out) {
    attn_range(ops, kv, table, layer, kv_head, q, 0, n, scale, scores, out);
}

void attn_seq_head(const kern_ops *ops, const kvlm_kv *kv, int seq, int layer, int kv_head, const float *q, int lo,
                   int n, float scale, float *scores, float *out) {
    attn_range(ops, kv, kv->seqs[seq].blocks, layer, kv_head, q, lo, n, scale, scores, out);
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
