/*
 * The sampler's vector kernels in plain C: the reference every ISA variant
 * reproduces bit for bit (vec_softmax.h states the exponential and the
 * summation order), and the choice of variant by ISA. Built with
 * -ffp-contract=off, so no multiply-add is fused behind our back.
 */
#include "kernels/vec_softmax.h"

#include <math.h>
#include <string.h>

#include "kernels/kernels.h"

float vec_expf(float x) {
    if (!(x >= VEC_EXP_LO)) return 0.0f;
    if (x > VEC_EXP_HI) x = VEC_EXP_HI;
    const float t = x * VEC_EXP_LOG2E + VEC_EXP_MAGIC;
    const float k = t - VEC_EXP_MAGIC;
    float r = x - k * VEC_EXP_LN2_HI;
    r = r - k * VEC_EXP_LN2_LO;
    float p = VEC_EXP_C0;
    p = p * r + VEC_EXP_C1;
    p = p * r + VEC_EXP_C2;
    p = p * r + VEC_EXP_C3;
    p = p * r + VEC_EXP_C4;
    p = p * r + VEC_EXP_C5;
    const float y = p * (r * r) + r + 1.0f;
    const uint32_t bits = (uint32_t)((int32_t)k + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return y * scale;
}

static float max_scalar(const float *x, size_t n) {
    float m = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (x[i] > m) m = x[i];
    return m;
}

static void div_scalar(float *x, size_t n, float d) {
    for (size_t i = 0; i < n; i++) x[i] /= d;
}

static double exp_sum_scalar(const float *x, float *y, size_t n, float shift) {
    double lane[16] = {0};
    const size_t n16 = n - n % 16;
    for (size_t i = 0; i < n16; i += 16)
        for (int j = 0; j < 16; j++) {
            y[i + j] = vec_expf(x[i + j] - shift);
            lane[j] += y[i + j];
        }
    for (int w = 8; w >= 1; w /= 2)
        for (int j = 0; j < w; j++) lane[j] += lane[j + w];
    double sum = lane[0];
    for (size_t i = n16; i < n; i++) {
        y[i] = vec_expf(x[i] - shift);
        sum += y[i];
    }
    return sum;
}

static size_t keep_ge_scalar(const float *p, size_t n, float cut, int32_t *out) {
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        out[m] = (int32_t)i;
        m += p[i] >= cut;
    }
    return m;
}

const vec_softmax_ops vec_softmax_scalar = {KVLM_ISA_SCALAR, max_scalar, div_scalar, exp_sum_scalar, keep_ge_scalar};

const vec_softmax_ops *vec_softmax_of(kvlm_isa isa) {
    switch (isa) {
    case KVLM_ISA_SCALAR: return &vec_softmax_scalar;
#if defined(__x86_64__)
    case KVLM_ISA_AVX2:
    case KVLM_ISA_AVX2_VNNI: return &vec_softmax_avx2; /* -vnni sets differ in matmul only */
    case KVLM_ISA_AVX512:
    case KVLM_ISA_AVX512_VNNI: case KVLM_ISA_AVX512_BF16: return &vec_softmax_avx512;
#elif defined(__aarch64__)
    case KVLM_ISA_NEON: case KVLM_ISA_NEON_DOTPROD: case KVLM_ISA_NEON_I8MM: case KVLM_ISA_NEON_BF16:
        return &vec_softmax_neon;
#endif
    default: return NULL;
    }
}

const vec_softmax_ops *vec_softmax_select(kvlm_isa isa) {
    if (isa == KVLM_ISA_AUTO) isa = kvlm_isa_best();
    return kern_cpu_supports(isa) ? vec_softmax_of(isa) : NULL;
}
