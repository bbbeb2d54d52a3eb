/*
 * Distribution and text statistics against hand-computed values: uniform
 * distributions (entropy ln V, ceil(0.9 V) tokens for 90%), a two-point
 * distribution, temperature scaling, statistics after a sampler chain, the
 * one-pass kvlm_logits_entropy against them (and with -inf logits), and
 * distinct-token ratio and repeated 4-gram rate on fixed id sequences; the
 * read-bandwidth probe's buffer size (raised past the caches, whole tiles).
 */
#include <math.h>
#include <stdlib.h>

#include "helpers.h"
#include "kvlm_measure.h"

static void test_uniform(void **state) {
    (void)state;
    const int Vs[] = {1, 10, 1000, 50257};
    for (size_t i = 0; i < 4; i++) {
        int V = Vs[i];
        float *lg = calloc((size_t)V, sizeof(float));
        kvlm_dist_stats st;
        kvlm_error err;
        assert_int_equal(kvlm_dist_stats_compute(lg, V, 0.7f, NULL, &st, &err), 0);
        assert_true(fabs(st.entropy - log(V)) < 1e-9 * (1 + log(V)));
        assert_int_equal(st.n90, (int)ceil(0.9 * V));
        assert_true(fabs(st.top1 - 1.0 / V) < 1e-12);
        assert_true(fabs(st.top5 - (V < 5 ? 1.0 : 5.0 / V)) < 1e-9);
        assert_int_equal(st.support, V);
        free(lg);
    }
}

static void test_two_point_and_temperature(void **state) {
    (void)state;
    /* logits ln 3 and 0: p = 0.75, 0.25 at T = 1; at T = 0.5: 0.9, 0.1 */
    float lg[2] = {logf(3.0f), 0.0f};
    kvlm_dist_stats st;
    kvlm_error err;
    assert_int_equal(kvlm_dist_stats_compute(lg, 2, 1.0f, NULL, &st, &err), 0);
    assert_true(fabs(st.entropy - (-(0.75 * log(0.75) + 0.25 * log(0.25)))) < 1e-6);
    assert_true(fabs(st.top1 - 0.75) < 1e-6);
    assert_int_equal(st.n90, 2);
    assert_int_equal(kvlm_dist_stats_compute(lg, 2, 0.5f, NULL, &st, &err), 0);
    assert_true(fabs(st.top1 - 0.9) < 1e-6);
    assert_int_equal(st.n90, 1);
    assert_int_equal(kvlm_dist_stats_compute(lg, 2, 0.0f, NULL, &st, &err), KVLM_ERR_ARG);
    /* after top-k 1: one token left, entropy 0 */
    kvlm_sampler_options o = kvlm_sampler_default_params();
    o.top_k = 1;
    kvlm_sampler *s = kvlm_sampler_create(&o, 2, &err);
    assert_int_equal(kvlm_dist_stats_compute(lg, 2, 1.0f, s, &st, &err), 0);
    assert_true(st.entropy == 0 && st.top1 == 1 && st.n90 == 1 && st.support == 1);
    kvlm_sampler_free(s);
}

/* kvlm_logits_entropy (no sort) against the sorted computation and by hand. */
static void test_logits_entropy(void **state) {
    (void)state;
    const int V = 50257;
    float *lg = malloc((size_t)V * sizeof(float));
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < V; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        lg[i] = (float)((double)(x >> 11) / 9007199254740992.0 * 20.0 - 10.0);
    }
    kvlm_dist_stats st;
    kvlm_error err;
    assert_int_equal(kvlm_dist_stats_compute(lg, V, 1.0f, NULL, &st, &err), 0);
    assert_true(fabs(kvlm_logits_entropy(lg, V) - st.entropy) < 1e-9);
    for (int i = 0; i < V; i++) lg[i] = 0;
    assert_true(fabs(kvlm_logits_entropy(lg, V) - log(V)) < 1e-9);
    free(lg);
    /* banned tokens (-inf) contribute nothing; all banned: NaN */
    float two[4] = {logf(3.0f), -INFINITY, 0.0f, -INFINITY};
    assert_true(fabs(kvlm_logits_entropy(two, 4) - (-(0.75 * log(0.75) + 0.25 * log(0.25)))) < 1e-7);
    float one[2] = {5.0f, -INFINITY};
    assert_true(kvlm_logits_entropy(one, 2) == 0);
    float none[2] = {-INFINITY, -INFINITY};
    assert_true(isnan(kvlm_logits_entropy(none, 2)));
}

static void test_text_stats(void **state) {
    (void)state;
    /* 1 2 3 4 1 2 3 4 1 2: 4 distinct ids of 10 */
    const int32_t a[10] = {1, 2, 3, 4, 1, 2, 3, 4, 1, 2};
    assert_true(fabs(kvlm_distinct_ratio(a, 10) - 0.4) < 1e-12);
    /* grams: 1234 2341 3412 4123 1234* 2341* 3412* -> 3 of 7 */
    assert_true(fabs(kvlm_repeated_ngram_rate(a, 10, 4) - 3.0 / 7) < 1e-12);
    const int32_t b[6] = {5, 6, 7, 8, 9, 10};
    assert_true(kvlm_distinct_ratio(b, 6) == 1.0);
    assert_true(kvlm_repeated_ngram_rate(b, 6, 4) == 0.0);
    const int32_t c[8] = {7, 7, 7, 7, 7, 7, 7, 7};
    assert_true(fabs(kvlm_distinct_ratio(c, 8) - 0.125) < 1e-12);
    assert_true(fabs(kvlm_repeated_ngram_rate(c, 8, 4) - 4.0 / 5) < 1e-12); /* all but the first */
    assert_true(kvlm_repeated_ngram_rate(c, 3, 4) == 0.0);                  /* no 4-gram at all */
    assert_true(kvlm_distinct_ratio(c, 0) == 0.0);
    assert_true(fabs(kvlm_repeated_ngram_rate(a, 10, 2) - 5.0 / 9) < 1e-12); /* bigrams 12 23 34 41, then 5 repeats */
}

/* A small request is raised (to twice the largest cache sysfs reports);
 * what comes back is already whole 32 KiB tiles and large enough, so it
 * maps to itself, larger requests stay and round down to a tile. */
static void test_bandwidth_buffer(void **state) {
    (void)state;
    const size_t small = kvlm_read_bandwidth_buffer_bytes((size_t)16 << 20);
    assert_true(small >= (size_t)16 << 20);
    assert_int_equal(small % 32768, 0);
    assert_int_equal(kvlm_read_bandwidth_buffer_bytes(small), small);
    assert_int_equal(kvlm_read_bandwidth_buffer_bytes(small + 100), small);
    assert_int_equal(kvlm_read_bandwidth_buffer_bytes(2 * small + 32768), 2 * small + 32768);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uniform),
        cmocka_unit_test(test_two_point_and_temperature),
        cmocka_unit_test(test_logits_entropy),
        cmocka_unit_test(test_text_stats),
        cmocka_unit_test(test_bandwidth_buffer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
