/*
 * AVX-512 matmul against block-quantised weights (16-lane zmm: a Q8_0 /
 * Q4_0 block is two vectors). Compiled with the AVX-512 flags and only
 * called through kern_ops_avx512, after kern_cpu_supports(KVLM_ISA_AVX512).
 * Bodies in quant_simd.h (Q8_0, Q4_0) and quant_wide.h (the other block
 * types).
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#define VW 16
#define vf __m512
#define V_ZERO() _mm512_setzero_ps()
#define V_SET1(s) _mm512_set1_ps(s)
#define V_LOADU(p) _mm512_loadu_ps(p)
#define V_MUL(a, b) _mm512_mul_ps((a), (b))
#define V_FMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define V_REDUCE(v) _mm512_reduce_add_ps(v)

static inline __m512 q8_chunk_avx512(const unsigned char *q, int v) {
    __m128i b = _mm_loadu_si128((const __m128i *)(q + 16 * v));
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
}

/* Chunk 0: low nibbles of the 16 code bytes (values 0..15); chunk 1: high
 * nibbles (values 16..31). The bytes are widened to dwords once (the two
 * chunks share the load and the widening after inlining). */
static inline __m512 q4_chunk_avx512(const unsigned char *q, int v) {
    __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)q));
    b = v ? _mm512_srli_epi32(b, 4) : _mm512_and_si512(b, _mm512_set1_epi32(15));
    return _mm512_cvtepi32_ps(b);
}

static inline uint16_t q_half(const void *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}
#define V_SCALE(p) _mm512_cvtph_ps(_mm256_set1_epi16((short)q_half(p)))
#define V_ADD(a, b) _mm512_add_ps((a), (b))
#define Q8_CHUNK(q, v) q8_chunk_avx512((q), (v))
#define Q4_CHUNK(q, v) q4_chunk_avx512((q), (v))
#define MR_MAX 4
#define NR_MAX 4
#define NR1 8
#define QNAME(n) n##_avx512

#include "kernels/quant_simd.h"

/* Integer lanes for quant_wide.h. */
#define vi __m512i
#define VI_U8(p) _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p)))
#define VI_SET1(i) _mm512_set1_epi32(i)
#define VI_IOTA() _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
#define VI_AND(a, b) _mm512_and_si512((a), (b))
#define VI_OR(a, b) _mm512_or_si512((a), (b))
#define VI_ADD(a, b) _mm512_add_epi32((a), (b))
#define VI_SUB(a, b) _mm512_sub_epi32((a), (b))
#define VI_SRLI(a, n) _mm512_srli_epi32((a), (n))
#define VI_SLLI(a, n) _mm512_slli_epi32((a), (n))
#define VI_SRLN(a, n) _mm512_srl_epi32((a), _mm_cvtsi32_si128(n))
#define VI_SRLV(a, b) _mm512_srlv_epi32((a), (b))
#define VI_TO_F(a) _mm512_cvtepi32_ps(a)
#define V_LUT16(i, t) _mm512_permutexvar_ps((i), _mm512_loadu_ps(t))
#define V_STOREU(p, v) _mm512_storeu_ps((p), (v))
#define B_LOAD(p) _mm_loadu_si128((const __m128i *)(p))
#define VI_FROM_B(b) _mm512_cvtepu8_epi32(b)
#define VI_I8(p) _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(p)))
#define V_HALVES(a, b) _mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(b), 1)

#include "kernels/quant_wide.h"
