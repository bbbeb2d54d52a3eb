/*
 * AVX-VNNI instance of quant_int8.h (ymm: one 32-value block per vector),
 * for CPUs with AVX-VNNI but without AVX-512. Compiled with the AVX2 flags
 * plus -mavxvnni and only called through the avx2-vnni kern_ops
 * (quant_int8.c), after kern_cpu_supports(KVLM_ISA_AVX2_VNNI).
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/quant_int8.h"

#define VW 8
#define BPV 1
#define vf __m256
#define vq __m256i
#define V_ZERO() _mm256_setzero_ps()
#define V_MUL(a, b) _mm256_mul_ps((a), (b))
#define V_FMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define V_FNMA(a, b, c) _mm256_fnmadd_ps((a), (b), (c))
#define V_FMS(a, b, c) _mm256_fmsub_ps((a), (b), (c))
#define V_LOADU(p) _mm256_loadu_ps(p)
#define V_STOREU(p, v) _mm256_storeu_ps((p), (v))
#define V_SET1(s) _mm256_set1_ps(s)

static inline float hsum_i8_avx2(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
#define V_REDUCE(v) hsum_i8_avx2(v)
#define Q_LOAD(p) _mm256_loadu_si256((const __m256i *)(p))
#define Q_DP(acc, u, s) _mm256_dpbusd_avx_epi32((acc), (u), (s))
#define Q_STORE(p, v) _mm256_storeu_si256((__m256i *)(p), (v))
#define Q_SUB(a, b) _mm256_sub_epi32((a), (b))
#define Q_SET8(c) _mm256_set1_epi8(c)
#define Q_ZERO() _mm256_setzero_si256()
#define Q_TO_F(a) _mm256_cvtepi32_ps(a)
#define Q_HALVES(a, b) ((void)(b), _mm256_set1_ps(a))
#define MR_MAX 2
#define NR_MAX 3
#define NR1 8
/* The f16 scale of a block broadcast and converted as a vector. */
static inline __m256 q_scale_f16(const unsigned char *b0) {
    uint16_t h;
    memcpy(&h, b0, 2);
    return _mm256_cvtph_ps(_mm_set1_epi16((short)h));
}
#define Q_HALVES_F16(b0, b1) ((void)(b1), q_scale_f16(b0))
#define V_ADD(a, b) _mm256_add_ps((a), (b))
#define Q_SET32(i) _mm256_set1_epi32(i)
#define PR_MR 4
#define Q_GATHER(p, vi) _mm256_i32gather_epi32((const int *)(const void *)(p), (vi), 1)
#define Q_XOR(a, b) _mm256_xor_si256((a), (b))
#define Q_AND(a, b) _mm256_and_si256((a), (b))
#define Q_SRLI16(a, n) _mm256_srl_epi16((a), _mm_cvtsi32_si128(n))
#define Q_OR(a, b) _mm256_or_si256((a), (b))
#define Q_SLLI16(a, n) _mm256_sll_epi16((a), _mm_cvtsi32_si128(n))
#define Q_SRL32(a, n) _mm256_srl_epi32((a), _mm_cvtsi32_si128(n))
#define Q_MULLO32(a, b) _mm256_mullo_epi32((a), (b))
#define PR_NV 1
#define PR_MIN_ROWS 16
#define PR_CHUNK_BYTES (1536 * 1024)
#define QNAME(n) n##_avx2

#define Q_W8(b0, b1) ((void)(b1), q_w8(b0))
static inline __m256i q_w8(const unsigned char *b0) { return _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)((b0) + 2)), _mm256_set1_epi8((char)0x80)); }

/* The 16 nibble bytes at q0 in both 128-bit lanes, the second shifted
 * right by 4. */
static inline __m256i q_w4(const unsigned char *q0) {
    const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)q0));
    return _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(15));
}
#define Q_W4(b0, b1) ((void)(b1), q_w4(b0))

/* 16 in byte i where bit i of the 32 high bits at h0 is set: byte i / 8
 * of them spread over 8 bytes, each tested against its own bit. */
static inline __m256i q_hb(const unsigned char *h0) {
    uint32_t a;
    memcpy(&a, h0, 4);
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int)a),
                                               _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                                                2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(16));
}
#define Q_HB(h0, h1) ((void)(h1), q_hb(h0))

static inline float hmax_i8_avx2(__m256 v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* quant_int8_quantize_row's codes and scales, 8 lanes at a time; the four
 * int32 vectors are packed to bytes with saturation and put back in order
 * (the packs work within 128-bit lanes). */
static inline void quantize_x_row(const float *x, int nb, int8_t *q, float *d) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int b = 0; b < nb; b++) {
        __m256 v[4], m = _mm256_setzero_ps();
        for (int c = 0; c < 4; c++) {
            v[c] = _mm256_loadu_ps(x + 32 * b + 8 * c);
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[c]));
        }
        const float amax = hmax_i8_avx2(m);
        d[b] = amax / 127.0f;
        const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
        __m256i i[4];
        for (int c = 0; c < 4; c++) i[c] = _mm256_cvtps_epi32(_mm256_mul_ps(v[c], id));
        const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i[0], i[1]), _mm256_packs_epi32(i[2], i[3]));
        _mm256_storeu_si256((__m256i *)(q + 32 * b),
                            _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    }
}

#include "kernels/quant_int8_body.h"
