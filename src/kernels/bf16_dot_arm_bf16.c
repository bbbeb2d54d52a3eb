/*
 * Bf16 weights on the Armv8.6 BF16 dot product (BFDOT), the matmul of the
 * neon-bf16 level (aarch64 only; compiled with +bf16 and run only after
 * kern_cpu_supports(KVLM_ISA_NEON_BF16)); bf16_dot.h states the contract
 * and bf16_dot.c builds the kernel set around it.
 *
 * prep rounds x to bf16 with bf16_dot_round (the reference's own
 * function: ties to even, subnormals to signed zero), rows padded with
 * zeros to bf16_dot_stride(K). Per output, four f32x4 accumulators take
 * one BFDOT each per 32 values of K (lane l of accumulator a sums the
 * pairs 8 a + 2 l, 8 a + 2 l + 1 of every step, as the 16 lanes of
 * avx512-bf16 do), then the last K % 32 values 8 at a time into the first
 * accumulator, the last K % 8 one product at a time in f32 (products of
 * two bf16 are exact in f32); the accumulators are summed as
 * (a0 + a1) + (a2 + a3), its lanes with one across-lanes add, then the
 * tail and the bias are added. Every path follows that order, so an output
 * does not depend on the batch or the split of N. The weight rows are not
 * padded: nothing reads past value K of a row.
 *
 * Not here: BFMMLA (2 x 4 by 4 x 2 bf16 tiles for batches); batches run
 * the one-row dot product per output.
 */
#include <arm_neon.h>
#include <string.h>

#include "kernels/bf16_dot.h"
#include "tensor.h"

void bf16_dot_prep_neon(const float *x, int K, int m0, int m1, uint16_t *xb) {
    const int ks = bf16_dot_stride(K);
    for (int m = m0; m < m1; m++) {
        uint16_t *r = xb + (size_t)m * ks;
        const float *xr = x + (size_t)m * K;
        for (int k = 0; k < K; k++) r[k] = bf16_dot_round(xr[k]);
        for (int k = K; k < ks; k++) r[k] = 0;
    }
}

static inline bfloat16x8_t ld(const uint16_t *p) { return vreinterpretq_bf16_u16(vld1q_u16(p)); }

static float dot_row(const uint16_t *xr, const uint16_t *wr, int K) {
    float32x4_t a0 = vdupq_n_f32(0.0f), a1 = a0, a2 = a0, a3 = a0;
    int k = 0;
    for (; k + 32 <= K; k += 32) {
        a0 = vbfdotq_f32(a0, ld(xr + k), ld(wr + k));
        a1 = vbfdotq_f32(a1, ld(xr + k + 8), ld(wr + k + 8));
        a2 = vbfdotq_f32(a2, ld(xr + k + 16), ld(wr + k + 16));
        a3 = vbfdotq_f32(a3, ld(xr + k + 24), ld(wr + k + 24));
    }
    for (; k + 8 <= K; k += 8) a0 = vbfdotq_f32(a0, ld(xr + k), ld(wr + k));
    float tail = 0.0f;
    for (; k < K; k++) tail += bf16_to_f32(xr[k]) * bf16_to_f32(wr[k]);
    return vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3))) + tail;
}

void bf16_dot_rows_neon(const uint16_t *xb, int M, const kern_matrix *w, int n0, int n1, const float *bias,
                        float *y, int ldy) {
    const int K = w->cols, ks = bf16_dot_stride(K);
    const uint16_t *wd = w->data;
    for (int n = n0; n < n1; n++) {
        const uint16_t *wr = wd + (size_t)n * K;
        const float b = bias ? bias[n] : 0.0f;
        for (int m = 0; m < M; m++) y[(size_t)m * ldy + n] = dot_row(xb + (size_t)m * ks, wr, K) + b;
    }
}
