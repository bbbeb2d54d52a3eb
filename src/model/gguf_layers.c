/*
 * The per-layer spec of a GGUF file (formats/layer_spec.h), from llama.cpp's
 * keys ({arch} prefix) and tensors:
 *
 *   every arch   rope.dimension_count below key_length: a partial rotary
 *                embedding (even, >= 2); rope.scaling.type "linear" with
 *                rope.scaling.factor (or rope.scale_linear).
 *   gemma2/3     attention.sliding_window (Gemma 2: 4096 when absent) on the
 *                layers attention.sliding_window_pattern marks (an array of
 *                one bool per layer, or n: layer l slides when l % n < n - 1;
 *                default 2 for Gemma 2, 6 for Gemma 3), embeddings x
 *                sqrt(embedding_length), norms after each sublayer, GeGLU,
 *                query scale attention.scale, else 1/sqrt(key_length) (1 /
 *                sqrt(embedding_length / head_count) for the 27B shapes, 46
 *                and 62 layers, as llama.cpp does; their
 *                query_pre_attn_scalar is not in the file). The norm
 *                weights are stored with Gemma's + 1 already added. Gemma 2:
 *                attn_logit_softcapping and final_logit_softcapping
 *                (required); Gemma 3: q/k norms, rope.freq_base_swa (default
 *                10000) on the sliding layers, final_logit_softcapping if set.
 *   smollm3      no rotary on every fourth layer (llama.cpp's fixed step;
 *                the file has no key for it).
 *   granite      logit_scale (logits divided by it, required),
 *                embedding_scale, residual_scale, attention.scale.
 *   phi3         LongRoPE: tensors rope_factors_long / rope_factors_short
 *                (F32, rotary dimensions / 2 each), the long ones when
 *                context_length exceeds rope.scaling.original_context_length
 *                (llama.cpp decides by its context the same way), cos and
 *                sin times rope.scaling.attn_factor (default sqrt(1 +
 *                ln(s) / ln(orig)), s = context / orig).
 *   gpt-oss      attention.sliding_window on the layers of the pattern
 *                (default 2), sinks, biases, clamped SwiGLU (gptoss).
 *   every arch   rope.scaling.type yarn (yarn).
 */
#include "model/gguf_layers.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "error.h"

static int is(const kvlm_config *c, const char *a) { return !strcmp(c->arch, a); }

static const char *key(char *buf, size_t n, const kvlm_config *c, const char *k) {
    snprintf(buf, n, "%s.%s", c->arch, k);
    return buf;
}

/* A float key in (lo, hi); absent: def (< 0: required). */
static int fkey(const gguf_meta *g, const kvlm_config *c, const char *k, double def, double lo, double hi, float *out,
                kvlm_error *err) {
    char b[160];
    double v;
    int rc = def < 0 ? gguf_get_float(g, key(b, sizeof b, c, k), &v, err)
                     : gguf_get_float_or(g, key(b, sizeof b, c, k), def, &v, err);
    if (rc) return rc;
    if (!(v > lo && v < hi)) return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: %s = %g is outside (%g, %g)", g->path, b, v, lo, hi);
    *out = (float)v;
    return KVLM_OK;
}

static int swa_pattern(const gguf_meta *g, kvlm_config *c, layer_spec *s, int def, kvlm_error *err) {
    char b[160];
    const gguf_kv *kv = gguf_meta_find(g, key(b, sizeof b, c, "attention.sliding_window_pattern"));
    if (kv && kv->type == GGUF_TYPE_ARRAY) {
        const int ok = kv->elem == GGUF_TYPE_BOOL || kv->elem == GGUF_TYPE_U8 || kv->elem == GGUF_TYPE_I8 ||
                       kv->elem == GGUF_TYPE_U16 || kv->elem == GGUF_TYPE_I16 || kv->elem == GGUF_TYPE_U32 ||
                       kv->elem == GGUF_TYPE_I32 || kv->elem == GGUF_TYPE_U64 || kv->elem == GGUF_TYPE_I64;
        if (kv->n != (uint64_t)c->n_layer || !ok)
            return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: %s must hold one bool for each of the %d layers (%s.block_count)",
                                  g->path, b, c->n_layer, c->arch);
        for (int l = 0; l < c->n_layer; l++) s->sliding[l] = gguf_kv_int(kv, (uint64_t)l) != 0;
        return KVLM_OK;
    }
    int64_t n;
    int rc = gguf_get_int_or(g, b, 0, 1 << 20, def, &n, err);
    if (rc) return rc;
    if (n < 1 || n > c->n_layer)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: %s = %lld does not fit %d layers (%s.block_count)", g->path, b,
                              (long long)n, c->n_layer, c->arch);
    for (int l = 0; l < c->n_layer; l++) s->sliding[l] = l % n < n - 1;
    return KVLM_OK;
}

static int gemma(const gguf_meta *g, kvlm_config *c, layer_spec *s, kvlm_error *err) {
    char b[160];
    int rc;
    const int g2 = is(c, "gemma2");
    s->post_norms = s->gelu_mlp = 1;
    s->embed_scale = sqrtf((float)c->n_embd);
    int64_t w;
    if ((rc = gguf_get_int_or(g, key(b, sizeof b, c, "attention.sliding_window"), 0, 1 << 30, g2 ? 4096 : 0, &w, err)))
        return rc;
    if (w > c->n_ctx)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: %s = %lld exceeds %s.context_length = %d", g->path, b,
                              (long long)w, c->arch, c->n_ctx);
    s->window = (int)w;
    c->sliding_window = 0;
    if (w && (rc = swa_pattern(g, c, s, g2 ? 2 : 6, err))) return rc;
    const int big = c->n_layer == (g2 ? 46 : 62);
    const float def = big ? 1.0f / sqrtf((float)c->n_embd / c->n_head) : 1.0f / sqrtf((float)c->head_dim);
    if ((rc = fkey(g, c, "attention.scale", def, 0, 1e9, &s->query_scale, err))) return rc;
    if (g2) {
        if ((rc = fkey(g, c, "attn_logit_softcapping", -1, 0, 1e9, &s->attn_softcap, err)) ||
            (rc = fkey(g, c, "final_logit_softcapping", -1, 0, 1e9, &s->final_softcap, err)))
            return rc;
        return KVLM_OK;
    }
    c->qk_norm = 1;
    if ((rc = fkey(g, c, "final_logit_softcapping", 0, -1e-30, 1e9, &s->final_softcap, err)) ||
        (rc = fkey(g, c, "rope.freq_base_swa", 10000, 1, 1e12, &s->local_rope_theta, err)))
        return rc;
    return KVLM_OK;
}

static int granite(const gguf_meta *g, kvlm_config *c, layer_spec *s, kvlm_error *err) {
    float ls;
    int rc;
    if ((rc = fkey(g, c, "logit_scale", -1, 0, 1e9, &ls, err)) ||
        (rc = fkey(g, c, "embedding_scale", 1, 0, 1e9, &s->embed_scale, err)) ||
        (rc = fkey(g, c, "residual_scale", 1, 0, 1e9, &s->residual_scale, err)) ||
        (rc = fkey(g, c, "attention.scale", 1 / sqrt(c->head_dim), 0, 1e9, &s->query_scale, err)))
        return rc;
    s->logit_scale = 1.0f / ls;
    return KVLM_OK;
}

static int factors(const gguf_meta *g, const tensor_set *ts, const char *name, int n, float *out, kvlm_error *err) {
    const named_tensor *t = tensor_set_find(ts, name, NULL);
    if (!t || t->t.ndim != 1 || t->t.shape[0] != n || t->t.dtype != KVLM_F32)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: tensor '%s' must be F32 [%d] (rotary dimensions / 2)", g->path,
                              name, n);
    for (int i = 0; i < n; i++) {
        out[i] = ((const float *)t->t.data)[i];
        if (!(out[i] > 0))
            return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: %s[%d] = %g is not positive", g->path, name, i, out[i]);
    }
    return KVLM_OK;
}

static int longrope(const gguf_meta *g, const tensor_set *ts, kvlm_config *c, layer_spec *s, kvlm_error *err) {
    const int has_long = tensor_set_find(ts, "rope_factors_long.weight", NULL) != NULL;
    if (!has_long && !tensor_set_find(ts, "rope_factors_short.weight", NULL)) return KVLM_OK;
    const int n = (s->rope_dims ? s->rope_dims : c->head_dim) / 2;
    char b[160];
    int rc;
    int64_t orig;
    if (n > LAYER_SPEC_MAX_FACTORS) return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: too many rotary dimensions", g->path);
    if ((rc = factors(g, ts, "rope_factors_long.weight", n, s->long_factor, err)) ||
        (rc = factors(g, ts, "rope_factors_short.weight", n, s->short_factor, err)) ||
        (rc = gguf_get_int(g, key(b, sizeof b, c, "rope.scaling.original_context_length"), 1, 1 << 24, &orig, err)))
        return rc;
    s->n_factors = n;
    s->longrope_ctx = (int)orig;
    const double sc = (double)c->n_ctx / orig;
    const double def = sc <= 1 ? 1.0 : sqrt(1 + log(sc) / log((double)orig));
    return fkey(g, c, "rope.scaling.attn_factor", def, 0, 1e9, &s->longrope_mscale, err);
}

/* gpt-oss: attention.sliding_window (required) on the layers of
 * attention.sliding_window_pattern (default 2: the even ones), sinks,
 * biases, the FFN norm named post_attention_norm, top-k-then-softmax
 * routing, the clamped SwiGLU with llama.cpp's constants (limit 7, alpha
 * 1.702: the file has no key for them). */
static int gptoss(const gguf_meta *g, kvlm_config *c, layer_spec *s, kvlm_error *err) {
    char b[160];
    int64_t w;
    int rc;
    if ((rc = gguf_get_int(g, key(b, sizeof b, c, "attention.sliding_window"), 1, 1 << 30, &w, err))) return rc;
    if (w > c->n_ctx)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: %s = %lld exceeds %s.context_length = %d", g->path, b,
                              (long long)w, c->arch, c->n_ctx);
    s->window = (int)w;
    c->sliding_window = 0;
    if ((rc = swa_pattern(g, c, s, 2, err))) return rc;
    s->attn_sinks = s->o_bias = s->moe_bias = s->moe_topk_softmax = s->ffn_norm_post_attn = 1;
    s->swiglu_limit = 7.0f;
    s->swiglu_alpha = 1.702f;
    return KVLM_OK;
}

/* rope.scaling.type yarn: rope.scaling.factor (> 1),
 * rope.scaling.original_context_length, yarn_beta_fast (32), yarn_beta_slow
 * (1); cos and sin times 0.1 ln(factor) + 1 and rope.scaling.attn_factor
 * (1), the correction range rounded to whole dimensions: what llama.cpp
 * computes. */
static int yarn(const gguf_meta *g, kvlm_config *c, layer_spec *s, kvlm_error *err) {
    char b[160];
    int64_t orig;
    float af = 1;
    int rc;
    if ((rc = fkey(g, c, "rope.scaling.factor", -1, 1, 1e6, &s->yarn_factor, err)) ||
        (rc = fkey(g, c, "rope.scaling.yarn_beta_fast", 32, 0, 1e6, &s->yarn_beta_fast, err)) ||
        (rc = fkey(g, c, "rope.scaling.yarn_beta_slow", 1, 0, 1e6, &s->yarn_beta_slow, err)) ||
        (rc = fkey(g, c, "rope.scaling.attn_factor", 1, 0, 1e6, &af, err)) ||
        (rc = gguf_get_int(g, key(b, sizeof b, c, "rope.scaling.original_context_length"), 1, 1 << 24, &orig, err)))
        return rc;
    if (!(s->yarn_beta_fast > s->yarn_beta_slow))
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: %s.rope.scaling.yarn_beta_fast = %g must exceed yarn_beta_slow = %g",
                              g->path, c->arch, s->yarn_beta_fast, s->yarn_beta_slow);
    s->yarn_orig_ctx = (int)orig;
    s->yarn_mscale = (float)(0.1 * log(s->yarn_factor) + 1.0) * af;
    s->yarn_truncate = 1;
    return KVLM_OK;
}

int gguf_layer_spec(const gguf_meta *g, const tensor_set *ts, kvlm_config *c, layer_spec *s, kvlm_error *err) {
    char b[160];
    int rc;
    int64_t rd;
    layer_spec_init(s);
    if (!c->rope_theta) return KVLM_OK;
    if ((rc = gguf_get_int_or(g, key(b, sizeof b, c, "rope.dimension_count"), 0, 1 << 16, c->head_dim, &rd, err)))
        return rc;
    if (rd < 2 || rd % 2 || rd > c->head_dim)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: %s = %lld: an even count of rotated dimensions in [2, %d] "
                              "(key_length) is needed", g->path, b, (long long)rd, c->head_dim);
    s->rope_dims = rd == c->head_dim ? 0 : (int)rd;
    const char *type;
    if (gguf_meta_find(g, key(b, sizeof b, c, "rope.scaling.type"))) {
        if ((rc = gguf_get_string(g, b, &type, err))) return rc;
        if (!strcmp(type, "linear")) {
            if (gguf_meta_find(g, key(b, sizeof b, c, "rope.scaling.factor")))
                rc = fkey(g, c, "rope.scaling.factor", 1, 0.999, 1e6, &s->rope_linear, err);
            else
                rc = fkey(g, c, "rope.scale_linear", 1, 0.999, 1e6, &s->rope_linear, err);
            if (rc) return rc;
        } else if (!strcmp(type, "yarn") && (rc = yarn(g, c, s, err))) {
            return rc;
        }
    }
    if (is(c, "gemma2") || is(c, "gemma3")) rc = gemma(g, c, s, err);
    else if (is(c, "smollm3"))
        for (int l = 0; l < c->n_layer; l++) s->no_rope[l] = (l + 1) % 4 == 0;
    else if (is(c, "granite")) rc = granite(g, c, s, err);
    else if (is(c, "phi3")) rc = longrope(g, ts, c, s, err);
    else if (is(c, "gpt-oss")) rc = gptoss(g, c, s, err);
    return rc;
}
