/*
 * Matmul of block-quantised weights (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K,
 * Q5_K, Q6_K) with
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
 *   Q_W4(q0, q1)    the 4-bit codes (0..15) of the 16 nibble bytes at q0,
 *                   q1 (a Q4_0 / Q4_1 / Q5_0 / Q5_1 block's) in value
 *                   order (q1 NULL: zeros)
 *   Q_HB(h0, h1)    16 in the bytes whose bit of the 32-bit high-bit
 *                   fields at h0, h1 (Q5_0 / Q5_1) is set (h1 NULL: none)
 *   Q_SRL32(a, n) Q_MULLO32(a, b)  int32 lane shift and product
 *   Q_HALVES(a, b)  floats: a in block 0's lanes, b in block 1's
 *   Q_HALVES_F16(b0, b1) (optional) Q_HALVES of the f16 scales at b0, b1
 *                   (b1 NULL: 0)
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
 * nibble; Q5_0: 16; Q6_K: 32; Q4_1, Q5_1, Q4_K, Q5_K: 0) and b a
 * per-sub-block offset (Q4_K / Q5_K: dmin * m; Q4_1 / Q5_1: minus the
 * block's m; else 0). For one lane with block sum r = sum u q:
 *   sum value * x ~ a * (r * dx - off * dx * S) - b * dx * S,
 * S the lane's sum of codes. Per row of x the spread scale dx and
 * e = off * dx * S are stored for every lane once, so each (row of x,
 * weight row, vector) costs one vpdpbusd (zero start), one conversion, one
 * fused r * dx - e and one FMA with a. The b terms (Q4_1, Q5_1, Q4_K, Q5_K) are a dot
 * product of K / 32 sub-block offsets with dx * (sum of the block's
 * codes), added per output after the loop. The integer sums are exact;
 * the float rounding differs from quant_int8_matmul_ref's (which sums in
 * double) by a few ulps of the terms.
 *
 * Below the prefill kernels (PR_MIN_ROWS rows), the 32-value block types
 * read their blocks in place: one row of x (decode) against NR1 weight
 * rows at a time (i8_tile1), a batch of rows (a decode step of several
 * sequences, a short prompt chunk) in tiles of MR_MAX rows of x against
 * NR_MAX weight rows, each weight vector unpacked once for the tile's
 * rows and the weight rows left in L1 for the next tile of rows
 * (i8_tilem, quant_int8_batch.h): a step of 6 rows reads each weight
 * once. The next weight tile is prefetched as in quant_simd.h (but into L2: prefetcht2). On
 * avx512-vnni, Q4_0 with 1 to 3 rows runs quant_int8_q4_0_avx512.c's
 * kernel instead and comes here only if that declines. The K-quants go to
 * their decode kernel below quant_int8_min_rows (quant_int8_decode.h,
 * quant_int8_prep.c), then through a panel of NR_MAX weight rows (bytes,
 * spread scales, offsets; about 2 bytes per weight, in L1/L2) unpacked
 * once per call that every MR_MAX x NR_MAX register tile of outputs
 * reads.
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

#ifndef I8_PF_LOCALITY
#define I8_PF_LOCALITY 1
#endif
AI void i8_prefetch(const unsigned char *base, size_t from, size_t to) {
    for (size_t o = from & ~(size_t)63; o < to; o += 64) __builtin_prefetch(base + o, 0, I8_PF_LOCALITY);
}

/* The 32-value block types (one f16 scale per block): Q8_0, Q4_0, Q4_1,
 * Q5_0, Q5_1. */
AI int i8_b32(kvlm_dtype t) {
    return t == KVLM_Q8_0 || t == KVLM_Q4_0 || t == KVLM_Q4_1 || t == KVLM_Q5_0 || t == KVLM_Q5_1;
}
/* Byte offsets in a block of a 32-value type: the nibbles (Q8_0: the
 * codes) and the high bits (Q5_0 / Q5_1). */
AI size_t i8_qs_at(kvlm_dtype t) {
    return t == KVLM_Q4_1 ? 4 : t == KVLM_Q5_0 ? 6 : t == KVLM_Q5_1 ? 8 : 2;
}
AI size_t i8_qh_at(kvlm_dtype t) { return t == KVLM_Q5_1 ? 4 : 2; }
AI int i8_has5(kvlm_dtype t) { return t == KVLM_Q5_0 || t == KVLM_Q5_1; }

/* The weight vector of blocks b0 (and b1 when BPV == 2; NULL: zeros):
 * unsigned codes, 5-bit ones with their high bit as bit 4. */
AI vq i8_wvec(kvlm_dtype t, const unsigned char *b0, const unsigned char *b1) {
    if (t == KVLM_Q8_0) return Q_W8(b0, b1);
    const size_t qs = i8_qs_at(t), qh = i8_qh_at(t);
    const vq v = Q_W4(b0 + qs, b1 ? b1 + qs : NULL);
    return i8_has5(t) ? Q_OR(v, Q_HB(b0 + qh, b1 ? b1 + qh : NULL)) : v;
}

AI vf i8_wscale(const unsigned char *b0, const unsigned char *b1) {
    return Q_HALVES(i8_half(b0), b1 ? i8_half(b1) : 0.0f);
}

/* i8_wscale for the decode tile: the same floats, the f16 scales
 * broadcast and converted as vectors (Q_HALVES_F16) where the ISA file
 * defines it, without a round trip through scalar registers. */
AI vf i8_wscale_dec(const unsigned char *b0, const unsigned char *b1) {
#ifdef Q_HALVES_F16
    return Q_HALVES_F16(b0, b1);
#else
    return i8_wscale(b0, b1);
#endif
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

AI int i8_off(kvlm_dtype t) {
    return t == KVLM_Q8_0 ? 128 : t == KVLM_Q4_0 ? 8 : t == KVLM_Q5_0 ? 16 : t == KVLM_Q6_K ? 32 : 0;
}
/* Types with an offset b per 32 values: Q4_K / Q5_K (dmin * m) and Q4_1 /
 * Q5_1 (b = -m, the block's f16 offset). */
AI int i8_hasmin(kvlm_dtype t) { return t == KVLM_Q4_K || t == KVLM_Q5_K || t == KVLM_Q4_1 || t == KVLM_Q5_1; }

/* The weight rows [n, n + nr) unpacked for i8_tile: row j's weight bytes
 * at pc + j * kp (vector p at p * 4 * VW), the scales of its lanes at
 * ps + j * kp / 4 (lane order), its sub-block offsets (Q4_K / Q5_K) at
 * pb + j * nbq. Built once per weight tile and read by every tile of rows
 * of x. */
AI void i8_panel(const i8_act *a, int nb, const unsigned char *w, size_t rb, kvlm_dtype t, int nr, int n,
                 unsigned char *pc, float *ps, float *pb) {
    for (int j = 0; j < nr; j++) {
        const unsigned char *wr = w + (size_t)(n + j) * rb;
        if (i8_b32(t)) {
            const size_t bb = dtype_block_bytes(t);
            const int full = nb / BPV;
            for (int p = 0; p < a->nv; p++) {
                const unsigned char *b0 = wr + (size_t)p * BPV * bb;
                const unsigned char *b1 = BPV == 2 && p < full ? b0 + bb : NULL;
                Q_STORE(pc + (size_t)j * a->kp + (size_t)p * 4 * VW, i8_wvec(t, b0, b1));
                V_STOREU(ps + (size_t)j * (a->kp / 4) + (size_t)p * VW, i8_wscale(b0, b1));
            }
            if (i8_hasmin(t)) {
                float *bw = pb + (size_t)j * a->nbq;
                for (int b = 0; b < a->nbq; b++) bw[b] = b < nb ? -i8_half(wr + (size_t)b * bb + 2) : 0.0f;
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
    const size_t bb = dtype_block_bytes(t);
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
            acc[j] = V_FMA(V_FMS(Q_TO_F(Q_DP(Q_ZERO(), i8_wvec(t, b0, b1), xv)), dv, ev), i8_wscale_dec(b0, b1), acc[j]);
        }
    }
    if (i8_hasmin(t)) /* the offsets: + m_b * dx_b * (sum of block b's codes) */
        for (int c = 0; c < a->nbq; c += VW) {
            const vf ev = V_LOADU(a->ex + (size_t)m * a->nbq + c);
#pragma GCC unroll 8
            for (int j = 0; j < nr; j++) {
                float mb[VW];
                for (int b = 0; b < VW; b++)
                    mb[b] = c + b < nb ? i8_half(wr + (size_t)j * rb + (size_t)(c + b) * bb + 2) : 0.0f;
                acc[j] = V_FMA(V_LOADU(mb), ev, acc[j]);
            }
        }
#pragma GCC unroll 8
    for (int j = 0; j < nr; j++) y[(size_t)m * ldy + n + j] = V_REDUCE(acc[j]) + (bias ? bias[n + j] : 0.0f);
}

#include "kernels/quant_int8_batch.h"

/* i8_tile with mr (1 .. MR_MAX) a run-time count made compile-time. */
AI void i8_tile_r(const i8_act *a, kvlm_dtype t, const unsigned char *pc, const float *ps, const float *pb, int mr,
                  int nr, int m, int n, const float *bias, float *y, int ldy) {
#define I8_TILE_CASE(r)                                                                                        \
    case r: i8_tile(a, t, pc, ps, pb, r, nr, m, n, bias, y, ldy); break;
    switch (mr) {
        I8_TILE_CASE(1)
        I8_TILE_CASE(2)
#if MR_MAX >= 3
        I8_TILE_CASE(3)
#endif
#if MR_MAX >= 4
        I8_TILE_CASE(4)
#endif
    default: break;
    }
#undef I8_TILE_CASE
}

/* Rows [n0, n1) of w against the M rows of x. One row of a 32-value
 * block type (decode, the weights streamed once) reads the blocks in
 * place (i8_tile1). Otherwise each NR_MAX weight rows are unpacked once
 * into the panel and every row of x goes through it while it is in L1, in
 * tiles of MR_MAX rows and one of the rest: a batch of decode rows reads
 * each weight once. Per output the float operations are those of
 * i8_tile1 (and the same whatever the tile), so a row gives the same bits
 * alone or in any batch. */
AI void i8_rows_t(const i8_act *a, int M, const kern_matrix *w, int n0, int n1, const float *bias, float *y,
                  int ldy, kvlm_dtype t, unsigned char *pc, float *ps, float *pb) {
    const int K = w->cols, nb = K / QK;
    const size_t rb = dtype_row_bytes(t, K, NULL);
    const unsigned char *wd = w->data;
    if (M == 1 && i8_b32(t)) {
        int n = n0;
        for (; n + NR1 <= n1; n += NR1) i8_tile1(a, nb, wd, rb, t, NR1, 0, n, bias, y, ldy);
        for (; n < n1; n++) i8_tile1(a, nb, wd, rb, t, 1, 0, n, bias, y, ldy);
        return;
    }
    if (i8_b32(t)) { /* a batch of decode rows: the blocks read in place */
        int n = n0;
        for (; n + NR_MAX <= n1; n += NR_MAX)
            for (int m = 0; m < M; m += MR_MAX)
                i8_tilem_r(a, nb, wd, rb, t, M - m < MR_MAX ? M - m : MR_MAX, NR_MAX, m, n, bias, y, ldy, m == 0);
        for (; n < n1; n++)
            for (int m = 0; m < M; m += MR_MAX)
                i8_tilem_r(a, nb, wd, rb, t, M - m < MR_MAX ? M - m : MR_MAX, 1, m, n, bias, y, ldy, 0);
        return;
    }
    const int tiled = M / MR_MAX * MR_MAX;
    int n = n0;
    for (; n + NR_MAX <= n1; n += NR_MAX) {
        /* the next tile's rows requested while this one is unpacked */
        const size_t nx = (size_t)(n + NR_MAX) * rb;
        i8_prefetch(wd, nx, nx + (size_t)(n + 2 * NR_MAX <= n1 ? NR_MAX : n1 - n - NR_MAX) * rb);
        i8_panel(a, nb, wd, rb, t, NR_MAX, n, pc, ps, pb);
        for (int m = 0; m < tiled; m += MR_MAX) i8_tile(a, t, pc, ps, pb, MR_MAX, NR_MAX, m, n, bias, y, ldy);
        if (tiled < M) i8_tile_r(a, t, pc, ps, pb, M - tiled, NR_MAX, tiled, n, bias, y, ldy);
    }
    for (; n < n1; n++) {
        i8_panel(a, nb, wd, rb, t, 1, n, pc, ps, pb);
        for (int m = 0; m < tiled; m += MR_MAX) i8_tile(a, t, pc, ps, pb, MR_MAX, 1, m, n, bias, y, ldy);
        if (tiled < M) i8_tile_r(a, t, pc, ps, pb, M - tiled, 1, tiled, n, bias, y, ldy);
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

/* Fewer rows of a K-quant than this go to their int8 decode kernel
 * (quant_int8_decode.h, the blocks read in place, each block unpacked once
 * for a tile of up to 4 rows of x, the weight tile left in L1 for the next
 * tile of rows): per call on one thread (bench/batch_bench.c, 2048 x
 * 2048) it beats the panel kernels at every row count below the prefill
 * kernels (Q4_K at 12 rows: 0.91 against 1.35 ms), so on avx512-vnni the
 * K-quant panels of the small-row path run only if that kernel declines.
 * avx2-vnni keeps 8: its decode kernel takes the rows of x one at a time
 * and has not been measured against the panels on a CPU of that level. */
#ifdef __AVX512F__
#define I8_K_DECODE_ROWS 16
#else
#define I8_K_DECODE_ROWS 8
#endif
int QNAME(quant_int8_min_rows)(kvlm_dtype t) { return i8_b32(t) ? 1 : I8_K_DECODE_ROWS; }

size_t QNAME(quant_int8_prep_bytes)(int M, const kern_matrix *w, size_t *panel);
void QNAME(quant_int8_prep)(const float *x, int M, const kern_matrix *w, int m0, int m1, void *buf);
void QNAME(quant_int8_rows_prep)(const void *prep, void *panel, const kern_matrix *w, int n0, int n1,
                                 const float *bias, float *y, int ldy);

/* The rows below the prefill kernels' (matmul_rows with M < PR_MIN_ROWS,
 * from quant_int8_min_rows up): the activations a of all M rows, prepared
 * once per matmul (quant_int8_prep.c's prepared form), then per item
 * i8_rows_t, with a panel of its own for the K-quants. Layout of the prepared bytes, for
 * M rows: spread scales and corrections (fbytes per row), block sums
 * (Q4_K / Q5_K, exb per row), codes (kp per row). */
typedef struct i8_small_shape {
    int nb, nv, nbq;
    size_t kp, fbytes, exb;
} i8_small_shape;

static i8_small_shape QNAME(i8_small_shape)(const kern_matrix *w) {
    const int K = w->cols, nb = K / QK, nv = (nb + BPV - 1) / BPV, nbq = (nb + VW - 1) / VW * VW;
    return (i8_small_shape){nb, nv, nbq, (size_t)nv * 4 * VW, (size_t)nv * 2 * VW * sizeof(float),
                            i8_hasmin(w->dtype) ? (size_t)nbq * sizeof(float) : 0};
}

static i8_act QNAME(i8_small_act)(const void *buf, int M, const i8_small_shape *s) {
    const unsigned char *b = buf;
    return (i8_act){(const int8_t *)(b + (size_t)M * (s->fbytes + s->exb)), (const float *)b,
                    (const float *)(b + (size_t)M * s->fbytes), s->kp, s->nv, s->nbq};
}

size_t QNAME(quant_int8_small_bytes)(int M, const kern_matrix *w, size_t *panel) {
    const kvlm_dtype t = w->dtype;
    if (!quant_int8_supports(t) || M < QNAME(quant_int8_min_rows)(t)) return 0;
    const i8_small_shape s = QNAME(i8_small_shape)(w);
    const int small = i8_b32(t);
    *panel = small ? 0 : (size_t)NR_MAX * (s.kp + s.kp + s.exb); /* the 32-value types read blocks in place */
    return (size_t)M * (s.fbytes + s.exb + s.kp);
}

void QNAME(quant_int8_small_prep)(const float *x, int M, const kern_matrix *w, int m0, int m1, void *buf) {
    const i8_small_shape s = QNAME(i8_small_shape)(w);
    const i8_act a = QNAME(i8_small_act)(buf, M, &s);
    QNAME(i8_quantize)(x + (size_t)m0 * w->cols, m1 - m0, w->cols, w->dtype, (int8_t *)a.xq + (size_t)m0 * s.kp,
                       (float *)a.f + (size_t)m0 * s.fbytes / sizeof(float),
                       (float *)a.ex + (size_t)m0 * s.exb / sizeof(float), s.kp, s.nv, s.nbq);
}

void QNAME(quant_int8_small_rows)(const void *buf, int M, void *panel, const kern_matrix *w, int n0, int n1,
                                  const float *bias, float *y, int ldy) {
    const i8_small_shape s = QNAME(i8_small_shape)(w);
    const i8_act a = QNAME(i8_small_act)(buf, M, &s);
    /* the panel: scales, offsets (Q4_K / Q5_K), bytes of NR_MAX weight rows */
    float *ps = panel, *pb = ps + (size_t)NR_MAX * s.kp / 4;
    unsigned char *pc = (unsigned char *)(pb + (size_t)NR_MAX * s.exb / sizeof(float));
    switch (w->dtype) {
    case KVLM_Q8_0: i8_rows_t(&a, M, w, n0, n1, bias, y, ldy, KVLM_Q8_0, pc, ps, pb); break;
    case KVLM_Q4_0: i8_rows_t(&a, M, w, n0, n1, bias, y, ldy, KVLM_Q4_0, pc, ps, pb); break;
    case KVLM_Q4_1: i8_rows_t(&a, M, w, n0, n1, bias, y, ldy, KVLM_Q4_1, pc, ps, pb); break;
    case KVLM_Q5_0: i8_rows_t(&a, M, w, n0, n1, bias, y, ldy, KVLM_Q5_0, pc, ps, pb); break;
    case KVLM_Q5_1: i8_rows_t(&a, M, w, n0, n1, bias, y, ldy, KVLM_Q5_1, pc, ps, pb); break;
    case KVLM_Q4_K: i8_rows_t(&a, M, w, n0, n1, bias, y, ldy, KVLM_Q4_K, pc, ps, pb); break;
    case KVLM_Q5_K: i8_rows_t(&a, M, w, n0, n1, bias, y, ldy, KVLM_Q5_K, pc, ps, pb); break;
    default: i8_rows_t(&a, M, w, n0, n1, bias, y, ldy, KVLM_Q6_K, pc, ps, pb); break;
    }
}

int QNAME(quant_int8_matmul_rows)(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias,
                                  float *y, int ldy) {
    const kvlm_dtype t = w->dtype;
    if (!quant_int8_supports(t) || M < QNAME(quant_int8_min_rows)(t)) return 0;
    size_t pan = 0;
    const size_t pre = QNAME(quant_int8_prep_bytes)(M, w, &pan);
    if (pre) {
        _Alignas(64) unsigned char sbuf[32768];
        unsigned char *pb = pre + pan <= sizeof sbuf ? sbuf : aligned_alloc(64, (pre + pan + 63) & ~(size_t)63);
        if (!pb) return 0;
        QNAME(quant_int8_prep)(x, M, w, 0, M, pb);
        QNAME(quant_int8_rows_prep)(pb, pb + pre, w, n0, n1, bias, y, ldy);
        if (pb != sbuf) free(pb);
        return 1;
    }
    const size_t act = QNAME(quant_int8_small_bytes)(M, w, &pan), need = act + pan;
    _Alignas(64) unsigned char stack[32768];
    unsigned char *buf = need <= sizeof stack ? stack : aligned_alloc(64, (need + 63) & ~(size_t)63);
    if (!buf) return 0;
    if (i8_b32(t) && M == 1) { /* decode: the first tile requested before the activations are quantised */
        const size_t rb = dtype_row_bytes(t, w->cols, NULL);
        i8_prefetch((const unsigned char *)w->data + (size_t)n0 * rb, 0, (size_t)(n1 - n0 < NR1 ? n1 - n0 : NR1) * rb);
    }
    QNAME(quant_int8_small_prep)(x, M, w, 0, M, buf);
    QNAME(quant_int8_small_rows)(buf, M, buf + act, w, n0, n1, bias, y, ldy);
    if (buf != stack) free(buf);
    return 1;
}

void QNAME(quant_int8_quantize_row)(const float *x, int K, int8_t *q, float *d) { quantize_x_row(x, K / QK, q, d); }

/*
 * Prefill (M >= PR_MIN_ROWS): outputs in the lanes. The activations are
 * prepared once per matmul (QNAME(quant_int8_prep), shared by every work
 * item) in tiles of PR_MR rows (the last one padded with zero rows); per
 * tile and G-value group g (G = 16 for Q6_K, else 32): the codes, chunk c
 * (values 4c .. 4c + 3) of the PR_MR rows side by side, then per row the
 * int32 start -off * S (S the sum of the group's codes), the block scale
 * dx and dx * S (Q4_K / Q5_K). A work item unpacks PR_NP = PR_NV * VW
 * weight rows at a time into a panel whose vectors hold, for chunk c, the
 * unsigned codes of row j in lane j, with the group scales a (and offsets
 * b) of the rows as float vectors. A PR_MR x PR_NP tile then costs, per
 * group, row and vector of outputs, G / 4 vpdpbusd (the row's 4 code
 * bytes broadcast), one conversion, one multiply by dx and one FMA with a
 * (one FNMA more with b for Q4_K / Q5_K): the lane sum r of the group is
 * exact in int32 and y += a * (dx * (r - off * S)) - b * (dx * S).
 * Every output's float operations are the same whatever its place in a
 * tile, panel, row chunk or work item, so any split gives the same bits.
 */
#define PR_HDR 64
#define PR_NP (PR_NV * VW)

typedef struct pr_head {
    int M, K, ng, gs, nt;
    size_t gbytes; /* bytes per tile and group */
} pr_head;

AI int pr_gs(kvlm_dtype t) { return t == KVLM_Q6_K ? 16 : 32; }
AI size_t pr_gbytes(int gs) { return (size_t)gs * PR_MR + 3 * sizeof(float) * PR_MR; }

size_t QNAME(quant_int8_prep_bytes)(int M, const kern_matrix *w, size_t *panel) {
    if (!quant_int8_supports(w->dtype) || M < PR_MIN_ROWS) return 0;
    const int K = w->cols, gs = pr_gs(w->dtype), ng = K / gs, nt = (M + PR_MR - 1) / PR_MR;
    /* the gathers' row offsets are int32 */
    if (dtype_row_bytes(w->dtype, K, NULL) > (size_t)INT32_MAX / PR_NP) return 0;
    /* codes, scales and offsets of the PR_NP rows; 64 for the alignment */
    *panel = 64 + (size_t)PR_NP * K + 2 * sizeof(float) * PR_NP * (size_t)ng;
    return PR_HDR + (size_t)nt * ng * pr_gbytes(gs);
}

AI void pr_put_row(unsigned char *tile, int i, const int8_t *q, const float *d, int ng, int gs, int off) {
    const size_t gb = pr_gbytes(gs);
    for (int g = 0; g < ng; g++) {
        unsigned char *gp = tile + (size_t)g * gb;
        const int8_t *qg = q + (size_t)g * gs;
        int s = 0;
        for (int c = 0; c < gs / 4; c++) {
            memcpy(gp + ((size_t)c * PR_MR + i) * 4, qg + 4 * c, 4);
            s += qg[4 * c] + qg[4 * c + 1] + qg[4 * c + 2] + qg[4 * c + 3];
        }
        int32_t *st = (int32_t *)(gp + (size_t)gs * PR_MR);
        float *dx = (float *)(st + PR_MR), *dxs = dx + PR_MR;
        const float dg = d[g * gs / QK];
        st[i] = -off * s, dx[i] = dg, dxs[i] = dg * (float)s;
    }
}

void QNAME(quant_int8_prep)(const float *x, int M, const kern_matrix *w, int m0, int m1, void *buf) {
    const kvlm_dtype t = w->dtype;
    const int K = w->cols, gs = pr_gs(t), ng = K / gs, nt = (M + PR_MR - 1) / PR_MR, off = i8_off(t);
    const size_t gb = pr_gbytes(gs);
    unsigned char *b = buf;
    *(pr_head *)b = (pr_head){M, K, ng, gs, nt, gb};
    unsigned char *tiles = b + PR_HDR;
    int8_t q[1024];
    float d[1024 / QK];
    for (int m = m0; m < m1; m++)
        for (int k0 = 0; k0 < K; k0 += 1024) {
            const int kn = K - k0 < 1024 ? K - k0 : 1024;
            quantize_x_row(x + (size_t)m * K + k0, kn / QK, q, d);
            pr_put_row(tiles + ((size_t)(m / PR_MR) * ng + k0 / gs) * gb, m % PR_MR, q, d, kn / gs, gs, off);
        }
    if (m1 == M) {
        memset(q, 0, sizeof q);
        memset(d, 0, sizeof d);
        for (int m = M; m < nt * PR_MR; m++)
            for (int k0 = 0; k0 < K; k0 += 1024) {
                const int kn = K - k0 < 1024 ? K - k0 : 1024;
                pr_put_row(tiles + ((size_t)(m / PR_MR) * ng + k0 / gs) * gb, m % PR_MR, q, d, kn / gs, gs, off);
            }
    }
}

/* Bits s .. s + 3 of each int32 lane of qh as bit 4 of the lane's bytes
 * 0 .. 3 (the high bits of four 5-bit codes): the 4-bit field times
 * 0x2040810 puts bit k at 8k + 4 (the shifted copies do not overlap). */
AI vq pr_hbits(vq qh, int s) {
    return Q_AND(Q_MULLO32(Q_AND(Q_SRL32(qh, s), Q_SET32(15)), Q_SET32(0x2040810)), Q_SET32(0x10101010));
}

/* Weight rows [n, n + nr) (nr <= PR_NP) into the panel; lanes nr ..
 * PR_NP - 1 repeat row n + nr - 1 with zero scales (outputs not stored).
 * The codes are gathered straight from the blocks, 4 bytes of every row
 * per gather, and unpacked in the lanes (nibbles, Q5_K / Q6_K high bits,
 * Q8_0's + 128); the scales are read row by row. */
AI void pr_panel(kvlm_dtype t, const unsigned char *w, size_t rb, int K, int n, int nr, unsigned char *pc, float *pa,
                 float *pb) {
    const int gs = pr_gs(t), nb = K / QK;
    int32_t ridx[PR_NP];
    for (int j = 0; j < PR_NP; j++) ridx[j] = (j < nr ? j : nr - 1) * (int32_t)rb;
    const unsigned char *w0 = w + (size_t)n * rb;
    if (i8_b32(t)) {
        const size_t bb = dtype_block_bytes(t), qs = i8_qs_at(t);
        vq vi[PR_NV];
        for (int v = 0; v < PR_NV; v++) vi[v] = Q_LOAD(ridx + v * VW);
        const vq m4 = Q_SET8(15), x80 = Q_SET8((char)0x80);
        for (int bk = 0; bk < nb; bk++) {
            const unsigned char *blk = w0 + (size_t)bk * bb, *q = blk + qs;
            unsigned char *o = pc + (size_t)bk * 8 * PR_NP * 4;
            for (int v = 0; v < PR_NV; v++) {
                if (t == KVLM_Q8_0)
                    for (int c = 0; c < 8; c++)
                        Q_STORE(o + ((size_t)c * PR_NV + v) * 4 * VW, Q_XOR(Q_GATHER(q + 4 * c, vi[v]), x80));
                else {
                    const vq qh = i8_has5(t) ? Q_GATHER(blk + i8_qh_at(t), vi[v]) : Q_ZERO();
                    for (int c = 0; c < 4; c++) {
                        const vq g = Q_GATHER(q + 4 * c, vi[v]);
                        vq lo = Q_AND(g, m4), hi = Q_AND(Q_SRLI16(g, 4), m4);
                        if (i8_has5(t)) /* values 4c .. 4c + 3 and 16 + 4c .. */
                            lo = Q_OR(lo, pr_hbits(qh, 4 * c)), hi = Q_OR(hi, pr_hbits(qh, 16 + 4 * c));
                        Q_STORE(o + ((size_t)c * PR_NV + v) * 4 * VW, lo);
                        Q_STORE(o + ((size_t)(c + 4) * PR_NV + v) * 4 * VW, hi);
                    }
                }
            }
            for (int j = 0; j < PR_NP; j++) {
                const unsigned char *bj = blk + (size_t)j * rb;
                pa[(size_t)bk * PR_NP + j] = j < nr ? i8_half(bj) : 0.0f;
                if (i8_hasmin(t)) pb[(size_t)bk * PR_NP + j] = j < nr ? -i8_half(bj + 2) : 0.0f;
            }
        }
        return;
    }
    /* K-quants: codes gathered from the super-blocks, chunk v / 4 of
     * value v at o + (v / 4) * PR_NP * 4 */
    const size_t bb = dtype_block_bytes(t);
    const int gpb = QK_K / gs;
    vq vi[PR_NV];
    for (int v = 0; v < PR_NV; v++) vi[v] = Q_LOAD(ridx + v * VW);
    const vq m4 = Q_SET8(15), m1 = Q_SET8(1), m2 = Q_SET8(3);
    for (int kb = 0; kb < K / QK_K; kb++) {
        const unsigned char *b0 = w0 + (size_t)kb * bb;
        unsigned char *o = pc + (size_t)kb * (QK_K / 4) * PR_NP * 4;
#define PR_OUT(ch, v, x) Q_STORE(o + ((size_t)(ch) * PR_NV + (v)) * 4 * VW, (x))
        for (int v = 0; v < PR_NV; v++) {
            if (t == KVLM_Q6_K) {
                for (int h = 0; h < 2; h++)
                    for (int l = 0; l < 32; l += 4) {
                        const vq qh = Q_GATHER(b0 + offsetof(blk_q6_k, qh) + 32 * h + l, vi[v]);
                        const vq q0 = Q_GATHER(b0 + offsetof(blk_q6_k, ql) + 64 * h + l, vi[v]);
                        const vq q1 = Q_GATHER(b0 + offsetof(blk_q6_k, ql) + 64 * h + 32 + l, vi[v]);
                        for (int c = 0; c < 4; c++) {
                            const vq lo = Q_AND(c < 2 ? (c ? q1 : q0) : Q_SRLI16(c & 1 ? q1 : q0, 4), m4);
                            const vq hi = Q_AND(Q_SRLI16(qh, 2 * c), m2);
                            PR_OUT((128 * h + 32 * c + l) / 4, v, Q_OR(lo, Q_SLLI16(hi, 4)));
                        }
                    }
            } else {
                const unsigned char *qs = b0 + (t == KVLM_Q4_K ? offsetof(blk_q4_k, qs) : offsetof(blk_q5_k, qs));
                for (int c = 0; c < 8; c++) {
                    const vq qh = t == KVLM_Q5_K ? Q_GATHER(b0 + offsetof(blk_q5_k, qh) + 4 * c, vi[v]) : Q_ZERO();
                    for (int p = 0; p < 4; p++) {
                        const vq g = Q_GATHER(qs + 32 * p + 4 * c, vi[v]);
                        vq lo = Q_AND(g, m4), hi = Q_AND(Q_SRLI16(g, 4), m4);
                        if (t == KVLM_Q5_K) {
                            lo = Q_OR(lo, Q_SLLI16(Q_AND(Q_SRLI16(qh, 2 * p), m1), 4));
                            hi = Q_OR(hi, Q_SLLI16(Q_AND(Q_SRLI16(qh, 2 * p + 1), m1), 4));
                        }
                        PR_OUT(16 * p + c, v, lo);
                        PR_OUT(16 * p + 8 + c, v, hi);
                    }
                }
            }
        }
#undef PR_OUT
        for (int j = 0; j < PR_NP; j++) {
            const unsigned char *blk = b0 + (size_t)(j < nr ? j : 0) * rb;
            float *ag = pa + (size_t)kb * gpb * PR_NP + j, *bg = pb + (size_t)kb * gpb * PR_NP + j;
            if (t == KVLM_Q6_K) {
                const float d = j < nr ? qb_f16(blk + offsetof(blk_q6_k, d)) : 0.0f;
                for (int g = 0; g < 16; g++) ag[(size_t)g * PR_NP] = d * (float)((const blk_q6_k *)blk)->scales[g];
            } else {
                const float d = j < nr ? qb_f16(blk) : 0.0f, dmin = j < nr ? qb_f16(blk + 2) : 0.0f;
                for (int g = 0; g < 8; g++) {
                    int sc, mn;
                    qb_scale_min_k4(blk + 4, g, &sc, &mn);
                    ag[(size_t)g * PR_NP] = d * (float)sc, bg[(size_t)g * PR_NP] = dmin * (float)mn;
                }
            }
        }
    }
}

/* One tile: PR_MR rows of x from row m (the first mr stored) against the
 * panel's PR_NP rows from n (the first nr stored). */
AI void pr_tile(const unsigned char *tp, int ng, kvlm_dtype t, const unsigned char *pc, const float *pa,
                const float *pb, int m, int mr, int n, int nr, const float *bias, float *y, int ldy) {
    const int gs = pr_gs(t), cpg = gs / 4;
    const size_t gb = pr_gbytes(gs);
    vf acc[PR_MR][PR_NV];
#pragma GCC unroll 16
    for (int i = 0; i < PR_MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < PR_NV; v++) acc[i][v] = V_ZERO();
    for (int g = 0; g < ng; g++) {
        const unsigned char *gp = tp + (size_t)g * gb;
        const int32_t *st = (const int32_t *)(gp + (size_t)gs * PR_MR);
        const float *dx = (const float *)(st + PR_MR), *dxs = dx + PR_MR;
        vq ia[PR_MR][PR_NV];
#pragma GCC unroll 16
        for (int i = 0; i < PR_MR; i++)
#pragma GCC unroll 4
            for (int v = 0; v < PR_NV; v++) ia[i][v] = i8_off(t) ? Q_SET32(st[i]) : Q_ZERO();
        const unsigned char *pg = pc + (size_t)g * cpg * PR_NP * 4;
#pragma GCC unroll 8
        for (int c = 0; c < cpg; c++) {
            vq wv[PR_NV];
#pragma GCC unroll 4
            for (int v = 0; v < PR_NV; v++) wv[v] = Q_LOAD(pg + ((size_t)c * PR_NV + v) * 4 * VW);
#pragma GCC unroll 16
            for (int i = 0; i < PR_MR; i++) {
                int32_t xb;
                memcpy(&xb, gp + ((size_t)c * PR_MR + i) * 4, 4);
                const vq xv = Q_SET32(xb);
#pragma GCC unroll 4
                for (int v = 0; v < PR_NV; v++) ia[i][v] = Q_DP(ia[i][v], wv[v], xv);
            }
        }
        vf av[PR_NV];
#pragma GCC unroll 4
        for (int v = 0; v < PR_NV; v++) av[v] = V_LOADU(pa + ((size_t)g * PR_NV + v) * VW);
#pragma GCC unroll 16
        for (int i = 0; i < PR_MR; i++) {
            const vf dv = V_SET1(dx[i]);
#pragma GCC unroll 4
            for (int v = 0; v < PR_NV; v++) acc[i][v] = V_FMA(V_MUL(Q_TO_F(ia[i][v]), dv), av[v], acc[i][v]);
        }
        if (i8_hasmin(t)) {
#pragma GCC unroll 4
            for (int v = 0; v < PR_NV; v++) av[v] = V_LOADU(pb + ((size_t)g * PR_NV + v) * VW);
#pragma GCC unroll 16
            for (int i = 0; i < PR_MR; i++) {
                const vf sv = V_SET1(dxs[i]);
#pragma GCC unroll 4
                for (int v = 0; v < PR_NV; v++) acc[i][v] = V_FNMA(av[v], sv, acc[i][v]);
            }
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < PR_MR; i++) {
        if (i >= mr) break;
        float *yr = y + (size_t)(m + i) * ldy + n;
#pragma GCC unroll 4
        for (int v = 0; v < PR_NV; v++) {
            if (nr >= (v + 1) * VW) {
                V_STOREU(yr + v * VW, bias ? V_ADD(acc[i][v], V_LOADU(bias + n + v * VW)) : acc[i][v]);
            } else if (nr > v * VW) {
                float o[VW];
                V_STOREU(o, acc[i][v]);
                for (int j = v * VW; j < nr; j++) yr[j] = bias ? o[j - v * VW] + bias[n + j] : o[j - v * VW];
            }
        }
    }
}

AI void pr_rows_t(const void *prep, void *panel, const kern_matrix *w, int n0, int n1, const float *bias, float *y,
                  int ldy, kvlm_dtype t) {
    const unsigned char *b = prep;
    const pr_head *h = (const pr_head *)b;
    const int M = h->M, K = h->K, ng = h->ng, nt = h->nt;
    const unsigned char *tiles = b + PR_HDR;
    unsigned char *pc = (unsigned char *)(((uintptr_t)panel + 63) & ~(uintptr_t)63);
    float *pa = (float *)(pc + (size_t)PR_NP * K), *pb = pa + (size_t)PR_NP * ng;
    const size_t rb = dtype_row_bytes(t, K, NULL), tb = (size_t)ng * h->gbytes;
    /* tiles of x in chunks whose codes stay in L2 while the panels pass */
    int tc = (int)(PR_CHUNK_BYTES / tb);
    if (tc < 1) tc = 1;
    for (int t0 = 0; t0 < nt; t0 += tc) {
        const int t1 = t0 + tc < nt ? t0 + tc : nt;
        for (int n = n0; n < n1; n += PR_NP) {
            const int nr = n1 - n < PR_NP ? n1 - n : PR_NP;
            pr_panel(t, w->data, rb, K, n, nr, pc, pa, pb);
            for (int ti = t0; ti < t1; ti++) {
                const int m = ti * PR_MR, mr = M - m < PR_MR ? M - m : PR_MR;
                pr_tile(tiles + (size_t)ti * tb, ng, t, pc, pa, pb, m, mr, n, nr, bias, y, ldy);
            }
        }
    }
}

void QNAME(quant_int8_rows_prep)(const void *prep, void *panel, const kern_matrix *w, int n0, int n1,
                                 const float *bias, float *y, int ldy) {
    switch (w->dtype) {
    case KVLM_Q8_0: pr_rows_t(prep, panel, w, n0, n1, bias, y, ldy, KVLM_Q8_0); break;
    case KVLM_Q4_0: pr_rows_t(prep, panel, w, n0, n1, bias, y, ldy, KVLM_Q4_0); break;
    case KVLM_Q4_1: pr_rows_t(prep, panel, w, n0, n1, bias, y, ldy, KVLM_Q4_1); break;
    case KVLM_Q5_0: pr_rows_t(prep, panel, w, n0, n1, bias, y, ldy, KVLM_Q5_0); break;
    case KVLM_Q5_1: pr_rows_t(prep, panel, w, n0, n1, bias, y, ldy, KVLM_Q5_1); break;
    case KVLM_Q4_K: pr_rows_t(prep, panel, w, n0, n1, bias, y, ldy, KVLM_Q4_K); break;
    case KVLM_Q5_K: pr_rows_t(prep, panel, w, n0, n1, bias, y, ldy, KVLM_Q5_K); break;
    default: pr_rows_t(prep, panel, w, n0, n1, bias, y, ldy, KVLM_Q6_K); break;
    }
}
