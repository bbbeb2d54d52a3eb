/*
 * kv_fingerprint_of and kv_fingerprint_for_cache (runtime/kv_fingerprint.h):
 * one XXH3-128 stream over the KV format version, the model file's identity
 * (sizes, leading bytes, tensor table, sampled tensor bytes), the attention
 * shape and per-layer description, and the KV dtype. Every integer goes in
 * as a little-endian int64 and every float as its bit pattern, so struct
 * padding and the host's int sizes never reach the hash. Reads a bounded
 * part of the weights; never writes anything.
 */
#include <string.h>
#include <xxhash.h>

#include "error.h"
#include "model/model.h"
#include "runtime/kv_fingerprint.h"
#include "runtime/kvcache.h"
#include "tensor.h"

static void put_i(XXH3_state_t *st, int64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)v >> (8 * i));
    XXH3_128bits_update(st, b, sizeof b);
}

static void put_f(XXH3_state_t *st, float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    put_i(st, (int64_t)u);
}

static void put_s(XXH3_state_t *st, const char *s) {
    const size_t n = s ? strlen(s) : 0;
    put_i(st, (int64_t)n);
    if (n) XXH3_128bits_update(st, s, n);
}

/* KV_FP_SAMPLE bytes at the start, middle and end of n bytes at p. */
static void put_sample(XXH3_state_t *st, const void *p, size_t n) {
    put_i(st, (int64_t)n);
    if (!p || !n) return;
    const unsigned char *c = p;
    const size_t k = n < KV_FP_SAMPLE ? n : KV_FP_SAMPLE;
    XXH3_128bits_update(st, c, k);
    XXH3_128bits_update(st, c + (n - k) / 2, k);
    XXH3_128bits_update(st, c + n - k, k);
}

static size_t matrix_bytes(const kern_matrix *w) {
    tensor t = {.dtype = w->dtype, .ndim = 2, .shape = {w->rows, w->cols}, .data = w->data};
    return tensor_nbytes(&t);
}

static void put_matrix(XXH3_state_t *st, const kern_matrix *w) {
    put_i(st, w->data ? (int64_t)w->dtype : -1);
    put_i(st, w->rows), put_i(st, w->cols);
    if (w->data) put_sample(st, w->data, matrix_bytes(w));
}

static void put_vec(XXH3_state_t *st, const float *v, int n) {
    put_i(st, v ? n : -1);
    if (v) put_sample(st, v, (size_t)n * sizeof(float));
}

/* The files the weights came from: sizes, leading bytes, the tensor table
 * and a sample of each tensor. */
static void put_files(XXH3_state_t *st, const tensor_set *ts) {
    put_i(st, ts->n_files);
    for (int i = 0; i < ts->n_files; i++) {
        const mapped_file *f = &ts->files[i];
        put_i(st, (int64_t)f->size);
        if (f->data) XXH3_128bits_update(st, f->data, f->size < KV_FP_HEAD_BYTES ? f->size : KV_FP_HEAD_BYTES);
    }
    put_i(st, ts->n_items);
    for (int i = 0; i < ts->n_items; i++) {
        const named_tensor *nt = &ts->items[i];
        put_s(st, nt->name);
        put_i(st, nt->t.dtype), put_i(st, nt->t.ndim);
        for (int d = 0; d < nt->t.ndim && d < TENSOR_MAX_DIMS; d++) put_i(st, nt->t.shape[d]);
        int64_t file = -1, off = -1;
        for (int j = 0; j < ts->n_files; j++) {
            const mapped_file *f = &ts->files[j];
            const unsigned char *p = nt->t.data;
            if (f->data && p >= f->data && p < f->data + f->size) file = j, off = (int64_t)(p - f->data);
        }
        put_i(st, file), put_i(st, off);
        if (i < KV_FP_MAX_SAMPLED && nt->t.data) put_sample(st, nt->t.data, tensor_nbytes(&nt->t));
    }
}

/* A model without files: its bound weights, sampled. */
static void put_bound(XXH3_state_t *st, const kvlm_model *m) {
    const kvlm_config *c = &m->cfg;
    put_matrix(st, &m->wte), put_matrix(st, &m->wpe), put_matrix(st, &m->lm_head);
    put_vec(st, m->normf_w, c->n_embd), put_vec(st, m->normf_b, c->n_embd);
    for (int l = 0; l < c->n_layer && m->layers; l++) {
        const model_layer *L = &m->layers[l];
        const kern_matrix *mats[] = MODEL_LAYER_MATRICES(L);
        for (size_t i = 0; i < sizeof mats / sizeof mats[0]; i++) put_matrix(st, mats[i]);
        put_vec(st, L->norm1_w, c->n_embd), put_vec(st, L->norm2_w, c->n_embd);
        put_vec(st, L->q_norm, c->head_dim), put_vec(st, L->k_norm, c->head_dim);
    }
}

static int begin(const kvlm_model *m, int kv_dtype, int version, XXH3_state_t *st, kvlm_error *err) {
    if (!m) return kvlm_error_set(err, KVLM_ERR_ARG, "kv fingerprint: no model");
    if (!kvlm_kv_dtype_supported((kvlm_dtype)kv_dtype))
        return kvlm_error_set(err, KVLM_ERR_ARG, "kv fingerprint: dtype %d is not a KV cache dtype", kv_dtype);
    const kvlm_config *c = &m->cfg;
    XXH3_128bits_reset(st);
    put_s(st, "kvlm-kv"), put_i(st, version);
    if (m->ts.n_files > 0) put_files(st, &m->ts);
    else put_s(st, m->source), put_bound(st, m);
    put_s(st, c->arch);
    put_i(st, c->n_layer), put_i(st, c->n_head), put_i(st, c->n_kv_head);
    put_i(st, c->head_dim), put_i(st, c->n_embd), put_i(st, m->arch);
    put_i(st, c->rope_interleaved), put_i(st, c->qkv_bias), put_i(st, c->qk_norm);
    put_f(st, c->norm_eps), put_f(st, c->rope_theta), put_f(st, c->rope_factor);
    for (int l = 0; l < c->n_layer; l++) {
        const model_attn_layer a = model_layer_attn(m, l);
        put_i(st, model_layer_window(m, l));
        put_i(st, a.rope_dims), put_i(st, a.rope_table);
        put_f(st, a.scale), put_f(st, a.softcap);
    }
    put_i(st, m->n_rope);
    for (int i = 0; i < m->n_rope && i < MODEL_MAX_ROPE; i++) {
        put_i(st, m->rope_freq_n[i]);
        put_f(st, m->rope_mscale[i]);
        if (m->rope_freq[i]) XXH3_128bits_update(st, m->rope_freq[i], (size_t)m->rope_freq_n[i] * sizeof(float));
    }
    put_f(st, m->embed_scale), put_f(st, m->residual_scale);
    put_i(st, kv_dtype);
    return KVLM_OK;
}

static void finish(XXH3_state_t *st, kv_fingerprint *out) {
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(st));
    memcpy(out->bytes, c.digest, sizeof out->bytes);
}

int kv_fingerprint_of_version(const kvlm_model *m, int kv_dtype, int version, kv_fingerprint *out,
                              kvlm_error *err) {
    if (!out) return kvlm_error_set(err, KVLM_ERR_ARG, "kv fingerprint: no output");
    XXH3_state_t *st = XXH3_createState();
    if (!st) return kvlm_error_set(err, KVLM_ERR_NOMEM, "kv fingerprint: out of memory");
    int rc = begin(m, kv_dtype, version, st, err);
    if (!rc) finish(st, out);
    XXH3_freeState(st);
    return rc;
}

int kv_fingerprint_of(const kvlm_model *m, int kv_dtype, kv_fingerprint *out, kvlm_error *err) {
    return kv_fingerprint_of_version(m, kv_dtype, KV_FORMAT_VERSION, out, err);
}

int kv_fingerprint_for_cache(const kvlm_model *m, const kvlm_kv *kv, kv_fingerprint *out, kvlm_error *err) {
    if (!out || !kv) return kvlm_error_set(err, KVLM_ERR_ARG, "kv fingerprint: no cache or output");
    if (m && !kv_fits_model(kv, m))
        return kvlm_error_set(err, KVLM_ERR_ARG, "kv fingerprint: the cache was not made for this model");
    XXH3_state_t *st = XXH3_createState();
    if (!st) return kvlm_error_set(err, KVLM_ERR_NOMEM, "kv fingerprint: out of memory");
    int rc = begin(m, kv_dtype(kv), KV_FORMAT_VERSION, st, err);
    if (!rc) {
        kvlm_kv_info info;
        kvlm_kv_get_info(kv, &info);
        put_s(st, "cache");
        put_i(st, info.block_size);
        put_i(st, info.n_slices);
        put_i(st, info.slice_layers);
        put_i(st, (int64_t)info.block_bytes);
        finish(st, out);
    }
    XXH3_freeState(st);
    return rc;
}

int kv_fingerprint_equal(const kv_fingerprint *a, const kv_fingerprint *b) {
    return memcmp(a->bytes, b->bytes, sizeof a->bytes) == 0;
}

void kv_fingerprint_hex(const kv_fingerprint *fp, char buf[33]) {
    static const char hex[] = "0123456789abcdef";
    for (int i = 0; i < 16; i++) buf[2 * i] = hex[fp->bytes[i] >> 4], buf[2 * i + 1] = hex[fp->bytes[i] & 15];
    buf[32] = 0;
}
