/*
 * Decode (one to three rows of x) of Q4_0 weights with int8 activations on
 * AVX512-VNNI: four 32-value blocks per zmm. The weight nibbles are the
 * unsigned operand of vpdpbusd as they are stored: the 16 code bytes of
 * each of four blocks fill one 128-bit lane each, their low nibbles
 * (values 0..15 of every block) go against one activation vector and
 * their high nibbles (values 16..31) against a second, so no byte is
 * moved within a lane. The activations are laid out once per call to
 * match: per group of four blocks, the codes of values 0..15 of each
 * block, then of values 16..31, the int32 start -8 * S of every lane (S
 * the sum of the lane's 8 activation codes: Q4_0's offset 8 folded in)
 * and the block scale dx spread over the block's lanes. Per group and
 * weight row: two vpdpbusd, one conversion, one multiply of the four f16
 * block scales (one vpermw and one vcvtph2ps from a single load) by dx
 * and one FMA.
 *
 * The integer math is quant_int8_matmul_ref's (quant_int8.h): the same
 * codes and scales dx (quant_int8_quantize_row_avx512, bit-equal to the C
 * quantiser), exact int32 block sums; the float rounding differs by a few
 * ulps of sum |x w| (f32 lanes, then a horizontal sum).
 *
 * This file holds the activation side and the entry points; the weight
 * loop is quant_int8_q4_0_tile.h, built here for AVX512-VNNI and in
 * quant_int8_q4_0_vbmi_avx512.c with AVX512-VBMI and GFNI too (used when
 * the CPU has them; the same bits). Compiled with the AVX-512 flags plus
 * -mavx512vnni, called only through the avx512-vnni kern_ops (quant_int8.c). Does not do prefill (four or
 * more rows: the panel kernels of quant_int8_body.h) nor other dtypes.
 */
#include <stdlib.h>

#define Q40_VBMI 0
#define Q40_ROWS quant_int8_q4_0_rows_base_avx512
#include "kernels/quant_int8_q4_0_tile.h"

/* Rows of x into ng groups per row; blocks past nb are zero (codes, start
 * values and scales), so they add nothing. */
static void q40_quantize(const float *x, int M, int K, q40_group *g, int ng) {
    for (int m = 0; m < M; m++)
        for (int gi = 0; gi < ng; gi++) int8_group_prep(g + (size_t)m * ng + gi, x + (size_t)m * K, K, gi, 3);
}

size_t quant_int8_q4_0_decode_bytes_avx512(int M, const kern_matrix *w) {
    if (w->dtype != KVLM_Q4_0 || M < 1 || M > Q40_MAX_M || w->cols % QK != 0) return 0;
    if (w->packed) return quant_int8_q4_0_packed_bytes_avx512(M, w);
    return (size_t)M * ((w->cols / QK + 3) / 4) * sizeof(q40_group);
}

void quant_int8_q4_0_decode_prep_avx512(const float *x, int M, const kern_matrix *w, int m0, int m1, void *buf) {
    if (w->packed) {
        quant_int8_q4_0_packed_prep_avx512(x, M, w, m0, m1, buf);
        return;
    }
    const int ng = (w->cols / QK + 3) / 4;
    q40_quantize(x + (size_t)m0 * w->cols, m1 - m0, w->cols, (q40_group *)buf + (size_t)m0 * ng, ng);
}

void quant_int8_q4_0_decode_rows_prep_avx512(const void *buf, int M, const kern_matrix *w, int n0, int n1,
                                             const float *bias, float *y, int ldy) {
    if (w->packed) quant_int8_q4_0_packed_rows_avx512(buf, M, w, n0, n1, bias, y, ldy);
    else if (__builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("gfni"))
        quant_int8_q4_0_rows_vbmi_avx512(buf, M, w, n0, n1, bias, y, ldy);
    else
        quant_int8_q4_0_rows_base_avx512(buf, M, w, n0, n1, bias, y, ldy);
}

int quant_int8_q4_0_decode_avx512(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias,
                                  float *y, int ldy) {
    const size_t need = quant_int8_q4_0_decode_bytes_avx512(M, w);
    if (!need) return 0;
    _Alignas(64) unsigned char stack[24576];
    q40_group *g = need <= sizeof stack ? (q40_group *)stack : aligned_alloc(64, need);
    if (!g) return 0;
    /* the first tile's rows (file layout) or tiles (packed) are requested
     * before the activations are quantised, so their fetch overlaps that
     * work */
    const size_t rb = dtype_row_bytes(KVLM_Q4_0, w->cols, NULL);
    const size_t first = (size_t)(n1 - n0 < Q40_NR ? n1 - n0 : Q40_NR) * rb;
    const unsigned char *start = w->packed ? (const unsigned char *)w->packed + (size_t)(n0 / 4) * 4 * rb
                                           : (const unsigned char *)w->data + (size_t)n0 * rb;
    for (size_t o = 0; o < first; o += 64) _mm_prefetch((const char *)(start + o), _MM_HINT_T2);
    quant_int8_q4_0_decode_prep_avx512(x, M, w, 0, M, g);
    quant_int8_q4_0_decode_rows_prep_avx512(g, M, w, n0, n1, bias, y, ldy);
    if ((unsigned char *)g != stack) free(g);
    return 1;
}
