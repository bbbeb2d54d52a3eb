/*
 * The engine's thread pool (src/kernels/team.c): every item of a region
 * runs exactly once whatever the team size, worker numbers stay below the
 * team's thread count, every worker takes part when the items need them
 * all, a team without a pool runs items in order on the caller, the
 * adaptive size follows its policy (driven here with chosen timings, no
 * clock involved), and an engine's logits are bit for bit the same at 1, 2,
 * 3 and 4 threads (a prefill whose regions fork, then decode steps).
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kernels/team.h"

#define MAX_ITEMS 300

typedef struct count_job {
    atomic_int runs[MAX_ITEMS];
    atomic_int bad_worker;
    int threads;
} count_job;

static void count_item(void *ctx, int item, int worker) {
    count_job *j = ctx;
    atomic_fetch_add(&j->runs[item], 1);
    if (worker < 0 || worker >= j->threads) atomic_store(&j->bad_worker, 1);
}

/* Many regions of every size from 1 to MAX_ITEMS, back to back (the gaps
 * a step has between regions, and none at all). */
static void test_every_item_once(void **state) {
    (void)state;
    for (int threads = 1; threads <= 4; threads++) {
        kern_team t;
        assert_int_equal(kern_team_open(&t, threads), 0);
        assert_int_equal(t.threads, threads);
        count_job *j = calloc(1, sizeof *j);
        j->threads = threads;
        for (int r = 0; r < 3 * MAX_ITEMS; r++) {
            const int n = 1 + r % MAX_ITEMS;
            for (int i = 0; i < n; i++) atomic_store(&j->runs[i], 0);
            kern_team_run(&t, n, count_item, j);
            for (int i = 0; i < n; i++)
                if (atomic_load(&j->runs[i]) != 1)
                    fail_msg("%d threads, region %d of %d items: item %d ran %d times", threads, r, n, i,
                             atomic_load(&j->runs[i]));
        }
        assert_int_equal(atomic_load(&j->bad_worker), 0);
        assert_true(t.peak >= 1 && t.peak <= threads);
        kern_team_close(&t);
        assert_null(t.pool);
        free(j);
    }
}

typedef struct meet_job {
    atomic_int arrived;
    atomic_int seen[8];
    int n;
} meet_job;

/* Each item waits until every item has started: the region can finish
 * only if `n` different threads take one item each. */
static void meet_item(void *ctx, int item, int worker) {
    (void)item;
    meet_job *j = ctx;
    atomic_fetch_add(&j->seen[worker], 1);
    atomic_fetch_add(&j->arrived, 1);
    while (atomic_load(&j->arrived) < j->n) sched_yield();
}

static void test_every_worker_takes_part(void **state) {
    (void)state;
    for (int threads = 2; threads <= 4; threads++) {
        kern_team t;
        assert_int_equal(kern_team_open(&t, threads), 0);
        assert_int_equal(kern_team_active(&t), threads);
        meet_job j = {.n = threads};
        kern_team_run(&t, threads, meet_item, &j);
        for (int w = 0; w < threads; w++) assert_int_equal(atomic_load(&j.seen[w]), 1);
        assert_int_equal(t.peak, threads);
        kern_team_close(&t);
    }
}

typedef struct order_job {
    int order[16], n, workers_sum;
} order_job;

static void order_item(void *ctx, int item, int worker) {
    order_job *j = ctx;
    j->order[j->n++] = item;
    j->workers_sum += worker;
}

/* {.threads = 3} without kern_team_open: no pool, items in order on the
 * caller (worker 0), and the team records one thread. */
static void test_no_pool_runs_on_caller(void **state) {
    (void)state;
    kern_team t = {.threads = 3};
    order_job j = {0};
    kern_team_run(&t, 10, order_item, &j);
    assert_int_equal(j.n, 10);
    for (int i = 0; i < 10; i++) assert_int_equal(j.order[i], i);
    assert_int_equal(j.workers_sum, 0);
    assert_int_equal(t.peak, 1);
    assert_int_equal(kern_team_active(&t), 1);
}

/* The adaptive size with chosen timings (ns). A region is late when the
 * caller waited more than twice its own time and more than 200 us; a
 * worker that took nothing (the caller ran the region alone) is not late,
 * however long the region. */
static void test_adaptive_policy(void **state) {
    (void)state;
    const long long ms = 1000000;
    kern_team t;
    assert_int_equal(kern_team_open(&t, 3), 0);
    long long now = 1LL << 62; /* far beyond the monotonic clock: no probe falls due in kern_team_run below */
    assert_int_equal(kern_team_adapt_begin(&t, now), 3);
    /* On time: a short wait, a wait under 200 us, a missing worker in a
     * short region and in a long one. */
    for (int i = 0; i < 40; i++) {
        kern_team_adapt_end(&t, 3, 3, 300000, 100000, now);
        kern_team_adapt_end(&t, 3, 3, 50000, 150000, now);
        kern_team_adapt_end(&t, 3, 2, 400000, 0, now);
        kern_team_adapt_end(&t, 3, 1, 5 * ms, 0, now);
    }
    assert_int_equal(kern_team_active(&t), 3);
    /* Late twice among the last 16: still 3; a third time: 2. */
    kern_team_adapt_end(&t, 3, 3, 300000, 2 * ms, now);
    kern_team_adapt_end(&t, 3, 3, 800000, 2 * ms, now);
    assert_int_equal(kern_team_active(&t), 3);
    kern_team_adapt_end(&t, 3, 3, 300000, 2 * ms, now);
    assert_int_equal(kern_team_active(&t), 2);
    /* No probe before KERN_TEAM_PROBE_NS; then one thread more. */
    assert_int_equal(kern_team_adapt_begin(&t, now + KERN_TEAM_PROBE_NS - 1), 2);
    now += KERN_TEAM_PROBE_NS;
    assert_int_equal(kern_team_adapt_begin(&t, now), 3);
    /* The probe's first late region ends it: back to 2, next probe twice as far. */
    kern_team_adapt_end(&t, 3, 3, 300000, 2 * ms, now);
    assert_int_equal(kern_team_active(&t), 2);
    assert_int_equal(kern_team_adapt_begin(&t, now + 2 * KERN_TEAM_PROBE_NS - 1), 2);
    now += 2 * KERN_TEAM_PROBE_NS;
    assert_int_equal(kern_team_adapt_begin(&t, now), 3);
    /* KERN_TEAM_PROBE_OK on-time regions keep the larger size. */
    for (int i = 0; i < KERN_TEAM_PROBE_OK; i++) {
        assert_int_equal(kern_team_adapt_begin(&t, now), 3);
        kern_team_adapt_end(&t, 3, 3, 300000, 10000, now);
    }
    assert_int_equal(kern_team_adapt_begin(&t, now + 100 * KERN_TEAM_PROBE_NS), 3);
    /* Late regions all the time: down to one thread, never below. */
    for (int i = 0; i < 10 * KERN_TEAM_LATE_SHRINK; i++) kern_team_adapt_end(&t, 3, 3, 300000, 5 * ms, now);
    assert_int_equal(kern_team_active(&t), 1);
    /* At one thread a region runs on the caller alone, in order. */
    order_job j = {0};
    kern_team_run(&t, 10, order_item, &j);
    for (int i = 0; i < 10; i++) assert_int_equal(j.order[i], i);
    assert_int_equal(j.workers_sum, 0);
    kern_team_close(&t);
}

/* Prefill (logits of every position) and decode steps of one sequence at
 * `threads` threads; returns the logits, prefill rows first. */
static float *run_engine(kvlm_model *m, int threads, int n_prompt, int n_decode) {
    const kvlm_config *c = kvlm_model_config(m);
    kvlm_error err;
    kvlm_kv *kv = kvlm_kv_create(m, NULL, &err);
    assert_non_null(kv);
    kvlm_engine *e = kvlm_engine_create(m, kv, &(kvlm_engine_options){.threads = threads}, &err);
    if (!e) fail_msg("%s", err.msg);
    assert_int_equal(kvlm_engine_threads(e), threads);
    const int seq = kvlm_kv_seq_new(kv, &err);
    assert_true(seq >= 0);
    int32_t toks[64];
    uint32_t x = 77;
    for (int i = 0; i < n_prompt + n_decode; i++) toks[i] = (int32_t)((x = x * 1664525u + 1013904223u) >> 8) % c->vocab_size;
    const size_t V = (size_t)c->vocab_size;
    float *out = malloc((size_t)(n_prompt + n_decode) * V * sizeof(float));
    kvlm_batch_item it = {seq, toks, n_prompt, 1};
    if (kvlm_engine_step(e, &it, 1, out, &err)) fail_msg("%s", err.msg);
    for (int i = 0; i < n_decode; i++) {
        it = (kvlm_batch_item){seq, &toks[n_prompt + i], 1, 0};
        if (kvlm_engine_step(e, &it, 1, out + (size_t)(n_prompt + i) * V, &err)) fail_msg("%s", err.msg);
    }
    const int used = kvlm_engine_threads_used(e);
    assert_true(used >= 1 && used <= threads);
    kvlm_engine_free(e);
    kvlm_kv_free(kv);
    return out;
}

static void test_logits_same_at_any_thread_count(void **state) {
    (void)state;
    const char *presets[] = {"gpt2-tiny", "llama-tiny"};
    const kvlm_dtype dtypes[] = {KVLM_F32, KVLM_Q8_0};
    for (int p = 0; p < 2; p++)
        for (int d = 0; d < 2; d++) {
            kvlm_error err;
            kvlm_model *m = kvlm_model_synthetic(presets[p], dtypes[d], 5, &err);
            if (!m) fail_msg("%s", err.msg);
            const int n_ctx = kvlm_model_config(m)->n_ctx, n_decode = 6, n_prompt = n_ctx - n_decode;
            const size_t n = (size_t)n_ctx * kvlm_model_config(m)->vocab_size;
            float *ref = run_engine(m, 1, n_prompt, n_decode);
            for (int threads = 2; threads <= 4; threads++) {
                float *got = run_engine(m, threads, n_prompt, n_decode);
                if (memcmp(got, ref, n * sizeof(float)))
                    fail_msg("%s %s: logits at %d threads differ from 1 thread", presets[p], kvlm_dtype_name(dtypes[d]),
                             threads);
                free(got);
            }
            free(ref);
            kvlm_model_free(m);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_item_once),
        cmocka_unit_test(test_every_worker_takes_part),
        cmocka_unit_test(test_no_pool_runs_on_caller),
        cmocka_unit_test(test_adaptive_policy),
        cmocka_unit_test(test_logits_same_at_any_thread_count),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
