/*
 * Decode (one to three rows of x) of Q4_0 weights in the packed layout of
 * q4_0_packed.h (kern_matrix .packed) on AVX512-VNNI. A tile group (4
 * weight rows x 4 blocks, 288 bytes) is four vectors whose 32-bit lanes
 * are the 16 (row, block) pairs, so against one row of x it costs 4 loads,
 * 8 nibble operations and 8 vpdpbusd with activations broadcast from 16
 * bytes, then one conversion, scale multiply and FMA for all four rows:
 * about 20 vector instructions per 512 weights (one row of x takes the
 * high nibbles with one mask, not a shift and a mask: 4 fewer), where the row-major kernel
 * (quant_int8_q4_0_tile.h) spends about 40. Each lane ends with one
 * block's exact int32 sum; a row's 4 lanes are added at the end.
 *
 * The integer math is quant_int8_matmul_ref's (the same activation codes
 * and scales dx from quant_int8_quantize_row_avx512, exact block sums with
 * Q4_0's offset 8 folded into the start value -8 * sum of the block's
 * codes); the float rounding differs from the reference, and from the
 * row-major kernel, by a few ulps of sum |x w| (each block's sum is one
 * float product here, 4 lanes there). Several rows of x share each weight
 * load. A row's result does not depend on the range asked for: a tile cut
 * by the range is computed whole and only the asked rows are stored.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/q4_0_packed.h"
#include "kernels/quant_int8.h"
#include "tensor.h"

#define AI static inline __attribute__((always_inline))

#define QP_MAX_M 3
/* Bytes ahead of each tile's stream requested into L2, at least: 8 KB
 * streamed the 1B model's 695 MB step fastest of 1-16 KB in a throwaway
 * driver (docs/performance.md, "Packed Q4_0 copies"); the distance is the
 * bytes of the tiles read side by side when those are more (the same
 * place in the next tiles: 1B decode 1.09-1.10x, GPT-2 0.99-1.05x, in
 * one process alternated, the same section). */
#define QP_PREFETCH 8192

/* The activations of one group (4 blocks) of one row of x: x[j] holds
 * values 4 j .. 4 j + 3 of each block b at bytes 4 b .. 4 b + 3 (against
 * the low nibbles of vector j), x[4 + j] values 16 + 4 j .. 19 + 4 j (the
 * high nibbles); st[b] = -8 * (sum of block b's codes), dx[b] its scale.
 * Blocks past the matrix's are zero. */
typedef struct qp_group {
    int8_t x[8][16];
    int32_t st[4];
    float dx[4];
} qp_group;

_Static_assert(sizeof(qp_group) == 160, "qp_group: 160 bytes");

size_t quant_int8_q4_0_packed_bytes_avx512(int M, const kern_matrix *w) {
    return (size_t)M * ((w->cols / QK + 3) / 4) * sizeof(qp_group);
}

void quant_int8_q4_0_packed_prep_avx512(const float *x, int M, const kern_matrix *w, int m0, int m1, void *buf) {
    (void)M;
    const int K = w->cols, nb = K / QK, ng = (nb + 3) / 4;
    /* dword b * 8 + j of a group's codes (block b, bytes 4 j ..) to lane
     * 4 j + b of x[0..3] (first vector) and x[4..7] (second) */
    const __m512i lo_idx = _mm512_setr_epi32(0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27);
    const __m512i hi_idx = _mm512_add_epi32(lo_idx, _mm512_set1_epi32(4));
    const __m512i ones = _mm512_set1_epi8(1);
    qp_group *G = (qp_group *)buf + (size_t)m0 * ng;
    for (int m = m0; m < m1; m++)
        for (int g = 0; g < ng; g++, G++) {
            _Alignas(64) int8_t q[4 * QK];
            for (int b = 0; b < 4; b++) {
                if (4 * g + b < nb)
                    quant_int8_quantize_row_avx512(x + (size_t)m * K + (size_t)(4 * g + b) * QK, QK, q + QK * b,
                                                   &G->dx[b]);
                else memset(q + QK * b, 0, QK), G->dx[b] = 0.0f;
            }
            const __m512i a = _mm512_load_si512(q), c = _mm512_load_si512(q + 64);
            const __m512i xl = _mm512_permutex2var_epi32(a, lo_idx, c), xh = _mm512_permutex2var_epi32(a, hi_idx, c);
            _mm512_storeu_si512(G->x[0], xl);
            _mm512_storeu_si512(G->x[4], xh);
            /* lane 4 j + b: block b's codes 4 j .. 4 j + 3 and 16 + 4 j ..; the 4 j summed per b */
            const __m512i s = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, xl), ones, xh);
            const __m256i s2 = _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
            const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s2), _mm256_extracti128_si256(s2, 1));
            _mm_storeu_si128((__m128i *)G->st, _mm_sub_epi32(_mm_setzero_si128(), _mm_slli_epi32(s4, 3)));
        }
}

/* The sums of each 128-bit lane's 4 floats (one weight row each). */
AI __m128 qp_rows4(__m512 a) {
    a = _mm512_add_ps(a, _mm512_permute_ps(a, 0x4e));
    a = _mm512_add_ps(a, _mm512_permute_ps(a, 0xb1));
    return _mm512_castps512_ps128(
        _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), a));
}

/* nt consecutive tiles from tile t against M rows of activations (row m's
 * groups at G + m * ng); M and nt compile-time. The four sums of tile i
 * against row m go to out[(m * nt + i) * 4 ..]. */
AI void qp_tiles(const qp_group *G, int M, int ng, const unsigned char *pk, int t, int nt, float *out) {
    /* the same place in the next nt tiles (the nt streams read now are
     * adjacent, so a shorter distance lands in lines already on their way),
     * at least QP_PREFETCH ahead */
    const size_t next = (size_t)nt * ng * Q4P_GROUP_BYTES, pfd = next > QP_PREFETCH ? next : QP_PREFETCH;
    const __m512i m4 = _mm512_set1_epi8(15);
    const unsigned char *base = pk + (size_t)t * ng * Q4P_GROUP_BYTES;
    __m512 acc[QP_MAX_M][4];
#pragma GCC unroll 3
    for (int m = 0; m < M; m++)
#pragma GCC unroll 4
        for (int i = 0; i < nt; i++) acc[m][i] = _mm512_setzero_ps();
    for (int g = 0; g < ng; g++) {
#pragma GCC unroll 4
        for (int i = 0; i < nt; i++) {
            const unsigned char *q = base + ((size_t)i * ng + g) * Q4P_GROUP_BYTES + pfd;
            for (int o = 0; o < Q4P_GROUP_BYTES; o += 64) _mm_prefetch((const char *)(q + o), _MM_HINT_T2);
        }
        /* r: the low nibbles' sums from the start values; rh (one row of x):
         * the high nibbles' sums, taken in place (c & 0xf0, 16 x the code:
         * one operation fewer per vector than a shift and a mask; the
         * products stay within vpdpbusd's 16-bit intermediates) and divided
         * by 16 once per group, exactly. With 2-3 rows of x the extra
         * accumulators cost more than they save (measured), so there the
         * high nibbles are shifted down and summed into r. */
        __m512i r[QP_MAX_M][4], rh[QP_MAX_M][4];
#pragma GCC unroll 3
        for (int m = 0; m < M; m++) {
            const __m512i st = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)G[(size_t)m * ng + g].st));
#pragma GCC unroll 4
            for (int i = 0; i < nt; i++) r[m][i] = st, rh[m][i] = _mm512_setzero_si512();
        }
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
#pragma GCC unroll 4
            for (int i = 0; i < nt; i++) {
                const __m512i c = _mm512_loadu_si512(base + ((size_t)i * ng + g) * Q4P_GROUP_BYTES + 64 * j);
                const __m512i lo = _mm512_and_si512(c, m4);
                const __m512i hi = M == 1 ? _mm512_andnot_si512(m4, c) : _mm512_and_si512(_mm512_srli_epi16(c, 4), m4);
#pragma GCC unroll 3
                for (int m = 0; m < M; m++) {
                    const qp_group *A = G + (size_t)m * ng + g;
                    const __m512i xl = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)A->x[j]));
                    const __m512i xh = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)A->x[4 + j]));
                    r[m][i] = _mm512_dpbusd_epi32(r[m][i], lo, xl);
                    if (M == 1) rh[m][i] = _mm512_dpbusd_epi32(rh[m][i], hi, xh);
                    else r[m][i] = _mm512_dpbusd_epi32(r[m][i], hi, xh);
                }
            }
#pragma GCC unroll 4
        for (int i = 0; i < nt; i++) {
            const __m256i h = _mm256_loadu_si256((const __m256i *)(base + ((size_t)i * ng + g) * Q4P_GROUP_BYTES + 256));
            const __m512 sc = _mm512_cvtph_ps(h);
#pragma GCC unroll 3
            for (int m = 0; m < M; m++) {
                const __m512 dx = _mm512_broadcast_f32x4(_mm_loadu_ps(G[(size_t)m * ng + g].dx));
                const __m512i sum = M == 1 ? _mm512_add_epi32(r[m][i], _mm512_srai_epi32(rh[m][i], 4)) : r[m][i];
                acc[m][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(sc, dx), acc[m][i]);
            }
        }
    }
#pragma GCC unroll 3
    for (int m = 0; m < M; m++)
#pragma GCC unroll 4
        for (int i = 0; i < nt; i++) _mm_storeu_ps(out + (m * nt + i) * 4, qp_rows4(acc[m][i]));
}

/* Tiles per step of the row loop for M rows of x, as many as keep the
 * 2 M nt accumulators in registers. */
#define QP_STEP(M) ((M) == 3 ? 2 : 4)

/* Rows [n0, n1) for M (compile-time) rows of x. */
AI void qp_rows(const qp_group *G, int M, int ng, const unsigned char *pk, int n0, int n1, const float *bias, float *y,
                int ldy) {
    const int step = QP_STEP(M);
    float sums[QP_MAX_M * 4 * 4];
    for (int t = n0 / 4; 4 * t < n1;) {
        const int nt = 4 * t >= n0 && 4 * (t + step) <= n1 ? step : 1;
        if (nt == step) qp_tiles(G, M, ng, pk, t, step, sums);
        else qp_tiles(G, M, ng, pk, t, 1, sums);
        for (int m = 0; m < M; m++)
            for (int n = 4 * t > n0 ? 4 * t : n0; n < 4 * (t + nt) && n < n1; n++)
                y[(size_t)m * ldy + n] = sums[(m * nt + (n / 4 - t)) * 4 + n % 4] + (bias ? bias[n] : 0.0f);
        t += nt;
    }
}

void quant_int8_q4_0_packed_rows_avx512(const void *buf, int M, const kern_matrix *w, int n0, int n1,
                                        const float *bias, float *y, int ldy) {
    const int ng = (w->cols / QK + 3) / 4;
    const qp_group *G = buf;
    const unsigned char *pk = w->packed;
    switch (M) {
    case 1: qp_rows(G, 1, ng, pk, n0, n1, bias, y, ldy); break;
    case 2: qp_rows(G, 2, ng, pk, n0, n1, bias, y, ldy); break;
    case 3: qp_rows(G, 3, ng, pk, n0, n1, bias, y, ldy); break;
    default: break;
    }
}
