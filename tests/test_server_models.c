/*
 * Several models behind one kvlm serve, over HTTP: the shipped GPT-2 and
 * Llama (the Llama with --alias bard) under --max-loaded-bytes 20000000,
 * which holds either (16064768 and 7516416 bytes of weights and KV pool
 * with --max-seqs 2) but not both.
 *
 * Checks: /v1/models lists both before any loads ("unloaded", the alias's
 * second name, the budget); requests route by id, by the alias's file
 * name and, without "model", to the first model (/kvlm/model names the
 * architecture; a completion names the id; the two models' greedy texts
 * differ, the alias and the file name give the same); an unknown model is
 * a 404 in each API's error shape (OpenAI code model_not_found, Anthropic
 * not_found_error) on every endpoint that takes a model; loading one
 * model unloads the other (least recently used, idle); a model with an
 * open engine stream is not unloaded (503 model_busy, Retry-After) until
 * the stream closes; /metrics labels each model's series model="ID" (embeddings too) under
 * one TYPE line and counts loads and unloads. A server whose loads wait
 * for a gate file shows the model "loading", answers /health and /metrics
 * meanwhile, and answers the waiting request once the load ends; a model
 * whose file is missing answers 500 model_load_failed while the other
 * serves. Usage errors (an --alias with no -m before it, two for one -m,
 * two models with one id, --served-model-name with several, a
 * --models-dir without models) exit 2. A server over
 * --models-dir models lists the two model directories and not the
 * tokenizer-only one.
 */
#include "server_harness.h"

static server sv;

#define BUDGET "20000000"

static int start_all(void **state) {
    (void)state;
    return start_server_in_tempdir(&sv, "-m models/shakespeare-gpt2 -m models/shakespeare-llama --alias bard "
                                        "--threads 1 --max-seqs 2 --no-draft --max-loaded-bytes " BUDGET);
}

static int stop_all(void **state) {
    (void)state;
    int rc = stop_server(&sv);
    th_rmtree(sv.dir);
    return rc;
}

static json_t *get_json(const char *path, int status) {
    resp r = http(sv.port, "GET", path, NULL);
    if (r.status != status) fail_msg("GET %s: status %d (want %d): %s", path, r.status, status, r.body);
    json_t *j = json_loads(r.body, 0, NULL);
    if (!j) fail_msg("GET %s: not JSON: %s", path, r.body);
    resp_free(&r);
    return j;
}

/* "loaded" or "unloaded" for model index i of /v1/models. */
static const char *status_of(int i) {
    static char out[32];
    json_t *j = get_json("/v1/models", 200);
    char path[64];
    snprintf(path, sizeof path, "data.%d.status.value", i);
    snprintf(out, sizeof out, "%s", jstr(j, path));
    json_decref(j);
    return out;
}

static void test_list_before_use(void **state) {
    (void)state;
    json_t *j = get_json("/v1/models", 200);
    assert_int_equal(json_array_size(jget(j, "data")), 2);
    assert_string_equal(jstr(j, "data.0.id"), "shakespeare-gpt2");
    assert_string_equal(jstr(j, "data.1.id"), "bard");
    assert_string_equal(jstr(j, "data.1.aliases.0"), "shakespeare-llama");
    assert_string_equal(jstr(j, "data.0.status.value"), "unloaded");
    assert_string_equal(jstr(j, "data.1.status.value"), "unloaded");
    assert_int_equal(jint(j, "kvlm_max_loaded_bytes"), 20000000);
    json_decref(j);
    j = get_json("/v1/models/bard", 200);
    assert_string_equal(jstr(j, "id"), "bard");
    json_decref(j);
    resp r = http(sv.port, "GET", "/health", NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
}

static char *greedy(const char *model) {
    char body[256];
    snprintf(body, sizeof body, "{%s%s%s\"prompt\":\"ROMEO:\",\"max_tokens\":5,\"temperature\":0,\"ignore_eos\":true}",
             model ? "\"model\":\"" : "", model ? model : "", model ? "\"," : "");
    json_t *j = post(sv.port, "/v1/completions", body, 200);
    assert_string_equal(jstr(j, "model"), model && strcmp(model, "shakespeare-llama") ? model
                                          : model                                  ? "bard"
                                                                                   : "shakespeare-gpt2");
    assert_int_equal(jint(j, "usage.prompt_tokens"), 3);
    assert_int_equal(jint(j, "usage.completion_tokens"), 5);
    char *t = strdup(jstr(j, "choices.0.text"));
    json_decref(j);
    return t;
}

static void test_routing(void **state) {
    (void)state;
    json_t *j = get_json("/kvlm/model", 200); /* no model: the first */
    assert_string_equal(jstr(j, "architecture"), "gpt2");
    json_decref(j);
    j = get_json("/kvlm/model?model=bard", 200);
    assert_string_equal(jstr(j, "architecture"), "llama");
    assert_string_equal(jstr(j, "model"), "bard");
    json_decref(j);
    char *g0 = greedy(NULL), *g1 = greedy("shakespeare-gpt2"), *b0 = greedy("bard"), *b1 = greedy("shakespeare-llama");
    assert_string_equal(g0, g1);
    assert_string_equal(b0, b1);
    assert_true(strcmp(g0, b0) != 0);
    free(g0), free(g1), free(b0), free(b1);
    j = post(sv.port, "/v1/chat/completions",
             "{\"model\":\"bard\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}],\"max_tokens\":2}", 200);
    assert_string_equal(jstr(j, "model"), "bard");
    json_decref(j);
    j = post(sv.port, "/v1/messages",
             "{\"model\":\"shakespeare-gpt2\",\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}",
             200);
    assert_string_equal(jstr(j, "model"), "shakespeare-gpt2");
    json_decref(j);
    j = post(sv.port, "/tokenize", "{\"model\":\"shakespeare-llama\",\"prompt\":\"ROMEO:\"}", 200);
    assert_int_equal(jint(j, "count"), 3);
    assert_int_equal(jint(j, "tokens.0"), 33676);
    json_decref(j);
}

static void check_404(const char *path, const char *body, int anthropic) {
    resp r = http(sv.port, "POST", path, body);
    if (r.status != 404) fail_msg("POST %s: status %d (want 404): %s", path, r.status, r.body);
    json_t *j = json_loads(r.body, 0, NULL);
    assert_non_null(j);
    if (anthropic) {
        assert_string_equal(jstr(j, "type"), "error");
        assert_string_equal(jstr(j, "error.type"), "not_found_error");
    } else {
        assert_string_equal(jstr(j, "error.code"), "model_not_found");
        assert_string_equal(jstr(j, "error.param"), "model");
    }
    assert_non_null(strstr(jstr(j, anthropic ? "error.message" : "error.message"), "'nope'"));
    json_decref(j);
    resp_free(&r);
}

static void test_unknown_model(void **state) {
    (void)state;
    check_404("/v1/completions", "{\"model\":\"nope\",\"prompt\":\"a\"}", 0);
    check_404("/v1/chat/completions", "{\"model\":\"nope\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}", 0);
    check_404("/v1/responses", "{\"model\":\"nope\",\"input\":\"a\"}", 0);
    check_404("/infill", "{\"model\":\"nope\",\"input_prefix\":\"a\",\"input_suffix\":\"b\"}", 0);
    check_404("/v1/embeddings", "{\"model\":\"nope\",\"input\":\"a\"}", 0);
    check_404("/tokenize", "{\"model\":\"nope\",\"prompt\":\"a\"}", 0);
    check_404("/detokenize", "{\"model\":\"nope\",\"tokens\":[1]}", 0);
    check_404("/v1/messages", "{\"model\":\"nope\",\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}",
              1);
    check_404("/v1/messages/count_tokens", "{\"model\":\"nope\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}", 1);
    resp r = http(sv.port, "GET", "/v1/models/nope", NULL);
    assert_int_equal(r.status, 404);
    resp_free(&r);
    r = http(sv.port, "GET", "/kvlm/model?model=nope", NULL);
    assert_int_equal(r.status, 404);
    resp_free(&r);
}

/* The budget holds one model: the one used last stays. */
static void test_lru_unload(void **state) {
    (void)state;
    free(greedy("bard"));
    assert_string_equal(status_of(0), "unloaded");
    assert_string_equal(status_of(1), "loaded");
    const double unloads = metric(sv.port, "kvlm_model_unloads_total{model=\"bard\"}");
    free(greedy(NULL));
    assert_string_equal(status_of(0), "loaded");
    assert_string_equal(status_of(1), "unloaded");
    assert_true(metric(sv.port, "kvlm_model_unloads_total{model=\"bard\"}") == unloads + 1);
    assert_true(metric(sv.port, "kvlm_models_loaded_bytes") == 16064768);
}

/* An open engine stream on bard keeps it loaded: gpt2 cannot load. */
static void test_no_unload_in_use(void **state) {
    (void)state;
    free(greedy("bard"));
    int fd = connect_to(sv.port);
    send_request(fd, "GET", "/kvlm/engine/stream?model=bard&interval_ms=50", NULL, 0);
    char buf[512];
    assert_true(read(fd, buf, sizeof buf - 1) > 0); /* the headers: the stream is open */
    resp r = http(sv.port, "POST", "/v1/completions", "{\"model\":\"shakespeare-gpt2\",\"prompt\":\"a\",\"max_tokens\":1}");
    assert_int_equal(r.status, 503);
    assert_non_null(strcasestr(r.head, "retry-after: 1"));
    json_t *j = json_loads(r.body, 0, NULL);
    assert_string_equal(jstr(j, "error.code"), "model_busy");
    json_decref(j);
    resp_free(&r);
    assert_string_equal(status_of(1), "loaded");
    assert_string_equal(status_of(0), "unloaded");
    close(fd);
    /* the server sees the stream closed at its next event */
    int status = 0;
    for (int i = 0; i < 500 * th_time_scale() && status != 200; i++) {
        r = http(sv.port, "POST", "/v1/completions", "{\"model\":\"shakespeare-gpt2\",\"prompt\":\"a\",\"max_tokens\":1}");
        status = r.status;
        if (status != 200 && status != 503) fail_msg("status %d: %s", status, r.body);
        resp_free(&r);
        if (status != 200) usleep(20000);
    }
    assert_int_equal(status, 200);
    assert_string_equal(status_of(0), "loaded");
    assert_string_equal(status_of(1), "unloaded");
}

static int count(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static void test_metrics_labels(void **state) {
    (void)state;
    const double before = metric(sv.port, "kvlm_generation_tokens_total{model=\"shakespeare-gpt2\"}"),
                 bard = metric(sv.port, "kvlm_generation_tokens_total{model=\"bard\"}");
    assert_true(before > 0 && bard > 0);
    free(greedy("shakespeare-gpt2"));
    assert_true(metric(sv.port, "kvlm_generation_tokens_total{model=\"shakespeare-gpt2\"}") == before + 5);
    assert_true(metric(sv.port, "kvlm_generation_tokens_total{model=\"bard\"}") == bard);
    assert_true(metric(sv.port, "kvlm_model_loaded{model=\"shakespeare-gpt2\"}") == 1);
    assert_true(metric(sv.port, "kvlm_model_loaded{model=\"bard\"}") == 0);
    assert_true(metric(sv.port, "kvlm_kv_blocks_total{model=\"shakespeare-gpt2\"}") == 16);
    assert_true(metric(sv.port, "kvlm_model_loads_total{model=\"bard\"}") >= 2);
    /* embeddings are counted for the model that ran them */
#define EMB(name, model) metric(sv.port, "kvlm_embedding_" name "{model=\"" model "\"}")
    const double e_req = EMB("requests_total", "shakespeare-gpt2"), e_in = EMB("inputs_total", "shakespeare-gpt2"),
                 e_bard = EMB("requests_total", "bard");
    assert_true(e_req >= 0 && e_in >= 0 && e_bard >= 0);
    json_decref(post(sv.port, "/v1/embeddings", "{\"model\":\"shakespeare-gpt2\",\"input\":[\"a\",\"b c\"]}", 200));
    assert_true(EMB("requests_total", "shakespeare-gpt2") == e_req + 1);
    assert_true(EMB("inputs_total", "shakespeare-gpt2") == e_in + 2);
    assert_true(EMB("requests_total", "bard") == e_bard);
#undef EMB
    resp r = http(sv.port, "GET", "/metrics", NULL);
    assert_int_equal(count(r.body, "# TYPE kvlm_requests_running "), 1);
    assert_int_equal(count(r.body, "kvlm_requests_running{model="), 2);
    assert_int_equal(count(r.body, "kvlm_time_to_first_token_seconds_count{model="), 2);
    assert_int_equal(count(r.body, "kvlm_http_responses_total{code=\"200\"}"), 1); /* server-wide, unlabelled */
    assert_int_equal(count(r.body, "\nkvlm_requests_running "), 0); /* no unlabelled sample */
    resp_free(&r);
}

static int gated_port;

static void *post_bard(void *arg) {
    resp *r = arg;
    *r = http(gated_port, "POST", "/v1/completions", "{\"model\":\"bard\",\"prompt\":\"a\",\"max_tokens\":2}");
    return NULL;
}

/* A request for a model that is loading waits for it; the server answers
 * everything else meanwhile. The loads wait for a gate file. */
static void test_waits_for_load(void **state) {
    (void)state;
    server g;
    new_dir(&g);
    char gate[600], args[200];
    snprintf(gate, sizeof gate, "%s/gate", g.dir);
    snprintf(args, sizeof args, "-m models/shakespeare-gpt2 -m models/shakespeare-llama --alias bard --threads 1 "
             "--max-seqs 2");
    setenv("KVLM_TEST_LOAD_GATE", gate, 1);
    int rc = start_server_as(&g, args, 1);
    unsetenv("KVLM_TEST_LOAD_GATE");
    assert_int_equal(rc, 0);
    gated_port = g.port;
    resp waiting = {0};
    pthread_t th;
    pthread_create(&th, NULL, post_bard, &waiting);
    int loading = 0;
    for (int i = 0; i < 1000 * th_time_scale() && !loading; i++) {
        resp r = http(g.port, "GET", "/v1/models", NULL);
        loading = strstr(r.body, "\"loading\"") != NULL;
        resp_free(&r);
        if (!loading) usleep(10000);
    }
    assert_true(loading);
    resp r = http(g.port, "GET", "/health", NULL); /* answered while the model loads */
    assert_int_equal(r.status, 200);
    resp_free(&r);
    r = http(g.port, "GET", "/metrics", NULL);
    assert_non_null(strstr(r.body, "kvlm_model_loaded{model=\"bard\"} 0\n"));
    resp_free(&r);
    FILE *f = fopen(gate, "w");
    assert_non_null(f);
    fclose(f);
    pthread_join(th, NULL);
    assert_int_equal(waiting.status, 200);
    json_t *j = json_loads(waiting.body, 0, NULL);
    assert_string_equal(jstr(j, "model"), "bard");
    assert_int_equal(jint(j, "usage.completion_tokens"), 2);
    json_decref(j);
    resp_free(&waiting);
    assert_int_equal(stop_server(&g), 0);
    th_rmtree(g.dir);
}

/* A model whose files do not load: 500 model_load_failed naming it; the
 * other model still serves. */
static void test_load_fails(void **state) {
    (void)state;
    server b;
    new_dir(&b);
    char args[700];
    snprintf(args, sizeof args, "-m models/shakespeare-llama -m %s/missing.gguf --threads 1 --max-seqs 2", b.dir);
    assert_int_equal(start_server_as(&b, args, 1), 0);
    resp r = http(b.port, "POST", "/v1/completions", "{\"model\":\"missing\",\"prompt\":\"a\",\"max_tokens\":1}");
    assert_int_equal(r.status, 500);
    json_t *j = json_loads(r.body, 0, NULL);
    assert_string_equal(jstr(j, "error.code"), "model_load_failed");
    assert_non_null(strstr(jstr(j, "error.message"), "'missing'"));
    json_decref(j);
    resp_free(&r);
    j = post(b.port, "/v1/completions", "{\"prompt\":\"a\",\"max_tokens\":1}", 200);
    assert_string_equal(jstr(j, "model"), "shakespeare-llama");
    json_decref(j);
    assert_int_equal(stop_server(&b), 0);
    th_rmtree(b.dir);
}

/* Exit status of `kvlm serve ARGS` (usage errors exit before listening). */
static int serve_status(const char *args) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "%s serve %s 2>/dev/null", kvlm_bin, args);
    const int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_usage_errors(void **state) {
    (void)state;
    assert_int_equal(serve_status("--alias x -m models/shakespeare-gpt2"), 2);          /* no -m before it */
    assert_int_equal(serve_status("-m models/shakespeare-gpt2 --alias a --alias b"), 2); /* two for one -m */
    assert_int_equal(serve_status("-m models/shakespeare-gpt2 -m models/shakespeare-gpt2 --port 0"), 2); /* one id */
    assert_int_equal(serve_status("-m models/shakespeare-gpt2 -m models/shakespeare-llama --served-model-name z"), 2);
    assert_int_equal(serve_status("-m models/shakespeare-gpt2 --models-dir models/gpt2-tokenizer"), 2); /* no model */
}

static void test_models_dir(void **state) {
    (void)state;
    server d;
    memset(&d, 0, sizeof d);
    assert_int_equal(start_server_in_tempdir(&d, "--models-dir models --threads 1 --max-seqs 2"), 0);
    resp r = http(d.port, "GET", "/v1/models", NULL);
    json_t *j = json_loads(r.body, 0, NULL);
    assert_int_equal(json_array_size(jget(j, "data")), 4); /* every shipped model, in name order */
    assert_string_equal(jstr(j, "data.0.id"), "shakespeare-chat");
    assert_string_equal(jstr(j, "data.1.id"), "shakespeare-gpt2");
    assert_string_equal(jstr(j, "data.2.id"), "shakespeare-llama");
    assert_string_equal(jstr(j, "data.3.id"), "shakespeare-moe");
    json_decref(j);
    resp_free(&r);
    assert_int_equal(stop_server(&d), 0);
    th_rmtree(d.dir);
}

int main(int argc, char **argv) {
    (void)argc;
    if (th_server_main_init(argv[0], "test_server_models")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_list_before_use), cmocka_unit_test(test_routing),
        cmocka_unit_test(test_unknown_model),   cmocka_unit_test(test_lru_unload),
        cmocka_unit_test(test_no_unload_in_use), cmocka_unit_test(test_metrics_labels),
        cmocka_unit_test(test_waits_for_load),  cmocka_unit_test(test_load_fails),
        cmocka_unit_test(test_usage_errors),    cmocka_unit_test(test_models_dir),
    };
    return cmocka_run_group_tests(tests, start_all, stop_all) || dirty_exit;
}
