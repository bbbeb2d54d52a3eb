/*
 * Unpacking one 256-value block of Q4_K, Q5_K or Q6_K for the int8 matmul
 * panel (quant_int8_body.h): the codes as unsigned bytes in value order
 * (Q4_K 0..15, Q5_K 0..31, Q6_K 0..63), the scale a of every 4-value lane
 * (64 floats; Q4_K / Q5_K: d * sc of the lane's 32-value sub-block; Q6_K:
 * d * scales[s] of its 16-value sub-block) and, for Q4_K / Q5_K, the 8
 * sub-block offsets b = dmin * m (value = a * code - b). Q6_K's constant
 * code offset (32) is taken from the activations' lane sums instead.
 * Uses 256-bit integer instructions (AVX2), valid in both instances. No
 * bounds checks: the caller passes whole blocks.
 */
#include "kernels/quant_blocks.h"

static inline void i8k_lanes(float *lsc, int s, int lanes, float a) {
    for (int l = 0; l < lanes; l++) lsc[s * lanes + l] = a;
}

static inline void i8k_unpack(kvlm_dtype t, const unsigned char *b, unsigned char *codes, float *lsc, float *bw) {
    const __m256i m4 = _mm256_set1_epi8(15), m1 = _mm256_set1_epi8(1), m2 = _mm256_set1_epi8(3);
    if (t == KVLM_Q6_K) {
        const blk_q6_k *k = (const blk_q6_k *)b;
        const float d = qb_f16(b + offsetof(blk_q6_k, d));
        for (int h = 0; h < 2; h++) {
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(k->qh + 32 * h));
            for (int c = 0; c < 4; c++) {
                const __m256i ql = _mm256_loadu_si256((const __m256i *)(k->ql + 64 * h + 32 * (c & 1)));
                const __m256i lo = _mm256_and_si256(c < 2 ? ql : _mm256_srli_epi16(ql, 4), m4);
                const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * c)), m2);
                _mm256_storeu_si256((__m256i *)(codes + 128 * h + 32 * c), _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)));
            }
        }
        for (int s = 0; s < 16; s++) i8k_lanes(lsc, s, 4, d * (float)k->scales[s]);
        return;
    }
    const unsigned char *sc = b + 4, *qs = t == KVLM_Q4_K ? ((const blk_q4_k *)b)->qs : ((const blk_q5_k *)b)->qs;
    const float d = qb_f16(b), dmin = qb_f16(b + 2);
    for (int s = 0; s < 8; s++) {
        int a, m;
        qb_scale_min_k4(sc, s, &a, &m);
        i8k_lanes(lsc, s, 8, d * (float)a);
        bw[s] = dmin * (float)m;
    }
    const __m256i qh = t == KVLM_Q5_K ? _mm256_loadu_si256((const __m256i *)((const blk_q5_k *)b)->qh)
                                      : _mm256_setzero_si256();
    for (int p = 0; p < 4; p++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * p));
        __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if (t == KVLM_Q5_K) {
            const __m256i h0 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * p)), m1);
            const __m256i h1 = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * p + 1)), m1);
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(h0, 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(h1, 4));
        }
        _mm256_storeu_si256((__m256i *)(codes + 64 * p), lo);
        _mm256_storeu_si256((__m256i *)(codes + 64 * p + 32), hi);
    }
}
