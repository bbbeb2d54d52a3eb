/*
 * Constrained generation on the shipped GPT-2 (models/shakespeare-gpt2, a
 * model that knows nothing of JSON): random JSON Schemas x seeds, sampled
 * at temperature 0.9 through the scheduler, every output written with its
 * schema to a temporary file and checked by an independent validator
 * (tools/validate_json_outputs.py: Python's json and jsonschema). The test
 * fails if any output does not parse or validate, or if any generation
 * ended for a reason other than its end-of-sequence token (the schemas are
 * small enough for the model's 128-token window).
 *
 * Also: greedy and sampled generations whose max_tokens binds close the
 * document within it (tests/test_grammar_budget.c has the rest); logprobs
 * are the model's own (unmasked); the mask costs nothing when a request
 * has no grammar (the same tokens as before for the same seed).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "helpers.h"

#define GPT2 "models/shakespeare-gpt2"
#define N_SCHEMAS 100
#define N_SEEDS 5
#define BATCH 25

typedef struct out_text {
    char buf[4096];
    size_t n;
    int overflow;
    kvlm_finish finish;
    int n_tokens;
    float lp_first;
} out_text;

static int on_token(void *user, const kvlm_token_event *ev) {
    out_text *o = user;
    if (o->n + ev->text_len >= sizeof o->buf) o->overflow = 1;
    else {
        memcpy(o->buf + o->n, ev->text, ev->text_len);
        o->n += ev->text_len;
    }
    if (o->n_tokens++ == 0) o->lp_first = ev->logprob;
    return 0;
}

static void on_finish(void *user, const kvlm_finish_event *ev) {
    out_text *o = user;
    if (o->n + ev->text_len < sizeof o->buf) {
        memcpy(o->buf + o->n, ev->text, ev->text_len);
        o->n += ev->text_len;
    }
    o->buf[o->n] = 0;
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
    ko.max_seqs = BATCH;
    kvlm_engine_options eo = kvlm_engine_default_params();
    eo.threads = 2;
    f->kv = kvlm_kv_create(f->m, &ko, &err);
    f->e = f->kv ? kvlm_engine_create(f->m, f->kv, &eo, &err) : NULL;
    if (!f->e) fail_msg("%s", err.msg);
    f->s = kvlm_sched_create(f->e, f->kv, kvlm_model_config(f->m)->vocab_size, NULL, &err);
    if (!f->s) fail_msg("%s", err.msg);
    f->n_eos = kvlm_eos_ids(f->m, f->tok, f->eos, KVLM_MAX_EOS);
    assert_true(f->n_eos >= 1);
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

static void submit(fixture *f, const kvlm_grammar *g, kvlm_sampler_options so, int max_tokens, int logprobs,
                   out_text *o) {
    kvlm_error err;
    memset(o, 0, sizeof *o);
    kvlm_request_params p = kvlm_request_default_params();
    p.prompt = f->prompt;
    p.n_prompt = (int)f->n_prompt;
    p.max_tokens = max_tokens;
    p.eos_ids = f->eos;
    p.n_eos = f->n_eos;
    p.logprobs = logprobs;
    p.sampling = so;
    p.text = 1;
    p.tokenizer = f->tok;
    p.on_token = on_token;
    p.on_finish = on_finish;
    p.user = o;
    p.grammar = g;
    if (kvlm_sched_submit(f->s, &p, &err) < 0) fail_msg("%s", err.msg);
}

static void run(fixture *f) {
    kvlm_error err;
    while (kvlm_sched_has_work(f->s))
        if (kvlm_sched_step(f->s, &err) < 0) fail_msg("%s", err.msg);
}

/* ----------------------------------------------------- random schemas */

static uint64_t rng_next(uint64_t *s) {
    *s += 0x9E3779B97F4A7C15ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static int rnd(uint64_t *s, int n) { return (int)(rng_next(s) % (uint64_t)n); }

static json_t *scalar_schema(uint64_t *r) {
    static const char *const words[] = {"a", "yes", "no", "caf\xc3\xa9", "\xe6\x97\xa5\xe6\x9c\xac", "q\"t", "x\\y",
                                        "two words", "\xf0\x9f\x98\x80", ""};
    static const char *const patterns[] = {"^[a-z]{1,5}$", "^\\d{3}-\\d{2}$", "^(yes|no|maybe)$", "^[A-Z][a-z]{0,4}$",
                                           "^[^,;]{1,4}$", "^(ab?c|x)$"};
    static const char *const formats[] = {"date", "time", "date-time", "uuid"};
    switch (rnd(r, 11)) {
    case 0: {
        int lo = rnd(r, 3);
        return json_pack("{s:s,s:i,s:i}", "type", "string", "minLength", lo, "maxLength", lo + rnd(r, 8));
    }
    case 1: {
        json_t *e = json_array();
        int n = 1 + rnd(r, 4);
        for (int i = 0; i < n; i++) json_array_append_new(e, json_string(words[rnd(r, 10)]));
        return json_pack("{s:o}", "enum", e);
    }
    case 2: return json_pack("{s:s,s:s}", "type", "string", "format", formats[rnd(r, 4)]);
    case 3: return json_pack("{s:s,s:s}", "type", "string", "pattern", patterns[rnd(r, 6)]);
    case 4: {
        if (rnd(r, 4) == 0) return json_pack("{s:s}", "type", "integer");
        int lo = rnd(r, 2000) - 1000;
        return json_pack("{s:s,s:i,s:i}", "type", "integer", "minimum", lo, "maximum", lo + rnd(r, 3000));
    }
    case 5: {
        if (rnd(r, 3) == 0) return json_pack("{s:s}", "type", "number");
        double lo = (rnd(r, 2000) - 1000) / 4.0;
        if (rnd(r, 2)) return json_pack("{s:s,s:f,s:f}", "type", "number", "minimum", lo, "maximum", lo + rnd(r, 500) / 3.0 + 1);
        return json_pack("{s:s,s:f,s:f}", "type", "number", "exclusiveMinimum", lo, "exclusiveMaximum", lo + rnd(r, 50) + 1.5);
    }
    case 6: return json_pack("{s:s}", "type", "boolean");
    case 7: return json_pack("{s:[s,s]}", "type", "integer", "null");
    case 8: return json_pack("{s:[{s:s},{s:s,s:i}]}", "oneOf", "type", "boolean", "type", "string", "maxLength", 3);
    case 9: return json_pack("{s:[{s:i},{s:s}]}", "anyOf", "const", rnd(r, 100), "type", "null");
    default: return json_pack("{s:{s:[i,s]}}", "const", "k", 1, "v\xc3\xa9");
    }
}

static json_t *any_schema(uint64_t *r, int depth);

static json_t *object_schema(uint64_t *r, int depth) {
    json_t *props = json_object(), *req = json_array();
    int n = 1 + rnd(r, 3);
    static const char *const names[] = {"name", "age", "id", "tags", "k\xc3\xa9y", "a b", "q\"", "x"};
    for (int i = 0; i < n; i++) {
        const char *name = names[rnd(r, 8)];
        if (json_object_get(props, name)) continue;
        json_object_set_new(props, name, any_schema(r, depth + 1));
        if (rnd(r, 2)) json_array_append_new(req, json_string(name));
    }
    json_t *o = json_pack("{s:s,s:o,s:o}", "type", "object", "properties", props, "required", req);
    if (rnd(r, 2)) json_object_set_new(o, "additionalProperties", json_false());
    return o;
}

static json_t *any_schema(uint64_t *r, int depth) {
    int k = depth >= 2 ? 0 : rnd(r, 4);
    if (k == 1) return object_schema(r, depth);
    if (k == 2) {
        int lo = rnd(r, 2);
        return json_pack("{s:s,s:o,s:i,s:i}", "type", "array", "items", any_schema(r, depth + 1), "minItems", lo,
                         "maxItems", lo + 1 + rnd(r, 2));
    }
    return scalar_schema(r);
}

static json_t *random_schema(uint64_t *r) {
    switch (rnd(r, 5)) {
    case 0: /* a definition reached by $ref */
        return json_pack("{s:{s:o},s:s,s:{s:{s:s}},s:[s]}", "$defs", "item", object_schema(r, 1), "type", "object",
                         "properties", "item", "$ref", "#/$defs/item", "required", "item");
    case 1: return any_schema(r, 1);
    default: return object_schema(r, 0);
    }
}

static void test_random_schemas_validate(void **st) {
    (void)st;
    fixture f;
    fixture_open(&f);
    char *dir = th_tempdir();
    char path[1024];
    snprintf(path, sizeof path, "%s/cases.jsonl", dir);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    uint64_t r = 20261202;
    const int max_tokens = kvlm_model_config(f.m)->n_ctx - (int)f.n_prompt;
    int n_cases = 0, not_stop = 0;
    static out_text outs[BATCH];
    json_t *schemas[BATCH];
    kvlm_grammar *grammars[BATCH];
    int pending = 0;
    for (int i = 0; i < N_SCHEMAS; i++) {
        json_t *sc = random_schema(&r);
        char *text = json_dumps(sc, JSON_COMPACT);
        kvlm_error err;
        kvlm_grammar *g = kvlm_grammar_from_json_schema(text, strlen(text), &err);
        if (!g) fail_msg("schema %s: %s", text, err.msg);
        free(text);
        for (int seed = 0; seed < N_SEEDS; seed++) {
            kvlm_sampler_options so = kvlm_sampler_default_params();
            so.temperature = 0.9f;
            so.seed = (uint64_t)(i * 100 + seed);
            schemas[pending] = json_incref(sc);
            grammars[pending] = seed == 0 ? g : NULL; /* freed once, after its batch */
            submit(&f, g, so, max_tokens, 0, &outs[pending]);
            if (++pending == BATCH || (i == N_SCHEMAS - 1 && seed == N_SEEDS - 1)) {
                run(&f);
                for (int k = 0; k < pending; k++) {
                    json_t *line = json_object();
                    json_t *s = json_stringn(outs[k].buf, outs[k].n);
                    if (!s) fail_msg("output is not UTF-8: %s", outs[k].buf);
                    json_object_set_new(line, "output", s);
                    json_object_set(line, "schema", schemas[k]);
                    json_object_set_new(line, "id", json_integer(n_cases));
                    char *l = json_dumps(line, JSON_COMPACT);
                    fprintf(fp, "%s\n", l);
                    free(l);
                    json_decref(line);
                    if (outs[k].finish != KVLM_FINISH_STOP || outs[k].overflow) {
                        not_stop++;
                        print_message("case %d ended with %d after %d tokens: %s\n", n_cases, outs[k].finish,
                                      outs[k].n_tokens, outs[k].buf);
                    }
                    json_decref(schemas[k]);
                    kvlm_grammar_free(grammars[k]);
                    n_cases++;
                }
                pending = 0;
            }
        }
        json_decref(sc);
    }
    fclose(fp);
    assert_int_equal(n_cases, N_SCHEMAS * N_SEEDS);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tools/validate_json_outputs.py %s", path);
    int rc = system(cmd);
    assert_int_equal(rc, 0);
    assert_int_equal(not_stop, 0);
    th_rmtree(dir);
    free(dir);
    fixture_close(&f);
}

/* A max_tokens that binds (a string of at least 40 characters, 51 bytes
 * of shortest output, in 55 tokens): the document is closed by the last
 * token, a sentence; below 51 the request is refused. Greedy and sampled. */
static void test_max_tokens_binds(void **st) {
    (void)st;
    fixture f;
    fixture_open(&f);
    const char *sc = "{\"type\":\"object\",\"properties\":{\"text\":{\"type\":\"string\",\"minLength\":40}},"
                     "\"required\":[\"text\"]}";
    kvlm_error err;
    kvlm_grammar *g = kvlm_grammar_from_json_schema(sc, strlen(sc), &err);
    assert_non_null(g);
    for (int sampled = 0; sampled < 2; sampled++) {
        kvlm_sampler_options so = kvlm_sampler_default_params();
        so.temperature = sampled ? 0.9f : 0.0f;
        out_text o;
        submit(&f, g, so, 55, -1, &o);
        run(&f);
        assert_true(o.finish == KVLM_FINISH_LENGTH || o.finish == KVLM_FINISH_STOP);
        assert_true(o.n_tokens <= 55);
        assert_int_equal(kvlm_grammar_match(g, o.buf, o.n, &err), 1);
        /* the logprob reported is the model's own: the same as unconstrained for the first token's
         * distribution (a masked row would make the forced "{" certain, logprob 0) */
        assert_true(o.lp_first < -0.01f);
    }
    kvlm_request_params p = kvlm_request_default_params();
    p.prompt = f.prompt;
    p.n_prompt = (int)f.n_prompt;
    p.max_tokens = 50;
    p.tokenizer = f.tok;
    p.grammar = g;
    assert_int_equal(kvlm_sched_submit(f.s, &p, &err), KVLM_ERR_ARG);
    assert_non_null(strstr(err.msg, "max_tokens 50 is below the shortest output the grammar accepts: 51 bytes"));
    kvlm_grammar_free(g);
    fixture_close(&f);
}

/* A grammar changes nothing for the other requests of the batch, and a
 * request without one draws what it always drew. */
static void test_unconstrained_unchanged(void **st) {
    (void)st;
    fixture f;
    fixture_open(&f);
    kvlm_sampler_options so = kvlm_sampler_default_params();
    so.temperature = 0.8f;
    so.seed = 7;
    out_text a, b, c;
    submit(&f, NULL, so, 20, 0, &a);
    run(&f);
    kvlm_error err;
    kvlm_grammar *g = kvlm_grammar_from_regex("[a-z ]+", 7, &err);
    submit(&f, g, so, 20, 0, &c);
    submit(&f, NULL, so, 20, 0, &b);
    run(&f);
    assert_int_equal(a.n, b.n);
    assert_memory_equal(a.buf, b.buf, a.n);
    for (size_t i = 0; i < c.n; i++) assert_true((c.buf[i] >= 'a' && c.buf[i] <= 'z') || c.buf[i] == ' ');
    kvlm_grammar_free(g);
    fixture_close(&f);
}

/* kvlm run --json-schema / --grammar / --regex: the text printed is a
 * sentence of the grammar; bad grammars and flag clashes are usage errors
 * naming what is wrong. */
static void test_cli(void **st) {
    (void)st;
    char *dir = th_tempdir();
    char schema[1024], gbnf[1024], bad[1024];
    snprintf(schema, sizeof schema, "%s/s.json", dir);
    snprintf(gbnf, sizeof gbnf, "%s/g.gbnf", dir);
    snprintf(bad, sizeof bad, "%s/bad.json", dir);
    const char *sc = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":8},"
                     "\"n\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":9}},\"required\":[\"name\",\"n\"]}";
    const char *gr = "root ::= word (\" \" word){2}\nword ::= [a-z]{1,6}\n";
    const char *bd = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"format\":\"email\"}}}";
    assert_int_equal(th_write_file(schema, sc, strlen(sc)), 0);
    assert_int_equal(th_write_file(gbnf, gr, strlen(gr)), 0);
    assert_int_equal(th_write_file(bad, bd, strlen(bd)), 0);
    kvlm_error err;
    const struct {
        const char *flag, *arg, *src;
        int gbnf;
    } runs[] = {{"--json-schema", schema, sc, 0}, {"--grammar", gbnf, gr, 1}, {"--regex", "'[A-Z][a-z]{2,5}!'", NULL, 2}};
    for (int i = 0; i < 3; i++) {
        char *out = NULL;
        int rc = th_run_kvlm(&out, "run -m %s -p ROMEO: -n 100 --temp 0.9 --seed 5 %s %s --json 2>/dev/null", GPT2,
                             runs[i].flag, runs[i].arg);
        assert_int_equal(rc, 0);
        json_t *doc = json_loads(out, 0, NULL);
        if (!doc) fail_msg("not JSON: %s", out);
        const char *text = json_string_value(json_object_get(doc, "text"));
        assert_string_equal(json_string_value(json_object_get(doc, "finish_reason")), "stop");
        kvlm_grammar *g = runs[i].gbnf == 0 ? kvlm_grammar_from_json_schema(runs[i].src, strlen(runs[i].src), &err)
                          : runs[i].gbnf == 1 ? kvlm_grammar_from_gbnf(runs[i].src, strlen(runs[i].src), &err)
                                              : kvlm_grammar_from_regex("[A-Z][a-z]{2,5}!", 16, &err);
        assert_non_null(g);
        if (kvlm_grammar_match(g, text, strlen(text), &err) != 1) fail_msg("%s: not a sentence: %s", runs[i].flag, text);
        kvlm_grammar_free(g);
        json_decref(doc);
        free(out);
    }
    char args[4][2048];
    snprintf(args[0], sizeof args[0], "run -m %s -p x --json-schema %s 2>&1", GPT2, bad);
    snprintf(args[1], sizeof args[1], "run -m %s -p x --grammar %s --regex a 2>&1", GPT2, gbnf);
    snprintf(args[2], sizeof args[2], "run -m %s -p x --regex '(a' 2>&1", GPT2);
    snprintf(args[3], sizeof args[3], "run -m %s -p x --grammar %s/missing.gbnf 2>&1", GPT2, dir);
    const th_cli_case cases[] = {
        {args[0], 2, "unsupported format \"email\" at /properties/a"},
        {args[1], 2, "exclude each other"},
        {args[2], 2, "regex: group is not closed"},
        {args[3], 2, "missing.gbnf"},
    };
    th_expect_cli(cases, 4);
    th_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_max_tokens_binds),
        cmocka_unit_test(test_unconstrained_unchanged),
        cmocka_unit_test(test_random_schemas_validate),
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
