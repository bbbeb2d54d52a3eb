/*
 * Binding a layer's mixture of experts (model.h: model_moe) by name.
 *
 * GGUF files (llama.cpp's layout) hold each layer's experts in three 3-D
 * tensors, ffn_gate_exps and ffn_up_exps of shape [n_expert, F_e, C] and
 * ffn_down_exps of [n_expert, C, F_e], plus the router ffn_gate_inp
 * [n_expert, C] and, for Qwen2-MoE, the shared expert ffn_{gate,up,down}_shexp
 * and its gate ffn_gate_inp_shexp ([C], or [1, C]). Expert e is the view of
 * rows e * F_e .. (e + 1) * F_e - 1 of the tensor taken as 2-D: a pointer
 * into the mapping, no copy.
 *
 * Hugging Face files hold one tensor per expert and matrix: Qwen2/3-MoE's
 * mlp.experts.E.{gate,up,down}_proj with the router mlp.gate and the shared
 * expert mlp.shared_expert.* gated by mlp.shared_expert_gate [1, C];
 * Mixtral's block_sparse_moe.experts.E.{w1 (gate), w3 (up), w2 (down)} with
 * the router block_sparse_moe.gate. Each is used in place like any matrix.
 *
 * gpt-oss adds biases: GGUF's ffn_gate_inp.bias [n_expert] and
 * ffn_{gate,up,down}_exps.bias ([n_expert, F_e], [n_expert, C]); Hugging
 * Face's mlp.router.{weight,bias} and the experts as three tensors of all
 * of them, mlp.experts.gate_up_proj [n_expert, C, 2 F_e] ([in, out], gate
 * and up interleaved column by column) with gate_up_proj_bias [n_expert,
 * 2 F_e], down_proj [n_expert, F_e, C] with down_proj_bias [n_expert, C]:
 * that layout is brought to [out, in] with gate and up apart once at load,
 * widened to f32, in memory the model owns (a GGUF file of the same model
 * is used in place). The original checkpoint's MXFP4 blocks
 * (gate_up_proj_blocks / _scales) are not read: convert it to GGUF.
 *
 * Every missing or misshaped tensor is an error naming it and the shape
 * expected. The experts' sizes come from the config (n_ff_expert,
 * n_ff_shared); nothing is inferred from the tensors.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "model/bind.h"

/* One 3-D expert tensor [n_expert, rows, cols] as n_expert views. */
static int bind_stacked(bind_ctx *b, const char *name, int n_expert, int64_t rows, int64_t cols, kern_matrix *out) {
    const named_tensor *nt = bind_find(b, name, 1);
    if (!nt) return b->err->code;
    if (nt->t.ndim != 3 || nt->t.shape[0] != n_expert || nt->t.shape[1] != rows || nt->t.shape[2] != cols) {
        char got[96];
        return kvlm_error_set(b->err, KVLM_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected [%d, %lld, %lld] "
                              "(experts, rows, columns)", nt->file, nt->name, tensor_shape_str(&nt->t, got, sizeof got),
                              n_expert, (long long)rows, (long long)cols);
    }
    int ok = 1;
    const size_t rb = dtype_row_bytes(nt->t.dtype, cols, &ok);
    if (!ok || (dtype_is_blocked(nt->t.dtype) && cols % dtype_block_len(nt->t.dtype)))
        return kvlm_error_set(b->err, KVLM_ERR_FORMAT, "%s: tensor '%s': rows of %lld %s values are not whole blocks",
                              nt->file, nt->name, (long long)cols, kvlm_dtype_name(nt->t.dtype));
    for (int e = 0; e < n_expert; e++)
        out[e] = (kern_matrix){.dtype = nt->t.dtype, .data = (const char *)nt->t.data + (size_t)e * (size_t)rows * rb,
                               .rows = (int)rows, .cols = (int)cols, .e8m0_min = nt->t.e8m0_min};
    return KVLM_OK;
}

/* The shared expert's gate weights: [C] or [1, C], widened to f32. */
static int bind_gate_vector(bind_ctx *b, const char *name, int64_t C, float **out) {
    const named_tensor *nt = bind_find(b, name, 1);
    if (!nt) return b->err->code;
    if (nt->t.ndim == 2 && nt->t.shape[0] == 1 && nt->t.shape[1] == C) { /* one row: the same bytes as [C] */
        if (nt->t.dtype != KVLM_F32 && nt->t.dtype != KVLM_F16 && nt->t.dtype != KVLM_BF16)
            return kvlm_error_set(b->err, KVLM_ERR_UNSUPPORTED, "%s: vector '%s' must be F32, F16 or BF16, not %s",
                                  nt->file, nt->name, kvlm_dtype_name(nt->t.dtype));
        float *v = model_own(b->m, malloc((size_t)C * sizeof(float)));
        if (!v) return kvlm_error_set(b->err, KVLM_ERR_NOMEM, "%s: out of memory", b->origin);
        for (int64_t i = 0; i < C; i++) v[i] = dtype_load(nt->t.dtype, nt->t.data, (size_t)i);
        *out = v;
        return KVLM_OK;
    }
    return bind_vector(b, name, C, out);
}

/* A [rows, cols] tensor (or [cols] when rows is 0) widened to f32. */
static int bind_f32(bind_ctx *b, const char *name, int64_t rows, int64_t cols, float **out) {
    const named_tensor *nt = bind_find(b, name, 1);
    if (!nt) return b->err->code;
    const int ok_shape = rows ? nt->t.ndim == 2 && nt->t.shape[0] == rows && nt->t.shape[1] == cols
                              : nt->t.ndim == 1 && nt->t.shape[0] == cols;
    if (!ok_shape) {
        char got[96];
        if (rows)
            return kvlm_error_set(b->err, KVLM_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected [%lld, %lld]", nt->file,
                                  nt->name, tensor_shape_str(&nt->t, got, sizeof got), (long long)rows, (long long)cols);
        return kvlm_error_set(b->err, KVLM_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected [%lld]", nt->file, nt->name,
                              tensor_shape_str(&nt->t, got, sizeof got), (long long)cols);
    }
    if (nt->t.dtype != KVLM_F32 && nt->t.dtype != KVLM_F16 && nt->t.dtype != KVLM_BF16)
        return kvlm_error_set(b->err, KVLM_ERR_UNSUPPORTED, "%s: tensor '%s' must be F32, F16 or BF16, not %s", nt->file,
                              nt->name, kvlm_dtype_name(nt->t.dtype));
    const size_t n = (size_t)(rows ? rows : 1) * (size_t)cols;
    float *v = model_own(b->m, malloc(n * sizeof(float)));
    if (!v) return kvlm_error_set(b->err, KVLM_ERR_NOMEM, "%s: out of memory", b->origin);
    for (size_t i = 0; i < n; i++) v[i] = dtype_load(nt->t.dtype, nt->t.data, i);
    *out = v;
    return KVLM_OK;
}

/* Hugging Face gpt-oss experts: [E, C, 2F] interleaved gate/up and
 * [E, F, C] down, each [in, out]; copied to f32 [out, in] matrices. */
static int bind_hf_fused(bind_ctx *b, int l, model_moe *moe) {
    const kvlm_config *c = &b->m->cfg;
    const int64_t C = c->n_embd, F = c->n_ff_expert, E = c->n_expert;
    char name[160];
    snprintf(name, sizeof name, "model.layers.%d.mlp.experts.gate_up_proj_blocks", l);
    if (bind_find(b, name, 0))
        return kvlm_error_set(b->err, KVLM_ERR_UNSUPPORTED, "%s: tensor '%s': the MXFP4 blocks of the original "
                              "checkpoint are not read (convert it to GGUF, or dequantise it)", b->origin, name);
    const char *names[2] = {"gate_up_proj", "down_proj"};
    const int64_t rows[2] = {C, F}, cols[2] = {2 * F, C};
    for (int t = 0; t < 2; t++) {
        snprintf(name, sizeof name, "model.layers.%d.mlp.experts.%s", l, names[t]);
        const named_tensor *nt = bind_find(b, name, 1);
        if (!nt) return b->err->code;
        if (nt->t.ndim != 3 || nt->t.shape[0] != E || nt->t.shape[1] != rows[t] || nt->t.shape[2] != cols[t]) {
            char got[96];
            return kvlm_error_set(b->err, KVLM_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected [%lld, %lld, %lld] "
                                  "(experts, in, out)", nt->file, nt->name, tensor_shape_str(&nt->t, got, sizeof got),
                                  (long long)E, (long long)rows[t], (long long)cols[t]);
        }
        if (nt->t.dtype != KVLM_F32 && nt->t.dtype != KVLM_F16 && nt->t.dtype != KVLM_BF16)
            return kvlm_error_set(b->err, KVLM_ERR_UNSUPPORTED, "%s: tensor '%s' must be F32, F16 or BF16, not %s",
                                  nt->file, nt->name, kvlm_dtype_name(nt->t.dtype));
        for (int64_t e = 0; e < E; e++) {
            const size_t base = (size_t)(e * rows[t] * cols[t]);
            if (t == 0) {
                float *g = model_own(b->m, malloc((size_t)(F * C) * sizeof(float)));
                float *u = model_own(b->m, malloc((size_t)(F * C) * sizeof(float)));
                if (!g || !u) return kvlm_error_set(b->err, KVLM_ERR_NOMEM, "%s: out of memory", b->origin);
                for (int64_t i = 0; i < C; i++)
                    for (int64_t f = 0; f < F; f++) {
                        g[f * C + i] = dtype_load(nt->t.dtype, nt->t.data, base + (size_t)(i * 2 * F + 2 * f));
                        u[f * C + i] = dtype_load(nt->t.dtype, nt->t.data, base + (size_t)(i * 2 * F + 2 * f + 1));
                    }
                moe->gate[e] = (kern_matrix){.dtype = KVLM_F32, .data = g, .rows = (int)F, .cols = (int)C};
                moe->up[e] = (kern_matrix){.dtype = KVLM_F32, .data = u, .rows = (int)F, .cols = (int)C};
            } else {
                float *d = model_own(b->m, malloc((size_t)(F * C) * sizeof(float)));
                if (!d) return kvlm_error_set(b->err, KVLM_ERR_NOMEM, "%s: out of memory", b->origin);
                for (int64_t f = 0; f < F; f++)
                    for (int64_t i = 0; i < C; i++) d[i * F + f] = dtype_load(nt->t.dtype, nt->t.data, base + (size_t)(f * C + i));
                moe->down[e] = (kern_matrix){.dtype = KVLM_F32, .data = d, .rows = (int)C, .cols = (int)F};
            }
        }
    }
    float *gu;
    int rc;
    snprintf(name, sizeof name, "model.layers.%d.mlp.experts.gate_up_proj_bias", l);
    if ((rc = bind_f32(b, name, E, 2 * F, &gu))) return rc;
    moe->gate_b = model_own(b->m, malloc((size_t)(E * F) * sizeof(float)));
    moe->up_b = model_own(b->m, malloc((size_t)(E * F) * sizeof(float)));
    if (!moe->gate_b || !moe->up_b) return kvlm_error_set(b->err, KVLM_ERR_NOMEM, "%s: out of memory", b->origin);
    for (int64_t i = 0; i < E * F; i++) moe->gate_b[i] = gu[2 * i], moe->up_b[i] = gu[2 * i + 1];
    snprintf(name, sizeof name, "model.layers.%d.mlp.experts.down_proj_bias", l);
    if ((rc = bind_f32(b, name, E, C, &moe->down_b))) return rc;
    snprintf(name, sizeof name, "model.layers.%d.mlp.router.weight", l);
    if ((rc = bind_matrix(b, name, E, C, &moe->router))) return rc;
    snprintf(name, sizeof name, "model.layers.%d.mlp.router.bias", l);
    return bind_f32(b, name, 0, E, &moe->router_b);
}

static int alloc_experts(bind_ctx *b, model_moe *moe, int n) {
    moe->gate = model_own(b->m, calloc((size_t)n, sizeof *moe->gate));
    moe->up = model_own(b->m, calloc((size_t)n, sizeof *moe->up));
    moe->down = model_own(b->m, calloc((size_t)n, sizeof *moe->down));
    if (!moe->gate || !moe->up || !moe->down) return kvlm_error_set(b->err, KVLM_ERR_NOMEM, "%s: out of memory", b->origin);
    return KVLM_OK;
}

static int bind_gguf(bind_ctx *b, int l, model_moe *moe) {
    const kvlm_config *c = &b->m->cfg;
    const int64_t C = c->n_embd, F = c->n_ff_expert, S = c->n_ff_shared;
    const int E = c->n_expert;
    char name[96];
#define GN(fmt) (snprintf(name, sizeof name, (fmt), l), name)
    int rc;
    if ((rc = bind_matrix(b, GN("blk.%d.ffn_gate_inp.weight"), E, C, &moe->router)) ||
        (rc = bind_stacked(b, GN("blk.%d.ffn_gate_exps.weight"), E, F, C, moe->gate)) ||
        (rc = bind_stacked(b, GN("blk.%d.ffn_up_exps.weight"), E, F, C, moe->up)) ||
        (rc = bind_stacked(b, GN("blk.%d.ffn_down_exps.weight"), E, C, F, moe->down)))
        return rc;
    if (b->m->spec && b->m->spec->moe_bias &&
        ((rc = bind_f32(b, GN("blk.%d.ffn_gate_inp.bias"), 0, E, &moe->router_b)) ||
         (rc = bind_f32(b, GN("blk.%d.ffn_gate_exps.bias"), E, F, &moe->gate_b)) ||
         (rc = bind_f32(b, GN("blk.%d.ffn_up_exps.bias"), E, F, &moe->up_b)) ||
         (rc = bind_f32(b, GN("blk.%d.ffn_down_exps.bias"), E, C, &moe->down_b))))
        return rc;
    if (S && ((rc = bind_gate_vector(b, GN("blk.%d.ffn_gate_inp_shexp.weight"), C, &moe->sh_router)) ||
              (rc = bind_matrix(b, GN("blk.%d.ffn_gate_shexp.weight"), S, C, &moe->sh_gate)) ||
              (rc = bind_matrix(b, GN("blk.%d.ffn_up_shexp.weight"), S, C, &moe->sh_up)) ||
              (rc = bind_matrix(b, GN("blk.%d.ffn_down_shexp.weight"), C, S, &moe->sh_down))))
        return rc;
#undef GN
    return KVLM_OK;
}

static int bind_hf(bind_ctx *b, int l, model_moe *moe) {
    const kvlm_config *c = &b->m->cfg;
    const int64_t C = c->n_embd, F = c->n_ff_expert, S = c->n_ff_shared;
    const int mixtral = !strcmp(c->arch, "mixtral");
    const char *base = mixtral ? "block_sparse_moe" : "mlp";
    const char *gn = mixtral ? "w1" : "gate_proj", *un = mixtral ? "w3" : "up_proj", *dn = mixtral ? "w2" : "down_proj";
    char name[160];
    int rc;
    snprintf(name, sizeof name, "model.layers.%d.%s.gate.weight", l, base);
    if ((rc = bind_matrix(b, name, c->n_expert, C, &moe->router))) return rc;
    for (int e = 0; e < c->n_expert; e++) {
        const char *fmt = "model.layers.%d.%s.experts.%d.%s.weight";
        if ((snprintf(name, sizeof name, fmt, l, base, e, gn), rc = bind_matrix(b, name, F, C, &moe->gate[e])) ||
            (snprintf(name, sizeof name, fmt, l, base, e, un), rc = bind_matrix(b, name, F, C, &moe->up[e])) ||
            (snprintf(name, sizeof name, fmt, l, base, e, dn), rc = bind_matrix(b, name, C, F, &moe->down[e])))
            return rc;
    }
    if (!S) return KVLM_OK;
    const char *sh[] = {"gate_proj", "up_proj", "down_proj"};
    kern_matrix *shw[] = {&moe->sh_gate, &moe->sh_up, &moe->sh_down};
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "model.layers.%d.mlp.shared_expert.%s.weight", l, sh[i]);
        if ((rc = bind_matrix(b, name, i == 2 ? C : S, i == 2 ? S : C, shw[i]))) return rc;
    }
    snprintf(name, sizeof name, "model.layers.%d.mlp.shared_expert_gate.weight", l);
    return bind_gate_vector(b, name, C, &moe->sh_router);
}

int moe_bind_layer(kvlm_model *m, int gguf, int l, model_layer *L, const char *origin, kvlm_error *err) {
    bind_ctx b = {.m = m, .origin = origin, .prefix = NULL, .err = err};
    model_moe *moe = model_own(m, calloc(1, sizeof *moe));
    if (!moe) return kvlm_error_set(err, KVLM_ERR_NOMEM, "%s: out of memory", origin);
    int rc = alloc_experts(&b, moe, m->cfg.n_expert);
    const layer_spec *s = m->spec;
    if (s) moe->topk_softmax = s->moe_topk_softmax, moe->limit = s->swiglu_limit, moe->alpha = s->swiglu_alpha;
    if (!rc) rc = gguf ? bind_gguf(&b, l, moe) : s && s->moe_bias ? bind_hf_fused(&b, l, moe) : bind_hf(&b, l, moe);
    if (!rc) L->moe = moe;
    return rc;
}
