/*
 * The avx512-vnni and avx2-vnni kernel sets (built once from the avx512 /
 * avx2 sets, matmul_rows and its prepared form replaced by
 * quant_int8_prep.c's) and the plain C reference of the int8 activation
 * matmul (quant_int8.h). The kern_ops exist on x86-64 only (the
 * neon-dotprod set is dotprod_set_neon.c's). Compiled without ISA flags:
 * nothing here runs a vector instruction of those sets itself.
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

int quant_int8_supports(kvlm_dtype t) {
    return t == KVLM_Q8_0 || t == KVLM_Q4_0 || t == KVLM_Q4_1 || t == KVLM_Q5_0 || t == KVLM_Q5_1 || t == KVLM_Q4_K ||
           t == KVLM_Q5_K || t == KVLM_Q6_K;
}

int quant_int8_lut_supports(kvlm_dtype t) { return t == KVLM_MXFP4 || t == KVLM_IQ4_XS; }

void quant_int8_row_codes(kvlm_dtype t, const unsigned char *row, int K, int8_t *w, float *a, float *b) {
    if (t == KVLM_MXFP4) {
        for (int kb = 0; kb < K / QK; kb++) {
            const unsigned char *blk = row + (size_t)kb * sizeof(blk_mxfp4), *q = blk + 1;
            for (int j = 0; j < QK / 2; j++)
                w[kb * QK + j] = mxfp4_levels[q[j] & 15], w[kb * QK + j + 16] = mxfp4_levels[q[j] >> 4];
            a[2 * kb] = a[2 * kb + 1] = e8m0_half_to_f32(blk[0]);
            b[2 * kb] = b[2 * kb + 1] = 0.0f;
        }
        return;
    }
    if (t == KVLM_IQ4_XS) {
        for (int kb = 0; kb < K / QK_K; kb++) {
            const unsigned char *blk = row + (size_t)kb * sizeof(blk_iq4_xs);
            const blk_iq4_xs *k = (const blk_iq4_xs *)blk;
            const float d = qb_f16(blk);
            for (int s = 0; s < 8; s++) {
                for (int l = 0; l < 16; l++) {
                    w[kb * QK_K + 32 * s + l] = iq4nl_levels[k->qs[16 * s + l] & 15];
                    w[kb * QK_K + 32 * s + 16 + l] = iq4nl_levels[k->qs[16 * s + l] >> 4];
                }
                a[kb * 16 + 2 * s] = a[kb * 16 + 2 * s + 1] = d * (float)qb_iq4_xs_scale(blk, s);
                b[kb * 16 + 2 * s] = b[kb * 16 + 2 * s + 1] = 0.0f;
            }
        }
        return;
    }
    if (t == KVLM_Q8_0 || t == KVLM_Q4_0) {
        const size_t bb = dtype_block_bytes(t);
        for (int kb = 0; kb < K / QK; kb++) {
            const unsigned char *blk = row + (size_t)kb * bb, *q = blk + 2;
            for (int j = 0; j < QK / 2; j++) {
                if (t == KVLM_Q8_0) w[kb * QK + j] = (int8_t)q[j], w[kb * QK + j + 16] = (int8_t)q[j + 16];
                else w[kb * QK + j] = (int8_t)((q[j] & 15) - 8), w[kb * QK + j + 16] = (int8_t)((q[j] >> 4) - 8);
            }
            a[2 * kb] = a[2 * kb + 1] = qb_f16(blk);
            b[2 * kb] = b[2 * kb + 1] = 0.0f;
        }
        return;
    }
    if (t == KVLM_Q4_1 || t == KVLM_Q5_0 || t == KVLM_Q5_1) {
        const size_t bb = dtype_block_bytes(t);
        for (int kb = 0; kb < K / QK; kb++) {
            const unsigned char *blk = row + (size_t)kb * bb;
            int32_t c[QK];
            if (t == KVLM_Q4_1)
                for (int j = 0; j < QK / 2; j++) c[j] = blk[4 + j] & 15, c[j + 16] = blk[4 + j] >> 4;
            else qb_codes5(blk + (t == KVLM_Q5_0 ? 2 : 4), blk + (t == KVLM_Q5_0 ? 6 : 8), c);
            for (int j = 0; j < QK; j++) w[kb * QK + j] = (int8_t)(c[j] - (t == KVLM_Q5_0 ? 16 : 0));
            a[2 * kb] = a[2 * kb + 1] = qb_f16(blk);
            b[2 * kb] = b[2 * kb + 1] = t == KVLM_Q5_0 ? 0.0f : -qb_f16(blk + 2);
        }
        return;
    }
    const size_t bb = dtype_block_bytes(t);
    for (int kb = 0; kb < K / QK_K; kb++) {
        const unsigned char *blk = row + (size_t)kb * bb;
        int8_t *wc = w + kb * QK_K;
        float *ab = a + kb * 16, *bbv = b + kb * 16;
        if (t == KVLM_Q6_K) {
            const blk_q6_k *k = (const blk_q6_k *)blk;
            const float d = qb_f16(blk + offsetof(blk_q6_k, d));
            for (int h = 0; h < 2; h++)
                for (int c = 0; c < 4; c++)
                    for (int l = 0; l < 32; l++) {
                        const int lo = (k->ql[64 * h + 32 * (c & 1) + l] >> (c < 2 ? 0 : 4)) & 15;
                        const int hi = (k->qh[32 * h + l] >> (2 * c)) & 3;
                        wc[128 * h + 32 * c + l] = (int8_t)((lo | hi << 4) - 32);
                    }
            for (int s = 0; s < 16; s++) ab[s] = d * (float)k->scales[s], bbv[s] = 0.0f;
            continue;
        }
        const blk_q4_k *k4 = (const blk_q4_k *)blk;
        const blk_q5_k *k5 = (const blk_q5_k *)blk;
        const unsigned char *qs = t == KVLM_Q4_K ? k4->qs : k5->qs;
        const float d = qb_f16(blk), dmin = qb_f16(blk + 2);
        for (int s = 0; s < 8; s++) {
            int sc, m;
            qb_scale_min_k4(blk + 4, s, &sc, &m);
            ab[2 * s] = ab[2 * s + 1] = d * (float)sc;
            bbv[2 * s] = bbv[2 * s + 1] = dmin * (float)m;
            for (int l = 0; l < 32; l++) {
                const unsigned char q = qs[32 * (s / 2) + l];
                int c = s & 1 ? q >> 4 : q & 15;
                if (t == KVLM_Q5_K) c |= ((k5->qh[l] >> s) & 1) << 4;
                wc[32 * s + l] = (int8_t)c;
            }
        }
    }
}

void quant_int8_matmul_ref(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias,
                           float *y, int ldy) {
    const int K = w->cols, nb = K / QK;
    const size_t rb = dtype_row_bytes(w->dtype, K, NULL);
    int8_t *q = malloc((size_t)K + 1);
    float *d = malloc(sizeof(float) * ((size_t)nb + 1)), *a = malloc(sizeof(float) * ((size_t)K / 16 + 1));
    float *b = malloc(sizeof(float) * ((size_t)K / 16 + 1));
    int8_t *c = malloc((size_t)K + 1);
    if (!q || !d || !a || !b || !c) {
        free(q), free(d), free(a), free(b), free(c);
        return;
    }
    for (int m = 0; m < M; m++) {
        quant_int8_quantize_row(x + (size_t)m * K, K, q, d);
        for (int n = n0; n < n1; n++) {
            quant_int8_row_codes(w->dtype, (const unsigned char *)w->data + (size_t)n * rb, K, c, a, b);
            double acc = 0;
            for (int g = 0; g < K / 16; g++) {
                int32_t swq = 0, sq = 0;
                for (int i = 16 * g; i < 16 * g + 16; i++) swq += c[i] * q[i], sq += q[i];
                acc += (double)d[g / 2] * ((double)a[g] * swq - (double)b[g] * sq);
            }
            y[(size_t)m * ldy + n] = (float)acc + (bias ? bias[n] : 0.0f);
        }
    }
    free(q), free(d), free(a), free(b), free(c);
}

#if defined(__x86_64__)
static kern_ops ops_avx512_vnni, ops_avx2_vnni;
static pthread_once_t ops_once = PTHREAD_ONCE_INIT;

static void build_ops(void) {
    ops_avx512_vnni = kern_ops_avx512;
    ops_avx512_vnni.isa = KVLM_ISA_AVX512_VNNI;
    ops_avx512_vnni.matmul_rows = quant_int8_vnni_matmul_rows_avx512;
    ops_avx512_vnni.matmul_prep_bytes = quant_int8_vnni_prep_bytes_avx512;
    ops_avx512_vnni.matmul_prep = quant_int8_vnni_prep_avx512;
    ops_avx512_vnni.matmul_rows_prep = quant_int8_vnni_rows_prep_avx512;
    ops_avx2_vnni = kern_ops_avx2;
    ops_avx2_vnni.isa = KVLM_ISA_AVX2_VNNI;
    ops_avx2_vnni.matmul_rows = quant_int8_vnni_matmul_rows_avx2;
    ops_avx2_vnni.matmul_prep_bytes = quant_int8_vnni_prep_bytes_avx2;
    ops_avx2_vnni.matmul_prep = quant_int8_vnni_prep_avx2;
    ops_avx2_vnni.matmul_rows_prep = quant_int8_vnni_rows_prep_avx2;
}

const kern_ops *quant_int8_ops(kvlm_isa isa) {
    pthread_once(&ops_once, build_ops);
    if (isa == KVLM_ISA_AVX512_VNNI) return &ops_avx512_vnni;
    if (isa == KVLM_ISA_AVX2_VNNI) return &ops_avx2_vnni;
    return NULL;
}
#endif
