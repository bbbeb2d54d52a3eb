/*
 * SIMD matmul against the block types that have no hand-written widening
 * path in quant_simd.h (Q4_1, Q5_0, Q5_1, IQ4_NL and the 256-value K-quants
 * Q2_K, Q3_K, Q4_K, Q5_K, Q6_K), written once and instantiated by
 * quant_avx2.c and quant_avx512.c after quant_simd.h (same V_* vocabulary,
 * MR_MAX, NR_MAX, NR1, QNAME).
 *
 * Design: the codes are widened to f32 by quant_blocks.h's block
 * dequantisers, which the compiler vectorises with this file's ISA flags,
 * into a small buffer that stays in L1, and the f32 weights are then
 * multiplied into a register tile of accumulators with FMAs. Activations
 * stay f32 and the weights are exactly the dequantised values, so the
 * result is the f32 matmul of the dequantised matrix up to the order of the
 * partial sums (VW lanes, reduced at the end).
 *
 *  - One row of x (decode, the weights stream from memory once): NR1
 *    weight rows at a time; per block, each row's block is dequantised into
 *    buf[j] (at most NR1 x 256 floats, 8 KB) and FMA'd against x. The next
 *    tile's rows are prefetched a block's worth per block, as in
 *    quant_simd.h.
 *  - Several rows (prefill): NR_MAX weight rows are dequantised whole into a
 *    panel (NR_MAX x K floats, allocated once per call) and every MR_MAX-row
 *    tile of x runs over the panel, so each weight is widened once per call,
 *    not once per tile of x. If the panel cannot be allocated, the rows of
 *    x run one at a time through the decode path (same values, slower).
 */
#include <stdlib.h>

#include "kernels/quant_blocks.h"

/* One mr x nr tile over all K, weights from `panel` (rows j at j * K)
 * when it is not NULL, otherwise dequantised a block at a time from w. */
AI void wtile(const float *x, int K, const unsigned char *w, size_t rb, const float *panel, kvlm_dtype t,
              int mr, int nr, int m, int n, const float *bias, float *y, int ldy) {
    enum { BLMAX = QK_K };
    const int bl = dtype_block_len(t), nb = K / bl;
    const size_t bb = dtype_block_bytes(t);
    vf acc[MR_MAX][NR_ALL];
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) acc[i][j] = V_ZERO();
    const float *xr = x + (size_t)m * K;
    const unsigned char *wr = w + (size_t)n * rb;
    const unsigned char *next = wr + (size_t)nr * rb;
    const size_t step = (size_t)nr * bb;
    float buf[NR_ALL][BLMAX] __attribute__((aligned(64)));
    for (int b = 0; b < nb; b++) {
        const float *src[NR_ALL];
        if (panel) {
#pragma GCC unroll 8
            for (int j = 0; j < nr; j++) src[j] = panel + (size_t)j * K + (size_t)b * bl;
        } else {
            prefetch_range(next, (size_t)b * step, (size_t)(b + 1) * step);
#pragma GCC unroll 8
            for (int j = 0; j < nr; j++) {
                qb_block(t, wr + (size_t)j * rb + (size_t)b * bb, buf[j]);
                src[j] = buf[j];
            }
        }
        for (int v = 0; v < bl; v += VW) {
            vf xv[MR_MAX];
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) xv[i] = V_LOADU(xr + (size_t)i * K + (size_t)b * bl + v);
#pragma GCC unroll 8
            for (int j = 0; j < nr; j++) {
                const vf wv = V_LOADU(src[j] + v);
#pragma GCC unroll 8
                for (int i = 0; i < mr; i++) acc[i][j] = V_FMA(xv[i], wv, acc[i][j]);
            }
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++)
            y[(size_t)(m + i) * ldy + n + j] = V_REDUCE(acc[i][j]) + (bias ? bias[n + j] : 0.0f);
}

/* Rows [n0, n1) for every row of x through the decode path. */
AI void wrows1(const float *x, int M, int K, const unsigned char *wd, size_t rb, kvlm_dtype t, int n0, int n1,
               const float *bias, float *y, int ldy) {
    for (int m = 0; m < M; m++) {
        int n = n0;
        for (; n + NR1 <= n1; n += NR1) wtile(x, K, wd, rb, NULL, t, 1, NR1, m, n, bias, y, ldy);
        for (; n < n1; n++) wtile(x, K, wd, rb, NULL, t, 1, 1, m, n, bias, y, ldy);
    }
}

/* Dequantises rows [n, n + nr) into panel (nr x K). */
AI void wpanel(const unsigned char *wd, size_t rb, int K, kvlm_dtype t, int n, int nr, float *panel) {
    const int bl = dtype_block_len(t), nb = K / bl;
    const size_t bb = dtype_block_bytes(t);
    for (int j = 0; j < nr; j++) {
        const unsigned char *row = wd + (size_t)(n + j) * rb;
        for (int b = 0; b < nb; b++) qb_block(t, row + (size_t)b * bb, panel + (size_t)j * K + (size_t)b * bl);
    }
}

AI void wrows_t(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias, float *y, int ldy,
                kvlm_dtype t) {
    const int K = w->cols;
    const size_t rb = dtype_row_bytes(t, K, NULL);
    const unsigned char *wd = w->data;
    float *panel = M > 1 ? aligned_alloc(64, ((size_t)NR_MAX * K * sizeof(float) + 63) & ~(size_t)63) : NULL;
    if (!panel) {
        wrows1(x, M, K, wd, rb, t, n0, n1, bias, y, ldy);
        return;
    }
    const int full = M / MR_MAX * MR_MAX;
    int n = n0;
    for (; n + NR_MAX <= n1; n += NR_MAX) {
        wpanel(wd, rb, K, t, n, NR_MAX, panel);
        for (int m = 0; m < full; m += MR_MAX) wtile(x, K, wd, rb, panel, t, MR_MAX, NR_MAX, m, n, bias, y, ldy);
        for (int m = full; m < M; m++) wtile(x, K, wd, rb, panel, t, 1, NR_MAX, m, n, bias, y, ldy);
    }
    for (; n < n1; n++) {
        wpanel(wd, rb, K, t, n, 1, panel);
        for (int m = 0; m < full; m += MR_MAX) wtile(x, K, wd, rb, panel, t, MR_MAX, 1, m, n, bias, y, ldy);
        for (int m = full; m < M; m++) wtile(x, K, wd, rb, panel, t, 1, 1, m, n, bias, y, ldy);
    }
    free(panel);
}

void QNAME(quant_wide_matmul_rows)(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias,
                                   float *y, int ldy) {
    switch (w->dtype) {
    case KVLM_Q4_1: wrows_t(x, M, w, n0, n1, bias, y, ldy, KVLM_Q4_1); break;
    case KVLM_Q5_0: wrows_t(x, M, w, n0, n1, bias, y, ldy, KVLM_Q5_0); break;
    case KVLM_Q5_1: wrows_t(x, M, w, n0, n1, bias, y, ldy, KVLM_Q5_1); break;
    case KVLM_IQ4_NL: wrows_t(x, M, w, n0, n1, bias, y, ldy, KVLM_IQ4_NL); break;
    case KVLM_Q2_K: wrows_t(x, M, w, n0, n1, bias, y, ldy, KVLM_Q2_K); break;
    case KVLM_Q3_K: wrows_t(x, M, w, n0, n1, bias, y, ldy, KVLM_Q3_K); break;
    case KVLM_Q4_K: wrows_t(x, M, w, n0, n1, bias, y, ldy, KVLM_Q4_K); break;
    case KVLM_Q5_K: wrows_t(x, M, w, n0, n1, bias, y, ldy, KVLM_Q5_K); break;
    case KVLM_Q6_K: wrows_t(x, M, w, n0, n1, bias, y, ldy, KVLM_Q6_K); break;
    default: break;
    }
}
