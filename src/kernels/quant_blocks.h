/*
 * Dequantising one block of every block-quantised dtype (layouts in
 * tensor.h) into f32, in plain C: each inner loop runs over 16 or 32 codes
 * with one scale. The reference (quant_scalar.c: quant_dequantize_row and
 * the scalar matmul). The SIMD kernels (quant_wide.h) use its field readers
 * and form the same products with vector instructions; tests check that
 * they multiply exactly these values.
 *
 * The values are exactly the f32 values llama.cpp's dequantize_row_* and
 * gguf-py's dequantize give: each is a * code (+ or -) b with a and b
 * products of an f16 and a small integer, evaluated in that order in f32.
 * a * code is always exact (at most 11 + 7 + 6 significant bits; MXFP4's
 * a is a power of two), so only the offset (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K)
 * rounds; the result does not
 * depend on whether the compiler fuses the multiply and the add.
 *
 * Blocks are read through unsigned char pointers (rows are only 2-byte
 * aligned); f16 fields are read with memcpy. Does no bounds checks: the
 * caller passes a whole block.
 */
#ifndef KVLM_QUANT_BLOCKS_H
#define KVLM_QUANT_BLOCKS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "tensor.h"

#define QB_AI static inline __attribute__((always_inline))

QB_AI float qb_f16(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return f16_to_f32(h);
}

/* 32-value blocks whose codes are split over the two nibbles of 16 bytes:
 * value j from the low nibble of q[j], value j + 16 from the high one. */
QB_AI void qb_q8_0(const unsigned char *b, float *y) {
    const float d = qb_f16(b);
    const int8_t *q = (const int8_t *)(b + 2);
    for (int i = 0; i < 32; i++) y[i] = d * (float)q[i];
}

QB_AI void qb_q4_0(const unsigned char *b, float *y) {
    const float d = qb_f16(b);
    const unsigned char *q = b + 2;
    for (int j = 0; j < 16; j++) y[j] = d * (float)((q[j] & 15) - 8);
    for (int j = 0; j < 16; j++) y[j + 16] = d * (float)((q[j] >> 4) - 8);
}

QB_AI void qb_q4_1(const unsigned char *b, float *y) {
    const float d = qb_f16(b), m = qb_f16(b + 2);
    const unsigned char *q = b + 4;
    for (int j = 0; j < 16; j++) y[j] = d * (float)(q[j] & 15) + m;
    for (int j = 0; j < 16; j++) y[j + 16] = d * (float)(q[j] >> 4) + m;
}

/* Codes of a Q5_0 / Q5_1 block (0..31) into c[32]. */
QB_AI void qb_codes5(const unsigned char *qh4, const unsigned char *q, int32_t *c) {
    uint32_t qh;
    memcpy(&qh, qh4, 4);
    for (int j = 0; j < 16; j++) c[j] = (q[j] & 15) | (int32_t)(((qh >> j) & 1) << 4);
    for (int j = 0; j < 16; j++) c[j + 16] = (q[j] >> 4) | (int32_t)(((qh >> (j + 16)) & 1) << 4);
}

QB_AI void qb_q5_0(const unsigned char *b, float *y) {
    const float d = qb_f16(b);
    int32_t c[32];
    qb_codes5(b + 2, b + 6, c);
    for (int i = 0; i < 32; i++) y[i] = d * (float)(c[i] - 16);
}

QB_AI void qb_q5_1(const unsigned char *b, float *y) {
    const float d = qb_f16(b), m = qb_f16(b + 2);
    int32_t c[32];
    qb_codes5(b + 4, b + 8, c);
    for (int i = 0; i < 32; i++) y[i] = d * (float)c[i] + m;
}

QB_AI void qb_iq4_nl(const unsigned char *b, float *y) {
    const float d = qb_f16(b);
    const unsigned char *q = b + 2;
    for (int j = 0; j < 16; j++) y[j] = d * (float)iq4nl_levels[q[j] & 15];
    for (int j = 0; j < 16; j++) y[j + 16] = d * (float)iq4nl_levels[q[j] >> 4];
}

/* MXFP4: a power-of-two scale times a table integer (at most 4 bits of
 * mantissa), exact for every scale byte (the subnormal ones included). */
QB_AI void qb_mxfp4(const unsigned char *b, float *y) {
    const float d = e8m0_half_to_f32(b[0]);
    const unsigned char *q = b + 1;
    for (int j = 0; j < 16; j++) y[j] = d * (float)mxfp4_levels[q[j] & 15];
    for (int j = 0; j < 16; j++) y[j + 16] = d * (float)mxfp4_levels[q[j] >> 4];
}

/* ------------------------------------------------------- 256-value blocks */

QB_AI void qb_q2_k(const unsigned char *b, float *y) {
    const blk_q2_k *k = (const blk_q2_k *)b;
    const float d = qb_f16(b + offsetof(blk_q2_k, d)), dmin = qb_f16(b + offsetof(blk_q2_k, dmin));
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int half = 0; half < 2; half++) {
                const int s = 8 * h + 2 * j + half; /* sub-block of values 16s .. 16s + 15 */
                const float a = d * (float)(k->scales[s] & 15), m = dmin * (float)(k->scales[s] >> 4);
                const unsigned char *q = k->qs + 32 * h + 16 * half;
                for (int l = 0; l < 16; l++) y[16 * s + l] = a * (float)((q[l] >> (2 * j)) & 3) - m;
            }
}

QB_AI void qb_q3_k(const unsigned char *b, float *y) {
    const blk_q3_k *k = (const blk_q3_k *)b;
    const float d = qb_f16(b + offsetof(blk_q3_k, d));
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 4; j++)
            for (int half = 0; half < 2; half++) {
                const int s = 8 * h + 2 * j + half;
                const int lo = s < 8 ? k->scales[s] & 15 : k->scales[s - 8] >> 4;
                const int hi = (k->scales[8 + s % 4] >> (2 * (s / 4))) & 3;
                const float a = d * (float)((lo | hi << 4) - 32);
                const unsigned char *q = k->qs + 32 * h + 16 * half, *hm = k->hmask + 16 * half;
                const int bit = 4 * h + j;
                for (int l = 0; l < 16; l++)
                    y[16 * s + l] = a * (float)(((q[l] >> (2 * j)) & 3) - (((hm[l] >> bit) & 1) ? 0 : 4));
            }
}

/* Scale and min of sub-block s of a Q4_K / Q5_K block (6 bits each). */
QB_AI void qb_scale_min_k4(const unsigned char *sc, int s, int *a, int *m) {
    if (s < 4) {
        *a = sc[s] & 63;
        *m = sc[s + 4] & 63;
    } else {
        *a = (sc[s + 4] & 15) | (sc[s - 4] >> 6) << 4;
        *m = (sc[s + 4] >> 4) | (sc[s] >> 6) << 4;
    }
}

QB_AI void qb_q4_k(const unsigned char *b, float *y) {
    const blk_q4_k *k = (const blk_q4_k *)b;
    const float d = qb_f16(b), dmin = qb_f16(b + 2);
    for (int p = 0; p < 4; p++) {
        int s0, m0, s1, m1;
        qb_scale_min_k4(k->scales, 2 * p, &s0, &m0);
        qb_scale_min_k4(k->scales, 2 * p + 1, &s1, &m1);
        const float a0 = d * (float)s0, b0 = dmin * (float)m0, a1 = d * (float)s1, b1 = dmin * (float)m1;
        const unsigned char *q = k->qs + 32 * p;
        for (int l = 0; l < 32; l++) y[64 * p + l] = a0 * (float)(q[l] & 15) - b0;
        for (int l = 0; l < 32; l++) y[64 * p + 32 + l] = a1 * (float)(q[l] >> 4) - b1;
    }
}

QB_AI void qb_q5_k(const unsigned char *b, float *y) {
    const blk_q5_k *k = (const blk_q5_k *)b;
    const float d = qb_f16(b), dmin = qb_f16(b + 2);
    for (int p = 0; p < 4; p++) {
        int s0, m0, s1, m1;
        qb_scale_min_k4(k->scales, 2 * p, &s0, &m0);
        qb_scale_min_k4(k->scales, 2 * p + 1, &s1, &m1);
        const float a0 = d * (float)s0, b0 = dmin * (float)m0, a1 = d * (float)s1, b1 = dmin * (float)m1;
        const unsigned char *q = k->qs + 32 * p, *qh = k->qh;
        for (int l = 0; l < 32; l++)
            y[64 * p + l] = a0 * (float)((q[l] & 15) | ((qh[l] >> (2 * p)) & 1) << 4) - b0;
        for (int l = 0; l < 32; l++)
            y[64 * p + 32 + l] = a1 * (float)((q[l] >> 4) | ((qh[l] >> (2 * p + 1)) & 1) << 4) - b1;
    }
}

QB_AI void qb_q6_k(const unsigned char *b, float *y) {
    const blk_q6_k *k = (const blk_q6_k *)b;
    const float d = qb_f16(b + offsetof(blk_q6_k, d));
    for (int h = 0; h < 2; h++)
        for (int c = 0; c < 4; c++)
            for (int half = 0; half < 2; half++) {
                const int s = 8 * h + 2 * c + half;
                const float a = d * (float)k->scales[s];
                const unsigned char *ql = k->ql + 64 * h + 32 * (c & 1) + 16 * half;
                const unsigned char *qh = k->qh + 32 * h + 16 * half;
                const int sh = c < 2 ? 0 : 4;
                for (int l = 0; l < 16; l++)
                    y[16 * s + l] = a * (float)((((ql[l] >> sh) & 15) | ((qh[l] >> (2 * c)) & 3) << 4) - 32);
            }
}

/* Scale of sub-block s (of 32 values) of an IQ4_XS block: 6 bits, minus 32. */
QB_AI int qb_iq4_xs_scale(const unsigned char *b, int s) {
    const blk_iq4_xs *k = (const blk_iq4_xs *)b;
    uint16_t h;
    memcpy(&h, b + offsetof(blk_iq4_xs, scales_h), 2);
    return (((k->scales_l[s / 2] >> (4 * (s % 2))) & 15) | ((h >> (2 * s)) & 3) << 4) - 32;
}

/* a = d * (scale - 32) is exact (11 + 6 bits), and so is a * level (7 more). */
QB_AI void qb_iq4_xs(const unsigned char *b, float *y) {
    const blk_iq4_xs *k = (const blk_iq4_xs *)b;
    const float d = qb_f16(b);
    for (int s = 0; s < 8; s++) {
        const float a = d * (float)qb_iq4_xs_scale(b, s);
        const unsigned char *q = k->qs + 16 * s;
        for (int l = 0; l < 16; l++) y[32 * s + l] = a * (float)iq4nl_levels[q[l] & 15];
        for (int l = 0; l < 16; l++) y[32 * s + 16 + l] = a * (float)iq4nl_levels[q[l] >> 4];
    }
}

/* Block `b` of a row of dtype t (a blocked type) into y[dtype_block_len(t)].
 * t is a compile-time constant wherever this is inlined in a kernel. */
QB_AI void qb_block(kvlm_dtype t, const unsigned char *blk, float *y) {
    switch (t) {
    case KVLM_Q8_0: qb_q8_0(blk, y); break;
    case KVLM_Q4_0: qb_q4_0(blk, y); break;
    case KVLM_Q4_1: qb_q4_1(blk, y); break;
    case KVLM_Q5_0: qb_q5_0(blk, y); break;
    case KVLM_Q5_1: qb_q5_1(blk, y); break;
    case KVLM_IQ4_NL: qb_iq4_nl(blk, y); break;
    case KVLM_Q2_K: qb_q2_k(blk, y); break;
    case KVLM_Q3_K: qb_q3_k(blk, y); break;
    case KVLM_Q4_K: qb_q4_k(blk, y); break;
    case KVLM_Q5_K: qb_q5_k(blk, y); break;
    case KVLM_Q6_K: qb_q6_k(blk, y); break;
    case KVLM_MXFP4: qb_mxfp4(blk, y); break;
    case KVLM_IQ4_XS: qb_iq4_xs(blk, y); break;
    default: break;
    }
}

#endif
