/*
 * Models from GGUF files: the configuration from the typed metadata
 * ({arch}.block_count, .embedding_length, .attention.head_count_kv, ...,
 * and the end-of-generation ids tokenizer.ggml.eos_token_id and
 * eot_token_id),
 * then the same binders as Hugging Face files under GGUF tensor names.
 * Llama files store Q and K rows so that rotary pairs are adjacent
 * (interleaved layout); Qwen2, Qwen3 and Phi-3 files keep Hugging Face's
 * order (llama.cpp's "neox" rope). Llama 3 rope scaling arrives as a
 * rope_freqs tensor dividing each frequency. {arch}.attention.sliding_window
 * (when present and non-zero) is the attention window, applied as Hugging
 * Face applies config.json's sliding_window (llama.cpp itself ignores the
 * one Phi-3 files carry). Phi-3's 128k variants (rope_factors_long/short)
 * and a partial rotary embedding (rope.dimension_count below the head
 * dimension) are refused by name.
 */
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "formats/gguf.h"
#include "model/model.h"

static int read_int(const gguf_meta *g, const char *arch, const char *key, int64_t lo, int64_t hi, int64_t def,
                    int required, int *out, kvlm_error *err) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    int64_t v;
    int rc = required ? gguf_get_int(g, k, lo, hi, &v, err) : gguf_get_int_or(g, k, lo, hi, def, &v, err);
    if (!rc) *out = (int)v;
    return rc;
}

static int read_config(const gguf_meta *g, const tensor_set *ts, kvlm_config *c, kvlm_error *err) {
    const char *arch;
    int rc = gguf_get_string(g, "general.architecture", &arch, err);
    if (rc) return rc;
    const int gpt2 = !strcmp(arch, "gpt2"), rope_pairs = !strcmp(arch, "llama") || !strcmp(arch, "mistral");
    if (!gpt2 && !rope_pairs && strcmp(arch, "qwen2") && strcmp(arch, "qwen3") && strcmp(arch, "phi3"))
        return kvlm_error_set(err, KVLM_ERR_UNSUPPORTED, "%s: general.architecture '%s' is not supported (gpt2, llama, "
                              "mistral, qwen2, qwen3, phi3)", g->path, arch);
    memset(c, 0, sizeof *c);
    snprintf(c->arch, sizeof c->arch, "%s", arch);
    if ((rc = read_int(g, arch, "block_count", 1, 1024, 0, 1, &c->n_layer, err)) ||
        (rc = read_int(g, arch, "embedding_length", 1, 1 << 17, 0, 1, &c->n_embd, err)) ||
        (rc = read_int(g, arch, "feed_forward_length", 1, 1 << 20, 0, 1, &c->n_ff, err)) ||
        (rc = read_int(g, arch, "context_length", 1, 1 << 24, 0, 1, &c->n_ctx, err)) ||
        (rc = read_int(g, arch, "attention.head_count", 1, 1024, 0, 1, &c->n_head, err)) ||
        (rc = read_int(g, arch, "attention.head_count_kv", 1, 1024, c->n_head, 0, &c->n_kv_head, err)) ||
        (rc = read_int(g, arch, "attention.key_length", 1, 4096, c->n_embd / c->n_head, 0, &c->head_dim, err)))
        return rc;
    const named_tensor *emb = tensor_set_find(ts, "token_embd.weight", NULL);
    if (!emb || emb->t.ndim != 2)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: missing 2-D tensor 'token_embd.weight'", g->path);
    c->vocab_size = (int)emb->t.shape[0];
    /* End of generation: the end-of-sequence id, and the end-of-turn id
     * that chat models' files add (llama.cpp stops at both). */
    static const char *const end_keys[] = {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"};
    c->eos_id = -1;
    for (int k = 0; k < 2; k++) {
        int64_t id;
        if ((rc = gguf_get_int_or(g, end_keys[k], -1, c->vocab_size - 1, -1, &id, err))) return rc;
        if (id < 0 || (c->n_eos == 1 && c->eos_ids[0] == id)) continue;
        c->eos_ids[c->n_eos++] = (int32_t)id;
        if (c->eos_id < 0) c->eos_id = (int)id;
    }
    double v;
    char k[128];
    snprintf(k, sizeof k, "%s.attention.layer_norm%s_epsilon", arch, gpt2 ? "" : "_rms");
    if ((rc = gguf_get_float_or(g, k, 1e-5, &v, err))) return rc;
    c->norm_eps = (float)v;
    if (!gpt2) {
        snprintf(k, sizeof k, "%s.rope.freq_base", arch);
        if ((rc = gguf_get_float_or(g, k, 10000.0, &v, err))) return rc;
        if (!(v > 1 && v < 1e12)) return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: %s = %g is outside (1, 1e12)", g->path, k, v);
        c->rope_theta = (float)v;
        c->rope_interleaved = rope_pairs;
        c->tie_embeddings = !tensor_set_find(ts, "output.weight", NULL);
        c->qkv_bias = tensor_set_find(ts, "blk.0.attn_q.bias", NULL) != NULL;
        c->qk_norm = !strcmp(arch, "qwen3");
        if ((rc = read_int(g, arch, "attention.sliding_window", 0, 1 << 30, 0, 0, &c->sliding_window, err))) return rc;
        if (c->sliding_window >= c->n_ctx) c->sliding_window = 0;
    }
    return KVLM_OK;
}

/* What kvlm_config_load may describe but the forward pass does not run: a
 * rotary embedding over part of each head, Phi-3's longrope factors. */
static int check_runnable(const gguf_meta *g, const tensor_set *ts, const kvlm_config *c, kvlm_error *err) {
    if (!c->rope_theta) return KVLM_OK;
    int rope_dims, rc;
    if ((rc = read_int(g, c->arch, "rope.dimension_count", 0, 1 << 16, c->head_dim, 0, &rope_dims, err))) return rc;
    if (rope_dims != c->head_dim)
        return kvlm_error_set(err, KVLM_ERR_UNSUPPORTED, "%s: %s.rope.dimension_count = %d: a rotary embedding over "
                              "part of the head (%d) is not supported", g->path, c->arch, rope_dims, c->head_dim);
    static const char *const refused[] = {"rope_factors_long.weight", "rope_factors_short.weight"};
    for (int i = 0; i < 2; i++)
        if (tensor_set_find(ts, refused[i], NULL))
            return kvlm_error_set(err, KVLM_ERR_UNSUPPORTED, "%s: tensor '%s': Phi-3's longrope (128k) rope scaling "
                                  "is not supported", g->path, refused[i]);
    return KVLM_OK;
}

/* Llama 3 scaling shipped as per-frequency divisors. */
static int apply_rope_freqs(kvlm_model *m, kvlm_error *err) {
    const named_tensor *rf = tensor_set_find(&m->ts, "rope_freqs.weight", NULL);
    if (!rf || !m->n_rope) return KVLM_OK;
    const int half = m->rope_freq_n[0];
    if (rf->t.ndim != 1 || rf->t.shape[0] != half || rf->t.dtype != KVLM_F32)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: rope_freqs.weight must be F32 [%d]", rf->file, half);
    for (int i = 0; i < half; i++) {
        float d = ((const float *)rf->t.data)[i];
        if (!(d > 0)) return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: rope_freqs.weight[%d] = %g is not positive", rf->file, i, d);
        m->rope_freq[0][i] /= d;
    }
    return KVLM_OK;
}

int model_load_gguf(kvlm_model *m, const char *path, kvlm_error *err) {
    gguf_meta g = {0};
    int rc = gguf_load(&m->ts, &g, path, err);
    if (!rc) rc = read_config(&g, &m->ts, &m->cfg, err);
    if (!rc) rc = model_check_config(&m->cfg, MODEL_SRC_GGUF, path, err);
    if (!rc) rc = check_runnable(&g, &m->ts, &m->cfg, err);
    if (!rc) {
        snprintf(m->source, sizeof m->source, "gguf (%s): %s", m->cfg.arch, path);
        rc = strcmp(m->cfg.arch, "gpt2") ? llama_bind(m, path, err) : gpt2_bind(m, path, err);
    }
    if (!rc) rc = apply_rope_freqs(m, err);
    gguf_meta_free(&g);
    return rc;
}

int model_gguf_config(const char *path, kvlm_config *cfg, kvlm_error *err) {
    tensor_set ts;
    tensor_set_init(&ts);
    gguf_meta g = {0};
    int rc = gguf_load(&ts, &g, path, err);
    if (!rc) rc = read_config(&g, &ts, cfg, err);
    if (!rc) rc = model_check_config(cfg, MODEL_SRC_GGUF, path, err);
    gguf_meta_free(&g);
    tensor_set_free(&ts);
    return rc;
}
