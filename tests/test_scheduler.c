/*
 * Continuous batching on the reference model: requests served together
 * produce exactly what each produces alone (seeded sampling), under chunked
 * prefill, under preemption in a pool too small for all of them, and with
 * n > 1 choices forked from one prompt; cancellation frees blocks at once;
 * the waiting queue is bounded (and grows its request array past its first
 * size); deadlines expire. Ending a choice: any id of the request's eos
 * list ends it (reported, counted, no text), stop strings cut the text the
 * events carry; the recompute policy draws the same tokens as the cache.
 * A burst of prompts is planned step by step exactly: decodes first, then
 * admission in arrival order within the token budget; with a prefill
 * budget, decodes do not use it and a new request enters the next step.
 */
#include <stdio.h>
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

static void on_finish(void *user, const kvlm_finish_event *ev) {
    out *o = user;
    o->why[ev->choice] = ev->reason;
    o->finished++;
}

typedef struct rig {
    kvlm_model *m;
    kvlm_kv *kv;
    kvlm_engine *e;
    kvlm_sched *s;
} rig;

static rig rig_open_policy(size_t n_blocks, int max_seqs, int budget, int max_waiting, int recompute) {
    kvlm_error err;
    rig r;
    r.m = kvlm_model_load(TINY, NULL, &err);
    assert_non_null(r.m);
    kvlm_kv_options ko = kvlm_kv_default_params();
    ko.dtype = KVLM_F32;
    ko.block_size = 4;
    ko.n_blocks = n_blocks;
    ko.max_seqs = max_seqs;
    r.kv = kvlm_kv_create(r.m, &ko, &err);
    r.e = kvlm_engine_create(r.m, r.kv, &(kvlm_engine_options){.threads = 2}, &err);
    kvlm_sched_options so = kvlm_sched_default_params();
    so.max_batch_tokens = budget;
    so.max_waiting = max_waiting;
    so.recompute = recompute;
    r.s = kvlm_sched_create(r.e, r.kv, 200, &so, &err);
    assert_non_null(r.s);
    return r;
}

static rig rig_open(size_t n_blocks, int max_seqs, int budget, int max_waiting) {
    return rig_open_policy(n_blocks, max_seqs, budget, max_waiting, 0);
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
    kvlm_request_params p = kvlm_request_default_params();
    p.prompt = prompts[i];
    p.n_prompt = plen[i];
    p.max_tokens = 12 + i;
    p.n_choices = n_choices;
    p.on_token = on_token;
    p.on_finish = on_finish;
    p.user = o;
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

/* A request whose prompt needs more blocks than the whole pool holds ends
 * with ERROR at once instead of waiting forever; the next one still runs. */
static void test_never_fits(void **state) {
    (void)state;
    rig r = rig_open(2, 4, 256, 8); /* 2 blocks of 4 tokens */
    kvlm_error err;
    out o[2];
    memset(o, 0, sizeof o);
    kvlm_request_params big = params(0, &o[0], 1), small = params(3, &o[1], 1);
    small.max_tokens = 3;
    assert_true(kvlm_sched_submit(r.s, &big, &err) >= 0);
    assert_true(kvlm_sched_submit(r.s, &small, &err) >= 0);
    drain(&r);
    assert_int_equal(o[0].why[0], KVLM_FINISH_ERROR);
    assert_int_equal(o[0].n[0], 0);
    assert_int_equal(o[1].why[0], KVLM_FINISH_LENGTH);
    assert_int_equal(o[1].n[0], 3);
    rig_close(&r);
}

/* Text events of one choice, concatenated. */
typedef struct text_out {
    int32_t ids[MAXTOK];
    int n, n_generated;
    char text[1024];
    size_t len;
    kvlm_finish why;
} text_out;

static int on_text_token(void *user, const kvlm_token_event *ev) {
    text_out *o = user;
    if (o->n < MAXTOK) o->ids[o->n++] = ev->id;
    assert_true(o->len + ev->text_len < sizeof o->text);
    memcpy(o->text + o->len, ev->text, ev->text_len);
    o->len += ev->text_len;
    return 0;
}

static void on_text_finish(void *user, const kvlm_finish_event *ev) {
    text_out *o = user;
    assert_true(o->len + ev->text_len < sizeof o->text);
    memcpy(o->text + o->len, ev->text, ev->text_len);
    o->len += ev->text_len;
    o->text[o->len] = 0;
    o->why = ev->reason;
    o->n_generated = ev->n_generated;
}

static text_out run_text(rig *r, const kvlm_tokenizer *tok, const int32_t *eos, int n_eos, const char *const *stops,
                         int n_stops, int max_tokens) {
    static const int32_t prompt[4] = {40, 41, 42, 43};
    text_out o;
    memset(&o, 0, sizeof o);
    kvlm_request_params p = kvlm_request_default_params();
    p.prompt = prompt;
    p.n_prompt = 4;
    p.max_tokens = max_tokens;
    p.eos_ids = eos;
    p.n_eos = n_eos;
    p.text = 1;
    p.tokenizer = tok;
    p.stops = stops;
    p.n_stops = n_stops;
    p.on_token = on_text_token;
    p.on_finish = on_text_finish;
    p.user = &o;
    p.sampling.temperature = 0;
    kvlm_error err;
    assert_true(kvlm_sched_submit(r->s, &p, &err) >= 0);
    drain(r);
    return o;
}

/* What a kvlm_text_stream makes of ids, for comparison. */
static size_t stream_text(const kvlm_tokenizer *tok, const int32_t *ids, int n, char *out) {
    kvlm_error err;
    kvlm_text_stream *ts = kvlm_text_stream_create(tok, NULL, 0, &err);
    assert_non_null(ts);
    size_t len = 0, k;
    const char *t;
    for (int i = 0; i < n; i++) {
        assert_true(kvlm_text_stream_push(ts, ids[i], &t, &k, NULL) == 0);
        memcpy(out + len, t, k);
        len += k;
    }
    assert_int_equal(kvlm_text_stream_finish(ts, &t, &k, NULL), 0);
    memcpy(out + len, t, k);
    len += k;
    out[len] = 0;
    kvlm_text_stream_free(ts);
    return len;
}

/* Any id of the eos list ends the choice, whichever comes first; the eos
 * token is reported and counted but adds no text. Text events equal the
 * text stream over the same ids; a stop string cuts the text. */
static void test_eos_list_and_text(void **state) {
    (void)state;
    kvlm_error err;
    /* The shipped GPT-2 vocabulary gives the tiny model's ids 0..199
     * their pieces (ids below 94 print as ASCII). */
    kvlm_tokenizer *tok = kvlm_tokenizer_load("models/shakespeare-gpt2", &err);
    assert_non_null(tok);
    rig r = rig_open(0, 2, 256, 8);
    text_out full = run_text(&r, tok, NULL, 0, NULL, 0, 16);
    assert_int_equal(full.why, KVLM_FINISH_LENGTH);
    assert_int_equal(full.n, 16);
    char want[1024];
    size_t wl = stream_text(tok, full.ids, full.n, want);
    assert_int_equal(full.len, wl);
    assert_memory_equal(full.text, want, wl);
    /* the first id that occurs at position >= 3 and not before */
    int at = -1;
    for (int i = 3; i < full.n && at < 0; i++) {
        int seen = 0;
        for (int k = 0; k < i; k++) seen |= full.ids[k] == full.ids[i];
        if (!seen) at = i;
    }
    assert_true(at >= 3);
    const int32_t eos[3] = {198, full.ids[at], 197}; /* the second one is drawn */
    int first_eos = full.n;
    for (int i = 0; i < full.n; i++)
        if (full.ids[i] == 198 || full.ids[i] == 197) first_eos = i < first_eos ? i : first_eos;
    const int end = first_eos < at ? first_eos : at;
    text_out cut = run_text(&r, tok, eos, 3, NULL, 0, 16);
    assert_int_equal(cut.why, KVLM_FINISH_STOP);
    assert_int_equal(cut.n, end + 1);
    assert_int_equal(cut.n_generated, end + 1);
    assert_memory_equal(cut.ids, full.ids, (size_t)(end + 1) * sizeof(int32_t));
    wl = stream_text(tok, full.ids, end, want); /* the eos token adds no text */
    assert_string_equal(cut.text, want);
    /* a stop string: two characters from the middle of the full text */
    assert_true(full.len >= 8);
    char stop[3] = {full.text[full.len / 2], full.text[full.len / 2 + 1], 0};
    const char *stops[2] = {"\x01zz", stop};
    text_out st = run_text(&r, tok, NULL, 0, stops, 2, 16);
    assert_int_equal(st.why, KVLM_FINISH_STOP);
    assert_int_equal(strlen(st.text), (size_t)(strstr(full.text, stop) - full.text));
    assert_memory_equal(st.text, full.text, strlen(st.text));
    assert_true(st.n < full.n);
    assert_memory_equal(st.ids, full.ids, (size_t)st.n * sizeof(int32_t));
    /* without a tokenizer each token reads as its id and a space */
    text_out ids = run_text(&r, NULL, NULL, 0, NULL, 0, 3);
    char expect[64];
    snprintf(expect, sizeof expect, "%d %d %d ", full.ids[0], full.ids[1], full.ids[2]);
    assert_string_equal(ids.text, expect);
    rig_close(&r);
    kvlm_tokenizer_free(tok);
}

/* Recompute (no KV kept between steps) draws exactly the tokens the cache
 * does, seeded and greedy, also with prefill chunks and n > 1. */
static void test_recompute(void **state) {
    (void)state;
    out ref[6], got[6];
    reference(ref, 2);
    const int budgets[2] = {256, 5};
    for (int b = 0; b < 2; b++) {
        rig r = rig_open_policy(0, 8, budgets[b], 64, 1);
        kvlm_error err;
        memset(got, 0, sizeof got);
        for (int i = 0; i < 6; i++) {
            kvlm_request_params p = params(i, &got[i], 2);
            assert_true(kvlm_sched_submit(r.s, &p, &err) >= 0);
        }
        drain(&r);
        for (int i = 0; i < 6; i++)
            for (int c = 0; c < 2; c++) {
                assert_int_equal(got[i].why[c], ref[i].why[c]);
                assert_int_equal(got[i].n[c], ref[i].n[c]);
                assert_memory_equal(got[i].ids[c], ref[i].ids[c], (size_t)ref[i].n[c] * sizeof(int32_t));
            }
        kvlm_kv_stats st;
        kvlm_kv_get_stats(r.kv, &st);
        assert_int_equal(st.blocks_used, 0);
        assert_int_equal(st.prefix_hits, 0); /* the prefix cache is never consulted */
        rig_close(&r);
    }
}

/* More requests than the request array first holds (8): the array grows
 * and every queued request is served. */
static void test_queue_grows(void **state) {
    (void)state;
    rig r = rig_open(0, 4, 64, 64);
    kvlm_error err;
    enum { N = 30 };
    out o[N];
    memset(o, 0, sizeof o);
    for (int i = 0; i < N; i++) {
        kvlm_request_params p = params(i % 6, &o[i], 1);
        p.max_tokens = 2;
        assert_int_equal(kvlm_sched_submit(r.s, &p, &err), i);
    }
    kvlm_sched_stats ss;
    kvlm_sched_get_stats(r.s, &ss);
    assert_int_equal(ss.waiting, N);
    drain(&r);
    for (int i = 0; i < N; i++) {
        assert_int_equal(o[i].finished, 1);
        assert_int_equal(o[i].n[0], 2);
    }
    rig_close(&r);
}

static int n_admitted; /* on_admit calls (the user pointer is the request's out) */

static void count_admit(void *user, int n_cached) {
    (void)user, (void)n_cached;
    n_admitted++;
}

/* A burst of 16 prompts of 16 tokens under a 64-token budget (the shape of
 * 16 streams of 32-token prompts under kvlm serve's 128): decoding choices
 * are planned first, then prompts are admitted in arrival order, the last
 * one admitted in a step taking what is left of the budget as a chunk and
 * finishing before anyone new is admitted. Exact batch sizes and admissions
 * per step. */
static void test_burst_admission(void **state) {
    (void)state;
    rig r = rig_open(0, 16, 64, 64);
    kvlm_error err;
    int32_t pr[16][16];
    out o[16];
    memset(o, 0, sizeof o);
    n_admitted = 0;
    for (int q = 0; q < 16; q++) {
        for (int i = 0; i < 16; i++) pr[q][i] = (q * 13 + i * 7) % 199; /* no shared prefix */
        kvlm_request_params p = kvlm_request_default_params();
        p.prompt = pr[q];
        p.n_prompt = 16;
        p.max_tokens = 8;
        p.n_choices = 1;
        p.on_token = on_token;
        p.on_finish = on_finish;
        p.on_admit = count_admit;
        p.user = &o[q];
        p.sampling.temperature = 0;
        assert_true(kvlm_sched_submit(r.s, &p, &err) >= 0);
    }
    /* step: items in the batch (decodes + prefill chunks), requests admitted so far
     * 1: 4 prompts of 16                                   -> 4 items, 4 admitted
     * 2: 4 decodes, 3 prompts, 12 tokens of the 8th        -> 8, 8
     * 3: 7 decodes, the 8th's last 4, 3 prompts, 5 of 12th -> 12, 12
     * 4: 11 decodes, 11 of the 12th, 2 prompts, 10 of 15th -> 15, 15
     * 5: 14 decodes, 6 of the 15th, the 16th               -> 16, 16 */
    const int items[5] = {4, 8, 12, 15, 16}, admitted[5] = {4, 8, 12, 15, 16};
    for (int st = 0; st < 5; st++) {
        const int n = kvlm_sched_step(r.s, &err);
        if (n < 0) fail_msg("%s", err.msg);
        assert_int_equal(n, items[st]);
        assert_int_equal(n_admitted, admitted[st]);
    }
    drain(&r);
    for (int q = 0; q < 16; q++) assert_int_equal(o[q].n[0], 8);
    rig_close(&r);
}

/* The prefill budget (max_prefill_tokens 16 within a step budget of 64):
 * decoding choices always advance and do not use it; prompt chunks and
 * admissions share it, so a queued request enters the very next step
 * while the running ones keep decoding. Six 10-token prompts, exact
 * batch sizes and admissions per step:
 * 1: A 10, B 6                         -> 2 items, 2 admitted
 * 2: A decodes, B's last 4, C 10, D 2  -> 4, 4
 * 3: A B C decode, D's last 8, E 8     -> 5, 5
 * 4: A B C D decode, E's last 2, F 10  -> 6, 6
 * 5: all six decode                    -> 6, 6
 * then one more request arrives and is in the next step (7 items). */
static void test_prefill_budget(void **state) {
    (void)state;
    kvlm_error err;
    rig r = rig_open(0, 8, 64, 64);
    kvlm_sched_free(r.s);
    kvlm_sched_options so = kvlm_sched_default_params();
    so.max_batch_tokens = 64;
    so.max_waiting = 64;
    so.max_prefill_tokens = 16;
    r.s = kvlm_sched_create(r.e, r.kv, 200, &so, &err);
    assert_non_null(r.s);
    int32_t pr[7][10];
    out o[7];
    memset(o, 0, sizeof o);
    n_admitted = 0;
    kvlm_request_params p[7];
    for (int q = 0; q < 7; q++) {
        for (int i = 0; i < 10; i++) pr[q][i] = (q * 17 + i * 5 + 1) % 199; /* no shared prefix */
        p[q] = kvlm_request_default_params();
        p[q].prompt = pr[q];
        p[q].n_prompt = 10;
        p[q].max_tokens = 12;
        p[q].on_token = on_token;
        p[q].on_finish = on_finish;
        p[q].on_admit = count_admit;
        p[q].user = &o[q];
        p[q].sampling.temperature = 0;
    }
    for (int q = 0; q < 6; q++) assert_true(kvlm_sched_submit(r.s, &p[q], &err) >= 0);
    const int items[6] = {2, 4, 5, 6, 6, 7}, admitted[6] = {2, 4, 5, 6, 6, 7};
    for (int st = 0; st < 6; st++) {
        if (st == 5) assert_true(kvlm_sched_submit(r.s, &p[6], &err) >= 0);
        const int n = kvlm_sched_step(r.s, &err);
        if (n < 0) fail_msg("%s", err.msg);
        assert_int_equal(n, items[st]);
        assert_int_equal(n_admitted, admitted[st]);
    }
    drain(&r);
    for (int q = 0; q < 7; q++) assert_int_equal(o[q].n[0], 12);
    kvlm_sched_stats ss;
    kvlm_sched_get_stats(r.s, &ss);
    assert_int_equal(ss.prompt_tokens, 70);
    assert_int_equal(ss.generated_tokens, 84);
    rig_close(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batched_equals_alone),
        cmocka_unit_test(test_n_choices),
        cmocka_unit_test(test_cancel_queue_deadline),
        cmocka_unit_test(test_eos_list_and_text),
        cmocka_unit_test(test_recompute),
        cmocka_unit_test(test_queue_grows),
        cmocka_unit_test(test_never_fits),
        cmocka_unit_test(test_burst_admission),
        cmocka_unit_test(test_prefill_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
