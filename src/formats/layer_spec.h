/*
 * What a model's config says about its layers beyond kvlm_config: which
 * layers use the sliding window, which skip the rotary embedding, how much
 * of each head is rotated and with which frequencies per layer type, the
 * query scale, soft-capping, and the multipliers and norms some families
 * add around the blocks. The config readers (formats/hf_config.c for
 * config.json, model/gguf_model.c for GGUF metadata) fill it;
 * model/attn_desc.c turns it into the model's per-layer description. Plain
 * data: no validation here beyond what the readers do.
 *
 * Defaults (layer_spec_init): every layer global and rotated over the whole
 * head, query scale 1/sqrt(head_dim), no capping, multipliers 1, Llama's
 * block (RMSNorm weights as stored, no extra norms, SwiGLU).
 */
#ifndef KVLM_LAYER_SPEC_H
#define KVLM_LAYER_SPEC_H

#include "kvlm.h"

#define LAYER_SPEC_MAX 1024     /* layers (the loaders' limit too) */
#define LAYER_SPEC_MAX_FACTORS 2048 /* LongRoPE factors (head_dim / 2 <= 2048) */

typedef struct layer_spec {
    int window;                                /* window of the sliding layers; 0: none */
    unsigned char sliding[LAYER_SPEC_MAX];     /* 1: layer l attends over the window */
    unsigned char no_rope[LAYER_SPEC_MAX];     /* 1: layer l has no rotary embedding */
    int rope_dims;                             /* rotated dimensions per head; 0: head_dim */
    float local_rope_theta;                    /* rotary base of the sliding layers; 0: rope_theta */
    float rope_linear;                         /* linear scaling of the global layers (positions / f); 0: none */
    float query_scale;                         /* scores = query_scale * q . k; 0: 1 / sqrt(head_dim) */
    float attn_softcap, final_softcap;         /* 0: none */
    float embed_scale, residual_scale, logit_scale; /* 0: 1 */
    int norm_plus_one;                         /* RMSNorm weights w act as 1 + w (Gemma's config.json) */
    int post_norms;                            /* RMSNorm of each sublayer's output (Gemma 2 / 3) */
    int gelu_mlp;                              /* GeGLU with tanh GELU instead of SwiGLU */
    /* LongRoPE (Phi-3 128k, Phi-4-mini): frequencies divided by the long
     * factors when the context exceeds longrope_ctx, else the short ones;
     * cos and sin scaled by longrope_mscale. */
    int n_factors;                             /* 0: no LongRoPE */
    int longrope_ctx;                          /* original_max_position_embeddings */
    float longrope_mscale;
    float long_factor[LAYER_SPEC_MAX_FACTORS], short_factor[LAYER_SPEC_MAX_FACTORS];
    /* YaRN (rope_scaling type yarn; model/rope.c): frequency i is
     * extrapolated (kept) below the correction range of beta_fast ..
     * beta_slow, interpolated (divided by yarn_factor) above it, mixed
     * linearly inside; cos and sin times yarn_mscale. yarn_truncate rounds
     * the range to whole dimensions (llama.cpp always does; Hugging Face
     * unless the config's truncate is false). */
    float yarn_factor;                         /* 0: no YaRN */
    float yarn_beta_fast, yarn_beta_slow, yarn_mscale;
    int yarn_orig_ctx, yarn_truncate;
    int attn_sinks;                            /* one learned logit per query head joins each softmax (gpt-oss) */
    int o_bias;                                /* the attention output projection has a bias */
    int ffn_norm_post_attn;                    /* GGUF: the FFN's norm is named post_attention_norm (gpt-oss) */
    /* Mixtures of experts: routing and the experts' activation. */
    int moe_topk_softmax;                      /* top k of the raw router logits, then softmax over the k (gpt-oss) */
    int moe_bias;                              /* the router and the experts' matrices have biases */
    float swiglu_limit;                        /* > 0: clamped SwiGLU, (min(up,..) + 1) * g * sigmoid(alpha g) */
    float swiglu_alpha;
} layer_spec;

static inline void layer_spec_init(layer_spec *s) {
    *s = (layer_spec){0};
}

#endif
