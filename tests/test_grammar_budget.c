/*
 * Structured output that closes within max_tokens, on the shipped GPT-2
 * (models/shakespeare-gpt2, which knows nothing of JSON and never closes a
 * string on its own):
 * - every one of json_object, a JSON Schema, a GBNF grammar and a regular
 *   expression, sampled at temperature 0.9 with budgets just above the
 *   shortest output (and json_object at max_tokens 100, where unlimited
 *   masking gave 0 of 4 parsing outputs), writes a sentence of its grammar
 *   in 8 of 8 seeds, with and without prompt-lookup speculation;
 * - the budget changes nothing until it binds: with the same seed, the
 *   tokens are those of a run with room to spare up to the first token
 *   that would have left the output unable to close, and that token's
 *   closing distance is checked to be over the tokens left;
 * - greedy decoding with speculation writes the same tokens as without;
 * - a max_tokens below the shortest output is refused at submission with
 *   KVLM_ERR_ARG naming both numbers, and kvlm run exits 2 saying so.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "helpers.h"

#define GPT2 "models/shakespeare-gpt2"
#define SEEDS 8

typedef struct out_ids {
    int32_t ids[256];
    int n;
    char text[4096];
    size_t len;
    kvlm_finish finish;
} out_ids;

static int on_token(void *user, const kvlm_token_event *ev) {
    out_ids *o = user;
    if (o->n < 256) o->ids[o->n++] = ev->id;
    if (o->len + ev->text_len < sizeof o->text) {
        memcpy(o->text + o->len, ev->text, ev->text_len);
        o->len += ev->text_len;
    }
    return 0;
}

static void on_finish(void *user, const kvlm_finish_event *ev) {
    out_ids *o = user;
    if (o->len + ev->text_len < sizeof o->text) {
        memcpy(o->text + o->len, ev->text, ev->text_len);
        o->len += ev->text_len;
    }
    o->text[o->len] = 0;
    o->finish = ev->reason;
}

typedef struct fixture {
    kvlm_model *m;
    kvlm_tokenizer *tok;
    kvlm_kv *kv;
    kvlm_engine *e;
    kvlm_sched *s;
    int32_t eos[KVLM_MAX_EOS];
    int n_eos;
    int32_t *prompt;
    size_t n_prompt;
} fixture;

static void fixture_open(fixture *f) {
    kvlm_error err;
    memset(f, 0, sizeof *f);
    f->m = kvlm_model_load(GPT2, NULL, &err);
    if (!f->m) fail_msg("%s", err.msg);
    f->tok = kvlm_tokenizer_load(kvlm_model_tokenizer_path(f->m), &err);
    if (!f->tok) fail_msg("%s", err.msg);
    kvlm_kv_options ko = kvlm_kv_default_params();
    ko.dtype = KVLM_F32;
    ko.max_seqs = SEEDS;
    kvlm_engine_options eo = kvlm_engine_default_params();
    eo.threads = 2;
    f->kv = kvlm_kv_create(f->m, &ko, &err);
    f->e = f->kv ? kvlm_engine_create(f->m, f->kv, &eo, &err) : NULL;
    if (!f->e) fail_msg("%s", err.msg);
    f->s = kvlm_sched_create(f->e, f->kv, kvlm_model_config(f->m)->vocab_size, NULL, &err);
    if (!f->s) fail_msg("%s", err.msg);
    f->n_eos = kvlm_eos_ids(f->m, f->tok, f->eos, KVLM_MAX_EOS);
    const char *p = "ROMEO:";
    assert_int_equal(kvlm_tokenizer_encode(f->tok, p, strlen(p), 0, &f->prompt, &f->n_prompt, &err), 0);
}

static void fixture_close(fixture *f) {
    free(f->prompt);
    kvlm_sched_free(f->s);
    kvlm_engine_free(f->e);
    kvlm_kv_free(f->kv);
    kvlm_tokenizer_free(f->tok);
    kvlm_model_free(f->m);
}

static int64_t submit(fixture *f, const kvlm_grammar *g, float temp, uint64_t seed, int max_tokens,
                      kvlm_speculation sp, out_ids *o, kvlm_error *err) {
    memset(o, 0, sizeof *o);
    kvlm_request_params p = kvlm_request_default_params();
    p.prompt = f->prompt;
    p.n_prompt = (int)f->n_prompt;
    p.max_tokens = max_tokens;
    p.eos_ids = f->eos;
    p.n_eos = f->n_eos;
    p.sampling.temperature = temp;
    p.sampling.seed = seed;
    p.text = 1;
    p.tokenizer = f->tok;
    p.on_token = on_token;
    p.on_finish = on_finish;
    p.user = o;
    p.grammar = g;
    p.speculation = sp;
    return kvlm_sched_submit(f->s, &p, err);
}

static void run(fixture *f) {
    kvlm_error err;
    while (kvlm_sched_has_work(f->s))
        if (kvlm_sched_step(f->s, &err) < 0) fail_msg("%s", err.msg);
}

/* The shortest output of g in bytes (its start state's closing distance). */
static int min_close(const kvlm_grammar *g) {
    kvlm_error err;
    gr_matcher *m = gr_matcher_new(g, &err);
    assert_non_null(m);
    const int d = gr_matcher_min_close(m);
    gr_matcher_free(m);
    return d;
}

typedef struct format {
    const char *name;
    kvlm_grammar *g;
    int min;  /* the shortest output, asserted */
} format;

static const char *SCHEMA = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"minLength\":3},"
                            "\"age\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}},"
                            "\"required\":[\"name\",\"age\",\"tags\"]}";
static const char *GBNF = "root ::= list\nlist ::= \"(\" item (\" \" item)* \")\"\nitem ::= [a-z]+ | list\n";
static const char *REGEX = "[A-Z][a-z]+(, [a-z]+)* \\(([0-9]{2,4}|n/a)\\)";

static void formats_open(format fm[4]) {
    kvlm_error err;
    fm[0] = (format){"json_object", kvlm_grammar_json_object(&err), 2};
    fm[1] = (format){"json_schema", kvlm_grammar_from_json_schema(SCHEMA, strlen(SCHEMA), &err), 0};
    fm[2] = (format){"gbnf", kvlm_grammar_from_gbnf(GBNF, strlen(GBNF), &err), 3};
    fm[3] = (format){"regex", kvlm_grammar_from_regex(REGEX, strlen(REGEX), &err), 7};
    for (int i = 0; i < 4; i++)
        if (!fm[i].g) fail_msg("%s: %s", fm[i].name, err.msg);
    /* {"name":"abc","age":0,"tags":[]} */
    fm[1].min = (int)strlen("{\"name\":\"abc\",\"age\":0,\"tags\":[]}");
    for (int i = 0; i < 4; i++) assert_int_equal(min_close(fm[i].g), fm[i].min);
}

static void formats_close(format fm[4]) {
    for (int i = 0; i < 4; i++) kvlm_grammar_free(fm[i].g);
}

/* SEEDS sampled outputs of g with max_tokens `budget`; returns how many
 * are sentences of g, every output within the budget. */
static int sentences(fixture *f, const kvlm_grammar *g, int budget, kvlm_speculation sp) {
    static out_ids o[SEEDS];
    kvlm_error err;
    for (int s = 0; s < SEEDS; s++)
        if (submit(f, g, 0.9f, 1000 + (uint64_t)s, budget, sp, &o[s], &err) < 0) fail_msg("%s", err.msg);
    run(f);
    int ok = 0;
    for (int s = 0; s < SEEDS; s++) {
        assert_true(o[s].n <= budget);
        assert_true(o[s].finish == KVLM_FINISH_STOP || o[s].finish == KVLM_FINISH_LENGTH);
        const int m = kvlm_grammar_match(g, o[s].text, o[s].len, &err);
        if (m != 1) print_message("budget %d seed %d: not a sentence: %s\n", budget, s, o[s].text);
        ok += m == 1;
    }
    return ok;
}

static void test_closes_sampled(void **st) {
    (void)st;
    fixture f;
    fixture_open(&f);
    format fm[4];
    formats_open(fm);
    const kvlm_speculation none = kvlm_speculation_default_params();
    kvlm_speculation ngram = none;
    ngram.mode = KVLM_DRAFT_NGRAM;
    ngram.fixed = 1;
    for (int i = 0; i < 4; i++)
        for (int extra = 0; extra <= 6; extra += 3) {
            const int budget = fm[i].min + extra;
            const int a = sentences(&f, fm[i].g, budget, none), b = sentences(&f, fm[i].g, budget, ngram);
            print_message("%-11s max_tokens %3d: %d/%d sentences, %d/%d with speculation\n", fm[i].name, budget, a,
                          SEEDS, b, SEEDS);
            assert_int_equal(a, SEEDS);
            assert_int_equal(b, SEEDS);
        }
    /* the case of the report: json_object at max_tokens 100 */
    assert_int_equal(sentences(&f, fm[0].g, 100, none), SEEDS);
    formats_close(fm);
    fixture_close(&f);
}

/* The closing distance after the first n tokens of ids. */
static int close_after(const fixture *f, const kvlm_grammar *g, const int32_t *ids, int n) {
    kvlm_error err;
    gr_matcher *m = gr_matcher_new(g, &err);
    assert_non_null(m);
    for (int i = 0; i < n; i++) {
        int eos = 0;
        for (int e = 0; e < f->n_eos; e++) eos |= ids[i] == f->eos[e];
        if (eos) { /* allowed only where the output is complete */
            assert_true(gr_matcher_accepting(m));
            continue;
        }
        size_t len = 0;
        const char *p = kvlm_tokenizer_piece(f->tok, ids[i], &len);
        assert_int_equal(gr_matcher_advance(m, p, len), 0);
    }
    const int d = gr_matcher_min_close(m);
    gr_matcher_free(m);
    return d;
}

static void test_exact_until_binding(void **st) {
    (void)st;
    fixture f;
    fixture_open(&f);
    format fm[4];
    formats_open(fm);
    const int room = kvlm_model_config(f.m)->n_ctx - (int)f.n_prompt;
    const kvlm_speculation none = kvlm_speculation_default_params();
    int diverged = 0;
    for (int i = 0; i < 4; i++)
        for (int s = 0; s < 4; s++) {
            const int budget = fm[i].min + 12;
            out_ids wide, tight;
            kvlm_error err;
            if (submit(&f, fm[i].g, 0.9f, 77 + (uint64_t)s, room, none, &wide, &err) < 0 ||
                submit(&f, fm[i].g, 0.9f, 77 + (uint64_t)s, budget, none, &tight, &err) < 0)
                fail_msg("%s", err.msg);
            run(&f);
            int k = 0;
            while (k < tight.n && k < wide.n && tight.ids[k] == wide.ids[k]) k++;
            /* up to k the budget left room after every token ... */
            for (int j = 1; j <= k; j++) assert_true(close_after(&f, fm[i].g, wide.ids, j) <= budget - j);
            if (k < tight.n) {
                /* ... and the wide run's next token would have stranded the output */
                assert_true(k < wide.n);
                assert_true(close_after(&f, fm[i].g, wide.ids, k + 1) > budget - k - 1);
                diverged++;
            } else {
                assert_int_equal(tight.n, wide.n); /* closed on its own within the budget */
            }
            assert_int_equal(kvlm_grammar_match(fm[i].g, tight.text, tight.len, &err), 1);
        }
    assert_true(diverged >= 8); /* the budget did bind, in most runs */
    formats_close(fm);
    fixture_close(&f);
}

static void test_greedy_speculation_same(void **st) {
    (void)st;
    fixture f;
    fixture_open(&f);
    format fm[4];
    formats_open(fm);
    kvlm_speculation ngram = kvlm_speculation_default_params();
    ngram.mode = KVLM_DRAFT_NGRAM;
    ngram.fixed = 1;
    for (int i = 0; i < 4; i++) {
        out_ids a, b;
        kvlm_error err;
        const int budget = fm[i].min + 5;
        if (submit(&f, fm[i].g, 0.0f, 1, budget, kvlm_speculation_default_params(), &a, &err) < 0 ||
            submit(&f, fm[i].g, 0.0f, 1, budget, ngram, &b, &err) < 0)
            fail_msg("%s", err.msg);
        run(&f);
        assert_int_equal(a.n, b.n);
        assert_memory_equal(a.ids, b.ids, (size_t)a.n * sizeof a.ids[0]);
        assert_int_equal(kvlm_grammar_match(fm[i].g, a.text, a.len, &err), 1);
    }
    formats_close(fm);
    fixture_close(&f);
}

static void test_refused(void **st) {
    (void)st;
    fixture f;
    fixture_open(&f);
    format fm[4];
    formats_open(fm);
    out_ids o;
    kvlm_error err;
    assert_int_equal(submit(&f, fm[1].g, 0.9f, 1, fm[1].min - 1, kvlm_speculation_default_params(), &o, &err),
                     KVLM_ERR_ARG);
    char want[160];
    snprintf(want, sizeof want, "max_tokens %d is below the shortest output the grammar accepts: %d bytes", fm[1].min - 1,
             fm[1].min);
    if (!strstr(err.msg, want)) fail_msg("message: %s", err.msg);
    assert_true(submit(&f, fm[1].g, 0.9f, 1, fm[1].min, kvlm_speculation_default_params(), &o, &err) >= 0);
    run(&f);
    assert_int_equal(kvlm_grammar_match(fm[1].g, o.text, o.len, &err), 1);
    formats_close(fm);
    fixture_close(&f);

    char *dir = th_tempdir();
    char schema[1024], args[2048];
    snprintf(schema, sizeof schema, "%s/s.json", dir);
    assert_int_equal(th_write_file(schema, SCHEMA, strlen(SCHEMA)), 0);
    snprintf(args, sizeof args, "run -m %s -p ROMEO: -n 20 --json-schema %s 2>&1", GPT2, schema);
    const th_cli_case cases[] = {{args, 2, "max_tokens 20 is below the shortest output the grammar accepts: 32 bytes"}};
    th_expect_cli(cases, 1);
    th_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_greedy_speculation_same),
        cmocka_unit_test(test_exact_until_binding),
        cmocka_unit_test(test_closes_sampled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
