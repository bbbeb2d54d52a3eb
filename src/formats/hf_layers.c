/*
 * The per-layer part of a Llama-family config.json (formats/layer_spec.h),
 * read after the shared fields (formats/hf_config.c):
 *
 *   gemma2       sliding_window on the even layers (layer_types when given),
 *                query_pre_attn_scalar, attn_logit_softcapping and
 *                final_logit_softcapping (both required), embeddings times
 *                sqrt(hidden_size), (1 + w) norms, norms after each sublayer,
 *                GeGLU (hidden_activation gelu_pytorch_tanh).
 *   gemma3_text  the same block without soft-capping unless set;
 *                sliding_window_pattern (layer l is global when (l + 1) is a
 *                multiple of it) or layer_types; rope_local_base_freq for the
 *                sliding layers, rope_theta and rope_scaling (linear) for the
 *                global ones.
 *   smollm3      no_rope_layers (1: rotary, 0: none; default every fourth
 *                layer without), Qwen's sliding-window keys.
 *   granite      embedding_multiplier, attention_multiplier (the query
 *                scale), residual_multiplier, logits_scaling (divides).
 *   qwen2/qwen3  use_sliding_window: sliding_window on the layers from
 *                max_window_layers on.
 *   phi3         partial_rotary_factor; rope_scaling longrope (or su):
 *                long_factor / short_factor of rotary_dims / 2 values each,
 *                original_max_position_embeddings.
 *   mistral      sliding_window on every layer (default 4096 when absent).
 *   gpt_oss      sliding_window (default 128) on the layers layer_types
 *                marks (default the even ones), attention sinks, biases,
 *                top-k-then-softmax routing, swiglu_limit (default 7).
 *   any          rope_scaling yarn (hf_yarn): factor, beta_fast, beta_slow,
 *                original_max_position_embeddings, attention_factor,
 *                truncate.
 *
 * Every value out of range is an error naming its key.
 */
#include "formats/hf_layers.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "error.h"

static int is(const kvlm_config *c, const char *a) { return !strcmp(c->arch, a); }

static int get_float(json_t *root, const char *key, double def, double *out) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 1;
    }
    if (!json_is_number(v)) return 0;
    *out = json_number_value(v);
    return 1;
}

/* A float key that must be a number in (lo, hi) when present. */
static int num(json_t *root, const char *path, const char *key, double def, double lo, double hi, float *out,
               kvlm_error *err) {
    double v;
    if (!get_float(root, key, def, &v) || !(v > lo && v < hi))
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: %s must be a number in (%g, %g)", path, key, lo, hi);
    *out = (float)v;
    return KVLM_OK;
}

static int get_window(json_t *root, const char *path, int def, int *w, kvlm_error *err) {
    json_t *v = json_object_get(root, "sliding_window");
    if (!v) {
        *w = def;
        return KVLM_OK;
    }
    if (json_is_null(v)) {
        *w = 0;
        return KVLM_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (1 << 30))
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: field 'sliding_window' must be a non-negative integer", path);
    *w = (int)json_integer_value(v);
    return KVLM_OK;
}

/* layer_types: one "sliding_attention" or "full_attention" per layer;
 * returns 1 when the key was there. */
static int layer_types(json_t *root, const char *path, const kvlm_config *c, layer_spec *s, int *rc,
                       kvlm_error *err) {
    json_t *lt = json_object_get(root, "layer_types");
    *rc = KVLM_OK;
    if (!lt || json_is_null(lt)) return 0;
    if (!json_is_array(lt) || (int)json_array_size(lt) != c->n_layer) {
        *rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: layer_types must list one type for each of the %d layers "
                             "(num_hidden_layers)", path, c->n_layer);
        return 1;
    }
    for (int l = 0; l < c->n_layer; l++) {
        const char *t = json_string_value(json_array_get(lt, (size_t)l));
        if (t && !strcmp(t, "sliding_attention")) s->sliding[l] = 1;
        else if (!t || strcmp(t, "full_attention")) {
            *rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: layer_types[%d] is neither \"sliding_attention\" nor "
                                 "\"full_attention\"", path, l);
            return 1;
        }
    }
    return 1;
}

/* The window of the sliding layers: longer than the context is an error
 * for the families that mix window and global layers. */
static int check_window(const char *path, const kvlm_config *c, const layer_spec *s, kvlm_error *err) {
    if (s->window > c->n_ctx)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: sliding_window = %d exceeds max_position_embeddings = %d",
                              path, s->window, c->n_ctx);
    return KVLM_OK;
}

static int gemma(json_t *root, const char *path, kvlm_config *c, layer_spec *s, kvlm_error *err) {
    int rc;
    json_t *act = json_object_get(root, "hidden_activation");
    if (!act) act = json_object_get(root, "hidden_act");
    if (json_is_string(act) && strcmp(json_string_value(act), "gelu_pytorch_tanh"))
        return kvlm_error_set(err, KVLM_ERR_UNSUPPORTED, "%s: hidden_activation '%s' is not supported "
                              "(gelu_pytorch_tanh)", path, json_string_value(act));
    s->norm_plus_one = s->post_norms = s->gelu_mlp = 1;
    s->embed_scale = sqrtf((float)c->n_embd);
    float qs = 0;
    if ((rc = num(root, path, "query_pre_attn_scalar", c->head_dim, 0, 1e9, &qs, err))) return rc;
    s->query_scale = 1.0f / sqrtf(qs);
    /* Gemma's configs default to tied embeddings. */
    json_t *tie = json_object_get(root, "tie_word_embeddings");
    c->tie_embeddings = !tie || json_is_true(tie);
    if ((rc = get_window(root, path, 4096, &s->window, err))) return rc;
    if (is(c, "gemma2")) {
        if (!json_is_number(json_object_get(root, "attn_logit_softcapping")) ||
            !json_is_number(json_object_get(root, "final_logit_softcapping")))
            return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: gemma2 needs attn_logit_softcapping and "
                                  "final_logit_softcapping (numbers)", path);
        if (!layer_types(root, path, c, s, &rc, err))
            for (int l = 0; l < c->n_layer; l++) s->sliding[l] = l % 2 == 0;
    } else {
        c->qk_norm = 1;
        if ((rc = num(root, path, "rope_local_base_freq", 10000, 1, 1e12, &s->local_rope_theta, err))) return rc;
        if (!layer_types(root, path, c, s, &rc, err)) {
            json_t *pv = json_object_get(root, "sliding_window_pattern");
            const int p = pv ? (int)json_integer_value(pv) : 6;
            if (!json_is_integer(pv) && pv)
                return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: sliding_window_pattern must be an integer", path);
            if (p < 1 || p > c->n_layer)
                return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: sliding_window_pattern = %d does not fit %d layers "
                                      "(num_hidden_layers)", path, p, c->n_layer);
            for (int l = 0; l < c->n_layer; l++) s->sliding[l] = (l + 1) % p != 0;
        }
    }
    if (rc) return rc;
    if ((rc = num(root, path, "attn_logit_softcapping", 0, -1e-30, 1e9, &s->attn_softcap, err)) ||
        (rc = num(root, path, "final_logit_softcapping", 0, -1e-30, 1e9, &s->final_softcap, err)))
        return rc;
    return check_window(path, c, s, err);
}

/* Qwen2, Qwen3 and SmolLM3: a window only with use_sliding_window, on the
 * layers from max_window_layers on. */
static int qwen_window(json_t *root, const char *path, kvlm_config *c, layer_spec *s, kvlm_error *err) {
    int rc, from = 28;
    if (!json_is_true(json_object_get(root, "use_sliding_window"))) return KVLM_OK;
    if ((rc = get_window(root, path, 0, &s->window, err))) return rc;
    json_t *mw = json_object_get(root, "max_window_layers");
    if (mw && !json_is_null(mw)) {
        if (!json_is_integer(mw) || json_integer_value(mw) < 0 || json_integer_value(mw) > (1 << 20))
            return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: max_window_layers must be a non-negative integer", path);
        from = (int)json_integer_value(mw);
    }
    if (!layer_types(root, path, c, s, &rc, err))
        for (int l = from; l < c->n_layer; l++) s->sliding[l] = 1;
    if (rc) return rc;
    return check_window(path, c, s, err);
}

static int smollm3(json_t *root, const char *path, kvlm_config *c, layer_spec *s, kvlm_error *err) {
    json_t *nr = json_object_get(root, "no_rope_layers");
    if (!nr || json_is_null(nr)) {
        json_t *iv = json_object_get(root, "no_rope_layer_interval");
        const int k = iv ? (int)json_integer_value(iv) : 4;
        if (k < 1) return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: no_rope_layer_interval must be a positive integer", path);
        for (int l = 0; l < c->n_layer; l++) s->no_rope[l] = (l + 1) % k == 0;
    } else {
        if (!json_is_array(nr) || (int)json_array_size(nr) != c->n_layer)
            return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: no_rope_layers must list one 0 or 1 for each of the %d "
                                  "layers (num_hidden_layers)", path, c->n_layer);
        for (int l = 0; l < c->n_layer; l++) {
            json_t *v = json_array_get(nr, (size_t)l);
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1)
                return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: no_rope_layers[%d] is neither 0 nor 1", path, l);
            s->no_rope[l] = json_integer_value(v) == 0;
        }
    }
    return qwen_window(root, path, c, s, err);
}

static int granite(json_t *root, const char *path, kvlm_config *c, layer_spec *s, kvlm_error *err) {
    float ls = 1;
    int rc;
    (void)c;
    if ((rc = num(root, path, "embedding_multiplier", 1, 0, 1e9, &s->embed_scale, err)) ||
        (rc = num(root, path, "attention_multiplier", 1.0 / sqrt(c->head_dim), 0, 1e9, &s->query_scale, err)) ||
        (rc = num(root, path, "residual_multiplier", 1, 0, 1e9, &s->residual_scale, err)) ||
        (rc = num(root, path, "logits_scaling", 1, 0, 1e9, &ls, err)))
        return rc;
    s->logit_scale = 1.0f / ls;
    return KVLM_OK;
}

/* LongRoPE factors: exactly rotary_dims / 2 numbers. */
static int factors(json_t *sc, const char *path, const char *key, int n, float *out, kvlm_error *err) {
    json_t *a = json_object_get(sc, key);
    if (!json_is_array(a) || (int)json_array_size(a) != n)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: rope_scaling.%s must list %d numbers (rotary dimensions / 2), "
                              "not %d", path, key, n, json_is_array(a) ? (int)json_array_size(a) : 0);
    for (int i = 0; i < n; i++) {
        json_t *v = json_array_get(a, (size_t)i);
        if (!json_is_number(v) || !(json_number_value(v) > 0))
            return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: rope_scaling.%s[%d] is not a positive number", path, key, i);
        out[i] = (float)json_number_value(v);
    }
    return KVLM_OK;
}

static int phi3(json_t *root, const char *path, kvlm_config *c, layer_spec *s, kvlm_error *err) {
    double prf;
    if (!get_float(root, "partial_rotary_factor", 1.0, &prf) || !(prf > 0 && prf <= 1))
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: partial_rotary_factor must be a number in (0, 1]", path);
    s->rope_dims = (int)(c->head_dim * prf);
    if (s->rope_dims < 2 || s->rope_dims % 2)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: partial_rotary_factor = %g rotates %d of %d dimensions (an "
                              "even count >= 2 is needed)", path, prf, s->rope_dims, c->head_dim);
    return KVLM_OK;
}

/* rope_scaling of type longrope (su): called by hf_config.c. */
int hf_longrope(json_t *root, json_t *sc, const char *path, const kvlm_config *c, layer_spec *s, kvlm_error *err) {
    const int rd = s->rope_dims ? s->rope_dims : c->head_dim, n = rd / 2;
    int rc;
    if (n > LAYER_SPEC_MAX_FACTORS)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: %d rotary dimensions are too many for longrope", path, rd);
    if ((rc = factors(sc, path, "long_factor", n, s->long_factor, err)) ||
        (rc = factors(sc, path, "short_factor", n, s->short_factor, err)))
        return rc;
    json_t *o = json_object_get(root, "original_max_position_embeddings");
    if (!json_is_integer(o) || json_integer_value(o) < 1 || json_integer_value(o) > (1 << 24))
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: longrope needs original_max_position_embeddings (a positive "
                              "integer)", path);
    s->longrope_ctx = (int)json_integer_value(o);
    s->n_factors = n;
    /* The attention factor: given, or Hugging Face's default from the
     * extension ratio. */
    const double scale = (double)c->n_ctx / s->longrope_ctx;
    double af;
    if (!get_float(sc, "attention_factor", 0, &af) || af < 0)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: rope_scaling.attention_factor must be a positive number", path);
    if (af == 0) af = scale <= 1 ? 1.0 : sqrt(1 + log(scale) / log((double)s->longrope_ctx));
    s->longrope_mscale = (float)af;
    return KVLM_OK;
}

/* gpt-oss: sliding_window (default 128) on the layers layer_types marks
 * (default the even ones), attention sinks, biases on the attention output,
 * router and experts, routing by the top k logits then a softmax over them,
 * the clamped SwiGLU of swiglu_limit (default 7) with alpha 1.702. */
static int gptoss(json_t *root, const char *path, kvlm_config *c, layer_spec *s, kvlm_error *err) {
    int rc;
    if ((rc = get_window(root, path, 128, &s->window, err))) return rc;
    if (!layer_types(root, path, c, s, &rc, err))
        for (int l = 0; l < c->n_layer; l++) s->sliding[l] = l % 2 == 0;
    if (rc) return rc;
    s->attn_sinks = s->o_bias = s->moe_bias = s->moe_topk_softmax = 1;
    s->swiglu_alpha = 1.702f;
    if ((rc = num(root, path, "swiglu_limit", 7.0, 0, 1e9, &s->swiglu_limit, err))) return rc;
    return check_window(path, c, s, err);
}

/* rope_scaling of type yarn: called by hf_config.c. factor > 1,
 * original_max_position_embeddings (in the object or the config), beta_fast
 * (32) > beta_slow (1), attention_factor (default 0.1 ln(factor) + 1),
 * truncate (default true). */
int hf_yarn(json_t *root, json_t *sc, const char *path, const kvlm_config *c, layer_spec *s, kvlm_error *err) {
    (void)c;
    int rc;
    float af = 0;
    if ((rc = num(sc, path, "factor", 0, 1, 1e6, &s->yarn_factor, err)) ||
        (rc = num(sc, path, "beta_fast", 32, 0, 1e6, &s->yarn_beta_fast, err)) ||
        (rc = num(sc, path, "beta_slow", 1, 0, 1e6, &s->yarn_beta_slow, err)) ||
        (rc = num(sc, path, "attention_factor", 0, -1e-30, 1e6, &af, err))) {
        char m[sizeof err->msg];
        snprintf(m, sizeof m, "%s", err->msg);
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "rope_scaling (yarn): %s", m);
    }
    if (!(s->yarn_beta_fast > s->yarn_beta_slow))
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: rope_scaling.beta_fast = %g must exceed beta_slow = %g", path,
                              s->yarn_beta_fast, s->yarn_beta_slow);
    json_t *o = json_object_get(sc, "original_max_position_embeddings");
    if (!o) o = json_object_get(root, "original_max_position_embeddings");
    if (!json_is_integer(o) || json_integer_value(o) < 1 || json_integer_value(o) > (1 << 24))
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: rope_scaling (yarn) needs original_max_position_embeddings "
                              "(a positive integer)", path);
    s->yarn_orig_ctx = (int)json_integer_value(o);
    s->yarn_mscale = af > 0 ? af : (float)(0.1 * log(s->yarn_factor) + 1.0);
    json_t *t = json_object_get(sc, "truncate");
    s->yarn_truncate = !json_is_false(t);
    return KVLM_OK;
}

int hf_layer_spec(json_t *root, const char *path, kvlm_config *c, layer_spec *s, kvlm_error *err) {
    if (is(c, "gemma2") || is(c, "gemma3")) return gemma(root, path, c, s, err);
    if (is(c, "qwen2") || is(c, "qwen3") || is(c, "qwen2moe") || is(c, "qwen3moe")) return qwen_window(root, path, c, s, err);
    if (is(c, "smollm3")) return smollm3(root, path, c, s, err);
    if (is(c, "granite")) return granite(root, path, c, s, err);
    if (is(c, "phi3")) return phi3(root, path, c, s, err);
    if (is(c, "gpt-oss")) return gptoss(root, path, c, s, err);
    return KVLM_OK;
}
