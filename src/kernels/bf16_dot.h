/*
 * Bf16 weights on the AVX512-BF16 dot products: the kern_ops of the
 * avx512-bf16 ISA level (every op that of avx512-vnni, except that
 * matmuls with bf16 weights run here, at every batch size), and the plain
 * C reference the tests compare them with. On aarch64 the neon-bf16 level
 * does the same on BFDOT (bf16_dot_arm_bf16.c: the same rounding of x and
 * tolerance; four 4-lane accumulators where x86 has one of 16 lanes).
 *
 * Activations are rounded to bf16 once per matmul (round to nearest, ties
 * to even, as vcvtne2ps2bf16 does; a subnormal float becomes a signed
 * zero), rows of K padded with zeros to a multiple of 32. vdpbf16ps then
 * multiplies 16 pairs of bf16 per accumulator (32 products per
 * instruction, where an f32 FMA does 16), products exact in f32, with
 * subnormal inputs and outputs flushed to zero. Each output keeps one
 * accumulator whose lane l sums the pairs (2l, 2l + 1) of every 32-value
 * step of K in ascending order; the 16 lanes are summed in the pairing
 * tree of reduce_avx512.h, then the bias is added. Every path (one row,
 * a batch, any split of the output features, any thread) follows that
 * order, so an output does not depend on what was batched with it. The
 * rounding inside one vdpbf16ps (two products and an accumulator) is the
 * CPU's: the reference sums in double and the tests compare within a
 * bound, not bit for bit.
 *
 * Against f32 activations (the avx512 and avx512-vnni levels) each
 * activation carries a relative error of at most 2^-9; docs/performance.md
 * states the perplexity difference this makes.
 */
#ifndef KVLM_KERNELS_BF16_DOT_H
#define KVLM_KERNELS_BF16_DOT_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"

/* bf16 values per row of prepared activations: K rounded up to 32. */
static inline int bf16_dot_stride(int K) { return (K + 31) & ~31; }

/* x rounded to bf16 as the kernels round it (the reference's half). */
uint16_t bf16_dot_round(float x);

/* The reference: matmul_rows' contract (kernels.h) for bf16 weights, each
 * x rounded with bf16_dot_round, products summed in double, rounded once
 * to float, plus the bias. */
void bf16_dot_matmul_ref(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias,
                         float *y, int ldy);

/* The AVX512-BF16 kernels (bf16_dot_avx512.c). prep writes rows [m0, m1)
 * of x (M x K floats) as bf16 rows of bf16_dot_stride(K) values into xb;
 * rows computes y[m][n] for m < M, n0 <= n < n1 from them. */
void bf16_dot_prep_avx512(const float *x, int K, int m0, int m1, uint16_t *xb);
void bf16_dot_rows_avx512(const uint16_t *xb, int M, const kern_matrix *w, int n0, int n1, const float *bias,
                          float *y, int ldy);

/* The BFDOT kernels of the neon-bf16 level (aarch64, bf16_dot_arm_bf16.c),
 * the same contract as the AVX512-BF16 pair above. */
void bf16_dot_prep_neon(const float *x, int K, int m0, int m1, uint16_t *xb);
void bf16_dot_rows_neon(const uint16_t *xb, int M, const kern_matrix *w, int n0, int n1, const float *bias,
                        float *y, int ldy);

/* The kern_ops of KVLM_ISA_AVX512_BF16 (built on first use from the
 * avx512-vnni set) on x86-64, of KVLM_ISA_NEON_BF16 (from the neon-i8mm
 * set) on aarch64. */
const kern_ops *bf16_dot_ops(void);

#endif
