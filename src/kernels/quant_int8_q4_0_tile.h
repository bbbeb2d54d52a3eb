/*
 * The weight side of the AVX512-VNNI Q4_0 decode kernel
 * (quant_int8_q4_0_avx512.c, which holds the activation layout and the
 * entry points): the 4-row tiles over the groups of four blocks. Written
 * once, included by quant_int8_q4_0_avx512.c (Q40_VBMI 0: AVX512-VNNI
 * only) and quant_int8_q4_0_vbmi_avx512.c (Q40_VBMI 1: also AVX512-VBMI
 * and GFNI, which gather a group's codes with one byte permute and split
 * the high nibbles with one instruction: 2 instructions fewer per group
 * and row, 1.12-1.23x the weight bytes per second of the other from L2 on
 * AMD Zen 4, docs/performance.md). Both give the same bits: the same integer sums, converted,
 * scaled and added in the same order. Define Q40_VBMI and Q40_ROWS (the
 * name of the rows function) before including.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/quant_blocks.h"
#include "kernels/quant_int8.h"
#include "kernels/quant_int8_group_avx512.h"
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
typedef int8_group q40_group;

_Static_assert(sizeof(q40_group) == 256, "q40_group: 2 bytes per value, 64-byte aligned members");

/* The code bytes of four consecutive blocks at p, one block per 128-bit
 * lane. With AVX512-VBMI, one two-source byte permute of the group's
 * bytes [0, 64) and [8, 72) (block i's codes are bytes 18 i + 2 ..
 * 18 i + 17); without, a load per block. */
AI __m512i q40_codes(const unsigned char *p) {
#if Q40_VBMI
    static const unsigned char idx[64] __attribute__((aligned(64))) = {
        2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16, 17, 20,  21,  22,  23,  24,  25,
        26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 38, 39, 40, 41, 42, 43, 44,  45,  46,  47,  48,  49,
        50, 51, 52, 53, 56, 57, 58, 59, 60, 61, 62, 63, 120, 121, 122, 123, 124, 125, 126, 127};
    return _mm512_permutex2var_epi8(_mm512_loadu_si512((const void *)p), _mm512_load_si512((const void *)idx),
                                    _mm512_loadu_si512((const void *)(p + 8)));
#else
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(p + 2)));
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + 2 + sizeof(blk_q4_0))), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + 2 + 2 * sizeof(blk_q4_0))), 2);
    return _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + 2 + 3 * sizeof(blk_q4_0))), 3);
#endif
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
#if Q40_VBMI /* each byte shifted right by 4 as one affine transform over GF(2) */
    const __m512i hi = _mm512_gf2p8affine_epi64_epi8(codes, _mm512_set1_epi64(0x1020408000000000LL), 0);
#else
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(codes, 4), m4);
#endif
    const __m512i lo = _mm512_and_si512(codes, m4);
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

/* Rows [n0, n1) of w against the M rows of activations in buf (the layout
 * quant_int8_q4_0_decode_prep_avx512 writes). */
void Q40_ROWS(const void *buf, int M, const kern_matrix *w, int n0, int n1, const float *bias, float *y, int ldy) {
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
