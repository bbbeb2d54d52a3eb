/*
 * SIMD matmul against block-quantised weights (Q8_0, Q4_0), written once
 * and instantiated by quant_avx2.c (8 lanes), quant_avx512.c (16 lanes)
 * and quant_neon.c (4 lanes; it also defines Q_F16(h), one f16 as f32).
 * Include only from those files, after defining:
 *
 *   VW, vf, V_ZERO(), V_SET1(s), V_LOADU(p), V_ADD(a, b), V_MUL(a, b),
 *   V_FMA(a, b, c) (a*b+c), V_REDUCE(v) (horizontal sum)
 *   V_SCALE(p)       the f16 at p (a block's scale) widened and broadcast
 *   Q8_CHUNK(q, v)   floats of the int8 codes q[v*VW .. v*VW + VW)
 *   Q4_CHUNK(q, v)   floats of the 4-bit codes of values v*VW .. v*VW + VW
 *                    of a Q4_0 block whose code bytes start at q (0..15)
 *   MR_MAX NR_MAX    register tile: rows of x by rows of W
 *   NR1              rows of W per tile when x has one row (decode)
 *   QNAME(n)         name mangling: n ## _avx2
 *
 * Per 32-value block and weight row the kernel converts the f16 scale d
 * once, then for each VW-wide chunk widens the codes to floats. With
 * several rows of x (prefill) it forms the exact weight (Q8_0: code * d;
 * Q4_0: code * d - 8d, one rounding of an exactly representable value) and
 * multiplies it into every row of the tile; with one row (decode, where
 * the weights stream from memory once and every operation per byte counts)
 * it multiplies the codes into x and scales the block's sum (qtile1).
 * Nothing bigger than one chunk per weight row is ever widened.
 */
#include <string.h>

#include "kernels/kernels.h"
#include "tensor.h"

#define AI static inline __attribute__((always_inline))
#define QV (QK / VW)
#define NR_ALL (NR1 > NR_MAX ? NR1 : NR_MAX)

/* Prefetches the byte range [from, to) of the next tile, a line at a time.
 * A tile's nr rows are contiguous, so while it is read as nr interleaved
 * streams of one row each (too short for the hardware prefetcher to ramp
 * up), the next tile is requested linearly, one block's worth per block,
 * a whole tile ahead. Prefetches past the end of the matrix are harmless
 * (they never fault). */
AI void prefetch_range(const unsigned char *base, size_t from, size_t to) {
    for (size_t o = from & ~(size_t)63; o < to; o += 64) __builtin_prefetch(base + o, 0, 3);
}

/* One f16 as f32: F16C's instruction unless the includer names its own. */
#ifndef Q_F16
#define Q_F16(h) _cvtsh_ss(h)
#endif

AI float q_scale(const void *blk) {
    uint16_t h;
    memcpy(&h, blk, 2);
    return Q_F16(h);
}

/* One mr x nr tile of y over all K; t is a compile-time constant once
 * inlined, so each instantiation has a single widening path. */
AI void qtile(const float *x, int K, const unsigned char *w, size_t rb, kvlm_dtype t, int mr, int nr,
              int m, int n, const float *bias, float *y, int ldy) {
    const size_t bb = t == KVLM_Q8_0 ? sizeof(blk_q8_0) : sizeof(blk_q4_0);
    const int nb = K / QK;
    vf acc[MR_MAX][NR_ALL];
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) acc[i][j] = V_ZERO();
    const float *xr = x + (size_t)m * K;
    const unsigned char *wr = w + (size_t)n * rb;
    const unsigned char *next = wr + (size_t)nr * rb;
    const size_t step = (size_t)nr * bb;
    for (int b = 0; b < nb; b++) {
        prefetch_range(next, (size_t)b * step, (size_t)(b + 1) * step);
        vf dv[NR_ALL], ov[NR_ALL];
        const unsigned char *blk[NR_ALL];
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) {
            blk[j] = wr + (size_t)j * rb + (size_t)b * bb;
            const float d = q_scale(blk[j]);
            dv[j] = V_SET1(d);
            if (t == KVLM_Q4_0) ov[j] = V_SET1(-8.0f * d);
        }
#pragma GCC unroll 4
        for (int v = 0; v < QV; v++) {
            vf xv[MR_MAX];
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) xv[i] = V_LOADU(xr + (size_t)i * K + (size_t)b * QK + (size_t)v * VW);
#pragma GCC unroll 8
            for (int j = 0; j < nr; j++) {
                vf wv = t == KVLM_Q8_0 ? V_MUL(Q8_CHUNK(blk[j] + 2, v), dv[j])
                                       : V_FMA(Q4_CHUNK(blk[j] + 2, v), dv[j], ov[j]);
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

/* The same for a single row of x (decode), nr weight rows at a time, with
 * fewer operations per block: the codes are multiplied by x unscaled and
 * the block's partial sums scaled once (acc += d * sum_v code_v * x_v).
 * For Q4_0 the -8 offset enters as -8 * (x_0 + ... x_QV-1), formed once per
 * block for all nr rows: sum_v (code_v - 8) x_v = sum_v code_v x_v - 8 sum_v
 * x_v. The products are no longer the exact dequantised weights times x,
 * but every rounding is of a partial sum, as in the f32 kernels. */
AI void qtile1(const float *x, int K, const unsigned char *w, size_t rb, kvlm_dtype t, int nr, int m, int n,
               const float *bias, float *y, int ldy) {
    const size_t bb = t == KVLM_Q8_0 ? sizeof(blk_q8_0) : sizeof(blk_q4_0);
    const int nb = K / QK;
    vf acc[NR1];
#pragma GCC unroll 8
    for (int j = 0; j < nr; j++) acc[j] = V_ZERO();
    const float *xr = x + (size_t)m * K;
    const unsigned char *wr = w + (size_t)n * rb;
    const unsigned char *next = wr + (size_t)nr * rb;
    const size_t step = (size_t)nr * bb;
    for (int b = 0; b < nb; b++) {
        prefetch_range(next, (size_t)b * step, (size_t)(b + 1) * step);
        vf xv[QV], m8 = V_ZERO();
#pragma GCC unroll 4
        for (int v = 0; v < QV; v++) xv[v] = V_LOADU(xr + (size_t)b * QK + (size_t)v * VW);
        if (t == KVLM_Q4_0) {
            vf s = xv[0];
#pragma GCC unroll 4
            for (int v = 1; v < QV; v++) s = V_ADD(s, xv[v]);
            m8 = V_MUL(s, V_SET1(-8.0f));
        }
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) {
            const unsigned char *blk = wr + (size_t)j * rb + (size_t)b * bb;
            vf tv = t == KVLM_Q8_0 ? V_MUL(Q8_CHUNK(blk + 2, 0), xv[0]) : V_FMA(Q4_CHUNK(blk + 2, 0), xv[0], m8);
#pragma GCC unroll 4
            for (int v = 1; v < QV; v++)
                tv = V_FMA(t == KVLM_Q8_0 ? Q8_CHUNK(blk + 2, v) : Q4_CHUNK(blk + 2, v), xv[v], tv);
            acc[j] = V_FMA(tv, V_SCALE(blk), acc[j]);
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < nr; j++) y[(size_t)m * ldy + n + j] = V_REDUCE(acc[j]) + (bias ? bias[n + j] : 0.0f);
}

AI void qrows_t(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias, float *y,
                int ldy, kvlm_dtype t) {
    const int K = w->cols;
    const size_t rb = (size_t)(K / QK) * (t == KVLM_Q8_0 ? sizeof(blk_q8_0) : sizeof(blk_q4_0));
    const unsigned char *wd = w->data;
    int m = 0;
    for (; m + MR_MAX <= M; m += MR_MAX) {
        int n = n0;
        for (; n + NR_MAX <= n1; n += NR_MAX) qtile(x, K, wd, rb, t, MR_MAX, NR_MAX, m, n, bias, y, ldy);
        for (; n < n1; n++) qtile(x, K, wd, rb, t, MR_MAX, 1, m, n, bias, y, ldy);
    }
    for (; m < M; m++) {
        int n = n0;
        for (; n + NR1 <= n1; n += NR1) qtile1(x, K, wd, rb, t, NR1, m, n, bias, y, ldy);
        for (; n < n1; n++) qtile1(x, K, wd, rb, t, 1, m, n, bias, y, ldy);
    }
}

void QNAME(quant_matmul_rows)(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias,
                              float *y, int ldy) {
    if (w->dtype == KVLM_Q8_0) qrows_t(x, M, w, n0, n1, bias, y, ldy, KVLM_Q8_0);
    else qrows_t(x, M, w, n0, n1, bias, y, ldy, KVLM_Q4_0);
}
