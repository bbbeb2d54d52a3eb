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

static kvlm_sampler_options opts(float t, int k, float p, uint64_t seed) {
    kvlm_sampler_options o = kvlm_sampler_default_params();
    o.temperature = t, o.top_k = k, o.top_p = p, o.seed = seed;
    return o;
}

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
        {opts(1.0f, 0, 1.0f, 1), {0.5, 0.2, 0.15, 0.1, 0.05}},
        {opts(1.0f, 0, 0.8f, 2), {0.5 / 0.85, 0.2 / 0.85, 0.15 / 0.85, 0, 0}},  /* nucleus {0,1,2} */
        {opts(1.0f, 0, 0.5f, 3), {1, 0, 0, 0, 0}},                              /* 0.5 reaches 0.5 */
        {opts(1.0f, 2, 1.0f, 4), {0.5 / 0.7, 0.2 / 0.7, 0, 0, 0}},              /* top-k 2 */
        {opts(1.0f, 3, 0.7f, 5), {0.5 / 0.7, 0.2 / 0.7, 0, 0, 0}},              /* top-k 3 then 70% of 0.85 */
        {opts(0.5f, 0, 1.0f, 6), {0.25 / 0.325, 0.04 / 0.325, 0.0225 / 0.325, 0.01 / 0.325, 0.0025 / 0.325}}, /* p^2 */
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
        kvlm_sampler_options o = opts(1.0f, 0, 0.9f, (uint64_t)trial);
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
    kvlm_sampler_options o = opts(0.9f, 0, 0.95f, 42);
    kvlm_sampler *a = kvlm_sampler_create(&o, 50, &err), *b = kvlm_sampler_create(&o, 50, &err);
    for (int i = 0; i < 1000; i++) assert_int_equal(kvlm_sampler_next(a, lg), kvlm_sampler_next(b, lg));
    kvlm_sampler_free(a);
    kvlm_sampler_free(b);
    kvlm_sampler_options g = opts(0, 0, 1, 0);
    kvlm_sampler *gs = kvlm_sampler_create(&g, 50, &err);
    assert_int_equal(kvlm_sampler_next(gs, lg), 33); /* sin(33) = 0.99991 is the largest */
    kvlm_sampler_free(gs);
    kvlm_sampler_options bad = opts(-1, 0, 1, 0);
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

/* The kept set (ids, most likely first) for crafted logits. */
static void expect_kept(const float *lg, int V, kvlm_sampler_options o, const int32_t *want, int n_want) {
    kvlm_error err;
    kvlm_sampler *s = kvlm_sampler_create(&o, V, &err);
    if (!s) fail_msg("%s", err.msg);
    int32_t ids[64];
    float pr[64];
    int n = kvlm_sampler_candidates(s, lg, ids, pr);
    if (n != n_want) fail_msg("kept %d tokens, want %d", n, n_want);
    double sum = 0;
    for (int i = 0; i < n; i++) {
        assert_int_equal(ids[i], want[i]);
        sum += pr[i];
    }
    assert_true(fabs(sum - 1) < 1e-6);
    kvlm_sampler_free(s);
}

static void test_kept_sets(void **state) {
    (void)state;
    /* p = 0.4, 0.2, 0.2, 0.1, 0.1 (ids 3, 0, 4, 1, 2) */
    const float lg[5] = {logf(0.2f), logf(0.1f), logf(0.1f), logf(0.4f), logf(0.2f)};
    kvlm_sampler_options o = opts(1, 0, 1, 0);
    expect_kept(lg, 5, o, (const int32_t[]){3, 0, 4, 1, 2}, 5); /* nothing filtered, p = 1.0 */
    o = opts(1, 2, 1, 0);
    expect_kept(lg, 5, o, (const int32_t[]){3, 0}, 2); /* top-k 2: tie 0/4 goes to the lower id */
    o = opts(1, 3, 1, 0);
    expect_kept(lg, 5, o, (const int32_t[]){3, 0, 4}, 3);
    o = opts(1, 0, 0.6f, 0);
    expect_kept(lg, 5, o, (const int32_t[]){3, 0}, 2); /* 0.4 + 0.2 reaches 0.6 (a tie at the edge) */
    o = opts(1, 0, 0.61f, 0);
    expect_kept(lg, 5, o, (const int32_t[]){3, 0, 4}, 3);
    o = opts(1, 0, 0.05f, 0);
    expect_kept(lg, 5, o, (const int32_t[]){3}, 1); /* at least one token */
    o = opts(1, 0, 1, 0);
    o.min_p = 0.5f; /* keep p >= 0.2 */
    expect_kept(lg, 5, o, (const int32_t[]){3, 0, 4}, 3);
    o.min_p = 0.51f;
    expect_kept(lg, 5, o, (const int32_t[]){3}, 1);
    o = opts(0, 0, 1, 0); /* temperature 0: the argmax alone */
    expect_kept(lg, 5, o, (const int32_t[]){3}, 1);
    /* logit bias: -100 bans, +x promotes */
    kvlm_logit_bias lb[2] = {{3, -100}, {2, 5}};
    o = opts(1, 2, 1, 0);
    o.logit_bias = lb, o.n_logit_bias = 2;
    expect_kept(lg, 5, o, (const int32_t[]){2, 0}, 2);
    /* order: temperature after top-p (llama.cpp) vs before (default) */
    o = opts(0.25f, 0, 0.7f, 0); /* sharpened first: 0.4^4 dominates */
    expect_kept(lg, 5, o, (const int32_t[]){3}, 1);
    o.order = "penalties,bias,top_k,top_p,min_p,temperature";
    expect_kept(lg, 5, o, (const int32_t[]){3, 0, 4}, 3);
}

static void test_penalties(void **state) {
    (void)state;
    const float lg[4] = {2.0f, -1.0f, 0.5f, 1.0f};
    kvlm_error err;
    kvlm_sampler_options o = opts(0, 0, 1, 0);
    o.repetition_penalty = 4.0f;
    kvlm_sampler *s = kvlm_sampler_create(&o, 4, &err);
    kvlm_sampler_accept(s, (const int32_t[]){0, 0, 1}, 3);
    /* 2 / 4 = 0.5 < 1.0: token 3 wins; -1 x 4 = -4 for token 1 */
    assert_int_equal(kvlm_sampler_next(s, lg), 3);
    kvlm_sampler_free(s);
    o = opts(0, 0, 1, 0);
    o.frequency_penalty = 0.6f; /* token 0: 2 - 2 x 0.6 = 0.8 < 1 */
    s = kvlm_sampler_create(&o, 4, &err);
    kvlm_sampler_accept(s, (const int32_t[]){0, 0}, 2);
    assert_int_equal(kvlm_sampler_next(s, lg), 3);
    kvlm_sampler_reset(s);
    assert_int_equal(kvlm_sampler_next(s, lg), 0);
    kvlm_sampler_free(s);
    o = opts(0, 0, 1, 0);
    o.presence_penalty = 1.1f, o.penalty_window = 2; /* only the last 2 tokens count */
    s = kvlm_sampler_create(&o, 4, &err);
    kvlm_sampler_accept(s, (const int32_t[]){0, 2, 1}, 3);
    assert_int_equal(kvlm_sampler_next(s, lg), 0); /* 0 left the window */
    kvlm_sampler_accept(s, (const int32_t[]){0}, 1);
    assert_int_equal(kvlm_sampler_next(s, lg), 3); /* 2 - 1.1 = 0.9 < 1 */
    kvlm_sampler_free(s);
    o = opts(1, 0, 1, 0);
    o.order = "bias,temperature";
    assert_null(kvlm_sampler_create(&o, 4, &err));
    assert_non_null(strstr(err.msg, "exactly once"));
    o = opts(1, 0, 1, 0);
    kvlm_logit_bias bad = {9, 1};
    o.logit_bias = &bad, o.n_logit_bias = 1;
    assert_null(kvlm_sampler_create(&o, 4, &err));
    assert_non_null(strstr(err.msg, "outside the vocabulary"));
}

/* Chi-square goodness of fit after top-k + temperature: 8 categories,
 * 7 degrees of freedom, critical value 24.32 at p = 0.001. */
static void test_chi_square(void **state) {
    (void)state;
    const int V = 20;
    float lg[20];
    for (int i = 0; i < V; i++) lg[i] = 0.3f * (float)((i * 7) % 20);
    kvlm_sampler_options o = opts(0.8f, 8, 1, 12345);
    kvlm_error err;
    kvlm_sampler *s = kvlm_sampler_create(&o, V, &err);
    int32_t ids[20];
    float pr[20];
    int n = kvlm_sampler_candidates(s, lg, ids, pr);
    assert_int_equal(n, 8);
    int count[20] = {0};
    for (int d = 0; d < DRAWS; d++) count[kvlm_sampler_next(s, lg)]++;
    double chi2 = 0;
    int inside = 0;
    for (int i = 0; i < n; i++) {
        double e = pr[i] * DRAWS;
        chi2 += (count[ids[i]] - e) * (count[ids[i]] - e) / e;
        inside += count[ids[i]];
    }
    assert_int_equal(inside, DRAWS); /* nothing outside the kept set */
    if (chi2 > 24.32) fail_msg("chi-square %.2f exceeds 24.32 (7 dof, p = 0.001)", chi2);
    kvlm_sampler_free(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_frequencies),
        cmocka_unit_test(test_nucleus_large_vocab),
        cmocka_unit_test(test_seed_and_greedy),
        cmocka_unit_test(test_top_logprobs),
        cmocka_unit_test(test_kept_sets),
        cmocka_unit_test(test_penalties),
        cmocka_unit_test(test_chi_square),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
