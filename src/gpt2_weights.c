/*
 * Binding GPT-2 weights by name (Hugging Face names, with or without the
 * "transformer." prefix; llm.c files are exposed under the same names).
 * Hugging Face GPT-2 stores its Conv1D matrices [in, out]; bind_matrix
 * transposes those once, in their stored dtype. The lm_head is tied to wte
 * unless the file carries its own.
 */
#include <stdio.h>
#include <stdlib.h>

#include "error.h"
#include "model_bind.h"

static int bind_layer(bind_ctx *b, int l, model_layer *L) {
    const kvlm_config *c = &b->m->cfg;
    const int64_t C = c->n_embd, F = c->n_ff;
    char n[12][80];
    const char *suffix[12] = {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                              "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                              "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
    for (int i = 0; i < 12; i++) snprintf(n[i], sizeof n[i], "h.%d.%s", l, suffix[i]);
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
    bind_ctx b = {.m = m, .origin = origin, .prefix = "transformer.", .err = err};
    const int64_t C = c->n_embd;
    int rc;
    m->arch = ARCH_GPT2;
    if ((rc = bind_table(&b, "wte.weight", c->vocab_size, C, &m->wte)) ||
        (rc = bind_table(&b, "wpe.weight", c->n_ctx, C, &m->wpe)) ||
        (rc = bind_vector(&b, "ln_f.weight", C, &m->normf_w)) || (rc = bind_vector(&b, "ln_f.bias", C, &m->normf_b)))
        return rc;
    m->lm_head = m->wte;
    if (bind_find(&b, "lm_head.weight", 0) && (rc = bind_table(&b, "lm_head.weight", c->vocab_size, C, &m->lm_head)))
        return rc;
    m->layers = model_own(m, calloc((size_t)c->n_layer, sizeof *m->layers));
    if (!m->layers) return kvlm_fail(err, KVLM_ERR_NOMEM, "%s: out of memory", origin);
    for (int l = 0; l < c->n_layer; l++)
        if ((rc = bind_layer(&b, l, &m->layers[l]))) return rc;
    m->cfg.weight_dtype = m->layers[0].wqkv.dtype;
    return KVLM_OK;
}
