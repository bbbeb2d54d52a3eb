/*
 * Paged attention for one query head (see runtime/attention.c).
 */
#ifndef KVLM_ATTENTION_H
#define KVLM_ATTENTION_H

#include "kernels/kernels.h"
#include "runtime/kvcache.h"

/* out[0..head_dim) = softmax(scale * q . K[0..n)) . V[0..n) for layer and
 * kv_head, K and V read through table; scores holds n floats of scratch. */
void attn_head(const kern_ops *ops, const kvlm_kv *kv, const int *table, int layer, int kv_head, const float *q,
               int n, float scale, float *scores, float *out);

#endif
