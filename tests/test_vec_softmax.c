/*
 * The sampler's vector kernels (kernels/vec_softmax.h): vec_expf is within
 * 2 ulp of exp over the range the sampler uses and exactly 0 below it;
 * every ISA variant the CPU has returns the same bits as the scalar
 * reference (max, division, exp and the lane-ordered sum, the threshold
 * filter), tails and NaN/infinity included; and a seeded sampler draws the
 * same tokens with every variant, the tokens pinned here.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kernels/kernels.h"
#include "kernels/vec_softmax.h"
#include "kvlm.h"
#include "runtime/sampler.h"

static const kvlm_isa isas[] = {KVLM_ISA_SCALAR, KVLM_ISA_AVX2, KVLM_ISA_AVX512, KVLM_ISA_NEON};

static uint64_t lcg(uint64_t *st) {
    *st = *st * 6364136223846793005ull + 1442695040888963407ull;
    return *st >> 11;
}

/* Logits in [-scale, scale) with a few specials. */
static void fill(float *x, int n, float scale, uint64_t seed) {
    uint64_t st = seed;
    for (int i = 0; i < n; i++) x[i] = scale * (float)((double)lcg(&st) / 4503599627370496.0 - 1.0);
    if (n > 40) {
        x[3] = -INFINITY;
        x[17] = NAN;
        x[31] = -1000.0f;
        x[n - 1] = -0.0f;
    }
}

static void test_expf_accuracy(void **state) {
    (void)state;
    double worst = 0;
    for (int i = 0; i <= 2000000; i++) {
        const float x = -86.5f + 88.0f * (float)i / 2000000.0f; /* [-86.5, 1.5] */
        const double want = exp((double)x);
        const double ulp = ldexp(1.0, ilogb(want) - 23);
        const double e = fabs((double)vec_expf(x) - want) / ulp;
        if (e > worst) worst = e;
    }
    if (worst > 2.0) fail_msg("vec_expf is %.2f ulp from exp", worst);
    assert_true(vec_expf(0.0f) == 1.0f);
    assert_true(vec_expf(-0.0f) == 1.0f);
    assert_true(vec_expf(-86.6f) == 0.0f);
    assert_true(vec_expf(-INFINITY) == 0.0f);
    assert_true(vec_expf(NAN) == 0.0f);
    assert_true(vec_expf(1000.0f) == vec_expf(88.0f));
    assert_true(isfinite(vec_expf(88.0f)));
}

static void test_variants_match_reference(void **state) {
    (void)state;
    const int sizes[] = {0, 1, 7, 15, 16, 17, 33, 100, 1001, 50257};
    const int V = 50257;
    float *x = malloc(V * sizeof(float)), *y0 = malloc(V * sizeof(float)), *y1 = malloc(V * sizeof(float));
    float *d0 = malloc(V * sizeof(float)), *d1 = malloc(V * sizeof(float));
    int32_t *k0 = malloc(V * sizeof(int32_t)), *k1 = malloc(V * sizeof(int32_t));
    const vec_softmax_ops *ref = vec_softmax_select(KVLM_ISA_SCALAR);
    assert_non_null(ref);
    int tested = 0;
    for (size_t a = 1; a < sizeof isas / sizeof isas[0]; a++) {
        const vec_softmax_ops *ops = vec_softmax_select(isas[a]);
        if (!ops) continue;
        tested++;
        assert_int_equal(ops->isa, isas[a]);
        for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
            const int n = sizes[si];
            for (int scale = 1; scale <= 64; scale *= 8) {
                fill(x, n, (float)scale, (uint64_t)(n * 31 + scale));
                const float m0 = ref->max(x, (size_t)n), m1 = ops->max(x, (size_t)n);
                assert_memory_equal(&m0, &m1, sizeof m0);
                const float shift = n ? m0 : 0.0f;
                const double s0 = ref->exp_sum(x, y0, (size_t)n, shift), s1 = ops->exp_sum(x, y1, (size_t)n, shift);
                assert_memory_equal(&s0, &s1, sizeof s0);
                if (n) assert_memory_equal(y0, y1, (size_t)n * sizeof(float));
                for (int i = 0; i < n; i++) assert_true(y0[i] == vec_expf(x[i] - shift));
                memcpy(d0, x, (size_t)n * sizeof(float));
                memcpy(d1, x, (size_t)n * sizeof(float));
                ref->div(d0, (size_t)n, 0.7f);
                ops->div(d1, (size_t)n, 0.7f);
                if (n) assert_memory_equal(d0, d1, (size_t)n * sizeof(float));
                const float cut = 0.01f;
                const size_t c0 = ref->keep_ge(y0, (size_t)n, cut, k0), c1 = ops->keep_ge(y0, (size_t)n, cut, k1);
                assert_int_equal(c0, c1);
                if (c0) assert_memory_equal(k0, k1, c0 * sizeof(int32_t));
                size_t want = 0;
                for (int i = 0; i < n; i++) want += y0[i] >= cut;
                assert_int_equal(c0, want);
            }
        }
    }
    /* This CPU runs at least one vector variant (the suite's machines have AVX2 or NEON). */
    if (kern_cpu_supports(KVLM_ISA_AVX2) || kern_cpu_supports(KVLM_ISA_NEON)) assert_true(tested >= 1);
    free(x), free(y0), free(y1), free(d0), free(d1), free(k0), free(k1);
}

/* AUTO and the int8-activation sets (which differ from avx2/avx512 only in
 * matmul) get the vector sampler kernels, not the scalar reference. */
static void test_select_vnni_and_auto(void **state) {
    (void)state;
#if defined(__x86_64__)
    if (kern_cpu_supports(KVLM_ISA_AVX512)) {
        assert_ptr_equal(vec_softmax_select(KVLM_ISA_AVX512), &vec_softmax_avx512);
        if (vec_softmax_select(KVLM_ISA_AVX512_VNNI))
            assert_ptr_equal(vec_softmax_select(KVLM_ISA_AVX512_VNNI), &vec_softmax_avx512);
    }
    if (kern_cpu_supports(KVLM_ISA_AVX2) && vec_softmax_select(KVLM_ISA_AVX2_VNNI))
        assert_ptr_equal(vec_softmax_select(KVLM_ISA_AVX2_VNNI), &vec_softmax_avx2);
#elif defined(__aarch64__)
    assert_ptr_equal(vec_softmax_select(KVLM_ISA_NEON), &vec_softmax_neon);
    if (kern_cpu_supports(KVLM_ISA_NEON_DOTPROD))
        assert_ptr_equal(vec_softmax_select(KVLM_ISA_NEON_DOTPROD), &vec_softmax_neon);
    else
        assert_null(vec_softmax_select(KVLM_ISA_NEON_DOTPROD));
#endif
    const vec_softmax_ops *best = vec_softmax_select(KVLM_ISA_AUTO);
    assert_non_null(best);
    if (kern_cpu_supports(KVLM_ISA_AVX2) || kern_cpu_supports(KVLM_ISA_NEON))
        assert_ptr_not_equal(best, &vec_softmax_scalar);
}

/* The same seed draws the same tokens with every ISA's kernels. */
static void test_sampler_same_tokens_every_isa(void **state) {
    (void)state;
    const int V = 50257, N = 64;
    float *lg = malloc(V * sizeof(float));
    struct { float t; int k; float p, minp; } cfg[] = {{0.8f, 0, 0.95f, 0}, {1.0f, 0, 1, 0}, {0.8f, 40, 0.95f, 0},
                                                      {0.7f, 0, 1, 0.05f}, {0, 0, 1, 0}};
    int32_t want[5][64];
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++)
        for (size_t a = 0; a < sizeof isas / sizeof isas[0]; a++) {
            kvlm_sampler_options o = kvlm_sampler_default_params();
            o.temperature = cfg[c].t, o.top_k = cfg[c].k, o.top_p = cfg[c].p, o.min_p = cfg[c].minp, o.seed = 5;
            kvlm_error err;
            kvlm_sampler *s = kvlm_sampler_create(&o, V, &err);
            assert_non_null(s);
            if (smp_use_isa(s, isas[a])) {
                kvlm_sampler_free(s);
                continue;
            }
            for (int i = 0; i < N; i++) {
                fill(lg, V, 2.0f + (float)(i % 4), (uint64_t)(i + 1));
                const int32_t id = kvlm_sampler_next(s, lg);
                if (a == 0) want[c][i] = id;
                else if (id != want[c][i])
                    fail_msg("config %zu, %s, token %d: %d, scalar drew %d", c, kvlm_isa_name(isas[a]), i, id, want[c][i]);
            }
            kvlm_sampler_free(s);
        }
    /* Pinned: the exp and the summation order are part of what a seed means. */
    const int32_t pinned[5][4] = {{14613, 30396, 33042, 41090},
                                   {14555, 30343, 32969, 41023},
                                   {17499, 46566, 31377, 24194},
                                   {14588, 30396, 32994, 41010},
                                   {2236, 22636, 44552, 37463}};
    for (int c = 0; c < 5; c++)
        for (int i = 0; i < 4; i++)
            if (want[c][i] != pinned[c][i]) fail_msg("config %d token %d: %d, pinned %d", c, i, want[c][i], pinned[c][i]);
    free(lg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_expf_accuracy),
        cmocka_unit_test(test_variants_match_reference),
        cmocka_unit_test(test_select_vnni_and_auto),
        cmocka_unit_test(test_sampler_same_tokens_every_isa),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
