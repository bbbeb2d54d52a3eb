/*
 * Plain C reference for the block-quantised types: quantise, dequantise,
 * and the matmul the SIMD kernels are tested against. The matmul multiplies
 * each dequantised weight (d * code, exact in f32) with the activation and
 * accumulates in k order, exactly like the f32 reference matmul does, so it
 * equals that matmul run on the dequantised matrix.
 */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "tensor.h"

static uint16_t load_u16(const void *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}

/* Rounds the scale to f16 (saturating at the largest finite f16, so a
 * block never gets an infinite scale) and returns the value stored. */
static float store_scale(uint16_t *d, float v) {
    if (fabsf(v) > 65504.0f) v = copysignf(65504.0f, v);
    *d = f32_to_f16(v);
    return f16_to_f32(*d);
}

/* fminf/fmaxf return the non-NaN operand, so the cast below is always of
 * a value inside [lo, hi]. */
static int clamp_to_int(float v, float lo, float hi) {
    v = fminf(fmaxf(v, lo), hi);
    return v == v ? (int)v : (int)lo;
}

static void quantize_q8_0(const float *x, blk_q8_0 *b) {
    float amax = 0;
    for (int i = 0; i < QK; i++) amax = fmaxf(amax, fabsf(x[i]));
    const float d = store_scale(&b->d, amax / 127.0f);
    for (int i = 0; i < QK; i++) {
        float v = d != 0 ? x[i] / d : 0.0f;
        v = v < 0 ? -floorf(-v + 0.5f) : floorf(v + 0.5f);
        b->q[i] = (int8_t)clamp_to_int(v, -127.0f, 127.0f);
    }
}

static void quantize_q4_0(const float *x, blk_q4_0 *b) {
    float m = 0, amax = 0;
    for (int i = 0; i < QK; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]), m = x[i];
    const float d = store_scale(&b->d, m != 0 ? m / -8.0f : 0.0f);
    uint8_t code[QK];
    for (int i = 0; i < QK; i++)
        code[i] = (uint8_t)clamp_to_int(floorf((d != 0 ? x[i] / d : 0.0f) + 8.5f), 0.0f, 15.0f);
    for (int j = 0; j < QK / 2; j++) b->q[j] = (uint8_t)(code[j] | (code[j + QK / 2] << 4));
}

void quant_quantize_row(kvlm_dtype t, const float *x, int64_t n, void *dst) {
    for (int64_t b = 0; b < n / QK; b++) {
        if (t == KVLM_Q8_0) quantize_q8_0(x + b * QK, (blk_q8_0 *)dst + b);
        else if (t == KVLM_Q4_0) quantize_q4_0(x + b * QK, (blk_q4_0 *)dst + b);
    }
}

void quant_dequantize_row(kvlm_dtype t, const void *src, int64_t n, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] = dtype_load(t, src, (size_t)i);
}

/* Dequantises block b of a row into w[QK] (exact products). */
static void block_values(kvlm_dtype t, const unsigned char *row, int b, float *w) {
    if (t == KVLM_Q8_0) {
        const blk_q8_0 *blk = (const blk_q8_0 *)row + b;
        const float d = f16_to_f32(load_u16(&blk->d));
        for (int i = 0; i < QK; i++) w[i] = d * (float)blk->q[i];
    } else {
        const blk_q4_0 *blk = (const blk_q4_0 *)row + b;
        const float d = f16_to_f32(load_u16(&blk->d));
        for (int j = 0; j < QK / 2; j++) {
            w[j] = d * (float)((blk->q[j] & 15) - 8);
            w[j + QK / 2] = d * (float)((blk->q[j] >> 4) - 8);
        }
    }
}

void quant_matmul_rows_scalar(const float *x, int M, const kern_matrix *w, int n0, int n1,
                              const float *bias, float *y, int ldy) {
    const int K = w->cols, nb = K / QK;
    const size_t rb = dtype_row_bytes(w->dtype, K, NULL);
    for (int m = 0; m < M; m++) {
        const float *xr = x + (size_t)m * K;
        for (int n = n0; n < n1; n++) {
            const unsigned char *row = (const unsigned char *)w->data + (size_t)n * rb;
            float acc = 0, wb[QK];
            for (int b = 0; b < nb; b++) {
                block_values(w->dtype, row, b, wb);
                for (int i = 0; i < QK; i++) acc += xr[b * QK + i] * wb[i];
            }
            y[(size_t)m * ldy + n] = acc + (bias ? bias[n] : 0.0f);
        }
    }
}
