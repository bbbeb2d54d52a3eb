/*
 * Matmul of block-quantised weights (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) with
 * int8 activations on the integer dot-product unit (vpdpbusd: 4 unsigned x
 * signed byte products summed into each int32 lane), written once and
 * instantiated by quant_int8_avx512.c (AVX512-VNNI, zmm: 64 codes per
 * vector) and quant_int8_avx2.c (AVX-VNNI, ymm: 32). Include only from
 * those files, after defining:
 *
 *   VW vf V_ZERO() V_SET1 V_LOADU V_STOREU V_MUL V_FMA(a, b, c) (a*b+c)
 *   V_FMS(a, b, c) (a*b-c) V_FNMA(a, b, c) (c-a*b) V_REDUCE(v)
 *   BPV             32-value blocks per vector (VW / 8)
 *   vq              integer vector (VW int32 lanes, 4 * VW bytes)
 *   Q_LOAD(p) Q_STORE(p, v)   4 * VW bytes
 *   Q_DP(acc, u, s) acc + per-lane sums of 4 products u8(u) * s8(s)
 *   Q_SET8(c) Q_ZERO() Q_TO_F(a) (int32 lanes to float)
 *   Q_W8(b0, b1)    code bytes of the Q8_0 blocks at b0, b1 (b1 NULL: zeros)
 *                   with 0x80 added (u8 = code + 128)
 *   Q_W4(b0, b1)    the 4-bit codes (0..15) of the Q4_0 blocks at b0, b1
 *                   in value order (b1 NULL: zeros)
 *   Q_HALVES(a, b)  floats: a in block 0's lanes, b in block 1's
 *   quantize_x_row  (function) the int8 activations of blocks of a row
 *   QNAME(n)        name mangling: n ## _avx512
 *
 * Activations: every 32-value block of a row of x becomes 32 int8 codes q
 * and an f32 scale dx (quant_int8.c, quant_int8_quantize_row: the same
 * bytes and scales, bit for bit).
 *
 * Weights enter as unsigned bytes u (vpdpbusd's unsigned side) with one
 * float scale a per 4-value lane: value = a * (u - off) - b, where off is
 * a constant of the type (Q8_0: 128, the code + 128; Q4_0: 8, the raw
 * nibble; Q6_K: 32; Q4_K, Q5_K: 0) and b a per-sub-block offset (Q4_K /
 * Q5_K: dmin * m; else 0). For one lane with block sum r = sum u q:
 *   sum value * x ~ a * (r * dx - off * dx * S) - b * dx * S,
 * S the lane's sum of codes. Per row of x the spread scale dx and
 * e = off * dx * S are stored for every lane once, so each (row of x,
 * weight row, vector) costs one vpdpbusd (zero start), one conversion, one
 * fused r * dx - e and one FMA with a. The b terms (Q4_K / Q5_K) are a dot
 * product of K / 32 sub-block offsets with dx * (sum of the block's
 * codes), added per output after the loop. The integer sums are exact;
 * the float rounding differs from quant_int8_matmul_ref's (which sums in
 * double) by a few ulps of the terms.
 *
 * Weights are unpacked per call into a panel of NR_MAX rows (bytes,
 * spread scales, offsets; about 2 bytes per weight, in L1/L2) that every
 * MR_MAX x NR_MAX register tile of outputs reads, so each block is
 * unpacked once per call however many rows x has. For one row of x and
 * Q8_0 / Q4_0 (decode, where the weights stream from memory once) NR1
 * weight rows are unpacked straight from their blocks instead, and the
 * next tile is prefetched as in quant_simd.h. K-quant calls with fewer
 * than MR_MAX rows are left to the f32-activation kernels (see
 * quant_int8_min_rows).
 *
 * The per-call buffer (activations and panel) is on the stack when small,
 * else allocated; if the allocation fails the call reports it and the
 * caller falls back to the f32-activation kernels of the same ISA (a
 * different rounding, never a failure).
 */
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/quant_int8.h"
#include "tensor.h"

#include "kernels/quant_int8_k.h"

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
    const float *ex; /* Q4_K / Q5_K: dx * (sum of the block's codes), nbq per row, zero-padded */
    size_t kp;
    int nv, nbq;
} i8_act;

AI int i8_off(kvlm_dtype t) { return t == KVLM_Q8_0 ? 128 : t == KVLM_Q4_0 ? 8 : t == KVLM_Q6_K ? 32 : 0; }
AI int i8_hasmin(kvlm_dtype t) { return t == KVLM_Q4_K || t == KVLM_Q5_K; }

/* The weight rows [n, n + nr) unpacked for i8_tile: row j's weight bytes
 * at pc + j * kp (vector p at p * 4 * VW), the scales of its lanes at
 * ps + j * kp / 4 (lane order), its sub-block offsets (Q4_K / Q5_K) at
 * pb + j * nbq. Built once per weight tile and read by every tile of rows
 * of x. */
AI void i8_panel(const i8_act *a, int nb, const unsigned char *w, size_t rb, kvlm_dtype t, int nr, int n,
                 unsigned char *pc, float *ps, float *pb) {
    for (int j = 0; j < nr; j++) {
        const unsigned char *wr = w + (size_t)(n + j) * rb;
        if (t == KVLM_Q8_0 || t == KVLM_Q4_0) {
            const size_t bb = t == KVLM_Q8_0 ? sizeof(blk_q8_0) : sizeof(blk_q4_0);
            const int full = nb / BPV;
            for (int p = 0; p < a->nv; p++) {
                const unsigned char *b0 = wr + (size_t)p * BPV * bb;
                const unsigned char *b1 = BPV == 2 && p < full ? b0 + bb : NULL;
                Q_STORE(pc + (size_t)j * a->kp + (size_t)p * 4 * VW, i8_wvec(t, b0, b1));
                V_STOREU(ps + (size_t)j * (a->kp / 4) + (size_t)p * VW, i8_wscale(b0, b1));
            }
        } else {
            const size_t bb = dtype_block_bytes(t);
            float *bw = pb + (size_t)j * a->nbq;
            for (int kb = 0; kb < nb / 8; kb++)
                i8k_unpack(t, wr + (size_t)kb * bb, pc + (size_t)j * a->kp + (size_t)kb * QK_K,
                           ps + (size_t)j * (a->kp / 4) + (size_t)kb * (QK_K / 4), bw + kb * 8);
            if (i8_hasmin(t))
                for (int b = nb; b < a->nbq; b++) bw[b] = 0.0f;
        }
    }
}

/* One mr x nr tile of outputs over all vectors, weights from the panel;
 * mr, nr compile-time. Per vector and output: one vpdpbusd (zero start),
 * one conversion, one fused r * dx - e and one FMA with the weight
 * scales. */
AI void i8_tile(const i8_act *a, kvlm_dtype t, const unsigned char *pc, const float *ps, const float *pb, int mr,
                int nr, int m, int n, const float *bias, float *y, int ldy) {
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
            sw[j] = V_LOADU(ps + (size_t)j * (a->kp / 4) + (size_t)p * VW);
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
    if (i8_hasmin(t))
        for (int c = 0; c < a->nbq; c += VW)
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) {
                const vf ev = V_LOADU(a->ex + (size_t)(m + i) * a->nbq + c);
#pragma GCC unroll 8
                for (int j = 0; j < nr; j++) acc[i][j] = V_FNMA(V_LOADU(pb + (size_t)j * a->nbq + c), ev, acc[i][j]);
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
                  int ldy, kvlm_dtype t, unsigned char *pc, float *ps, float *pb) {
    const int K = w->cols, nb = K / QK;
    const size_t rb = dtype_row_bytes(t, K, NULL);
    const unsigned char *wd = w->data;
    const int small = t == KVLM_Q8_0 || t == KVLM_Q4_0;
    /* rows of x through the panel: all for the K-quants, whole tiles else */
    const int full = small ? M / MR_MAX * MR_MAX : M, tiled = M / MR_MAX * MR_MAX;
    if (full > 0) {
        int n = n0;
        for (; n + NR_MAX <= n1; n += NR_MAX) {
            i8_panel(a, nb, wd, rb, t, NR_MAX, n, pc, ps, pb);
            for (int m = 0; m < tiled; m += MR_MAX) i8_tile(a, t, pc, ps, pb, MR_MAX, NR_MAX, m, n, bias, y, ldy);
            for (int m = tiled; m < full; m++) i8_tile(a, t, pc, ps, pb, 1, NR_MAX, m, n, bias, y, ldy);
        }
        for (; n < n1; n++) {
            i8_panel(a, nb, wd, rb, t, 1, n, pc, ps, pb);
            for (int m = 0; m < tiled; m += MR_MAX) i8_tile(a, t, pc, ps, pb, MR_MAX, 1, m, n, bias, y, ldy);
            for (int m = tiled; m < full; m++) i8_tile(a, t, pc, ps, pb, 1, 1, m, n, bias, y, ldy);
        }
    }
    if (small)
        for (int m = full; m < M; m++) {
            int n = n0;
            for (; n + NR1 <= n1; n += NR1) i8_tile1(a, nb, wd, rb, t, NR1, m, n, bias, y, ldy);
            for (; n < n1; n++) i8_tile1(a, nb, wd, rb, t, 1, m, n, bias, y, ldy);
        }
}

/* Codes, spread scales, lane corrections (and block sums for Q4_K /
 * Q5_K) of M rows of x into the layout of a, zero padding included. */
static void QNAME(i8_quantize)(const float *x, int M, int K, kvlm_dtype t, int8_t *xq, float *f, float *ex,
                               size_t kp, int nv, int nbq) {
    const int nb = K / QK;
    const vf off = V_SET1((float)i8_off(t));
    float d[BPV];
    for (int m = 0; m < M; m++) {
        int8_t *q = xq + (size_t)m * kp;
        memset(q + (size_t)nb * QK, 0, kp - (size_t)nb * QK);
        float *fr = f + (size_t)m * nv * 2 * VW, *er = ex + (size_t)m * nbq;
        for (int v = 0; v < nv; v++) {
            for (int c = 0; c < BPV; c++) {
                const int b = v * BPV + c;
                d[c] = 0.0f;
                if (b < nb) quantize_x_row(x + (size_t)m * K + (size_t)b * QK, 1, q + (size_t)b * QK, &d[c]);
                if (i8_hasmin(t) && b < nb) {
                    int sum = 0;
                    for (int i = 0; i < QK; i++) sum += q[(size_t)b * QK + i];
                    er[b] = d[c] * (float)sum;
                }
            }
            const vf dv = Q_HALVES(d[0], d[BPV - 1]);
            const vq s4 = Q_DP(Q_ZERO(), Q_SET8(1), Q_LOAD(q + (size_t)v * 4 * VW));
            V_STOREU(fr + (size_t)v * 2 * VW, dv);
            V_STOREU(fr + (size_t)v * 2 * VW + VW, V_MUL(V_MUL(Q_TO_F(s4), dv), off));
        }
        if (i8_hasmin(t))
            for (int b = nb; b < nbq; b++) er[b] = 0.0f;
    }
}

/* Fewer rows of a K-quant are left to the f32-activation kernels: one row
 * through the panel (a store and reload of every weight) measured slower
 * than their decode kernel (quant_wide.h). */
int QNAME(quant_int8_min_rows)(kvlm_dtype t) { return t == KVLM_Q8_0 || t == KVLM_Q4_0 ? 1 : MR_MAX; }

int QNAME(quant_int8_matmul_rows)(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias,
                                  float *y, int ldy) {
    const kvlm_dtype t = w->dtype;
    if (!quant_int8_supports(t)) return 0;
    const int small = t == KVLM_Q8_0 || t == KVLM_Q4_0;
    if (M < QNAME(quant_int8_min_rows)(t)) return 0;
    const int K = w->cols, nb = K / QK, nv = (nb + BPV - 1) / BPV, nbq = (nb + VW - 1) / VW * VW;
    /* per row of x: spread scales and corrections, block sums (Q4_K /
     * Q5_K), codes; then the panel of NR_MAX weight rows (scales, offsets,
     * bytes) unless one row of Q8_0 / Q4_0 is read straight from its blocks */
    const size_t kp = (size_t)nv * 4 * VW, fbytes = (size_t)nv * 2 * VW * sizeof(float);
    const size_t exb = i8_hasmin(t) ? (size_t)nbq * sizeof(float) : 0;
    const size_t panel = !small || M >= MR_MAX ? (size_t)NR_MAX * (kp + kp + exb) : 0;
    const size_t need = (size_t)M * (fbytes + exb + kp) + panel;
    _Alignas(64) unsigned char stack[32768];
    unsigned char *buf = need <= sizeof stack ? stack : aligned_alloc(64, (need + 63) & ~(size_t)63);
    if (!buf) return 0;
    float *f = (float *)buf, *ex = (float *)(buf + (size_t)M * fbytes);
    int8_t *xq = (int8_t *)(buf + (size_t)M * (fbytes + exb));
    float *ps = (float *)(buf + (size_t)M * (fbytes + exb + kp)), *pb = ps + (size_t)NR_MAX * kp / 4;
    unsigned char *pc = (unsigned char *)(pb + (size_t)NR_MAX * exb / sizeof(float));
    QNAME(i8_quantize)(x, M, K, t, xq, f, ex, kp, nv, nbq);
    const i8_act a = {xq, f, ex, kp, nv, nbq};
    switch (t) {
    case KVLM_Q8_0: i8_rows_t(&a, M, w, n0, n1, bias, y, ldy, KVLM_Q8_0, pc, ps, pb); break;
    case KVLM_Q4_0: i8_rows_t(&a, M, w, n0, n1, bias, y, ldy, KVLM_Q4_0, pc, ps, pb); break;
    case KVLM_Q4_K: i8_rows_t(&a, M, w, n0, n1, bias, y, ldy, KVLM_Q4_K, pc, ps, pb); break;
    case KVLM_Q5_K: i8_rows_t(&a, M, w, n0, n1, bias, y, ldy, KVLM_Q5_K, pc, ps, pb); break;
    default: i8_rows_t(&a, M, w, n0, n1, bias, y, ldy, KVLM_Q6_K, pc, ps, pb); break;
    }
    if (buf != stack) free(buf);
    return 1;
}

void QNAME(quant_int8_quantize_row)(const float *x, int K, int8_t *q, float *d) { quantize_x_row(x, K / QK, q, d); }
