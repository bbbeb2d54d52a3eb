/*
 * Attention of one query head over a context read through a block table:
 * scores block by block, one softmax, then the weighted sum of V block by
 * block. The engine and the attention benchmark both call it, so what is
 * measured is what runs. Blocks are scattered in the pool, where the
 * hardware prefetcher cannot follow, so the next block's keys (or values)
 * are prefetched while the current one is used.
 */
#include <string.h>

#include "runtime/attention.h"

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
