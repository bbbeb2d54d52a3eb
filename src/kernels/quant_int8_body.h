/*
 * Matmul of Q8_0 / Q4_0 weights with int8 activations on the integer
 * dot-product unit (vpdpbusd: 4 unsigned x signed byte products summed
 * into each int32 lane), written once and instantiated by
 * quant_int8_avx512.c (AVX512-VNNI, zmm: two 32-value blocks per vector)
 * and quant_int8_avx2.c (AVX-VNNI, ymm: one block per vector). Include
 * only from those files, after defining:
 *
 *   VW vf V_ZERO() V_FMA(a, b, c) V_MUL(a, b) V_REDUCE(v)   as quant_simd.h
 *   BPV             32-value blocks per vector (VW / 8)
 *   vq              integer vector (VW int32 lanes, 4 * VW bytes)
 *   Q_LOAD(p)       the 4 * VW bytes at p
 *   Q_DP(acc, u, s) acc + per-lane sums of 4 products u8(u) * s8(s)
 *   Q_SUB(a, b)     int32 a - b
 *   Q_SET8(c)       every byte c
 *   Q_ZERO()
 *   Q_TO_F(a)       int32 lanes to float
 *   Q_W8(b0, b1)    code bytes of the Q8_0 blocks at b0, b1 (b1 NULL: zeros)
 *                   with 0x80 added (u8 = code + 128)
 *   Q_W4(b0, b1)    the 4-bit codes (0..15) of the Q4_0 blocks at b0, b1
 *                   in value order (b1 NULL: zeros)
 *   Q_HALVES(a, b)  floats: a in block 0's lanes, b in block 1's
 *   quantize_x_row  (function) the int8 activations of one row, see below
 *   QNAME(n)        name mangling: n ## _avx512
 *
 * Activations: every 32-value block of a row of x becomes 32 int8 codes q
 * and an f32 scale dx (quant_int8.c, quant_int8_quantize_row: the same
 * bytes and scales, bit for bit). With w the weight codes (Q8_0: q;
 * Q4_0: code - 8) and dw the block's f16 scale, a block contributes
 * dw * dx * sum_i w_i q_i; the integer sum is exact in int32.
 *
 * vpdpbusd multiplies unsigned by signed bytes, so the weight codes enter
 * as unsigned bytes u = w + off (Q8_0: off = 128; Q4_0: off = 8, the raw
 * nibble) and the activations as signed: sum u_i q_i = sum w_i q_i +
 * off * sum q_i. The second term depends on x only: per activation vector
 * it is formed once (a vpdpbusd of the bytes `off` with q) and subtracted
 * from the accumulator's start value, shared by every weight row of the
 * tile. Per block pair, weight row and row of x the kernel then issues one
 * vpdpbusd, one int32->float conversion, one multiply of the two scales
 * and one FMA.
 *
 * With several rows of x (prefill, batched decode) an MR_MAX x NR_MAX tile
 * of outputs stays in registers, so each weight vector is unpacked once
 * per tile and used for MR_MAX rows; rows of x are taken in blocks that
 * stay in L2 (about 256 KB of codes). With one row (decode) NR1 weight
 * rows share one load and correction of x, and the next tile is
 * prefetched as in quant_simd.h.
 *
 * The activation codes are a per-call buffer (K bytes + K / 32 floats per
 * row): on the stack for a small single row, else allocated; if the
 * allocation fails the call falls back to the f32-activation kernels of
 * the same ISA (a different rounding, never a failure).
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/quant_int8.h"
#include "tensor.h"

#define AI static inline __attribute__((always_inline))

AI float i8_half(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

AI void i8_prefetch(const unsigned char *base, size_t from, size_t to) {
    for (size_t o = from & ~(size_t)63; o < to; o += 64) __builtin_prefetch(base + o, 0, 3);
}

/* The weight vector of blocks b0 (and b1 when BPV == 2; NULL: zeros). */
AI vq i8_wvec(kvlm_dtype t, const unsigned char *b0, const unsigned char *b1) {
    return t == KVLM_Q8_0 ? Q_W8(b0, b1) : Q_W4(b0, b1);
}

AI vf i8_wscale(const unsigned char *b0, const unsigned char *b1) {
    return Q_HALVES(i8_half(b0), b1 ? i8_half(b1) : 0.0f);
}

/* Activations for one call, per row m and vector v (4 * VW codes):
 * codes at xq + m * kp + v * 4 * VW; at f + (m * nv + v) * 2 * VW the
 * block scales dx spread over their lanes, then e = off * dx * (sum of
 * the lane's 4 codes), so that a lane of the block sum r of unsigned
 * weight bytes gives r * dx - e = dx * sum w q. kp is K rounded up to
 * whole vectors (codes zero-padded, scales 0). */
typedef struct i8_act {
    const int8_t *xq;
    const float *f;
    size_t kp;
    int nv;
} i8_act;

/* The weight rows [n, n + nr) unpacked for i8_tile: row j's weight bytes
 * at pc + j * kp (vector p at p * 4 * VW), its block scales spread over
 * their lanes at ps + (j * nv + p) * VW. Built once per weight tile and
 * read by every tile of rows of x, so each block is unpacked once per call. */
AI void i8_panel(const i8_act *a, int nb, const unsigned char *w, size_t rb, kvlm_dtype t, int nr, int n,
                 unsigned char *pc, float *ps) {
    const size_t bb = t == KVLM_Q8_0 ? sizeof(blk_q8_0) : sizeof(blk_q4_0);
    const int full = nb / BPV;
    for (int j = 0; j < nr; j++) {
        const unsigned char *wr = w + (size_t)(n + j) * rb;
        for (int p = 0; p < a->nv; p++) {
            const unsigned char *b0 = wr + (size_t)p * BPV * bb;
            const unsigned char *b1 = BPV == 2 && p < full ? b0 + bb : NULL;
            Q_STORE(pc + (size_t)j * a->kp + (size_t)p * 4 * VW, i8_wvec(t, b0, b1));
            V_STOREU(ps + ((size_t)j * a->nv + p) * VW, i8_wscale(b0, b1));
        }
    }
}

/* One mr x nr tile of outputs over all vectors, weights from the panel;
 * mr, nr compile-time. Per vector and output: one vpdpbusd (zero start),
 * one conversion, one fused r * dx - e and one FMA with the weight
 * scales. */
AI void i8_tile(const i8_act *a, const unsigned char *pc, const float *ps, int mr, int nr, int m, int n,
                const float *bias, float *y, int ldy) {
    vf acc[MR_MAX][NR_MAX];
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) acc[i][j] = V_ZERO();
    const int8_t *xr = a->xq + (size_t)m * a->kp;
    const float *fr = a->f + (size_t)m * a->nv * 2 * VW;
    const size_t fs = (size_t)a->nv * 2 * VW;
    for (int p = 0; p < a->nv; p++) {
        vq wv[NR_MAX];
        vf sw[NR_MAX];
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) {
            wv[j] = Q_LOAD(pc + (size_t)j * a->kp + (size_t)p * 4 * VW);
            sw[j] = V_LOADU(ps + ((size_t)j * a->nv + p) * VW);
        }
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            const vq xv = Q_LOAD(xr + (size_t)i * a->kp + (size_t)p * 4 * VW);
            const float *fp = fr + (size_t)i * fs + (size_t)p * 2 * VW;
            const vf dv = V_LOADU(fp), ev = V_LOADU(fp + VW);
#pragma GCC unroll 8
            for (int j = 0; j < nr; j++)
                acc[i][j] = V_FMA(V_FMS(Q_TO_F(Q_DP(Q_ZERO(), wv[j], xv)), dv, ev), sw[j], acc[i][j]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++)
            y[(size_t)(m + i) * ldy + n + j] = V_REDUCE(acc[i][j]) + (bias ? bias[n + j] : 0.0f);
}

/* One row of x against nr weight rows (decode). */
AI void i8_tile1(const i8_act *a, int nb, const unsigned char *w, size_t rb, kvlm_dtype t, int nr, int m, int n,
                 const float *bias, float *y, int ldy) {
    const size_t bb = t == KVLM_Q8_0 ? sizeof(blk_q8_0) : sizeof(blk_q4_0);
    vf acc[NR1];
#pragma GCC unroll 8
    for (int j = 0; j < nr; j++) acc[j] = V_ZERO();
    const unsigned char *wr = w + (size_t)n * rb;
    const unsigned char *next = wr + (size_t)nr * rb;
    const size_t step = (size_t)nr * BPV * bb;
    const int8_t *xr = a->xq + (size_t)m * a->kp;
    const float *fr = a->f + (size_t)m * a->nv * 2 * VW;
    const int full = nb / BPV;
    for (int p = 0; p <= full; p++) {
        const int tail = p == full;
        if (tail && nb % BPV == 0) break;
        i8_prefetch(next, (size_t)p * step, (size_t)(p + 1) * step);
        const vq xv = Q_LOAD(xr + (size_t)p * 4 * VW);
        const vf dv = V_LOADU(fr + (size_t)p * 2 * VW), ev = V_LOADU(fr + (size_t)p * 2 * VW + VW);
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) {
            const unsigned char *b0 = wr + (size_t)j * rb + (size_t)p * BPV * bb;
            const unsigned char *b1 = BPV == 2 && !tail ? b0 + bb : NULL;
            acc[j] = V_FMA(V_FMS(Q_TO_F(Q_DP(Q_ZERO(), i8_wvec(t, b0, b1), xv)), dv, ev), i8_wscale(b0, b1), acc[j]);
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < nr; j++) y[(size_t)m * ldy + n + j] = V_REDUCE(acc[j]) + (bias ? bias[n + j] : 0.0f);
}

AI void i8_rows_t(const i8_act *a, int M, const kern_matrix *w, int n0, int n1, const float *bias, float *y,
                  int ldy, kvlm_dtype t, unsigned char *pc, float *ps) {
    const int K = w->cols, nb = K / QK;
    const size_t rb = (size_t)nb * (t == KVLM_Q8_0 ? sizeof(blk_q8_0) : sizeof(blk_q4_0));
    const unsigned char *wd = w->data;
    const int full = M / MR_MAX * MR_MAX;
    if (full > 0) {
        int n = n0;
        for (; n + NR_MAX <= n1; n += NR_MAX) {
            i8_panel(a, nb, wd, rb, t, NR_MAX, n, pc, ps);
            for (int m = 0; m < full; m += MR_MAX) i8_tile(a, pc, ps, MR_MAX, NR_MAX, m, n, bias, y, ldy);
        }
        for (; n < n1; n++) {
            i8_panel(a, nb, wd, rb, t, 1, n, pc, ps);
            for (int m = 0; m < full; m += MR_MAX) i8_tile(a, pc, ps, MR_MAX, 1, m, n, bias, y, ldy);
        }
    }
    for (int m = full; m < M; m++) {
        int n = n0;
        for (; n + NR1 <= n1; n += NR1) i8_tile1(a, nb, wd, rb, t, NR1, m, n, bias, y, ldy);
        for (; n < n1; n++) i8_tile1(a, nb, wd, rb, t, 1, m, n, bias, y, ldy);
    }
}

/* Codes, spread scales and corrections of M rows of x into the layout of
 * a (zero padding included); off is the weight bytes' offset (128 or 8). */
static void QNAME(i8_quantize)(const float *x, int M, int K, int off, int8_t *xq, float *f, size_t kp, int nv) {
    const int nb = K / QK;
    float d[BPV];
    for (int m = 0; m < M; m++) {
        int8_t *q = xq + (size_t)m * kp;
        memset(q + (size_t)nb * QK, 0, kp - (size_t)nb * QK);
        float *fr = f + (size_t)m * nv * 2 * VW;
        for (int v = 0; v < nv; v++) {
            for (int c = 0; c < BPV; c++) {
                const int b = v * BPV + c;
                d[c] = 0.0f;
                if (b < nb) quantize_x_row(x + (size_t)m * K + (size_t)b * QK, 1, q + (size_t)b * QK, &d[c]);
            }
            const vf dv = Q_HALVES(d[0], d[BPV - 1]);
            const vq s4 = Q_DP(Q_ZERO(), Q_SET8(1), Q_LOAD(q + (size_t)v * 4 * VW));
            V_STOREU(fr + (size_t)v * 2 * VW, dv);
            V_STOREU(fr + (size_t)v * 2 * VW + VW, V_MUL(V_MUL(Q_TO_F(s4), dv), V_SET1((float)off)));
        }
    }
}

int QNAME(quant_int8_matmul_rows)(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias,
                                  float *y, int ldy) {
    if (w->dtype != KVLM_Q8_0 && w->dtype != KVLM_Q4_0) return 0;
    const int K = w->cols, nb = K / QK, nv = (nb + BPV - 1) / BPV;
    /* per row of x: spread scales and corrections, then codes; the panel
     * (NR_MAX weight rows of bytes and spread scales) when M >= MR_MAX */
    const size_t kp = (size_t)nv * 4 * VW, fbytes = (size_t)nv * 2 * VW * sizeof(float);
    const size_t panel = M >= MR_MAX ? (size_t)NR_MAX * (kp + (size_t)nv * VW * sizeof(float)) : 0;
    const size_t need = (size_t)M * (fbytes + kp) + panel;
    _Alignas(64) unsigned char stack[32768];
    unsigned char *buf = need <= sizeof stack ? stack : aligned_alloc(64, (need + 63) & ~(size_t)63);
    if (!buf) return 0;
    float *f = (float *)buf;
    int8_t *xq = (int8_t *)(buf + (size_t)M * fbytes);
    float *ps = (float *)(buf + (size_t)M * (fbytes + kp));
    unsigned char *pc = (unsigned char *)ps + (size_t)NR_MAX * nv * VW * sizeof(float);
    QNAME(i8_quantize)(x, M, K, w->dtype == KVLM_Q8_0 ? 128 : 8, xq, f, kp, nv);
    const i8_act a = {xq, f, kp, nv};
    if (w->dtype == KVLM_Q8_0) i8_rows_t(&a, M, w, n0, n1, bias, y, ldy, KVLM_Q8_0, pc, ps);
    else i8_rows_t(&a, M, w, n0, n1, bias, y, ldy, KVLM_Q4_0, pc, ps);
    if (buf != stack) free(buf);
    return 1;
}

void QNAME(quant_int8_quantize_row)(const float *x, int K, int8_t *q, float *d) { quantize_x_row(x, K / QK, q, d); }
