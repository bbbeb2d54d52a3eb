/* Binding tensors by name for the architecture binders (see model/bind.h). */
#include "model/bind.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

void *model_own(kvlm_model *m, void *p) {
    if (!p) return NULL;
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? m->cap_owned * 2 : 64;
        void **no = realloc(m->owned, (size_t)cap * sizeof *no);
        if (!no) {
            free(p);
            return NULL;
        }
        m->owned = no;
        m->cap_owned = cap;
    }
    m->owned[m->n_owned++] = p;
    return p;
}

const named_tensor *bind_find(bind_ctx *b, const char *name, int required) {
    const named_tensor *nt = tensor_set_find(&b->m->ts, name, b->prefix);
    if (!nt && required) kvlm_error_set(b->err, KVLM_ERR_FORMAT, "%s: missing tensor '%s'", b->origin, name);
    return nt;
}

static int shape_error(bind_ctx *b, const named_tensor *nt, const char *expect) {
    char got[96];
    return kvlm_error_set(b->err, KVLM_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected %s", nt->file, nt->name,
                          tensor_shape_str(&nt->t, got, sizeof got), expect);
}

static int widen(bind_ctx *b, const named_tensor *nt, int64_t n, float **out) {
    if (nt->t.ndim != 1 || nt->t.shape[0] != n) {
        char want[64];
        snprintf(want, sizeof want, "[%lld]", (long long)n);
        return shape_error(b, nt, want);
    }
    if (nt->t.dtype != KVLM_F32 && nt->t.dtype != KVLM_F16 && nt->t.dtype != KVLM_BF16)
        return kvlm_error_set(b->err, KVLM_ERR_UNSUPPORTED, "%s: vector '%s' must be F32, F16 or BF16, not %s", nt->file,
                              nt->name, kvlm_dtype_name(nt->t.dtype));
    float *v = model_own(b->m, malloc((size_t)n * sizeof(float)));
    if (!v) return kvlm_error_set(b->err, KVLM_ERR_NOMEM, "%s: out of memory", b->origin);
    for (int64_t i = 0; i < n; i++) v[i] = dtype_load(nt->t.dtype, nt->t.data, (size_t)i);
    *out = v;
    return KVLM_OK;
}

int bind_vector(bind_ctx *b, const char *name, int64_t n, float **out) {
    const named_tensor *nt = bind_find(b, name, 1);
    return nt ? widen(b, nt, n, out) : b->err->code;
}

int bind_vector_opt(bind_ctx *b, const char *name, int64_t n, float **out) {
    const named_tensor *nt = bind_find(b, name, 0);
    *out = NULL;
    return nt ? widen(b, nt, n, out) : KVLM_OK;
}

/* Cache-blocked transpose of a rows x cols matrix of es-byte elements. */
static void transpose(const unsigned char *src, unsigned char *dst, int64_t rows, int64_t cols, size_t es) {
    const int64_t B = 32;
    #pragma omp parallel for num_threads(kern_load_threads()) schedule(static)
    for (int64_t r0 = 0; r0 < rows; r0 += B)
        for (int64_t c0 = 0; c0 < cols; c0 += B)
            for (int64_t r = r0; r < r0 + B && r < rows; r++)
                for (int64_t c = c0; c < c0 + B && c < cols; c++)
                    memcpy(dst + ((size_t)c * rows + r) * es, src + ((size_t)r * cols + c) * es, es);
}

int bind_matrix(bind_ctx *b, const char *name, int64_t out, int64_t in, kern_matrix *w) {
    const named_tensor *nt = bind_find(b, name, 1);
    if (!nt) return b->err->code;
    const int in_out = b->m->ts.layout == LAYOUT_IN_OUT;
    const int64_t r = in_out ? in : out, c = in_out ? out : in;
    if (nt->t.ndim != 2 || nt->t.shape[0] != r || nt->t.shape[1] != c) {
        char want[96];
        snprintf(want, sizeof want, "[%lld, %lld] (%s)", (long long)r, (long long)c,
                 in_out ? "Conv1D [in, out]" : "Linear [out, in]");
        return shape_error(b, nt, want);
    }
    *w = (kern_matrix){.dtype = nt->t.dtype, .data = nt->t.data, .rows = (int)out, .cols = (int)in, .e8m0_min = nt->t.e8m0_min};
    if (!in_out) return KVLM_OK;
    if (nt->t.dtype != KVLM_F32 && nt->t.dtype != KVLM_F16 && nt->t.dtype != KVLM_BF16)
        return kvlm_error_set(b->err, KVLM_ERR_UNSUPPORTED, "%s: tensor '%s' in [in, out] layout must be F32, F16 or BF16",
                              nt->file, nt->name);
    size_t es = kvlm_dtype_size(nt->t.dtype), bytes = (size_t)(out * in) * es;
    void *buf = model_own(b->m, aligned_alloc(64, (bytes + 63) & ~(size_t)63));
    if (!buf) return kvlm_error_set(b->err, KVLM_ERR_NOMEM, "%s: out of memory for '%s'", b->origin, name);
    transpose(nt->t.data, buf, r, c, es);
    w->data = buf;
    return KVLM_OK;
}

int bind_table(bind_ctx *b, const char *name, int64_t min_rows, int64_t cols, kern_matrix *w) {
    const named_tensor *nt = bind_find(b, name, 1);
    if (!nt) return b->err->code;
    if (nt->t.ndim != 2 || nt->t.shape[0] < min_rows || nt->t.shape[1] != cols || nt->t.shape[0] > (1 << 24)) {
        char want[96];
        snprintf(want, sizeof want, "[>= %lld, %lld]", (long long)min_rows, (long long)cols);
        return shape_error(b, nt, want);
    }
    *w = (kern_matrix){.dtype = nt->t.dtype, .data = nt->t.data, .rows = (int)nt->t.shape[0], .cols = (int)cols,
                       .e8m0_min = nt->t.e8m0_min};
    return KVLM_OK;
}
