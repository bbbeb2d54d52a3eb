/*
 * One K-quant output of the neon-dotprod level (aarch64 only; included by
 * quant_int8_dotprod.c and quant_int8_i8mm.c, both compiled with at least
 * +dotprod): one row of x's codes against one weight row written out as
 * int8 codes with a and b per 16 values (quant_int8_row_codes' terms).
 *
 * Per 32-value block j, with the exact group sums s_g = sum w_i q_i (two
 * SDOTs and the lanes' sum) and q_g = sum q_i (formed at prep):
 * d_x * (a_0 s_0 + a_1 s_1 - (b_0 q_0 + b_1 q_1)), each product and sum
 * rounded in f32 in this order (the build does not contract them into
 * FMAs: -std=c17), then added in double. These are the steps every
 * K-quant output of neon-dotprod takes, and those neon-i8mm's SMMLA tiles
 * take lane by lane, so the two levels give the same bits.
 */
#ifndef KVLM_QUANT_INT8_KDOT_NEON_H
#define KVLM_QUANT_INT8_KDOT_NEON_H

#include <arm_neon.h>
#include <stdint.h>

/* wc, a, b: the weight row (K codes, K / 16 of each); qr, dr, sr: x's
 * codes, block scales (K / 32) and group sums (K / 16). Returns the
 * output before its rounding to f32 and the bias. */
static inline __attribute__((always_inline)) double kdot_one(const int8_t *wc, const float *a, const float *b,
                                                             const int8_t *qr, const float *dr, const int32_t *sr,
                                                             int K) {
    double acc = 0;
    for (int j = 0; j < K / 32; j++) {
        const int32x4_t z = vdupq_n_s32(0);
        const int32_t s0 = vaddvq_s32(vdotq_s32(z, vld1q_s8(wc + 32 * j), vld1q_s8(qr + 32 * j)));
        const int32_t s1 = vaddvq_s32(vdotq_s32(z, vld1q_s8(wc + 32 * j + 16), vld1q_s8(qr + 32 * j + 16)));
        const float t = a[2 * j] * (float)s0 + a[2 * j + 1] * (float)s1 -
                        (b[2 * j] * (float)sr[2 * j] + b[2 * j + 1] * (float)sr[2 * j + 1]);
        acc += (double)(dr[j] * t);
    }
    return acc;
}

#endif
