/*
 * Binding GPT-2 weights by name: Hugging Face names (with or without the
 * "transformer." prefix; llm.c files are exposed under the same names) or
 * GGUF names (token_embd, blk.N.attn_qkv, ...).
 * Hugging Face GPT-2 stores its Conv1D matrices [in, out]; bind_matrix
 * transposes those once, in their stored dtype. The lm_head is tied to wte
 * unless the file carries its own.
 */
#include <stdio.h>
#include <stdlib.h>

#include "error.h"
#include "model/bind.h"

typedef struct gpt2_names {
    const char *wte, *wpe, *normf_w, *normf_b, *head;
    const char *layer[12]; /* norm1 w/b, qkv w/b, proj w/b, norm2 w/b, fc w/b, fc_proj w/b; "%d" = layer */
} gpt2_names;

static const gpt2_names hf_names = {
    "wte.weight", "wpe.weight", "ln_f.weight", "ln_f.bias", "lm_head.weight",
    {"h.%d.ln_1.weight", "h.%d.ln_1.bias", "h.%d.attn.c_attn.weight", "h.%d.attn.c_attn.bias",
     "h.%d.attn.c_proj.weight", "h.%d.attn.c_proj.bias", "h.%d.ln_2.weight", "h.%d.ln_2.bias",
     "h.%d.mlp.c_fc.weight", "h.%d.mlp.c_fc.bias", "h.%d.mlp.c_proj.weight", "h.%d.mlp.c_proj.bias"},
};

static const gpt2_names gguf_names = {
    "token_embd.weight", "position_embd.weight", "output_norm.weight", "output_norm.bias", "output.weight",
    {"blk.%d.attn_norm.weight", "blk.%d.attn_norm.bias", "blk.%d.attn_qkv.weight", "blk.%d.attn_qkv.bias",
     "blk.%d.attn_output.weight", "blk.%d.attn_output.bias", "blk.%d.ffn_norm.weight", "blk.%d.ffn_norm.bias",
     "blk.%d.ffn_up.weight", "blk.%d.ffn_up.bias", "blk.%d.ffn_down.weight", "blk.%d.ffn_down.bias"},
};

static int bind_layer(bind_ctx *b, const gpt2_names *nm, int l, model_layer *L) {
    const kvlm_config *c = &b->m->cfg;
    const int64_t C = c->n_embd, F = c->n_ff;
    char n[12][80];
    for (int i = 0; i < 12; i++) snprintf(n[i], sizeof n[i], nm->layer[i], l);
    int rc;
    if ((rc = bind_vector(b, n[0], C, &L->norm1_w)) || (rc = bind_vector(b, n[1], C, &L->norm1_b)) ||
        (rc = bind_matrix(b, n[2], 3 * C, C, &L->wqkv)) || (rc = bind_vector(b, n[3], 3 * C, &L->bqkv)) ||
        (rc = bind_matrix(b, n[4], C, C, &L->wo)) || (rc = bind_vector(b, n[5], C, &L->bo)) ||
        (rc = bind_vector(b, n[6], C, &L->norm2_w)) || (rc = bind_vector(b, n[7], C, &L->norm2_b)) ||
        (rc = bind_matrix(b, n[8], F, C, &L->w_up)) || (rc = bind_vector(b, n[9], F, &L->b_up)) ||
        (rc = bind_matrix(b, n[10], C, F, &L->w_down)) || (rc = bind_vector(b, n[11], C, &L->b_down)))
        return rc;
    return KVLM_OK;
}

int gpt2_bind(kvlm_model *m, const char *origin, kvlm_error *err) {
    const kvlm_config *c = &m->cfg;
    const gpt2_names *nm = tensor_set_find(&m->ts, gguf_names.wte, NULL) ? &gguf_names : &hf_names;
    bind_ctx b = {.m = m, .origin = origin, .prefix = nm == &hf_names ? "transformer." : NULL, .err = err};
    const int64_t C = c->n_embd;
    int rc;
    m->arch = ARCH_GPT2;
    if ((rc = bind_table(&b, nm->wte, c->vocab_size, C, &m->wte)) ||
        (rc = bind_table(&b, nm->wpe, c->n_ctx, C, &m->wpe)) || (rc = bind_vector(&b, nm->normf_w, C, &m->normf_w)) ||
        (rc = bind_vector(&b, nm->normf_b, C, &m->normf_b)))
        return rc;
    m->lm_head = m->wte;
    if (bind_find(&b, nm->head, 0) && (rc = bind_table(&b, nm->head, c->vocab_size, C, &m->lm_head))) return rc;
    m->layers = model_own(m, calloc((size_t)c->n_layer, sizeof *m->layers));
    if (!m->layers) return kvlm_error_set(err, KVLM_ERR_NOMEM, "%s: out of memory", origin);
    for (int l = 0; l < c->n_layer; l++)
        if ((rc = bind_layer(&b, nm, l, &m->layers[l]))) return rc;
    m->cfg.weight_dtype = m->layers[0].wqkv.dtype;
    return KVLM_OK;
}
