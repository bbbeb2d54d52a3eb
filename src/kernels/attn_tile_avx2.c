/*
 * Tiled attention kernels (kernels/attn_tile.h) with AVX2 and FMA: 8 query
 * rows per vector, 8 keys per score pass (8 accumulators, half the 16
 * ymm registers). Compiled with the AVX2 target flags and only selected
 * after the CPU was checked (attn_tile_select). The body is
 * attn_tile_body.h; the exponential is the sampler's (vec_exp_avx2.h).
 */
#include <immintrin.h>
#include <math.h>

#include "kernels/vec_f32_avx2.h"
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

#define KP 8
#define V_DIV(a, b) _mm256_div_ps((a), (b))
#define vi __m256i
#define VI_LOADU(p) _mm256_loadu_si256((const __m256i *)(p))
#define V_HIDE(s, lo, hi, pos) hide8((s), (lo), (hi), (pos))
#define V_EXPZ(x) vec_exp8(x)
#define V_UNINF(m) uninf8(m)
#define TILE_NAME(n) attn_tile_##n##_avx2

#include "kernels/attn_tile_body.h"

const attn_tile_ops attn_tile_avx2 = {KVLM_ISA_AVX2, VW, attn_tile_widen_avx2, attn_tile_update_avx2};
