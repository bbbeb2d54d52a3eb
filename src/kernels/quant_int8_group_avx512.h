/*
 * One activation group of the 4-bit AVX-512 VNNI kernels (Q4_0's tile and
 * the MXFP4 / IQ4_XS lookup kernel): four blocks of 32 values quantised to
 * int8, split into low and high halves of each block, with the start
 * values that undo the weights' unsigned offset (-(sum of codes) << shift)
 * and the four scales spread over 16 lanes. Compiled with -mavx512vnni.
 */
#ifndef KVLM_KERNELS_QUANT_INT8_GROUP_AVX512_H
#define KVLM_KERNELS_QUANT_INT8_GROUP_AVX512_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/quant_blocks.h"
#include "kernels/quant_int8.h"

typedef struct int8_group {
    int8_t lo[64], hi[64];
    int32_t st[16];
    float dx[16];
} int8_group;

/* Group gi of the row x (K values, nb = K / QK blocks); blocks past nb are
 * zero (codes, start values and scales), so they add nothing. shift: the
 * weights' offset is 1 << shift (Q4_0: 8 = 1 << 3; a table value + 128:
 * 1 << 7). */
static inline void int8_group_prep(int8_group *G, const float *x, int K, int gi, int shift) {
    const int nb = K / QK;
    const __m512i ones = _mm512_set1_epi8(1);
    _Alignas(64) int8_t q[4 * QK];
    float d[4];
    for (int i = 0; i < 4; i++) {
        const int b = 4 * gi + i;
        if (b < nb) quant_int8_quantize_row_avx512(x + (size_t)b * QK, QK, q + QK * i, &d[i]);
        else memset(q + QK * i, 0, QK), d[i] = 0.0f;
        memcpy(G->lo + 16 * i, q + QK * i, 16);
        memcpy(G->hi + 16 * i, q + QK * i + 16, 16);
    }
    const __m512i lo = _mm512_load_si512(G->lo), hi = _mm512_load_si512(G->hi);
    const __m512i s = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, lo), ones, hi);
    _mm512_store_si512(G->st, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_sll_epi32(s, _mm_cvtsi32_si128(shift))));
    _mm512_store_ps(G->dx, _mm512_setr_ps(d[0], d[0], d[0], d[0], d[1], d[1], d[1], d[1], d[2], d[2], d[2], d[2], d[3],
                                          d[3], d[3], d[3]));
}

#endif
