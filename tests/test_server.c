/*
 * kvlm serve end to end, over real HTTP on a free loopback port.
 *
 * Group 1 runs the reference tiny GPT-2 (context 32) with a byte-level
 * tokenizer written here (the 256 bytes, a few merges and <|endoftext|>;
 * printable ASCII gets ids below the model's 200): completions and chat,
 * streaming and not, against the CLI's greedy output; concurrent seeded
 * requests against the same requests one by one; n > 1, stop strings,
 * logprobs, prefix-cache usage, tokenize/detokenize, metrics; every bad
 * input with its status and OpenAI-style error body, then a request that
 * still works.
 *
 * Group 2 runs the GPT-2 124M shapes (random weights, long context, slow
 * enough to interrupt): a client that hangs up mid-stream gets its KV blocks
 * back (checked through /metrics), a full waiting queue answers 429 with
 * Retry-After, and the per-request timeout ends a long request.
 *
 * Groups 1 and 2 run with --no-draft: they count blocks, cache hits,
 * steps and queue places exactly, which drafts would change (the default
 * speculation is tested in test_speculative_server.c).
 *
 * Group 3 starts the shipped GPT-2 with --threads 1 and 2, twice each, under
 * 8 concurrent requests: every request is answered and the engine runs no
 * more threads than it was given (threads counted in /proc).
 *
 * Each server is a child process that dies with the test (PR_SET_PDEATHSIG)
 * and is stopped in the group teardown (tests/server_harness.h).
 */
#include <dirent.h>
#include <pthread.h>

#include "server_harness.h"

#define TINY "tests/fixtures/gpt2/hf_f32"

/* ----------------------------------------------------- the tiny model dir */

/* GPT-2's byte-to-character map: the UTF-8 of byte b's stand-in. */
static void byte_char(int b, char *out) {
    int keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE, cp = b;
    if (!keep) {
        int k = 0;
        for (int x = 0; x < b; x++) k += !((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE);
        cp = 0x100 + k;
    }
    if (cp < 0x80) out[0] = (char)cp, out[1] = 0;
    else out[0] = (char)(0xC0 | (cp >> 6)), out[1] = (char)(0x80 | (cp & 0x3F)), out[2] = 0;
}

/* vocab.json + merges.txt: ids 0-93 '!'..'~', 94 ' ', 95 '\n', 96-102
 * merges, 103 "é", 104-198 two-letter pieces, 199 <|endoftext|>, 200+ the
 * other bytes. */
static void write_tokenizer(const char *dir) {
    json_t *v = json_object();
    char key[16], a[4], b[4], path[1300];
    int id = 0;
    for (int c = 0x21; c <= 0x7E; c++) byte_char(c, key), json_object_set_new(v, key, json_integer(id++));
    byte_char(' ', key), json_object_set_new(v, key, json_integer(id++));
    byte_char('\n', key), json_object_set_new(v, key, json_integer(id++));
    static const char *const merges[][2] = {{" ", "t"}, {"h", "e"}, {" t", "he"}, {"i", "n"},
                                            {"e", "r"}, {" ", "a"}, {"o", "u"}};
    char mtxt[512] = "#version: 0.2\n";
    for (int m = 0; m < 7; m++) {
        char l[8] = "", r[8] = "";
        for (const char *p = merges[m][0]; *p; p++) byte_char((unsigned char)*p, a), strcat(l, a);
        for (const char *p = merges[m][1]; *p; p++) byte_char((unsigned char)*p, b), strcat(r, b);
        snprintf(key, sizeof key, "%s%s", l, r);
        json_object_set_new(v, key, json_integer(id++));
        strcat(mtxt, l), strcat(mtxt, " "), strcat(mtxt, r), strcat(mtxt, "\n");
    }
    byte_char(0xC3, a), byte_char(0xA9, b), snprintf(key, sizeof key, "%s%s", a, b);
    json_object_set_new(v, key, json_integer(id++));
    for (int i = 0; id < 199; i++) {
        snprintf(key, sizeof key, "%c%c", 'a' + i / 26, 'a' + i % 26);
        json_object_set_new(v, key, json_integer(id++));
    }
    json_object_set_new(v, "<|endoftext|>", json_integer(id++));
    for (int c = 0; c < 256; c++)
        if (!(c >= 0x20 && c <= 0x7E) && c != '\n') byte_char(c, key), json_object_set_new(v, key, json_integer(id++));
    snprintf(path, sizeof path, "%s/vocab.json", dir);
    assert_int_equal(json_dump_file(v, path, 0), 0);
    json_decref(v);
    snprintf(path, sizeof path, "%s/merges.txt", dir);
    assert_int_equal(th_write_file(path, mtxt, strlen(mtxt)), 0);
}

static server tiny, big;

static int tiny_setup(void **state) {
    (void)state;
    char *d = th_tempdir(), cmd[1200], args[900];
    if (!d) return -1;
    snprintf(tiny.dir, sizeof tiny.dir, "%s", d);
    free(d);
    snprintf(cmd, sizeof cmd, "mkdir -p %s/tiny && cp " TINY "/config.json " TINY "/model.safetensors %s/tiny/", tiny.dir,
             tiny.dir);
    if (system(cmd)) return -1;
    snprintf(cmd, sizeof cmd, "%s/tiny", tiny.dir);
    write_tokenizer(cmd);
    snprintf(args, sizeof args, "-m %s/tiny --no-draft --max-seqs 8 --block-size 4 --max-body 65536 --threads 1", tiny.dir);
    return start_server(&tiny, args);
}

static int tiny_teardown(void **state) {
    (void)state;
    int rc = stop_server(&tiny);
    th_rmtree(tiny.dir);
    return rc;
}

/* ------------------------------------------------------ group 1: tiny */

static void test_health_and_models(void **state) {
    (void)state;
    resp r = http(tiny.port, "GET", "/health", NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    r = http(tiny.port, "GET", "/v1/models", NULL);
    assert_int_equal(r.status, 200);
    json_t *j = json_loads(r.body, 0, NULL);
    assert_string_equal(jstr(j, "data.0.id"), "tiny");
    assert_int_equal(jint(j, "data.0.max_model_len"), 32);
    json_decref(j);
    resp_free(&r);
    r = http(tiny.port, "GET", "/v1/models/tiny", NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
}

/* Greedy text equals the CLI's ids decoded by the server; usage adds up. */
static void test_completion_matches_cli(void **state) {
    (void)state;
    char *out = NULL, cmd[1024];
    snprintf(cmd, sizeof cmd, "run -m %s/tiny -p 'the cat in' -n 10 --temp 0 --ignore-eos --json 2>/dev/null", tiny.dir);
    assert_int_equal(th_run_kvlm(&out, "%s", cmd), 0);
    json_t *cli = json_loads(out, 0, NULL), *ids = json_array();
    free(out);
    size_t i;
    json_t *x;
    json_array_foreach(json_object_get(cli, "ids"), i, x) if (json_integer_value(x) != 199) json_array_append(ids, x);
    json_t *req = json_pack("{s:o}", "tokens", ids);
    char *body = json_dumps(req, 0);
    json_t *want = post(tiny.port, "/detokenize", body, 200);
    free(body);
    json_decref(req);
    json_t *got = post(tiny.port, "/v1/completions",
                       "{\"model\":\"tiny\",\"prompt\":\"the cat in\",\"max_tokens\":10,\"temperature\":0,"
                       "\"ignore_eos\":true}", 200);
    assert_string_equal(jstr(got, "choices.0.text"), jstr(want, "prompt"));
    assert_string_equal(jstr(got, "choices.0.finish_reason"), "length");
    assert_string_equal(jstr(got, "object"), "text_completion");
    const json_int_t np = (json_int_t)json_array_size(json_object_get(cli, "prompt_ids"));
    assert_int_equal(jint(got, "usage.prompt_tokens"), np);
    assert_int_equal(jint(got, "usage.completion_tokens"), 10);
    assert_int_equal(jint(got, "usage.total_tokens"), np + 10);
    assert_true(jint(got, "usage.prompt_tokens_details.cached_tokens") >= 0);
    json_decref(got);
    json_decref(want);
    json_decref(cli);
}

/* Concatenated stream deltas equal the whole text; usage comes last. */
static void check_stream(const char *path, const char *fields, int chat) {
    char body[512];
    snprintf(body, sizeof body, "{%s,\"max_tokens\":12,\"temperature\":0,\"ignore_eos\":true}", fields);
    json_t *whole = post(tiny.port, path, body, 200);
    snprintf(body, sizeof body, "{%s,\"max_tokens\":12,\"temperature\":0,\"ignore_eos\":true,\"stream\":true,"
             "\"stream_options\":{\"include_usage\":true}}", fields);
    resp r = http(tiny.port, "POST", path, body);
    assert_int_equal(r.status, 200);
    assert_non_null(strcasestr(r.head, "content-type: text/event-stream"));
    json_t *ev = sse_events(r.body);
    char text[4096] = "";
    const char *finish = NULL;
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e) {
        json_t *c = json_array_get(json_object_get(e, "choices"), 0);
        if (!c) continue;
        json_t *t = chat ? json_object_get(json_object_get(c, "delta"), "content") : json_object_get(c, "text");
        if (json_is_string(t)) strncat(text, json_string_value(t), sizeof text - strlen(text) - 1);
        if (json_is_string(json_object_get(c, "finish_reason"))) finish = json_string_value(json_object_get(c, "finish_reason"));
    }
    json_t *last = json_array_get(ev, json_array_size(ev) - 1);
    assert_int_equal(json_array_size(json_object_get(last, "choices")), 0);
    assert_int_equal(jint(last, "usage.completion_tokens"), 12);
    assert_string_equal(text, chat ? jstr(whole, "choices.0.message.content") : jstr(whole, "choices.0.text"));
    assert_non_null(finish);
    assert_string_equal(finish, "length");
    if (chat) assert_string_equal(jstr(ev, "0.choices.0.delta.role"), "assistant");
    json_decref(ev);
    json_decref(whole);
    resp_free(&r);
}

static void test_streaming(void **state) {
    (void)state;
    check_stream("/v1/completions", "\"prompt\":\"in the\"", 0);
    check_stream("/v1/completions", "\"prompt\":[5,17,42,99]", 0);
    check_stream("/v1/chat/completions", "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]", 1);
}

/* Chat with the plain template is a completion of the rendered text. */
static void test_chat_template(void **state) {
    (void)state;
    const char *msgs = "[{\"role\":\"system\",\"content\":\"a\"},{\"role\":\"user\",\"content\":\"the\"}]";
    char body[512];
    snprintf(body, sizeof body, "{\"messages\":%s,\"max_tokens\":4,\"temperature\":0,\"ignore_eos\":true}", msgs);
    json_t *chat = post(tiny.port, "/v1/chat/completions", body, 200);
    json_t *comp = post(tiny.port, "/v1/completions",
                        "{\"prompt\":\"system: a\\nuser: the\\nassistant:\",\"max_tokens\":4,"
                        "\"temperature\":0,\"ignore_eos\":true}", 200);
    assert_string_equal(jstr(chat, "choices.0.message.content"), jstr(comp, "choices.0.text"));
    assert_string_equal(jstr(chat, "choices.0.message.role"), "assistant");
    assert_string_equal(jstr(chat, "object"), "chat.completion");
    assert_int_equal(jint(chat, "usage.prompt_tokens"), jint(comp, "usage.prompt_tokens"));
    snprintf(body, sizeof body, "{\"messages\":%s}", msgs);
    json_t *t1 = post(tiny.port, "/tokenize", body, 200);
    json_t *t2 = post(tiny.port, "/tokenize", "{\"prompt\":\"system: a\\nuser: the\\nassistant:\"}", 200);
    assert_true(json_equal(json_object_get(t1, "tokens"), json_object_get(t2, "tokens")));
    assert_int_equal(jint(t1, "count"), jint(chat, "usage.prompt_tokens"));
    json_decref(t1);
    json_decref(t2);
    json_decref(chat);
    json_decref(comp);
}

typedef struct conc {
    char body[256];
    char text[2][512];
} conc;

static void run_conc(conc *c) {
    json_t *j = post(tiny.port, "/v1/completions", c->body, 200);
    for (size_t k = 0; k < json_array_size(json_object_get(j, "choices")); k++) {
        char p[48];
        snprintf(p, sizeof p, "choices.%zu.text", k);
        snprintf(c->text[k], sizeof c->text[k], "%s", jstr(j, p));
    }
    json_decref(j);
}

static void *conc_thread(void *arg) {
    in_worker = 1;
    run_conc(arg);
    return NULL;
}

/* Joins n worker threads; returns the first failure message one of them
 * returned (malloc'ed; the others are freed), or NULL. */
static char *join_all(pthread_t *th, int n) {
    char *failure = NULL;
    for (int i = 0; i < n; i++) {
        void *ret = NULL;
        pthread_join(th[i], &ret);
        if (ret && !failure) failure = ret;
        else free(ret);
    }
    return failure;
}

/* Seeded requests served together give what each gives alone. */
static void test_concurrent_equals_sequential(void **state) {
    (void)state;
    enum { N = 8 };
    static const char *const prompts[N] = {"the", "in a", "he said", "[1,2,3,4,5,6,7]", "our", "abc", "the end", "[150]"};
    conc seq[N], par[N];
    memset(seq, 0, sizeof seq);
    for (int i = 0; i < N; i++) {
        const char *p = prompts[i];
        int ids = p[0] == '[';
        snprintf(seq[i].body, sizeof seq[i].body,
                 "{\"prompt\":%s%s%s,\"max_tokens\":%d,\"temperature\":0.9,\"seed\":%d,\"n\":%d,\"ignore_eos\":true}",
                 ids ? "" : "\"", p, ids ? "" : "\"", 6 + 2 * i, 100 + i, 1 + i % 2);
        run_conc(&seq[i]);
    }
    memcpy(par, seq, sizeof par);
    for (int i = 0; i < N; i++) memset(par[i].text, 0, sizeof par[i].text);
    pthread_t th[N];
    for (int i = 0; i < N; i++) pthread_create(&th[i], NULL, conc_thread, &par[i]);
    char *failure = join_all(th, N);
    if (failure) fail_msg("concurrent request: %s", failure);
    for (int i = 0; i < N; i++)
        for (int k = 0; k < 2; k++) assert_string_equal(par[i].text[k], seq[i].text[k]);
    /* Several prompts in one request reach the scheduler together, so they
     * certainly share steps: fewer steps than tokens, same texts. */
    double steps0 = metric(tiny.port, "kvlm_engine_steps_total"), toks0 = metric(tiny.port, "kvlm_generation_tokens_total");
    json_t *batch = post(tiny.port, "/v1/completions",
                         "{\"prompt\":[[1,2,3],[40,41],[7,8,9,10,11],[150]],\"max_tokens\":10,\"temperature\":1,"
                         "\"seed\":42,\"n\":2,\"ignore_eos\":true}", 200);
    double steps = metric(tiny.port, "kvlm_engine_steps_total") - steps0;
    double toks = metric(tiny.port, "kvlm_generation_tokens_total") - toks0;
    assert_true(toks == 80 && steps <= 12);
    static const char *const bp[4] = {"[1,2,3]", "[40,41]", "[7,8,9,10,11]", "[150]"};
    for (int p = 0; p < 4; p++) {
        conc one = {0};
        snprintf(one.body, sizeof one.body, "{\"prompt\":%s,\"max_tokens\":10,\"temperature\":1,\"seed\":42,\"n\":2,"
                 "\"ignore_eos\":true}", bp[p]);
        run_conc(&one);
        for (int k = 0; k < 2; k++) {
            char path[48];
            snprintf(path, sizeof path, "choices.%d.text", 2 * p + k);
            assert_string_equal(jstr(batch, path), one.text[k]);
        }
    }
    json_decref(batch);
    /* choice k of a seeded n > 1 request is the request with seed + k */
    json_t *two = post(tiny.port, "/v1/completions",
                       "{\"prompt\":\"the\",\"max_tokens\":9,\"temperature\":1,\"seed\":5,\"n\":2,\"ignore_eos\":true}", 200);
    json_t *one = post(tiny.port, "/v1/completions",
                       "{\"prompt\":\"the\",\"max_tokens\":9,\"temperature\":1,\"seed\":6,\"ignore_eos\":true}", 200);
    assert_string_equal(jstr(two, "choices.1.text"), jstr(one, "choices.0.text"));
    assert_int_equal(jint(two, "usage.completion_tokens"), 18);
    json_decref(two);
    json_decref(one);
    assert_true(metric(tiny.port, "kvlm_requests_running") == 0);
}

/* A stop string cuts the text before it; finish_reason is stop. */
static void test_stop_and_logprobs(void **state) {
    (void)state;
    json_t *full = post(tiny.port, "/v1/completions",
                        "{\"prompt\":[3,4,5],\"max_tokens\":16,\"temperature\":0,\"ignore_eos\":true}", 200);
    const char *text = jstr(full, "choices.0.text");
    size_t len = strlen(text);
    assert_true(len >= 6);
    char stop[3] = {text[len / 2], text[len / 2 + 1], 0}, body[256];
    json_t *sj = json_string(stop);
    char *sd = json_dumps(sj, JSON_ENCODE_ANY);
    snprintf(body, sizeof body, "{\"prompt\":[3,4,5],\"max_tokens\":16,\"temperature\":0,\"ignore_eos\":true,"
             "\"stop\":[\"zzzz\",%s],\"logprobs\":3}", sd);
    json_t *cut = post(tiny.port, "/v1/completions", body, 200);
    const char *got = jstr(cut, "choices.0.text");
    assert_int_equal(strlen(got), (size_t)(strstr(text, stop) - text));
    assert_memory_equal(got, text, strlen(got));
    assert_string_equal(jstr(cut, "choices.0.finish_reason"), "stop");
    json_t *lp = jget(cut, "choices.0.logprobs");
    size_t n = json_array_size(json_object_get(lp, "tokens"));
    assert_int_equal((json_int_t)n, jint(cut, "usage.completion_tokens"));
    assert_int_equal(json_array_size(json_object_get(lp, "token_logprobs")), n);
    assert_int_equal(json_object_size(jget(lp, "top_logprobs.0")), 3);
    json_t *chat = post(tiny.port, "/v1/chat/completions",
                        "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":4,\"logprobs\":true,"
                        "\"top_logprobs\":2,\"ignore_eos\":true}", 200);
    json_t *content = jget(chat, "choices.0.logprobs.content");
    assert_int_equal(json_array_size(content), 4);
    assert_int_equal(json_array_size(jget(content, "0.top_logprobs")), 2);
    assert_true(json_real_value(jget(content, "0.logprob")) <= 0);
    json_decref(chat);
    free(sd);
    json_decref(sj);
    json_decref(full);
    json_decref(cut);
}

/* The same long prompt twice: the second is served from the prefix cache. */
static void test_prefix_cache_and_metrics(void **state) {
    (void)state;
    const char *body = "{\"prompt\":[9,8,7,6,5,4,3,2,1,10,11,12,13,14,15,16],\"max_tokens\":2,\"temperature\":0}";
    json_t *a = post(tiny.port, "/v1/completions", body, 200), *b = post(tiny.port, "/v1/completions", body, 200);
    assert_true(jint(b, "usage.prompt_tokens_details.cached_tokens") >= 12);
    json_decref(a);
    json_decref(b);
    assert_true(metric(tiny.port, "kvlm_prefix_cache_hits_total") >= 12);
    assert_true(metric(tiny.port, "kvlm_kv_usage_ratio") == 0);
    assert_true(metric(tiny.port, "kvlm_requests_waiting") == 0);
    assert_true(metric(tiny.port, "kvlm_time_to_first_token_seconds_count") > 0);
    assert_true(metric(tiny.port, "kvlm_time_per_output_token_seconds_count") > 0);
    assert_true(metric(tiny.port, "kvlm_e2e_request_latency_seconds_count") > 0);
    assert_true(metric(tiny.port, "kvlm_request_queue_time_seconds_count") > 0);
    assert_true(metric(tiny.port, "kvlm_prompt_tokens_total") > 0);
    assert_true(metric(tiny.port, "kvlm_generation_tokens_total") > 0);
    assert_true(metric(tiny.port, "kvlm_prefix_cache_queries_total") > 0);
    json_t *t = post(tiny.port, "/tokenize", "{\"prompt\":\"the cat\"}", 200);
    json_t *tj = json_pack("{s:O}", "tokens", json_object_get(t, "tokens"));
    char *tb = json_dumps(tj, 0);
    json_decref(tj);
    json_t *d = post(tiny.port, "/detokenize", tb, 200);
    assert_string_equal(jstr(d, "prompt"), "the cat");
    free(tb);
    json_decref(t);
    json_decref(d);
}

typedef struct bad {
    const char *path, *body;
    int status;
    const char *code, *param;
} bad;

static void test_bad_input(void **state) {
    (void)state;
    char big_prompt[200] = "{\"prompt\":[", huge[70000];
    for (int i = 0; i < 40; i++) strcat(big_prompt, i ? ",1" : "1");
    strcat(big_prompt, "]}");
    const bad cases[] = {
        {"/v1/completions", "{\"prompt\":", 400, "invalid_json", NULL},
        {"/v1/completions", "", 400, "invalid_json", NULL},
        {"/v1/completions", "[1,2]", 400, "invalid_json", NULL},
        {"/v1/completions", "{\"prompt\":\"a\",\"prompt\":\"b\"}", 400, "invalid_json", NULL},
        {"/v1/completions", "{\"prompt\":\"\xff\xfe\"}", 400, "invalid_utf8", NULL},
        {"/v1/completions", "{\"max_tokens\":4}", 400, "missing_parameter", "prompt"},
        {"/v1/completions", "{\"prompt\":5}", 400, "invalid_type", "prompt"},
        {"/v1/completions", "{\"prompt\":[]}", 400, "invalid_prompt", "prompt"},
        {"/v1/completions", "{\"prompt\":[1,\"a\"]}", 400, "invalid_type", "prompt"},
        {"/v1/completions", "{\"prompt\":[1,200]}", 400, "invalid_token", "prompt"},
        {"/v1/completions", "{\"prompt\":[-1]}", 400, "invalid_token", "prompt"},
        {"/v1/completions", big_prompt, 400, "context_length_exceeded", "prompt"},
        {"/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":\"10\"}", 400, "invalid_type", "max_tokens"},
        {"/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":0}", 400, "invalid_value", "max_tokens"},
        {"/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":2.5}", 400, "invalid_type", "max_tokens"},
        {"/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":40}", 400, "context_length_exceeded", "max_tokens"},
        {"/v1/completions", "{\"prompt\":\"a\",\"temperature\":\"hot\"}", 400, "invalid_type", "temperature"},
        {"/v1/completions", "{\"prompt\":\"a\",\"temperature\":3}", 400, "invalid_value", "temperature"},
        {"/v1/completions", "{\"prompt\":\"a\",\"top_p\":0}", 400, "invalid_value", "top_p"},
        {"/v1/completions", "{\"prompt\":\"a\",\"n\":0}", 400, "invalid_value", "n"},
        {"/v1/completions", "{\"prompt\":\"a\",\"n\":9}", 400, "invalid_value", "n"},
        {"/v1/completions", "{\"prompt\":\"a\",\"stream\":\"yes\"}", 400, "invalid_type", "stream"},
        {"/v1/completions", "{\"prompt\":\"a\",\"stop\":3}", 400, "invalid_type", "stop"},
        {"/v1/completions", "{\"prompt\":\"a\",\"seed\":\"x\"}", 400, "invalid_type", "seed"},
        {"/v1/completions", "{\"prompt\":\"a\",\"logit_bias\":{\"x\":1}}", 400, "invalid_value", "logit_bias"},
        {"/v1/completions", "{\"prompt\":\"a\",\"logit_bias\":{\"5\":500}}", 400, "invalid_value", "logit_bias"},
        {"/v1/completions", "{\"prompt\":\"a\",\"logprobs\":50}", 400, "invalid_value", "logprobs"},
        {"/v1/completions", "{\"prompt\":\"a\",\"stream_options\":{\"include_usage\":true}}", 400, "invalid_value",
         "stream_options"},
        {"/v1/completions", "{\"prompt\":\"a\",\"frobnicate\":1}", 400, "unknown_parameter", "frobnicate"},
        {"/v1/completions", "{\"prompt\":\"a\",\"echo\":true}", 400, "unsupported_parameter", "echo"},
        {"/v1/completions", "{\"prompt\":\"a\",\"model\":\"gpt-4\"}", 404, "model_not_found", "model"},
        {"/v1/completions", "{\"prompt\":\"a\",\"model\":7}", 400, "invalid_type", "model"},
        {"/v1/chat/completions", "{\"prompt\":\"a\"}", 400, "unknown_parameter", "prompt"},
        {"/v1/chat/completions", "{\"messages\":[]}", 400, "invalid_type", "messages"},
        {"/v1/chat/completions", "{\"messages\":\"hi\"}", 400, "invalid_type", "messages"},
        {"/v1/chat/completions", "{\"messages\":[{\"content\":\"hi\"}]}", 400, "invalid_value", "messages[0].role"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\"}]}", 400, "missing_parameter",
         "messages[0].content"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"x\":1}]}", 400,
         "unsupported_parameter", "messages[0].x"},
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tools\":[{\"type\":\"function\",\"function\":"
         "{\"name\":\"f\"}}]}", 400, "unsupported_parameter", "tools"},
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tools\":[{\"type\":\"function\"}]}", 400,
         "missing_parameter", "tools[0].function"},
        {"/v1/chat/completions",
         "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"response_format\":{\"type\":\"json_schema\","
         "\"json_schema\":{\"name\":\"x\",\"schema\":{\"type\":\"object\",\"patternProperties\":{}}}}}",
         400, "invalid_schema", "response_format.json_schema.schema"},
        {"/v1/chat/completions", /* "{}" needs 2 tokens */
         "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_tokens\":1,\"response_format\":"
         "{\"type\":\"json_object\"}}", 400, "invalid_value", "max_tokens"},
        {"/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":3,\"regex\":\"[a-z]{4}\"}", 400, "invalid_value",
         "max_tokens"},
        {"/v1/completions", "{\"prompt\":\"a\\u0000\"}", 400, "invalid_value", "prompt"},
        {"/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"top_logprobs\":2}", 400,
         "invalid_value", "top_logprobs"},
        {"/tokenize", "{\"text\":\"a\"}", 400, "unknown_parameter", "text"},
        {"/detokenize", "{\"tokens\":[1,9999]}", 400, "invalid_token", "tokens"},
        {"/v1/nothing", "{}", 404, "not_found", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const bad *c = &cases[i];
        resp r = http(tiny.port, "POST", c->path, c->body);
        json_t *j = json_loads(r.body, 0, NULL), *e = json_object_get(j, "error");
        if (r.status != c->status || !e) fail_msg("%s %s: status %d (want %d): %s", c->path, c->body, r.status, c->status, r.body);
        const char *code = json_string_value(json_object_get(e, "code")), *param = json_string_value(json_object_get(e, "param"));
        if (!code || strcmp(code, c->code) || (c->param ? !param || strcmp(param, c->param) : !json_is_null(json_object_get(e, "param"))))
            fail_msg("%s %s: error %s", c->path, c->body, r.body);
        assert_true(json_string_length(json_object_get(e, "message")) > 0);
        assert_string_equal(json_string_value(json_object_get(e, "type")),
                            c->status == 400 || c->status == 404 ? "invalid_request_error" : "server_error");
        json_decref(j);
        resp_free(&r);
    }
    resp r = http(tiny.port, "GET", "/v1/completions", NULL);
    assert_int_equal(r.status, 405);
    assert_non_null(strcasestr(r.head, "allow: POST"));
    resp_free(&r);
    memset(huge, ' ', sizeof huge);
    memcpy(huge, "{\"prompt\":\"a\"", 13);
    huge[sizeof huge - 1] = '}';
    r = http_raw(tiny.port, "POST", "/v1/completions", huge, sizeof huge);
    assert_int_equal(r.status, 413);
    assert_non_null(strstr(r.body, "request_too_large"));
    resp_free(&r);
    /* still serving */
    json_t *ok = post(tiny.port, "/v1/completions", "{\"prompt\":\"the\",\"max_tokens\":3}", 200);
    assert_int_equal(jint(ok, "usage.completion_tokens") <= 3, 1);
    json_decref(ok);
    /* the fields clients send by default that change nothing are accepted */
    ok = post(tiny.port, "/v1/chat/completions",
              "{\"messages\":[{\"role\":\"user\",\"content\":\"the\"}],\"max_tokens\":2.0,\"n\":1.0,\"user\":\"u\","
              "\"parallel_tool_calls\":true,\"reasoning_effort\":\"low\",\"service_tier\":\"auto\",\"store\":false,"
              "\"metadata\":{\"a\":\"b\"},\"response_format\":{\"type\":\"text\"},\"tools\":[],\"tool_choice\":\"none\"}",
              200);
    assert_int_equal(jint(ok, "usage.completion_tokens") <= 2, 1);
    json_decref(ok);
    assert_true(metric(tiny.port, "kvlm_http_responses_total{code=\"400\"}") >= 40);
}

/* ---------------------------------------------- group 2: GPT-2 124M shapes */

static int big_setup(void **state) {
    (void)state;
    char *d = th_tempdir();
    if (!d) return -1;
    snprintf(big.dir, sizeof big.dir, "%s", d);
    free(d);
    char opts[200]; /* --timeout 6, longer under a slow (ThreadSanitizer) build */
    snprintf(opts, sizeof opts, "--synthetic gpt2-124m --no-draft --max-seqs 1 --max-waiting 1 --timeout %d --threads 2",
             6 * th_time_scale());
    return start_server(&big, opts);
}

static int big_teardown(void **state) {
    (void)state;
    int rc = stop_server(&big);
    th_rmtree(big.dir);
    return rc;
}

/* Opens a streaming request and reads until `events` data events came. */
static int open_stream(int max_tokens, int events) {
    char body[256];
    snprintf(body, sizeof body, "{\"prompt\":[1,2,3,4],\"max_tokens\":%d,\"stream\":true,\"ignore_eos\":true}", max_tokens);
    int fd = connect_to(big.port);
    send_request(fd, "POST", "/v1/completions", body, strlen(body));
    char buf[65536];
    size_t n = 0;
    int seen = 0;
    while (seen < events && n < sizeof buf - 1) {
        ssize_t r = read(fd, buf + n, sizeof buf - 1 - n);
        if (r <= 0) fail_msg("stream ended early: %.*s", (int)n, buf);
        n += (size_t)r;
        buf[n] = 0;
        seen = 0;
        for (const char *p = buf; (p = strstr(p, "data: ")); p += 6) seen++;
    }
    return fd;
}

static int wait_metric(const char *name, double want, double seconds) {
    seconds *= th_time_scale();
    for (double t = 0; t < seconds; t += 0.05) {
        if (metric(big.port, name) == want) return 1;
        usleep(50000);
    }
    return 0;
}

static void test_disconnect_frees_blocks(void **state) {
    (void)state;
    int fd = open_stream(900, 2);
    assert_true(metric(big.port, "kvlm_requests_running") == 1);
    assert_true(metric(big.port, "kvlm_kv_usage_ratio") > 0);
    close(fd);
    if (!wait_metric("kvlm_requests_running", 0, 10)) fail_msg("the request kept running after the client left");
    assert_true(metric(big.port, "kvlm_kv_usage_ratio") == 0);
    assert_true(metric(big.port, "kvlm_sequences_finished_total{reason=\"cancelled\"}") == 1);
    assert_true(metric(big.port, "kvlm_generation_tokens_total") < 900);
}

/* A non-streaming client that leaves while its request runs. */
static void test_disconnect_non_streaming(void **state) {
    (void)state;
    const char *body = "{\"prompt\":[1,2,3,4],\"max_tokens\":900,\"ignore_eos\":true}";
    int fd = connect_to(big.port);
    send_request(fd, "POST", "/v1/completions", body, strlen(body));
    if (!wait_metric("kvlm_requests_running", 1, 10)) fail_msg("the request did not start");
    close(fd);
    if (!wait_metric("kvlm_requests_running", 0, 10)) fail_msg("the request kept running after the client left");
    assert_true(metric(big.port, "kvlm_kv_usage_ratio") == 0);
    assert_true(metric(big.port, "kvlm_sequences_finished_total{reason=\"cancelled\"}") == 2);
}

static void *slow_post(void *arg) {
    resp *r = arg;
    *r = http(big.port, "POST", "/v1/completions", "{\"prompt\":[5,6],\"max_tokens\":2,\"ignore_eos\":true}");
    return NULL;
}

static void test_queue_full_and_timeout(void **state) {
    (void)state;
    int fd = open_stream(900, 1);               /* running: the only sequence */
    resp waiting;
    pthread_t th;
    pthread_create(&th, NULL, slow_post, &waiting); /* waiting: the only queue slot */
    if (!wait_metric("kvlm_requests_waiting", 1, 10)) fail_msg("the second request is not waiting");
    resp r = http(big.port, "POST", "/v1/completions", "{\"prompt\":[7],\"max_tokens\":2}");
    assert_int_equal(r.status, 429);
    assert_non_null(strcasestr(r.head, "retry-after: 1"));
    json_t *j = json_loads(r.body, 0, NULL);
    assert_string_equal(jstr(j, "error.type"), "rate_limit_error");
    assert_string_equal(jstr(j, "error.code"), "queue_full");
    json_decref(j);
    resp_free(&r);
    close(fd); /* the waiting request now runs */
    pthread_join(th, NULL);
    assert_int_equal(waiting.status, 200);
    resp_free(&waiting);
    /* a request longer than --timeout (6 s unscaled) ends with what it has */
    json_t *t = post(big.port, "/v1/completions", "{\"prompt\":[1],\"max_tokens\":1000,\"ignore_eos\":true}", 200);
    assert_string_equal(jstr(t, "choices.0.finish_reason"), "timeout");
    assert_true(jint(t, "usage.completion_tokens") < 1000);
    json_decref(t);
    assert_true(metric(big.port, "kvlm_sequences_finished_total{reason=\"timeout\"}") == 1);
    assert_true(wait_metric("kvlm_kv_usage_ratio", 0, 5));
    r = http(big.port, "GET", "/health", NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
}

/* ------------------------------------------ group 3: --threads binds */

/* CPU time (utime + stime, clock ticks) of every thread of pid; returns
 * how many were read into tids / ticks (at most cap). */
static int thread_ticks(pid_t pid, long *tids, long long *ticks, int cap) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    int n = 0;
    for (struct dirent *de; d && n < cap && (de = readdir(d));) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9') continue;
        char sp[320];
        snprintf(sp, sizeof sp, "/proc/%d/task/%s/stat", (int)pid, de->d_name);
        char st[1024] = "";
        FILE *f = fopen(sp, "r"); /* /proc files have no size: read what there is */
        if (f) st[fread(st, 1, sizeof st - 1, f)] = 0, fclose(f);
        const char *p = strrchr(st, ')'); /* the thread name may hold spaces */
        unsigned long ut, kt;
        if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &kt) == 2) {
            tids[n] = atol(de->d_name);
            ticks[n++] = (long long)(ut + kt);
        }
    }
    if (d) closedir(d);
    return n;
}

typedef struct bound_req {
    int port, seed;
    int completion_tokens;
} bound_req;

static void *bound_thread(void *arg) {
    bound_req *r = arg;
    in_worker = 1;
    char body[512];
    int n = snprintf(body, sizeof body, "{\"prompt\":[");
    for (int i = 0; i < 30; i++)
        n += snprintf(body + n, sizeof body - (size_t)n, "%s%d", i ? "," : "", 100 + 37 * (i + r->seed));
    snprintf(body + n, sizeof body - (size_t)n,
             "],\"max_tokens\":40,\"temperature\":0.8,\"seed\":%d,\"ignore_eos\":true}", r->seed);
    json_t *j = post(r->port, "/v1/completions", body, 200);
    r->completion_tokens = (int)jint(j, "usage.completion_tokens");
    if (r->completion_tokens != 40) {
        char *dump = json_dumps(j, JSON_COMPACT);
        FAIL("seed %d: %d completion tokens, not 40: %.400s", r->seed, r->completion_tokens, dump ? dump : "");
    }
    json_decref(j);
    return NULL;
}

/* `kvlm serve --threads N` on the shipped GPT-2 (its output head alone makes
 * every step's matmuls fork), two fresh starts, 8 concurrent requests each.
 * The engine starts its pool's N - 1 workers when it is created, and the
 * server's other threads (main, HTTP, engine, connection guard, which
 * sleeps while no request is being received) all exist once it listens: so
 * no thread appears while the requests run (none per request), and at most
 * the engine's N plus the HTTP thread may gain CPU time. An engine running
 * more threads than it was given shows as extra threads here and, under
 * ASan, as an overflow of its per-thread scratch. */
static void check_threads_bound(int threads) {
    enum { N = 8, CAP = 256 };
    for (int start = 0; start < 2; start++) {
        server sv = {0};
        char *d = th_tempdir(), args[128];
        assert_non_null(d);
        snprintf(sv.dir, sizeof sv.dir, "%s", d);
        free(d);
        snprintf(args, sizeof args, "-m models/shakespeare-gpt2 --max-seqs %d --threads %d", N, threads);
        if (start_server(&sv, args)) fail_msg("kvlm serve %s did not start", args);
        long tid0[CAP], tid1[CAP];
        long long tick0[CAP], tick1[CAP];
        int n0 = thread_ticks(sv.pid, tid0, tick0, CAP);
        bound_req rq[N];
        pthread_t th[N];
        for (int i = 0; i < N; i++) {
            rq[i] = (bound_req){.port = sv.port, .seed = 10 * start + i};
            pthread_create(&th[i], NULL, bound_thread, &rq[i]);
        }
        char *failure = join_all(th, N);
        int n1 = thread_ticks(sv.pid, tid1, tick1, CAP), created = 0, busy = 0;
        for (int i = 0; i < n1; i++) {
            long long before = -1;
            for (int j = 0; j < n0; j++)
                if (tid0[j] == tid1[i]) before = tick0[j];
            created += before < 0;
            busy += tick1[i] > (before < 0 ? 0 : before);
        }
        int stopped = stop_server(&sv);
        th_rmtree(sv.dir);
        if (failure) fail_msg("--threads %d, start %d: %s", threads, start + 1, failure);
        for (int i = 0; i < N; i++) assert_int_equal(rq[i].completion_tokens, 40);
        printf("  --threads %d, start %d: %d threads at start, %d created while serving, %d gained CPU time\n", threads,
               start + 1, n0, created, busy);
        assert_true(n0 >= 3 && n1 >= n0);
        assert_int_equal(created, 0);
        assert_true(busy >= 1 && busy <= threads + 1);
        assert_int_equal(stopped, 0);
    }
}

static void test_threads_1_bound(void **state) {
    (void)state;
    check_threads_bound(1);
}

static void test_threads_2_bound(void **state) {
    (void)state;
    check_threads_bound(2);
}

int main(int argc, char **argv) {
    (void)argc;
    if (th_server_main_init(argv[0], "test_server")) return 1;
    const struct CMUnitTest tiny_tests[] = {
        cmocka_unit_test(test_health_and_models),
        cmocka_unit_test(test_completion_matches_cli),
        cmocka_unit_test(test_streaming),
        cmocka_unit_test(test_chat_template),
        cmocka_unit_test(test_concurrent_equals_sequential),
        cmocka_unit_test(test_stop_and_logprobs),
        cmocka_unit_test(test_prefix_cache_and_metrics),
        cmocka_unit_test(test_bad_input),
    };
    const struct CMUnitTest big_tests[] = {
        cmocka_unit_test(test_disconnect_frees_blocks),
        cmocka_unit_test(test_disconnect_non_streaming),
        cmocka_unit_test(test_queue_full_and_timeout),
    };
    const struct CMUnitTest threads_tests[] = {
        cmocka_unit_test(test_threads_1_bound),
        cmocka_unit_test(test_threads_2_bound),
    };
    int failed = cmocka_run_group_tests_name("server_tiny", tiny_tests, tiny_setup, tiny_teardown);
    failed += cmocka_run_group_tests_name("server_gpt2_124m", big_tests, big_setup, big_teardown);
    failed += cmocka_run_group_tests_name("server_threads", threads_tests, NULL, NULL);
    return failed || dirty_exit;
}
