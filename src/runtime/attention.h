/*
 * Attention over the paged KV cache and the writes that fill it (see
 * runtime/attention.c). The only module besides runtime/kvcache.c that
 * knows the cache's layout; the engine and the attention benchmark reach
 * K/V only through these functions.
 */
#ifndef KVLM_ATTENTION_H
#define KVLM_ATTENTION_H

#include "kernels/attn_tile.h"
#include "kernels/kernels.h"
#include "runtime/kvcache.h"

/* What a layer's attention applies besides its window and query scale
 * (model/model.h model_attn_layer): softcap > 0 caps every scaled score s
 * to softcap * tanh(s / softcap) (Gemma 2); sinks, when not NULL, holds one
 * learned logit per query head of the group (sinks[h] for the group's head
 * h) that joins the softmax's denominator only: exp(sink) is added to the
 * sum of the exponentials, no value goes with it (gpt-oss). A NULL
 * attn_extra is neither. */
typedef struct attn_extra {
    float softcap;
    const float *sinks;
} attn_extra;

/* For the `heads` query heads that share kv_head (q + h * head_dim the
 * query of head h): out + h * head_dim = softmax(scale * q_h . K[0..n)) .
 * V[0..n) for layer, K and V read through table once for all the heads;
 * scores holds heads * n floats of scratch. */
void attn_heads(const kern_ops *ops, const kvlm_kv *kv, const int *table, int layer, int kv_head, int heads,
                const float *q, int n, float scale, float *scores, float *out);
/* The same over positions [lo, n) of sequence seq (its block table): lo
 * is 0, or the start of a sliding window; scores holds n - lo floats. */
void attn_seq_head(const kern_ops *ops, const kvlm_kv *kv, int seq, int layer, int kv_head, const float *q, int lo,
                   int n, float scale, float *scores, float *out);
/* attn_seq_head for the `heads` query heads that share kv_head, K and V
 * read once for all of them: head h's query is q + h * head_dim, its
 * output out + h * head_dim (each the same bits as attn_seq_head's);
 * scores holds heads * (n - lo) floats. */
void attn_seq_heads(const kern_ops *ops, const kvlm_kv *kv, int seq, int layer, int kv_head, int heads,
                    const float *q, int lo, int n, float scale, float *scores, float *out);
/* attn_seq_heads with a layer's soft-cap and sinks (x may be NULL). */
void attn_seq_heads_x(const kern_ops *ops, const kvlm_kv *kv, int seq, int layer, int kv_head, int heads,
                      const float *q, int lo, int n, float scale, const attn_extra *x, float *scores, float *out);

/* One part [lo, n) (lo < n) of a decode row's context: attn_seq_heads_x
 * with the soft-cap and no sinks over those positions only, plus per head
 * h the part's largest (capped, scaled) score mx[h] and its softmax
 * denominator in that scale, sum[h] = sum_i exp(s_i - mx[h]). */
void attn_seq_heads_part(const kern_ops *ops, const kvlm_kv *kv, int seq, int layer, int kv_head, int heads,
                         const float *q, int lo, int n, float scale, float softcap, float *scores, float *out, float *mx,
                         float *sum);

/* The attention over the union of `parts` parts from their outputs
 * (outs + (p * heads + h) * head_dim), mx and sum (p * heads + h), each
 * part weighted by sum * exp(mx - top) over the total (exp(sinks[h] -
 * top) added to it when sinks is not NULL), into out + h * head_dim. */
void attn_merge_parts(int parts, int heads, int head_dim, const float *outs, const float *mx, const float *sum,
                      const float *sinks, float *out);

/* Tiled causal attention (prefill): query positions p0 .. p0 + np - 1 of
 * one sequence, each with the `group` query heads that share kv_head,
 * against keys max(0, p - window + 1) .. p of each position p (window 0:
 * no window), all computed together chunk by chunk of the KV blocks with
 * an online softmax (kernels/attn_tile.h). The query of position p0 + i,
 * group head g is q[i * ldq + g * head_dim ..], its output out[i * ldo +
 * g * head_dim ..]. Keys up to p0 + np - 1 must be stored. scratch holds
 * attn_tile_scratch_bytes(np * group, head_dim) bytes, 64-byte aligned. */
size_t attn_tile_scratch_bytes(int rows, int head_dim);
void attn_tile_at(const attn_tile_ops *t, const kvlm_kv *kv, const int *table, int layer, int kv_head, int group,
                  const float *q, size_t ldq, int p0, int np, int window, float scale, const attn_extra *x, float *out,
                  size_t ldo, void *scratch);
void attn_tile_seq(const attn_tile_ops *t, const kvlm_kv *kv, int seq, int layer, int kv_head, int group,
                   const float *q, size_t ldq, int p0, int np, int window, float scale, float *out, size_t ldo,
                   void *scratch);
/* attn_tile_seq with a layer's soft-cap and sinks (x may be NULL). */
void attn_tile_seq_x(const attn_tile_ops *t, const kvlm_kv *kv, int seq, int layer, int kv_head, int group,
                     const float *q, size_t ldq, int p0, int np, int window, float scale, const attn_extra *x,
                     float *out, size_t ldo, void *scratch);

/* Writes the K and V of every KV head of position pos of seq for layer (k
 * and v: n_kv_head x head_dim floats each, head after head) in the cache's
 * dtype. pos must be a slot a pending append reserved (kv_append_reserve). */
void attn_store_kv(const kern_ops *ops, kvlm_kv *kv, int seq, int pos, int layer, const float *k, const float *v);
/* Writes one head's K (is_v 0) or V (1) of position pos through a block
 * table (the attention benchmark fills pools it lays out itself). */
void attn_store_at(const kern_ops *ops, kvlm_kv *kv, const int *table, int pos, int layer, int kv_head, int is_v,
                   const float *x);
/* Reads one head's K or V of position pos of seq back as floats (tests). */
void attn_load_kv(const kvlm_kv *kv, int seq, int pos, int layer, int kv_head, int is_v, float *out);

#endif
