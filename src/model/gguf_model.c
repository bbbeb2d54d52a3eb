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
 * one Phi-3 files carry). The per-layer keys (partial rotary, Phi-3's
 * LongRoPE factors, Gemma's window pattern and soft-caps, Granite's
 * multipliers) are read by model/gguf_layers.c; SmolLM3 and Granite files
 * have Llama's interleaved q/k rows, Gemma's Hugging Face's order.
 * Mixtures of experts (qwen2moe, qwen3moe, llama with expert_count) read
 * their expert counts and sizes (read_experts); the binder takes the 3-D
 * expert tensors.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "formats/gguf.h"
#include "model/gguf_layers.h"
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

/* The mixture of experts, when {arch}.expert_count is present and not 0
 * (a Mixtral file is a "llama" one with experts): expert_used_count in
 * [1, expert_count], each expert's FFN of expert_feed_forward_length
 * (default feed_forward_length, as Mixtral files leave it), Qwen2-MoE's
 * shared expert of expert_shared_feed_forward_length. The routing weights
 * are renormalised as llama.cpp does per architecture (Qwen3-MoE and
 * Llama/Mixtral yes, Qwen2-MoE and gpt-oss no) unless expert_weights_norm
 * says; gpt-oss's softmax over the chosen k is in its layer spec. */
static int read_experts(const gguf_meta *g, kvlm_config *c, kvlm_error *err) {
    const char *arch = c->arch;
    int rc, norm;
    if ((rc = read_int(g, arch, "expert_count", 0, 4096, 0, 0, &c->n_expert, err))) return rc;
    if (!c->n_expert) {
        if (strstr(arch, "moe") || !strcmp(arch, "gpt-oss"))
            return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: %s.expert_count is missing or 0", g->path, arch);
        return KVLM_OK;
    }
    char k[128];
    snprintf(k, sizeof k, "%s.expert_used_count", arch);
    if ((rc = read_int(g, arch, "expert_used_count", 0, 4096, 0, 1, &c->n_expert_used, err))) return rc;
    if (c->n_expert_used < 1 || c->n_expert_used > c->n_expert)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: %s = %d is outside [1, expert_count = %d]", g->path, k,
                              c->n_expert_used, c->n_expert);
    if ((rc = read_int(g, arch, "expert_feed_forward_length", 1, 1 << 20, c->n_ff, 0, &c->n_ff_expert, err)) ||
        (rc = read_int(g, arch, "expert_shared_feed_forward_length", 0, 1 << 20, 0, 0, &c->n_ff_shared, err)))
        return rc;
    snprintf(k, sizeof k, "%s.expert_weights_norm", arch);
    if ((rc = gguf_get_bool_or(g, k, strcmp(arch, "qwen2moe") && strcmp(arch, "gpt-oss"), &norm, err))) return rc;
    if (!strcmp(arch, "qwen2moe") && !c->n_ff_shared) c->n_ff_shared = c->n_ff;
    c->expert_norm_topk = norm;
    return KVLM_OK;
}

static int read_config(const gguf_meta *g, const tensor_set *ts, kvlm_config *c, layer_spec *spec, kvlm_error *err) {
    const char *arch;
    int rc = gguf_get_string(g, "general.architecture", &arch, err);
    if (rc) return rc;
    /* llama.cpp's converter permutes q/k rows into rotary pairs (2i, 2i+1)
     * for these; the others keep Hugging Face's rotate-half order. */
    const int gpt2 = !strcmp(arch, "gpt2"), rope_pairs = !strcmp(arch, "llama") || !strcmp(arch, "mistral") ||
                                                         !strcmp(arch, "smollm3") || !strcmp(arch, "granite");
    static const char *const neox[] = {"qwen2", "qwen3", "phi3", "gemma2", "gemma3", "qwen2moe", "qwen3moe", "gpt-oss"};
    int known = gpt2 || rope_pairs;
    for (size_t i = 0; i < sizeof neox / sizeof *neox; i++) known |= !strcmp(arch, neox[i]);
    if (!known)
        return kvlm_error_set(err, KVLM_ERR_UNSUPPORTED, "%s: general.architecture '%s' is not supported (gpt2, llama, "
                              "mistral, qwen2, qwen3, phi3, gemma2, gemma3, smollm3, granite, qwen2moe, qwen3moe, gpt-oss)", g->path, arch);
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
        c->qk_norm = !strcmp(arch, "qwen3") || !strcmp(arch, "qwen3moe");
        if ((rc = read_int(g, arch, "attention.sliding_window", 0, 1 << 30, 0, 0, &c->sliding_window, err))) return rc;
        if (c->sliding_window >= c->n_ctx) c->sliding_window = 0;
        if ((rc = gguf_layer_spec(g, ts, c, spec, err))) return rc;
        /* A window on every layer is the model's (the cache releases). */
        int all = spec->window > 0 && spec->window < c->n_ctx;
        for (int l = 0; all && l < c->n_layer; l++) all = spec->sliding[l];
        if (all) c->sliding_window = spec->window;
        if ((rc = read_experts(g, c, err))) return rc;
    }
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
    if (!rc) rc = read_config(&g, &m->ts, &m->cfg, m->spec, err);
    if (!rc) rc = model_check_config(&m->cfg, MODEL_SRC_GGUF, path, err);
    if (!rc) {
        snprintf(m->source, sizeof m->source, "gguf (%s): %s", m->cfg.arch, path);
        rc = strcmp(m->cfg.arch, "gpt2") ? llama_bind(m, path, err) : gpt2_bind(m, path, err);
    }
    if (!rc) rc = apply_rope_freqs(m, err);
    if (!rc) {
        /* Embedding pooling (llama.cpp's enum); model_read_pooling judges the value. */
        char k[128];
        int64_t pool = -1;
        snprintf(k, sizeof k, "%s.pooling_type", m->cfg.arch);
        if (gguf_get_int_or(&g, k, INT32_MIN, INT32_MAX, -1, &pool, NULL)) pool = 100;
        model_read_pooling(m, (int)pool);
    }
    gguf_meta_free(&g);
    return rc;
}

int model_gguf_config(const char *path, kvlm_config *cfg, layer_spec *spec_out, kvlm_error *err) {
    tensor_set ts;
    tensor_set_init(&ts);
    gguf_meta g = {0};
    layer_spec *spec = spec_out ? spec_out : malloc(sizeof *spec);
    if (spec) layer_spec_init(spec);
    int rc = spec ? gguf_load(&ts, &g, path, err) : kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    if (!rc) rc = read_config(&g, &ts, cfg, spec, err);
    if (!rc) rc = model_check_config(cfg, MODEL_SRC_GGUF, path, err);
    if (spec != spec_out) free(spec);
    gguf_meta_free(&g);
    tensor_set_free(&ts);
    return rc;
}
