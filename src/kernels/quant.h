/*
 * Block-quantised weights (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, Q2_K,
 * Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS; block layouts in tensor.h): quantising and dequantising
 * rows. The matmul kernels that read the blocks in place are declared in
 * kernels.h (quant_matmul_rows_*). A weight matrix stays quantised in
 * memory; the kernels widen the codes of a block in registers or a small
 * L1 buffer and multiply them with f32 activations.
 *
 * Chosen precision: these kernels (the scalar, avx2 and avx512 sets) keep
 * activations f32; the avx512-vnni / avx2-vnni sets quantise activations
 * to 8 bits for Q8_0, Q4_0, Q4_K, Q5_K and Q6_K instead (quant_int8.h).
 * The weights a kernel here multiplies are exactly the dequantised
 * values quant_dequantize_row gives (see quant_blocks.h), so a quantised
 * matmul is the f32 matmul of the dequantised matrix up to rounding of the
 * partial sums (the decode kernels for Q8_0 / Q4_0 factor the block scale
 * out of the block's sum; see quant_simd.h).
 *
 * Rows must be whole blocks: cols % dtype_block_len(t) == 0 (32, or 256 for
 * the K-quants and IQ4_XS; loaders check, the kernels assume it).
 */
#ifndef KVLM_QUANT_H
#define KVLM_QUANT_H

#include <stdint.h>

#include "kvlm.h"

/* Quantises n values (n % QK == 0) of x into dst (dtype_row_bytes(t, n)
 * bytes), t one of KVLM_Q8_0, KVLM_Q4_0. Per block:
 *   Q8_0: d = max|x| / 127, q = round(x / d) (half away from zero), |q| <= 127.
 *   Q4_0: m = the value of largest magnitude (sign kept), d = m / -8,
 *         code = clamp(floor(x / d + 8.5), 0, 15); m itself gets code 0.
 * d is rounded to f16 first and the codes are computed with the rounded
 * scale. An all-zero block gets d = 0. Non-finite inputs give unspecified
 * (but defined) codes. */
void quant_quantize_row(kvlm_dtype t, const float *x, int64_t n, void *dst);

/* 1 if quant_quantize_row can write dtype t (Q8_0, Q4_0); the other blocked
 * types are only read. */
int quant_can_quantize(kvlm_dtype t);

/* y[i] = value i of the n (n % dtype_block_len(t) == 0) values at src,
 * stored in dtype t (any dtype; blocked ones are exactly the f32 values
 * llama.cpp's dequantisation gives). */
void quant_dequantize_row(kvlm_dtype t, const void *src, int64_t n, float *y);

#endif
