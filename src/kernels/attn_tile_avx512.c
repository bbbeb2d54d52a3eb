/*
 * Tiled attention kernels (kernels/attn_tile.h) with AVX-512: 16 query rows
 * per vector, 16 keys per score pass (16 accumulators). Compiled with the
 * AVX-512 target flags and only selected after the CPU was checked
 * (attn_tile_select). The body is attn_tile_body.h; the exponential is the
 * sampler's (vec_exp_avx512.h).
 */
#include <immintrin.h>
#include <math.h>

#include "kernels/vec_f32_avx512.h"
#include "kernels/vec_softmax.h"

#include "kernels/vec_exp_avx512.h"

static inline __m512 hide16(__m512 s, __m512i lo, __m512i hi, int pos) {
    const __m512i p = _mm512_set1_epi32(pos);
    const __mmask16 vis = _mm512_cmple_epi32_mask(lo, p) & _mm512_cmple_epi32_mask(p, hi);
    return _mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), vis, s);
}

static inline __m512 uninf16(__m512 m) {
    return _mm512_mask_mov_ps(m, _mm512_cmp_ps_mask(m, _mm512_set1_ps(-INFINITY), _CMP_EQ_OQ), _mm512_setzero_ps());
}

#define KP 16
#define V_DIV(a, b) _mm512_div_ps((a), (b))
#define vi __m512i
#define VI_LOADU(p) _mm512_loadu_si512((const void *)(p))
#define V_HIDE(s, lo, hi, pos) hide16((s), (lo), (hi), (pos))
#define V_EXPZ(x) vec_exp16(x)
#define V_UNINF(m) uninf16(m)
#define TILE_NAME(n) attn_tile_##n##_avx512

#include "kernels/attn_tile_body.h"

const attn_tile_ops attn_tile_avx512 = {KVLM_ISA_AVX512, VW, attn_tile_widen_avx512, attn_tile_update_avx512};
