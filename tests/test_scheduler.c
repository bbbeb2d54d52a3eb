/*
 * Continuous batching on the reference model: requests served together
 * produce exactly what each produces alone (seeded sampling), under chunked
 * prefill, under preemption in a pool too small for all of them, and with
 * n > 1 choices forked from one prompt; cancellation frees blocks at once;
 * the waiting queue is bounded; deadlines expire.
 */
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kvlm.h"

#define TINY "tests/fixtures/gpt2/hf_f32"
#define MAXTOK 24

typedef struct out {
    int32_t ids[4][MAXTOK];
    int n[4];
    kvlm_finish why[4];
    int finished;
} out;

static int on_token(void *user, const kvlm_token_event *ev) {
    out *o = user;
    if (o->n[ev->choice] < MAXTOK) o->ids[ev->choice][o->n[ev->choice]++] = ev->id;
    return 0;
}

static void on_finish(void *user, int choice, kvlm_finish why, int n) {
    out *o = user;
    (void)n;
    o->why[choice] = why;
    o->finished++;
}

typedef struct rig {
    kvlm_model *m;
    kvlm_kv *kv;
    kvlm_engine *e;
    kvlm_sched *s;
} rig;

static rig rig_open(size_t n_blocks, int max_seqs, int budget, int max_waiting) {
    kvlm_error err;
    rig r;
    r.m = kvlm_model_load(TINY, &err);
    assert_non_null(r.m);
    kvlm_kv_options ko = {.dtype = KVLM_F32, .block_size = 4, .n_blocks = n_blocks, .max_seqs = max_seqs};
    r.kv = kvlm_kv_create(r.m, &ko, &err);
    r.e = kvlm_engine_create(r.m, r.kv, &(kvlm_engine_options){.threads = 2}, &err);
    kvlm_sched_options so = {.max_batch_tokens = budget, .max_waiting = max_waiting};
    r.s = kvlm_sched_create(r.e, r.kv, 200, 199, &so, &err);
    assert_non_null(r.s);
    return r;
}

static void rig_close(rig *r) {
    kvlm_sched_free(r->s);
    kvlm_engine_free(r->e);
    kvlm_kv_free(r->kv);
    kvlm_model_free(r->m);
}

static void drain(rig *r) {
    kvlm_error err;
    for (int guard = 0; kvlm_sched_has_work(r->s); guard++) {
        if (kvlm_sched_step(r->s, &err) < 0) fail_msg("%s", err.msg);
        assert_true(guard < 10000);
    }
}

static const int32_t prompts[6][10] = {
    {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {50, 60, 70}, {100, 101, 102, 103, 104, 105, 106},
    {7}, {199, 3, 33, 133, 13}, {1, 2, 3, 4, 5, 6, 7, 8, 11, 12}};
static const int plen[6] = {10, 3, 7, 1, 5, 10};

static kvlm_request_params params(int i, out *o, int n_choices) {
    kvlm_request_params p = {.prompt = prompts[i], .n_prompt = plen[i], .max_tokens = 12 + i, .n_choices = n_choices,
                             .on_token = on_token, .on_finish = on_finish, .user = o};
    p.sampling = kvlm_sampler_options_default();
    p.sampling.temperature = i % 2 ? 0.8f : 1.2f;
    p.sampling.top_p = 0.95f;
    p.sampling.seed = 1000 + (uint64_t)i;
    return p;
}

/* Each request alone, one at a time, in a roomy pool. */
static void reference(out *ref, int n_choices) {
    rig r = rig_open(0, 8, 256, 64);
    kvlm_error err;
    for (int i = 0; i < 6; i++) {
        memset(&ref[i], 0, sizeof ref[i]);
        kvlm_request_params p = params(i, &ref[i], n_choices);
        assert_true(kvlm_sched_submit(r.s, &p, &err) >= 0);
        drain(&r);
        assert_int_equal(ref[i].finished, n_choices);
    }
    rig_close(&r);
}

static void together(size_t n_blocks, int max_seqs, int budget, int n_choices, const out *ref, uint64_t *preempt) {
    rig r = rig_open(n_blocks, max_seqs, budget, 64);
    kvlm_error err;
    out got[6];
    memset(got, 0, sizeof got);
    for (int i = 0; i < 6; i++) {
        kvlm_request_params p = params(i, &got[i], n_choices);
        assert_true(kvlm_sched_submit(r.s, &p, &err) >= 0);
    }
    drain(&r);
    for (int i = 0; i < 6; i++)
        for (int c = 0; c < n_choices; c++) {
            assert_int_equal(got[i].why[c], ref[i].why[c]);
            assert_int_equal(got[i].n[c], ref[i].n[c]);
            assert_memory_equal(got[i].ids[c], ref[i].ids[c], (size_t)ref[i].n[c] * sizeof(int32_t));
        }
    kvlm_kv_stats st;
    kvlm_kv_get_stats(r.kv, &st);
    assert_int_equal(st.blocks_used, 0); /* everything returned */
    kvlm_sched_stats ss;
    kvlm_sched_get_stats(r.s, &ss);
    if (preempt) *preempt = ss.preemptions;
    rig_close(&r);
}

static void test_batched_equals_alone(void **state) {
    (void)state;
    out ref[6];
    reference(ref, 1);
    for (int i = 0; i < 6; i++) assert_int_equal(ref[i].why[0], KVLM_FINISH_LENGTH);
    together(0, 8, 256, 1, ref, NULL);  /* all at once */
    together(0, 8, 4, 1, ref, NULL);    /* 4-token budget: chunked prefill */
    uint64_t pre = 0;
    together(12, 8, 64, 1, ref, &pre);  /* 12 blocks of 4 tokens for ~100 tokens of demand */
    assert_true(pre > 0);
}

static void test_n_choices(void **state) {
    (void)state;
    out ref[6], alone[6];
    reference(ref, 3);
    /* choice c of a request equals a single-choice request seeded seed + c */
    for (int c = 0; c < 3; c++) {
        rig r = rig_open(0, 8, 256, 64);
        kvlm_error err;
        for (int i = 0; i < 6; i++) {
            memset(&alone[i], 0, sizeof alone[i]);
            kvlm_request_params p = params(i, &alone[i], 1);
            p.sampling.seed += (uint64_t)c;
            assert_true(kvlm_sched_submit(r.s, &p, &err) >= 0);
            drain(&r);
            assert_int_equal(alone[i].n[0], ref[i].n[c]);
            assert_memory_equal(alone[i].ids[0], ref[i].ids[c], (size_t)ref[i].n[c] * sizeof(int32_t));
        }
        rig_close(&r);
    }
    together(0, 12, 256, 3, ref, NULL);
}

static void test_cancel_queue_deadline(void **state) {
    (void)state;
    rig r = rig_open(0, 4, 256, 2);
    kvlm_error err;
    out o[3];
    memset(o, 0, sizeof o);
    kvlm_request_params p0 = params(0, &o[0], 1), p1 = params(2, &o[1], 1), p2 = params(1, &o[2], 1);
    int64_t id0 = kvlm_sched_submit(r.s, &p0, &err);
    assert_true(kvlm_sched_submit(r.s, &p1, &err) >= 0);
    assert_int_equal(kvlm_sched_submit(r.s, &p2, &err), KVLM_ERR_BUSY); /* queue of 2 is full */
    assert_true(kvlm_sched_step(r.s, &err) == 2);
    kvlm_kv_stats st;
    kvlm_kv_get_stats(r.kv, &st);
    size_t used = st.blocks_used;
    kvlm_sched_cancel(r.s, id0);
    assert_int_equal(o[0].why[0], KVLM_FINISH_CANCELLED);
    kvlm_kv_get_stats(r.kv, &st);
    assert_true(st.blocks_used < used);
    p2.deadline = kvlm_now() - 1; /* already expired */
    assert_true(kvlm_sched_submit(r.s, &p2, &err) >= 0);
    drain(&r);
    assert_int_equal(o[2].why[0], KVLM_FINISH_TIMEOUT);
    assert_int_equal(o[1].why[0], KVLM_FINISH_LENGTH);
    kvlm_request_params bad = params(0, &o[0], 1);
    bad.n_prompt = 0;
    assert_int_equal(kvlm_sched_submit(r.s, &bad, &err), KVLM_ERR_ARG);
    rig_close(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batched_equals_alone),
        cmocka_unit_test(test_n_choices),
        cmocka_unit_test(test_cancel_queue_deadline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
