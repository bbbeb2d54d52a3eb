/*
 * Decode (one to 15 rows of x) of Q4_K, Q5_K and Q6_K weights with int8
 * activations: the weight blocks are read straight from the file's layout
 * (no panel), KD_NR weight rows at a time share each loaded activation
 * vector, each super-block's codes, scales and minimums are unpacked once
 * for a tile of up to KD_MR rows of x (with each output's float operations
 * those of one row, so a row's bits do not depend on the batch), and
 * every 32-value block of products is one vpdpbusd (4 unsigned
 * weight codes x 4 signed activation codes per int32 lane) on ymm vectors;
 * with AVX-512 (KD_ZMM) two blocks share one zmm vpdpbusd, one conversion
 * and one FMA, their lane scales spread by one permute.
 * Written once and instantiated by quant_int8_decode_avx512.c (EVEX
 * encoding, zmm and ymm, 32 registers) and
 * quant_int8_decode_avx2.c (AVX-VNNI); include only from those files after
 * defining KD_NR (weight rows per tile), KD_MR (rows of x per tile, 1 to
 * 4) and KDNAME(n) (name mangling).
 *
 * The integer math is quant_int8_matmul_ref's (quant_int8.h): the same
 * activation codes and per-32-value f32 scales dx (the ISA's
 * quant_int8_quantize_row_*, bit-equal to the C quantiser), exact int32
 * block sums. Per 256-value super-block and weight row:
 *  - Q4_K / Q5_K: the 8 sub-block scales and mins are unpacked from their
 *    12 bytes with 32-bit word operations (with AVX-512, for 4 weight rows
 *    at once in one zmm, kd_heads_k4); the lane scales d * sc * dx_j are
 *    stored for broadcast (zmm: kept in a register and permuted), and the
 *    min term dmin * m_j * dx_j * sum(q_j) is one FMA of 8 lanes (sum(q_j)
 *    precomputed per activation block). With AVX-512 the codes are read 64
 *    bytes at a time, whose low and high nibbles are two zmm of two blocks
 *    each; the activation codes are stored in that block order.
 *  - Q6_K: the constant code offset 32 is folded into the start value of
 *    each vpdpbusd (-32 * the lane's sum of 4 codes, precomputed), and the
 *    16 sub-block scales d * scales[s] * dx are spread to lanes with one
 *    permute per block.
 * Sums run in f32 over 8 lanes per weight row, then one horizontal sum; the
 * float rounding differs from the reference (which sums in double) by a
 * few ulps of sum |x w|.
 *
 * Weights must be whole 256-value super-blocks (K % 256 == 0, the K-quant
 * row contract); the caller checks the dtype. The activation buffer
 * (640 bytes per super-block and row of x) is on the stack when small,
 * else allocated; if that fails the call returns 0 and the caller runs the
 * f32-activation kernels.
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/quant_blocks.h"

#define KAI static inline __attribute__((always_inline))

/* Each tile prefetches the next tile's blocks (one super-block of every
 * row per step): 1B Q6_K decode 5.8 -> 10.2 tokens/s against none
 * (docs/performance.md, "K-quant decode"). prefetcht2 rather than
 * prefetcht0: 3-5% more bytes per second from DRAM at 2 threads in a
 * throwaway driver (the same section). The KD_* knobs may be set on the command line for such
 * experiments; the shipped values are these defaults. */
#ifndef KD_PREFETCH
#define KD_PREFETCH 1
#endif
#ifndef KD_PF_HINT
#define KD_PF_HINT _MM_HINT_T2
#endif
#ifndef KD_ZMM
#ifdef __AVX512F__
#define KD_ZMM 1
#else
#define KD_ZMM 0
#endif
#endif
#ifndef KD_PF_TILES
#define KD_PF_TILES 1
#endif

#ifdef __AVX512VNNI__
#define KD_DP(acc, u, s) _mm256_dpbusd_epi32((acc), (u), (s))
#else
#define KD_DP(acc, u, s) _mm256_dpbusd_avx_epi32((acc), (u), (s))
#endif

/* One super-block of one row of x: codes, the Q6_K start values, dx per
 * 16-value sub-block (Q6_K), dx per block and dx * sum of the block's
 * codes (Q4_K / Q5_K). */
typedef struct kd_act {
    int8_t q[256];
    int32_t neg[64];
    float dx16[16];
    float dx8[8];
    float sq8[8];
} kd_act;

KAI float kd_half(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

KAI float kd_hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

KAI int kd_hsum_i(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

/* The activations of M rows of x (K values each) into nsb super-blocks per
 * row. */
static void KDNAME(kd_quantize)(const float *x, int M, int K, kvlm_dtype t, kd_act *a) {
    const int nsb = K / QK_K;
    const __m256i ones = _mm256_set1_epi8(1), c32 = _mm256_set1_epi8(32);
    for (int m = 0; m < M; m++)
        for (int s = 0; s < nsb; s++) {
            kd_act *A = a + (size_t)m * nsb + s;
            KDNAME(quant_int8_quantize_row)(x + (size_t)m * K + (size_t)s * QK_K, QK_K, A->q, A->dx8);
            for (int j = 0; j < 8; j++) {
                const __m256i q = _mm256_load_si256((const __m256i *)(A->q + 32 * j));
                if (t == KVLM_Q6_K) {
                    _mm256_store_si256((__m256i *)(A->neg + 8 * j),
                                       _mm256_sub_epi32(_mm256_setzero_si256(), KD_DP(_mm256_setzero_si256(), c32, q)));
                    A->dx16[2 * j] = A->dx16[2 * j + 1] = A->dx8[j];
                } else {
                    A->sq8[j] = A->dx8[j] * (float)kd_hsum_i(KD_DP(_mm256_setzero_si256(), ones, q));
                }
            }
#if KD_ZMM
            /* Q4_K / Q5_K: codes in block order 0 2 1 3 4 6 5 7, the order
             * of the nibbles in 64 bytes of a weight block (kd_tile) */
            if (t != KVLM_Q6_K)
                for (int j = 1; j < 8; j += 4) {
                    int8_t tmp[32];
                    memcpy(tmp, A->q + 32 * j, 32);
                    memcpy(A->q + 32 * j, A->q + 32 * (j + 1), 32);
                    memcpy(A->q + 32 * (j + 1), tmp, 32);
                }
#endif
        }
}

/* The 6-bit scales (low 8 bytes) and mins (high 8 bytes) of a Q4_K / Q5_K
 * block's 12 scale bytes (tensor.h, blk_q4_k). */
KAI void kd_scales_k4(const unsigned char *p, uint64_t *sc, uint64_t *mn) {
    uint32_t u0, u1, u2;
    memcpy(&u0, p, 4), memcpy(&u1, p + 4, 4), memcpy(&u2, p + 8, 4);
    const uint32_t lo6 = 0x3f3f3f3fu, lo4 = 0x0f0f0f0fu, lo2 = 0x03030303u;
    const uint32_t s47 = (u2 & lo4) | ((u0 >> 6) & lo2) << 4, m47 = ((u2 >> 4) & lo4) | ((u1 >> 6) & lo2) << 4;
    *sc = (uint64_t)(u0 & lo6) | (uint64_t)s47 << 32;
    *mn = (uint64_t)(u1 & lo6) | (uint64_t)m47 << 32;
}

#if KD_ZMM
/* 128-bit lane r (compile-time after unrolling) of v. */
KAI __m128i kd_lane(__m512i v, int r) {
    switch (r) {
    case 0: return _mm512_castsi512_si128(v);
    case 1: return _mm512_extracti32x4_epi32(v, 1);
    case 2: return _mm512_extracti32x4_epi32(v, 2);
    default: return _mm512_extracti32x4_epi32(v, 3);
    }
}

/* The heads (d, dmin, 12 scale bytes: the first 16 bytes) of nr <= 4 Q4_K
 * / Q5_K blocks rb bytes apart, unpacked side by side in one zmm: lane r
 * holds row r's 8 scales then 8 mins (kd_scales_k4's bytes, with the same
 * word operations on 4 rows at once). For each row, daz[r]'s low 8 lanes
 * become the lane scales sc_j * (d * dx_j) and accmz[r]'s high 8 lanes
 * accumulate m_j * (dmin * dx_j * sum(q_j)) by one FMA, the products and
 * rounding of the scalar form (dxsq: dx8 then sq8 of the activation). */
KAI void kd_heads_k4(const unsigned char *b, size_t rb, int nr, __m512 *s16, __m256 *ddp) {
    __m512i h = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)b));
    if (nr > 1) h = _mm512_inserti32x4(h, _mm_loadu_si128((const __m128i *)(b + rb)), 1);
    if (nr > 2) h = _mm512_inserti32x4(h, _mm_loadu_si128((const __m128i *)(b + 2 * rb)), 2);
    if (nr > 3) h = _mm512_inserti32x4(h, _mm_loadu_si128((const __m128i *)(b + 3 * rb)), 3);
    /* words per lane: d | dmin << 16, u0, u1, u2 */
    const __m512i a = _mm512_shuffle_epi32(h, _MM_SHUFFLE(3, 2, 3, 1)); /* u0, u2, u1, u2 */
    const __m512i c = _mm512_shuffle_epi32(h, _MM_SHUFFLE(2, 2, 1, 1)); /* u0, u0, u1, u1 */
    const int lo6 = 0x3f3f3f3f, lo4 = 0x0f0f0f0f, lo2 = 0x03030303;
    const __m512i low = _mm512_and_si512(_mm512_srlv_epi32(a, _mm512_set4_epi32(4, 0, 0, 0)),
                                         _mm512_set4_epi32(lo4, lo6, lo4, lo6));
    const __m512i high =
        _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(c, 6), _mm512_set4_epi32(lo2, 0, lo2, 0)), 4);
    const __m512i sm = _mm512_or_si512(low, high);
    /* d, dmin of rows 0..3 as 8 floats */
    const __m512i words0 = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    *ddp = _mm256_cvtph_ps(_mm512_castsi512_si128(_mm512_permutexvar_epi32(words0, h)));
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++) s16[r] = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(kd_lane(sm, r)));
}

/* The lane scales daz and min sums accmz of row r (0 .. 3) of a
 * kd_heads_k4 group against one row of x (dxsq: its dx8 then sq8), from
 * that call's s16[r] and dd. */
KAI void kd_heads_x(__m512 s16, __m256 dd, int r, __m512 dxsq, __m512 *daz, __m512 *accmz) {
    const __m512i half = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512 f =
        _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_add_epi32(half, _mm512_set1_epi32(2 * r)), _mm512_castps256_ps512(dd)),
                      dxsq);
    *daz = _mm512_mul_ps(s16, f);
    *accmz = _mm512_mask3_fmadd_ps(s16, f, *accmz, 0xff00);
}
#endif

KAI __m256 kd_u8x8_to_f(uint64_t v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)v))); }

/* Bit b of each byte of qh moved to bit 4 (other bits 0). */
KAI __m256i kd_q5_bit(__m256i qh, int b) {
    const __m256i m = _mm256_set1_epi8(0x10);
    if (b < 4) return _mm256_and_si256(_mm256_slli_epi16(qh, 4 - b), m);
    if (b == 4) return _mm256_and_si256(qh, m);
    return _mm256_and_si256(_mm256_srli_epi16(qh, b - 4), m);
}

/* Bits 2c, 2c + 1 of each byte of qh moved to bits 4, 5. */
KAI __m256i kd_q6_bits(__m256i qh, int c) {
    const __m256i m = _mm256_set1_epi8(0x30);
    if (c == 0) return _mm256_and_si256(_mm256_slli_epi16(qh, 4), m);
    if (c == 1) return _mm256_and_si256(_mm256_slli_epi16(qh, 2), m);
    if (c == 2) return _mm256_and_si256(qh, m);
    return _mm256_and_si256(_mm256_srli_epi16(qh, 2), m);
}

/* Rows [n, n + nr) of the weights against rows [0, mr) of x (xa, nsb
 * super-blocks apart; outputs ldy apart in y); mr and nr compile-time.
 * Each weight block's codes and heads are unpacked once for the mr rows
 * of x; per output the float operations are those of mr = 1, so a row of
 * x gets the same bits in a batch as alone. */
KAI void kd_tile(const kd_act *xa, int nsb, const unsigned char *w, size_t rb, kvlm_dtype t, int mr, int nr, int n,
                 const float *bias, float *y, int ldy, int pf) {
    const size_t bb = dtype_block_bytes(t);
    const unsigned char *wr = w + (size_t)n * rb;
    const unsigned char *next = wr + (size_t)KD_PF_TILES * nr * rb;
    __m256 acc[KD_MR][KD_NR], accm[KD_MR][KD_NR];
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++) acc[i][r] = _mm256_setzero_ps(), accm[i][r] = _mm256_setzero_ps();
#if KD_ZMM
    __m512 accz[KD_MR][KD_NR], accmz[KD_MR][KD_NR];
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++) accz[i][r] = _mm512_setzero_ps(), accmz[i][r] = _mm512_setzero_ps();
#endif
    const __m256i m4 = _mm256_set1_epi8(15);
    (void)m4; /* the ymm paths only */
    for (int s = 0; s < nsb; s++) {
        if (pf)
#pragma GCC unroll 8
            for (int r = 0; r < nr; r++)
                for (size_t o = 0; o < bb; o += 64) _mm_prefetch((const char *)(next + (size_t)r * rb + s * bb + o), KD_PF_HINT);
        if (t == KVLM_Q6_K) {
#if KD_ZMM
            /* Sub-blocks c and c + 1 of a half in one zmm: ql's 64 bytes
             * give both low nibbles (c = 0, 1) or both high nibbles
             * (c = 2, 3); qh broadcast to both halves, each half shifted
             * so its 2 bits land on bits 4, 5; the 16 lane scales spread
             * from one zmm of the 16 sub-block scales with one permute. */
            __m512 a16[KD_MR][KD_NR];
#pragma GCC unroll 8
            for (int r = 0; r < nr; r++) {
                const unsigned char *b = wr + (size_t)r * rb + (size_t)s * bb;
                const __m128i sc = _mm_loadu_si128((const __m128i *)(b + offsetof(blk_q6_k, scales)));
                const __m512 sd = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc)),
                                                _mm512_set1_ps(kd_half(b + offsetof(blk_q6_k, d))));
#pragma GCC unroll 4
                for (int i = 0; i < mr; i++) a16[i][r] = _mm512_mul_ps(sd, _mm512_load_ps(xa[(size_t)i * nsb + s].dx16));
            }
            const __m512i m4z = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30);
            const __m512i sl01 = _mm512_setr_epi64(4, 4, 4, 4, 2, 2, 2, 2), sr23 = _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2);
            const __m512i i4 = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++)
#pragma GCC unroll 2
                for (int c2 = 0; c2 < 2; c2++) {
                    const int j = 4 * h + 2 * c2;
                    const __m512i idx = _mm512_add_epi32(i4, _mm512_set1_epi32(8 * h + 4 * c2));
#pragma GCC unroll 8
                    for (int r = 0; r < nr; r++) {
                        const blk_q6_k *k = (const blk_q6_k *)(wr + (size_t)r * rb + (size_t)s * bb);
                        const __m512i ql = _mm512_loadu_si512((const void *)(k->ql + 64 * h));
                        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(k->qh + 32 * h)));
                        const __m512i lo = _mm512_and_si512(c2 ? _mm512_srli_epi16(ql, 4) : ql, m4z);
                        const __m512i hi = _mm512_and_si512(c2 ? _mm512_srlv_epi64(qh, sr23) : _mm512_sllv_epi64(qh, sl01), m30);
                        const __m512i code = _mm512_or_si512(lo, hi);
#pragma GCC unroll 4
                        for (int i = 0; i < mr; i++) {
                            const kd_act *A = xa + (size_t)i * nsb + s;
                            const __m512i xq = _mm512_load_si512((const void *)(A->q + 32 * j));
                            const __m512i st = _mm512_load_si512((const void *)(A->neg + 8 * j));
                            const __m512 sc = _mm512_permutexvar_ps(idx, a16[i][r]);
                            accz[i][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(st, code, xq)), sc, accz[i][r]);
                        }
                    }
                }
#else
            const __m256i i0 = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
            __m256 alo[KD_MR][KD_NR], ahi[KD_MR][KD_NR];
#pragma GCC unroll 8
            for (int r = 0; r < nr; r++) {
                const unsigned char *b = wr + (size_t)r * rb + (size_t)s * bb;
                const __m128i sc = _mm_loadu_si128((const __m128i *)(b + offsetof(blk_q6_k, scales)));
                const __m256 d = _mm256_set1_ps(kd_half(b + offsetof(blk_q6_k, d)));
                const __m256 slo = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc)), d);
                const __m256 shi = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8))), d);
#pragma GCC unroll 4
                for (int i = 0; i < mr; i++) {
                    const kd_act *A = xa + (size_t)i * nsb + s;
                    alo[i][r] = _mm256_mul_ps(slo, _mm256_load_ps(A->dx16));
                    ahi[i][r] = _mm256_mul_ps(shi, _mm256_load_ps(A->dx16 + 8));
                }
            }
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++)
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) {
                    const int j = 4 * h + c;
                    const __m256i idx = _mm256_add_epi32(i0, _mm256_set1_epi32(2 * c));
#pragma GCC unroll 8
                    for (int r = 0; r < nr; r++) {
                        const blk_q6_k *k = (const blk_q6_k *)(wr + (size_t)r * rb + (size_t)s * bb);
                        const __m256i ql = _mm256_loadu_si256((const __m256i *)(k->ql + 64 * h + 32 * (c & 1)));
                        const __m256i qh = _mm256_loadu_si256((const __m256i *)(k->qh + 32 * h));
                        const __m256i lo = _mm256_and_si256(c < 2 ? ql : _mm256_srli_epi16(ql, 4), m4);
                        const __m256i code = _mm256_or_si256(lo, kd_q6_bits(qh, c));
#pragma GCC unroll 4
                        for (int i = 0; i < mr; i++) {
                            const kd_act *A = xa + (size_t)i * nsb + s;
                            const __m256i xq = _mm256_load_si256((const __m256i *)(A->q + 32 * j));
                            const __m256i st = _mm256_load_si256((const __m256i *)(A->neg + 8 * j));
                            const __m256 sc = _mm256_permutevar8x32_ps(h ? ahi[i][r] : alo[i][r], idx);
                            acc[i][r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(KD_DP(st, code, xq)), sc, acc[i][r]);
                        }
                    }
                }
#endif
        } else {
#if KD_ZMM
            /* 64 code bytes (values 128P .. 128P + 127) per load: their low
             * nibbles are blocks 4P and 4P + 2, their high nibbles blocks
             * 4P + 1 and 4P + 3, two zmm of codes against activations
             * stored in that block order (kd_quantize); the lane scales
             * spread from daz with one permute per zmm. The heads of 4
             * rows are unpacked together (kd_heads_k4): one row at a time
             * in scalar words they cost as many instructions as the
             * products. */
            __m512 daz[KD_MR][KD_NR];
#pragma GCC unroll 2
            for (int g = 0; g < nr; g += 4) {
                const int ng = nr - g < 4 ? nr - g : 4;
                __m512 s16[4];
                __m256 dd;
                kd_heads_k4(wr + (size_t)g * rb + (size_t)s * bb, rb, ng, s16, &dd);
#pragma GCC unroll 4
                for (int i = 0; i < mr; i++) {
                    const __m512 dxsq = _mm512_load_ps(xa[(size_t)i * nsb + s].dx8); /* dx8, then sq8 */
#pragma GCC unroll 4
                    for (int r = 0; r < ng; r++) kd_heads_x(s16[r], dd, r, dxsq, &daz[i][g + r], &accmz[i][g + r]);
                }
            }
            const __m512i m4z = _mm512_set1_epi8(15), one = _mm512_set1_epi8(1);
            const __m512i blk_pair = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 2, 2, 2, 2);
#pragma GCC unroll 2
            for (int P = 0; P < 2; P++) {
                /* block ids of the two halves: 4P, 4P + 2 (low nibbles), 4P + 1, 4P + 3 */
                const __m512i ilo = _mm512_add_epi32(blk_pair, _mm512_set1_epi32(4 * P));
                const __m512i ihi = _mm512_add_epi32(blk_pair, _mm512_set1_epi32(4 * P + 1));
                /* Q5_K: bit j of qh[l] is the fifth bit of block j's value l */
                const __m512i hlo = _mm512_setr_epi64(4 * P, 4 * P, 4 * P, 4 * P, 4 * P + 2, 4 * P + 2, 4 * P + 2, 4 * P + 2);
                const __m512i hhi = _mm512_add_epi64(hlo, _mm512_set1_epi64(1));
#pragma GCC unroll 8
                for (int r = 0; r < nr; r++) {
                    const unsigned char *b = wr + (size_t)r * rb + (size_t)s * bb;
                    const unsigned char *qs = t == KVLM_Q4_K ? ((const blk_q4_k *)b)->qs : ((const blk_q5_k *)b)->qs;
                    const __m512i q = _mm512_loadu_si512((const void *)(qs + 64 * P));
                    __m512i clo = _mm512_and_si512(q, m4z), chi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4z);
                    if (t == KVLM_Q5_K) {
                        const __m512i qh =
                            _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)((const blk_q5_k *)b)->qh));
                        clo = _mm512_or_si512(clo, _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi64(qh, hlo), one), 4));
                        chi = _mm512_or_si512(chi, _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi64(qh, hhi), one), 4));
                    }
#pragma GCC unroll 4
                    for (int i = 0; i < mr; i++) {
                        const kd_act *A = xa + (size_t)i * nsb + s;
                        const __m512i xlo = _mm512_load_si512((const void *)(A->q + 128 * P));
                        const __m512i xhi = _mm512_load_si512((const void *)(A->q + 128 * P + 64));
                        accz[i][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), clo, xlo)),
                                                     _mm512_permutexvar_ps(ilo, daz[i][r]), accz[i][r]);
                        accz[i][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(_mm512_setzero_si512(), chi, xhi)),
                                                     _mm512_permutexvar_ps(ihi, daz[i][r]), accz[i][r]);
                    }
                }
            }
#else
            _Alignas(32) float da[KD_MR][KD_NR][8];
#pragma GCC unroll 8
            for (int r = 0; r < nr; r++) {
                const unsigned char *b = wr + (size_t)r * rb + (size_t)s * bb;
                uint64_t sc, mn;
                kd_scales_k4(b + 4, &sc, &mn);
                const __m256 d = _mm256_set1_ps(kd_half(b)), dmin = _mm256_set1_ps(kd_half(b + 2));
                const __m256 scf = kd_u8x8_to_f(sc), mnf = kd_u8x8_to_f(mn);
#pragma GCC unroll 4
                for (int i = 0; i < mr; i++) {
                    const kd_act *A = xa + (size_t)i * nsb + s;
                    _mm256_store_ps(da[i][r], _mm256_mul_ps(scf, _mm256_mul_ps(d, _mm256_load_ps(A->dx8))));
                    accm[i][r] = _mm256_fmadd_ps(mnf, _mm256_mul_ps(dmin, _mm256_load_ps(A->sq8)), accm[i][r]);
                }
            }
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++) {
#pragma GCC unroll 8
                for (int r = 0; r < nr; r++) {
                    const unsigned char *b = wr + (size_t)r * rb + (size_t)s * bb;
                    const unsigned char *qs = t == KVLM_Q4_K ? ((const blk_q4_k *)b)->qs : ((const blk_q5_k *)b)->qs;
                    const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * p));
                    __m256i c0 = _mm256_and_si256(q, m4), c1 = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                    if (t == KVLM_Q5_K) {
                        const __m256i qh = _mm256_loadu_si256((const __m256i *)((const blk_q5_k *)b)->qh);
                        c0 = _mm256_or_si256(c0, kd_q5_bit(qh, 2 * p));
                        c1 = _mm256_or_si256(c1, kd_q5_bit(qh, 2 * p + 1));
                    }
#pragma GCC unroll 4
                    for (int i = 0; i < mr; i++) {
                        const kd_act *A = xa + (size_t)i * nsb + s;
                        const __m256i x0 = _mm256_load_si256((const __m256i *)(A->q + 64 * p));
                        const __m256i x1 = _mm256_load_si256((const __m256i *)(A->q + 64 * p + 32));
                        const __m256 p0 = _mm256_cvtepi32_ps(KD_DP(_mm256_setzero_si256(), c0, x0));
                        const __m256 p1 = _mm256_cvtepi32_ps(KD_DP(_mm256_setzero_si256(), c1, x1));
                        acc[i][r] = _mm256_fmadd_ps(p0, _mm256_broadcast_ss(&da[i][r][2 * p]), acc[i][r]);
                        acc[i][r] = _mm256_fmadd_ps(p1, _mm256_broadcast_ss(&da[i][r][2 * p + 1]), acc[i][r]);
                    }
                }
            }
#endif
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int r = 0; r < nr; r++) {
#if KD_ZMM
            acc[i][r] = _mm256_add_ps(acc[i][r],
                                      _mm256_add_ps(_mm512_castps512_ps256(accz[i][r]), _mm512_extractf32x8_ps(accz[i][r], 1)));
            accm[i][r] = _mm512_extractf32x8_ps(accmz[i][r], 1);
#endif
            y[(size_t)i * ldy + n + r] = kd_hsum(_mm256_sub_ps(acc[i][r], accm[i][r])) + (bias ? bias[n + r] : 0.0f);
        }
}

/* kd_tile with mr (1 .. KD_MR) a run-time count made compile-time. */
KAI void kd_tile_r(const kd_act *xa, int nsb, const unsigned char *w, size_t rb, kvlm_dtype t, int mr, int nr, int n,
                   const float *bias, float *y, int ldy, int pf) {
    switch (mr) {
#if KD_MR >= 4
    case 4: kd_tile(xa, nsb, w, rb, t, 4, nr, n, bias, y, ldy, pf); break;
#endif
#if KD_MR >= 3
    case 3: kd_tile(xa, nsb, w, rb, t, 3, nr, n, bias, y, ldy, pf); break;
#endif
#if KD_MR >= 2
    case 2: kd_tile(xa, nsb, w, rb, t, 2, nr, n, bias, y, ldy, pf); break;
#endif
    default: kd_tile(xa, nsb, w, rb, t, 1, nr, n, bias, y, ldy, pf); break;
    }
}

/* The M rows of x in tiles of KD_MR (and one of the rest) over each tile
 * of KD_NR weight rows, which the first tile of x leaves in L1. */
KAI void kd_rows_t(const kd_act *a, int M, int nsb, const kern_matrix *w, int n0, int n1, const float *bias,
                   float *y, int ldy, kvlm_dtype t) {
    const size_t rb = dtype_row_bytes(t, w->cols, NULL);
    const unsigned char *wd = w->data;
    int n = n0;
    for (; n + KD_NR <= n1; n += KD_NR) {
        const int pf = KD_PREFETCH && n + (1 + KD_PF_TILES) * KD_NR <= n1;
        for (int m = 0; m < M; m += KD_MR)
            kd_tile_r(a + (size_t)m * nsb, nsb, wd, rb, t, M - m < KD_MR ? M - m : KD_MR, KD_NR, n, bias,
                      y + (size_t)m * ldy, ldy, pf && m == 0);
    }
    for (; n < n1; n++)
        for (int m = 0; m < M; m += KD_MR)
            kd_tile_r(a + (size_t)m * nsb, nsb, wd, rb, t, M - m < KD_MR ? M - m : KD_MR, 1, n, bias,
                      y + (size_t)m * ldy, ldy, 0);
}

size_t KDNAME(quant_int8_decode_bytes)(int M, const kern_matrix *w) {
    const kvlm_dtype t = w->dtype;
    if (t != KVLM_Q4_K && t != KVLM_Q5_K && t != KVLM_Q6_K) return 0;
    if (M < 1 || w->cols % QK_K != 0) return 0;
    return (size_t)M * (w->cols / QK_K) * sizeof(kd_act);
}

void KDNAME(quant_int8_decode_prep)(const float *x, int M, const kern_matrix *w, int m0, int m1, void *buf) {
    (void)M;
    const int nsb = w->cols / QK_K;
    KDNAME(kd_quantize)(x + (size_t)m0 * w->cols, m1 - m0, w->cols, w->dtype, (kd_act *)buf + (size_t)m0 * nsb);
}

void KDNAME(quant_int8_decode_rows_prep)(const void *buf, int M, const kern_matrix *w, int n0, int n1,
                                         const float *bias, float *y, int ldy) {
    const kd_act *a = buf;
    const int nsb = w->cols / QK_K;
    switch (w->dtype) {
    case KVLM_Q4_K: kd_rows_t(a, M, nsb, w, n0, n1, bias, y, ldy, KVLM_Q4_K); break;
    case KVLM_Q5_K: kd_rows_t(a, M, nsb, w, n0, n1, bias, y, ldy, KVLM_Q5_K); break;
    default: kd_rows_t(a, M, nsb, w, n0, n1, bias, y, ldy, KVLM_Q6_K); break;
    }
}

int KDNAME(quant_int8_decode_rows)(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias,
                                   float *y, int ldy) {
    const size_t need = KDNAME(quant_int8_decode_bytes)(M, w);
    if (!need) return 0;
    _Alignas(64) unsigned char stack[24576];
    kd_act *a = need <= sizeof stack ? (kd_act *)stack : aligned_alloc(64, (need + 63) & ~(size_t)63);
    if (!a) return 0;
    /* the first tile's blocks are requested before the activations are
     * quantised, so their fetch overlaps that work (a call's first tile
     * has no previous tile to prefetch it) */
    if (KD_PREFETCH) {
        const size_t rb = dtype_row_bytes(w->dtype, w->cols, NULL);
        const unsigned char *p0 = (const unsigned char *)w->data + (size_t)n0 * rb;
        const size_t len = (size_t)(n1 - n0 < KD_NR ? n1 - n0 : KD_NR) * rb;
        for (size_t o = 0; o < len; o += 64) _mm_prefetch((const char *)(p0 + o), KD_PF_HINT);
    }
    KDNAME(quant_int8_decode_prep)(x, M, w, 0, M, a);
    KDNAME(quant_int8_decode_rows_prep)(a, M, w, n0, n1, bias, y, ldy);
    if ((unsigned char *)a != stack) free(a);
    return 1;
}
