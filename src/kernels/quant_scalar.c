/*
 * Plain C reference for the block-quantised types: quantise (Q8_0, Q4_0
 * only), dequantise (every blocked type, via quant_blocks.h), and the
 * matmul the SIMD kernels are tested against. The matmul dequantises a
 * block, multiplies each weight with the activation and accumulates in k
 * order, exactly like the f32 reference matmul does, so it equals that
 * matmul run on the dequantised matrix.
 */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kernels/quant_blocks.h"
#include "tensor.h"

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

int quant_can_quantize(kvlm_dtype t) { return t == KVLM_Q8_0 || t == KVLM_Q4_0; }

void quant_dequantize_row(kvlm_dtype t, const void *src, int64_t n, float *y) {
    const int bl = dtype_block_len(t);
    const size_t bb = dtype_block_bytes(t);
    if (!dtype_is_blocked(t)) {
        for (int64_t i = 0; i < n; i++) y[i] = dtype_load(t, src, (size_t)i);
        return;
    }
    for (int64_t b = 0; b < n / bl; b++) qb_block(t, (const unsigned char *)src + (size_t)b * bb, y + b * bl);
}

void quant_matmul_rows_scalar(const float *x, int M, const kern_matrix *w, int n0, int n1,
                              const float *bias, float *y, int ldy) {
    const int K = w->cols, bl = dtype_block_len(w->dtype), nb = K / bl;
    const size_t rb = dtype_row_bytes(w->dtype, K, NULL), bb = dtype_block_bytes(w->dtype);
    for (int m = 0; m < M; m++) {
        const float *xr = x + (size_t)m * K;
        for (int n = n0; n < n1; n++) {
            const unsigned char *row = (const unsigned char *)w->data + (size_t)n * rb;
            float acc = 0, wb[QK_K];
            for (int b = 0; b < nb; b++) {
                qb_block(w->dtype, row + (size_t)b * bb, wb);
                for (int i = 0; i < bl; i++) acc += xr[b * bl + i] * wb[i];
            }
            y[(size_t)m * ldy + n] = acc + (bias ? bias[n] : 0.0f);
        }
    }
}
