/*
 * The float-vector vocabulary the kernel bodies are written in
 * (simd_template.h, attn_tile_body.h), for AVX2 + FMA + F16C: 8 f32 lanes
 * per vector (VW), the arithmetic, and the loads that widen f16, bf16 and
 * int8 values to f32 exactly. Include in a file compiled with the AVX2
 * flags, before the body.
 */
#ifndef KVLM_VEC_F32_AVX2_H
#define KVLM_VEC_F32_AVX2_H

#include <immintrin.h>
#include <stdint.h>

/* 8 bf16 values as f32 (a bf16 is the high half of an f32). */
static inline __m256 load_bf16_avx2(const uint16_t *p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p)), 16));
}

#define VW 8
#define vf __m256
#define V_ZERO() _mm256_setzero_ps()
#define V_SET1(s) _mm256_set1_ps(s)
#define V_LOADU(p) _mm256_loadu_ps(p)
#define V_STOREU(p, v) _mm256_storeu_ps((p), (v))
#define V_FMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define V_ADD(a, b) _mm256_add_ps((a), (b))
#define V_SUB(a, b) _mm256_sub_ps((a), (b))
#define V_MUL(a, b) _mm256_mul_ps((a), (b))
#define V_MAX(a, b) _mm256_max_ps((a), (b))
#define V_LOAD_F16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define V_LOAD_BF16(p) load_bf16_avx2(p)
#define V_LOAD_I8(p) _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p))))
#define S_F16(h) _cvtsh_ss(h)

#endif
