/*
 * The avx512-vnni and avx2-vnni kernel sets (built once from the avx512 /
 * avx2 sets, matmul_rows replaced) and the plain C reference of the int8
 * activation matmul (quant_int8.h). Compiled without ISA flags: nothing
 * here runs a vector instruction of those sets itself.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "kernels/quant_blocks.h"
#include "kernels/quant_int8.h"
#include "tensor.h"

void quant_int8_quantize_row(const float *x, int K, int8_t *q, float *d) {
    for (int b = 0; b < K / QK; b++) {
        const float *xb = x + (size_t)b * QK;
        float amax = 0.0f;
        for (int i = 0; i < QK; i++) amax = fmaxf(amax, fabsf(xb[i]));
        d[b] = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        for (int i = 0; i < QK; i++) {
            const float v = xb[i] * id;
            int c = -128;
            if (v > -2147483648.0f && v < 2147483648.0f) {
                const float r = nearbyintf(v);
                c = r > 127.0f ? 127 : r < -128.0f ? -128 : (int)r;
            }
            q[(size_t)b * QK + i] = (int8_t)c;
        }
    }
}

int quant_int8_supports(kvlm_dtype t) { return t == KVLM_Q8_0 || t == KVLM_Q4_0; }

/* The integer codes w (Q8_0: q; Q4_0: code - 8) and scale of one block. */
static float block_codes(kvlm_dtype t, const unsigned char *blk, int32_t *w) {
    if (t == KVLM_Q8_0) {
        const int8_t *q = (const int8_t *)(blk + 2);
        for (int i = 0; i < QK; i++) w[i] = q[i];
    } else {
        const unsigned char *q = blk + 2;
        for (int j = 0; j < QK / 2; j++) w[j] = (q[j] & 15) - 8, w[j + QK / 2] = (q[j] >> 4) - 8;
    }
    return qb_f16(blk);
}

void quant_int8_matmul_ref(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias,
                           float *y, int ldy) {
    const int K = w->cols, nb = K / QK;
    const size_t rb = dtype_row_bytes(w->dtype, K, NULL), bb = dtype_block_bytes(w->dtype);
    int8_t *q = malloc((size_t)K + 1);
    float *d = malloc(sizeof(float) * ((size_t)nb + 1));
    if (!q || !d) {
        free(q), free(d);
        return;
    }
    for (int m = 0; m < M; m++) {
        quant_int8_quantize_row(x + (size_t)m * K, K, q, d);
        for (int n = n0; n < n1; n++) {
            const unsigned char *row = (const unsigned char *)w->data + (size_t)n * rb;
            double acc = 0;
            for (int b = 0; b < nb; b++) {
                int32_t c[QK], s = 0;
                const float dw = block_codes(w->dtype, row + (size_t)b * bb, c);
                for (int i = 0; i < QK; i++) s += c[i] * q[(size_t)b * QK + i];
                acc += (double)dw * (double)d[b] * (double)s;
            }
            y[(size_t)m * ldy + n] = (float)acc + (bias ? bias[n] : 0.0f);
        }
    }
    free(q), free(d);
}

static void matmul_rows_avx512_vnni(const float *x, int M, const kern_matrix *w, int n0, int n1,
                                    const float *bias, float *y, int ldy) {
    if (!quant_int8_matmul_rows_avx512(x, M, w, n0, n1, bias, y, ldy))
        kern_ops_avx512.matmul_rows(x, M, w, n0, n1, bias, y, ldy);
}

static void matmul_rows_avx2_vnni(const float *x, int M, const kern_matrix *w, int n0, int n1,
                                  const float *bias, float *y, int ldy) {
    if (!quant_int8_matmul_rows_avx2(x, M, w, n0, n1, bias, y, ldy))
        kern_ops_avx2.matmul_rows(x, M, w, n0, n1, bias, y, ldy);
}

static kern_ops ops_avx512_vnni, ops_avx2_vnni;
static pthread_once_t ops_once = PTHREAD_ONCE_INIT;

static void build_ops(void) {
    ops_avx512_vnni = kern_ops_avx512;
    ops_avx512_vnni.isa = KVLM_ISA_AVX512_VNNI;
    ops_avx512_vnni.matmul_rows = matmul_rows_avx512_vnni;
    ops_avx2_vnni = kern_ops_avx2;
    ops_avx2_vnni.isa = KVLM_ISA_AVX2_VNNI;
    ops_avx2_vnni.matmul_rows = matmul_rows_avx2_vnni;
}

const kern_ops *quant_int8_ops(kvlm_isa isa) {
    pthread_once(&ops_once, build_ops);
    if (isa == KVLM_ISA_AVX512_VNNI) return &ops_avx512_vnni;
    if (isa == KVLM_ISA_AVX2_VNNI) return &ops_avx2_vnni;
    return NULL;
}
