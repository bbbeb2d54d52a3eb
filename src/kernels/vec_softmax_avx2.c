/*
 * The sampler's vector kernels with AVX2, 8 floats at a time: bit-identical
 * to the reference in vec_softmax.c (same operations in the same order, no
 * fused multiply-add; the exp row's sum in the 16-lane order vec_softmax.h
 * defines, as four 4-double accumulators). Tails go through the reference.
 */
#include <immintrin.h>
#include <math.h>

#include "kernels/vec_softmax.h"

static float max_avx2(const float *x, size_t n) {
    __m256 acc = _mm256_set1_ps(-INFINITY);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_max_ps(_mm256_loadu_ps(x + i), acc); /* NaN in x: acc kept */
    float lanes[8];
    _mm256_storeu_ps(lanes, acc);
    float m = -INFINITY;
    for (int j = 0; j < 8; j++)
        if (lanes[j] > m) m = lanes[j];
    for (; i < n; i++)
        if (x[i] > m) m = x[i];
    return m;
}

static void div_avx2(float *x, size_t n, float d) {
    const __m256 vd = _mm256_set1_ps(d);
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_div_ps(_mm256_loadu_ps(x + i), vd));
    for (; i < n; i++) x[i] /= d;
}

#include "kernels/vec_exp_avx2.h"

static double exp_sum_avx2(const float *x, float *y, size_t n, float shift) {
    const __m256 vs = _mm256_set1_ps(shift);
    __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0; /* lanes 0-3, 4-7, 8-11, 12-15 */
    const size_t n16 = n - n % 16;
    for (size_t i = 0; i < n16; i += 16) {
        const __m256 e0 = vec_exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vs));
        const __m256 e1 = vec_exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vs));
        _mm256_storeu_ps(y + i, e0);
        _mm256_storeu_ps(y + i + 8, e1);
        a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(e0)));
        a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(e0, 1)));
        a2 = _mm256_add_pd(a2, _mm256_cvtps_pd(_mm256_castps256_ps128(e1)));
        a3 = _mm256_add_pd(a3, _mm256_cvtps_pd(_mm256_extractf128_ps(e1, 1)));
    }
    const __m256d s4 = _mm256_add_pd(_mm256_add_pd(a0, a2), _mm256_add_pd(a1, a3));
    const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
    double sum = _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
    for (size_t i = n16; i < n; i++) {
        y[i] = vec_expf(x[i] - shift);
        sum += y[i];
    }
    return sum;
}

static size_t keep_ge_avx2(const float *p, size_t n, float cut, int32_t *out) {
    const __m256 vc = _mm256_set1_ps(cut);
    size_t m = 0, i = 0;
    for (; i + 8 <= n; i += 8) {
        unsigned k = (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(p + i), vc, _CMP_GE_OQ));
        while (k) {
            out[m++] = (int32_t)(i + (size_t)__builtin_ctz(k));
            k &= k - 1;
        }
    }
    for (; i < n; i++)
        if (p[i] >= cut) out[m++] = (int32_t)i;
    return m;
}

const vec_softmax_ops vec_softmax_avx2 = {KVLM_ISA_AVX2, max_avx2, div_avx2, exp_sum_avx2, keep_ge_avx2};
