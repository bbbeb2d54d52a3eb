/*
 * Binding Llama-family weights (Llama, Mistral, Qwen2) by name. The same
 * binder serves Hugging Face files (model.layers.N.self_attn.q_proj ...)
 * and GGUF files (blk.N.attn_q ...) through a table of names. Matrices are
 * [out, in] in both and used in place; Qwen2's q/k/v biases are joined
 * into one vector; the output head is the token embedding when tied or
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
} llama_names;

static const llama_names hf_names = {
    "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
    "model.layers.%d.input_layernorm.weight", "model.layers.%d.self_attn.q_proj.weight",
    "model.layers.%d.self_attn.k_proj.weight", "model.layers.%d.self_attn.v_proj.weight",
    "model.layers.%d.self_attn.o_proj.weight", "model.layers.%d.self_attn.q_proj.bias",
    "model.layers.%d.self_attn.k_proj.bias", "model.layers.%d.self_attn.v_proj.bias",
    "model.layers.%d.post_attention_layernorm.weight", "model.layers.%d.mlp.gate_proj.weight",
    "model.layers.%d.mlp.up_proj.weight", "model.layers.%d.mlp.down_proj.weight",
};

static const llama_names gguf_names = {
    "token_embd.weight", "output_norm.weight", "output.weight",
    "blk.%d.attn_norm.weight", "blk.%d.attn_q.weight", "blk.%d.attn_k.weight", "blk.%d.attn_v.weight",
    "blk.%d.attn_output.weight", "blk.%d.attn_q.bias", "blk.%d.attn_k.bias", "blk.%d.attn_v.bias",
    "blk.%d.ffn_norm.weight", "blk.%d.ffn_gate.weight", "blk.%d.ffn_up.weight", "blk.%d.ffn_down.weight",
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

static int bind_layer(bind_ctx *b, const llama_names *nm, int l, model_layer *L) {
    const kvlm_config *c = &b->m->cfg;
    const int64_t C = c->n_embd, F = c->n_ff, qd = (int64_t)c->n_head * c->head_dim,
                  kd = (int64_t)c->n_kv_head * c->head_dim;
    char name[96];
    int rc;
    if ((rc = bind_vector(b, NAME(nm->attn_norm), C, &L->norm1_w)) ||
        (rc = bind_matrix(b, NAME(nm->q), qd, C, &L->wq)) || (rc = bind_matrix(b, NAME(nm->k), kd, C, &L->wk)) ||
        (rc = bind_matrix(b, NAME(nm->v), kd, C, &L->wv)) || (rc = bind_matrix(b, NAME(nm->o), C, qd, &L->wo)) ||
        (rc = bind_vector(b, NAME(nm->ffn_norm), C, &L->norm2_w)) ||
        (rc = bind_matrix(b, NAME(nm->gate), F, C, &L->w_gate)) || (rc = bind_matrix(b, NAME(nm->up), F, C, &L->w_up)) ||
        (rc = bind_matrix(b, NAME(nm->down), C, F, &L->w_down)))
        return rc;
    return c->qkv_bias ? bind_qkv_bias(b, nm, l, L) : KVLM_OK;
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
    m->cfg.weight_dtype = m->layers[0].wq.dtype;
    return rope_init(m, err);
}

int llama_bind(kvlm_model *m, const char *origin, kvlm_error *err) {
    return bind_with(m, tensor_set_find(&m->ts, gguf_names.embed, NULL) ? &gguf_names : &hf_names, origin, err);
}
