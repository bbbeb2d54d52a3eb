/*
 * SIMD matmul against the block types that quant_simd.h does not cover
 * (Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4 and the 256-value Q2_K, Q3_K, Q4_K,
 * Q5_K, Q6_K, IQ4_XS), written once and instantiated by quant_avx2.c and
 * quant_avx512.c after quant_simd.h. Besides quant_simd.h's vocabulary the
 * including file defines integer lane operations on vi (VW int32 lanes):
 *
 *   VI_U8(p)        the VW bytes at p, zero-extended
 *   VI_SET1(i) VI_IOTA() (0, 1, .. VW-1) VI_AND VI_OR VI_ADD VI_SUB
 *   VI_SRLI(a, n) VI_SLLI(a, n)   shifts by a compile-time count
 *   VI_SRLN(a, n)   shift right by a run-time count (all lanes)
 *   VI_SRLV(a, b)   shift right lane by lane
 *   VI_TO_F(a)      int32 to float
 *   V_LUT16(i, t)   lane k = t[i_k] for a table t of 16 floats (i_k < 16)
 *   V_STOREU(p, v)
 *   VI_I8(p)        the VW bytes at p, sign-extended
 *   V_HALVES(a, b)  (AVX-512 only) lanes 0..7 = a, 8..15 = b
 *   B_LOAD(p)       the VW bytes at p in the low bytes of an __m128i
 *   VI_FROM_B(b)    the low VW bytes of b, zero-extended
 *
 * Some types form their codes in byte lanes (SSE2 on an __m128i) before
 * widening, and fold a constant code offset into the FMA: Q3_K and Q6_K
 * compute a * c - k * a with k * a exact (k a power of two), which is the
 * exact a * (c - k), so the weights stay bit-identical to quant_blocks.h's.
 *
 * Design: a block's sub-block scales are worked out once per weight row
 * (kscales: a and -b as floats, exactly as quant_blocks.h computes them),
 * then each VW-wide chunk of codes is widened from its bytes to int32
 * lanes, converted to float and turned into the exact dequantised weights
 * with one FMA (code * a - b; code * a is exact, so this is the value
 * quant_dequantize_row gives, bit for bit) or one multiply (a table
 * lookup times the scale for IQ4_NL, MXFP4, IQ4_XS). Values are
 * visited in groups (GV values: 32 for the 32-value types and IQ4_XS, 64 for Q4_K /
 * Q5_K, 128 for Q2_K / Q3_K / Q6_K) whose chunks are unrolled, so every
 * byte offset and shift inside a group is a compile-time constant.
 *
 *  - One row of x (decode, the weights stream from memory once): NR1
 *    weight rows at a time, accumulating x * w in one vector per row; the
 *    next tile's rows are prefetched a block's worth per block, as in
 *    quant_simd.h.
 *  - Several rows (prefill): PANEL_ROWS weight rows are dequantised whole
 *    into a panel (PANEL_ROWS x K floats, allocated once per call) and the same
 *    ISA's f32 matmul (simd_template.h, through its kern_ops) runs every
 *    row of x over it, so each weight is widened once per call, not once
 *    per tile of x. If the panel cannot be
 *    allocated the rows of x run one at a time through the decode path
 *    (same values, slower).
 *
 * Activations stay f32 (see quant.h); the result is the f32 matmul of the
 * dequantised matrix up to the order of the partial sums (VW lanes, then a
 * horizontal sum).
 */
#include <stdlib.h>

#include "kernels/quant_blocks.h"

/* IQ4_NL's levels (tensor.h's iq4nl_levels) as floats, for V_LUT16. */
static const float iq4nl_levels_f[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
/* MXFP4's levels (tensor.h's mxfp4_levels) as floats. */
static const float mxfp4_levels_f[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* Values per group (see above) and sub-block scales per block. */
AI int kgroup(kvlm_dtype t) {
    return t == KVLM_Q4_K || t == KVLM_Q5_K ? 64 : t == KVLM_Q2_K || t == KVLM_Q3_K || t == KVLM_Q6_K ? 128 : 32;
}

/* tab[i] = f(i < 8 ? lo : hi) * u[i] for 16 small integers u: the scales
 * and offsets of 8 sub-blocks in one go (products of an f16 and an integer
 * below 2^8, exact). */
AI void kscale16(const vi *u, float lo, float hi, float *tab) {
#if VW == 16
    V_STOREU(tab, V_MUL(VI_TO_F(u[0]), V_HALVES(lo, hi)));
#else
    V_STOREU(tab, V_MUL(VI_TO_F(u[0]), V_SET1(lo)));
    V_STOREU(tab + 8, V_MUL(VI_TO_F(u[1]), V_SET1(hi)));
#endif
}

/* The VW-lane chunks of 16 bytes, zero-extended (signed: sign-extended). */
AI void kbytes16(const unsigned char *p, int sgn, vi *u) {
#pragma GCC unroll 2
    for (int c = 0; c < 16 / VW; c++) u[c] = sgn ? VI_I8(p + c * VW) : VI_U8(p + c * VW);
}

/* sa[s] = a, sb[s] = the signed offset (value = code * a + sb) of each
 * sub-block s of the block at b; the same products quant_blocks.h forms. */
AI void kscales(kvlm_dtype t, const unsigned char *b, float *sa, float *sb) {
    vi u[16 / VW];
    switch (t) {
    case KVLM_Q4_1: case KVLM_Q5_1: sa[0] = qb_f16(b), sb[0] = qb_f16(b + 2); break;
    case KVLM_Q5_0: case KVLM_IQ4_NL: sa[0] = qb_f16(b), sb[0] = 0; break;
    case KVLM_MXFP4: sa[0] = e8m0_half_to_f32(b[0]), sb[0] = 0; break;
    case KVLM_IQ4_XS: {
        const float d = qb_f16(b);
        for (int s = 0; s < 8; s++) sa[s] = d * (float)qb_iq4_xs_scale(b, s), sb[s] = 0;
        break;
    }
    case KVLM_Q4_K: case KVLM_Q5_K: {
        /* the 8 6-bit scales then the 8 6-bit mins, unpacked four at a time */
        uint32_t w[3], o[4];
        memcpy(w, b + 4, 12);
        o[0] = w[0] & 0x3f3f3f3fu;
        o[1] = (w[2] & 0x0f0f0f0fu) | ((w[0] >> 6) & 0x03030303u) << 4;
        o[2] = w[1] & 0x3f3f3f3fu;
        o[3] = ((w[2] >> 4) & 0x0f0f0f0fu) | ((w[1] >> 6) & 0x03030303u) << 4;
        float tab[16];
        kbytes16((const unsigned char *)o, 0, u);
        kscale16(u, qb_f16(b), -qb_f16(b + 2), tab);
        memcpy(sa, tab, 32), memcpy(sb, tab + 8, 32);
        break;
    }
    case KVLM_Q2_K: {
        const float d = qb_f16(b + offsetof(blk_q2_k, d)), dmin = qb_f16(b + offsetof(blk_q2_k, dmin));
        kbytes16(b, 0, u);
        for (int c = 0; c < 16 / VW; c++) {
            V_STOREU(sa + c * VW, V_MUL(VI_TO_F(VI_AND(u[c], VI_SET1(15))), V_SET1(d)));
            V_STOREU(sb + c * VW, V_MUL(VI_TO_F(VI_SRLI(u[c], 4)), V_SET1(-dmin)));
        }
        break;
    }
    case KVLM_Q3_K: {
        /* the 16 6-bit scales, four at a time: low 4 bits from the nibbles of
         * bytes 0..7, high 2 bits from bytes 8..11 */
        uint32_t w[3], o[4];
        memcpy(w, b + offsetof(blk_q3_k, scales), 12);
        for (int i = 0; i < 4; i++)
            o[i] = ((w[i & 1] >> (4 * (i >> 1))) & 0x0f0f0f0fu) | ((w[2] >> (2 * i)) & 0x03030303u) << 4;
        const float d = qb_f16(b + offsetof(blk_q3_k, d));
        kbytes16((const unsigned char *)o, 0, u);
        for (int c = 0; c < 16 / VW; c++) {
            const vf a = V_MUL(VI_TO_F(VI_SUB(u[c], VI_SET1(32))), V_SET1(d));
            V_STOREU(sa + c * VW, a);
            V_STOREU(sb + c * VW, V_MUL(a, V_SET1(-4.0f)));
        }
        break;
    }
    case KVLM_Q6_K: {
        const float d = qb_f16(b + offsetof(blk_q6_k, d));
        kbytes16(b + offsetof(blk_q6_k, scales), 1, u);
        for (int c = 0; c < 16 / VW; c++) {
            const vf a = V_MUL(VI_TO_F(u[c]), V_SET1(d));
            V_STOREU(sa + c * VW, a);
            V_STOREU(sb + c * VW, V_MUL(a, V_SET1(-32.0f)));
        }
        break;
    }
    default: break;
    }
}

/* Low (hi = 0) or high nibbles of the VW bytes at p. */
AI vi knib(const unsigned char *p, int hi) { return hi ? VI_SRLI(VI_U8(p), 4) : VI_AND(VI_U8(p), VI_SET1(15)); }

/* Byte lanes (SSE2 on the VW code bytes, before widening): bit k of each
 * byte at p, as `val` where set and 0 elsewhere. */
AI __m128i kbit(const unsigned char *p, int k, int val) {
    const __m128i m = _mm_set1_epi8((char)(1 << k));
    return _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(B_LOAD(p), m), m), _mm_set1_epi8((char)val));
}

/* Low (hi = 0) or high nibbles of the VW bytes at p, as bytes. */
AI __m128i knib8(const unsigned char *p, int hi) {
    const __m128i b = B_LOAD(p);
    return _mm_and_si128(hi ? _mm_srli_epi16(b, 4) : b, _mm_set1_epi8(15));
}

/* The exact weights of chunk c (values g * GV + c * VW ..) of the block at
 * b; g may vary at run time, c must be a compile-time constant. */
AI vf kchunk(kvlm_dtype t, const unsigned char *b, int g, int c, const float *sa, const float *sb) {
    const int off = c * VW; /* within the group */
    switch (t) {
    case KVLM_Q4_1: {
        const vf q = VI_TO_F(knib(b + 4 + off % 16, off >= 16));
        return V_FMA(q, V_SET1(sa[0]), V_SET1(sb[0]));
    }
    case KVLM_Q5_0: case KVLM_Q5_1: {
        const unsigned char *qs = b + (t == KVLM_Q5_0 ? 6 : 8), *qh4 = qs - 4;
        uint32_t qh;
        memcpy(&qh, qh4, 4);
        const vi hb = VI_AND(VI_SRLV(VI_SET1((int)qh), VI_ADD(VI_SET1(off), VI_IOTA())), VI_SET1(1));
        const vi code = VI_OR(knib(qs + off % 16, off >= 16), VI_SLLI(hb, 4));
        if (t == KVLM_Q5_0) return V_MUL(VI_TO_F(VI_SUB(code, VI_SET1(16))), V_SET1(sa[0]));
        return V_FMA(VI_TO_F(code), V_SET1(sa[0]), V_SET1(sb[0]));
    }
    case KVLM_IQ4_NL: return V_MUL(V_LUT16(knib(b + 2 + off % 16, off >= 16), iq4nl_levels_f), V_SET1(sa[0]));
    case KVLM_MXFP4: return V_MUL(V_LUT16(knib(b + 1 + off % 16, off >= 16), mxfp4_levels_f), V_SET1(sa[0]));
    case KVLM_IQ4_XS: /* group g is sub-block g */
        return V_MUL(V_LUT16(knib(b + 8 + 16 * g + off % 16, off >= 16), iq4nl_levels_f), V_SET1(sa[g]));
    case KVLM_Q4_K: {
        const int hi = off / 32, s = 2 * g + hi;
        const vf q = VI_TO_F(knib(b + 16 + 32 * g + off % 32, hi));
        return V_FMA(q, V_SET1(sa[s]), V_SET1(sb[s]));
    }
    case KVLM_Q5_K: {
        const int hi = off / 32, s = 2 * g + hi;
        const __m128i code = _mm_or_si128(knib8(b + 48 + 32 * g + off % 32, hi), kbit(b + 16 + off % 32, 2 * g + hi, 16));
        return V_FMA(VI_TO_F(VI_FROM_B(code)), V_SET1(sa[s]), V_SET1(sb[s]));
    }
    case KVLM_Q2_K: {
        const int j = off / 32, s = 8 * g + off / 16;
        const vi q = VI_AND(VI_SRLI(VI_U8(b + 16 + 32 * g + off % 32), 2 * j), VI_SET1(3));
        return V_FMA(VI_TO_F(q), V_SET1(sa[s]), V_SET1(sb[s]));
    }
    case KVLM_Q3_K: { /* code + 4 = q2 | 4 * hbit; value = a * (code + 4) - 4a */
        const int j = off / 32, s = 8 * g + off / 16;
        const __m128i q2 = _mm_and_si128(_mm_srli_epi16(B_LOAD(b + 32 + 32 * g + off % 32), 2 * j), _mm_set1_epi8(3));
        const __m128i code = _mm_or_si128(q2, kbit(b + off % 32, 4 * g + j, 4));
        return V_FMA(VI_TO_F(VI_FROM_B(code)), V_SET1(sa[s]), V_SET1(sb[s]));
    }
    case KVLM_Q6_K: { /* value = a * code6 - 32a */
        const int cc = off / 32, l0 = off % 32, s = 8 * g + off / 16;
        const __m128i lo = knib8(b + 64 * g + 32 * (cc & 1) + l0, cc >= 2);
        const __m128i qh = B_LOAD(b + 128 + 32 * g + l0); /* bits 2cc, 2cc + 1 to bits 4, 5 */
        const __m128i hs = cc < 2 ? _mm_slli_epi16(qh, 4 - 2 * cc) : cc == 2 ? qh : _mm_srli_epi16(qh, 2);
        const __m128i code = _mm_or_si128(lo, _mm_and_si128(hs, _mm_set1_epi8(0x30)));
        return V_FMA(VI_TO_F(VI_FROM_B(code)), V_SET1(sa[s]), V_SET1(sb[s]));
    }
    default: return V_ZERO();
    }
}

/* One row of x against rows [n, n + nr) (decode). */
AI void ktile1(const float *xr, int K, const unsigned char *w, size_t rb, kvlm_dtype t, int nr, int n,
               const float *bias, float *y) {
    const int bl = dtype_block_len(t), nb = K / bl, gv = kgroup(t);
    const size_t bb = dtype_block_bytes(t);
    vf acc[NR1];
#pragma GCC unroll 8
    for (int j = 0; j < nr; j++) acc[j] = V_ZERO();
    const unsigned char *wr = w + (size_t)n * rb;
    const unsigned char *next = wr + (size_t)nr * rb;
    const size_t step = (size_t)nr * bb;
    for (int b = 0; b < nb; b++) {
        prefetch_range(next, (size_t)b * step, (size_t)(b + 1) * step);
        float sa[NR1][16], sb[NR1][16];
        const unsigned char *blk[NR1];
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) {
            blk[j] = wr + (size_t)j * rb + (size_t)b * bb;
            kscales(t, blk[j], sa[j], sb[j]);
        }
        const float *xb = xr + (size_t)b * bl;
        for (int g = 0; g < bl / gv; g++) {
#pragma GCC unroll 16
            for (int c = 0; c < gv / VW; c++) {
                const vf xv = V_LOADU(xb + g * gv + c * VW);
#pragma GCC unroll 8
                for (int j = 0; j < nr; j++) acc[j] = V_FMA(xv, kchunk(t, blk[j], g, c, sa[j], sb[j]), acc[j]);
            }
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < nr; j++) y[n + j] = V_REDUCE(acc[j]) + (bias ? bias[n + j] : 0.0f);
}

/* Rows [n0, n1) for every row of x through the decode path. */
AI void krows1(const float *x, int M, int K, const unsigned char *wd, size_t rb, kvlm_dtype t, int n0, int n1,
               const float *bias, float *y, int ldy) {
    for (int m = 0; m < M; m++) {
        const float *xr = x + (size_t)m * K;
        float *yr = y + (size_t)m * ldy;
        int n = n0;
        for (; n + NR1 <= n1; n += NR1) ktile1(xr, K, wd, rb, t, NR1, n, bias, yr);
        for (; n < n1; n++) ktile1(xr, K, wd, rb, t, 1, n, bias, yr);
    }
}

/* Dequantises rows [n, n + nr) into panel (nr x K floats). */
AI void kpanel(const unsigned char *wd, size_t rb, int K, kvlm_dtype t, int n, int nr, float *panel) {
    const int bl = dtype_block_len(t), nb = K / bl, gv = kgroup(t);
    const size_t bb = dtype_block_bytes(t);
    for (int j = 0; j < nr; j++)
        for (int b = 0; b < nb; b++) {
            const unsigned char *blk = wd + (size_t)(n + j) * rb + (size_t)b * bb;
            float sa[16], sb[16];
            kscales(t, blk, sa, sb);
            float *out = panel + (size_t)j * K + (size_t)b * bl;
            for (int g = 0; g < bl / gv; g++)
#pragma GCC unroll 16
                for (int c = 0; c < gv / VW; c++) V_STOREU(out + g * gv + c * VW, kchunk(t, blk, g, c, sa, sb));
        }
}

/* Weight rows per panel: a multiple of the f32 matmul's register tile on
 * both ISAs (6 rows on AVX-512, 4 on AVX2; kernels_avx*.c), so the f32
 * kernel runs whole tiles over it. */
#define PANEL_ROWS 12

AI void krows_t(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias, float *y, int ldy,
                kvlm_dtype t) {
    const int K = w->cols;
    const size_t rb = dtype_row_bytes(t, K, NULL);
    const unsigned char *wd = w->data;
    float *panel = M > 1 ? aligned_alloc(64, ((size_t)PANEL_ROWS * K * sizeof(float) + 63) & ~(size_t)63) : NULL;
    if (!panel) {
        krows1(x, M, K, wd, rb, t, n0, n1, bias, y, ldy);
        return;
    }
    /* The panel is an f32 matrix of nr rows: this ISA's f32 matmul runs
     * every row of x over it. */
    const kern_ops *f32 = &QNAME(kern_ops);
    for (int n = n0; n < n1; n += PANEL_ROWS) {
        const int nr = n1 - n < PANEL_ROWS ? n1 - n : PANEL_ROWS;
        kpanel(wd, rb, K, t, n, nr, panel);
        const kern_matrix pm = {KVLM_F32, panel, nr, K, NULL, 0};
        f32->matmul_rows(x, M, &pm, 0, nr, bias ? bias + n : NULL, y + n, ldy);
    }
    free(panel);
}

void QNAME(quant_wide_matmul_rows)(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias,
                                   float *y, int ldy) {
    switch (w->dtype) {
    case KVLM_Q4_1: krows_t(x, M, w, n0, n1, bias, y, ldy, KVLM_Q4_1); break;
    case KVLM_Q5_0: krows_t(x, M, w, n0, n1, bias, y, ldy, KVLM_Q5_0); break;
    case KVLM_Q5_1: krows_t(x, M, w, n0, n1, bias, y, ldy, KVLM_Q5_1); break;
    case KVLM_IQ4_NL: krows_t(x, M, w, n0, n1, bias, y, ldy, KVLM_IQ4_NL); break;
    case KVLM_Q2_K: krows_t(x, M, w, n0, n1, bias, y, ldy, KVLM_Q2_K); break;
    case KVLM_Q3_K: krows_t(x, M, w, n0, n1, bias, y, ldy, KVLM_Q3_K); break;
    case KVLM_Q4_K: krows_t(x, M, w, n0, n1, bias, y, ldy, KVLM_Q4_K); break;
    case KVLM_Q5_K: krows_t(x, M, w, n0, n1, bias, y, ldy, KVLM_Q5_K); break;
    case KVLM_Q6_K: krows_t(x, M, w, n0, n1, bias, y, ldy, KVLM_Q6_K); break;
    case KVLM_MXFP4: krows_t(x, M, w, n0, n1, bias, y, ldy, KVLM_MXFP4); break;
    case KVLM_IQ4_XS: krows_t(x, M, w, n0, n1, bias, y, ldy, KVLM_IQ4_XS); break;
    default: break;
    }
}
