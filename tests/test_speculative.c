/*
 * Speculative decoding: prompt lookup drafts exactly what followed the
 * latest earlier n-gram; a verified draft follows the target chain's
 * distribution (chi-square, for a draft distribution and for a point mass);
 * greedy generation with either drafter gives exactly the tokens of
 * decoding without speculation; sampled generation with a draft model
 * follows the target's joint distribution over three tokens (chi-square
 * against the distribution computed from the model, penalties included);
 * a cache rolled back over rejected drafts equals one that never held them
 * (tokens, blocks, invariants, the next step's logits); what speculation
 * does not support (the recompute policy) is refused by name; with a
 * grammar see test_spec_grammar.c. With a sliding window, a rollback
 * into blocks the window gave back recomputes the context and the output
 * is still the same. A pool of one context's blocks with drafts rolled
 * back into indexed blocks runs every request to its length.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kvlm.h"
#include "runtime/kvcache.h"
#include "runtime/sampler.h"
#include "runtime/speculative.h"

#define TARGET "tests/fixtures/gpt2/hf_f32"
#define DRAFT_F16 "tests/fixtures/gpt2/hf_f16"
#define VOCAB 200

static void test_ngram_lookup(void **state) {
    (void)state;
    const int32_t t[] = {1, 2, 3, 9, 1, 2, 3, 7, 5, 1, 2, 3};
    int32_t out[8];
    assert_int_equal(spec_draft_ngram(t, 12, 3, 3, out), 3);
    assert_int_equal(out[0], 7);
    assert_int_equal(out[1], 5);
    assert_int_equal(out[2], 1);
    /* up to the end of the sequence */
    assert_int_equal(spec_draft_ngram(t, 12, 3, 8, out), 5);
    assert_int_equal(out[3], 2);
    assert_int_equal(out[4], 3);
    /* a unigram: the latest earlier 3 (index 6) */
    assert_int_equal(spec_draft_ngram(t, 12, 1, 2, out), 2);
    assert_int_equal(out[0], 7);
    /* the longest match wins over a later shorter one */
    const int32_t u[] = {4, 5, 6, 8, 9, 6, 3, 4, 5, 6};
    assert_int_equal(spec_draft_ngram(u, 10, 3, 1, out), 1);
    assert_int_equal(out[0], 8); /* "4 5 6" -> 8, not "6" -> 3 */
    /* no earlier occurrence */
    const int32_t v[] = {1, 2, 3};
    assert_int_equal(spec_draft_ngram(v, 3, 3, 4, out), 0);
    assert_int_equal(spec_draft_ngram(v, 1, 3, 4, out), 0);
}

/* Drafts drawn from q (or a fixed token: q a point mass) and verified
 * against the chain's p leave tokens distributed as p. */
static void verify_fit(const float *q, int32_t fixed, int never_kept, const char *what) {
    enum { V = 12, DRAWS = 60000 };
    float lg[V];
    for (int i = 0; i < V; i++) lg[i] = 0.25f * (float)((i * 5) % V);
    kvlm_sampler_options o = kvlm_sampler_default_params();
    o.temperature = 0.8f;
    o.top_k = 8;
    o.repetition_penalty = 1.3f;
    o.seed = 77;
    kvlm_error err;
    kvlm_sampler *s = kvlm_sampler_create(&o, V, &err);
    assert_non_null(s);
    const int32_t hist[] = {7, 7, 2};
    kvlm_sampler_accept(s, hist, 3);
    float p[V], scratch[V];
    assert_int_equal(smp_probs(s, lg, p), 0);
    smp_rng rng;
    smp_rng_seed(&rng, 5);
    int count[V] = {0}, kept = 0;
    for (int d = 0; d < DRAWS; d++) {
        int32_t draft = fixed;
        if (q) { /* draw from q */
            double u = smp_rng_uniform(&rng), acc = 0;
            draft = V - 1;
            for (int i = 0; i < V; i++)
                if (u < (acc += q[i])) { draft = i; break; }
        }
        int32_t id;
        kept += spec_verify(s, lg, draft, q, scratch, &id);
        assert_true(id >= 0 && id < V);
        count[id]++;
    }
    double chi2 = 0;
    int cells = 0;
    for (int i = 0; i < V; i++) {
        if (p[i] == 0) {
            if (count[i]) fail_msg("%s: token %d outside the target's candidates drawn %d times", what, i, count[i]);
            continue;
        }
        const double e = p[i] * DRAWS;
        chi2 += (count[i] - e) * (count[i] - e) / e;
        cells++;
    }
    assert_int_equal(cells, 8);
    if (chi2 > th_chi2_critical(cells - 1)) fail_msg("%s: chi-square %.2f > %.2f", what, chi2, th_chi2_critical(cells - 1));
    if (never_kept) assert_int_equal(kept, 0);
    else assert_true(kept > 0 && kept < DRAWS); /* both branches ran */
    kvlm_sampler_free(s);
}

static void test_verify_distribution(void **state) {
    (void)state;
    float q[12];
    double sum = 0;
    for (int i = 0; i < 12; i++) sum += q[i] = (float)(1 + (i * 3) % 7);
    for (int i = 0; i < 12; i++) q[i] = (float)(q[i] / sum);
    verify_fit(q, -1, 0, "draft distribution");
    verify_fit(NULL, 4, 0, "point mass on a candidate");
    verify_fit(NULL, 10, 1, "point mass outside the candidates");
}

/* A target, its cache and a scheduler, with an optional draft model. */
typedef struct rig {
    kvlm_model *m, *dm;
    kvlm_kv *kv, *dkv;
    kvlm_engine *e, *de;
    kvlm_sched *s;
} rig;

static rig rig_open(const char *draft, int max_seqs) {
    kvlm_error err;
    rig r = {0};
    r.m = kvlm_model_load(TARGET, NULL, &err);
    assert_non_null(r.m);
    kvlm_kv_options ko = kvlm_kv_default_params();
    ko.dtype = KVLM_F32;
    ko.block_size = 4;
    ko.max_seqs = max_seqs;
    r.kv = kvlm_kv_create(r.m, &ko, &err);
    r.e = kvlm_engine_create(r.m, r.kv, &(kvlm_engine_options){.threads = 1}, &err);
    assert_non_null(r.e);
    r.s = kvlm_sched_create(r.e, r.kv, VOCAB, &(kvlm_sched_options){.max_batch_tokens = 64}, &err);
    assert_non_null(r.s);
    if (draft) {
        r.dm = strcmp(draft, "synthetic") == 0 ? kvlm_model_synthetic("gpt2-tiny", KVLM_F32, 99, NULL, &err)
                                               : kvlm_model_load(draft, NULL, &err);
        assert_non_null(r.dm);
        r.dkv = kvlm_kv_create(r.dm, &ko, &err);
        r.de = kvlm_engine_create(r.dm, r.dkv, &(kvlm_engine_options){.threads = 1}, &err);
        assert_non_null(r.de);
        assert_int_equal(kvlm_sched_set_draft(r.s, r.de, r.dkv, VOCAB, &err), 0);
    }
    return r;
}

static void rig_close(rig *r) {
    kvlm_sched_free(r->s);
    kvlm_engine_free(r->e);
    kvlm_kv_free(r->kv);
    kvlm_model_free(r->m);
    kvlm_engine_free(r->de);
    kvlm_kv_free(r->dkv);
    kvlm_model_free(r->dm);
}

#define MAXTOK 24

typedef struct out {
    int32_t ids[MAXTOK];
    float lp[MAXTOK];
    int n, drafted, accepted;
    kvlm_finish why;
} out;

static int on_token(void *user, const kvlm_token_event *ev) {
    out *o = user;
    if (o->n < MAXTOK) {
        o->lp[o->n] = ev->logprob;
        o->ids[o->n++] = ev->id;
    }
    return 0;
}

static void on_finish(void *user, const kvlm_finish_event *ev) {
    out *o = user;
    o->why = ev->reason;
    o->drafted = ev->n_drafted;
    o->accepted = ev->n_accepted;
}

static void generate(rig *r, const int32_t *prompt, int n_prompt, int max_tokens, kvlm_sampler_options so,
                     kvlm_speculation sp, out *o) {
    memset(o, 0, sizeof *o);
    kvlm_request_params p = kvlm_request_default_params();
    p.prompt = prompt;
    p.n_prompt = n_prompt;
    p.max_tokens = max_tokens;
    p.logprobs = -1;
    p.sampling = so;
    p.on_token = on_token;
    p.on_finish = on_finish;
    p.user = o;
    p.speculation = sp;
    kvlm_error err;
    if (kvlm_sched_submit(r->s, &p, &err) < 0) fail_msg("submit: %s", err.msg);
    while (kvlm_sched_has_work(r->s))
        if (kvlm_sched_step(r->s, &err) < 0) fail_msg("step: %s", err.msg);
    assert_int_equal(o->n, max_tokens);
}

static void test_greedy_identical(void **state) {
    (void)state;
    const int32_t prompts[3][8] = {{5, 17, 42, 5, 17, 42, 5, 17}, {100, 3, 99, 150, 7, 12, 60, 61}, {9, 9, 9, 9, 9, 9, 9, 9}};
    kvlm_sampler_options so = kvlm_sampler_default_params();
    so.temperature = 0;
    so.repetition_penalty = 1.1f; /* penalties apply position by position */
    const struct {
        const char *draft;
        kvlm_speculation sp;
    } cases[] = {
        {NULL, {KVLM_DRAFT_NGRAM, 3, 2, 1}},
        {NULL, {KVLM_DRAFT_NGRAM, 16, 1, 1}},
        {DRAFT_F16, {KVLM_DRAFT_MODEL, 4, 0, 1}},
        {"synthetic", {KVLM_DRAFT_MODEL, 3, 0, 1}},
    };
    rig plain = rig_open(NULL, 1);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        rig r = rig_open(cases[c].draft, 1);
        int drafted = 0, accepted = 0;
        for (int i = 0; i < 3; i++) {
            out a, b;
            generate(&plain, prompts[i], 8, 20, so, (kvlm_speculation){0}, &a);
            generate(&r, prompts[i], 8, 20, so, cases[c].sp, &b);
            assert_memory_equal(a.ids, b.ids, sizeof a.ids);
            for (int t = 0; t < 20; t++) assert_float_equal(a.lp[t], b.lp[t], 1e-4);
            assert_int_equal(a.drafted, 0);
            drafted += b.drafted;
            accepted += b.accepted;
        }
        assert_true(drafted > 0);
        assert_true(accepted <= drafted);
        if (cases[c].draft && strcmp(cases[c].draft, DRAFT_F16) == 0)
            assert_true(accepted * 10 >= drafted * 9); /* the same weights in f16 */
        kvlm_sched_stats st;
        kvlm_sched_get_stats(r.s, &st);
        assert_int_equal(st.drafted_tokens, (uint64_t)drafted);
        assert_int_equal(st.accepted_tokens, (uint64_t)accepted);
        /* fewer target steps than tokens: 3 prefills + one step per decode item */
        assert_true(st.steps < 3 * 20);
        rig_close(&r);
    }
    rig_close(&plain);
}

/* The target chain's distribution of the next token after ctx (prompt and
 * the tokens drawn so far, all in the penalty history). */
static void target_probs(kvlm_model *m, const kvlm_sampler_options *so, const int32_t *ctx, int n, float *p) {
    kvlm_error err;
    kvlm_kv *kv = kvlm_kv_create(m, &(kvlm_kv_options){.dtype = KVLM_F32, .max_seqs = 1}, &err);
    kvlm_engine *e = kvlm_engine_create(m, kv, &(kvlm_engine_options){.threads = 1}, &err);
    int seq = kvlm_kv_seq_new(kv, &err);
    float logits[VOCAB];
    kvlm_batch_item it = {seq, ctx, n, 0};
    assert_int_equal(kvlm_engine_step(e, &it, 1, logits, &err), 0);
    kvlm_sampler *s = kvlm_sampler_create(so, VOCAB, &err);
    kvlm_sampler_accept(s, ctx, n);
    smp_probs(s, logits, p);
    kvlm_sampler_free(s);
    kvlm_engine_free(e);
    kvlm_kv_free(kv);
}

/* Three sampled tokens with a draft model (the first from the prompt, the
 * next two verified: the draft at k = 1, then the token after it) against
 * the exact joint distribution of the target. */
static void sampled_fit(const char *draft, kvlm_speculation sp, const int32_t *prompt, int n_prompt, float penalty) {
    enum { RUNS = 3000 };
    kvlm_sampler_options so = kvlm_sampler_default_params();
    so.temperature = 0.9f;
    so.top_k = 3;
    so.repetition_penalty = penalty; /* in p, not in the draft chain's q */
    rig r = rig_open(draft, 1);
    /* the exact joint distribution: up to 3 x 3 x 3 cells */
    int32_t ctx[24];
    memcpy(ctx, prompt, (size_t)n_prompt * sizeof *ctx);
    static float p1[VOCAB], p2[VOCAB][VOCAB];
    static double joint[VOCAB][3][3];
    int32_t c1[3], c2[VOCAB][3], c3[VOCAB][3][3];
    memset(joint, 0, sizeof joint);
    target_probs(r.m, &so, ctx, n_prompt, p1);
    int n1 = 0;
    for (int a = 0; a < VOCAB; a++) {
        if (p1[a] == 0) continue;
        assert_true(n1 < 3);
        c1[n1] = a;
        ctx[n_prompt] = a;
        target_probs(r.m, &so, ctx, n_prompt + 1, p2[a]);
        int n2 = 0;
        for (int b = 0; b < VOCAB; b++) {
            if (p2[a][b] == 0) continue;
            c2[a][n2] = b;
            ctx[n_prompt + 1] = b;
            float p3[VOCAB];
            target_probs(r.m, &so, ctx, n_prompt + 2, p3);
            int n3 = 0;
            for (int c = 0; c < VOCAB; c++) {
                if (p3[c] == 0) continue;
                c3[a][n2][n3] = c;
                joint[a][n2][n3] = (double)p1[a] * p2[a][b] * p3[c];
                n3++;
            }
            n2++;
        }
        n1++;
    }
    static int count[VOCAB][3][3];
    memset(count, 0, sizeof count);
    int drafted = 0, accepted = 0;
    for (int run = 0; run < RUNS; run++) {
        so.seed = 1000 + (uint64_t)run;
        out o;
        generate(&r, prompt, n_prompt, 3, so, sp, &o);
        drafted += o.drafted;
        accepted += o.accepted;
        int j = -1, k = -1;
        for (int x = 0; x < 3 && p1[o.ids[0]] > 0; x++)
            if (c2[o.ids[0]][x] == o.ids[1]) j = x;
        for (int x = 0; j >= 0 && x < 3; x++)
            if (c3[o.ids[0]][j][x] == o.ids[2]) k = x;
        if (j < 0 || k < 0) fail_msg("run %d drew %d %d %d, outside the target's candidates", run, o.ids[0], o.ids[1],
                                     o.ids[2]);
        count[o.ids[0]][j][k]++;
    }
    /* cells with fewer than 5 expected draws pooled into one */
    double chi2 = 0, pool_e = 0, pool_o = 0;
    int cells = 0;
    for (int a = 0; a < n1; a++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 3; k++) {
                const double e = joint[c1[a]][j][k] * RUNS;
                const int obs = count[c1[a]][j][k];
                if (e == 0) continue;
                if (e < 5) {
                    pool_e += e;
                    pool_o += obs;
                    continue;
                }
                chi2 += (obs - e) * (obs - e) / e;
                cells++;
            }
    if (pool_e > 0) {
        chi2 += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        cells++;
    }
    assert_true(cells >= 6);
    if (chi2 > th_chi2_critical(cells - 1))
        fail_msg("chi-square %.2f > %.2f (%d cells)", chi2, th_chi2_critical(cells - 1), cells);
    if (!(drafted > 0 && accepted > 0 && accepted < drafted)) /* kept and rejected drafts both */
        fail_msg("%d drafted, %d kept", drafted, accepted);
    rig_close(&r);
}

static void test_sampled_distribution_model(void **state) {
    (void)state;
    const int32_t prompt[] = {100, 3, 99, 150, 7};
    sampled_fit(DRAFT_F16, (kvlm_speculation){KVLM_DRAFT_MODEL, 4, 0, 1}, prompt, 5, 1.3f);
}

static void test_sampled_distribution_ngram(void **state) {
    (void)state;
    /* a prompt that holds its own greedy continuation, so the tokens the
     * target draws next have occurred before and a unigram lookup drafts */
    int32_t prompt[15] = {4, 8, 15};
    rig r = rig_open(NULL, 1);
    kvlm_sampler_options so = kvlm_sampler_default_params();
    so.temperature = 0;
    out o;
    generate(&r, prompt, 3, 12, so, (kvlm_speculation){0}, &o);
    rig_close(&r);
    memcpy(prompt + 3, o.ids, 12 * sizeof *prompt);
    sampled_fit(NULL, (kvlm_speculation){KVLM_DRAFT_NGRAM, 4, 1, 1}, prompt, 15, 1.0f);
}

/* Prompt lookup's verification draws each token as plain decoding does
 * and keeps a draft when the draw is the draft: sampled text (temperature,
 * top-p, a penalty) is token for token plain decoding's for each seed,
 * with drafts kept and rejected along the way. */
static void test_sampled_coupled_ngram(void **state) {
    (void)state;
    const int32_t prompt[] = {5, 17, 42, 5, 17, 42, 5, 17};
    kvlm_sampler_options so = kvlm_sampler_default_params();
    so.temperature = 0.7f;
    so.top_p = 0.95f;
    so.repetition_penalty = 1.05f;
    rig plain = rig_open(NULL, 1), r = rig_open(NULL, 1);
    int drafted = 0, accepted = 0;
    for (uint64_t seed = 1; seed <= 12; seed++) {
        so.seed = seed;
        out a, b;
        generate(&plain, prompt, 8, 20, so, (kvlm_speculation){0}, &a);
        generate(&r, prompt, 8, 20, so, (kvlm_speculation){KVLM_DRAFT_NGRAM, 4, 2, 1}, &b);
        assert_memory_equal(a.ids, b.ids, sizeof a.ids);
        drafted += b.drafted;
        accepted += b.accepted;
    }
    if (!(accepted > 0 && accepted < drafted)) fail_msg("%d drafted, %d kept", drafted, accepted);
    rig_close(&plain);
    rig_close(&r);
}

/* A sliding-window model (window 5, 4-token blocks): the drafts carry the
 * window past blocks it gives back, the rollback is refused by the cache,
 * the choice recomputes its context and drafts no more; the greedy output
 * stays that of plain decoding. */
static void test_sliding_window(void **state) {
    (void)state;
    kvlm_error err;
    kvlm_model *m = kvlm_model_load("tests/fixtures/llama/mistral_swa", NULL, &err);
    assert_non_null(m);
    const int vocab = kvlm_model_config(m)->vocab_size;
    out res[2];
    /* a prompt of distinct tokens that the output soon repeats one of:
     * the unigram lookup drafts four rows, which carry the window past a
     * block it gives back before they are rejected (without the recompute
     * the step fails: "cannot truncate ... released") */
    const int32_t prompt[] = {52, 1, 2, 3, 4, 7, 8, 9, 7, 8};
    for (int spec = 0; spec < 2; spec++) {
        kvlm_kv *kv = kvlm_kv_create(m, &(kvlm_kv_options){.dtype = KVLM_F32, .block_size = 4, .max_seqs = 1}, &err);
        kvlm_engine *e = kvlm_engine_create(m, kv, &(kvlm_engine_options){.threads = 1}, &err);
        rig r = {.s = kvlm_sched_create(e, kv, vocab, NULL, &err)};
        kvlm_sampler_options so = kvlm_sampler_default_params();
        so.temperature = 0;
        generate(&r, prompt, 10, 20, so, (kvlm_speculation){spec ? KVLM_DRAFT_NGRAM : KVLM_DRAFT_NONE, 4, 1, 1},
                 &res[spec]);
        kvlm_sched_free(r.s);
        kvlm_engine_free(e);
        kvlm_kv_free(kv);
    }
    assert_memory_equal(res[0].ids, res[1].ids, sizeof res[0].ids);
    assert_true(res[1].drafted >= 4);
    kvlm_model_free(m);
}

/* One sequence's state in the cache: tokens, block count, stats. A full
 * block the drafts completed may stay in the prefix index after the
 * rollback (its states are those of the tokens it names) until the next
 * write copies it, so stored tokens are compared only when exact is set. */
static void same_state(const kvlm_kv *a, int sa, const kvlm_kv *b, int sb, int exact) {
    kvlm_error err;
    assert_int_equal(kv_check_invariants(a, &err), 0);
    assert_int_equal(kv_check_invariants(b, &err), 0);
    const int n = kvlm_kv_seq_len(a, sa, NULL);
    assert_int_equal(n, kvlm_kv_seq_len(b, sb, NULL));
    assert_memory_equal(kv_seq_tokens(a, sa), kv_seq_tokens(b, sb), (size_t)n * sizeof(int32_t));
    const int *ta, *tb;
    assert_int_equal(kv_seq_blocks(a, sa, &ta), kv_seq_blocks(b, sb, &tb));
    kvlm_kv_stats x, y;
    kvlm_kv_get_stats(a, &x);
    kvlm_kv_get_stats(b, &y);
    assert_int_equal(x.blocks_used, y.blocks_used);
    assert_int_equal(x.tokens, y.tokens);
    if (exact) assert_int_equal(x.tokens_stored, y.tokens_stored);
}

/* A cache that computed t and three drafts and was truncated back to t and
 * the one draft kept equals a cache that computed t and that draft one at
 * a time: same tokens, blocks, invariants, and the next step's logits. */
static void test_rollback_state(void **state) {
    (void)state;
    kvlm_error err;
    kvlm_model *m = kvlm_model_load(TARGET, NULL, &err);
    assert_non_null(m);
    kvlm_kv_options ko = kvlm_kv_default_params();
    ko.dtype = KVLM_F32;
    ko.block_size = 4;
    ko.max_seqs = 2;
    kvlm_kv *ka = kvlm_kv_create(m, &ko, &err), *kb = kvlm_kv_create(m, &ko, &err);
    kvlm_engine *ea = kvlm_engine_create(m, ka, &(kvlm_engine_options){.threads = 1}, &err);
    kvlm_engine *eb = kvlm_engine_create(m, kb, &(kvlm_engine_options){.threads = 1}, &err);
    const int32_t prompt[] = {11, 22, 33, 44, 55}, spec[] = {66, 77, 88, 99}, next = 123;
    float la[4 * VOCAB], lb[4 * VOCAB];
    for (int keep = 0; keep <= 3; keep++) {
        int sa = kvlm_kv_seq_new(ka, &err), sb = kvlm_kv_seq_new(kb, &err);
        kvlm_batch_item a0 = {sa, prompt, 5, 0}, b0 = {sb, prompt, 5, 0};
        assert_int_equal(kvlm_engine_step(ea, &a0, 1, la, &err), 0);
        assert_int_equal(kvlm_engine_step(eb, &b0, 1, lb, &err), 0);
        /* a: t (66) and drafts 77 88 99 at positions 5..8 (filling block 1,
         * which enters the prefix index), then back to t + keep drafts */
        kvlm_batch_item a1 = {sa, spec, 4, 1};
        assert_int_equal(kvlm_engine_step(ea, &a1, 1, la, &err), 0);
        assert_int_equal(kvlm_kv_seq_truncate(ka, sa, 6 + keep, &err), 0);
        for (int i = 0; i <= keep; i++) {
            kvlm_batch_item b1 = {sb, &spec[i], 1, 0};
            assert_int_equal(kvlm_engine_step(eb, &b1, 1, lb, &err), 0);
        }
        same_state(ka, sa, kb, sb, 0);
        kvlm_batch_item a2 = {sa, &next, 1, 0}, b2 = {sb, &next, 1, 0};
        assert_int_equal(kvlm_engine_step(ea, &a2, 1, la, &err), 0);
        assert_int_equal(kvlm_engine_step(eb, &b2, 1, lb, &err), 0);
        for (int i = 0; i < VOCAB; i++) assert_float_equal(la[i], lb[i], 1e-4);
        same_state(ka, sa, kb, sb, 1); /* the next write copied the indexed block */
        kvlm_kv_seq_free(ka, sa);
        kvlm_kv_seq_free(kb, sb);
    }
    kvlm_engine_free(ea);
    kvlm_engine_free(eb);
    kvlm_kv_free(ka);
    kvlm_kv_free(kb);
    kvlm_model_free(m);
}

static void test_refusals(void **state) {
    (void)state;
    kvlm_error err;
    rig r = rig_open(NULL, 1);
    const int32_t prompt[] = {1, 2, 3};
    kvlm_request_params p = kvlm_request_default_params();
    p.prompt = prompt;
    p.n_prompt = 3;
    p.max_tokens = 4;
    p.sampling = kvlm_sampler_default_params();
    p.speculation = (kvlm_speculation){KVLM_DRAFT_MODEL, 4, 0, 1};
    assert_true(kvlm_sched_submit(r.s, &p, &err) < 0);
    assert_non_null(strstr(err.msg, "no draft model"));
    p.speculation = (kvlm_speculation){KVLM_DRAFT_NGRAM, 17, 0, 1};
    assert_true(kvlm_sched_submit(r.s, &p, &err) < 0);
    assert_non_null(strstr(err.msg, "k 17 (1..16)"));
    p.speculation = (kvlm_speculation){KVLM_DRAFT_NGRAM, 2, 9, 1};
    assert_true(kvlm_sched_submit(r.s, &p, &err) < 0);
    assert_non_null(strstr(err.msg, "ngram 9 (1..8)"));
    p.speculation = (kvlm_speculation){(kvlm_draft_mode)7, 2, 2, 1};
    assert_true(kvlm_sched_submit(r.s, &p, &err) < 0);
    assert_non_null(strstr(err.msg, "unknown draft mode 7"));
    p.speculation = (kvlm_speculation){KVLM_DRAFT_NGRAM, 2, 2, 1};
    rig_close(&r);
    /* recompute keeps no cache to verify in */
    kvlm_model *m = kvlm_model_load(TARGET, NULL, &err);
    kvlm_kv *kv = kvlm_kv_create(m, &(kvlm_kv_options){.dtype = KVLM_F32, .max_seqs = 1}, &err);
    kvlm_engine *e = kvlm_engine_create(m, kv, &(kvlm_engine_options){.threads = 1}, &err);
    kvlm_sched *s = kvlm_sched_create(e, kv, VOCAB, &(kvlm_sched_options){.recompute = 1}, &err);
    assert_int_equal(kvlm_sched_submit(s, &p, &err), KVLM_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "recompute"));
    /* a draft with another vocabulary */
    kvlm_model *other = kvlm_model_synthetic("llama-tiny", KVLM_F32, 1, NULL, &err);
    kvlm_kv *okv = kvlm_kv_create(other, &(kvlm_kv_options){.dtype = KVLM_F32, .max_seqs = 1}, &err);
    kvlm_engine *oe = kvlm_engine_create(other, okv, &(kvlm_engine_options){.threads = 1}, &err);
    assert_int_equal(kvlm_sched_set_draft(s, oe, okv, kvlm_model_config(other)->vocab_size, &err), KVLM_ERR_ARG);
    assert_non_null(strstr(err.msg, "256 tokens, the target's 200"));
    kvlm_engine_free(oe);
    kvlm_kv_free(okv);
    kvlm_model_free(other);
    kvlm_sched_free(s);
    kvlm_engine_free(e);
    kvlm_kv_free(kv);
    kvlm_model_free(m);
}

/* A pool of exactly one context's blocks (kvlm run's): drafts that
 * complete a block put it in the prefix index, the rollback leaves the
 * sequence's tail in it, and the next write must copy it. Near the end of
 * the context that copy plus the drafts' next block is one block more
 * than the pool has free: the drafts must give way (fewer drafts this
 * step), not the request. Sampled text at 0.8 rejects most drafts, so
 * across these seeds the rollback into an indexed block happens (a
 * copy-on-write with one sequence and no fork) and every request still
 * runs to its length. */
static void test_pool_full_rollback(void **state) {
    (void)state;
    kvlm_error err;
    kvlm_model *m = kvlm_model_load("models/shakespeare-gpt2", NULL, &err);
    assert_non_null(m);
    const int n_ctx = kvlm_model_config(m)->n_ctx, vocab = kvlm_model_config(m)->vocab_size;
    kvlm_kv *kv = kvlm_kv_create(m, &(kvlm_kv_options){.dtype = KVLM_F32, .max_seqs = 1}, &err);
    kvlm_engine *e = kvlm_engine_create(m, kv, &(kvlm_engine_options){.threads = 1}, &err);
    assert_non_null(e);
    kvlm_kv_stats ks;
    kvlm_kv_get_stats(kv, &ks);
    assert_int_equal(ks.blocks_total, (size_t)n_ctx / 16); /* 8 blocks of 16 for 128 positions */
    const int32_t prompt[] = {33676, 4720, 25}; /* "ROMEO:" */
    enum { N = 120 };
    uint64_t cows = 0;
    for (uint64_t seed = 1; seed <= 8; seed++) {
        kvlm_sched *s = kvlm_sched_create(e, kv, vocab, &(kvlm_sched_options){.max_batch_tokens = 3 + N}, &err);
        assert_non_null(s);
        kvlm_sampler_options so = kvlm_sampler_default_params();
        so.temperature = 0.8f;
        so.seed = seed;
        out o;
        memset(&o, 0, sizeof o);
        kvlm_request_params p = kvlm_request_default_params();
        p.prompt = prompt;
        p.n_prompt = 3;
        p.max_tokens = N;
        p.sampling = so;
        p.on_token = on_token;
        p.on_finish = on_finish;
        p.user = &o;
        p.speculation = (kvlm_speculation){KVLM_DRAFT_NGRAM, 4, 2, 1}; /* fixed: drafts at every step */
        assert_true(kvlm_sched_submit(s, &p, &err) >= 0);
        while (kvlm_sched_has_work(s))
            if (kvlm_sched_step(s, &err) < 0) fail_msg("step: %s", err.msg);
        if (o.why != KVLM_FINISH_LENGTH) fail_msg("seed %d ended with %d, not LENGTH", (int)seed, (int)o.why);
        assert_true(o.drafted > 0);
        assert_int_equal(kv_check_invariants(kv, &err), 0);
        kvlm_sched_free(s);
    }
    kvlm_kv_get_stats(kv, &ks);
    cows = ks.cow_copies;
    assert_true(cows > 0); /* the situation this test is about did arise */
    kvlm_engine_free(e);
    kvlm_kv_free(kv);
    kvlm_model_free(m);
}

/* The command line: flags checked and named, a draft of another
 * vocabulary refused, and kvlm run's text the same with either drafter. */
static void test_cli(void **state) {
    (void)state;
    const th_cli_case cases[] = {
        {"run -m " TARGET " --ids 1,2,3 --draft x --draft-ngram 2", 2, "--draft and --draft-ngram exclude each other"},
        {"run -m " TARGET " --ids 1,2,3 --draft-k 17", 2, "--draft-k: 17 is outside [1, 16]"},
        {"run -m " TARGET " --ids 1,2,3 --draft-ngram 9", 2, "--draft-ngram: 9 is outside [1, 8]"},
        {"run -m " TARGET " --ids 1,2,3 --draft-ngram 2 --no-cache", 2, "needs the KV cache: not with --no-cache"},
        {"run -m " TARGET " --ids 1,2,3 -n 4 --draft models/shakespeare-llama", 2,
         "its vocabulary has 50257 tokens, the model's 200"},
        {"bench -m " TARGET " -p hello", 2, "they need --draft or --draft-ngram"},
        {"run -m " TARGET " --ids 1,2,3 --draft-k 3", 2, "--draft-k needs --draft or --draft-ngram"},
        {"serve -m " TARGET " --draft x --draft-ngram 2", 2, "--draft and --draft-ngram exclude each other"},
    };
    th_expect_cli(cases, sizeof cases / sizeof *cases);
    char *plain = NULL, *ngram = NULL, *model = NULL;
    assert_int_equal(th_run_kvlm(&plain, "run -m " TARGET " --ids 5,17,42,5,17 -n 20 --temp 0 --json"), 0);
    assert_int_equal(th_run_kvlm(&ngram, "run -m " TARGET " --ids 5,17,42,5,17 -n 20 --temp 0 --json --draft-ngram 2"),
                     0);
    assert_int_equal(th_run_kvlm(&model, "run -m " TARGET " --ids 5,17,42,5,17 -n 20 --temp 0 --json --draft " DRAFT_F16
                                         " --draft-k 3"), 0);
    /* the ids are the same; the stats differ by their drafted tokens */
    const char *ids = strstr(plain, "\"ids\":");
    assert_non_null(ids);
    const size_t n = (size_t)(strchr(ids, ']') - ids);
    assert_non_null(strstr(ngram, "\"ids\":"));
    assert_memory_equal(strstr(ngram, "\"ids\":"), ids, n);
    assert_memory_equal(strstr(model, "\"ids\":"), ids, n);
    assert_non_null(strstr(plain, "\"drafted_tokens\":0"));
    assert_null(strstr(model, "\"drafted_tokens\":0"));
    free(plain);
    free(ngram);
    free(model);
    /* kvlm bench's comparison: both temperatures, every figure named */
    char *bench = NULL;
    assert_int_equal(th_run_kvlm(&bench, "bench -m " TARGET " --repeats 1 --no-cache-test --bw-mib 16 --pp 4 --tg 12 "
                                         "--draft " DRAFT_F16 " --draft-k 2 --json 2>/dev/null"), 0);
    json_error_t jerr;
    json_t *doc = json_loads(bench, 0, &jerr), *sp = json_object_get(doc, "speculative");
    assert_non_null(sp);
    assert_string_equal(json_string_value(json_object_get(sp, "draft")), "model");
    assert_int_equal(json_integer_value(json_object_get(sp, "k")), 2);
    json_t *runs = json_object_get(sp, "runs");
    assert_int_equal(json_array_size(runs), 2);
    for (size_t i = 0; i < 2; i++) {
        json_t *r = json_array_get(runs, i);
        assert_float_equal(json_real_value(json_object_get(r, "temperature")), i ? 0.8 : 0.0, 1e-6);
        const double acc = json_real_value(json_object_get(r, "acceptance"));
        const double tps = json_real_value(json_object_get(r, "tokens_per_target_step"));
        assert_true(acc > 0.5 && acc <= 1); /* the same weights in f16 */
        assert_true(tps > 1.5 && tps <= 3);  /* at most k + 1 = 3 */
        assert_true(json_real_value(json_object_get(r, "speedup")) > 0);
    }
    json_decref(doc);
    free(bench);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ngram_lookup),
        cmocka_unit_test(test_verify_distribution),
        cmocka_unit_test(test_greedy_identical),
        cmocka_unit_test(test_sampled_distribution_model),
        cmocka_unit_test(test_sampled_distribution_ngram),
        cmocka_unit_test(test_sampled_coupled_ngram),
        cmocka_unit_test(test_rollback_state),
        cmocka_unit_test(test_sliding_window),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_pool_full_rollback),
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
