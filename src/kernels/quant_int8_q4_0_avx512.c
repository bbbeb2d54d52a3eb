/*
 * Decode (one to three rows of x) of Q4_0 weights with int8 activations on
 * AVX512-VNNI: four 32-value blocks per zmm. The weight nibbles are the
 * unsigned operand of vpdpbusd as they are stored: the 16 code bytes of
 * each of four blocks fill one 128-bit lane each, their low nibbles
 * (values 0..15 of every block) go against one activation vector and
 * their high nibbles (values 16..31) against a second, so no byte is
 * moved within a lane. The activations are laid out once per call to
 * match: per group of four blocks, the codes of values 0..15 of each
 * block, then of values 16..31, the int32 start -8 * S of every lane (S
 * the sum of the lane's 8 activation codes: Q4_0's offset 8 folded in)
 * and the block scale dx spread over the block's lanes. Per group and
 * weight row: two vpdpbusd, one conversion, one multiply of the four f16
 * block scales (one vpermw and one vcvtph2ps from a single load) by dx
 * and one FMA.
 *
 * The integer math is quant_int8_matmul_ref's (quant_int8.h): the same
 * codes and scales dx (quant_int8_quantize_row_avx512, bit-equal to the C
 * quantiser), exact int32 block sums; the float rounding differs by a few
 * ulps of sum |x w| (f32 lanes, then a horizontal sum).
 *
 * Compiled with the AVX-512 flags plus -mavx512vnni, called only through
 * the avx512-vnni kern_ops (quant_int8.c). Does not do prefill (four or
 * more rows: the panel kernels of quant_int8_body.h) nor other dtypes.
 */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/quant_blocks.h"
#include "kernels/quant_int8.h"
#include "tensor.h"

/* Each tile prefetches the next tile's rows (contiguous), a group's share
 * per group, into L2 (prefetcht2). One thread over 0.9 GB of 2048-wide
 * Q4_0 rows in a throwaway driver (GB/s; a plain read of the same bytes
 * 12.5-13.3): this 9.7-10.6, prefetcht0 8.7, prefetchnta 6.7, three tiles
 * ahead 9.7, 2 rows per tile 9.4, rows in memory order without prefetch
 * 8.2, one line in two or four prefetched 6.6-7.7. The knobs may be set on
 * the command line for such experiments; the shipped values are these
 * defaults. */
#ifndef Q40_NR
#define Q40_NR 4 /* weight rows per tile */
#endif
#ifndef Q40_PF_HINT
#define Q40_PF_HINT _MM_HINT_T2
#endif
#ifndef Q40_PF_TILES
#define Q40_PF_TILES 1 /* tiles ahead that are prefetched (0: none) */
#endif
#define Q40_MAX_M 3 /* rows of x this kernel takes */

#define AI static inline __attribute__((always_inline))

/* The activation layout of one group (four blocks, 128 values). */
typedef struct q40_group {
    int8_t lo[64], hi[64];
    int32_t st[16];
    float dx[16];
} q40_group;

_Static_assert(sizeof(q40_group) == 256, "q40_group: 2 bytes per value, 64-byte aligned members");

/* Rows of x into ng groups per row; blocks past nb are zero (codes, start
 * values and scales), so they add nothing. */
static void q40_quantize(const float *x, int M, int K, q40_group *g, int ng) {
    const int nb = K / QK;
    const __m512i ones = _mm512_set1_epi8(1);
    for (int m = 0; m < M; m++)
        for (int gi = 0; gi < ng; gi++) {
            q40_group *G = g + (size_t)m * ng + gi;
            _Alignas(64) int8_t q[4 * QK];
            float d[4];
            for (int i = 0; i < 4; i++) {
                const int b = 4 * gi + i;
                if (b < nb) quant_int8_quantize_row_avx512(x + (size_t)m * K + (size_t)b * QK, QK, q + QK * i, &d[i]);
                else memset(q + QK * i, 0, QK), d[i] = 0.0f;
                memcpy(G->lo + 16 * i, q + QK * i, 16);
                memcpy(G->hi + 16 * i, q + QK * i + 16, 16);
            }
            const __m512i lo = _mm512_load_si512(G->lo), hi = _mm512_load_si512(G->hi);
            const __m512i s = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, lo), ones, hi);
            _mm512_store_si512(G->st, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(s, 3)));
            _mm512_store_ps(G->dx, _mm512_setr_ps(d[0], d[0], d[0], d[0], d[1], d[1], d[1], d[1], d[2], d[2], d[2],
                                                  d[2], d[3], d[3], d[3], d[3]));
        }
}

/* The code bytes of four consecutive blocks at p, one block per 128-bit
 * lane. */
AI __m512i q40_codes(const unsigned char *p) {
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(p + 2)));
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + 2 + sizeof(blk_q4_0))), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + 2 + 2 * sizeof(blk_q4_0))), 2);
    return _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + 2 + 3 * sizeof(blk_q4_0))), 3);
}

/* The f16 scales of the four blocks at p, each over its block's 4 lanes:
 * words 0, 9, 18, 27 of the group's first 64 bytes (72 in the group). */
AI __m512 q40_scales(const unsigned char *p) {
    const __m512i idx = _mm512_setr_epi32(0x00000000, 0x00000000, 0x00090009, 0x00090009, 0x00120012, 0x00120012,
                                          0x001b001b, 0x001b001b, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i h = _mm512_permutexvar_epi16(idx, _mm512_loadu_si512((const void *)p));
    return _mm512_cvtph_ps(_mm512_castsi512_si256(h));
}

/* The same for a last group of nb4 < 4 blocks, read without going past
 * them (the other lanes zero). */
AI void q40_partial(const unsigned char *p, int nb4, __m512i *codes, __m512 *sc) {
    _Alignas(64) unsigned char c[64] = {0};
    _Alignas(64) float s[16] = {0};
    for (int i = 0; i < nb4; i++) {
        const unsigned char *b = p + (size_t)i * sizeof(blk_q4_0);
        memcpy(c + 16 * i, b + 2, 16);
        uint16_t h;
        memcpy(&h, b, 2);
        const float f = _cvtsh_ss(h);
        for (int l = 0; l < 4; l++) s[4 * i + l] = f;
    }
    *codes = _mm512_load_si512(c);
    *sc = _mm512_load_ps(s);
}

AI __m512 q40_dot(__m512 acc, __m512i codes, __m512 sc, const q40_group *G, __m512i xl, __m512i xh, __m512 dx) {
    const __m512i m4 = _mm512_set1_epi8(15);
    const __m512i lo = _mm512_and_si512(codes, m4), hi = _mm512_and_si512(_mm512_srli_epi16(codes, 4), m4);
    const __m512i st = _mm512_load_si512(G->st);
    const __m512i r = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(st, lo, xl), hi, xh);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(r), _mm512_mul_ps(sc, dx), acc);
}

/* Weight rows [n, n + nr) against one row of x (groups g); nr
 * compile-time. The next tile's bytes (nr rows, contiguous) are
 * prefetched a group's share at a time when pf. */
AI void q40_tile(const q40_group *g, int nb, const unsigned char *w, size_t rb, int nr, int n, const float *bias,
                 float *y, int pf) {
    const unsigned char *wr = w + (size_t)n * rb, *next = wr + (size_t)Q40_PF_TILES * nr * rb;
    const int full = nb / 4, rest = nb % 4;
    const size_t gstep = (size_t)nr * 4 * sizeof(blk_q4_0);
    __m512 acc[Q40_NR];
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++) acc[r] = _mm512_setzero_ps();
    for (int gi = 0; gi < full; gi++) {
        if (pf)
            for (size_t o = ((size_t)gi * gstep) & ~(size_t)63; o < (size_t)(gi + 1) * gstep; o += 64)
                _mm_prefetch((const char *)(next + o), Q40_PF_HINT);
        const q40_group *G = g + gi;
        const __m512i xl = _mm512_load_si512(G->lo), xh = _mm512_load_si512(G->hi);
        const __m512 dx = _mm512_load_ps(G->dx);
#pragma GCC unroll 4
        for (int r = 0; r < nr; r++) {
            const unsigned char *p = wr + (size_t)r * rb + (size_t)gi * 4 * sizeof(blk_q4_0);
            acc[r] = q40_dot(acc[r], q40_codes(p), q40_scales(p), G, xl, xh, dx);
        }
    }
    if (rest) {
        const q40_group *G = g + full;
        const __m512i xl = _mm512_load_si512(G->lo), xh = _mm512_load_si512(G->hi);
        const __m512 dx = _mm512_load_ps(G->dx);
        for (int r = 0; r < nr; r++) {
            __m512i codes;
            __m512 sc;
            q40_partial(wr + (size_t)r * rb + (size_t)full * 4 * sizeof(blk_q4_0), rest, &codes, &sc);
            acc[r] = q40_dot(acc[r], codes, sc, G, xl, xh, dx);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < nr; r++) y[n + r] = _mm512_reduce_add_ps(acc[r]) + (bias ? bias[n + r] : 0.0f);
}

size_t quant_int8_q4_0_decode_bytes_avx512(int M, const kern_matrix *w) {
    if (w->dtype != KVLM_Q4_0 || M < 1 || M > Q40_MAX_M || w->cols % QK != 0) return 0;
    return (size_t)M * ((w->cols / QK + 3) / 4) * sizeof(q40_group);
}

void quant_int8_q4_0_decode_prep_avx512(const float *x, int M, const kern_matrix *w, int m0, int m1, void *buf) {
    (void)M;
    const int ng = (w->cols / QK + 3) / 4;
    q40_quantize(x + (size_t)m0 * w->cols, m1 - m0, w->cols, (q40_group *)buf + (size_t)m0 * ng, ng);
}

void quant_int8_q4_0_decode_rows_prep_avx512(const void *buf, int M, const kern_matrix *w, int n0, int n1,
                                             const float *bias, float *y, int ldy) {
    const int K = w->cols, nb = K / QK, ng = (nb + 3) / 4;
    const size_t rb = dtype_row_bytes(KVLM_Q4_0, K, NULL);
    const q40_group *g = buf;
    const unsigned char *wd = w->data;
    int n = n0;
    for (; n + Q40_NR <= n1; n += Q40_NR) {
        const int pf = Q40_PF_TILES > 0 && n + (1 + Q40_PF_TILES) * Q40_NR <= n1;
        for (int m = 0; m < M; m++)
            q40_tile(g + (size_t)m * ng, nb, wd, rb, Q40_NR, n, bias, y + (size_t)m * ldy, pf && m == 0);
    }
    for (; n < n1; n++)
        for (int m = 0; m < M; m++) q40_tile(g + (size_t)m * ng, nb, wd, rb, 1, n, bias, y + (size_t)m * ldy, 0);
}

int quant_int8_q4_0_decode_avx512(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias,
                                  float *y, int ldy) {
    const size_t need = quant_int8_q4_0_decode_bytes_avx512(M, w);
    if (!need) return 0;
    _Alignas(64) unsigned char stack[24576];
    q40_group *g = need <= sizeof stack ? (q40_group *)stack : aligned_alloc(64, need);
    if (!g) return 0;
    /* the first tile's rows are requested before the activations are
     * quantised, so their fetch overlaps that work */
    const size_t rb = dtype_row_bytes(KVLM_Q4_0, w->cols, NULL);
    const size_t first = (size_t)(n1 - n0 < Q40_NR ? n1 - n0 : Q40_NR) * rb;
    for (size_t o = 0; o < first; o += 64)
        _mm_prefetch((const char *)((const unsigned char *)w->data + (size_t)n0 * rb + o), _MM_HINT_T2);
    quant_int8_q4_0_decode_prep_avx512(x, M, w, 0, M, g);
    quant_int8_q4_0_decode_rows_prep_avx512(g, M, w, n0, n1, bias, y, ldy);
    if ((unsigned char *)g != stack) free(g);
    return 1;
}
