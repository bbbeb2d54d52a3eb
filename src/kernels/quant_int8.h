/*
 * Int8 activations for block-quantised weights: the kern_ops of the
 * avx512-vnni and avx2-vnni ISA levels (every op that of avx512 / avx2,
 * except that matmul_rows sends Q8_0, Q4_0, Q4_K, Q5_K and Q6_K weights to
 * the int8 dot-product kernels of quant_int8_body.h), and the plain C
 * reference of
 * their integer math that the tests compare them with.
 *
 * Activation quantisation (per row, per 32-value block, like Q8_0 but
 * with an f32 scale): amax = max |x_i|, d = amax / 127, and with
 * id = 127 / amax (0 if amax is 0) each code is x_i * id rounded to the
 * nearest integer, ties to even (the SIMD conversion under the default
 * rounding mode), so |q| <= 127 for finite x. A non-finite product gives
 * -128 (the conversion's out-of-range value); such rows give undefined
 * (but memory-safe) outputs.
 *
 * With each weight value written a_g * w_i - b_g (integer code w_i with
 * any constant offset applied, per 16-value group g: Q8_0 / Q4_0 a = the
 * block scale, b = 0; Q4_K / Q5_K a = d * sc, b = dmin * m; Q6_K a =
 * d * scale, b = 0), the output is y[m][n] = bias[n] + sum over groups of
 * dx * (a_g * sum_i w_i q_i - b_g * sum_i q_i), with the integer sums
 * exact; the SIMD
 * kernels round the float products and sum them in a different order than
 * quant_int8_matmul_ref, which accumulates in double.
 */
#ifndef KVLM_QUANT_INT8_H
#define KVLM_QUANT_INT8_H

#include <stdint.h>

#include "kernels/kernels.h"

/* The codes q[0 .. K) and scales d[0 .. K / 32) of one row x of K values
 * (K % 32 == 0), exactly as the SIMD kernels form them. */
void quant_int8_quantize_row(const float *x, int K, int8_t *q, float *d);

/* 1 for the weight dtypes the int8 kernels take (Q8_0, Q4_0, Q4_K, Q5_K,
 * Q6_K). */
int quant_int8_supports(kvlm_dtype t);

/* 1 for the 4-bit table dtypes (MXFP4, IQ4_XS) of the AVX512-VNNI table
 * kernel (quant_int8_lut_avx512.c); quant_int8_row_codes and the
 * reference take them too. */
int quant_int8_lut_supports(kvlm_dtype t);

/* One weight row of a dtype with quant_int8_supports or
 * quant_int8_lut_supports in the reference's terms: value i =
 * a[i / 16] * w[i] - b[i / 16], integer codes w in [-128, 127] (any
 * constant offset applied: Q4_0 - 8, Q6_K - 32; MXFP4 and IQ4_XS: their
 * table's integer), a and b per 16 values (K / 16 of each). */
void quant_int8_row_codes(kvlm_dtype t, const unsigned char *row, int K, int8_t *w, float *a, float *b);
/* The same for Q4_K, Q5_K and Q6_K with NEON (aarch64, quant_int8_codes_neon.c):
 * the same bytes and floats; other dtypes go to quant_int8_row_codes. */
void quant_int8_row_codes_neon(kvlm_dtype t, const unsigned char *row, int K, int8_t *w, float *a, float *b);

/* The reference: matmul_rows' contract (kernels.h) for a dtype with
 * quant_int8_supports or quant_int8_lut_supports, computed from quant_int8_quantize_row's codes with
 * exact integer block sums, accumulated in double, rounded once to float. */
void quant_int8_matmul_ref(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias,
                           float *y, int ldy);

/* The SIMD kernels: matmul_rows' contract for dtypes with
 * quant_int8_supports. Return 0 without writing y if they do not run
 * (another dtype, fewer rows than quant_int8_min_rows_*, or no memory for
 * the activation codes). */
int quant_int8_matmul_rows_avx512(const float *x, int M, const kern_matrix *w, int n0, int n1,
                                  const float *bias, float *y, int ldy);
int quant_int8_matmul_rows_avx2(const float *x, int M, const kern_matrix *w, int n0, int n1,
                                const float *bias, float *y, int ldy);

/* The prepared form of kern_ops.matmul_prep_bytes / matmul_prep /
 * matmul_rows_prep (kernels.h) for the int8 kernels: 0 bytes (no prepared
 * form) for other dtypes and below the prefill kernels' rows (16); the
 * matmul_rows above runs the same code on one buffer of its own. */
size_t quant_int8_prep_bytes_avx512(int M, const kern_matrix *w, size_t *panel);
size_t quant_int8_prep_bytes_avx2(int M, const kern_matrix *w, size_t *panel);
void quant_int8_prep_avx512(const float *x, int M, const kern_matrix *w, int m0, int m1, void *buf);
void quant_int8_prep_avx2(const float *x, int M, const kern_matrix *w, int m0, int m1, void *buf);
void quant_int8_rows_prep_avx512(const void *buf, void *panel, const kern_matrix *w, int n0, int n1,
                                 const float *bias, float *y, int ldy);
void quant_int8_rows_prep_avx2(const void *buf, void *panel, const kern_matrix *w, int n0, int n1,
                               const float *bias, float *y, int ldy);

/* The fewest rows of x the kernels above take with weight dtype t (1 for
 * the 32-value block types, 8 for the K-quants); below it they return 0
 * and quant_int8_prep.c runs the K-quant decode kernels below. */
int quant_int8_min_rows_avx512(kvlm_dtype t);
int quant_int8_min_rows_avx2(kvlm_dtype t);

/* Decode of Q4_K, Q5_K and Q6_K (quant_int8_decode.h): matmul_rows'
 * contract with the reference's integer math, weights read straight from
 * their blocks, for the row counts below quant_int8_min_rows (the panel
 * kernels' threshold). Return 0 without writing y for other dtypes, K not
 * a multiple of 256, or no memory for the activation codes. */
int quant_int8_decode_rows_avx512(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias,
                                  float *y, int ldy);
int quant_int8_decode_rows_avx2(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias,
                                float *y, int ldy);

/* Decode of Q4_0 on AVX512-VNNI (quant_int8_q4_0_avx512.c): matmul_rows'
 * contract with the reference's integer math for 1..3 rows of x, four
 * blocks per vector. Returns 0 without writing y for another dtype, other
 * row counts, or no memory for the activation codes. */
int quant_int8_q4_0_decode_avx512(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias,
                                  float *y, int ldy);

/* MXFP4 and IQ4_XS on AVX512-VNNI (quant_int8_lut_avx512.c), any number
 * of rows of x, split like the decode kernels below: _bytes (0: another
 * dtype or K not whole blocks), _prep, _rows; _run is the matmul_rows
 * form (0 without memory for the activations). */
size_t quant_int8_lut_bytes_avx512(int M, const kern_matrix *w);
void quant_int8_lut_prep_avx512(const float *x, int M, const kern_matrix *w, int m0, int m1, void *buf);
void quant_int8_lut_rows_avx512(const void *buf, int M, const kern_matrix *w, int n0, int n1, const float *bias,
                                float *y, int ldy);
int quant_int8_lut_run_avx512(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias,
                              float *y, int ldy);
/* The two forms of quant_int8_lut_rows_avx512, which calls the VBMI one
 * when the CPU has AVX512-VBMI (quant_int8_lut_tile.h): the same bits. */
void quant_int8_lut_rows_base_avx512(const void *buf, int M, const kern_matrix *w, int n0, int n1, const float *bias,
                                     float *y, int ldy);
void quant_int8_lut_rows_vbmi_avx512(const void *buf, int M, const kern_matrix *w, int n0, int n1, const float *bias,
                                     float *y, int ldy);
/* The calling thread's count of one-row MXFP4 calls the VBMI form ran
 * through the scales' exponents (quant_int8_lut_tile.h, lut_tile_mx1),
 * for tests. */
unsigned long quant_int8_lut_mx1_calls(void);

/* The decode kernels above split in two, for kern_matmul's prepared form
 * (quant_int8_prep.c): _bytes is the size of the activations of M rows of
 * x in the kernel's own layout (0: the kernel does not take (M, w), the
 * same conditions under which its matmul_rows form returns 0), _prep
 * writes rows [m0, m1) of them (64-byte aligned buf), _rows_prep is the
 * matmul_rows form on those activations. The matmul_rows forms run the
 * same three steps on a buffer of their own, so both give the same bits. */
size_t quant_int8_decode_bytes_avx512(int M, const kern_matrix *w);
size_t quant_int8_decode_bytes_avx2(int M, const kern_matrix *w);
void quant_int8_decode_prep_avx512(const float *x, int M, const kern_matrix *w, int m0, int m1, void *buf);
void quant_int8_decode_prep_avx2(const float *x, int M, const kern_matrix *w, int m0, int m1, void *buf);
void quant_int8_decode_rows_prep_avx512(const void *buf, int M, const kern_matrix *w, int n0, int n1,
                                        const float *bias, float *y, int ldy);
void quant_int8_decode_rows_prep_avx2(const void *buf, int M, const kern_matrix *w, int n0, int n1,
                                      const float *bias, float *y, int ldy);
size_t quant_int8_q4_0_decode_bytes_avx512(int M, const kern_matrix *w);
void quant_int8_q4_0_decode_prep_avx512(const float *x, int M, const kern_matrix *w, int m0, int m1, void *buf);
void quant_int8_q4_0_decode_rows_prep_avx512(const void *buf, int M, const kern_matrix *w, int n0, int n1,
                                             const float *bias, float *y, int ldy);
/* The same three for a matrix with a packed copy (w->packed,
 * quant_int8_q4_0_packed_avx512.c); the Q4_0 functions above call these
 * when w->packed is set. */
size_t quant_int8_q4_0_packed_bytes_avx512(int M, const kern_matrix *w);
void quant_int8_q4_0_packed_prep_avx512(const float *x, int M, const kern_matrix *w, int m0, int m1, void *buf);
void quant_int8_q4_0_packed_rows_avx512(const void *buf, int M, const kern_matrix *w, int n0, int n1,
                                        const float *bias, float *y, int ldy);
/* The two forms of the Q4_0 _rows_prep above, which calls the VBMI one when
 * the CPU has AVX512-VBMI and GFNI (quant_int8_q4_0_tile.h): the same bits. */
void quant_int8_q4_0_rows_base_avx512(const void *buf, int M, const kern_matrix *w, int n0, int n1,
                                      const float *bias, float *y, int ldy);
void quant_int8_q4_0_rows_vbmi_avx512(const void *buf, int M, const kern_matrix *w, int n0, int n1,
                                      const float *bias, float *y, int ldy);

/* The same split of quant_int8_matmul_rows_* for the rows that do not
 * reach the prefill kernels (from quant_int8_min_rows up; Q8_0 decode):
 * _bytes also sets *panel, the scratch each concurrent _rows call needs
 * (0: none; its pointer may then be NULL). */
size_t quant_int8_small_bytes_avx512(int M, const kern_matrix *w, size_t *panel);
size_t quant_int8_small_bytes_avx2(int M, const kern_matrix *w, size_t *panel);
void quant_int8_small_prep_avx512(const float *x, int M, const kern_matrix *w, int m0, int m1, void *buf);
void quant_int8_small_prep_avx2(const float *x, int M, const kern_matrix *w, int m0, int m1, void *buf);
void quant_int8_small_rows_avx512(const void *buf, int M, void *panel, const kern_matrix *w, int n0, int n1,
                                  const float *bias, float *y, int ldy);
void quant_int8_small_rows_avx2(const void *buf, int M, void *panel, const kern_matrix *w, int n0, int n1,
                                const float *bias, float *y, int ldy);

/* quant_int8_quantize_row with the kernels' own vector code (the bytes and
 * scales must be the same). */
void quant_int8_quantize_row_avx512(const float *x, int K, int8_t *q, float *d);
void quant_int8_quantize_row_avx2(const float *x, int K, int8_t *q, float *d);

/* The -vnni kern_ops' matmul_rows, matmul_prep_bytes, matmul_prep and
 * matmul_rows_prep (quant_int8_prep.c): each call to the int8 kernel that
 * takes it, else to the f32-activation kernels of the ISA. */
void quant_int8_vnni_matmul_rows_avx512(const float *x, int M, const kern_matrix *w, int n0, int n1,
                                        const float *bias, float *y, int ldy);
void quant_int8_vnni_matmul_rows_avx2(const float *x, int M, const kern_matrix *w, int n0, int n1,
                                      const float *bias, float *y, int ldy);
size_t quant_int8_vnni_prep_bytes_avx512(int M, const kern_matrix *w, size_t *panel);
size_t quant_int8_vnni_prep_bytes_avx2(int M, const kern_matrix *w, size_t *panel);
void quant_int8_vnni_prep_avx512(const float *x, int M, const kern_matrix *w, int m0, int m1, void *buf);
void quant_int8_vnni_prep_avx2(const float *x, int M, const kern_matrix *w, int m0, int m1, void *buf);
void quant_int8_vnni_rows_prep_avx512(const void *buf, void *panel, const kern_matrix *w, int n0, int n1,
                                      const float *bias, float *y, int ldy);
void quant_int8_vnni_rows_prep_avx2(const void *buf, void *panel, const kern_matrix *w, int n0, int n1,
                                    const float *bias, float *y, int ldy);

/* The kern_ops of KVLM_ISA_AVX512_VNNI or KVLM_ISA_AVX2_VNNI (NULL for
 * other values); the caller checks kern_cpu_supports first. */
const kern_ops *quant_int8_ops(kvlm_isa isa);

/* The neon-dotprod level (aarch64, quant_int8_dotprod.c): the dtypes of
 * quant_int8_supports with int8 activations; matmul_rows' contract and
 * the prepared form's (kernels.h; K-quants need a panel per concurrent
 * call). prep_bytes is 0 for every other dtype, whose calls matmul_rows
 * sends to kern_ops_neon. */
size_t quant_int8_dotprod_prep_bytes(int M, const kern_matrix *w, size_t *panel);
void quant_int8_dotprod_prep(const float *x, int M, const kern_matrix *w, int m0, int m1, void *buf);
void quant_int8_dotprod_rows_prep(const void *buf, void *panel, const kern_matrix *w, int n0, int n1,
                                  const float *bias, float *y, int ldy);
void quant_int8_dotprod_matmul_rows(const float *x, int M, const kern_matrix *w, int n0, int n1,
                                    const float *bias, float *y, int ldy);
/* The prepared form's rows M, K, codes (M rows of K), scales (M rows of
 * K / 32) and, where qs is not NULL, code sums (M rows of K / 16). */
void quant_int8_dotprod_layout(const void *buf, int *M, int *K, const int8_t **q, const float **d,
                               const int32_t **qs);

/* The neon-i8mm level (aarch64, quant_int8_i8mm.c): neon-dotprod's
 * prepared form; Q8_0 / Q4_0 and the K-quants against 2 or more rows of x
 * with SMMLA (the K-quants in quant_int8_k_i8mm.c, with the same bits as
 * neon-dotprod), every other call neon-dotprod's. prep_bytes is
 * neon-dotprod's but for the K-quants' panel from 2 rows of x on, which
 * holds two weight rows (quant_int8_i8mm_kpanel_bytes). */
size_t quant_int8_i8mm_prep_bytes(int M, const kern_matrix *w, size_t *panel);
size_t quant_int8_i8mm_kpanel_bytes(int K);
void quant_int8_i8mm_krows(const int8_t *q, const float *d, const int32_t *qs, int M, int K, const kern_matrix *w,
                           int n0, int n1, void *panel, const float *bias, float *y, int ldy);
void quant_int8_i8mm_rows_prep(const void *buf, void *panel, const kern_matrix *w, int n0, int n1, const float *bias,
                               float *y, int ldy);
void quant_int8_i8mm_matmul_rows(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias,
                                 float *y, int ldy);

#endif
