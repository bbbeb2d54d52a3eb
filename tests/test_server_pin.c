/*
 * Pinned prefixes over HTTP (/v1/cache/pin) on the shipped Llama (blocks of
 * 16 tokens, context 128, a pool of 24 blocks: pins may hold 24 - 8 = 16):
 *   - a pin warms the prompt (prefilled_tokens), covers its whole blocks
 *     (tokens, blocks, bytes exactly), is listed, and shows on /metrics;
 *   - after eviction pressure (other prompts through the pool, evictions
 *     counted) a request starting with the pinned prompt reuses every
 *     pinned token, while an unpinned prompt run before it was evicted;
 *   - a pin that would pass the bound is refused with 409 and pins nothing;
 *     a long request still runs beside the pins;
 *   - DELETE unpins (404 for an unknown id), bad methods, ids and bodies are
 *     refused, and with --api-key the endpoints need the key;
 *   - with --kv-cache-dir the pins are recorded there: a server restarted
 *     on it pins them again from the disk tier (every block a disk hit,
 *     nothing prefilled; the warm-up ran in chunks of --max-prefill-tokens
 *     before); a corrupt record is reported, counted, removed and ignored;
 *   - with two models each has its own pins: POST by the body's "model",
 *     GET and DELETE by ?model=, the first model without one, 404
 *     model_not_found for an unknown one.
 */
#include <dirent.h>

#include "server_harness.h"

#define LLAMA_GGUF "models/shakespeare-llama/shakespeare-llama-q8_0.gguf"
#define BS 16

/* A prompt of distinct words from seed, about `words` of them. */
static void text(char *buf, size_t cap, int seed, int words) {
    static const char *const w[] = {"king", "queen", "sword", "crown", "night", "love", "death", "honour", "blood",
                                    "heart", "grace", "fortune", "time", "heaven", "earth", "fool", "lord", "friend"};
    size_t at = 0;
    for (int i = 0; i < words && at + 20 < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%s", i ? " " : "", w[(seed * 7 + i * (seed + 3)) % 18]);
}

/* A /metrics value once the engine thread has published it (the answer
 * of a pin can arrive before the metrics of its turn): waits up to 10 s
 * for want, returns the last value read. */
static double metric_eq(int port, const char *name, double want) {
    double v = -1;
    for (int i = 0; i < 1000 * th_time_scale() && (v = metric(port, name)) != want; i++) usleep(10000);
    return v;
}

static int n_tokens(int port, const char *prompt) {
    char body[4096];
    snprintf(body, sizeof body, "{\"prompt\":\"%s\"}", prompt);
    json_t *t = post(port, "/tokenize", body, 200);
    const int n = (int)jint(t, "count");
    json_decref(t);
    return n;
}

static int cached_of(int port, const char *prompt) {
    char body[4096];
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":4,\"temperature\":0}", prompt);
    json_t *r = post(port, "/v1/completions", body, 200);
    const int c = (int)jint(r, "usage.prompt_tokens_details.cached_tokens");
    json_decref(r);
    return c;
}

static json_t *pin(int port, const char *prompt, int status) {
    char body[4096];
    snprintf(body, sizeof body, "{\"prompt\":\"%s\"}", prompt);
    return post(port, "/v1/cache/pin", body, status);
}

static void test_pin_hit_bound(void **state) {
    (void)state;
    server sv = {0};
    if (start_server_in_tempdir(&sv, "-m " LLAMA_GGUF " --kv-blocks 24")) fail_msg("no server");
    char p1[2048], other[2048], unpinned[2048];
    text(p1, sizeof p1, 1, 40);
    const int n1 = n_tokens(sv.port, p1), want1 = n1 / BS * BS;
    assert_true(want1 >= 2 * BS && n1 < 100);
    json_t *r = pin(sv.port, p1, 201);
    assert_int_equal(jint(r, "id"), 1);
    assert_int_equal(jint(r, "tokens"), want1);
    assert_int_equal(jint(r, "blocks"), want1 / BS);
    assert_int_equal(jint(r, "bytes"), want1 * 512); /* f16: 512 bytes per token */
    assert_int_equal(jint(r, "prompt_tokens"), n1);
    assert_int_equal(jint(r, "prefilled_tokens"), want1); /* the whole blocks; the tail is not pinned */
    assert_int_equal(jint(r, "prefill_steps"), (want1 + 63) / 64); /* chunks of --max-prefill-tokens (64) */
    json_decref(r);
    resp l = http(sv.port, "GET", "/v1/cache/pin", NULL);
    assert_int_equal(l.status, 200);
    json_t *lj = json_loads(l.body, 0, NULL);
    assert_int_equal(json_array_size(jget(lj, "data")), 1);
    assert_int_equal(jint(lj, "data.0.tokens"), want1);
    assert_int_equal(jint(lj, "pinned_blocks"), want1 / BS);
    assert_int_equal(jint(lj, "max_pinned_blocks"), 16);
    assert_int_equal(jint(lj, "blocks_total"), 24);
    json_decref(lj);
    resp_free(&l);
    assert_true(metric_eq(sv.port, "kvlm_kv_blocks_pinned", want1 / BS) == want1 / BS);
    /* an unpinned prompt, then pressure: 8 prompts of ~7 blocks each */
    text(unpinned, sizeof unpinned, 2, 40);
    cached_of(sv.port, unpinned);
    const double ev0 = metric(sv.port, "kvlm_kv_evictions_total");
    for (int i = 0; i < 8; i++) {
        text(other, sizeof other, 10 + i, 90);
        cached_of(sv.port, other);
    }
    assert_true(metric(sv.port, "kvlm_kv_evictions_total") > ev0 + 20);
    assert_int_equal(cached_of(sv.port, unpinned), 0);
    char longer[2400];
    snprintf(longer, sizeof longer, "%s and so farewell", p1);
    assert_int_equal(cached_of(sv.port, longer), want1);
    /* the bound: pins of ~6 blocks until one would pass 16 */
    int pinned = want1 / BS, refused = 0;
    for (int i = 0; i < 4 && !refused; i++) {
        text(other, sizeof other, 30 + i, 90);
        const int n = n_tokens(sv.port, other);
        if (pinned + n / BS > 16) {
            json_t *e = pin(sv.port, other, 409);
            assert_string_equal(jstr(e, "error.code"), "pin_limit");
            json_decref(e);
            refused = 1;
        } else {
            json_decref(pin(sv.port, other, 201));
            pinned += n / BS;
        }
    }
    assert_true(refused);
    assert_true(metric_eq(sv.port, "kvlm_kv_blocks_pinned", pinned) == pinned);
    /* a request of nearly the whole context still runs */
    text(other, sizeof other, 50, 110);
    char body[4096];
    snprintf(body, sizeof body, "{\"prompt\":\"%s\",\"max_tokens\":4}", other);
    json_decref(post(sv.port, "/v1/completions", body, 200));
    assert_int_equal(cached_of(sv.port, longer), want1);
    /* unpin */
    resp d = http(sv.port, "DELETE", "/v1/cache/pin/1", NULL);
    assert_int_equal(d.status, 200);
    assert_non_null(strstr(d.body, "\"deleted\":true"));
    resp_free(&d);
    d = http(sv.port, "DELETE", "/v1/cache/pin/1", NULL);
    assert_int_equal(d.status, 404);
    resp_free(&d);
    assert_true(metric_eq(sv.port, "kvlm_kv_blocks_pinned", pinned - want1 / BS) == pinned - want1 / BS);
    assert_int_equal(stop_server(&sv), 0);
    th_rmtree(sv.dir);
}

static void test_bad_requests_and_key(void **state) {
    (void)state;
    server sv = {0};
    if (start_server_in_tempdir(&sv, "-m " LLAMA_GGUF)) fail_msg("no server");
    static const struct { const char *method, *path, *body; int status; const char *code; } cases[] = {
        {"PUT", "/v1/cache/pin", "{}", 405, "method_not_allowed"},
        {"POST", "/v1/cache/pin/1", "{}", 405, "method_not_allowed"},
        {"DELETE", "/v1/cache/pin/abc", NULL, 404, "not_found"},
        {"DELETE", "/v1/cache/pin/0", NULL, 404, "not_found"},
        {"DELETE", "/v1/cache/pin/7", NULL, 404, "not_found"},
        {"POST", "/v1/cache/pin", "{\"prompt\":\"king\"}", 400, "invalid_prompt"},
        {"POST", "/v1/cache/pin", "{\"prompt\":\"king\",\"n\":2}", 400, NULL},
        {"POST", "/v1/cache/pin", "[1]", 400, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        resp r = http(sv.port, cases[i].method, cases[i].path, cases[i].body);
        if (r.status != cases[i].status || (cases[i].code && !strstr(r.body, cases[i].code)))
            fail_msg("%s %s: %d %s", cases[i].method, cases[i].path, r.status, r.body);
        resp_free(&r);
    }
    assert_int_equal(stop_server(&sv), 0);
    th_rmtree(sv.dir);
    server sk = {0};
    if (start_server_in_tempdir(&sk, "-m " LLAMA_GGUF " --api-key sekrit")) fail_msg("no server");
    resp r = http(sk.port, "GET", "/v1/cache/pin", NULL);
    assert_int_equal(r.status, 401);
    resp_free(&r);
    r = http(sk.port, "POST", "/v1/cache/pin", "{\"prompt\":\"king queen sword crown night love death\"}");
    assert_int_equal(r.status, 401);
    resp_free(&r);
    assert_int_equal(stop_server(&sk), 0);
    th_rmtree(sk.dir);
}

static int count_suffix(const char *dir, const char *suffix) {
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    const size_t ls = strlen(suffix);
    while (d && (e = readdir(d)))
        if (strlen(e->d_name) > ls && !strcmp(e->d_name + strlen(e->d_name) - ls, suffix)) n++;
    if (d) closedir(d);
    return n;
}

static int log_has(const server *sv, const char *what) {
    char *log = th_read_file(sv->log, NULL);
    const int has = log && strstr(log, what);
    free(log);
    return has;
}

/* Tokens of prompt for model (NULL: the default). */
static int n_tokens_of(int port, const char *model, const char *prompt) {
    char body[4096];
    snprintf(body, sizeof body, "{%s%s%s\"prompt\":\"%s\"}", model ? "\"model\":\"" : "", model ? model : "",
             model ? "\"," : "", prompt);
    json_t *t = post(port, "/tokenize", body, 200);
    const int n = (int)jint(t, "count");
    json_decref(t);
    return n;
}

static json_t *pins_of(int port, const char *query) {
    char path[128];
    snprintf(path, sizeof path, "/v1/cache/pin%s", query);
    resp r = http(port, "GET", path, NULL);
    if (r.status != 200) fail_msg("GET %s: %d %s", path, r.status, r.body);
    json_t *j = json_loads(r.body, 0, NULL);
    resp_free(&r);
    return j;
}

/* Two models behind one server: each has its own pins, numbered from 1,
 * in its own pool; POST reads the body's "model", GET and DELETE take
 * ?model=; without one, the first model; an unknown model is a 404 naming
 * it, and pins nothing. */
static void test_pins_per_model(void **state) {
    (void)state;
    server sv = {0};
    if (start_server_in_tempdir(&sv, "-m models/shakespeare-gpt2 -m " LLAMA_GGUF " --alias bard --threads 1"
                                     " --max-seqs 2 --no-draft"))
        fail_msg("no server");
    char prompt[1024], body[2048];
    text(prompt, sizeof prompt, 5, 40);
    const int nb = n_tokens_of(sv.port, "bard", prompt), ng = n_tokens_of(sv.port, NULL, prompt);
    assert_true(nb >= 2 * BS && ng >= 2 * BS);
    snprintf(body, sizeof body, "{\"model\":\"bard\",\"prompt\":\"%s\"}", prompt);
    json_t *p = post(sv.port, "/v1/cache/pin", body, 201);
    assert_string_equal(jstr(p, "model"), "bard");
    assert_int_equal(jint(p, "id"), 1);
    assert_int_equal(jint(p, "prompt_tokens"), nb);
    assert_int_equal(jint(p, "tokens"), nb / BS * BS);
    const json_int_t bard_blocks = jint(p, "blocks");
    json_decref(p);
    json_t *l = pins_of(sv.port, "?model=bard");
    assert_string_equal(jstr(l, "model"), "bard");
    assert_int_equal(json_array_size(jget(l, "data")), 1);
    assert_int_equal(jint(l, "data.0.tokens"), nb / BS * BS);
    assert_int_equal(jint(l, "pinned_blocks"), bard_blocks);
    json_decref(l);
    l = pins_of(sv.port, ""); /* the default model pinned nothing */
    assert_string_equal(jstr(l, "model"), "shakespeare-gpt2");
    assert_int_equal(json_array_size(jget(l, "data")), 0);
    assert_int_equal(jint(l, "pinned_blocks"), 0);
    json_decref(l);
    /* the bard request that starts with the pinned prompt reuses its blocks */
    snprintf(body, sizeof body, "{\"model\":\"bard\",\"prompt\":\"%s love\",\"max_tokens\":1}", prompt);
    json_t *c = post(sv.port, "/v1/completions", body, 200);
    assert_int_equal(jint(c, "usage.prompt_tokens_details.cached_tokens"), nb / BS * BS);
    json_decref(c);
    snprintf(body, sizeof body, "{\"prompt\":\"%s\"}", prompt); /* no model: the first */
    p = post(sv.port, "/v1/cache/pin", body, 201);
    assert_string_equal(jstr(p, "model"), "shakespeare-gpt2");
    assert_int_equal(jint(p, "id"), 1);
    assert_int_equal(jint(p, "tokens"), ng / BS * BS);
    json_decref(p);
    static const struct { const char *method, *path, *body; } unknown[] = {
        {"GET", "/v1/cache/pin?model=nope", NULL},
        {"DELETE", "/v1/cache/pin/1?model=nope", NULL},
        {"POST", "/v1/cache/pin", "{\"model\":\"nope\",\"prompt\":\"king queen sword crown night love death\"}"},
    };
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        resp r = http(sv.port, unknown[i].method, unknown[i].path, unknown[i].body);
        if (r.status != 404 || !strstr(r.body, "model_not_found") || !strstr(r.body, "'nope'"))
            fail_msg("%s %s: %d %s", unknown[i].method, unknown[i].path, r.status, r.body);
        resp_free(&r);
    }
    resp r = http(sv.port, "DELETE", "/v1/cache/pin/1?model=bard", NULL);
    assert_int_equal(r.status, 200);
    json_t *d = json_loads(r.body, 0, NULL);
    assert_string_equal(jstr(d, "model"), "bard");
    assert_true(json_is_true(json_object_get(d, "deleted")));
    json_decref(d);
    resp_free(&r);
    r = http(sv.port, "DELETE", "/v1/cache/pin/1?model=bard", NULL); /* gone */
    assert_int_equal(r.status, 404);
    resp_free(&r);
    l = pins_of(sv.port, "?model=bard");
    assert_int_equal(json_array_size(jget(l, "data")), 0);
    json_decref(l);
    l = pins_of(sv.port, "?model=shakespeare-gpt2"); /* the other model's pin stays */
    assert_int_equal(json_array_size(jget(l, "data")), 1);
    assert_int_equal(jint(l, "data.0.id"), 1);
    json_decref(l);
    assert_int_equal(stop_server(&sv), 0);
    th_rmtree(sv.dir);
}

static void test_pin_restart(void **state) {
    (void)state;
    server sv = {0};
    char *d = th_tempdir();
    assert_non_null(d);
    snprintf(sv.dir, sizeof sv.dir, "%s", d);
    free(d);
    char kvdir[700], args[1024], p1[2048], longer[2400];
    snprintf(kvdir, sizeof kvdir, "%s/kv", sv.dir);
    snprintf(args, sizeof args, "-m " LLAMA_GGUF " --kv-cache-dir %s --max-prefill-tokens 16", kvdir);
    if (start_server(&sv, args)) fail_msg("no server");
    text(p1, sizeof p1, 1, 40);
    snprintf(longer, sizeof longer, "%s and so farewell", p1);
    const int n1 = n_tokens(sv.port, p1), want1 = n1 / BS * BS;
    assert_true(want1 >= 2 * BS && n1 < 100);
    json_t *r = pin(sv.port, p1, 201);
    assert_int_equal(jint(r, "tokens"), want1);
    assert_int_equal(jint(r, "cached_tokens"), 0);
    assert_int_equal(jint(r, "prefilled_tokens"), want1);
    assert_int_equal(jint(r, "prefill_steps"), want1 / 16); /* one chunk per engine iteration */
    json_decref(r);
    assert_int_equal(count_suffix(kvdir, ".pins"), 1);
    assert_true(metric_eq(sv.port, "kvlm_kv_tier_disk_files", want1 / BS) == want1 / BS);
    assert_int_equal(stop_server(&sv), 0);
    /* Restarted on the directory: the pin again, its blocks from disk. */
    if (start_server(&sv, args)) fail_msg("no server");
    assert_true(metric_eq(sv.port, "kvlm_kv_blocks_pinned", want1 / BS) == want1 / BS);
    assert_true(metric(sv.port, "kvlm_kv_tier_disk_hits_total") == want1 / BS);
    /* one restoring lookup, from disk, in the restore-latency histogram */
    assert_true(metric(sv.port, "kvlm_kv_tier_restore_latency_seconds_count{tier=\"disk\"}") == 1);
    assert_true(metric(sv.port, "kvlm_kv_tier_restore_latency_seconds_bucket{tier=\"disk\",le=\"+Inf\"}") == 1);
    assert_true(metric(sv.port, "kvlm_kv_tier_restore_latency_seconds_count{tier=\"ram\"}") == 0);
    assert_true(metric(sv.port, "kvlm_kv_tier_restore_latency_seconds_sum{tier=\"disk\"}") > 0);
    char line[200];
    snprintf(line, sizeof line, "a recorded pin of %d tokens: pinned again (%d tokens from the KV cache and its tiers, 0 "
             "prefilled)", want1, want1);
    assert_true(log_has(&sv, line));
    resp l = http(sv.port, "GET", "/v1/cache/pin", NULL);
    json_t *lj = json_loads(l.body, 0, NULL);
    assert_int_equal(json_array_size(jget(lj, "data")), 1);
    assert_int_equal(jint(lj, "data.0.tokens"), want1);
    json_decref(lj);
    resp_free(&l);
    assert_int_equal(cached_of(sv.port, longer), want1);
    assert_int_equal(stop_server(&sv), 0);
    /* A flipped bit in the record: reported, counted, removed, no pin. */
    DIR *dd = opendir(kvdir);
    struct dirent *e;
    char path[1400] = "";
    while (dd && (e = readdir(dd)))
        if (strstr(e->d_name, ".pins")) snprintf(path, sizeof path, "%s/%s", kvdir, e->d_name);
    if (dd) closedir(dd);
    size_t n = 0;
    char *bytes = th_read_file(path, &n);
    assert_non_null(bytes);
    assert_true(n > 60);
    bytes[60] ^= 4;
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, n, f), n);
    fclose(f);
    free(bytes);
    if (start_server(&sv, args)) fail_msg("no server");
    assert_true(log_has(&sv, "is corrupt; ignored and removed"));
    assert_true(metric(sv.port, "kvlm_kv_tier_bad_files_total") == 1);
    assert_true(metric(sv.port, "kvlm_kv_blocks_pinned") == 0);
    assert_int_equal(count_suffix(kvdir, ".pins"), 0);
    assert_int_equal(stop_server(&sv), 0);
    th_rmtree(sv.dir);
}

int main(int argc, char **argv) {
    (void)argc;
    if (th_server_main_init(argv[0], "test_server_pin")) return 1;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_pin_hit_bound),
                                       cmocka_unit_test(test_bad_requests_and_key),
                                       cmocka_unit_test(test_pin_restart),
                                       cmocka_unit_test(test_pins_per_model)};
    const int rc = cmocka_run_group_tests(tests, NULL, NULL);
    return rc || dirty_exit;
}
