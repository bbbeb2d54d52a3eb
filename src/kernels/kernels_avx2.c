/*
 * AVX2 + FMA + F16C kernel set (8-lane ymm), for CPUs without AVX-512.
 * Bodies live in simd_template.h, shared with the AVX-512 set.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/vec_f32_avx2.h"

static inline __m256 exp_avx2(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.4426950408889634f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

static inline float hsum_avx2(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* out[j] = horizontal sum of v[j] for j < 8, pairing lanes (l, l + 4),
 * then (l, l + 2), (l, l + 1) as hsum_avx2 does, the 8 sums side by side. */
static inline void reduce8_avx2(const __m256 *v, float *out) {
    __m256 t[4];
    for (int p = 0; p < 4; p++)
        t[p] = _mm256_add_ps(_mm256_permute2f128_ps(v[2 * p], v[2 * p + 1], 0x20),
                             _mm256_permute2f128_ps(v[2 * p], v[2 * p + 1], 0x31));
    /* t[p]: lanes 0-3 half sums of v[2p], 4-7 of v[2p+1] */
    const __m256 u0 = _mm256_add_ps(_mm256_shuffle_ps(t[0], t[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                    _mm256_shuffle_ps(t[0], t[1], _MM_SHUFFLE(3, 2, 3, 2)));
    const __m256 u1 = _mm256_add_ps(_mm256_shuffle_ps(t[2], t[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                    _mm256_shuffle_ps(t[2], t[3], _MM_SHUFFLE(3, 2, 3, 2)));
    /* u0 block b: 2 partial sums of v[b], then of v[b+2]; u1 the same for v[b+4], v[b+6] */
    const __m256 z = _mm256_add_ps(_mm256_shuffle_ps(u0, u1, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm256_shuffle_ps(u0, u1, _MM_SHUFFLE(3, 1, 3, 1)));
    /* block 0: v0 v2 v4 v6, block 1: v1 v3 v5 v7 */
    _mm256_storeu_ps(out, _mm256_permutevar8x32_ps(z, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

static inline __m256 round_away_avx2(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 a = _mm256_floor_ps(_mm256_add_ps(_mm256_andnot_ps(sign, v), _mm256_set1_ps(0.5f)));
    return _mm256_or_ps(a, _mm256_and_ps(v, sign));
}

/* 8 integral floats in [-127, 127] as int8 (the packs do not saturate them). */
static inline void store_i8_avx2(int8_t *p, __m256 v) {
    const __m256i i = _mm256_cvtps_epi32(v);
    __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
    _mm_storel_epi64((__m128i *)p, _mm_packs_epi16(w, w));
}

#define V_DIV(a, b) _mm256_div_ps((a), (b))
#define V_MIN(a, b) _mm256_min_ps((a), (b))
#define V_REDUCE(v) hsum_avx2(v)
#define V_STORE_F16(p, v) \
    _mm_storeu_si128((__m128i *)(p), _mm256_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#define V_ABS(v) _mm256_andnot_ps(_mm256_set1_ps(-0.0f), (v))
#define V_ROUND_AWAY(v) round_away_avx2(v)
#define V_STORE_I8(p, v) store_i8_avx2((p), (v))
#define V_EXP(v) exp_avx2(v)
#define MR_MAX 3
#define NR_MAX 4
#define NR1 8
#define V_REDUCE8(v, out) reduce8_avx2((v), (out))
#define PK_MR 3
#define PK_NR 4
#define PK_PANEL1 24576
#define PK_PANEL 16384
#define PK_L2 (1 << 20)
#define PK_MC 120
#define PK_MIN_M 8
#define PK_PF 1
#define KERNEL_NAME(n) n##_avx2
#define KERNEL_ISA KVLM_ISA_AVX2

#include "kernels/simd_template.h"
