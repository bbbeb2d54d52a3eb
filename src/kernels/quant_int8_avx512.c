/*
 * AVX512-VNNI instance of quant_int8.h (zmm: two 32-value blocks per
 * vector). Compiled with the AVX-512 flags plus -mavx512vnni and only
 * called through the avx512-vnni kern_ops (quant_int8.c), after
 * kern_cpu_supports(KVLM_ISA_AVX512_VNNI).
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/quant_int8.h"

#define VW 16
#define BPV 2
#define vf __m512
#define vq __m512i
#define V_ZERO() _mm512_setzero_ps()
#define V_MUL(a, b) _mm512_mul_ps((a), (b))
#define V_FMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define V_FNMA(a, b, c) _mm512_fnmadd_ps((a), (b), (c))
#define V_FMS(a, b, c) _mm512_fmsub_ps((a), (b), (c))
#define V_LOADU(p) _mm512_loadu_ps(p)
#define V_STOREU(p, v) _mm512_storeu_ps((p), (v))
#define V_SET1(s) _mm512_set1_ps(s)
#define V_REDUCE(v) _mm512_reduce_add_ps(v)
#define Q_LOAD(p) _mm512_loadu_si512((const void *)(p))
#define Q_DP(acc, u, s) _mm512_dpbusd_epi32((acc), (u), (s))
#define Q_STORE(p, v) _mm512_storeu_si512((void *)(p), (v))
#define Q_SUB(a, b) _mm512_sub_epi32((a), (b))
#define Q_SET8(c) _mm512_set1_epi8(c)
#define Q_ZERO() _mm512_setzero_si512()
#define Q_TO_F(a) _mm512_cvtepi32_ps(a)
#define Q_HALVES(a, b) _mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(b), 1)
/* The f16 scales of two blocks, each broadcast over 8 halves of a 256-bit
 * vector and converted in one vcvtph2ps (b1 NULL: 0). */
static inline __m512 q_halves_f16(const unsigned char *b0, const unsigned char *b1) {
    uint16_t h0, h1 = 0;
    memcpy(&h0, b0, 2);
    if (b1) memcpy(&h1, b1, 2);
    return _mm512_cvtph_ps(_mm256_set_m128i(_mm_set1_epi16((short)h1), _mm_set1_epi16((short)h0)));
}
#define Q_HALVES_F16(b0, b1) q_halves_f16((b0), (b1))
#define MR_MAX 4
#define NR_MAX 4
#define NR1 8
#define V_ADD(a, b) _mm512_add_ps((a), (b))
#define Q_SET32(i) _mm512_set1_epi32(i)
#define PR_MR 8
#define Q_GATHER(p, vi) _mm512_i32gather_epi32((vi), (const void *)(p), 1)
#define Q_XOR(a, b) _mm512_xor_si512((a), (b))
#define Q_AND(a, b) _mm512_and_si512((a), (b))
#define Q_SRLI16(a, n) _mm512_srl_epi16((a), _mm_cvtsi32_si128(n))
#define Q_OR(a, b) _mm512_or_si512((a), (b))
#define Q_SLLI16(a, n) _mm512_sll_epi16((a), _mm_cvtsi32_si128(n))
#define Q_SRL32(a, n) _mm512_srl_epi32((a), _mm_cvtsi32_si128(n))
#define Q_MULLO32(a, b) _mm512_mullo_epi32((a), (b))
#define PR_NV 1
#define PR_MIN_ROWS 16
#define PR_CHUNK_BYTES (1536 * 1024)
#define QNAME(n) n##_avx512

static inline __m256i q_w8_half(const unsigned char *b) {
    return b ? _mm256_loadu_si256((const __m256i *)(b + 2)) : _mm256_setzero_si256();
}

static inline __m512i q_w8(const unsigned char *b0, const unsigned char *b1) {
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(q_w8_half(b0)), q_w8_half(b1), 1);
    return _mm512_xor_si512(v, _mm512_set1_epi8((char)0x80));
}
#define Q_W8(b0, b1) q_w8((b0), (b1))

/* The 16 nibble bytes at q0 (and q1) broadcast to two 128-bit lanes; the
 * second lane shifted right by 4 (the high nibbles, values 16..31). */
static inline __m512i q_w4(const unsigned char *q0, const unsigned char *q1) {
    const __m256i lo = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)q0));
    const __m256i hi = q1 ? _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)q1))
                          : _mm256_setzero_si256();
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
    const __m512i sh = _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4);
    return _mm512_and_si512(_mm512_srlv_epi64(v, sh), _mm512_set1_epi8(15));
}
#define Q_W4(b0, b1) q_w4((b0), (b1))

/* 16 in byte i where bit i of the 32 high bits at h0 (bytes 0..31) or h1
 * (32..63; NULL: none) is set: one masked move. */
static inline __m512i q_hb(const unsigned char *h0, const unsigned char *h1) {
    uint32_t a, b = 0;
    memcpy(&a, h0, 4);
    if (h1) memcpy(&b, h1, 4);
    return _mm512_maskz_mov_epi8((__mmask64)a | (__mmask64)b << 32, _mm512_set1_epi8(16));
}
#define Q_HB(h0, h1) q_hb((h0), (h1))

/* quant_int8_quantize_row's codes and scales, 16 lanes at a time. */
static inline void quantize_x_row(const float *x, int nb, int8_t *q, float *d) {
    for (int b = 0; b < nb; b++) {
        const __m512 v0 = _mm512_loadu_ps(x + 32 * b), v1 = _mm512_loadu_ps(x + 32 * b + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
        d[b] = amax / 127.0f;
        const __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
        _mm_storeu_si128((__m128i *)(q + 32 * b), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v0, id))));
        _mm_storeu_si128((__m128i *)(q + 32 * b + 16),
                         _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(_mm512_mul_ps(v1, id))));
    }
}

#include "kernels/quant_int8_body.h"
