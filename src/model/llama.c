/*
 * Binding Llama-family weights (Llama, Mistral, Qwen2, Qwen3, Phi-3) by
 * name. The same binder serves Hugging Face files
 * (model.layers.N.self_attn.q_proj ...) and GGUF files (blk.N.attn_q ...)
 * through a table of names. Matrices are [out, in] in both and used in
 * place; Qwen2's q/k/v biases are joined into one vector; Qwen3's q_norm /
 * k_norm are [head_dim] vectors; a fused q|k|v matrix (Phi-3's qkv_proj,
 * GGUF attn_qkv) and Phi-3's fused gate|up matrix (gate_up_proj, which GGUF
 * stores as ffn_up of 2 x feed_forward_length rows) are bound whole, never
 * split or copied (a mixture of experts' FFN: model/moe_bind.c). Gemma 2 and 3 add a norm after attention and after the
 * MLP (their pre-MLP norm is pre_feedforward_layernorm in Hugging Face
 * files). gpt-oss adds a bias on the output projection and per-head
 * attention sinks (self_attn.sinks, attn_sinks), and its GGUF files name
 * the FFN's norm post_attention_norm. Binding ends with the per-layer description (model/attn_desc.c). The output head is the token embedding when tied or
 * when the file has none.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "model/bind.h"

typedef struct llama_names {
    const char *embed, *norm, *head;
    const char *attn_norm, *q, *k, *v, *o, *q_bias, *k_bias, *v_bias, *ffn_norm, *gate, *up, *down;
    const char *q_norm, *k_norm, *qkv, *qkv_bias, *gate_up;
    const char *pre_ffn_norm, *post_attn_norm, *post_ffn_norm; /* Gemma's four norms */
    const char *o_bias, *sinks;                                /* gpt-oss */
} llama_names;

static const llama_names hf_names = {
    "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
    "model.layers.%d.input_layernorm.weight", "model.layers.%d.self_attn.q_proj.weight",
    "model.layers.%d.self_attn.k_proj.weight", "model.layers.%d.self_attn.v_proj.weight",
    "model.layers.%d.self_attn.o_proj.weight", "model.layers.%d.self_attn.q_proj.bias",
    "model.layers.%d.self_attn.k_proj.bias", "model.layers.%d.self_attn.v_proj.bias",
    "model.layers.%d.post_attention_layernorm.weight", "model.layers.%d.mlp.gate_proj.weight",
    "model.layers.%d.mlp.up_proj.weight", "model.layers.%d.mlp.down_proj.weight",
    "model.layers.%d.self_attn.q_norm.weight", "model.layers.%d.self_attn.k_norm.weight",
    "model.layers.%d.self_attn.qkv_proj.weight", "model.layers.%d.self_attn.qkv_proj.bias",
    "model.layers.%d.mlp.gate_up_proj.weight",
    "model.layers.%d.pre_feedforward_layernorm.weight", "model.layers.%d.post_attention_layernorm.weight",
    "model.layers.%d.post_feedforward_layernorm.weight",
    "model.layers.%d.self_attn.o_proj.bias", "model.layers.%d.self_attn.sinks",
};

static const llama_names gguf_names = {
    "token_embd.weight", "output_norm.weight", "output.weight",
    "blk.%d.attn_norm.weight", "blk.%d.attn_q.weight", "blk.%d.attn_k.weight", "blk.%d.attn_v.weight",
    "blk.%d.attn_output.weight", "blk.%d.attn_q.bias", "blk.%d.attn_k.bias", "blk.%d.attn_v.bias",
    "blk.%d.ffn_norm.weight", "blk.%d.ffn_gate.weight", "blk.%d.ffn_up.weight", "blk.%d.ffn_down.weight",
    "blk.%d.attn_q_norm.weight", "blk.%d.attn_k_norm.weight", "blk.%d.attn_qkv.weight", "blk.%d.attn_qkv.bias",
    "blk.%d.ffn_up.weight", /* Phi-3: [gate; up] under the up name */
    "blk.%d.ffn_norm.weight", "blk.%d.post_attention_norm.weight", "blk.%d.post_ffw_norm.weight",
    "blk.%d.attn_output.bias", "blk.%d.attn_sinks.weight",
};

#define NAME(fmt) (snprintf(name, sizeof name, (fmt), l), name)

/* q, k and v biases side by side, as the fused projection output expects. */
static int bind_qkv_bias(bind_ctx *b, const llama_names *nm, int l, model_layer *L) {
    const kvlm_config *c = &b->m->cfg;
    const int64_t qd = (int64_t)c->n_head * c->head_dim, kd = (int64_t)c->n_kv_head * c->head_dim;
    char name[96];
    float *q, *k, *v;
    int rc;
    if ((rc = bind_vector(b, NAME(nm->q_bias), qd, &q)) || (rc = bind_vector(b, NAME(nm->k_bias), kd, &k)) ||
        (rc = bind_vector(b, NAME(nm->v_bias), kd, &v)))
        return rc;
    L->bqkv = model_own(b->m, malloc((size_t)(qd + 2 * kd) * sizeof(float)));
    if (!L->bqkv) return kvlm_error_set(b->err, KVLM_ERR_NOMEM, "out of memory");
    memcpy(L->bqkv, q, (size_t)qd * sizeof(float));
    memcpy(L->bqkv + qd, k, (size_t)kd * sizeof(float));
    memcpy(L->bqkv + qd + kd, v, (size_t)kd * sizeof(float));
    return KVLM_OK;
}

/* Q, K and V: one fused matrix when the file has one, else three. */
static int bind_attention(bind_ctx *b, const llama_names *nm, int l, model_layer *L) {
    const kvlm_config *c = &b->m->cfg;
    const int64_t C = c->n_embd, qd = (int64_t)c->n_head * c->head_dim, kd = (int64_t)c->n_kv_head * c->head_dim;
    char name[96];
    int rc;
    if (bind_find(b, NAME(nm->qkv), 0)) {
        if ((rc = bind_matrix(b, name, qd + 2 * kd, C, &L->wqkv))) return rc;
        rc = bind_vector_opt(b, NAME(nm->qkv_bias), qd + 2 * kd, &L->bqkv);
    } else if ((rc = bind_matrix(b, NAME(nm->q), qd, C, &L->wq)) || (rc = bind_matrix(b, NAME(nm->k), kd, C, &L->wk)) ||
               (rc = bind_matrix(b, NAME(nm->v), kd, C, &L->wv))) {
        return rc;
    } else if (c->qkv_bias) {
        rc = bind_qkv_bias(b, nm, l, L);
    }
    if (rc) return rc;
    if (c->qk_norm && ((rc = bind_vector(b, NAME(nm->q_norm), c->head_dim, &L->q_norm)) ||
                       (rc = bind_vector(b, NAME(nm->k_norm), c->head_dim, &L->k_norm))))
        return rc;
    const layer_spec *s = b->m->spec;
    if (s && s->o_bias && (rc = bind_vector(b, NAME(nm->o_bias), C, &L->bo))) return rc;
    if (s && s->attn_sinks && (rc = bind_vector(b, NAME(nm->sinks), c->n_head, &L->sinks))) return rc;
    return bind_matrix(b, NAME(nm->o), C, qd, &L->wo);
}

static int bind_layer(bind_ctx *b, const llama_names *nm, int l, model_layer *L) {
    const kvlm_config *c = &b->m->cfg;
    const int64_t C = c->n_embd, F = c->n_ff;
    char name[96];
    int rc;
    const int post = b->m->spec && b->m->spec->post_norms;
    const char *ffn_norm = post ? nm->pre_ffn_norm
                           : b->m->spec && b->m->spec->ffn_norm_post_attn && nm == &gguf_names ? nm->post_attn_norm
                           : nm->ffn_norm;
    if ((rc = bind_vector(b, NAME(nm->attn_norm), C, &L->norm1_w)) || (rc = bind_attention(b, nm, l, L)) ||
        (rc = bind_vector(b, NAME(ffn_norm), C, &L->norm2_w)) ||
        (post && ((rc = bind_vector(b, NAME(nm->post_attn_norm), C, &L->post_attn_norm)) ||
                  (rc = bind_vector(b, NAME(nm->post_ffn_norm), C, &L->post_ffn_norm)))))
        return rc;
    if (c->n_expert) return moe_bind_layer(b->m, nm == &gguf_names, l, L, b->origin, b->err);
    if ((rc = bind_matrix(b, NAME(nm->down), C, F, &L->w_down))) return rc;
    if (!strcmp(c->arch, "phi3")) return bind_matrix(b, NAME(nm->gate_up), 2 * F, C, &L->w_gate_up);
    if ((rc = bind_matrix(b, NAME(nm->gate), F, C, &L->w_gate)) || (rc = bind_matrix(b, NAME(nm->up), F, C, &L->w_up)))
        return rc;
    return KVLM_OK;
}

static int bind_with(kvlm_model *m, const llama_names *nm, const char *origin, kvlm_error *err) {
    const kvlm_config *c = &m->cfg;
    bind_ctx b = {.m = m, .origin = origin, .prefix = NULL, .err = err};
    int rc;
    m->arch = ARCH_LLAMA;
    if ((rc = bind_table(&b, nm->embed, c->vocab_size, c->n_embd, &m->wte)) ||
        (rc = bind_vector(&b, nm->norm, c->n_embd, &m->normf_w)))
        return rc;
    m->lm_head = m->wte;
    if (!c->tie_embeddings && bind_find(&b, nm->head, 0) &&
        (rc = bind_table(&b, nm->head, c->vocab_size, c->n_embd, &m->lm_head)))
        return rc;
    m->layers = model_own(m, calloc((size_t)c->n_layer, sizeof *m->layers));
    if (!m->layers) return kvlm_error_set(err, KVLM_ERR_NOMEM, "%s: out of memory", origin);
    for (int l = 0; l < c->n_layer; l++)
        if ((rc = bind_layer(&b, nm, l, &m->layers[l]))) return rc;
    m->cfg.weight_dtype = m->layers[0].wqkv.data ? m->layers[0].wqkv.dtype : m->layers[0].wq.dtype;
    return attn_desc_init(m, err);
}

int llama_bind(kvlm_model *m, const char *origin, kvlm_error *err) {
    return bind_with(m, tensor_set_find(&m->ts, gguf_names.embed, NULL) ? &gguf_names : &hf_names, origin, err);
}
