/*
 * Plain C kernels: the reference every SIMD path is tested against. Written
 * for clarity, one accumulation order, no tricks.
 */
#include <math.h>

#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "tensor.h"

static void matmul_rows_scalar(const float *x, int M, const kern_matrix *w, int n0, int n1,
                               const float *bias, float *y, int ldy) {
    if (dtype_is_blocked(w->dtype)) {
        quant_matmul_rows_scalar(x, M, w, n0, n1, bias, y, ldy);
        return;
    }
    const int K = w->cols;
    for (int m = 0; m < M; m++) {
        const float *xr = x + (size_t)m * K;
        for (int n = n0; n < n1; n++) {
            const size_t row = (size_t)n * K;
            float acc = 0;
            for (int k = 0; k < K; k++) acc += xr[k] * dtype_load(w->dtype, w->data, row + k);
            y[(size_t)m * ldy + n] = acc + (bias ? bias[n] : 0.0f);
        }
    }
}

static void attn_scores_scalar(const float *q, const void *k, kvlm_dtype kt, int n, int d,
                               float scale, float *scores) {
    for (int j = 0; j < n; j++) {
        float acc = 0;
        for (int i = 0; i < d; i++) acc += q[i] * dtype_load(kt, k, (size_t)j * d + i);
        scores[j] = acc * scale;
    }
}

static void attn_accum_scalar(const float *p, const void *v, kvlm_dtype vt, int n, int d,
                              float *out) {
    for (int j = 0; j < n; j++)
        for (int i = 0; i < d; i++) out[i] += p[j] * dtype_load(vt, v, (size_t)j * d + i);
}

static void attn_scores_heads_scalar(const float *q, int heads, const void *k, kvlm_dtype kt, int n, int d,
                                     float scale, float *scores, size_t lds) {
    for (int h = 0; h < heads; h++) attn_scores_scalar(q + (size_t)h * d, k, kt, n, d, scale, scores + h * lds);
}

static void attn_accum_heads_scalar(const float *p, size_t ldp, int heads, const void *v, kvlm_dtype vt, int n,
                                    int d, float *out) {
    for (int h = 0; h < heads; h++) attn_accum_scalar(p + h * ldp, v, vt, n, d, out + (size_t)h * d);
}

static void gelu_scalar(float *x, size_t n) {
    const float c = 0.7978845608028654f; /* sqrt(2/pi) */
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        x[i] = 0.5f * v * (1.0f + tanhf(c * (v + 0.044715f * v * v * v)));
    }
}

static void layernorm_scalar(const float *x, const float *w, const float *b, int n, float eps,
                             float *out) {
    float mean = 0;
    for (int i = 0; i < n; i++) mean += x[i];
    mean /= (float)n;
    float var = 0;
    for (int i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
    var /= (float)n;
    float rstd = 1.0f / sqrtf(var + eps);
    for (int i = 0; i < n; i++) out[i] = (x[i] - mean) * rstd * w[i] + b[i];
}

static void rmsnorm_scalar(const float *x, const float *w, int n, float eps, float *out) {
    float ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    float r = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = 0; i < n; i++) out[i] = x[i] * r * w[i];
}

static void swiglu_scalar(const float *gate, const float *up, float *out, size_t n) {
    for (size_t i = 0; i < n; i++) out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

static void geglu_scalar(const float *gate, const float *up, float *out, size_t n) {
    const float c = 0.7978845608028654f;
    for (size_t i = 0; i < n; i++) {
        const float v = gate[i];
        out[i] = 0.5f * v * (1.0f + tanhf(c * (v + 0.044715f * v * v * v))) * up[i];
    }
}

static void softcap_scalar(float *x, size_t n, float cap) {
    for (size_t i = 0; i < n; i++) x[i] = cap * tanhf(x[i] / cap);
}

static void store_row_scalar(void *dst, kvlm_dtype t, const float *x, int n) {
    if (t == KVLM_Q8_0) quant_quantize_row(t, x, n, dst);
    else
        for (int i = 0; i < n; i++) dtype_store(t, dst, (size_t)i, x[i]);
}

const kern_ops kern_ops_scalar = {
    .isa = KVLM_ISA_SCALAR,
    .matmul_rows = matmul_rows_scalar,
    .attn_scores = attn_scores_scalar,
    .attn_accum = attn_accum_scalar,
    .attn_scores_heads = attn_scores_heads_scalar,
    .attn_accum_heads = attn_accum_heads_scalar,
    .gelu = gelu_scalar,
    .layernorm = layernorm_scalar,
    .rmsnorm = rmsnorm_scalar,
    .swiglu = swiglu_scalar,
    .geglu = geglu_scalar,
    .softcap = softcap_scalar,
    .store_row = store_row_scalar,
};
