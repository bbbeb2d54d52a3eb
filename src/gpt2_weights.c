/*
 * Binding GPT-2 weights by name: finds each tensor (with or without the
 * "transformer." prefix), checks its dtype and exact shape against the
 * config, widens the small vectors to f32 and brings every matrix into the
 * kernels' [out, in] layout. Hugging Face GPT-2 stores its Conv1D matrices
 * [in, out]; those are transposed once here, in their stored dtype. llm.c
 * matrices are already [out, in] and are used in place from the mapping.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "model.h"

#define PREFIX "transformer."

void *model_own(kvlm_model *m, void *p) {
    if (!p) return NULL;
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? m->cap_owned * 2 : 64;
        void **no = realloc(m->owned, (size_t)cap * sizeof *no);
        if (!no) { free(p); return NULL; }
        m->owned = no;
        m->cap_owned = cap;
    }
    m->owned[m->n_owned++] = p;
    return p;
}

static const named_tensor *need(const kvlm_model *m, const char *name, const char *origin, kvlm_error *err) {
    const named_tensor *nt = tensor_set_find(&m->ts, name, PREFIX);
    if (!nt) kvlm_fail(err, KVLM_ERR_FORMAT, "%s: missing tensor '%s'", origin, name);
    return nt;
}

static int shape_error(const named_tensor *nt, const char *expect, kvlm_error *err) {
    char got[96];
    return kvlm_fail(err, KVLM_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected %s", nt->file, nt->name,
                     tensor_shape_str(&nt->t, got, sizeof got), expect);
}

static int bind_vector(kvlm_model *m, const char *name, int64_t n, float **out, const char *origin, kvlm_error *err) {
    const named_tensor *nt = need(m, name, origin, err);
    if (!nt) return err->code;
    if (nt->t.ndim != 1 || nt->t.shape[0] != n) {
        char want[64];
        snprintf(want, sizeof want, "[%lld]", (long long)n);
        return shape_error(nt, want, err);
    }
    float *v = model_own(m, malloc((size_t)n * sizeof(float)));
    if (!v) return kvlm_fail(err, KVLM_ERR_NOMEM, "%s: out of memory", origin);
    for (int64_t i = 0; i < n; i++) v[i] = dtype_load(nt->t.dtype, nt->t.data, (size_t)i);
    *out = v;
    return KVLM_OK;
}

/* Cache-blocked transpose of a rows x cols matrix of es-byte elements. */
static void transpose(const unsigned char *src, unsigned char *dst, int64_t rows, int64_t cols, size_t es) {
    const int64_t B = 32;
    #pragma omp parallel for schedule(static)
    for (int64_t r0 = 0; r0 < rows; r0 += B)
        for (int64_t c0 = 0; c0 < cols; c0 += B)
            for (int64_t r = r0; r < r0 + B && r < rows; r++)
                for (int64_t c = c0; c < c0 + B && c < cols; c++)
                    memcpy(dst + ((size_t)c * rows + r) * es, src + ((size_t)r * cols + c) * es, es);
}

/* Binds a matrix with `out` output and `in` input features. */
static int bind_matrix(kvlm_model *m, const char *name, int64_t out, int64_t in, kern_matrix *w, const char *origin,
                       kvlm_error *err) {
    const named_tensor *nt = need(m, name, origin, err);
    if (!nt) return err->code;
    const int in_out = m->ts.layout == LAYOUT_IN_OUT;
    const int64_t r = in_out ? in : out, c = in_out ? out : in;
    if (nt->t.ndim != 2 || nt->t.shape[0] != r || nt->t.shape[1] != c) {
        char want[96];
        snprintf(want, sizeof want, "[%lld, %lld] (%s)", (long long)r, (long long)c,
                 in_out ? "Conv1D [in, out]" : "Linear [out, in]");
        return shape_error(nt, want, err);
    }
    w->dtype = nt->t.dtype;
    w->rows = (int)out;
    w->cols = (int)in;
    if (!in_out) {
        w->data = nt->t.data;
        return KVLM_OK;
    }
    size_t es = kvlm_dtype_size(nt->t.dtype), bytes = (size_t)(out * in) * es;
    void *buf = model_own(m, aligned_alloc(64, (bytes + 63) & ~(size_t)63));
    if (!buf) return kvlm_fail(err, KVLM_ERR_NOMEM, "%s: out of memory for '%s'", origin, name);
    transpose(nt->t.data, buf, r, c, es);
    w->data = buf;
    return KVLM_OK;
}

/* Embedding tables are [rows, C] in every layout; rows may exceed min_rows
 * (llm.c pads the vocabulary). */
static int bind_table(kvlm_model *m, const char *name, int64_t min_rows, int64_t cols, kern_matrix *w,
                      const char *origin, kvlm_error *err) {
    const named_tensor *nt = need(m, name, origin, err);
    if (!nt) return err->code;
    if (nt->t.ndim != 2 || nt->t.shape[0] < min_rows || nt->t.shape[1] != cols || nt->t.shape[0] > (1 << 24)) {
        char want[96];
        snprintf(want, sizeof want, "[>= %lld, %lld]", (long long)min_rows, (long long)cols);
        return shape_error(nt, want, err);
    }
    *w = (kern_matrix){.dtype = nt->t.dtype, .data = nt->t.data, .rows = (int)nt->t.shape[0], .cols = (int)cols};
    return KVLM_OK;
}

int gpt2_bind(kvlm_model *m, const char *origin, kvlm_error *err) {
    const kvlm_config *c = &m->cfg;
    const int64_t C = c->n_embd, F = c->n_ff;
    int rc;
    if ((rc = bind_table(m, "wte.weight", c->vocab_size, C, &m->wte, origin, err)) ||
        (rc = bind_table(m, "wpe.weight", c->n_ctx, C, &m->wpe, origin, err)) ||
        (rc = bind_vector(m, "ln_f.weight", C, &m->lnf_w, origin, err)) ||
        (rc = bind_vector(m, "ln_f.bias", C, &m->lnf_b, origin, err)))
        return rc;
    m->lm_head = m->wte;
    const named_tensor *head = tensor_set_find(&m->ts, "lm_head.weight", NULL);
    if (head && (rc = bind_table(m, "lm_head.weight", c->vocab_size, C, &m->lm_head, origin, err))) return rc;
    m->layers = model_own(m, calloc((size_t)c->n_layer, sizeof *m->layers));
    if (!m->layers) return kvlm_fail(err, KVLM_ERR_NOMEM, "%s: out of memory", origin);
    for (int l = 0; l < c->n_layer; l++) {
        gpt2_layer *L = &m->layers[l];
        char n[16][80];
        const char *suffix[16] = {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
                                  "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                                  "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
        for (int i = 0; i < 12; i++) snprintf(n[i], sizeof n[i], "h.%d.%s", l, suffix[i]);
        if ((rc = bind_vector(m, n[0], C, &L->ln1_w, origin, err)) ||
            (rc = bind_vector(m, n[1], C, &L->ln1_b, origin, err)) ||
            (rc = bind_matrix(m, n[2], 3 * C, C, &L->attn_qkv, origin, err)) ||
            (rc = bind_vector(m, n[3], 3 * C, &L->attn_qkv_b, origin, err)) ||
            (rc = bind_matrix(m, n[4], C, C, &L->attn_proj, origin, err)) ||
            (rc = bind_vector(m, n[5], C, &L->attn_proj_b, origin, err)) ||
            (rc = bind_vector(m, n[6], C, &L->ln2_w, origin, err)) ||
            (rc = bind_vector(m, n[7], C, &L->ln2_b, origin, err)) ||
            (rc = bind_matrix(m, n[8], F, C, &L->mlp_fc, origin, err)) ||
            (rc = bind_vector(m, n[9], F, &L->mlp_fc_b, origin, err)) ||
            (rc = bind_matrix(m, n[10], C, F, &L->mlp_proj, origin, err)) ||
            (rc = bind_vector(m, n[11], C, &L->mlp_proj_b, origin, err)))
            return rc;
    }
    m->cfg.weight_dtype = m->layers[0].attn_qkv.dtype;
    return KVLM_OK;
}
