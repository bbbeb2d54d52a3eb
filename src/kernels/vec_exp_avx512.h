/*
 * The vector exponential of vec_exp_body.h instantiated for AVX-512 (16 lanes),
 * with lanes below its range set to exactly 0: vec_exp16(x). Included by the
 * avx512 files that need it (the sampler's softmax, the tiled attention's
 * online softmax), which are compiled with the avx512 target flags.
 */
#ifndef KVLM_KERNELS_VEC_EXP_AVX512_H
#define KVLM_KERNELS_VEC_EXP_AVX512_H

#include <immintrin.h>

#define EV __m512
#define EVI __m512i
#define EV_SET1 _mm512_set1_ps
#define EV_ADD _mm512_add_ps
#define EV_SUB _mm512_sub_ps
#define EV_MUL _mm512_mul_ps
#define EV_MIN _mm512_min_ps
#define EVI_SET1 _mm512_set1_epi32
#define EVI_ADD _mm512_add_epi32
#define EVI_SLLI _mm512_slli_epi32
#define EV_TO_I _mm512_cvtps_epi32
#define EVI_AS_EV _mm512_castsi512_ps
#include "kernels/vec_exp_body.h"

static inline __m512 vec_exp16(__m512 x) {
    const __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(VEC_EXP_LO), _CMP_GE_OQ);
    return _mm512_maskz_mov_ps(live, vec_exp_raw(x));
}

#endif
