/*
 * The per-layer description of a model (model_attn_layer, layer_window,
 * the block's multipliers) built from what its config said (m->spec,
 * formats/layer_spec.h), once the layers are bound. The forward pass reads
 * only this description: which architecture the file came from is settled
 * here and in the config readers. Also folds Gemma's (1 + w) RMSNorm
 * weights into plain ones, so the kernels have one RMSNorm.
 *
 * A window at least as long as the context is no window (0). A model
 * without a spec (GPT-2, synthetic models) keeps m->attn NULL: the
 * defaults of model_layer_attn.
 */
#include <math.h>
#include <stdlib.h>

#include "error.h"
#include "model/model.h"

static void plus_one(float *w, int n) {
    if (w)
        for (int i = 0; i < n; i++) w[i] += 1.0f;
}

static void fold_norms(kvlm_model *m) {
    const kvlm_config *c = &m->cfg;
    const int C = c->n_embd;
    plus_one(m->normf_w, C);
    for (int l = 0; l < c->n_layer; l++) {
        model_layer *L = &m->layers[l];
        plus_one(L->norm1_w, C), plus_one(L->norm2_w, C);
        plus_one(L->post_attn_norm, C), plus_one(L->post_ffn_norm, C);
        plus_one(L->q_norm, c->head_dim), plus_one(L->k_norm, c->head_dim);
    }
}

int model_spec_window(const layer_spec *s, const kvlm_config *c, int l) {
    const int w = s && s->window && s->sliding[l] ? s->window : c->sliding_window;
    return w >= c->n_ctx ? 0 : w;
}

int attn_desc_init(kvlm_model *m, kvlm_error *err) {
    const kvlm_config *c = &m->cfg;
    const layer_spec *s = m->spec;
    int rc;
    if ((rc = rope_init(m, s, err))) return rc;
    if (!s) return KVLM_OK;
    m->attn = model_own(m, calloc((size_t)c->n_layer, sizeof *m->attn));
    if (!m->attn) return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    const int dims = m->n_rope ? m->rope_freq_n[0] * 2 : 0;
    int mixed = 0;
    for (int l = 0; l < c->n_layer; l++) {
        model_attn_layer *a = &m->attn[l];
        a->window = model_spec_window(s, c, l);
        mixed |= a->window != c->sliding_window;
        a->rope_dims = s->no_rope[l] ? 0 : dims;
        a->rope_table = m->n_rope > 1 && s->sliding[l] ? 1 : 0;
        a->scale = s->query_scale > 0 ? s->query_scale : 1.0f / sqrtf((float)c->head_dim);
        a->softcap = s->attn_softcap;
        a->sinks = m->layers[l].sinks;
    }
    if (mixed) {
        m->layer_window = model_own(m, malloc((size_t)c->n_layer * sizeof(int)));
        if (!m->layer_window) return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
        for (int l = 0; l < c->n_layer; l++) m->layer_window[l] = m->attn[l].window;
    }
    m->embed_scale = s->embed_scale;
    m->residual_scale = s->residual_scale;
    m->logit_scale = s->logit_scale;
    m->final_softcap = s->final_softcap;
    m->mlp_act = s->gelu_mlp ? MLP_GELU_TANH : MLP_SILU;
    if (s->norm_plus_one) fold_norms(m);
    return KVLM_OK;
}
