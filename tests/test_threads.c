/*
 * The engine owns its threads: two engines with different thread counts on
 * one model, stepped alternately over a 220-token prompt, give exactly the
 * logits of one engine run alone; a host that calls omp_set_num_threads(8)
 * before and between steps changes neither the logits nor the number of
 * threads a step uses; and each engine's recorded team size
 * (kvlm_engine_threads_used) never exceeds its own thread count (work is
 * handed out item by item, so how many threads actually took part depends
 * on the scheduler; tests/test_team.c checks that every worker can). Run
 * under ASan (make test SANITIZE=1) these would catch a region that runs
 * more threads than the per-thread scratch was sized for.
 *
 * The model is the grouped-query Llama fixture (tests/fixtures/llama/gqa)
 * with its context raised to 256 positions (rotary positions have no
 * learned table, so the weights are unchanged): a long prompt makes every
 * region of the prefill fork.
 *
 * Logits are compared bit for bit: every output element is computed by
 * one thread with one accumulation order whatever the team size.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kernels/kernels.h"
#include "kernels/team.h"
#include "kvlm.h"
#include "omp_compat.h"

#define FIX "tests/fixtures/llama/gqa"
#define N_PROMPT 220
#define N_DECODE 6
#define N_CTX 256

static char model_dir[600];
static kvlm_model *model;
static int V;

static int setup(void **state) {
    (void)state;
    char *d = th_tempdir(), cmd[1400];
    if (!d) return -1;
    snprintf(model_dir, sizeof model_dir, "%s", d);
    free(d);
    snprintf(cmd, sizeof cmd, "cp " FIX "/model.safetensors %s/", model_dir);
    if (system(cmd)) return -1;
    json_error_t je;
    json_t *cfg = json_load_file(FIX "/config.json", 0, &je);
    if (!cfg) return -1;
    json_object_set_new(cfg, "max_position_embeddings", json_integer(N_CTX));
    char path[700];
    snprintf(path, sizeof path, "%s/config.json", model_dir);
    int rc = json_dump_file(cfg, path, 0);
    json_decref(cfg);
    kvlm_error err;
    if (rc || !(model = kvlm_model_load(model_dir, NULL, &err))) return -1;
    V = kvlm_model_config(model)->vocab_size;
    return kvlm_model_config(model)->n_ctx == N_CTX ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    kvlm_model_free(model);
    th_rmtree(model_dir);
    return 0;
}

static void make_tokens(int32_t *prompt, int32_t *decode) {
    uint32_t x = 2024;
    for (int i = 0; i < N_PROMPT; i++) prompt[i] = (int32_t)((x = x * 1664525u + 1013904223u) >> 8) % V;
    for (int i = 0; i < N_DECODE; i++) decode[i] = (int32_t)((x = x * 1664525u + 1013904223u) >> 8) % V;
}

/* An engine with its own cache and one sequence. */
typedef struct run {
    kvlm_kv *kv;
    kvlm_engine *e;
    int seq;
} run;

static run run_open(int threads) {
    kvlm_error err;
    run r = {0};
    r.kv = kvlm_kv_create(model, NULL, &err);
    assert_non_null(r.kv);
    r.e = kvlm_engine_create(model, r.kv, &(kvlm_engine_options){.threads = threads}, &err);
    if (!r.e) fail_msg("%s", err.msg);
    assert_int_equal(kvlm_engine_threads(r.e), threads);
    assert_int_equal(kvlm_engine_threads_used(r.e), 0);
    r.seq = kvlm_kv_seq_new(r.kv, &err);
    assert_true(r.seq >= 0);
    return r;
}

static void run_close(run *r) {
    kvlm_engine_free(r->e);
    kvlm_kv_free(r->kv);
}

/* Step i of the run: 0 is the prompt (logits of every position), 1..N_DECODE
 * one decode token each (logits of that token). */
static void step(run *r, int i, const int32_t *prompt, const int32_t *decode, float *logits) {
    kvlm_error err;
    kvlm_batch_item it = i == 0 ? (kvlm_batch_item){r->seq, prompt, N_PROMPT, 1}
                                : (kvlm_batch_item){r->seq, &decode[i - 1], 1, 0};
    if (kvlm_engine_step(r->e, &it, 1, logits, &err)) fail_msg("step %d: %s", i, err.msg);
}

/* All logits of one engine run alone: the prompt's N_PROMPT rows, then one
 * row per decode step. */
static float *reference(int threads, const int32_t *prompt, const int32_t *decode) {
    float *ref = malloc((size_t)(N_PROMPT + N_DECODE) * V * sizeof(float));
    run r = run_open(threads);
    for (int i = 0; i <= N_DECODE; i++)
        step(&r, i, prompt, decode, ref + (i ? (size_t)(N_PROMPT + i - 1) * V : 0));
    run_close(&r);
    return ref;
}

static void expect_rows(const float *got, const float *ref, int i, const char *what) {
    const size_t off = i ? (size_t)(N_PROMPT + i - 1) * V : 0, n = (size_t)(i ? 1 : N_PROMPT) * V;
    if (memcmp(got, ref + off, n * sizeof(float)))
        fail_msg("%s: step %d's logits differ from one engine alone", what, i);
}

/* Engine A (1 thread) is created first, then B (2 threads); they are stepped
 * alternately, A first. */
static void test_two_engines_alternating(void **state) {
    (void)state;
    int32_t prompt[N_PROMPT], decode[N_DECODE];
    make_tokens(prompt, decode);
    float *ref = reference(1, prompt, decode);
    float *la = malloc((size_t)N_PROMPT * V * sizeof(float)), *lb = malloc((size_t)N_PROMPT * V * sizeof(float));
    run a = run_open(1), b = run_open(2);
    for (int i = 0; i <= N_DECODE; i++) {
        step(&a, i, prompt, decode, la);
        step(&b, i, prompt, decode, lb);
        expect_rows(la, ref, i, "1-thread engine beside a 2-thread one");
        expect_rows(lb, ref, i, "2-thread engine beside a 1-thread one");
    }
    assert_int_equal(kvlm_engine_threads_used(a.e), 1);
    assert_in_range(kvlm_engine_threads_used(b.e), 1, 2);
    run_close(&a);
    run_close(&b);
    free(la);
    free(lb);
    free(ref);
}

/* The host sets a larger process-wide OpenMP default before the engines
 * exist and again between every step. */
static void test_host_omp_default_ignored(void **state) {
    (void)state;
    int32_t prompt[N_PROMPT], decode[N_DECODE];
    make_tokens(prompt, decode);
    float *ref = reference(2, prompt, decode);
    float *lg = malloc((size_t)N_PROMPT * V * sizeof(float));
    for (int threads = 1; threads <= 3; threads++) {
        omp_set_num_threads(8);
        run r = run_open(threads);
        for (int i = 0; i <= N_DECODE; i++) {
            omp_set_num_threads(8 + i);
            step(&r, i, prompt, decode, lg);
            char what[64];
            snprintf(what, sizeof what, "%d-thread engine, host default %d", threads, 8 + i);
            expect_rows(lg, ref, i, what);
        }
        assert_in_range(kvlm_engine_threads_used(r.e), 1, threads);
#if !defined(KVLM_NO_OPENMP) /* without OpenMP (make OPENMP=0) there is no process-wide default to keep */
        assert_int_equal(omp_get_max_threads(), 8 + N_DECODE); /* the engine set nothing process-wide */
#endif
        run_close(&r);
    }
    free(lg);
    free(ref);
}

/* The kernels' matmul driver alone: a team of 3 (its own pool) never runs
 * more than 3 threads and gives the one-thread result exactly. */
static void test_matmul_team(void **state) {
    (void)state;
    const int M = 5, N = 777, K = 64;
    float *w = malloc((size_t)N * K * 4), *x = malloc((size_t)M * K * 4);
    float *y1 = malloc((size_t)M * N * 4), *y3 = malloc((size_t)M * N * 4);
    uint32_t s = 7;
    for (int i = 0; i < N * K; i++) w[i] = (float)((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    for (int i = 0; i < M * K; i++) x[i] = (float)((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    kern_matrix km = {KVLM_F32, w, N, K, NULL, 0};
    kern_team one = {.threads = 1}, three;
    assert_int_equal(kern_team_open(&three, 3), 0);
    omp_set_num_threads(8);
    kern_matmul(kern_select(KVLM_ISA_AUTO), &one, x, M, &km, NULL, y1, N);
    kern_matmul(kern_select(KVLM_ISA_AUTO), &three, x, M, &km, NULL, y3, N);
    assert_int_equal(one.peak, 1);
    assert_in_range(three.peak, 1, 3);
    assert_memory_equal(y1, y3, (size_t)M * N * 4);
    kern_team_close(&three);
    free(w), free(x), free(y1), free(y3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_engines_alternating),
        cmocka_unit_test(test_host_omp_default_ignored),
        cmocka_unit_test(test_matmul_team),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
