/*
 * The float-vector vocabulary the kernel bodies are written in
 * (simd_template.h, attn_tile_body.h), for AVX-512: 16 f32 lanes per
 * vector (VW), the arithmetic, and the loads that widen f16, bf16 and int8
 * values to f32 exactly. Include in a file compiled with the AVX-512
 * flags, before the body.
 */
#ifndef KVLM_VEC_F32_AVX512_H
#define KVLM_VEC_F32_AVX512_H

#include <immintrin.h>
#include <stdint.h>

/* 16 bf16 values as f32 (a bf16 is the high half of an f32). */
static inline __m512 load_bf16_avx512(const uint16_t *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

#define VW 16
#define vf __m512
#define V_ZERO() _mm512_setzero_ps()
#define V_SET1(s) _mm512_set1_ps(s)
#define V_LOADU(p) _mm512_loadu_ps(p)
#define V_STOREU(p, v) _mm512_storeu_ps((p), (v))
#define V_FMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define V_ADD(a, b) _mm512_add_ps((a), (b))
#define V_SUB(a, b) _mm512_sub_ps((a), (b))
#define V_MUL(a, b) _mm512_mul_ps((a), (b))
#define V_MAX(a, b) _mm512_max_ps((a), (b))
#define V_LOAD_F16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define V_LOAD_BF16(p) load_bf16_avx512(p)
#define V_LOAD_I8(p) _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p))))
#define S_F16(h) _cvtsh_ss(h)

#endif
