/*
 * AVX2 + FMA + F16C matmul against block-quantised weights (8-lane ymm:
 * a Q8_0 / Q4_0 block is four vectors), for CPUs without AVX-512. Bodies
 * in quant_simd.h (Q8_0, Q4_0) and quant_wide.h (the other block types).
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define VW 8
#define vf __m256
#define V_ZERO() _mm256_setzero_ps()
#define V_SET1(s) _mm256_set1_ps(s)
#define V_LOADU(p) _mm256_loadu_ps(p)
#define V_MUL(a, b) _mm256_mul_ps((a), (b))
#define V_FMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))

static inline float hsum_q_avx2(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#define V_REDUCE(v) hsum_q_avx2(v)

static inline __m256 q8_chunk_avx2(const unsigned char *q, int v) {
    __m128i b = _mm_loadl_epi64((const __m128i *)(q + 8 * v));
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
}

/* Chunks 0, 1: low nibbles of code bytes 0..7, 8..15 (values 0..15);
 * chunks 2, 3: their high nibbles (values 16..31). */
static inline __m256 q4_chunk_avx2(const unsigned char *q, int v) {
    __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(q + 8 * (v & 1))));
    b = v >= 2 ? _mm256_srli_epi32(b, 4) : _mm256_and_si256(b, _mm256_set1_epi32(15));
    return _mm256_cvtepi32_ps(b);
}

static inline uint16_t q_half(const void *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}
#define V_SCALE(p) _mm256_cvtph_ps(_mm_set1_epi16((short)q_half(p)))
#define V_ADD(a, b) _mm256_add_ps((a), (b))
#define Q8_CHUNK(q, v) q8_chunk_avx2((q), (v))
#define Q4_CHUNK(q, v) q4_chunk_avx2((q), (v))
#define MR_MAX 2
#define NR_MAX 3
#define NR1 8
#define QNAME(n) n##_avx2

#include "kernels/quant_simd.h"

/* Integer lanes for quant_wide.h. */
#define vi __m256i
#define VI_U8(p) _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p)))
#define VI_SET1(i) _mm256_set1_epi32(i)
#define VI_IOTA() _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)
#define VI_AND(a, b) _mm256_and_si256((a), (b))
#define VI_OR(a, b) _mm256_or_si256((a), (b))
#define VI_ADD(a, b) _mm256_add_epi32((a), (b))
#define VI_SUB(a, b) _mm256_sub_epi32((a), (b))
#define VI_SRLI(a, n) _mm256_srli_epi32((a), (n))
#define VI_SLLI(a, n) _mm256_slli_epi32((a), (n))
#define VI_SRLN(a, n) _mm256_srl_epi32((a), _mm_cvtsi32_si128(n))
#define VI_SRLV(a, b) _mm256_srlv_epi32((a), (b))
#define VI_TO_F(a) _mm256_cvtepi32_ps(a)
/* 16-entry lookup from two 8-entry permutes, chosen by bit 3 of the index. */
static inline __m256 lut16_avx2(__m256i i, const float *t) {
    const __m256 lo = _mm256_permutevar8x32_ps(_mm256_loadu_ps(t), i);
    const __m256 hi = _mm256_permutevar8x32_ps(_mm256_loadu_ps(t + 8), i);
    return _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_cmpgt_epi32(i, _mm256_set1_epi32(7))));
}
#define V_LUT16(i, t) lut16_avx2((i), (t))
#define V_STOREU(p, v) _mm256_storeu_ps((p), (v))
#define B_LOAD(p) _mm_loadl_epi64((const __m128i *)(p))
#define VI_FROM_B(b) _mm256_cvtepu8_epi32(b)
#define VI_I8(p) _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p)))

#include "kernels/quant_wide.h"
