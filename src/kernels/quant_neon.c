/*
 * NEON matmul against block-quantised weights with f32 activations
 * (aarch64). Q8_0 and Q4_0 run quant_simd.h's bodies with 4-lane vectors
 * (a block is eight of them). The other block types (Q4_1 .. Q5_1,
 * IQ4_NL, the K-quants, and any type added later) are dequantised a panel
 * of PANEL_ROWS weight rows at a time by quant_dequantize_row (the
 * reference's exact weights) and multiplied by the NEON f32 matmul
 * (kernels_neon.c), so each weight is widened once per call whatever M.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kernels/vec_f32_neon.h"
#include "tensor.h"

/* Codes q[4v .. 4v + 4) of a Q8_0 block as floats. */
static inline float32x4_t q8_chunk_neon(const unsigned char *q, int v) { return load_i8_neon((const int8_t *)q + 4 * v); }

/* Values 4v .. 4v + 4 of a Q4_0 block (0..15): low nibbles of code bytes
 * 0..15 for values 0..15, their high nibbles for 16..31. */
static inline float32x4_t q4_chunk_neon(const unsigned char *q, int v) {
    uint32_t w;
    memcpy(&w, q + 4 * (v & 3), 4);
    uint8x8_t b = vreinterpret_u8_u32(vdup_n_u32(w));
    b = v >= 4 ? vshr_n_u8(b, 4) : vand_u8(b, vdup_n_u8(15));
    return vcvtq_f32_u32(vmovl_u16(vget_low_u16(vmovl_u8(b))));
}

static inline float32x4_t scale_neon(const void *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return vdupq_n_f32(f16_neon(h));
}

#define V_REDUCE(v) hsum_neon(v)
#define V_SCALE(p) scale_neon(p)
#define Q_F16(h) f16_neon(h)
#define Q8_CHUNK(q, v) q8_chunk_neon((q), (v))
#define Q4_CHUNK(q, v) q4_chunk_neon((q), (v))
#define MR_MAX 4
#define NR_MAX 4
#define NR1 8
#define QNAME(n) n##_neon

#include "kernels/quant_simd.h"

/* Weight rows per dequantised panel: whole 4-row tiles of the f32 matmul. */
#define PANEL_ROWS 12

void quant_wide_matmul_rows_neon(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias,
                                 float *y, int ldy) {
    const int K = w->cols;
    const size_t rb = dtype_row_bytes(w->dtype, K, NULL);
    const unsigned char *wd = w->data;
    float *panel = aligned_alloc(64, ((size_t)PANEL_ROWS * K * sizeof(float) + 63) & ~(size_t)63);
    if (!panel) { /* the reference kernel needs no buffer (same weights, slower) */
        quant_matmul_rows_scalar(x, M, w, n0, n1, bias, y, ldy);
        return;
    }
    for (int n = n0; n < n1; n += PANEL_ROWS) {
        const int nr = n1 - n < PANEL_ROWS ? n1 - n : PANEL_ROWS;
        for (int j = 0; j < nr; j++) quant_dequantize_row(w->dtype, wd + (size_t)(n + j) * rb, K, panel + (size_t)j * K);
        const kern_matrix pm = {KVLM_F32, panel, nr, K, NULL, 0};
        kern_ops_neon.matmul_rows(x, M, &pm, 0, nr, bias ? bias + n : NULL, y + n, ldy);
    }
    free(panel);
}
