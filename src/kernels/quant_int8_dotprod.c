/*
 * Int8 activations for Q8_0, Q4_0, Q4_K, Q5_K and Q6_K weights with the
 * Armv8.2 dot-product instructions (SDOT: four int8 x int8 products summed
 * into each int32 lane), the matmul of the neon-dotprod level (aarch64
 * only; compiled with +dotprod and run only after
 * kern_cpu_supports(KVLM_ISA_NEON_DOTPROD)).
 *
 * x is quantised as quant_int8.h states (per row and 32-value block: d =
 * amax / 127, codes x * (127 / amax) rounded to nearest, ties to even):
 * the same codes and scales as quant_int8_quantize_row for finite x.
 *  - Q8_0 / Q4_0: the weight codes are read in place (Q4_0's nibbles less
 *    8); a block's exact integer sum sum_i w_i q_i is scaled by d_w * d_x
 *    in f32 and accumulated per lane, the four lanes summed at the end.
 *  - K-quants: each weight row is first written out as int8 codes with a
 *    and b per 16 values (quant_int8_row_codes' terms,
 *    into the caller's panel), then per 32-value block
 *    d_x * (a_0 s_0 + a_1 s_1 - (b_0 q_0 + b_1 q_1)) with the exact group
 *    sums s_g = sum w_i q_i and q_g = sum q_i (formed once at prep) is
 *    rounded once in f32 and summed in double (quant_int8_kdot_neon.h,
 *    whose steps neon-i8mm's SMMLA tiles repeat lane by lane). The codes
 *    are unpacked 16 at a time in NEON (quant_int8_row_codes_neon: the
 *    reference's bytes).
 * Other weight dtypes are not handled here (quant_int8_dotprod_prep_bytes
 * returns 0: the caller uses the neon f32 kernels).
 *
 * The prepared form (kern_ops.matmul_prep, kernels.h): a 64-byte header
 * (M, K), then M rows of K codes, then M rows of K / 32 scales, then M
 * rows of K / 16 code sums. Every output is computed by one tile with one
 * accumulation order, so a matmul gives the same bits however it is
 * split.
 */
#include <arm_neon.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/quant_int8.h"
#include "kernels/quant_int8_kdot_neon.h"
#include "kernels/vec_f32_neon.h"
#include "tensor.h"

#define HEAD 64
#define AI static inline __attribute__((always_inline))

typedef struct dp_head {
    int M, K;
} dp_head;

static int is_kquant(kvlm_dtype t) { return t == KVLM_Q4_K || t == KVLM_Q5_K || t == KVLM_Q6_K; }

static int dp_takes(const kern_matrix *w) {
    if (w->cols <= 0) return 0;
    if (w->dtype == KVLM_Q8_0 || w->dtype == KVLM_Q4_0) return w->cols % QK == 0;
    return is_kquant(w->dtype) && w->cols % QK_K == 0;
}

static size_t codes_bytes(int M, int K) { return ((size_t)M * K + 63) & ~(size_t)63; }
static size_t scales_bytes(int M, int K) { return (size_t)M * (K / QK) * sizeof(float); }

/* A K-quant weight row written out: K codes, then a and b (K / 16 each). */
static size_t row_panel_bytes(int K) { return ((size_t)K + 2 * (size_t)(K / 16) * sizeof(float) + 63) & ~(size_t)63; }

size_t quant_int8_dotprod_prep_bytes(int M, const kern_matrix *w, size_t *panel) {
    if (panel) *panel = 0;
    if (!dp_takes(w)) return 0;
    if (panel && is_kquant(w->dtype)) *panel = row_panel_bytes(w->cols);
    return HEAD + codes_bytes(M, w->cols) + scales_bytes(M, w->cols) + (size_t)M * (w->cols / 16) * sizeof(int32_t);
}

/* One row of K values: codes q, scales d (quant_int8.h's rule), and the
 * sums of each 16 codes. */
static void quantize_row(const float *x, int K, int8_t *q, float *d, int32_t *qs) {
    for (int b = 0; b < K / QK; b++) {
        const float *xb = x + (size_t)b * QK;
        float32x4_t v[8], m = vdupq_n_f32(0.0f);
        for (int i = 0; i < 8; i++) v[i] = vld1q_f32(xb + 4 * i), m = vmaxq_f32(m, vabsq_f32(v[i]));
        const float amax = vmaxvq_f32(m);
        d[b] = amax / 127.0f;
        const float32x4_t id = vdupq_n_f32(amax != 0.0f ? 127.0f / amax : 0.0f);
        int16x8_t h[4];
        for (int i = 0; i < 4; i++)
            h[i] = vcombine_s16(vqmovn_s32(vcvtnq_s32_f32(vmulq_f32(v[2 * i], id))),
                                vqmovn_s32(vcvtnq_s32_f32(vmulq_f32(v[2 * i + 1], id))));
        vst1q_s8(q + (size_t)b * QK, vcombine_s8(vqmovn_s16(h[0]), vqmovn_s16(h[1])));
        vst1q_s8(q + (size_t)b * QK + 16, vcombine_s8(vqmovn_s16(h[2]), vqmovn_s16(h[3])));
        qs[2 * b] = vaddlvq_s8(vld1q_s8(q + (size_t)b * QK));
        qs[2 * b + 1] = vaddlvq_s8(vld1q_s8(q + (size_t)b * QK + 16));
    }
}

void quant_int8_dotprod_prep(const float *x, int M, const kern_matrix *w, int m0, int m1, void *buf) {
    const int K = w->cols;
    *(dp_head *)buf = (dp_head){M, K};
    int8_t *q = (int8_t *)((unsigned char *)buf + HEAD);
    float *d = (float *)((unsigned char *)buf + HEAD + codes_bytes(M, K));
    int32_t *qs = (int32_t *)((unsigned char *)buf + HEAD + codes_bytes(M, K) + scales_bytes(M, K));
    for (int m = m0; m < m1; m++)
        quantize_row(x + (size_t)m * K, K, q + (size_t)m * K, d + (size_t)m * (K / QK), qs + (size_t)m * (K / 16));
}

void quant_int8_dotprod_layout(const void *buf, int *M, int *K, const int8_t **q, const float **d,
                               const int32_t **qs) {
    const dp_head *h = buf;
    *M = h->M, *K = h->K;
    *q = (const int8_t *)((const unsigned char *)buf + HEAD);
    *d = (const float *)((const unsigned char *)buf + HEAD + codes_bytes(h->M, h->K));
    if (qs) *qs = (const int32_t *)((const unsigned char *)*d + scales_bytes(h->M, h->K));
}

/* The 32 codes of one weight block as two int8x16 (Q4_0: nibble - 8). */
AI void w_codes(kvlm_dtype t, const unsigned char *blk, int8x16_t *lo, int8x16_t *hi) {
    if (t == KVLM_Q8_0) {
        *lo = vld1q_s8((const int8_t *)blk + 2);
        *hi = vld1q_s8((const int8_t *)blk + 18);
    } else {
        const uint8x16_t b = vld1q_u8(blk + 2);
        const int8x16_t eight = vdupq_n_s8(8);
        *lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(b, vdupq_n_u8(15))), eight);
        *hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(b, 4)), eight);
    }
}

AI float w_scale(const unsigned char *blk) {
    uint16_t h;
    memcpy(&h, blk, 2);
    return f16_neon(h);
}

/* y[m + i][n + j] for i < mr, j < nr over all K (compile-time mr, nr once
 * inlined). */
AI void dp_tile(const int8_t *q, const float *d, int K, const unsigned char *wd, size_t rb, kvlm_dtype t, int mr,
                int nr, int m, int n, const float *bias, float *y, int ldy) {
    const size_t bb = t == KVLM_Q8_0 ? sizeof(blk_q8_0) : sizeof(blk_q4_0);
    const int nb = K / QK;
    float32x4_t acc[2][4];
#pragma GCC unroll 2
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
        for (int j = 0; j < nr; j++) acc[i][j] = vdupq_n_f32(0.0f);
    for (int b = 0; b < nb; b++) {
        int8x16_t xl[2], xh[2];
        float dx[2];
#pragma GCC unroll 2
        for (int i = 0; i < mr; i++) {
            const int8_t *qr = q + (size_t)(m + i) * K + (size_t)b * QK;
            xl[i] = vld1q_s8(qr), xh[i] = vld1q_s8(qr + 16);
            dx[i] = d[(size_t)(m + i) * nb + b];
        }
#pragma GCC unroll 4
        for (int j = 0; j < nr; j++) {
            const unsigned char *blk = wd + (size_t)(n + j) * rb + (size_t)b * bb;
            int8x16_t wl, wh;
            w_codes(t, blk, &wl, &wh);
            const float dw = w_scale(blk);
#pragma GCC unroll 2
            for (int i = 0; i < mr; i++) {
                const int32x4_t s = vdotq_s32(vdotq_s32(vdupq_n_s32(0), wl, xl[i]), wh, xh[i]);
                acc[i][j] = vfmaq_n_f32(acc[i][j], vcvtq_f32_s32(s), dw * dx[i]);
            }
        }
    }
#pragma GCC unroll 2
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
        for (int j = 0; j < nr; j++)
            y[(size_t)(m + i) * ldy + n + j] = hsum_neon(acc[i][j]) + (bias ? bias[n + j] : 0.0f);
}

AI void dp_rows_t(const int8_t *q, const float *d, int M, int K, const kern_matrix *w, int n0, int n1,
                  const float *bias, float *y, int ldy, kvlm_dtype t) {
    const size_t rb = (size_t)(K / QK) * (t == KVLM_Q8_0 ? sizeof(blk_q8_0) : sizeof(blk_q4_0));
    const unsigned char *wd = w->data;
    int n = n0;
    for (; n + 4 <= n1; n += 4) {
        int m = 0;
        for (; m + 2 <= M; m += 2) dp_tile(q, d, K, wd, rb, t, 2, 4, m, n, bias, y, ldy);
        if (m < M) dp_tile(q, d, K, wd, rb, t, 1, 4, m, n, bias, y, ldy);
    }
    for (; n < n1; n++) {
        int m = 0;
        for (; m + 2 <= M; m += 2) dp_tile(q, d, K, wd, rb, t, 2, 1, m, n, bias, y, ldy);
        if (m < M) dp_tile(q, d, K, wd, rb, t, 1, 1, m, n, bias, y, ldy);
    }
}

/* K-quant rows [n0, n1): each weight row written out into the panel once,
 * then every row of x against it. */
static void dp_krows(const int8_t *q, const float *d, const int32_t *qs, int M, int K, const kern_matrix *w, int n0,
                     int n1, void *panel, const float *bias, float *y, int ldy) {
    const size_t rb = dtype_row_bytes(w->dtype, K, NULL);
    int8_t *wc = panel;
    float *a = (float *)(wc + K), *b = a + K / 16;
    const int nb = K / QK;
    for (int n = n0; n < n1; n++) {
        quant_int8_row_codes_neon(w->dtype, (const unsigned char *)w->data + (size_t)n * rb, K, wc, a, b);
        for (int m = 0; m < M; m++) {
            const double acc = kdot_one(wc, a, b, q + (size_t)m * K, d + (size_t)m * nb, qs + (size_t)m * (K / 16), K);
            y[(size_t)m * ldy + n] = (float)acc + (bias ? bias[n] : 0.0f);
        }
    }
}

void quant_int8_dotprod_rows_prep(const void *buf, void *panel, const kern_matrix *w, int n0, int n1,
                                  const float *bias, float *y, int ldy) {
    const dp_head *h = buf;
    const int8_t *q = (const int8_t *)((const unsigned char *)buf + HEAD);
    const float *d = (const float *)((const unsigned char *)buf + HEAD + codes_bytes(h->M, h->K));
    if (w->dtype == KVLM_Q8_0) dp_rows_t(q, d, h->M, h->K, w, n0, n1, bias, y, ldy, KVLM_Q8_0);
    else if (w->dtype == KVLM_Q4_0) dp_rows_t(q, d, h->M, h->K, w, n0, n1, bias, y, ldy, KVLM_Q4_0);
    else {
        const int32_t *qs = (const int32_t *)((const unsigned char *)buf + HEAD + codes_bytes(h->M, h->K) +
                                              scales_bytes(h->M, h->K));
        dp_krows(q, d, qs, h->M, h->K, w, n0, n1, panel, bias, y, ldy);
    }
}

void quant_int8_dotprod_matmul_rows(const float *x, int M, const kern_matrix *w, int n0, int n1,
                                    const float *bias, float *y, int ldy) {
    size_t panel = 0;
    const size_t bytes = quant_int8_dotprod_prep_bytes(M, w, &panel);
    const size_t pre = (bytes + 63) & ~(size_t)63;
    unsigned char *buf = bytes ? aligned_alloc(64, pre + panel) : NULL;
    if (!buf) { /* another dtype, or no memory for the codes: f32 activations */
        kern_ops_neon.matmul_rows(x, M, w, n0, n1, bias, y, ldy);
        return;
    }
    quant_int8_dotprod_prep(x, M, w, 0, M, buf);
    quant_int8_dotprod_rows_prep(buf, panel ? buf + pre : NULL, w, n0, n1, bias, y, ldy);
    free(buf);
}
