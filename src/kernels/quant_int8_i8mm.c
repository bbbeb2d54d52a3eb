/*
 * The neon-i8mm level's matmul (aarch64 only; compiled with +dotprod+i8mm
 * and run only after kern_cpu_supports(KVLM_ISA_NEON_I8MM)): Q8_0 and
 * Q4_0 weights against two or more rows of x with the Armv8.6 int8 matrix
 * multiply (SMMLA: a 2 x 8 by 8 x 2 int8 product added to a 2 x 2 int32
 * tile); the K-quants (Q4_K, Q5_K, Q6_K) against two or more rows go to
 * quant_int8_k_i8mm.c, with a panel of two weight rows. Every other call
 * (one row of x: decode, where SMMLA would waste half its work) is the
 * neon-dotprod level's (quant_int8_dotprod.c), and so is the prepared form
 * of x: the same codes and scales (quant_int8.h's rule).
 *
 * Per 32-value block and 2 x 2 tile (rows m, m + 1 of x; weight rows n,
 * n + 1): the 8-value halves of the two rows zipped into 4 pairs of
 * registers, four SMMLA give the tile's exact block sums s, and each
 * output adds s * (dx * dw) with one fused multiply-add in f32, blocks in
 * order. An output outside whole tiles (the last row of an odd M, the last
 * weight row of an odd range) takes the same steps one block sum at a time
 * (SDOT, then the lanes' sum), so its bits do not depend on where a work
 * item's range starts or ends. The float rounding differs from
 * quant_int8_matmul_ref's (double) by a few ulps of sum |x w|.
 */
#include <arm_neon.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/quant_int8.h"
#include "kernels/vec_f32_neon.h"
#include "tensor.h"

#define AI static inline __attribute__((always_inline))

/* The 32 codes of one weight block as two int8x16 (Q4_0: nibble - 8). */
AI void mm_codes(kvlm_dtype t, const unsigned char *blk, int8x16_t *lo, int8x16_t *hi) {
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

AI float mm_scale(const unsigned char *blk) {
    uint16_t h;
    memcpy(&h, blk, 2);
    return f16_neon(h);
}

AI int8x16_t zip_lo(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}
AI int8x16_t zip_hi(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}

/* Rows m, m + 1 of x against weight rows n .. n + 2 np - 1 (np pairs,
 * compile-time). */
AI void mm_tile(const int8_t *q, const float *d, int K, const unsigned char *wd, size_t rb, kvlm_dtype t, int np,
                int m, int n, const float *bias, float *y, int ldy) {
    const size_t bb = t == KVLM_Q8_0 ? sizeof(blk_q8_0) : sizeof(blk_q4_0);
    const int nb = K / QK;
    float32x4_t acc[4];
#pragma GCC unroll 4
    for (int p = 0; p < np; p++) acc[p] = vdupq_n_f32(0.0f);
    const int8_t *q0 = q + (size_t)m * K, *q1 = q0 + K;
    for (int b = 0; b < nb; b++) {
        const int8x16_t l0 = vld1q_s8(q0 + 32 * b), h0 = vld1q_s8(q0 + 32 * b + 16);
        const int8x16_t l1 = vld1q_s8(q1 + 32 * b), h1 = vld1q_s8(q1 + 32 * b + 16);
        const int8x16_t xa = zip_lo(l0, l1), xb = zip_hi(l0, l1), xc = zip_lo(h0, h1), xd = zip_hi(h0, h1);
        const float dx0 = d[(size_t)m * nb + b], dx1 = d[(size_t)(m + 1) * nb + b];
        const float32x4_t dx = {dx0, dx0, dx1, dx1};
#pragma GCC unroll 4
        for (int p = 0; p < np; p++) {
            const unsigned char *b0 = wd + (size_t)(n + 2 * p) * rb + (size_t)b * bb, *b1 = b0 + rb;
            int8x16_t wl0, wh0, wl1, wh1;
            mm_codes(t, b0, &wl0, &wh0);
            mm_codes(t, b1, &wl1, &wh1);
            int32x4_t s = vmmlaq_s32(vdupq_n_s32(0), xa, zip_lo(wl0, wl1));
            s = vmmlaq_s32(s, xb, zip_hi(wl0, wl1));
            s = vmmlaq_s32(s, xc, zip_lo(wh0, wh1));
            s = vmmlaq_s32(s, xd, zip_hi(wh0, wh1));
            const float dw0 = mm_scale(b0), dw1 = mm_scale(b1);
            const float32x4_t dw = {dw0, dw1, dw0, dw1};
            acc[p] = vfmaq_f32(acc[p], vcvtq_f32_s32(s), vmulq_f32(dx, dw));
        }
    }
#pragma GCC unroll 4
    for (int p = 0; p < np; p++) {
        const int j = n + 2 * p;
        const float b0 = bias ? bias[j] : 0.0f, b1 = bias ? bias[j + 1] : 0.0f;
        y[(size_t)m * ldy + j] = vgetq_lane_f32(acc[p], 0) + b0;
        y[(size_t)m * ldy + j + 1] = vgetq_lane_f32(acc[p], 1) + b1;
        y[(size_t)(m + 1) * ldy + j] = vgetq_lane_f32(acc[p], 2) + b0;
        y[(size_t)(m + 1) * ldy + j + 1] = vgetq_lane_f32(acc[p], 3) + b1;
    }
}

/* One output the tile's way, a block sum at a time. */
AI void mm_one(const int8_t *q, const float *d, int K, const unsigned char *wd, size_t rb, kvlm_dtype t, int m, int n,
               const float *bias, float *y, int ldy) {
    const size_t bb = t == KVLM_Q8_0 ? sizeof(blk_q8_0) : sizeof(blk_q4_0);
    const int nb = K / QK;
    const int8_t *qr = q + (size_t)m * K;
    float acc = 0.0f;
    for (int b = 0; b < nb; b++) {
        const unsigned char *blk = wd + (size_t)n * rb + (size_t)b * bb;
        int8x16_t wl, wh;
        mm_codes(t, blk, &wl, &wh);
        const int32x4_t s4 = vdotq_s32(vdotq_s32(vdupq_n_s32(0), wl, vld1q_s8(qr + 32 * b)), wh, vld1q_s8(qr + 32 * b + 16));
        acc = fmaf((float)vaddvq_s32(s4), d[(size_t)m * nb + b] * mm_scale(blk), acc);
    }
    y[(size_t)m * ldy + n] = acc + (bias ? bias[n] : 0.0f);
}

AI void mm_rows_t(const int8_t *q, const float *d, int M, int K, const kern_matrix *w, int n0, int n1,
                  const float *bias, float *y, int ldy, kvlm_dtype t) {
    const size_t rb = (size_t)(K / QK) * (t == KVLM_Q8_0 ? sizeof(blk_q8_0) : sizeof(blk_q4_0));
    const unsigned char *wd = w->data;
    const int me = M & ~1;
    int n = n0;
    for (; n + 4 <= n1; n += 4)
        for (int m = 0; m < me; m += 2) mm_tile(q, d, K, wd, rb, t, 2, m, n, bias, y, ldy);
    for (; n + 2 <= n1; n += 2)
        for (int m = 0; m < me; m += 2) mm_tile(q, d, K, wd, rb, t, 1, m, n, bias, y, ldy);
    for (; n < n1; n++)
        for (int m = 0; m < me; m++) mm_one(q, d, K, wd, rb, t, m, n, bias, y, ldy);
    if (me < M)
        for (int j = n0; j < n1; j++) mm_one(q, d, K, wd, rb, t, me, j, bias, y, ldy);
}

static int is_kquant(kvlm_dtype t) { return t == KVLM_Q4_K || t == KVLM_Q5_K || t == KVLM_Q6_K; }

static int mm_takes(int M, const kern_matrix *w) {
    return M >= 2 && (w->dtype == KVLM_Q8_0 || w->dtype == KVLM_Q4_0 || is_kquant(w->dtype));
}

size_t quant_int8_i8mm_prep_bytes(int M, const kern_matrix *w, size_t *panel) {
    const size_t bytes = quant_int8_dotprod_prep_bytes(M, w, panel);
    if (bytes && panel && *panel && M >= 2) *panel = quant_int8_i8mm_kpanel_bytes(w->cols);
    return bytes;
}

void quant_int8_i8mm_rows_prep(const void *buf, void *panel, const kern_matrix *w, int n0, int n1, const float *bias,
                               float *y, int ldy) {
    int M, K;
    const int8_t *q;
    const float *d;
    const int32_t *qs;
    quant_int8_dotprod_layout(buf, &M, &K, &q, &d, &qs);
    if (!mm_takes(M, w)) {
        quant_int8_dotprod_rows_prep(buf, panel, w, n0, n1, bias, y, ldy);
        return;
    }
    if (w->dtype == KVLM_Q8_0) mm_rows_t(q, d, M, K, w, n0, n1, bias, y, ldy, KVLM_Q8_0);
    else if (w->dtype == KVLM_Q4_0) mm_rows_t(q, d, M, K, w, n0, n1, bias, y, ldy, KVLM_Q4_0);
    else quant_int8_i8mm_krows(q, d, qs, M, K, w, n0, n1, panel, bias, y, ldy);
}

void quant_int8_i8mm_matmul_rows(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias,
                                 float *y, int ldy) {
    if (!mm_takes(M, w)) {
        quant_int8_dotprod_matmul_rows(x, M, w, n0, n1, bias, y, ldy);
        return;
    }
    size_t panel = 0;
    const size_t bytes = quant_int8_i8mm_prep_bytes(M, w, &panel);
    const size_t pre = (bytes + 63) & ~(size_t)63;
    unsigned char *buf = bytes ? aligned_alloc(64, pre + panel) : NULL;
    if (!buf) {
        kern_ops_neon.matmul_rows(x, M, w, n0, n1, bias, y, ldy);
        return;
    }
    quant_int8_dotprod_prep(x, M, w, 0, M, buf);
    quant_int8_i8mm_rows_prep(buf, panel ? buf + pre : NULL, w, n0, n1, bias, y, ldy);
    free(buf);
}
