/*
 * The fingerprint of everything that makes a KV cache's bytes differ: two
 * caches whose fingerprints are equal hold the same K/V for the same
 * tokens, so a block saved by one (a disk tier, a saved conversation) may
 * be served to the other. Anything outside it (the file's path, the
 * context length, thread counts, the ISA) must not change K/V.
 *
 * kv_fingerprint_of covers, under XXH3-128:
 * - KV_FORMAT_VERSION (bump it when the block layout or a kernel writing
 *   K/V changes its bytes);
 * - the model file's identity: each mapped file's size and its first
 *   KV_FP_HEAD_BYTES bytes (a GGUF file's header and the start of its
 *   metadata), the tensor table (name, dtype, shape, offset in its file)
 *   and a sample of every tensor's bytes (KV_FP_SAMPLE bytes at its start,
 *   middle and end, at most KV_FP_MAX_SAMPLED tensors): a bounded read,
 *   a few hundred pages even on a 17 GB file. A model without files (the
 *   synthetic presets) is identified by its source line and the same
 *   sample of its bound matrices and norm weights;
 * - the shape: layers, query and KV heads, head dim, embedding width;
 * - per layer, its rotary and window description (model_layer_attn:
 *   window, rotated dimensions, rotary table, score scale, softcap), the
 *   rotary frequency tables and their scales, the embedding and residual
 *   multipliers;
 * - the KV dtype.
 * The block size and the layer slicing are the cache's, not the model's:
 * kv_fingerprint_for_cache extends a fingerprint with them (what a tier
 * of pool blocks keys on). Nothing here looks at a KV cache's contents.
 */
#ifndef KVLM_KV_FINGERPRINT_H
#define KVLM_KV_FINGERPRINT_H

#include <stdint.h>

#include "kvlm.h"

#define KV_FORMAT_VERSION 1
#define KV_FP_HEAD_BYTES ((size_t)1 << 20)
#define KV_FP_SAMPLE 64
#define KV_FP_MAX_SAMPLED 8192

typedef struct {
    uint8_t bytes[16];
} kv_fingerprint;

/* Fills *out for model m and KV dtype kv_dtype (a kvlm_dtype). 0, or
 * KVLM_ERR_ARG when m or out is NULL or kv_dtype is not a KV dtype. */
int kv_fingerprint_of(const kvlm_model *m, int kv_dtype, kv_fingerprint *out, kvlm_error *err);
/* kv_fingerprint_of under another format version (what a reader of an
 * older or newer version's files computes; the tests use it). */
int kv_fingerprint_of_version(const kvlm_model *m, int kv_dtype, int version, kv_fingerprint *out,
                              kvlm_error *err);
/* kv_fingerprint_of(m, the cache's dtype) extended with the cache's block
 * size and layer slicing (slices, layers per slice, each layer's slice and
 * place): equal for two caches whose pool blocks are interchangeable. */
int kv_fingerprint_for_cache(const kvlm_model *m, const kvlm_kv *kv, kv_fingerprint *out, kvlm_error *err);
/* 1 when a and b are equal. */
int kv_fingerprint_equal(const kv_fingerprint *a, const kv_fingerprint *b);
/* 32 lowercase hex digits and a NUL into buf (33 bytes). */
void kv_fingerprint_hex(const kv_fingerprint *fp, char buf[33]);

#endif
