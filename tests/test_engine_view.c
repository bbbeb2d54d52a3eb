/*
 * The engine view and measurement endpoints of kvlm serve
 * (docs/engine-view.md), over real HTTP.
 *
 * Server A runs models/shakespeare-gpt2 (its tokenizer, a short context):
 * the next-token measurement and kvlm_entropy against the library's own
 * computation in this process (the same model, prompt and tokens: a
 * forward pass per position, kvlm_dist_stats_compute's sorted softmax),
 * the prefix cache's evictable blocks and a hit, the event stream, the
 * history's token counts against the totals, /kvlm/model's sizes, and
 * every bad body.
 *
 * Server B runs the GPT-2 124M shapes (random weights, slow enough to
 * watch) behind an API key: a snapshot taken while an n = 2 request
 * decodes lists its choices with their block tables, whose entries match
 * the pool's reference counts exactly and its shared prompt blocks as
 * 's'; once the client hangs up the blocks come back. Without the key
 * every /kvlm route answers 401.
 *
 * Server C, started by its own test, runs the Gemma 3 1B shapes (random
 * q4_0 weights, window layers of 512 with one global layer in six):
 * a snapshot taken while a 600-token prompt decodes lists one block
 * table per layer slice, as many as the library's grouping of the layers
 * by window gives, slice 0 equal to `blocks`, -1 in a window slice exactly
 * where kvcache.c's rule released a block, and every block's reference
 * count equal to the number of tables, over all slices, that list it.
 *
 * Both run with --no-draft: block tables, reference counts and cached
 * blocks are counted exactly, and the drafts of kvlm serve's default
 * speculation would add blocks (a full block the drafts complete enters
 * the prefix index) wherever the policy decides to draft.
 */
#include <math.h>
#include <sys/time.h>

#include "kvlm_measure.h"
#include "kvlm_tokenizer.h"
#include "server_harness.h"

#define GPT2 "models/shakespeare-gpt2"
#define KEY "k-view-7"
#define ORIGIN "http://viewer.test"

static server a, b, c;

static int setup(void **state) {
    (void)state;
    if (start_server_in_tempdir(&a, "-m " GPT2 " --no-draft --threads 1 --max-seqs 4 --access-log off")) return -1;
    return start_server_in_tempdir(&b, "--synthetic gpt2-124m --no-draft --threads 2 --max-seqs 2 --api-key " KEY
                                       " --cors-origin " ORIGIN " --access-log off");
}

static int teardown(void **state) {
    (void)state;
    int rc = stop_server(&a) | stop_server(&b) | stop_server(&c);
    th_rmtree(a.dir);
    th_rmtree(b.dir);
    if (c.dir[0]) th_rmtree(c.dir); /* left by a failed server C test */
    return rc;
}

/* A request with extra header lines (each ending in \r\n). */
static resp req(int port, const char *method, const char *path, const char *headers, const char *body) {
    char head[1024];
    const size_t blen = body ? strlen(body) : 0;
    snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%sContent-Length: %zu\r\n\r\n",
             method, path, headers ? headers : "", blen);
    int fd = connect_to(port);
    if (write(fd, head, strlen(head)) != (ssize_t)strlen(head) || (blen && write(fd, body, blen) != (ssize_t)blen))
        FAIL("write failed");
    return read_response(fd, path);
}

static json_t *get_json(int port, const char *path, const char *headers) {
    resp r = req(port, "GET", path, headers, NULL);
    if (r.status != 200) FAIL("GET %s: status %d: %s", path, r.status, r.body);
    json_t *j = json_loads(r.body, 0, NULL);
    if (!j) FAIL("GET %s: not JSON: %s", path, r.body);
    resp_free(&r);
    return j;
}

static double jnum(json_t *j, const char *path) {
    json_t *v = jget(j, path);
    if (!json_is_number(v)) FAIL("%s is not a number", path);
    return json_number_value(v);
}

/* The pool's block string against its reference counts and totals. */
static void check_pool(json_t *snap) {
    const char *chars = jstr(snap, "kv.blocks");
    json_t *refs = jget(snap, "kv.refcounts");
    const size_t n = (size_t)jint(snap, "kv.n_blocks");
    assert_int_equal(strlen(chars), n);
    assert_int_equal(json_array_size(refs), n);
    size_t used = 0, cached = 0;
    for (size_t i = 0; i < n; i++) {
        const json_int_t r = json_integer_value(json_array_get(refs, i));
        const char c = chars[i];
        if (!((r > 1 && c == 's') || (r == 1 && c == 'u') || (r == 0 && (c == '.' || c == 'c'))))
            fail_msg("block %zu: '%c' with reference count %lld", i, c, (long long)r);
        used += r > 0;
        cached += c == 'c';
    }
    assert_int_equal(jint(snap, "kv.blocks_used"), used);
    assert_int_equal(jint(snap, "kv.prefix_cache.cached_blocks"), cached);
    assert_int_equal(jint(snap, "kv.tokens_reserved"), used * (size_t)jint(snap, "kv.block_size"));
    const double held = jnum(snap, "kv.tokens_held"), reserved = jnum(snap, "kv.tokens_reserved");
    assert_true(fabs(jnum(snap, "kv.utilisation") - (reserved > 0 ? held / reserved : 0)) < 1e-4);
}

/* ------------------------------------------- the library's own numbers */

typedef struct local_model {
    kvlm_model *m;
    kvlm_tokenizer *tok;
    kvlm_kv *kv;
    kvlm_engine *e;
    int seq, vocab;
    float *logits;
} local_model;

static void local_open(local_model *lm) {
    kvlm_error err;
    lm->m = kvlm_model_load(GPT2, NULL, &err);
    assert_non_null(lm->m);
    lm->tok = kvlm_tokenizer_load(kvlm_model_tokenizer_path(lm->m), &err);
    assert_non_null(lm->tok);
    /* the KV dtype server A runs: kvlm serve's default, f16 */
    kvlm_kv_options ko = kvlm_kv_default_params();
    ko.dtype = KVLM_F16;
    ko.block_size = 16;
    ko.max_seqs = 1;
    lm->kv = kvlm_kv_create(lm->m, &ko, &err);
    assert_non_null(lm->kv);
    kvlm_engine_options eo = kvlm_engine_default_params();
    eo.threads = 1;
    lm->e = kvlm_engine_create(lm->m, lm->kv, &eo, &err);
    assert_non_null(lm->e);
    lm->seq = kvlm_kv_seq_new(lm->kv, &err);
    assert_true(lm->seq >= 0);
    lm->vocab = kvlm_model_config(lm->m)->vocab_size;
    lm->logits = malloc((size_t)lm->vocab * sizeof(float));
}

/* Feeds n tokens; lm->logits holds the next token's logits. */
static void local_step(local_model *lm, const int32_t *ids, int n) {
    kvlm_error err;
    kvlm_batch_item it = {.seq = lm->seq, .tokens = ids, .n_tokens = n, .logits_all = 0};
    assert_int_equal(kvlm_engine_step(lm->e, &it, 1, lm->logits, &err), 0);
}

static double local_entropy_bits(const local_model *lm, float t) {
    kvlm_dist_stats st;
    kvlm_error err;
    assert_int_equal(kvlm_dist_stats_compute(lm->logits, lm->vocab, t, NULL, &st, &err), 0);
    return st.entropy / M_LN2;
}

static void local_close(local_model *lm) {
    free(lm->logits);
    kvlm_engine_free(lm->e);
    kvlm_kv_free(lm->kv);
    kvlm_tokenizer_free(lm->tok);
    kvlm_model_free(lm->m);
}

static void test_next_token_matches_library(void **state) {
    (void)state;
    json_t *r = post(a.port, "/kvlm/measure/next-token",
                     "{\"prompt\":\"ROMEO:\\nWhat light through yonder\",\"temperatures\":[0.5,1,2],\"top\":5}", 200);
    local_model lm;
    local_open(&lm);
    const char *text = "ROMEO:\nWhat light through yonder";
    int32_t *ids;
    size_t n;
    kvlm_error err;
    assert_int_equal(kvlm_tokenizer_encode_prompt(lm.tok, text, strlen(text), 1, &ids, &n, &err), 0);
    assert_int_equal(jint(r, "prompt_tokens"), n);
    assert_int_equal(jint(r, "vocab"), lm.vocab);
    local_step(&lm, ids, (int)n);
    kvlm_dist_stats st;
    assert_int_equal(kvlm_dist_stats_compute(lm.logits, lm.vocab, 1.0f, NULL, &st, &err), 0);
    json_t *t1 = jget(r, "temperatures.1");
    assert_true(fabs(jnum(t1, "temperature") - 1.0) < 1e-9);
    assert_true(fabs(jnum(t1, "entropy_bits") - st.entropy / M_LN2) < 1e-5);
    assert_true(fabs(jnum(t1, "top1") - st.top1) < 1e-5);
    assert_true(fabs(jnum(t1, "top5") - st.top5) < 1e-5);
    assert_int_equal(jint(t1, "n90"), st.n90);
    /* the top tokens at T = 1: the library's ranking and probabilities */
    int32_t top_ids[5];
    float top_lp[5];
    assert_int_equal(kvlm_top_logprobs(lm.logits, lm.vocab, 5, top_ids, top_lp), 5);
    assert_int_equal(json_array_size(jget(t1, "top")), 5);
    double mass = 0;
    for (int i = 0; i < 5; i++) {
        char path[32];
        snprintf(path, sizeof path, "top.%d.id", i);
        assert_int_equal(jint(t1, path), top_ids[i]);
        snprintf(path, sizeof path, "top.%d.p", i);
        assert_true(fabs(jnum(t1, path) - exp(top_lp[i])) < 1e-6);
        mass += jnum(t1, path);
        size_t len;
        const char *piece = kvlm_tokenizer_piece(lm.tok, top_ids[i], &len);
        snprintf(path, sizeof path, "top.%d.text", i);
        if (json_is_string(jget(t1, path)) && len == strlen(jstr(t1, path)))
            assert_memory_equal(jstr(t1, path), piece, len);
    }
    assert_true(fabs(mass - st.top5) < 1e-5);
    /* other temperatures: the library at that temperature; colder is surer */
    const double e05 = jnum(r, "temperatures.0.entropy_bits"), e2 = jnum(r, "temperatures.2.entropy_bits");
    assert_true(fabs(e05 - local_entropy_bits(&lm, 0.5f)) < 1e-5);
    assert_true(fabs(e2 - local_entropy_bits(&lm, 2.0f)) < 1e-5);
    assert_true(e05 < jnum(t1, "entropy_bits") && jnum(t1, "entropy_bits") < e2);
    assert_true(jnum(r, "temperatures.0.top1") > jnum(t1, "top1"));
    free(ids);
    local_close(&lm);
    json_decref(r);
}

/* Greedy tokens with kvlm_entropy: each token's entropy is the library's
 * exact entropy of the logits it was drawn from (the model run token by
 * token here); streaming gives the same values. */
static void test_entropy_matches_library(void **state) {
    (void)state;
    const char *body = "{\"prompt\":\"KING HENRY:\\nOnce more unto the\",\"max_tokens\":6,\"temperature\":0,"
                       "\"ignore_eos\":true,"
                       "\"logprobs\":2,\"kvlm_entropy\":true,\"return_tokens_as_token_ids\":true}";
    json_t *r = post(a.port, "/v1/completions", body, 200);
    json_t *ent = jget(r, "choices.0.logprobs.kvlm_entropy"), *toks = jget(r, "choices.0.logprobs.tokens");
    assert_int_equal(json_array_size(ent), 6);
    assert_int_equal(json_array_size(toks), 6);
    local_model lm;
    local_open(&lm);
    const char *text = "KING HENRY:\nOnce more unto the";
    int32_t *ids;
    size_t n;
    kvlm_error err;
    assert_int_equal(kvlm_tokenizer_encode_prompt(lm.tok, text, strlen(text), 1, &ids, &n, &err), 0);
    local_step(&lm, ids, (int)n);
    double served[6];
    for (int i = 0; i < 6; i++) {
        served[i] = json_number_value(json_array_get(ent, (size_t)i));
        const double want = local_entropy_bits(&lm, 1.0f);
        if (fabs(served[i] - want) > 1e-4)
            fail_msg("token %d: entropy %.6f bits, the library says %.6f", i, served[i], want);
        /* the independent one-pass formula of the scheduler agrees too */
        assert_true(fabs(kvlm_logits_entropy(lm.logits, lm.vocab) / M_LN2 - want) < 1e-6);
        const char *tk = json_string_value(json_array_get(toks, (size_t)i));
        assert_true(!strncmp(tk, "token_id:", 9));
        const int32_t id = (int32_t)atoi(tk + 9);
        local_step(&lm, &id, 1);
    }
    free(ids);
    local_close(&lm);
    json_decref(r);
    /* chat: entropy_bits on each content entry; streamed: the same numbers */
    json_t *c = post(a.port, "/v1/chat/completions",
                     "{\"messages\":[{\"role\":\"user\",\"content\":\"Speak\"}],\"max_tokens\":4,\"temperature\":0,"
                     "\"logprobs\":true,\"kvlm_entropy\":true}",
                     200);
    json_t *content = jget(c, "choices.0.logprobs.content");
    assert_true(json_array_size(content) >= 1);
    resp s = http(a.port, "POST", "/v1/chat/completions",
                  "{\"messages\":[{\"role\":\"user\",\"content\":\"Speak\"}],\"max_tokens\":4,\"temperature\":0,"
                  "\"logprobs\":true,\"kvlm_entropy\":true,\"stream\":true}");
    assert_int_equal(s.status, 200);
    json_t *events = sse_events(s.body);
    size_t k = 0, i;
    json_t *ev;
    json_array_foreach(events, i, ev) {
        json_t *entries = jget(ev, "choices.0.logprobs.content");
        for (size_t e = 0; e < json_array_size(entries); e++, k++) {
            const double got = jnum(json_array_get(entries, e), "entropy_bits");
            assert_true(k < json_array_size(content));
            assert_true(fabs(got - jnum(json_array_get(content, k), "entropy_bits")) < 1e-5);
            assert_true(got >= 0 && got <= log2(50257.0) + 1e-6);
        }
    }
    assert_int_equal(k, json_array_size(content));
    json_decref(events);
    resp_free(&s);
    json_decref(c);
}

/* A prompt of two full blocks run twice: after the first request its
 * blocks are evictable ('c'), the second finds them (a prefix hit). */
static void test_prefix_cache_blocks(void **state) {
    (void)state;
    char prompt[1024] = "", body[1400];
    for (int i = 0; i < 40; i++) snprintf(prompt + strlen(prompt), sizeof prompt - strlen(prompt), "%d,", 300 + i);
    prompt[strlen(prompt) - 1] = 0;
    snprintf(body, sizeof body, "{\"prompt\":[%s],\"max_tokens\":1}", prompt);
    json_t *before = get_json(a.port, "/kvlm/engine", NULL);
    json_decref(post(a.port, "/v1/completions", body, 200));
    json_t *s1 = get_json(a.port, "/kvlm/engine", NULL);
    check_pool(s1);
    assert_true(jint(s1, "kv.prefix_cache.cached_blocks") >= 2);
    assert_non_null(strchr(jstr(s1, "kv.blocks"), 'c'));
    assert_null(strchr(jstr(s1, "kv.blocks"), 'u'));
    json_decref(post(a.port, "/v1/completions", body, 200));
    json_t *s2 = get_json(a.port, "/kvlm/engine", NULL);
    check_pool(s2);
    assert_int_equal(jint(s2, "kv.prefix_cache.hits"), jint(before, "kv.prefix_cache.hits") + 1);
    assert_int_equal(jint(s2, "kv.prefix_cache.hit_tokens"), jint(before, "kv.prefix_cache.hit_tokens") + 32);
    assert_int_equal(jint(s2, "kv.prefix_cache.lookups"), jint(before, "kv.prefix_cache.lookups") + 2);
    assert_int_equal(jint(s2, "totals.requests"), jint(before, "totals.requests") + 2);
    assert_int_equal(jint(s2, "totals.cached_prompt_tokens"), jint(before, "totals.cached_prompt_tokens") + 32);
    assert_int_equal(json_array_size(jget(s2, "running")), 0);
    json_decref(before);
    json_decref(s1);
    json_decref(s2);
}

/* Reads an event stream for up to `ms`; returns the events' JSON. */
static json_t *read_events(int port, const char *path, int ms, int max_events, const char *headers) {
    int fd = connect_to(port);
    char head[512];
    snprintf(head, sizeof head, "GET %s HTTP/1.1\r\nHost: x\r\n%s\r\n", path, headers ? headers : "");
    if (write(fd, head, strlen(head)) != (ssize_t)strlen(head)) FAIL("write failed");
    struct timeval tv = {.tv_sec = 0, .tv_usec = 50000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap);
    json_t *events = json_array();
    const double end = kvlm_now() + ms * 1e-3;
    while (kvlm_now() < end && (int)json_array_size(events) < max_events && len + 1 < cap) {
        ssize_t r = read(fd, buf + len, cap - len - 1);
        if (r == 0) break;
        if (r > 0) len += (size_t)r;
        buf[len] = 0;
        json_array_clear(events);
        for (const char *p = buf; (p = strstr(p, "data: ")); p += 6) {
            const char *e = strstr(p, "\n\n");
            if (!e) break;
            json_t *j = json_loadb(p + 6, (size_t)(e - p - 6), 0, NULL);
            if (!j) FAIL("event is not JSON: %.80s", p);
            json_array_append_new(events, j);
        }
    }
    close(fd);
    if (strncmp(buf, "HTTP/1.1 200", 12) || !strcasestr(buf, "content-type: text/event-stream"))
        FAIL("%s: not an event stream: %.200s", path, buf);
    free(buf);
    return events;
}

static void test_stream(void **state) {
    (void)state;
    const double t0 = kvlm_now();
    json_t *ev = read_events(a.port, "/kvlm/engine/stream?interval_ms=100", 5000 * th_time_scale(), 3, NULL);
    assert_int_equal(json_array_size(ev), 3);
    for (size_t i = 0; i < 3; i++) check_pool(json_array_get(ev, i));
    assert_true(kvlm_now() - t0 >= 0.19); /* three events 100 ms apart */
    json_decref(ev);
    /* interval_ms below the floor is raised to 100: at most 4 events in 350 ms */
    ev = read_events(a.port, "/kvlm/engine/stream?interval_ms=1", 350, 100, NULL);
    assert_true(json_array_size(ev) >= 1 && json_array_size(ev) <= 4);
    json_decref(ev);
    /* the streams above were closed by their clients: the server serves on */
    json_t *h = get_json(a.port, "/kvlm/engine", NULL);
    assert_int_equal(json_array_size(jget(h, "running")), 0);
    json_decref(h);
    for (int i = 0; i < 100 * th_time_scale() && metric(a.port, "kvlm_http_connections_open") > 1; i++) usleep(10000);
    assert_true(metric(a.port, "kvlm_http_connections_open") == 1); /* the /metrics request itself */
}

static void test_history_and_model(void **state) {
    (void)state;
    json_decref(post(a.port, "/v1/completions", "{\"prompt\":\"O\",\"max_tokens\":20,\"ignore_eos\":true}", 200));
    usleep(1100000); /* the second of those tokens closes */
    json_t *h = get_json(a.port, "/kvlm/engine/history", NULL), *s = get_json(a.port, "/kvlm/engine", NULL);
    assert_int_equal(jint(h, "interval_s"), 1);
    const size_t n = json_array_size(jget(h, "t"));
    assert_true(n >= 1 && n <= 300);
    static const char *const series[] = {"ttft_ms_p50", "tpot_ms_p50", "output_tok_s", "running", "waiting",
                                         "kv_blocks_used"};
    for (int i = 0; i < 6; i++) assert_int_equal(json_array_size(jget(h, series[i])), n);
    double tokens = 0;
    int ttft = 0;
    for (size_t i = 0; i < n; i++) {
        if (i) assert_int_equal(json_integer_value(json_array_get(jget(h, "t"), i)),
                                json_integer_value(json_array_get(jget(h, "t"), i - 1)) + 1);
        tokens += json_number_value(json_array_get(jget(h, "output_tok_s"), i));
        ttft += json_is_number(json_array_get(jget(h, "ttft_ms_p50"), i));
    }
    /* every token generated so far is in a closed second (nothing runs now) */
    assert_true(tokens == (double)jint(s, "totals.tokens_generated"));
    assert_true(ttft >= 1);
    json_decref(h);
    json_decref(s);
    json_t *m = get_json(a.port, "/kvlm/model", NULL);
    assert_string_equal(jstr(m, "architecture"), "gpt2");
    assert_int_equal(jint(m, "n_layers"), 6);
    assert_int_equal(jint(m, "n_heads"), 4);
    assert_int_equal(jint(m, "n_kv_heads"), 4);
    assert_int_equal(jint(m, "head_dim"), 32);
    assert_int_equal(jint(m, "n_embd"), 128);
    assert_int_equal(jint(m, "vocab"), 50257);
    assert_int_equal(jint(m, "n_ctx"), 128);
    assert_int_equal(jint(m, "kv.bytes_per_token_by_dtype.f32"), 2 * 6 * 4 * 32 * 4);
    assert_int_equal(jint(m, "kv.bytes_per_token_by_dtype.f16"), 2 * 6 * 4 * 32 * 2);
    /* q8_0: a head of 32 is one block, 32 int8 and a 2-byte scale */
    assert_int_equal(jint(m, "kv.bytes_per_token_by_dtype.q8_0"), 2 * 6 * 4 * (32 + 2));
    assert_int_equal(jint(m, "kv.pool_tokens"), jint(m, "kv.pool_blocks") * 16);
    assert_int_equal(jint(m, "kv.max_seqs"), 4);
    assert_string_equal(jstr(m, "weights.dtype"), "f16");
    assert_true(jint(m, "weights.bytes") > 10000000 && jint(m, "weights.bytes") < 16000000);
    json_decref(m);
}

static void expect_400(int port, const char *path, const char *body, const char *param) {
    resp r = http(port, "POST", path, body);
    if (r.status != 400) fail_msg("POST %s %s: status %d: %s", path, body, r.status, r.body);
    json_t *j = json_loads(r.body, 0, NULL);
    assert_non_null(j);
    if (param) assert_string_equal(jstr(j, "error.param"), param);
    json_decref(j);
    resp_free(&r);
}

static void test_bad_bodies(void **state) {
    (void)state;
    static const struct {
        const char *body, *param;
    } measure[] = {
        {"{\"prompt\":\"x\",\"temperatures\":[0]}", "temperatures"},
        {"{\"prompt\":\"x\",\"temperatures\":[10.5]}", "temperatures"},
        {"{\"prompt\":\"x\",\"temperatures\":[]}", "temperatures"},
        {"{\"prompt\":\"x\",\"temperatures\":[1,1,1,1,1,1,1,1,1]}", "temperatures"},
        {"{\"prompt\":\"x\",\"temperatures\":\"1\"}", "temperatures"},
        {"{\"prompt\":\"x\",\"top\":0}", "top"},
        {"{\"prompt\":\"x\",\"top\":51}", "top"},
        {"{\"prompt\":\"x\",\"top\":2.5}", "top"},
        {"{\"prompt\":7}", "prompt"},
        {"{}", "prompt"},
        {"{\"prompt\":\"\"}", "prompt"},
        {"{\"prompt\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}", "prompt"},
        {"{\"prompt\":\"x\",\"temperature\":1}", "temperature"},
        {"[1]", NULL},
        {"{\"prompt\":", NULL},
    };
    for (size_t i = 0; i < sizeof measure / sizeof measure[0]; i++)
        expect_400(a.port, "/kvlm/measure/next-token", measure[i].body, measure[i].param);
    expect_400(a.port, "/v1/completions", "{\"prompt\":\"x\",\"logprobs\":1,\"kvlm_entropy\":1}", "kvlm_entropy");
    expect_400(a.port, "/v1/chat/completions",
               "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":true,\"kvlm_entropy\":\"yes\"}",
               "kvlm_entropy");
    expect_400(a.port, "/v1/completions", "{\"prompt\":\"x\",\"kvlm_entropy\":true}", "kvlm_entropy");
    static const char *const intervals[] = {"abc", "-5", "100ms", "1e3", "0x10"};
    for (size_t i = 0; i < sizeof intervals / sizeof intervals[0]; i++) {
        char path[64];
        snprintf(path, sizeof path, "/kvlm/engine/stream?interval_ms=%s", intervals[i]);
        resp r = http(a.port, "GET", path, NULL);
        if (r.status != 400 || !strstr(r.body, "interval_ms")) fail_msg("%s: status %d: %s", path, r.status, r.body);
        resp_free(&r);
    }
    resp r = http(a.port, "POST", "/kvlm/engine", "{}");
    assert_int_equal(r.status, 405);
    resp_free(&r);
    r = http(a.port, "GET", "/kvlm/measure/next-token", NULL);
    assert_int_equal(r.status, 405);
    resp_free(&r);
    /* the server still measures */
    json_decref(post(a.port, "/kvlm/measure/next-token", "{\"prompt\":\"x\",\"temperatures\":[1],\"top\":1}", 200));
}

/* Measurements between the steps of a running request leave its tokens
 * as they are alone. */
static void test_measure_beside_generation(void **state) {
    (void)state;
    const char *body = "{\"prompt\":\"JULIET:\",\"max_tokens\":100,\"temperature\":0,\"ignore_eos\":true}";
    json_t *alone = post(a.port, "/v1/completions", body, 200);
    int fd = connect_to(a.port);
    send_request(fd, "POST", "/v1/completions", body, strlen(body));
    for (int i = 0; i < 5; i++)
        json_decref(post(a.port, "/kvlm/measure/next-token", "{\"prompt\":\"JULIET: O Romeo\",\"top\":3}", 200));
    resp r = read_response(fd, "completion beside measurements");
    assert_int_equal(r.status, 200);
    json_t *beside = json_loads(r.body, 0, NULL);
    assert_string_equal(jstr(beside, "choices.0.text"), jstr(alone, "choices.0.text"));
    json_decref(beside);
    json_decref(alone);
    resp_free(&r);
}

/* -------------------------------------------------------- server B */

#define AUTH "Authorization: Bearer " KEY "\r\n"

/* Polls the snapshot until `want` holds (5 s, scaled); fails otherwise. */
static json_t *wait_snapshot(int (*want)(json_t *), const char *what) {
    for (int i = 0; i < 500 * th_time_scale(); i++) {
        json_t *s = get_json(b.port, "/kvlm/engine", AUTH);
        if (want(s)) return s;
        json_decref(s);
        usleep(10000);
    }
    fail_msg("no snapshot %s", what);
    return NULL;
}

static int decoding_two(json_t *s) {
    json_t *run = jget(s, "running");
    if (json_array_size(run) != 2) return 0;
    for (size_t i = 0; i < 2; i++)
        if (strcmp(jstr(json_array_get(run, i), "state"), "decode") || jint(json_array_get(run, i), "generated") < 2)
            return 0;
    return 1;
}

static int idle_pool(json_t *s) {
    const char *c = jstr(s, "kv.blocks");
    return json_array_size(jget(s, "running")) == 0 && !strchr(c, 'u') && !strchr(c, 's');
}

static void test_snapshot_while_decoding(void **state) {
    (void)state;
    char body[2048] = "{\"prompt\":[";
    for (int i = 0; i < 40; i++)
        snprintf(body + strlen(body), sizeof body - strlen(body), "%s%d", i ? "," : "", 1000 + 7 * i);
    strcat(body, "],\"max_tokens\":400,\"n\":2,\"stream\":true,\"ignore_eos\":true}");
    char head[512];
    snprintf(head, sizeof head, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n" AUTH "Content-Length: %zu\r\n\r\n",
             strlen(body));
    int fd = connect_to(b.port);
    assert_true(write(fd, head, strlen(head)) == (ssize_t)strlen(head));
    assert_true(write(fd, body, strlen(body)) == (ssize_t)strlen(body));
    char first[512];
    assert_true(read(fd, first, sizeof first - 1) > 0); /* the stream has started */
    json_t *s = wait_snapshot(decoding_two, "with both choices decoding");
    check_pool(s);
    json_t *run = jget(s, "running"), *refs = jget(s, "kv.refcounts");
    const size_t nb = (size_t)jint(s, "kv.n_blocks");
    int *seen = calloc(nb, sizeof(int));
    long long kv_tokens = 0;
    for (size_t c = 0; c < 2; c++) {
        json_t *ch = json_array_get(run, c);
        assert_true(!strncmp(jstr(ch, "id"), "cmpl-", 5));
        assert_string_equal(jstr(ch, "id"), jstr(json_array_get(run, 0), "id"));
        assert_int_equal(jint(ch, "prompt_tokens"), 40);
        assert_int_equal(jint(ch, "max_tokens"), 400);
        /* the newest token's K/V is written by the next step */
        assert_int_equal(jint(ch, "kv_tokens"), 40 + jint(ch, "generated") - 1);
        kv_tokens += jint(ch, "kv_tokens");
        json_t *bl = jget(ch, "blocks");
        assert_int_equal(json_array_size(bl), (size_t)(jint(ch, "kv_tokens") + 15) / 16);
        for (size_t k = 0; k < json_array_size(bl); k++) {
            const json_int_t id = json_integer_value(json_array_get(bl, k));
            assert_true(id >= 0 && (size_t)id < nb);
            seen[id]++;
        }
    }
    assert_int_equal(jint(json_array_get(run, 0), "choice") + jint(json_array_get(run, 1), "choice"), 1);
    /* every reference is a table entry of a running choice, and back */
    long long shared_extra = 0;
    for (size_t i = 0; i < nb; i++) {
        const json_int_t r = json_integer_value(json_array_get(refs, i));
        assert_int_equal(seen[i], r);
        if (r > 1) shared_extra += (r - 1) * 16; /* shared blocks are the prompt's full ones */
    }
    /* the two full prompt blocks are shared by the choices */
    assert_int_equal(jint(s, "kv.blocks_shared"), 2);
    assert_int_equal(jint(s, "kv.tokens_held"), kv_tokens - shared_extra);
    free(seen);
    json_decref(s);
    close(fd); /* hang up: the engine cancels the request and frees its blocks */
    s = wait_snapshot(idle_pool, "with the blocks back");
    check_pool(s);
    assert_int_equal(jint(s, "kv.blocks_used"), 0);
    assert_int_equal(jint(s, "kv.tokens_held"), 0);
    json_decref(s);
}

static void test_auth_and_cors(void **state) {
    (void)state;
    static const char *const gets[] = {"/kvlm/engine", "/kvlm/engine/history", "/kvlm/engine/stream", "/kvlm/model"};
    for (size_t i = 0; i < 4; i++) {
        resp r = req(b.port, "GET", gets[i], NULL, NULL);
        if (r.status != 401) fail_msg("GET %s without the key: %d", gets[i], r.status);
        assert_string_equal(resp_header(&r, "WWW-Authenticate"), "Bearer");
        resp_free(&r);
        r = req(b.port, "GET", gets[i], "Authorization: Bearer wrong\r\n", NULL);
        assert_int_equal(r.status, 401);
        resp_free(&r);
    }
    resp r = req(b.port, "POST", "/kvlm/measure/next-token", NULL, "{\"prompt\":\"x\"}");
    assert_int_equal(r.status, 401);
    resp_free(&r);
    /* with the key: answered, with the CORS header for the allowed origin */
    r = req(b.port, "GET", "/kvlm/engine", AUTH "Origin: " ORIGIN "\r\n", NULL);
    assert_int_equal(r.status, 200);
    assert_string_equal(resp_header(&r, "Access-Control-Allow-Origin"), ORIGIN);
    resp_free(&r);
    json_t *ev = read_events(b.port, "/kvlm/engine/stream", 3000 * th_time_scale(), 1, AUTH "Origin: " ORIGIN "\r\n");
    assert_int_equal(json_array_size(ev), 1);
    assert_string_equal(jstr(json_array_get(ev, 0), "model"), "gpt2-124m");
    json_decref(ev);
    /* no tokenizer: the measurement says so */
    r = req(b.port, "POST", "/kvlm/measure/next-token", AUTH, "{\"prompt\":\"x\"}");
    assert_int_equal(r.status, 400);
    assert_non_null(strstr(r.body, "no_tokenizer"));
    resp_free(&r);
}

/* -------------------------------------------------------- server C */

/* The preset's description (src/model/synthetic.c, "gemma3-1b-shape"): a
 * window of 512 on every layer but those with (l + 1) % 6 == 0. */
#define G3_WINDOW 512
#define G3_GLOBAL_EVERY 6
#define G3_PROMPT 600
#define MAX_SLICES 64

static int gcd_int(int x, int y) {
    while (y) {
        const int t = x % y;
        x = y;
        y = t;
    }
    return x;
}

/* The layer slices as the library plans them (runtime/kv_layout.h,
 * "Layer slices"): the layers grouped by window in the order of each
 * group's first layer, each group cut into slices of the greatest common
 * divisor of the groups' sizes. Fills window[] per slice; returns n_slices. */
static int plan_slices(int n_layers, const int *layer_window, int *window) {
    int groups[MAX_SLICES], sizes[MAX_SLICES], ng = 0;
    for (int l = 0; l < n_layers; l++) {
        int g = 0;
        while (g < ng && groups[g] != layer_window[l]) g++;
        if (g == ng) groups[ng] = layer_window[l], sizes[ng++] = 0;
        sizes[g]++;
    }
    int u = 0;
    for (int g = 0; g < ng; g++) u = gcd_int(u, sizes[g]);
    int n = 0;
    for (int g = 0; g < ng; g++)
        for (int k = 0; k < sizes[g] / u; k++) window[n++] = groups[g];
    return n;
}

static int decoding_long(json_t *s) {
    json_t *run = jget(s, "running");
    if (json_array_size(run) != 1) return 0;
    json_t *ch = json_array_get(run, 0);
    return !strcmp(jstr(ch, "state"), "decode") && jint(ch, "generated") >= 2;
}

static void test_layer_slices_while_decoding(void **state) {
    (void)state;
    if (start_server_in_tempdir(&c, "--synthetic gemma3-1b-shape --dtype q4_0 --block-size 16 --kv-blocks 2048"
                                    " --no-draft --threads 2 --max-seqs 1 --access-log off"))
        fail_msg("server C did not start");
    json_t *m = get_json(c.port, "/kvlm/model", NULL);
    const int n_layers = (int)jint(m, "n_layers");
    assert_int_equal(n_layers, 26);
    json_decref(m);
    int layer_window[MAX_SLICES], window[MAX_SLICES];
    for (int l = 0; l < n_layers; l++) layer_window[l] = (l + 1) % G3_GLOBAL_EVERY ? G3_WINDOW : 0;
    const int n_slices = plan_slices(n_layers, layer_window, window);
    /* 22 window and 4 global layers: slices of 2, the window ones first */
    assert_int_equal(n_slices, 13);

    char *body = malloc(16 * G3_PROMPT + 128);
    strcpy(body, "{\"prompt\":[");
    for (int i = 0; i < G3_PROMPT; i++)
        sprintf(body + strlen(body), "%s%d", i ? "," : "", 1 + (i * 7919) % 32000);
    strcat(body, "],\"max_tokens\":4000,\"stream\":true,\"ignore_eos\":true}");
    int fd = connect_to(c.port);
    send_request(fd, "POST", "/v1/completions", body, strlen(body));
    free(body);
    json_t *s = NULL;
    for (int i = 0; i < 12000 * th_time_scale() && !s; i++) { /* the prompt's prefill: up to 120 s, scaled */
        json_t *t = get_json(c.port, "/kvlm/engine", NULL);
        if (decoding_long(t)) s = t;
        else json_decref(t), usleep(10000);
    }
    if (!s) fail_msg("no snapshot with the request decoding");
    check_pool(s);
    const int bs = (int)jint(s, "kv.block_size");
    assert_int_equal(bs, 16);
    const size_t nb = (size_t)jint(s, "kv.n_blocks");
    json_t *ch = json_array_get(jget(s, "running"), 0), *refs = jget(s, "kv.refcounts");
    const int len = (int)jint(ch, "kv_tokens");
    assert_int_equal(jint(ch, "prompt_tokens"), G3_PROMPT);
    assert_int_equal(len, G3_PROMPT + jint(ch, "generated") - 1);
    json_t *blocks = jget(ch, "blocks"), *slices = jget(ch, "slices");
    assert_int_equal(json_array_size(slices), (size_t)n_slices);
    assert_true(json_equal(json_array_get(slices, 0), blocks));
    int *seen = calloc(nb, sizeof(int));
    int released_total = 0, listed = 0;
    for (int sl = 0; sl < n_slices; sl++) {
        json_t *tab = json_array_get(slices, (size_t)sl);
        assert_int_equal(json_array_size(tab), (size_t)(len + bs - 1) / bs);
        for (size_t k = 0; k < json_array_size(tab); k++) {
            const json_int_t id = json_integer_value(json_array_get(tab, k));
            /* kvcache.c: a window-W slice gives back block k once no later
             * query reads it: (k + 1) x block_size <= len - W + 1 */
            const int gone = window[sl] && (int)(k + 1) * bs <= len - window[sl] + 1;
            if (gone ? id != -1 : id < 0 || (size_t)id >= nb)
                fail_msg("slice %d (window %d), entry %zu of a %d-token sequence: %lld", sl, window[sl], k, len,
                         (long long)id);
            if (id >= 0) seen[id]++, listed++;
            released_total += gone;
        }
    }
    /* 600 + tokens: at least (600 - 511) / 16 = 5 blocks gone in each window slice */
    assert_true(released_total >= 5 * 11);
    /* over every slice's table, a block's reference count is the number of tables listing it */
    for (size_t i = 0; i < nb; i++)
        if (seen[i] != json_integer_value(json_array_get(refs, i)))
            fail_msg("block %zu: listed %d times, reference count %lld", i, seen[i],
                     (long long)json_integer_value(json_array_get(refs, i)));
    assert_int_equal(jint(s, "kv.blocks_used"), listed);
    free(seen);
    json_decref(s);
    close(fd); /* hang up: the engine cancels the request and frees its blocks */
    for (int i = 0; i < 500 * th_time_scale(); i++) {
        s = get_json(c.port, "/kvlm/engine", NULL);
        const int idle = json_array_size(jget(s, "running")) == 0 && jint(s, "kv.blocks_used") == 0;
        json_decref(s);
        if (idle) break;
        usleep(10000);
    }
    s = get_json(c.port, "/kvlm/engine", NULL);
    assert_int_equal(jint(s, "kv.blocks_used"), 0);
    json_decref(s);
    assert_int_equal(stop_server(&c), 0);
    th_rmtree(c.dir);
    c.dir[0] = 0;
}

int main(int argc, char **argv) {
    (void)argc;
    if (th_server_main_init(argv[0], "test_engine_view")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_next_token_matches_library),
        cmocka_unit_test(test_entropy_matches_library),
        cmocka_unit_test(test_prefix_cache_blocks),
        cmocka_unit_test(test_stream),
        cmocka_unit_test(test_history_and_model),
        cmocka_unit_test(test_bad_bodies),
        cmocka_unit_test(test_measure_beside_generation),
        cmocka_unit_test(test_snapshot_while_decoding),
        cmocka_unit_test(test_auth_and_cors),
        cmocka_unit_test(test_layer_slices_while_decoding),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
