/*
 * The adaptive speculation policy (runtime/spec_policy.c), without timing:
 * costs are inputs. A probed choice (a draft model) with nothing kept stops
 * after exactly its probe's verification steps and probes again after
 * waits that double (32, 64, ... up to 1024 plain steps); one that keeps
 * its drafts keeps drafting; the same acceptance drafts or not as the cost
 * of a verification step crosses (tokens per step) / (1 + margin); a
 * prompt-lookup choice starts and stops on shadow observations alone; a
 * run that paid and then stopped probes again after the shortest wait; a
 * shadow draft is decided by the token that differs or the one after. The
 * step-time table: interpolation, clipping of a far sample, staleness and
 * the batch's share of the drafts' cost.
 *
 * On the shipped GPT-2 through the scheduler, with the step times pinned
 * (sched_pin_costs: 5 rows cost 2.6 one-row steps, near what this model
 * measures) so the tokens alone decide: at temperature 0 the output loops
 * and the adaptive default keeps drafting with high acceptance; at 0.8 it
 * drafts a small fraction of what fixed speculation drafts. With measured
 * times: the tokens are plain decoding's, greedy and sampled, whatever
 * the policy did.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kvlm.h"
#include "runtime/spec_policy.h"

#define GPT2 "models/shakespeare-gpt2"

/* cost[n] = c for every n */
static void flat(double *cost, double c) {
    for (int n = 0; n <= SPEC_MAX_K; n++) cost[n] = c;
}

static void test_probe_stops_and_backs_off(void **state) {
    (void)state;
    const spec_policy_params prm = spec_policy_defaults();
    assert_int_equal(prm.probe_steps, 2);
    assert_int_equal(prm.backoff_min, 32);
    assert_int_equal(prm.backoff_max, 1024);
    double cost[SPEC_MAX_K + 1];
    flat(cost, 1.3); /* a verification step that costs little more than a plain one */
    spec_policy p;
    spec_policy_init(&p, &prm, 0);
    int expect_wait = 32;
    for (int probe = 0; probe < 8; probe++) {
        /* a probe: drafts until judged, nothing kept */
        int steps = 0;
        while (spec_policy_wants(&p, &prm, cost, 4)) {
            spec_policy_observe(&p, &prm, 4, 0, 1, cost, 4);
            assert_true(++steps <= 2);
        }
        assert_int_equal(steps, probe == 0 ? 2 : 1); /* then one wants() call was a plain step */
        assert_int_equal(p.episodes, probe + 1);
        /* plain steps until the next probe: the wait doubles up to the cap */
        int plain = 1;
        while (!spec_policy_wants(&p, &prm, cost, 4)) plain++;
        assert_int_equal(plain, expect_wait);
        spec_policy_observe(&p, &prm, 4, 0, 1, cost, 4); /* the probe's first step */
        expect_wait = expect_wait * 2 < 1024 ? expect_wait * 2 : 1024;
    }
    /* over a long sequence that never repeats: 8 probes in 32 + 64 + ... +
     * 1024 x 3 plain steps, 2 verification steps each */
    assert_int_equal(p.backoff, 1024);
}

static void test_high_acceptance_keeps_drafting(void **state) {
    (void)state;
    const spec_policy_params prm = spec_policy_defaults();
    double cost[SPEC_MAX_K + 1];
    flat(cost, 3.0); /* the shipped GPT-2: 5 rows cost about 3 one-row steps */
    for (int shadow = 0; shadow < 2; shadow++) {
        spec_policy p;
        spec_policy_init(&p, &prm, shadow);
        if (shadow) { /* off until observations say it pays */
            assert_int_equal(spec_policy_wants(&p, &prm, cost, 4), 0);
            spec_policy_observe(&p, &prm, 4, 4, 0, cost, 4);
            assert_int_equal(spec_policy_wants(&p, &prm, cost, 4), 0); /* weight 1 < 1.5 */
            spec_policy_observe(&p, &prm, 4, 3, 0, cost, 4);
        }
        for (int i = 0; i < 1000; i++) {
            assert_int_equal(spec_policy_wants(&p, &prm, cost, 4), 1);
            spec_policy_observe(&p, &prm, 4, i % 5 ? 4 : 2, 1, cost, 4); /* 4.6 tokens a step */
        }
        assert_int_equal(p.episodes, 0);
        assert_true(fabs(spec_policy_gain(&p, cost, 4) - 4.6 / 3.0) < 0.15);
    }
}

/* Three tokens a step (two of four drafts kept): drafting pays while a
 * step costs less than 3 / 1.1 = 2.73 plain steps. */
static void test_cost_decides(void **state) {
    (void)state;
    const spec_policy_params prm = spec_policy_defaults();
    const double costs[] = {1.0, 2.0, 2.7, 2.76, 3.0, 5.0};
    const int pays[] = {1, 1, 1, 0, 0, 0};
    for (size_t i = 0; i < sizeof costs / sizeof *costs; i++) {
        double cost[SPEC_MAX_K + 1];
        flat(cost, costs[i]);
        spec_policy p;
        spec_policy_init(&p, &prm, 0);
        int verified = 0;
        for (int s = 0; s < 40 && spec_policy_wants(&p, &prm, cost, 4); s++) {
            spec_policy_observe(&p, &prm, 4, 2, 1, cost, 4);
            verified++;
        }
        if (pays[i]) assert_int_equal(verified, 40);
        else assert_int_equal(verified, 2);
        assert_int_equal(p.episodes, !pays[i]);
    }
    /* per draft count: 1-draft steps cheap and all kept, 4-draft steps
     * dear and none kept: the gain weighs each by its own cost */
    double cost[SPEC_MAX_K + 1];
    flat(cost, 1);
    cost[1] = 1.5;
    cost[4] = 3.0;
    spec_policy p;
    spec_policy_init(&p, &prm, 1);
    spec_policy_observe(&p, &prm, 1, 1, 0, cost, 4);
    spec_policy_observe(&p, &prm, 4, 0, 0, cost, 4);
    /* tokens 2 x 0.8 + 1, steps 1.5 x 0.8 + 3 */
    assert_true(fabs(spec_policy_gain(&p, cost, 4) - 2.6 / 4.2) < 1e-6);
    /* a cost below one plain step (timing noise) counts as one */
    flat(cost, 0.5);
    assert_true(fabs(spec_policy_gain(&p, cost, 4) - 2.6 / 1.8) < 1e-6);
}

/* Prompt lookup: shadow observations start and stop drafting; nothing is
 * spent on probes while off. */
static void test_shadow(void **state) {
    (void)state;
    const spec_policy_params prm = spec_policy_defaults();
    double cost[SPEC_MAX_K + 1];
    flat(cost, 2.0);
    spec_policy p;
    spec_policy_init(&p, &prm, 1);
    /* non-repetitive text: shadows keep nothing, it never drafts */
    for (int i = 0; i < 2000; i++) {
        assert_int_equal(spec_policy_wants(&p, &prm, cost, 4), 0);
        if (i % 2) spec_policy_observe(&p, &prm, 4, 0, 0, cost, 4);
    }
    /* the text turns repetitive: it drafts within four observations */
    int n = 0;
    while (!spec_policy_wants(&p, &prm, cost, 4)) {
        spec_policy_observe(&p, &prm, 4, 4, 0, cost, 4);
        assert_true(++n <= 4);
    }
    /* and stops within four verification steps once nothing is kept */
    n = 0;
    while (spec_policy_wants(&p, &prm, cost, 4)) {
        spec_policy_observe(&p, &prm, 4, 0, 1, cost, 4);
        assert_true(++n <= 4);
    }
    assert_int_equal(p.episodes, 1);
    assert_int_equal(p.wait, 0); /* no back-off: shadows do the probing */
}

/* A probed run that paid for a while, then stopped, waits the shortest
 * time again. */
static void test_paid_run_resets_backoff(void **state) {
    (void)state;
    const spec_policy_params prm = spec_policy_defaults();
    double cost[SPEC_MAX_K + 1];
    flat(cost, 2.0);
    spec_policy p;
    spec_policy_init(&p, &prm, 0);
    while (spec_policy_wants(&p, &prm, cost, 4)) spec_policy_observe(&p, &prm, 4, 0, 1, cost, 4);
    for (int probe = 1; probe < 3; probe++) { /* two more failed probes: the next wait is 256 */
        while (!spec_policy_wants(&p, &prm, cost, 4)) {
        }
        do spec_policy_observe(&p, &prm, 4, 0, 1, cost, 4);
        while (spec_policy_wants(&p, &prm, cost, 4));
    }
    assert_int_equal(p.backoff, 256);
    while (!spec_policy_wants(&p, &prm, cost, 4)) {
    }
    for (int i = 0; i < 20; i++) { /* the text repeats: it pays */
        spec_policy_observe(&p, &prm, 4, 4, 1, cost, 4);
        assert_int_equal(spec_policy_wants(&p, &prm, cost, 4), 1);
    }
    while (p.on) spec_policy_observe(&p, &prm, 4, 0, 1, cost, 4);
    assert_int_equal(p.wait, 32);
    assert_int_equal(p.backoff, 64);
}

static void test_costs_table(void **state) {
    (void)state;
    spec_costs c;
    memset(&c, 0, sizeof c);
    double cost[SPEC_MAX_K + 1];
    spec_costs_fill(&c, 1, 1, 0, 4, cost); /* nothing measured: 1, so the first steps measure */
    assert_true(cost[1] == 1 && cost[4] == 1);
    assert_true(spec_costs_stale(&c, 1, 64));
    spec_costs_record(&c, 1, 1e-3);
    spec_costs_record(&c, 5, 3e-3);
    assert_false(spec_costs_stale(&c, 1, 64));
    assert_true(fabs(spec_costs_time(&c, 3) - 2e-3) < 1e-12); /* interpolated */
    assert_true(fabs(spec_costs_time(&c, 9) - 6e-3) < 1e-12);  /* 3e-3, a quarter more per row */
    spec_costs_fill(&c, 1, 1, 0, 4, cost);
    assert_true(fabs(cost[4] - 3.0) < 1e-9);
    assert_true(fabs(cost[2] - 2.0) < 1e-9);
    /* four sequences decoding: their 4-row step against 8 rows with the
     * drafts; every one of them waits for the drafts' rows */
    spec_costs_record(&c, 4, 2e-3);
    spec_costs_record(&c, 8, 3e-3);
    spec_costs_fill(&c, 4, 4, 0, 4, cost);
    assert_true(fabs(cost[4] - (1 + 4 * 0.5)) < 1e-9);
    /* a draft model's time counts for every sequence of the step too */
    spec_costs_record_draft(&c, 2, 1e-3);
    spec_costs_fill(&c, 4, 4, 1, 4, cost);
    assert_true(fabs(cost[4] - (1 + 4 * 0.5 + 4 * 0.25)) < 1e-9);
    /* a step descheduled for 100x its time moves the estimate by a tenth
     * of the estimate; a faster one half way */
    spec_costs_record(&c, 1, 0.1);
    assert_true(fabs(spec_costs_time(&c, 1) - 1.1e-3) < 1e-12);
    spec_costs_record(&c, 1, 0.5e-3);
    assert_true(fabs(spec_costs_time(&c, 1) - 0.8e-3) < 1e-12);
    /* staleness: 64 samples of other row counts */
    for (int i = 0; i < 64; i++) spec_costs_record(&c, 5, 3e-3);
    assert_false(spec_costs_stale(&c, 1, 64));
    spec_costs_record(&c, 5, 3e-3);
    assert_true(spec_costs_stale(&c, 1, 64));
    assert_false(spec_costs_stale(&c, SPEC_COST_ROWS + 1, 64)); /* not tracked */
    /* past the horizon a time counts as unmeasured: 2 rows interpolate
     * between 1 and 4 rows while measured, then follow the prior past 1 row */
    memset(&c, 0, sizeof c);
    spec_costs_record(&c, 2, 5e-3); /* a cold first step */
    spec_costs_record(&c, 1, 1e-3);
    spec_costs_record(&c, 4, 2e-3);
    assert_true(fabs(spec_costs_time(&c, 2) - 5e-3) < 1e-12);
    for (int i = 0; i < SPEC_COST_HORIZON; i++) {
        spec_costs_record(&c, 1, 1e-3);
        spec_costs_record(&c, 4, 2e-3);
    }
    assert_true(fabs(spec_costs_time(&c, 2) - (1e-3 + 1e-3 / 3)) < 1e-12);
    assert_true(fabs(spec_costs_time(&c, 6) - 2e-3 * 1.5) < 1e-12);
}

/* A shadow draft is decided by the first token that differs, or by the
 * token after all of it. */
static void test_shadow_kept(void **state) {
    (void)state;
    const int32_t d[] = {7, 8, 9};
    const int32_t t[] = {1, 2, 7, 8, 5, 6};
    assert_int_equal(spec_shadow_kept(t, 2, 2, d, 3), -1); /* nothing drawn yet */
    assert_int_equal(spec_shadow_kept(t, 4, 2, d, 3), -1); /* 7 8 agree so far */
    assert_int_equal(spec_shadow_kept(t, 5, 2, d, 3), 2);  /* 5 is not 9: two kept */
    assert_int_equal(spec_shadow_kept(t, 6, 2, d, 3), 2);
    const int32_t u[] = {1, 2, 7, 8, 9, 4};
    assert_int_equal(spec_shadow_kept(u, 5, 2, d, 3), -1); /* all three: the bonus token decides */
    assert_int_equal(spec_shadow_kept(u, 6, 2, d, 3), 3);
    const int32_t v[] = {1, 2, 3};
    assert_int_equal(spec_shadow_kept(v, 3, 2, d, 3), 0);
    assert_int_equal(spec_shadow_kept(v, 3, 2, d, 0), -1); /* no shadow */
}

/* ---------------------------------------------------------------- scheduler */

typedef struct gen {
    int32_t ids[128];
    int n, drafted, accepted;
    kvlm_finish why;
} gen;

static int on_token(void *user, const kvlm_token_event *ev) {
    gen *g = user;
    if (g->n < 128) g->ids[g->n++] = ev->id;
    return 0;
}

static void on_finish(void *user, const kvlm_finish_event *ev) {
    gen *g = user;
    g->why = ev->reason;
    g->drafted = ev->n_drafted;
    g->accepted = ev->n_accepted;
}

typedef struct rig {
    kvlm_model *m;
    kvlm_kv *kv;
    kvlm_engine *e;
    int vocab;
} rig;

static rig rig_open(void) {
    kvlm_error err;
    rig r = {0};
    r.m = kvlm_model_load(GPT2, NULL, &err);
    assert_non_null(r.m);
    r.vocab = kvlm_model_config(r.m)->vocab_size;
    r.kv = kvlm_kv_create(r.m, &(kvlm_kv_options){.dtype = KVLM_F32, .max_seqs = 1, .no_prefix_cache = 1}, &err);
    r.e = kvlm_engine_create(r.m, r.kv, &(kvlm_engine_options){.threads = 1}, &err);
    assert_non_null(r.e);
    return r;
}

static void rig_close(rig *r) {
    kvlm_engine_free(r->e);
    kvlm_kv_free(r->kv);
    kvlm_model_free(r->m);
}

/* One request of n tokens from "ROMEO:" on a new scheduler; costs: the
 * pinned step times (NULL: measured). Returns the scheduler's stats. */
static kvlm_sched_stats run(rig *r, float temp, uint64_t seed, kvlm_speculation sp, const spec_costs *costs, int n,
                            gen *g) {
    kvlm_error err;
    kvlm_sched *s = kvlm_sched_create(r->e, r->kv, r->vocab, &(kvlm_sched_options){.max_batch_tokens = 256}, &err);
    assert_non_null(s);
    if (costs) sched_pin_costs(s, costs);
    static const int32_t prompt[] = {33676, 4720, 25};
    kvlm_sampler_options so = kvlm_sampler_default_params();
    so.temperature = temp;
    so.seed = seed;
    memset(g, 0, sizeof *g);
    kvlm_request_params p = kvlm_request_default_params();
    p.prompt = prompt;
    p.n_prompt = 3;
    p.max_tokens = n;
    p.sampling = so;
    p.on_token = on_token;
    p.on_finish = on_finish;
    p.user = g;
    p.speculation = sp;
    assert_true(kvlm_sched_submit(s, &p, &err) >= 0);
    while (kvlm_sched_has_work(s))
        if (kvlm_sched_step(s, &err) < 0) fail_msg("step: %s", err.msg);
    assert_int_equal(g->why, KVLM_FINISH_LENGTH);
    assert_int_equal(g->n, n);
    kvlm_sched_stats st;
    kvlm_sched_get_stats(s, &st);
    kvlm_sched_free(s);
    return st;
}

/* Step times of the shipped GPT-2's shape: one row 1, each more row 0.4. */
static spec_costs pinned(void) {
    spec_costs c;
    memset(&c, 0, sizeof c);
    for (int r = 1; r <= SPEC_COST_ROWS; r++) c.t[r] = 1e-3 * (1 + 0.4 * (r - 1));
    return c;
}

static void test_sched_adaptive_default(void **state) {
    (void)state;
    rig r = rig_open();
    const spec_costs c = pinned();
    const kvlm_speculation adaptive = {KVLM_DRAFT_NGRAM, 4, 3, 0}, fixed = {KVLM_DRAFT_NGRAM, 4, 3, 1};
    gen a, f, p;
    /* temperature 0: the output loops; adaptive drafts most steps and
     * keeps most drafts, like fixed */
    kvlm_sched_stats sa = run(&r, 0, 1, adaptive, &c, 120, &a);
    kvlm_sched_stats sf = run(&r, 0, 1, fixed, &c, 120, &f);
    run(&r, 0, 1, (kvlm_speculation){0}, NULL, 120, &p);
    assert_memory_equal(a.ids, p.ids, sizeof a.ids);
    assert_memory_equal(f.ids, p.ids, sizeof f.ids);
    printf("temperature 0: adaptive %d drafted, %d kept, %d steps; fixed %d, %d, %d steps\n", a.drafted, a.accepted,
           (int)sa.steps, f.drafted, f.accepted, (int)sf.steps);
    assert_true(a.accepted * 10 >= a.drafted * 8); /* high acceptance */
    assert_true(a.drafted * 10 >= f.drafted * 7);  /* it kept drafting */
    assert_true(sa.steps * 2 < 120);               /* under 2 steps per token... */
    /* temperature 0.8: text that rarely repeats; adaptive drafts a small
     * fraction of fixed, over seeds */
    int ad = 0, fd = 0, ai = 0, fi = 0;
    for (uint64_t seed = 1; seed <= 6; seed++) {
        sa = run(&r, 0.8f, seed, adaptive, &c, 120, &a);
        sf = run(&r, 0.8f, seed, fixed, &c, 120, &f);
        run(&r, 0.8f, seed, (kvlm_speculation){0}, NULL, 120, &p);
        assert_memory_equal(a.ids, p.ids, sizeof a.ids); /* prompt lookup: plain decoding's tokens */
        assert_memory_equal(f.ids, p.ids, sizeof f.ids);
        ad += a.drafted;
        fd += f.drafted;
        ai += (int)sa.spec_items;
        fi += (int)sf.spec_items;
    }
    printf("temperature 0.8, 6 seeds: adaptive %d drafted in %d verification steps, fixed %d in %d\n", ad, ai, fd, fi);
    assert_true(fd > 400);
    assert_true(ad * 8 < fd);
    assert_true(ai * 8 < fi);
    rig_close(&r);
}

/* With measured step times (whatever this machine says): greedy and
 * sampled output are plain decoding's, and the counters add up. */
static void test_sched_measured(void **state) {
    (void)state;
    rig r = rig_open();
    const kvlm_speculation adaptive = {KVLM_DRAFT_NGRAM, 4, 3, 0};
    for (int t = 0; t < 2; t++) {
        gen a, p;
        kvlm_sched_stats st = run(&r, t ? 0.8f : 0, 7, adaptive, NULL, 120, &a);
        run(&r, t ? 0.8f : 0, 7, (kvlm_speculation){0}, NULL, 120, &p);
        assert_memory_equal(a.ids, p.ids, sizeof a.ids);
        assert_int_equal(st.drafted_tokens, (uint64_t)a.drafted);
        assert_int_equal(st.accepted_tokens, (uint64_t)a.accepted);
        assert_true(a.accepted <= a.drafted);
        /* every step is a prefill or a decode, the decodes with or without drafts */
        assert_int_equal(st.steps, 1 + (uint64_t)(120 - 1 - a.accepted));
    }
    rig_close(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_probe_stops_and_backs_off),
        cmocka_unit_test(test_high_acceptance_keeps_drafting),
        cmocka_unit_test(test_cost_decides),
        cmocka_unit_test(test_shadow),
        cmocka_unit_test(test_paid_run_resets_backoff),
        cmocka_unit_test(test_costs_table),
        cmocka_unit_test(test_shadow_kept),
        cmocka_unit_test(test_sched_adaptive_default),
        cmocka_unit_test(test_sched_measured),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
