/*
 * The sampler's vector kernels with NEON, 4 floats at a time: bit-identical
 * to the reference in vec_softmax.c (same operations in the same order, no
 * fused multiply-add; the exp row's sum in the 16-lane order vec_softmax.h
 * defines, as eight 2-double accumulators). Tails go through the
 * reference. aarch64 only.
 */
#include <arm_neon.h>
#include <math.h>

#include "kernels/vec_softmax.h"

static float max_neon_row(const float *x, size_t n) {
    float32x4_t acc = vdupq_n_f32(-INFINITY);
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t v = vld1q_f32(x + i);
        acc = vbslq_f32(vcgtq_f32(v, acc), v, acc); /* NaN in x: acc kept */
    }
    float lanes[4];
    vst1q_f32(lanes, acc);
    float m = -INFINITY;
    for (int j = 0; j < 4; j++)
        if (lanes[j] > m) m = lanes[j];
    for (; i < n; i++)
        if (x[i] > m) m = x[i];
    return m;
}

static void div_neon(float *x, size_t n, float d) {
    const float32x4_t vd = vdupq_n_f32(d);
    size_t i = 0;
    for (; i + 4 <= n; i += 4) vst1q_f32(x + i, vdivq_f32(vld1q_f32(x + i), vd));
    for (; i < n; i++) x[i] /= d;
}

#include "kernels/vec_exp_neon.h"

static double exp_sum_neon(const float *x, float *y, size_t n, float shift) {
    const float32x4_t vs = vdupq_n_f32(shift);
    float64x2_t a[8]; /* a[k]: lanes 2k, 2k + 1 of the 16 */
    for (int k = 0; k < 8; k++) a[k] = vdupq_n_f64(0.0);
    const size_t n16 = n - n % 16;
    for (size_t i = 0; i < n16; i += 16)
        for (int q = 0; q < 4; q++) {
            const float32x4_t e = vec_exp4(vsubq_f32(vld1q_f32(x + i + 4 * q), vs));
            vst1q_f32(y + i + 4 * q, e);
            a[2 * q] = vaddq_f64(a[2 * q], vcvt_f64_f32(vget_low_f32(e)));
            a[2 * q + 1] = vaddq_f64(a[2 * q + 1], vcvt_high_f64_f32(e));
        }
    for (int k = 0; k < 4; k++) a[k] = vaddq_f64(a[k], a[k + 4]); /* lanes 8+8 */
    for (int k = 0; k < 2; k++) a[k] = vaddq_f64(a[k], a[k + 2]); /* 4+4 */
    a[0] = vaddq_f64(a[0], a[1]);                                 /* 2+2 */
    double sum = vgetq_lane_f64(a[0], 0) + vgetq_lane_f64(a[0], 1);
    for (size_t i = n16; i < n; i++) {
        y[i] = vec_expf(x[i] - shift);
        sum += y[i];
    }
    return sum;
}

static size_t keep_ge_neon(const float *p, size_t n, float cut, int32_t *out) {
    const float32x4_t vc = vdupq_n_f32(cut);
    const uint32x4_t bit = {1, 2, 4, 8};
    size_t m = 0, i = 0;
    for (; i + 4 <= n; i += 4) {
        unsigned k = vaddvq_u32(vandq_u32(vcgeq_f32(vld1q_f32(p + i), vc), bit));
        while (k) {
            out[m++] = (int32_t)(i + (size_t)__builtin_ctz(k));
            k &= k - 1;
        }
    }
    for (; i < n; i++)
        if (p[i] >= cut) out[m++] = (int32_t)i;
    return m;
}

const vec_softmax_ops vec_softmax_neon = {KVLM_ISA_NEON, max_neon_row, div_neon, exp_sum_neon, keep_ge_neon};
