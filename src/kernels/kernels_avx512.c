/*
 * AVX-512 kernel set (16-lane zmm). Compiled with AVX-512 target flags and
 * only called after kern_cpu_supports(KVLM_ISA_AVX512); bodies live in
 * simd_template.h, shared with the AVX2 set.
 */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/vec_f32_avx512.h"
#include "kernels/reduce_avx512.h"

static inline __m512 exp_avx512(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.3f)), _mm512_set1_ps(88.7f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.4426950408889634f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

static inline __m512 round_away_avx512(__m512 v) {
    const __m512 a = _mm512_roundscale_ps(_mm512_add_ps(_mm512_abs_ps(v), _mm512_set1_ps(0.5f)),
                                          _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    return _mm512_or_ps(a, _mm512_and_ps(v, _mm512_set1_ps(-0.0f)));
}

#define V_DIV(a, b) _mm512_div_ps((a), (b))
#define V_MIN(a, b) _mm512_min_ps((a), (b))
#define V_REDUCE(v) _mm512_reduce_add_ps(v)
#define V_STORE_F16(p, v) \
    _mm256_storeu_si256((__m256i *)(p), _mm512_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#define V_ABS(v) _mm512_abs_ps(v)
#define V_ROUND_AWAY(v) round_away_avx512(v)
#define V_STORE_I8(p, v) _mm_storeu_si128((__m128i *)(p), _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(v)))
#define V_EXP(v) exp_avx512(v)
#define MR_MAX 4
#define NR_MAX 6
#define NR1 8
#define V_REDUCE8(v, out) reduce8_avx512((v), (out))
#define PK_MR 3
#define PK_NR 8
#define PK_PANEL1 24576
#define PK_PANEL 16384
#define PK_L2 (1 << 20)
#define PK_MC 120
#define PK_MIN_M 8
#define PK_PF 1
#define KERNEL_NAME(n) n##_avx512
#define KERNEL_ISA KVLM_ISA_AVX512

#include "kernels/simd_template.h"
