/*
 * The vector exponential of vec_exp_body.h instantiated for AVX2 (8 lanes),
 * with lanes below its range set to exactly 0: vec_exp8(x). Included by the
 * avx2 files that need it (the sampler's softmax, the tiled attention's
 * online softmax), which are compiled with the avx2 target flags.
 */
#ifndef KVLM_KERNELS_VEC_EXP_AVX2_H
#define KVLM_KERNELS_VEC_EXP_AVX2_H

#include <immintrin.h>

#define EV __m256
#define EVI __m256i
#define EV_SET1 _mm256_set1_ps
#define EV_ADD _mm256_add_ps
#define EV_SUB _mm256_sub_ps
#define EV_MUL _mm256_mul_ps
#define EV_MIN _mm256_min_ps
#define EVI_SET1 _mm256_set1_epi32
#define EVI_ADD _mm256_add_epi32
#define EVI_SLLI _mm256_slli_epi32
#define EV_TO_I _mm256_cvtps_epi32
#define EVI_AS_EV _mm256_castsi256_ps
#include "kernels/vec_exp_body.h"

static inline __m256 vec_exp8(__m256 x) {
    const __m256 live = _mm256_cmp_ps(x, _mm256_set1_ps(VEC_EXP_LO), _CMP_GE_OQ);
    return _mm256_and_ps(live, vec_exp_raw(x));
}

#endif
