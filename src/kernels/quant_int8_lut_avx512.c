/*
 * MXFP4 and IQ4_XS weights with int8 activations on AVX512-VNNI (every row
 * count: decode and prefill). Both types hold 32-value sub-blocks of 4-bit
 * indexes into a signed 16-entry table (MXFP4: the doubled E2M1 values,
 * scale 2^(e - 128) per 32-value block; IQ4_XS: IQ4_NL's levels, scale
 * d * (sc - 32) per 32-value sub-block of its 256-value block). One byte
 * shuffle (vpshufb) turns 16 indexes per 128-bit lane into the table
 * value + 128, the unsigned operand of vpdpbusd, so each lane's integer
 * sum is sum (w + 128) q, and the start -128 * S of the lane (S the sum of
 * its 8 activation codes) makes it exactly sum w q.
 *
 * Layout, as quant_int8_q4_0_avx512.c: a group is four sub-blocks (128
 * values); each sub-block's 16 code bytes fill one 128-bit lane, its low
 * nibbles (values 0..15) go against one activation vector, its high
 * nibbles (values 16..31) against a second. The activations of a group:
 * the codes of values 0..15 of each sub-block, those of values 16..31,
 * the int32 start of every lane and the scale dx spread over the
 * sub-block's lanes. Per group, weight row and row of x: two vpdpbusd,
 * one conversion, one multiply of the weight scales by dx, one FMA.
 * Tiles are up to 4 rows of x by 4 weight rows, so prefill unpacks each
 * weight group once per 4 rows of x.
 *
 * The integer math is quant_int8_matmul_ref's (quant_int8.h): the same
 * codes and scales dx (quant_int8_quantize_row_avx512), exact int32 sums;
 * the float rounding differs by a few ulps of sum |x w|. An MXFP4 row whose
 * block count is not a multiple of 4 ends in a short group: its missing
 * sub-blocks repeat the group's first one against zero activations (no
 * byte past the row is read). Compiled with the AVX-512 flags plus
 * -mavx512vnni and called only through the avx512-vnni kern_ops
 * (quant_int8_prep.c); the weight side (quant_int8_lut_tile.h) in two
 * forms, this file's and quant_int8_lut_vbmi_avx512.c's (used when the
 * CPU has AVX512-VBMI: fewer shuffles per group, the same bits). Does not
 * handle other dtypes.
 */
#define LUT_VBMI 0
#define LUT_ROWS quant_int8_lut_rows_base_avx512
#include "kernels/quant_int8_lut_tile.h"

#include <stdlib.h>

size_t quant_int8_lut_bytes_avx512(int M, const kern_matrix *w) {
    const kvlm_dtype t = w->dtype;
    if (!quant_int8_lut_supports(t) || M < 1 || w->cols % dtype_block_len(t) != 0) return 0;
    return (size_t)M * ((w->cols / QK + 3) / 4) * sizeof(lut_group);
}

void quant_int8_lut_prep_avx512(const float *x, int M, const kern_matrix *w, int m0, int m1, void *buf) {
    (void)M;
    const int K = w->cols, ng = (K / QK + 3) / 4;
    for (int m = m0; m < m1; m++)
        for (int gi = 0; gi < ng; gi++) int8_group_prep((lut_group *)buf + (size_t)m * ng + gi, x + (size_t)m * K, K, gi, 7);
}

void quant_int8_lut_rows_avx512(const void *buf, int M, const kern_matrix *w, int n0, int n1, const float *bias,
                                float *y, int ldy) {
    if (__builtin_cpu_supports("avx512vbmi")) quant_int8_lut_rows_vbmi_avx512(buf, M, w, n0, n1, bias, y, ldy);
    else quant_int8_lut_rows_base_avx512(buf, M, w, n0, n1, bias, y, ldy);
}

int quant_int8_lut_run_avx512(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias,
                              float *y, int ldy) {
    const size_t need = quant_int8_lut_bytes_avx512(M, w);
    if (!need) return 0;
    _Alignas(64) unsigned char stack[24576];
    lut_group *g = need <= sizeof stack ? (lut_group *)stack : aligned_alloc(64, need);
    if (!g) return 0;
    const size_t rb = dtype_row_bytes(w->dtype, w->cols, NULL);
    const size_t first = (size_t)(n1 - n0 < LUT_NR ? n1 - n0 : LUT_NR) * rb;
    const unsigned char *start = (const unsigned char *)w->data + (size_t)n0 * rb;
    for (size_t o = 0; o < first; o += 64) _mm_prefetch((const char *)(start + o), _MM_HINT_T2);
    quant_int8_lut_prep_avx512(x, M, w, 0, M, g);
    quant_int8_lut_rows_avx512(g, M, w, n0, n1, bias, y, ldy);
    if ((unsigned char *)g != stack) free(g);
    return 1;
}
