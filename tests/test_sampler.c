/*
 * The sampler draws from the distribution it claims: frequencies over many
 * seeded draws match the renormalised probabilities after temperature,
 * top-k and top-p; tokens outside the kept set are never drawn; the same
 * seed gives the same sequence; top logprobs equal log-softmax.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kvlm.h"

#define DRAWS 200000

static void counts_for(const float *logits, int V, kvlm_sampler_options o, int *counts) {
    kvlm_error err;
    kvlm_sampler *s = kvlm_sampler_create(&o, V, &err);
    assert_non_null(s);
    memset(counts, 0, (size_t)V * sizeof(int));
    for (int i = 0; i < DRAWS; i++) counts[kvlm_sampler_next(s, logits)]++;
    kvlm_sampler_free(s);
}

/* p = [0.5, 0.2, 0.15, 0.1, 0.05]; expected frequencies within 0.006
 * (over 4 standard deviations at 200,000 draws). */
static void test_frequencies(void **state) {
    (void)state;
    const float p[5] = {0.5f, 0.2f, 0.15f, 0.1f, 0.05f};
    float lg[5];
    for (int i = 0; i < 5; i++) lg[i] = logf(p[i]) + 3.0f; /* any shift */
    int c[5];
    struct { kvlm_sampler_options o; double want[5]; } cases[] = {
        {{1.0f, 0, 1.0f, 1}, {0.5, 0.2, 0.15, 0.1, 0.05}},
        {{1.0f, 0, 0.8f, 2}, {0.5 / 0.85, 0.2 / 0.85, 0.15 / 0.85, 0, 0}},  /* nucleus {0,1,2} */
        {{1.0f, 0, 0.5f, 3}, {1, 0, 0, 0, 0}},                              /* 0.5 reaches 0.5 */
        {{1.0f, 2, 1.0f, 4}, {0.5 / 0.7, 0.2 / 0.7, 0, 0, 0}},              /* top-k 2 */
        {{1.0f, 3, 0.7f, 5}, {0.5 / 0.7, 0.2 / 0.7, 0, 0, 0}},              /* top-k 3 then 70% of 0.85 */
        {{0.5f, 0, 1.0f, 6}, {0.25 / 0.325, 0.04 / 0.325, 0.0225 / 0.325, 0.01 / 0.325, 0.0025 / 0.325}}, /* p^2 */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        counts_for(lg, 5, cases[k].o, c);
        for (int i = 0; i < 5; i++) {
            double f = (double)c[i] / DRAWS;
            if (fabs(f - cases[k].want[i]) > 0.006) fail_msg("case %zu token %d: %.4f, want %.4f", k, i, f, cases[k].want[i]);
            if (cases[k].want[i] == 0) assert_int_equal(c[i], 0);
        }
    }
}

/* A large vocabulary: every draw lies in the brute-force nucleus. */
static int cmp_desc(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

static void test_nucleus_large_vocab(void **state) {
    (void)state;
    const int V = 5000;
    float *lg = malloc(V * sizeof(float)), *pr = malloc(V * sizeof(float));
    srand(11);
    for (int trial = 0; trial < 5; trial++) {
        double sum = 0;
        for (int i = 0; i < V; i++) {
            lg[i] = (float)(rand() % 10000) / 1000.0f * (trial + 1) / 3.0f;
            sum += exp(lg[i]);
        }
        for (int i = 0; i < V; i++) pr[i] = (float)(exp(lg[i]) / sum);
        float *sorted = malloc(V * sizeof(float));
        memcpy(sorted, pr, V * sizeof(float));
        qsort(sorted, V, sizeof(float), cmp_desc);
        double acc = 0;
        int m = 0;
        while (acc < 0.9) acc += sorted[m++];
        float threshold = sorted[m - 1]; /* smallest probability in the nucleus */
        kvlm_error err;
        kvlm_sampler_options o = {1.0f, 0, 0.9f, (uint64_t)trial};
        kvlm_sampler *s = kvlm_sampler_create(&o, V, &err);
        for (int d = 0; d < 20000; d++) {
            int32_t id = kvlm_sampler_next(s, lg);
            assert_true(pr[id] >= threshold * (1 - 1e-5f));
        }
        kvlm_sampler_free(s);
        free(sorted);
    }
    free(lg);
    free(pr);
}

static void test_seed_and_greedy(void **state) {
    (void)state;
    float lg[50];
    for (int i = 0; i < 50; i++) lg[i] = sinf((float)i);
    kvlm_error err;
    kvlm_sampler_options o = {0.9f, 0, 0.95f, 42};
    kvlm_sampler *a = kvlm_sampler_create(&o, 50, &err), *b = kvlm_sampler_create(&o, 50, &err);
    for (int i = 0; i < 1000; i++) assert_int_equal(kvlm_sampler_next(a, lg), kvlm_sampler_next(b, lg));
    kvlm_sampler_free(a);
    kvlm_sampler_free(b);
    kvlm_sampler_options g = {0, 0, 1, 0};
    kvlm_sampler *gs = kvlm_sampler_create(&g, 50, &err);
    assert_int_equal(kvlm_sampler_next(gs, lg), 33); /* sin(33) = 0.99991 is the largest */
    kvlm_sampler_free(gs);
    kvlm_sampler_options bad = {-1, 0, 1, 0};
    assert_null(kvlm_sampler_create(&bad, 50, &err));
    assert_non_null(strstr(err.msg, "temperature"));
}

static void test_top_logprobs(void **state) {
    (void)state;
    const float lg[4] = {1.0f, 3.0f, 2.0f, 3.0f};
    int32_t ids[3];
    float lp[3];
    assert_int_equal(kvlm_top_logprobs(lg, 4, 3, ids, lp), 3);
    double lse = log(exp(1.0) + 2 * exp(3.0) + exp(2.0));
    assert_int_equal(ids[0], 1); /* ties: lower id first */
    assert_int_equal(ids[1], 3);
    assert_int_equal(ids[2], 2);
    assert_true(fabs(lp[0] - (3.0 - lse)) < 1e-6 && fabs(lp[2] - (2.0 - lse)) < 1e-6);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frequencies),
        cmocka_unit_test(test_nucleus_large_vocab),
        cmocka_unit_test(test_seed_and_greedy),
        cmocka_unit_test(test_top_logprobs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
