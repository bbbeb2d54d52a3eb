/*
 * The neon-i8mm level's K-quant matmul (Q4_K, Q5_K, Q6_K; aarch64 only;
 * compiled with +dotprod+i8mm and run only after
 * kern_cpu_supports(KVLM_ISA_NEON_I8MM)) against two or more rows of x,
 * from neon-dotprod's prepared form (quant_int8_dotprod.c); one row of x
 * never reaches it (quant_int8_i8mm.c sends it to neon-dotprod).
 *
 * Per pair of weight rows n, n + 1, both rows are written out once into
 * the caller's panel (quant_int8_row_codes_neon: int8 codes with a and b
 * per 16 values), their codes interleaved 8 by 8 and their a, b pair by
 * pair. Per 2 x 2 tile (rows m, m + 1 of x) and 32-value block, four SMMLA
 * give the exact group sums s_0, s_1 of all four outputs; the float steps
 * are then neon-dotprod's (quant_int8_kdot_neon.h), in the same order, one
 * output per lane: products and sums rounded in f32 (no FMA), the block
 * terms added in double. Outputs outside whole tiles (the last row of an
 * odd M, the last weight row of an odd range) take kdot_one itself. So
 * every output has neon-dotprod's bits, however the rows are split.
 *
 * The panel (quant_int8_i8mm_kpanel_bytes(K), 6 K bytes): the interleaved
 * codes (2 K), each row's codes (K, K), a and b of each row (K / 16 floats
 * each), the interleaved a and b (K / 8 floats each).
 */
#include <arm_neon.h>
#include <stdint.h>

#include "kernels/quant_int8.h"
#include "kernels/quant_int8_kdot_neon.h"
#include "tensor.h"

#define AI static inline __attribute__((always_inline))

size_t quant_int8_i8mm_kpanel_bytes(int K) { return ((size_t)6 * (size_t)K + 63) & ~(size_t)63; }

typedef struct kpanel {
    int8_t *z, *wc[2];
    float *a[2], *b[2], *pa, *pb;
} kpanel;

static kpanel kpanel_at(void *panel, int K) {
    const int G = K / 16;
    kpanel p;
    p.z = panel;
    p.wc[0] = p.z + 2 * (size_t)K;
    p.wc[1] = p.wc[0] + K;
    p.a[0] = (float *)(p.wc[1] + K);
    p.b[0] = p.a[0] + G;
    p.a[1] = p.b[0] + G;
    p.b[1] = p.a[1] + G;
    p.pa = p.b[1] + G;
    p.pb = p.pa + 2 * (size_t)G;
    return p;
}

AI int8x16_t zip_lo(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}
AI int8x16_t zip_hi(int8x16_t a, int8x16_t b) {
    return vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(a), vreinterpretq_s64_s8(b)));
}

/* Weight rows n, n + 1 written out and interleaved. */
static void write_pair(const kern_matrix *w, size_t rb, int n, int K, const kpanel *p) {
    for (int r = 0; r < 2; r++)
        quant_int8_row_codes_neon(w->dtype, (const unsigned char *)w->data + (size_t)(n + r) * rb, K, p->wc[r],
                                  p->a[r], p->b[r]);
    for (int i = 0; i < K; i += 16) {
        const int8x16_t c0 = vld1q_s8(p->wc[0] + i), c1 = vld1q_s8(p->wc[1] + i);
        vst1q_s8(p->z + 2 * i, zip_lo(c0, c1));
        vst1q_s8(p->z + 2 * i + 16, zip_hi(c0, c1));
    }
    for (int g = 0; g < K / 16; g++) {
        p->pa[2 * g] = p->a[0][g], p->pa[2 * g + 1] = p->a[1][g];
        p->pb[2 * g] = p->b[0][g], p->pb[2 * g + 1] = p->b[1][g];
    }
}

/* Rows m, m + 1 of x (codes q0, q1, scales d0, d1, group sums s0, s1)
 * against the panel's pair: lanes (m, n), (m, n + 1), (m + 1, n),
 * (m + 1, n + 1) of kdot_one's sum, in lo (first two) and hi. */
AI void k_tile(const kpanel *p, const int8_t *q0, const int8_t *q1, const float *d0, const float *d1,
               const int32_t *s0, const int32_t *s1, int K, float64x2_t *lo, float64x2_t *hi) {
    float64x2_t al = vdupq_n_f64(0), ah = vdupq_n_f64(0);
    const int32x4_t zero = vdupq_n_s32(0);
    for (int j = 0; j < K / 32; j++) {
        const int8x16_t l0 = vld1q_s8(q0 + 32 * j), h0 = vld1q_s8(q0 + 32 * j + 16);
        const int8x16_t l1 = vld1q_s8(q1 + 32 * j), h1 = vld1q_s8(q1 + 32 * j + 16);
        const int8_t *z = p->z + 64 * j;
        int32x4_t g0 = vmmlaq_s32(zero, zip_lo(l0, l1), vld1q_s8(z));
        g0 = vmmlaq_s32(g0, zip_hi(l0, l1), vld1q_s8(z + 16));
        int32x4_t g1 = vmmlaq_s32(zero, zip_lo(h0, h1), vld1q_s8(z + 32));
        g1 = vmmlaq_s32(g1, zip_hi(h0, h1), vld1q_s8(z + 48));
        const float32x4_t pa = vld1q_f32(p->pa + 4 * j), pb = vld1q_f32(p->pb + 4 * j);
        const float32x4_t a0 = vcombine_f32(vget_low_f32(pa), vget_low_f32(pa));
        const float32x4_t a1 = vcombine_f32(vget_high_f32(pa), vget_high_f32(pa));
        const float32x4_t b0 = vcombine_f32(vget_low_f32(pb), vget_low_f32(pb));
        const float32x4_t b1 = vcombine_f32(vget_high_f32(pb), vget_high_f32(pb));
        const float32x4_t qf = vcvtq_f32_s32(vcombine_s32(vld1_s32(s0 + 2 * j), vld1_s32(s1 + 2 * j)));
        const float32x4_t qg0 = vtrn1q_f32(qf, qf), qg1 = vtrn2q_f32(qf, qf);
        const float32x4_t dx = vcombine_f32(vdup_n_f32(d0[j]), vdup_n_f32(d1[j]));
        const float32x4_t t = vsubq_f32(vaddq_f32(vmulq_f32(a0, vcvtq_f32_s32(g0)), vmulq_f32(a1, vcvtq_f32_s32(g1))),
                                        vaddq_f32(vmulq_f32(b0, qg0), vmulq_f32(b1, qg1)));
        const float32x4_t u = vmulq_f32(dx, t);
        al = vaddq_f64(al, vcvt_f64_f32(vget_low_f32(u)));
        ah = vaddq_f64(ah, vcvt_high_f64_f32(u));
    }
    *lo = al, *hi = ah;
}

AI void put(float *y, int ldy, int m, int n, double acc, const float *bias) {
    y[(size_t)m * ldy + n] = (float)acc + (bias ? bias[n] : 0.0f);
}

void quant_int8_i8mm_krows(const int8_t *q, const float *d, const int32_t *qs, int M, int K, const kern_matrix *w,
                           int n0, int n1, void *panel, const float *bias, float *y, int ldy) {
    const size_t rb = dtype_row_bytes(w->dtype, K, NULL);
    const int nb = K / QK, G = K / 16, me = M & ~1;
    const kpanel p = kpanel_at(panel, K);
    int n = n0;
    for (; n + 2 <= n1; n += 2) {
        write_pair(w, rb, n, K, &p);
        for (int m = 0; m < me; m += 2) {
            float64x2_t lo, hi;
            k_tile(&p, q + (size_t)m * K, q + (size_t)(m + 1) * K, d + (size_t)m * nb, d + (size_t)(m + 1) * nb,
                   qs + (size_t)m * G, qs + (size_t)(m + 1) * G, K, &lo, &hi);
            put(y, ldy, m, n, vgetq_lane_f64(lo, 0), bias);
            put(y, ldy, m, n + 1, vgetq_lane_f64(lo, 1), bias);
            put(y, ldy, m + 1, n, vgetq_lane_f64(hi, 0), bias);
            put(y, ldy, m + 1, n + 1, vgetq_lane_f64(hi, 1), bias);
        }
        for (int m = me; m < M; m++)
            for (int r = 0; r < 2; r++)
                put(y, ldy, m, n + r,
                    kdot_one(p.wc[r], p.a[r], p.b[r], q + (size_t)m * K, d + (size_t)m * nb, qs + (size_t)m * G, K),
                    bias);
    }
    if (n < n1) {
        quant_int8_row_codes_neon(w->dtype, (const unsigned char *)w->data + (size_t)n * rb, K, p.wc[0], p.a[0],
                                  p.b[0]);
        for (int m = 0; m < M; m++)
            put(y, ldy, m, n,
                kdot_one(p.wc[0], p.a[0], p.b[0], q + (size_t)m * K, d + (size_t)m * nb, qs + (size_t)m * G, K),
                bias);
    }
}
