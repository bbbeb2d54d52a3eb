/*
 * Tiled attention kernels (kernels/attn_tile.h) with AVX2 and FMA: 8 query
 * rows per vector, 8 keys per score pass (8 accumulators, half the 16
 * ymm registers). Compiled with the AVX2 target flags and only selected
 * after the CPU was checked (attn_tile_select). The body is
 * attn_tile_body.h; the exponential is the sampler's (vec_exp_avx2.h).
 */
#include <immintrin.h>
#include <math.h>

#include "kernels/vec_softmax.h"

#include "kernels/vec_exp_avx2.h"

static inline __m256 hide8(__m256 s, __m256i lo, __m256i hi, int pos) {
    const __m256i p = _mm256_set1_epi32(pos);
    const __m256i hidden = _mm256_or_si256(_mm256_cmpgt_epi32(lo, p), _mm256_cmpgt_epi32(p, hi));
    return _mm256_blendv_ps(s, _mm256_set1_ps(-INFINITY), _mm256_castsi256_ps(hidden));
}

static inline __m256 uninf8(__m256 m) {
    return _mm256_andnot_ps(_mm256_cmp_ps(m, _mm256_set1_ps(-INFINITY), _CMP_EQ_OQ), m);
}

static inline __m256 load_bf16_8(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

#define VW 8
#define KP 8
#define vf __m256
#define vi __m256i
#define V_ZERO() _mm256_setzero_ps()
#define V_SET1(s) _mm256_set1_ps(s)
#define V_LOADU(p) _mm256_loadu_ps(p)
#define V_STOREU(p, v) _mm256_storeu_ps((p), (v))
#define V_FMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define V_ADD(a, b) _mm256_add_ps((a), (b))
#define V_SUB(a, b) _mm256_sub_ps((a), (b))
#define V_MUL(a, b) _mm256_mul_ps((a), (b))
#define V_MAX(a, b) _mm256_max_ps((a), (b))
#define VI_LOADU(p) _mm256_loadu_si256((const __m256i *)(p))
#define V_HIDE(s, lo, hi, pos) hide8((s), (lo), (hi), (pos))
#define V_EXPZ(x) vec_exp8(x)
#define V_UNINF(m) uninf8(m)
#define V_LOAD_F16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define V_LOAD_BF16(p) load_bf16_8(p)
#define V_LOAD_I8(p) _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p))))
#define S_F16(h) _cvtsh_ss(h)
#define TILE_NAME(n) attn_tile_##n##_avx2

#include "kernels/attn_tile_body.h"

const attn_tile_ops attn_tile_avx2 = {KVLM_ISA_AVX2, VW, attn_tile_widen_avx2, attn_tile_update_avx2};
