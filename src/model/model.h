/*
 * A loaded model: its configuration and its weights bound by name for one
 * of two block designs, GPT-2 (LayerNorm with bias, learned positions,
 * fused QKV, GELU MLP) and Llama (RMSNorm, rotary positions, Q/K/V with
 * grouped-query heads, SwiGLU MLP), the latter with the variations of
 * Mistral, Qwen2 (q/k/v biases), Qwen3 (per-head q/k RMSNorm) and Phi-3
 * (fused qkv and gate|up matrices, used as stored: one matmul each),
 * Gemma 2 / 3 (norms after each sublayer, GeGLU), SmolLM3 and Granite,
 * and the mixtures of experts (model_moe) of Qwen2/3-MoE, Mixtral and
 * gpt-oss (attention sinks and an output bias too).
 * How each layer attends is a per-layer description (model_attn_layer,
 * built by model/attn_desc.c from the config's layer_spec) that the
 * forward pass reads instead of the architecture's name. Matrices are kept in their
 * stored dtype in [out, in] layout (kern_matrix); small vectors (norm
 * weights, biases) are widened to f32 once at load. Knows nothing about
 * the KV cache or sampling.
 */
#ifndef KVLM_MODEL_H
#define KVLM_MODEL_H

#include "formats/layer_spec.h"
#include "formats/tensor_set.h"
#include "kernels/kernels.h"
#include "kvlm.h"

typedef enum model_arch { ARCH_GPT2, ARCH_LLAMA } model_arch;

/* One transformer block. GPT-2 uses wqkv (fused) and w_up/w_down with
 * biases; Llama uses wq/wk/wv and w_gate/w_up/w_down; Phi-3 uses wqkv and
 * w_gate_up. A NULL bias or norm bias means none (RMSNorm has no bias). */
/* A layer's mixture of experts (model/moe_bind.c), in place of its dense
 * MLP: the router [n_expert, C] and, per expert, its gate, up [F_e, C] and
 * down [C, F_e] matrices, each a view into the file (a GGUF file's 3-D
 * ffn_*_exps tensors, or Hugging Face's tensors of one expert each; never
 * a copy); the shared expert (data NULL without one) and its sigmoid
 * gate's weights [C]. */
typedef struct model_moe {
    kern_matrix router;
    kern_matrix *gate, *up, *down;   /* n_expert each */
    kern_matrix sh_gate, sh_up, sh_down;
    float *sh_router;
    /* gpt-oss: biases (NULL: none) of the router [n_expert], of each
     * expert's gate and up [n_expert, F_e] and down [n_expert, C]; routing
     * by the top k logits then a softmax over them (topk_softmax); the
     * clamped SwiGLU when limit > 0: g = min(gate, limit), u = clamp(up,
     * +-limit), act = (u + 1) g sigmoid(alpha g). */
    float *router_b, *gate_b, *up_b, *down_b;
    int topk_softmax;
    float limit, alpha;
} model_moe;

typedef struct model_layer {
    float *norm1_w, *norm1_b;
    kern_matrix wqkv;          /* [q_dim + 2 kv_dim, C] rows q, k, v; data NULL when split */
    kern_matrix wq, wk, wv;    /* [q_dim, C], [kv_dim, C], [kv_dim, C] */
    float *bqkv;               /* [q_dim + 2 kv_dim] or NULL */
    float *q_norm, *k_norm;    /* [head_dim] RMSNorm weights of each q / k head, or NULL */
    kern_matrix wo;            /* [C, q_dim] */
    float *bo;
    float *norm2_w, *norm2_b;
    kern_matrix w_gate;        /* [F, C]; data NULL without a gate (GPT-2) */
    kern_matrix w_up;          /* [F, C] */
    kern_matrix w_gate_up;     /* [2F, C] rows gate, up (Phi-3); data NULL when split */
    float *b_up;
    kern_matrix w_down;        /* [C, F] */
    float *b_down;
    float *post_attn_norm;     /* [C] RMSNorm of the attention output before the residual add (Gemma 2/3), or NULL */
    float *post_ffn_norm;      /* [C] RMSNorm of the MLP output before the residual add, or NULL */
    model_moe *moe;            /* the FFN is a mixture of experts (w_gate ... unused), or NULL */
    float *sinks;              /* [n_head] attention sink logits (gpt-oss), or NULL */
} model_layer;

/* How one layer attends (model/attn_desc.c fills it from the config): the
 * forward pass reads only these fields, never the architecture's name. */
typedef struct model_attn_layer {
    int window;          /* keys p - window + 1 .. p (0: the whole context) */
    int rope_dims;       /* leading dimensions of each head rotated (even, <= head_dim); 0: no rotary */
    int rope_table;      /* index into kvlm_model.rope_freq */
    float scale;         /* scores = scale * q . k */
    float softcap;       /* > 0: scores capped to softcap * tanh(s / softcap); 0: none */
    const float *sinks;  /* [n_head] learned logits in the softmax denominator, or NULL */
} model_attn_layer;

#define MODEL_MAX_ROPE 2

/* The activation of a gated MLP: down(act(gate(h)) * up(h)). */
typedef enum model_mlp_act { MLP_SILU, MLP_GELU_TANH } model_mlp_act;

/* Every weight matrix of a layer, as an array initializer of pointers
 * (those a block design does not use have data NULL): the one list that
 * parameter counts, decode byte counts, load-time repacking and the float
 * batch report walk. */
#define MODEL_LAYER_MATRICES(L) \
    {&(L)->wqkv, &(L)->wq, &(L)->wk, &(L)->wv, &(L)->wo, &(L)->w_gate, &(L)->w_up, &(L)->w_gate_up, &(L)->w_down}

struct kvlm_model {
    kvlm_config cfg;
    model_arch arch;
    char dir[4096];
    char tokenizer_path[4096];
    char source[4200];
    tensor_set ts;          /* mappings the weights point into */
    kern_matrix wte;        /* [V(+padding), C] token embedding */
    kern_matrix wpe;        /* [n_ctx, C] learned positions; data NULL with rotary */
    kern_matrix lm_head;    /* [V(+padding), C]; == wte when tied */
    float *normf_w, *normf_b;
    model_layer *layers;
    void **owned;           /* buffers to free: vectors and transposed matrices */
    size_t repacked_bytes;  /* bytes of the repacked copies (model/repack.c) */
    int n_owned, cap_owned;
    void *arena;            /* anonymous mapping in 2 MiB pages (model/arena.c), or NULL */
    size_t arena_bytes;
    /* [n_layer] sliding window of each layer (0: the layer attends to the
     * whole context), or NULL: cfg.sliding_window on every layer. Read it
     * through model_layer_window. */
    int *layer_window;
    layer_spec *spec;         /* what the config said per layer (read at load), or NULL */
    /* [n_layer], or NULL: every layer rotated over the whole head with
     * table 0 (when there is one), scale 1 / sqrt(head_dim), no capping or
     * sinks. The window field is not used: model_layer_window is. Read it
     * through model_layer_attn. */
    model_attn_layer *attn;
    /* Rotary frequency tables of the layer types: rope_freq[i] holds
     * rope_dims / 2 frequencies; cos and sin are multiplied by
     * rope_mscale[i] (LongRoPE's attention scaling; 1 otherwise). */
    float *rope_freq[MODEL_MAX_ROPE];
    float rope_mscale[MODEL_MAX_ROPE];
    int rope_freq_n[MODEL_MAX_ROPE]; /* frequencies in each table */
    int n_rope;
    /* Multipliers; 0 stands for 1 (none). */
    float embed_scale;        /* token embeddings (Gemma: sqrt(hidden); Granite) */
    float residual_scale;     /* sublayer outputs before the residual add (Granite) */
    float logit_scale;        /* logits (Granite: 1 / logits_scaling) */
    float final_softcap;      /* > 0: logits capped to final_softcap * tanh(x / final_softcap) (Gemma 2) */
    model_mlp_act mlp_act;    /* gated MLP activation: SiLU (SwiGLU) or tanh GELU (GeGLU) */
    /* Embedding pooling the files name (model/pooling.c): a kvlm_pooling,
     * or -1 (none named, or one kvlm does not compute); pooling_src says
     * where it came from ("gguf", "1_Pooling", "default", or the mode
     * that is not computed). */
    int pooling;
    char pooling_src[64];
};

/* The window layer l attends over (0: global): what its attention reads
 * and what the KV cache must keep for it. */
int model_layer_window(const kvlm_model *m, int l);
/* Layer l's attention as the forward pass runs it: m->attn[l] (or the
 * defaults), window from model_layer_window, scale never 0. */
model_attn_layer model_layer_attn(const kvlm_model *m, int l);

/* The file a config was read from, which decides the field names in
 * messages: config.json of GPT-2 or of the Llama family, GGUF metadata, or
 * an llm.c header. */
typedef enum model_source { MODEL_SRC_HF_GPT2, MODEL_SRC_HF_LLAMA, MODEL_SRC_GGUF, MODEL_SRC_LLMC } model_source;

/* Validates a config (ranges, divisibility); err names the field as src
 * names it. */
/* Reads the embedding pooling of the model's files into m->pooling: the
 * GGUF value gguf_pooling (-1: the file has none; 0..4 llama.cpp's enum),
 * else dir/1_Pooling/config.json, else last-token. Never fails: a file it
 * cannot read or understand is recorded in pooling_src. */
void model_read_pooling(kvlm_model *m, int gguf_pooling);
int model_check_config(const kvlm_config *c, model_source src, const char *origin, kvlm_error *err);
/* Binds the weights of m->ts for m->cfg (GPT-2 or Llama names). */
int gpt2_bind(kvlm_model *m, const char *origin, kvlm_error *err);
int llama_bind(kvlm_model *m, const char *origin, kvlm_error *err);
/* Binds layer l's mixture of experts (cfg.n_expert > 0) into L->moe, from
 * GGUF names (gguf 1) or Hugging Face's (Qwen2/3-MoE, Mixtral, gpt-oss). */
int moe_bind_layer(kvlm_model *m, int gguf, int l, model_layer *L, const char *origin, kvlm_error *err);
/* Reads a GGUF file into m (config from its metadata, weights in place). */
int model_load_gguf(kvlm_model *m, const char *path, kvlm_error *err);
/* The configuration of a GGUF file, as model_load_gguf builds it (its
 * metadata and the embedding's shape), without binding any weights. */
int model_gguf_config(const char *path, kvlm_config *cfg, layer_spec *spec, kvlm_error *err);
/* The window layer l attends over (0: the whole context) under config c
 * and spec s (NULL: c's one window on every layer). */
int model_spec_window(const layer_spec *s, const kvlm_config *c, int l);
/* The rotary frequency tables of m->cfg and spec (may be NULL): table 0
 * for the global layers (rope_theta; llama3, linear or LongRoPE scaling),
 * table 1 for the sliding layers when spec gives them their own base. */
int rope_init(kvlm_model *m, const layer_spec *spec, kvlm_error *err);
/* The per-layer description (m->attn, m->layer_window, the multipliers)
 * and rope tables from m->spec, after the layers are bound; folds Gemma's
 * (1 + w) into the norm weights. */
int attn_desc_init(kvlm_model *m, kvlm_error *err);
/* Records a heap buffer the model must free; returns it (NULL on failure). */
void *model_own(kvlm_model *m, void *p);
/* bytes of zeroed memory the model owns, asked for in 2 MiB pages (NULL
 * when it cannot be mapped or the model has its arena already);
 * model_arena_free unmaps it. */
void *model_arena(kvlm_model *m, size_t bytes);
void model_arena_free(kvlm_model *m);
/* Adds the packed weight copies the kernels of isa read (model/repack.c);
 * 0, or KVLM_ERR_NOMEM when their memory cannot be had. Once per model,
 * after binding. */
int model_repack(kvlm_model *m, kvlm_isa isa, kvlm_error *err);
/* KVLM_ERR_ARG naming the field when params hold a value out of range. */
int model_check_params(const kvlm_model_params *params, kvlm_error *err);
/* Applies what params ask for after binding (the repacked copies); 0 or
 * a negative status. */
int model_finish_load(kvlm_model *m, const kvlm_model_params *params, kvlm_error *err);

#endif
