/*
 * The horizontal sums of eight AVX-512 accumulators in one fixed pairing
 * tree, shared by the float kernels (simd_template.h's V_REDUCE8) and the
 * bf16 dot-product kernels, so every output of either is finished the same
 * way whatever tile computed it. Include only from files compiled with
 * AVX-512 flags.
 */
#ifndef KVLM_KERNELS_REDUCE_AVX512_H
#define KVLM_KERNELS_REDUCE_AVX512_H

#include <immintrin.h>

/* out[j] = horizontal sum of v[j] for j < 8, pairing lanes (l, l + 8),
 * then (l, l + 4), (l, l + 2), (l, l + 1): the 8 sums are formed side by
 * side with cross-vector shuffles instead of one reduction per vector. */
static inline void reduce8_avx512(const __m512 *v, float *out) {
    __m512 t[4];
    for (int p = 0; p < 4; p++)
        t[p] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(v[2 * p], v[2 * p + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    /* t[p]: lanes 0-7 half sums of v[2p], 8-15 of v[2p+1] */
    const __m512 u0 = _mm512_add_ps(_mm512_shuffle_f32x4(t[0], t[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm512_shuffle_f32x4(t[0], t[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512 u1 = _mm512_add_ps(_mm512_shuffle_f32x4(t[2], t[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm512_shuffle_f32x4(t[2], t[3], _MM_SHUFFLE(3, 1, 3, 1)));
    /* 128-bit block b of u0 holds 4 partial sums of v[b], of u1 of v[b+4] */
    const __m512 q = _mm512_add_ps(_mm512_shuffle_ps(u0, u1, _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_ps(u0, u1, _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 z = _mm512_add_ps(q, _mm512_shuffle_ps(q, q, _MM_SHUFFLE(2, 3, 0, 1)));
    /* lane 4b: sum of v[b]; lane 4b + 2: sum of v[b + 4] */
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 0, 0, 0, 0, 0, 0, 0, 0);
    _mm256_storeu_ps(out, _mm512_castps512_ps256(_mm512_permutexvar_ps(idx, z)));
}

#endif
