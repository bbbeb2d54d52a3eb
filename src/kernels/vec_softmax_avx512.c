/*
 * The sampler's vector kernels with AVX-512 (F, DQ), 16 floats at a time:
 * bit-identical to the reference in vec_softmax.c (same operations in the
 * same order, no fused multiply-add; the exp row's sum in the 16-lane order
 * vec_softmax.h defines). Tails go through the reference.
 */
#include <immintrin.h>
#include <math.h>

#include "kernels/vec_softmax.h"

static float max_avx512(const float *x, size_t n) {
    __m512 acc = _mm512_set1_ps(-INFINITY);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) acc = _mm512_max_ps(_mm512_loadu_ps(x + i), acc); /* NaN in x: acc kept */
    float m = _mm512_reduce_max_ps(acc);
    for (; i < n; i++)
        if (x[i] > m) m = x[i];
    return m;
}

static void div_avx512(float *x, size_t n, float d) {
    const __m512 vd = _mm512_set1_ps(d);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(x + i, _mm512_div_ps(_mm512_loadu_ps(x + i), vd));
    for (; i < n; i++) x[i] /= d;
}

#include "kernels/vec_exp_avx512.h"

static double exp_sum_avx512(const float *x, float *y, size_t n, float shift) {
    const __m512 vs = _mm512_set1_ps(shift);
    __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd(); /* lanes 0-7, 8-15 */
    const size_t n16 = n - n % 16;
    for (size_t i = 0; i < n16; i += 16) {
        const __m512 e = vec_exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vs));
        _mm512_storeu_ps(y + i, e);
        lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
    }
    const __m512d s8 = _mm512_add_pd(lo, hi);
    const __m256d s4 = _mm256_add_pd(_mm512_castpd512_pd256(s8), _mm512_extractf64x4_pd(s8, 1));
    const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
    double sum = _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
    for (size_t i = n16; i < n; i++) {
        y[i] = vec_expf(x[i] - shift);
        sum += y[i];
    }
    return sum;
}

static size_t keep_ge_avx512(const float *p, size_t n, float cut, int32_t *out) {
    const __m512 vc = _mm512_set1_ps(cut);
    const __m512i step = _mm512_set1_epi32(16);
    __m512i ids = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    size_t m = 0, i = 0;
    for (; i + 16 <= n; i += 16) {
        const __mmask16 k = _mm512_cmp_ps_mask(_mm512_loadu_ps(p + i), vc, _CMP_GE_OQ);
        if (k) {
            const int c = __builtin_popcount(k);
            _mm512_mask_storeu_epi32(out + m, (__mmask16)((1u << c) - 1), _mm512_maskz_compress_epi32(k, ids));
            m += (size_t)c;
        }
        ids = _mm512_add_epi32(ids, step);
    }
    for (; i < n; i++)
        if (p[i] >= cut) out[m++] = (int32_t)i;
    return m;
}

const vec_softmax_ops vec_softmax_avx512 = {KVLM_ISA_AVX512, max_avx512, div_avx512, exp_sum_avx512, keep_ge_avx512};
