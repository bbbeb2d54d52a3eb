/*
 * Block-quantised weights (Q8_0, Q4_0; block layouts in tensor.h):
 * quantising and dequantising rows. The matmul kernels that read the blocks
 * in place are declared in kernels.h (quant_matmul_rows_*). A weight matrix
 * stays quantised in memory; each kernel widens one vector of codes at a
 * time into registers and multiplies with f32 activations, which are never
 * quantised. The weights it uses are exactly the dequantised ones (an f16
 * scale times an int8 or 4-bit code is exact in f32), so a quantised matmul
 * computes the f32 matmul of the dequantised matrix up to rounding of the
 * partial sums (see kernels/quant_simd.h).
 *
 * Rows must be whole blocks: cols % QK == 0 (loaders check; the kernels
 * assume it).
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

/* y[i] = value i of the n (n % QK == 0) quantised values at src. */
void quant_dequantize_row(kvlm_dtype t, const void *src, int64_t n, float *y);

#endif
