/*
 * A K-quant weight row (Q4_K, Q5_K, Q6_K) written out as int8 codes with
 * the scale a and offset b of every 16 values, in NEON (aarch64 only; no
 * ISA flag: Advanced SIMD is part of every aarch64 CPU): the same bytes
 * and floats as quant_int8_row_codes (quant_int8.c), which the neon-dotprod
 * matmul runs once per weight row and call. The codes are unpacked 16 at a
 * time (nibbles, Q5_K's fifth bit, Q6_K's two high bits, its - 32); the
 * scales and minimums, 16 per 256 values, are computed as the reference
 * computes them (the same float products). Other dtypes are passed to
 * quant_int8_row_codes.
 */
#include <arm_neon.h>
#include <stddef.h>

#include "kernels/quant_blocks.h"
#include "kernels/quant_int8.h"
#include "tensor.h"

/* v >> n for a shift known only at run time (vshlq by -n). */
static inline uint8x16_t shr(uint8x16_t v, int n) { return vshlq_u8(v, vdupq_n_s8((int8_t)-n)); }

static void q6_k_block(const blk_q6_k *k, int8_t *wc, float *ab, float *bb) {
    const float d = qb_f16((const unsigned char *)k + offsetof(blk_q6_k, d));
    const uint8x16_t m4 = vdupq_n_u8(15), m2 = vdupq_n_u8(3);
    const int8x16_t off = vdupq_n_s8(32);
    for (int h = 0; h < 2; h++)
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l += 16) {
                const uint8x16_t lo = vandq_u8(shr(vld1q_u8(k->ql + 64 * h + 32 * (c & 1) + l), c < 2 ? 0 : 4), m4);
                const uint8x16_t hi = vandq_u8(shr(vld1q_u8(k->qh + 32 * h + l), 2 * c), m2);
                const uint8x16_t code = vorrq_u8(lo, vshlq_n_u8(hi, 4));
                vst1q_s8(wc + 128 * h + 32 * c + l, vsubq_s8(vreinterpretq_s8_u8(code), off));
            }
    for (int s = 0; s < 16; s++) ab[s] = d * (float)k->scales[s], bb[s] = 0.0f;
}

static void q45_k_block(kvlm_dtype t, const unsigned char *blk, int8_t *wc, float *ab, float *bb) {
    const blk_q4_k *k4 = (const blk_q4_k *)blk;
    const blk_q5_k *k5 = (const blk_q5_k *)blk;
    const unsigned char *qs = t == KVLM_Q4_K ? k4->qs : k5->qs;
    const float d = qb_f16(blk), dmin = qb_f16(blk + 2);
    const uint8x16_t m4 = vdupq_n_u8(15), one = vdupq_n_u8(1);
    for (int s = 0; s < 8; s++) {
        int sc, m;
        qb_scale_min_k4(blk + 4, s, &sc, &m);
        ab[2 * s] = ab[2 * s + 1] = d * (float)sc;
        bb[2 * s] = bb[2 * s + 1] = dmin * (float)m;
        for (int l = 0; l < 32; l += 16) {
            const uint8x16_t q = vld1q_u8(qs + 32 * (s / 2) + l);
            uint8x16_t c = s & 1 ? vshrq_n_u8(q, 4) : vandq_u8(q, m4);
            if (t == KVLM_Q5_K) c = vorrq_u8(c, vshlq_n_u8(vandq_u8(shr(vld1q_u8(k5->qh + l), s), one), 4));
            vst1q_s8(wc + 32 * s + l, vreinterpretq_s8_u8(c));
        }
    }
}

void quant_int8_row_codes_neon(kvlm_dtype t, const unsigned char *row, int K, int8_t *w, float *a, float *b) {
    if (t != KVLM_Q4_K && t != KVLM_Q5_K && t != KVLM_Q6_K) {
        quant_int8_row_codes(t, row, K, w, a, b);
        return;
    }
    const size_t bb = dtype_block_bytes(t);
    for (int kb = 0; kb < K / QK_K; kb++) {
        const unsigned char *blk = row + (size_t)kb * bb;
        if (t == KVLM_Q6_K) q6_k_block((const blk_q6_k *)blk, w + kb * QK_K, a + kb * 16, b + kb * 16);
        else q45_k_block(t, blk, w + kb * QK_K, a + kb * 16, b + kb * 16);
    }
}
