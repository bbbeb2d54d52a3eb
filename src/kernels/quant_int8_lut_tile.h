/*
 * The weight side of the AVX512-VNNI MXFP4 / IQ4_XS table kernel
 * (quant_int8_lut_avx512.c describes the layout and the arithmetic),
 * included twice: with LUT_VBMI 0 (AVX512-VNNI only) and LUT_VBMI 1
 * (quant_int8_lut_vbmi_avx512.c, also AVX512-VBMI): there a full MXFP4
 * group comes from two overlapping 64-byte loads, its codes and scale
 * bytes picked by vpermt2b / vpermb and the scales made by vscalefps
 * (2^(e - 128), exact for every byte), and the 4-bit lookups are vpermb
 * (no masking); one row of x (decode) of MXFP4 there forms the product
 * scales from the exponents with integer adds when they fit
 * (lut_tile_mx1). Both forms give the same bits. LUT_ROWS names the rows
 * function. Not here: the activations' preparation, the dispatch.
 */
#ifndef KVLM_KERNELS_QUANT_INT8_LUT_TILE_H
#define KVLM_KERNELS_QUANT_INT8_LUT_TILE_H

#include <immintrin.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/quant_blocks.h"
#include "kernels/quant_int8.h"
#include "kernels/quant_int8_group_avx512.h"
#include "tensor.h"

#define AI static inline __attribute__((always_inline))
#define LUT_NR 4 /* weight rows per tile */
#define LUT_MR 4 /* rows of x per tile */
#ifndef LUT_PF_ROWS
/* A tile prefetches the weight rows this far ahead (two tiles), a group's
 * share per group: from DRAM on 2 threads (bench/quant_bench 2816 2816,
 * Zen 4, 3 alternated runs) MXFP4 decode read 77-85% of the measured
 * bandwidth against 63-72% with the next tile (4), IQ4_XS 60-65% against
 * 51-56%; 12 rows ahead was no better than 8. */
#define LUT_PF_ROWS 8
#endif

typedef int8_group lut_group;

_Static_assert(sizeof(lut_group) == 256, "lut_group: 2 bytes per value, 64-byte aligned members");

/* 2^(e - 128) for every E8M0 byte (e8m0_half_to_f32), for the gathers. */
static float e8m0_tab[256];
static void e8m0_tab_init(void) {
    for (int e = 0; e < 256; e++) e8m0_tab[e] = e8m0_half_to_f32((uint8_t)e);
}

/* The table of type t plus 128, in every 128-bit lane. */
AI __m512i lut_table(kvlm_dtype t) {
    const int8_t *lv = t == KVLM_MXFP4 ? mxfp4_levels : iq4nl_levels;
    unsigned char b[16];
    for (int i = 0; i < 16; i++) b[i] = (unsigned char)(lv[i] + 128);
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)b));
}

#if LUT_VBMI
/* Byte i of 128-bit lane L of a group's codes: byte 17 L + 1 + i of its
 * four MXFP4 blocks, from the load at the group's start (index < 64) or
 * the one 4 bytes on (64 + offset - 4). */
AI __m512i lut_code_index(void) {
    unsigned char ix[64];
    for (int p = 0; p < 64; p++) {
        const int at = 17 * (p / 16) + 1 + p % 16;
        ix[p] = (unsigned char)(at < 64 ? at : 64 + at - 4);
    }
    return _mm512_loadu_si512((const void *)ix);
}

/* The scale byte of block L (offset 17 L) into the low byte of every
 * dword of lane L (the other bytes masked to zero). */
AI __m512i lut_scale_index(void) {
    unsigned char ix[64];
    for (int p = 0; p < 64; p++) ix[p] = (unsigned char)(17 * (p / 16));
    return _mm512_loadu_si512((const void *)ix);
}
#endif

/* Group g of a weight row: code bytes of its (up to) four sub-blocks, one
 * per 128-bit lane, and their scales spread over their lanes. nsb: the
 * sub-blocks present (4 but in an MXFP4 row's last group). */
AI void lut_load(kvlm_dtype t, const unsigned char *row, int g, int nsb, __m512i *codes, __m512 *sc) {
    const __m512i spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    if (t == KVLM_IQ4_XS) {
        const unsigned char *b = row + (size_t)(g / 2) * sizeof(blk_iq4_xs);
        const int h = g & 1;
        *codes = _mm512_loadu_si512((const void *)(b + offsetof(blk_iq4_xs, qs) + 64 * h));
        uint16_t sh;
        memcpy(&sh, b + offsetof(blk_iq4_xs, scales_h), 2);
        const uint16_t sl = (uint16_t)(b[offsetof(blk_iq4_xs, scales_l) + 2 * h] |
                                       b[offsetof(blk_iq4_xs, scales_l) + 2 * h + 1] << 8);
        /* sub-block 4h + i: low nibble i of sl, bits 2i, 2i + 1 of sh >> 8h */
        const __m128i lo = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(sl), _mm_setr_epi32(0, 4, 8, 12)),
                                         _mm_set1_epi32(15));
        const __m128i hi = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(sh >> (8 * h)), _mm_setr_epi32(0, 2, 4, 6)),
                                         _mm_set1_epi32(3));
        const __m128i s = _mm_sub_epi32(_mm_or_si128(lo, _mm_slli_epi32(hi, 4)), _mm_set1_epi32(32));
        uint16_t dh;
        memcpy(&dh, b, 2);
        const __m128 a = _mm_mul_ps(_mm_cvtepi32_ps(s), _mm_set1_ps(_cvtsh_ss(dh)));
        *sc = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(a));
        return;
    }
    const unsigned char *b = row + (size_t)g * 4 * sizeof(blk_mxfp4);
#if LUT_VBMI
    if (nsb == 4) { /* the group's 68 bytes in two overlapping loads, the codes and scales picked by index */
        const __m512i A = _mm512_loadu_si512((const void *)b), B = _mm512_loadu_si512((const void *)(b + 4));
        *codes = _mm512_permutex2var_epi8(A, lut_code_index(), B);
        const __m512i e = _mm512_maskz_permutexvar_epi8(0x1111111111111111ull, lut_scale_index(), A);
        *sc = _mm512_scalef_ps(_mm512_set1_ps(1.0f), _mm512_cvtepi32_ps(_mm512_sub_epi32(e, _mm512_set1_epi32(128))));
        return;
    }
#endif
    const size_t s1 = nsb > 1 ? sizeof(blk_mxfp4) : 0, s2 = nsb > 2 ? 2 * sizeof(blk_mxfp4) : 0,
                 s3 = nsb > 3 ? 3 * sizeof(blk_mxfp4) : 0;
    __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(b + 1)));
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(b + s1 + 1)), 1);
    v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(b + s2 + 1)), 2);
    *codes = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(b + s3 + 1)), 3);
    const __m128 a = _mm_setr_ps(e8m0_tab[b[0]], e8m0_tab[b[s1]], e8m0_tab[b[s2]], e8m0_tab[b[s3]]);
    *sc = _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(a));
}

AI float lut_hsum(__m512 v) { return _mm512_reduce_add_ps(v); }

/* An mr x nr tile (compile-time) of outputs: rows m.. of x (groups at a,
 * ng per row), weight rows n.. (row bytes rb). next: the next tile's first
 * weight row (prefetched a group's share per group), or NULL. */
AI void lut_tile(kvlm_dtype t, const lut_group *a, int ng, int nbk, const unsigned char *w, size_t rb, int mr, int nr,
                 int m, int n, const float *bias, float *y, int ldy, const unsigned char *next) {
    const __m512i tab = lut_table(t), m4 = _mm512_set1_epi8(15);
    __m512 acc[LUT_MR][LUT_NR];
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
        for (int j = 0; j < nr; j++) acc[i][j] = _mm512_setzero_ps();
    const unsigned char *wr = w + (size_t)n * rb;
    const size_t gbytes = rb / (size_t)ng + 1;
    for (int g = 0; g < ng; g++) {
        if (next)
            for (size_t o = 0; o < (size_t)nr * gbytes; o += 64)
                _mm_prefetch((const char *)(next + (size_t)g * nr * gbytes + o), _MM_HINT_T2);
        const int nsb = t == KVLM_MXFP4 && g == ng - 1 && nbk % 4 ? nbk % 4 : 4;
        __m512i lo[LUT_NR], hi[LUT_NR];
        __m512 sc[LUT_NR];
#pragma GCC unroll 4
        for (int j = 0; j < nr; j++) {
            __m512i c;
            lut_load(t, wr + (size_t)j * rb, g, nsb, &c, &sc[j]);
#if LUT_VBMI /* vpermb reads 6 index bits; the table repeats every 16 bytes */
            (void)m4;
            lo[j] = _mm512_permutexvar_epi8(c, tab);
            hi[j] = _mm512_permutexvar_epi8(_mm512_srli_epi16(c, 4), tab);
#else
            lo[j] = _mm512_shuffle_epi8(tab, _mm512_and_si512(c, m4));
            hi[j] = _mm512_shuffle_epi8(tab, _mm512_and_si512(_mm512_srli_epi16(c, 4), m4));
#endif
        }
#pragma GCC unroll 4
        for (int i = 0; i < mr; i++) {
            const lut_group *G = a + (size_t)(m + i) * ng + g;
            const __m512i xl = _mm512_load_si512(G->lo), xh = _mm512_load_si512(G->hi);
            const __m512i st = _mm512_load_si512(G->st);
            const __m512 dx = _mm512_load_ps(G->dx);
#pragma GCC unroll 4
            for (int j = 0; j < nr; j++) {
                const __m512i r = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(st, lo[j], xl), hi[j], xh);
                acc[i][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(r), _mm512_mul_ps(sc[j], dx), acc[i][j]);
            }
        }
    }
#pragma GCC unroll 4
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
        for (int j = 0; j < nr; j++)
            y[(size_t)(m + i) * ldy + n + j] = lut_hsum(acc[i][j]) + (bias ? bias[n + j] : 0.0f);
}

#if LUT_VBMI
static _Thread_local unsigned long lut_mx1_calls; /* calls that took lut_tile_mx1 */

/* One group's exact integer sums of one row of x against the codes c (the
 * vpermb lookups of lut_tile and the two vpdpbusd from the start st). */
AI __m512i lut_dot1(__m512i c, __m512i tab, __m512i st, __m512i xl, __m512i xh) {
    const __m512i lo = _mm512_permutexvar_epi8(c, tab), hi = _mm512_permutexvar_epi8(_mm512_srli_epi16(c, 4), tab);
    return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(st, lo, xl), hi, xh);
}

/* Decode (one row of x) of MXFP4 through the scales' exponents. A block's
 * product scale dx * 2^(e - 128) is dx's bits plus (e - 128) << 23: one
 * shift and one integer add where lut_tile spends a subtraction, a
 * conversion, a vscalefps and a multiply, and the same float whenever the
 * product is a normal float, which is what lut_tile's multiply rounds to
 * then. lut_rows_t takes this form only when that holds for every block
 * (lut_exps_fit); the short last group takes lut_tile's steps. So the bits
 * are lut_tile's. */
AI void lut_tile_mx1(const lut_group *a, int ng, int nbk, const unsigned char *w, size_t rb, int nr, int n,
                     const float *bias, float *y, const unsigned char *next) {
    const __m512i tab = lut_table(KVLM_MXFP4), ci = lut_code_index(), si = lut_scale_index();
    const __m512i off = _mm512_set1_epi32(128 << 23);
    __m512 acc[LUT_NR];
#pragma GCC unroll 4
    for (int j = 0; j < nr; j++) acc[j] = _mm512_setzero_ps();
    const unsigned char *wr = w + (size_t)n * rb;
    const size_t gbytes = rb / (size_t)ng + 1;
    const int whole = nbk / 4;
    for (int g = 0; g < whole; g++) {
        if (next)
            for (size_t o = 0; o < (size_t)nr * gbytes; o += 64)
                _mm_prefetch((const char *)(next + (size_t)g * nr * gbytes + o), _MM_HINT_T2);
        const lut_group *G = a + g;
        const __m512i xl = _mm512_load_si512(G->lo), xh = _mm512_load_si512(G->hi);
        const __m512i st = _mm512_load_si512(G->st);
        const __m512i D = _mm512_sub_epi32(_mm512_load_si512(G->dx), off);
#pragma GCC unroll 4
        for (int j = 0; j < nr; j++) {
            const unsigned char *b = wr + (size_t)j * rb + (size_t)g * 4 * sizeof(blk_mxfp4);
            const __m512i A = _mm512_loadu_si512((const void *)b), B = _mm512_loadu_si512((const void *)(b + 4));
            const __m512i c = _mm512_permutex2var_epi8(A, ci, B);
            const __m512i e = _mm512_maskz_permutexvar_epi8(0x1111111111111111ull, si, A);
            const __m512 sc = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_slli_epi32(e, 23), D));
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lut_dot1(c, tab, st, xl, xh)), sc, acc[j]);
        }
    }
    if (whole < ng) { /* the short last group */
        const lut_group *G = a + whole;
        const __m512i xl = _mm512_load_si512(G->lo), xh = _mm512_load_si512(G->hi);
        const __m512i st = _mm512_load_si512(G->st);
        const __m512 dx = _mm512_load_ps(G->dx);
#pragma GCC unroll 4
        for (int j = 0; j < nr; j++) {
            __m512i c;
            __m512 sc;
            lut_load(KVLM_MXFP4, wr + (size_t)j * rb, whole, nbk % 4, &c, &sc);
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(lut_dot1(c, tab, st, xl, xh)), _mm512_mul_ps(sc, dx), acc[j]);
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < nr; j++) y[n + j] = lut_hsum(acc[j]) + (bias ? bias[n + j] : 0.0f);
}

/* Whether every product scale dx * 2^(e - 128) of the whole groups of one
 * row of x against w is a normal float, so lut_tile_mx1 may form it from
 * the exponents: each dx normal and below 2 (its exponent field f at most
 * 127, so f + e - 128 stays below 255 for every scale byte e < 255), and
 * the smallest f plus the matrix's smallest scale byte (kern_matrix
 * e8m0_min, 0 when not known) at least 129, so f + e - 128 >= 1. */
static int lut_exps_fit(const lut_group *a, int nbk, const kern_matrix *w) {
    const __m512 lo = _mm512_set1_ps(0x1p-126f), hi = _mm512_set1_ps(2.0f);
    __m512i least = _mm512_set1_epi32(INT32_MAX);
    for (int g = 0; g < nbk / 4; g++) {
        const __m512 dx = _mm512_load_ps(a[g].dx);
        if ((__mmask16)(_mm512_cmp_ps_mask(dx, lo, _CMP_GE_OQ) & _mm512_cmp_ps_mask(dx, hi, _CMP_LT_OQ)) != 0xFFFF)
            return 0;
        least = _mm512_min_epi32(least, _mm512_castps_si512(dx));
    }
    return nbk >= 4 && (_mm512_reduce_min_epi32(least) >> 23) + w->e8m0_min >= 129;
}
#endif

/* All rows of x against nr (compile-time) weight rows at n. */
AI void lut_rows_nr(kvlm_dtype t, const lut_group *a, int M, int ng, int nbk, const unsigned char *w, size_t rb,
                    int nr, int n, const float *bias, float *y, int ldy, const unsigned char *next, int exps) {
    int m = 0;
#if LUT_VBMI
    if (exps) {
        lut_tile_mx1(a, ng, nbk, w, rb, nr, n, bias, y, next);
        return;
    }
#else
    (void)exps;
#endif
    for (; m + LUT_MR <= M; m += LUT_MR) lut_tile(t, a, ng, nbk, w, rb, LUT_MR, nr, m, n, bias, y, ldy, m ? NULL : next);
    switch (M - m) {
    case 3: lut_tile(t, a, ng, nbk, w, rb, 3, nr, m, n, bias, y, ldy, m ? NULL : next); break;
    case 2: lut_tile(t, a, ng, nbk, w, rb, 2, nr, m, n, bias, y, ldy, m ? NULL : next); break;
    case 1: lut_tile(t, a, ng, nbk, w, rb, 1, nr, m, n, bias, y, ldy, m ? NULL : next); break;
    default: break;
    }
}

static void lut_rows_t(kvlm_dtype t, const lut_group *a, int M, const kern_matrix *w, int n0, int n1,
                       const float *bias, float *y, int ldy) {
    const int K = w->cols, nbk = K / QK, ng = (nbk + 3) / 4;
    const size_t rb = dtype_row_bytes(t, K, NULL);
    const unsigned char *wd = w->data;
#if LUT_VBMI
    const int exps = t == KVLM_MXFP4 && M == 1 && lut_exps_fit(a, nbk, w); /* lut_tile_mx1 */
    lut_mx1_calls += exps;
#else
    const int exps = 0;
#endif
    int n = n0;
    for (; n + LUT_NR <= n1; n += LUT_NR) {
        const unsigned char *next = n + LUT_NR + LUT_PF_ROWS <= n1 ? wd + (size_t)(n + LUT_PF_ROWS) * rb : NULL;
        lut_rows_nr(t, a, M, ng, nbk, wd, rb, LUT_NR, n, bias, y, ldy, next, exps);
    }
    for (; n < n1; n++) lut_rows_nr(t, a, M, ng, nbk, wd, rb, 1, n, bias, y, ldy, NULL, exps);
}

static pthread_once_t tab_once = PTHREAD_ONCE_INIT;

void LUT_ROWS(const void *buf, int M, const kern_matrix *w, int n0, int n1, const float *bias, float *y, int ldy) {
    pthread_once(&tab_once, e8m0_tab_init);
    if (w->dtype == KVLM_MXFP4) lut_rows_t(KVLM_MXFP4, buf, M, w, n0, n1, bias, y, ldy);
    else lut_rows_t(KVLM_IQ4_XS, buf, M, w, n0, n1, bias, y, ldy);
}

#endif
