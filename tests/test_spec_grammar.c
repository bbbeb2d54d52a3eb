/*
 * Speculative decoding under a grammar, on the shipped Shakespeare GPT-2
 * (its own tokenizer; the shipped Llama, which shares it, as the draft
 * model): greedy output with prompt lookup or a draft model is token for
 * token that of plain grammar decoding (and its log-probabilities), ends
 * as a complete document and matches the grammar, with drafts both kept
 * and rejected; sampled output with either drafter follows the masked
 * target distribution over three tokens (chi-square against the joint
 * distribution computed from the model, the mask applied at the grammar
 * state each earlier token reached); kvlm run prints the same text with
 * --draft-ngram as without, and that text validates.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "helpers.h"
#include "kvlm.h"
#include "kvlm_tokenizer.h"
#include "runtime/constrain.h"
#include "runtime/sampler.h"

#define SHAKES "models/shakespeare-gpt2"
#define DRAFT "models/shakespeare-llama"

/* The lines of a speech, short enough to close within 64 tokens (kvlm
 * run's default) and long enough for prompt lookup to find repeats. */
static const char SCHEMA[] = "{\"type\":\"object\",\"properties\":{\"lines\":{\"type\":\"array\",\"items\":"
                             "{\"type\":\"string\",\"maxLength\":40},\"maxItems\":2}},\"required\":[\"lines\"]}";

typedef struct rig {
    kvlm_model *m, *dm;
    kvlm_tokenizer *tok;
    kvlm_kv *kv, *dkv;
    kvlm_engine *e, *de;
    kvlm_sched *s;
    int vocab;
} rig;

static rig rig_open(int draft_model) {
    kvlm_error err;
    rig r = {0};
    r.m = kvlm_model_load(SHAKES, NULL, &err);
    assert_non_null(r.m);
    r.tok = kvlm_tokenizer_load(SHAKES, &err);
    assert_non_null(r.tok);
    r.vocab = kvlm_model_config(r.m)->vocab_size;
    kvlm_kv_options ko = kvlm_kv_default_params();
    ko.dtype = KVLM_F32;
    ko.max_seqs = 1;
    r.kv = kvlm_kv_create(r.m, &ko, &err);
    r.e = kvlm_engine_create(r.m, r.kv, &(kvlm_engine_options){.threads = 1}, &err);
    assert_non_null(r.e);
    r.s = kvlm_sched_create(r.e, r.kv, r.vocab, NULL, &err);
    assert_non_null(r.s);
    if (draft_model) {
        r.dm = kvlm_model_load(DRAFT, NULL, &err);
        assert_non_null(r.dm);
        r.dkv = kvlm_kv_create(r.dm, &ko, &err);
        r.de = kvlm_engine_create(r.dm, r.dkv, &(kvlm_engine_options){.threads = 1}, &err);
        assert_non_null(r.de);
        assert_int_equal(kvlm_sched_set_draft(r.s, r.de, r.dkv, r.vocab, &err), 0);
    }
    return r;
}

static void rig_close(rig *r) {
    kvlm_sched_free(r->s);
    kvlm_engine_free(r->e);
    kvlm_kv_free(r->kv);
    kvlm_engine_free(r->de);
    kvlm_kv_free(r->dkv);
    kvlm_model_free(r->dm);
    kvlm_model_free(r->m);
    kvlm_tokenizer_free(r->tok);
}

#define MAXTOK 128

typedef struct out {
    int32_t ids[MAXTOK];
    float lp[MAXTOK];
    char text[4096];
    size_t len;
    int n, drafted, accepted;
    kvlm_finish why;
} out;

static void add_text(out *o, const char *t, size_t n) {
    if (o->len + n < sizeof o->text) {
        memcpy(o->text + o->len, t, n);
        o->len += n;
    }
}

static int on_token(void *user, const kvlm_token_event *ev) {
    out *o = user;
    if (o->n < MAXTOK) {
        o->lp[o->n] = ev->logprob;
        o->ids[o->n++] = ev->id;
    }
    add_text(o, ev->text, ev->text_len);
    return 0;
}

static void on_finish(void *user, const kvlm_finish_event *ev) {
    out *o = user;
    o->why = ev->reason;
    o->drafted = ev->n_drafted;
    o->accepted = ev->n_accepted;
    add_text(o, ev->text, ev->text_len);
}

/* logprobs: -1 (each token's) or 0 (none, a pass over the vocabulary fewer). */
static void generate(rig *r, const int32_t *prompt, int n_prompt, int max_tokens, const int32_t *eos, int n_eos,
                     const kvlm_grammar *g, kvlm_sampler_options so, kvlm_speculation sp, int logprobs, out *o) {
    memset(o, 0, sizeof *o);
    kvlm_request_params p = kvlm_request_default_params();
    p.prompt = prompt;
    p.n_prompt = n_prompt;
    p.max_tokens = max_tokens;
    p.logprobs = logprobs;
    p.eos_ids = eos;
    p.n_eos = n_eos;
    p.sampling = so;
    p.text = 1;
    p.tokenizer = r->tok;
    p.on_token = on_token;
    p.on_finish = on_finish;
    p.user = o;
    p.grammar = g;
    p.speculation = sp;
    kvlm_error err;
    if (kvlm_sched_submit(r->s, &p, &err) < 0) fail_msg("submit: %s", err.msg);
    while (kvlm_sched_has_work(r->s))
        if (kvlm_sched_step(r->s, &err) < 0) fail_msg("step: %s", err.msg);
}

static int encode(const rig *r, const char *text, int32_t *ids, int cap) {
    kvlm_error err;
    int32_t *got = NULL;
    size_t n = 0;
    assert_int_equal(kvlm_tokenizer_encode(r->tok, text, strlen(text), 0, &got, &n, &err), 0);
    assert_true(n > 0 && n <= (size_t)cap);
    memcpy(ids, got, n * sizeof *ids);
    free(got);
    return (int)n;
}

/* Greedy JSON Schema output: the same tokens with prompt lookup and with a
 * draft model as without speculation, for several prompts. */
static void test_greedy_identical(void **state) {
    (void)state;
    kvlm_error err;
    kvlm_grammar *g = kvlm_grammar_from_json_schema(SCHEMA, strlen(SCHEMA), &err);
    assert_non_null(g);
    const char *prompts[] = {"ROMEO:", "JULIET:", "KING HENRY VI:", "First Citizen:"};
    enum { NP = sizeof prompts / sizeof *prompts };
    kvlm_sampler_options so = kvlm_sampler_default_params();
    so.temperature = 0;
    rig plain = rig_open(0);
    int32_t eos[KVLM_MAX_EOS];
    const int n_eos = kvlm_eos_ids(plain.m, plain.tok, eos, KVLM_MAX_EOS);
    assert_true(n_eos >= 1);
    static out ref[NP];
    for (int i = 0; i < NP; i++) {
        int32_t ids[16];
        const int n = encode(&plain, prompts[i], ids, 16);
        generate(&plain, ids, n, 120, eos, n_eos, g, so, (kvlm_speculation){0}, -1, &ref[i]);
        /* a complete document, valid under the schema */
        if (ref[i].why != KVLM_FINISH_STOP || ref[i].n <= 20)
            fail_msg("%s: %d tokens, finish %d: %.*s", prompts[i], ref[i].n, ref[i].why, (int)ref[i].len, ref[i].text);
        assert_int_equal(ref[i].drafted, 0);
        if (kvlm_grammar_match(g, ref[i].text, ref[i].len, &err) != 1)
            fail_msg("%s: %.*s does not match", prompts[i], (int)ref[i].len, ref[i].text);
    }
    const struct {
        int model;
        kvlm_speculation sp;
    } cases[] = {
        {0, {KVLM_DRAFT_NGRAM, 4, 3, 1}},
        {0, {KVLM_DRAFT_NGRAM, 8, 1, 1}},
        {1, {KVLM_DRAFT_MODEL, 4, 0, 1}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        rig r = rig_open(cases[c].model);
        int drafted = 0, accepted = 0;
        for (int i = 0; i < NP; i++) {
            int32_t ids[16];
            const int n = encode(&r, prompts[i], ids, 16);
            static out o;
            generate(&r, ids, n, 120, eos, n_eos, g, so, cases[c].sp, -1, &o);
            assert_int_equal(o.n, ref[i].n);
            assert_memory_equal(o.ids, ref[i].ids, (size_t)o.n * sizeof *o.ids);
            for (int t = 0; t < o.n; t++) assert_float_equal(o.lp[t], ref[i].lp[t], 1e-4);
            assert_int_equal(o.why, KVLM_FINISH_STOP);
            assert_int_equal(o.len, ref[i].len);
            assert_memory_equal(o.text, ref[i].text, o.len);
            assert_int_equal(kvlm_grammar_match(g, o.text, o.len, &err), 1);
            drafted += o.drafted;
            accepted += o.accepted;
        }
        /* drafts were proposed, and some kept and some rejected: the
         * identity above covers both branches */
        if (!(drafted > 0 && accepted > 0 && accepted < drafted))
            fail_msg("case %zu: %d drafted, %d kept", c, drafted, accepted);
        kvlm_sched_stats st;
        kvlm_sched_get_stats(r.s, &st);
        assert_int_equal(st.drafted_tokens, (uint64_t)drafted);
        assert_int_equal(st.accepted_tokens, (uint64_t)accepted);
        rig_close(&r);
    }
    rig_close(&plain);
    kvlm_grammar_free(g);
}

/* The distribution the target chain draws the next token from after ctx
 * (n tokens, the first n_prompt the prompt): the model's logits masked at
 * the grammar state the generated tokens reach, then the sampler chain
 * with the whole context in its penalty history. */
static void masked_probs(rig *r, const kvlm_grammar *g, const gr_trie *trie, const kvlm_sampler_options *so,
                         const int32_t *ctx, int n_prompt, int n, float *p) {
    kvlm_error err;
    const int V = r->vocab;
    kvlm_kv *kv = kvlm_kv_create(r->m, &(kvlm_kv_options){.dtype = KVLM_F32, .max_seqs = 1}, &err);
    kvlm_engine *e = kvlm_engine_create(r->m, kv, &(kvlm_engine_options){.threads = 1}, &err);
    assert_non_null(e);
    const int seq = kvlm_kv_seq_new(kv, &err);
    float *logits = malloc((size_t)V * sizeof *logits), *masked = malloc((size_t)V * sizeof *masked);
    uint64_t *bits = malloc(((size_t)V + 63) / 64 * sizeof *bits);
    kvlm_batch_item it = {seq, ctx, n, 0};
    assert_int_equal(kvlm_engine_step(e, &it, 1, logits, &err), 0);
    gr_matcher *m = gr_matcher_new(g, &err);
    assert_non_null(m);
    for (int i = n_prompt; i < n; i++) {
        size_t len = 0;
        const char *piece = kvlm_tokenizer_piece(r->tok, ctx[i], &len);
        assert_int_equal(gr_matcher_advance(m, piece, len), 0);
    }
    assert_true(cst_mask_logits(m, trie, logits, masked, bits, V, NULL, 0, GR_NO_CLOSE) > 3);
    kvlm_sampler *s = kvlm_sampler_create(so, V, &err);
    kvlm_sampler_accept(s, ctx, n);
    smp_probs(s, masked, p);
    kvlm_sampler_free(s);
    gr_matcher_free(m);
    free(logits);
    free(masked);
    free(bits);
    kvlm_engine_free(e);
    kvlm_kv_free(kv);
}

/* The candidates of p (at most 3 with top_k 3), in id order. */
static int candidates(const float *p, int V, int32_t *ids) {
    int n = 0;
    for (int i = 0; i < V; i++)
        if (p[i] > 0) {
            assert_true(n < 3);
            ids[n++] = i;
        }
    assert_true(n >= 1);
    return n;
}

static int find(const int32_t *ids, int n, int32_t id) {
    for (int i = 0; i < n; i++)
        if (ids[i] == id) return i;
    return -1;
}

/* Three sampled tokens under a grammar with speculation against the exact
 * joint distribution of the masked target; at least 6 cells after pooling
 * those expected fewer than 5 times; drafts both kept and rejected. */
static void sampled_fit(int draft_model, kvlm_speculation sp, const int32_t *prompt, int n_prompt, const kvlm_grammar *g,
                        float penalty, int runs) {
    kvlm_sampler_options so = kvlm_sampler_default_params();
    so.temperature = 0.9f;
    so.top_k = 3;
    so.repetition_penalty = penalty; /* in p, not in the draft chain's q */
    rig r = rig_open(draft_model);
    const int V = r.vocab;
    kvlm_error err;
    gr_trie *trie = gr_trie_build(r.tok, &err);
    assert_non_null(trie);
    int32_t ctx[64];
    memcpy(ctx, prompt, (size_t)n_prompt * sizeof *ctx);
    float *p = malloc((size_t)V * sizeof *p);
    int32_t c1[3], c2[3][3], c3[3][3][3];
    double joint[3][3][3] = {{{0}}};
    masked_probs(&r, g, trie, &so, ctx, n_prompt, n_prompt, p);
    const int n1 = candidates(p, V, c1);
    double p1[3], p2[3][3];
    int n2[3], n3[3][3];
    for (int a = 0; a < n1; a++) p1[a] = p[c1[a]];
    for (int a = 0; a < n1; a++) {
        ctx[n_prompt] = c1[a];
        masked_probs(&r, g, trie, &so, ctx, n_prompt, n_prompt + 1, p);
        n2[a] = candidates(p, V, c2[a]);
        for (int b = 0; b < n2[a]; b++) p2[a][b] = p[c2[a][b]];
        for (int b = 0; b < n2[a]; b++) {
            ctx[n_prompt + 1] = c2[a][b];
            masked_probs(&r, g, trie, &so, ctx, n_prompt, n_prompt + 2, p);
            n3[a][b] = candidates(p, V, c3[a][b]);
            for (int c = 0; c < n3[a][b]; c++) joint[a][b][c] = p1[a] * p2[a][b] * p[c3[a][b][c]];
        }
    }
    static int count[3][3][3];
    memset(count, 0, sizeof count);
    int drafted = 0, accepted = 0;
    for (int run = 0; run < runs; run++) {
        so.seed = 1000 + (uint64_t)run;
        static out o;
        generate(&r, prompt, n_prompt, 3, NULL, 0, g, so, sp, 0, &o);
        assert_int_equal(o.n, 3);
        drafted += o.drafted;
        accepted += o.accepted;
        const int a = find(c1, n1, o.ids[0]), b = a < 0 ? -1 : find(c2[a], n2[a], o.ids[1]);
        const int c = b < 0 ? -1 : find(c3[a][b], n3[a][b], o.ids[2]);
        if (c < 0)
            fail_msg("run %d drew %d %d %d, outside the masked target's candidates", run, o.ids[0], o.ids[1], o.ids[2]);
        count[a][b][c]++;
    }
    double chi2 = 0, pool_e = 0, pool_o = 0;
    int cells = 0;
    for (int a = 0; a < n1; a++)
        for (int b = 0; b < n2[a]; b++)
            for (int c = 0; c < n3[a][b]; c++) {
                const double e = joint[a][b][c] * runs;
                if (e < 5) {
                    pool_e += e;
                    pool_o += count[a][b][c];
                    continue;
                }
                chi2 += (count[a][b][c] - e) * (count[a][b][c] - e) / e;
                cells++;
            }
    if (pool_e > 0) {
        chi2 += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        cells++;
    }
    assert_true(cells >= 6);
    if (chi2 > th_chi2_critical(cells - 1))
        fail_msg("chi-square %.2f > %.2f (%d cells)", chi2, th_chi2_critical(cells - 1), cells);
    if (!(drafted > 0 && accepted > 0 && accepted < drafted)) fail_msg("%d drafted, %d kept", drafted, accepted);
    free(p);
    gr_trie_free(trie);
    rig_close(&r);
}

/* Words of lower-case letters after single spaces: the first token may not
 * begin with a space, later ones may, so the mask depends on the tokens
 * before it (kept drafts included). */
static const char WORDS[] = "[a-z]+( [a-z]+)*";

static void test_sampled_distribution_model(void **state) {
    (void)state;
    kvlm_error err;
    kvlm_grammar *g = kvlm_grammar_from_regex(WORDS, strlen(WORDS), &err);
    assert_non_null(g);
    rig r = rig_open(0);
    int32_t prompt[16];
    const int n = encode(&r, "ROMEO:\nI will", prompt, 16);
    rig_close(&r);
    sampled_fit(1, (kvlm_speculation){KVLM_DRAFT_MODEL, 2, 0, 1}, prompt, n, g, 1.3f, 2000);
    kvlm_grammar_free(g);
}

static void test_sampled_distribution_ngram(void **state) {
    (void)state;
    kvlm_error err;
    kvlm_grammar *g = kvlm_grammar_from_regex(WORDS, strlen(WORDS), &err);
    assert_non_null(g);
    /* a prompt that holds its own greedy continuation under the grammar, so
     * the tokens the target draws next have occurred before and a unigram
     * lookup drafts */
    rig r = rig_open(0);
    int32_t prompt[40];
    int n = encode(&r, "ROMEO:\nI will", prompt, 16);
    kvlm_sampler_options so = kvlm_sampler_default_params();
    so.temperature = 0;
    out o;
    generate(&r, prompt, n, 12, NULL, 0, g, so, (kvlm_speculation){0}, 0, &o);
    assert_int_equal(o.n, 12);
    rig_close(&r);
    memcpy(prompt + n, o.ids, 12 * sizeof *prompt);
    sampled_fit(0, (kvlm_speculation){KVLM_DRAFT_NGRAM, 2, 1, 1}, prompt, n + 12, g, 1.0f, 2000);
    kvlm_grammar_free(g);
}

/* kvlm run: the same text with --draft-ngram 3 as without, drafts kept
 * and rejected, a complete document valid under the schema. */
static void test_cli(void **state) {
    (void)state;
    char *dir = th_tempdir();
    assert_non_null(dir);
    char path[512];
    snprintf(path, sizeof path, "%s/lines.json", dir);
    assert_int_equal(th_write_file(path, SCHEMA, strlen(SCHEMA)), 0);
    kvlm_error err;
    kvlm_grammar *g = kvlm_grammar_from_json_schema(SCHEMA, strlen(SCHEMA), &err);
    assert_non_null(g);
    char *text[2] = {NULL, NULL};
    for (int spec = 0; spec < 2; spec++) {
        char *res = NULL;
        assert_int_equal(th_run_kvlm(&res, "run -m " SHAKES " -p ROMEO: --json-schema %s --temp 0 --json%s", path,
                                     spec ? " --draft-ngram 3 --draft-fixed" : ""),
                         0);
        json_error_t jerr;
        json_t *doc = json_loads(res, 0, &jerr);
        if (!doc) fail_msg("not JSON: %s", res);
        assert_string_equal(json_string_value(json_object_get(doc, "finish_reason")), "stop");
        text[spec] = strdup(json_string_value(json_object_get(doc, "text")));
        const json_int_t d = json_integer_value(json_object_get(json_object_get(doc, "stats"), "drafted_tokens"));
        const json_int_t a = json_integer_value(json_object_get(json_object_get(doc, "stats"), "accepted_tokens"));
        if (spec) {
            if (!(d > 0 && a > 0 && a < d)) fail_msg("%lld drafted, %lld kept", (long long)d, (long long)a);
        } else {
            assert_int_equal(d, 0);
        }
        json_decref(doc);
        free(res);
    }
    assert_string_equal(text[0], text[1]);
    assert_int_equal(kvlm_grammar_match(g, text[0], strlen(text[0]), &err), 1);
    assert_non_null(strstr(text[0], "\"lines\""));
    free(text[0]);
    free(text[1]);
    kvlm_grammar_free(g);
    th_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_identical),
        cmocka_unit_test(test_sampled_distribution_model),
        cmocka_unit_test(test_sampled_distribution_ngram),
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
