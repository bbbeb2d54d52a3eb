/*
 * POST /v1/embeddings through kvlm serve, over HTTP. Servers: the Qwen3
 * fixture (tests/fixtures/llama/qwen3, no tokenizer: token ids only) with
 * an f32 KV cache, 2 sequence slots and 16 tokens per step, so a request's
 * inputs run in several slices and steps, with --pooling mean, and the
 * shipped Llama (a tokenizer; last-token pooling, its default).
 *
 * Checks: the vectors of token-id inputs equal the float64 reference
 * (tests/fixtures/embed/qwen3.expected.json, mean, normalised) within 1e-5
 * in the request's order, with usage.prompt_tokens the sum of their
 * tokens; base64 decodes to the same floats; `dimensions` cuts and
 * renormalises; a string equals its /tokenize ids; the 400s name the
 * parameter and input at fault (empty string, empty list, empty id list,
 * too long, outside the vocabulary, text without a tokenizer, bad
 * encoding_format or dimensions, an unknown key); GET is a 405; while a
 * greedy completion runs on the other sequence slot, embeddings still
 * equal the reference and the completion's text is the one it has alone;
 * /metrics counts embeddings requests, inputs and tokens; --timeout ends
 * one with a 503.
 */
#include <math.h>

#include "server_harness.h"

static server q, l, t; /* t: --timeout shorter than any request */

static int start_all(void **state) {
    (void)state;
    return start_server_in_tempdir(&q, "-m tests/fixtures/llama/qwen3 --threads 1 --max-seqs 2 --kv-dtype f32 "
                                       "--max-batch-tokens 16 --pooling mean") ||
           start_server_in_tempdir(&l, "-m models/shakespeare-llama/shakespeare-llama-q8_0.gguf --threads 1 "
                                       "--max-seqs 2") ||
           start_server_in_tempdir(&t, "-m models/shakespeare-llama/shakespeare-llama-q8_0.gguf --threads 1 "
                                       "--timeout 0.000001");
}

static int stop_all(void **state) {
    (void)state;
    int rc = stop_server(&q) | stop_server(&l) | stop_server(&t);
    th_rmtree(q.dir);
    th_rmtree(l.dir);
    th_rmtree(t.dir);
    return rc;
}

/* The reference's inputs as a JSON list of id lists, and its mean vectors. */
static json_t *reference(char **inputs) {
    json_t *ex = json_load_file("tests/fixtures/embed/qwen3.expected.json", 0, NULL);
    assert_non_null(ex);
    *inputs = json_dumps(json_object_get(ex, "inputs"), JSON_COMPACT);
    return ex;
}

static double vec_diff(json_t *got, json_t *want) {
    assert_int_equal(json_array_size(got), json_array_size(want));
    double d = 0;
    for (size_t k = 0; k < json_array_size(want); k++)
        d = fmax(d, fabs(json_number_value(json_array_get(got, k)) - json_number_value(json_array_get(want, k))));
    return d;
}

static size_t unbase64(const char *s, unsigned char *out, size_t cap) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (; *s && *s != '='; s++) {
        const char *p = strchr(tab, *s);
        assert_non_null(p);
        acc = acc << 6 | (uint32_t)(p - tab);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            assert_true(n < cap);
            out[n++] = (unsigned char)(acc >> bits);
        }
    }
    return n;
}

static void test_reference(void **state) {
    (void)state;
    char *inputs, body[4096];
    json_t *ex = reference(&inputs);
    json_t *want = json_object_get(json_object_get(json_object_get(ex, "poolings"), "mean"), "normalized");
    snprintf(body, sizeof body, "{\"model\":\"qwen3\",\"input\":%s}", inputs);
    json_t *j = post(q.port, "/v1/embeddings", body, 200);
    assert_string_equal(jstr(j, "object"), "list");
    assert_string_equal(jstr(j, "model"), "qwen3");
    json_t *in = json_loads(inputs, 0, NULL);
    json_int_t tokens = 0;
    for (size_t i = 0; i < json_array_size(in); i++) tokens += (json_int_t)json_array_size(json_array_get(in, i));
    assert_int_equal(jint(j, "usage.prompt_tokens"), tokens);
    assert_int_equal(jint(j, "usage.total_tokens"), tokens);
    assert_int_equal(json_array_size(jget(j, "data")), json_array_size(want));
    for (size_t i = 0; i < json_array_size(want); i++) {
        char p[64];
        snprintf(p, sizeof p, "data.%zu.index", i);
        assert_int_equal(jint(j, p), (json_int_t)i);
        snprintf(p, sizeof p, "data.%zu.object", i);
        assert_string_equal(jstr(j, p), "embedding");
        snprintf(p, sizeof p, "data.%zu.embedding", i);
        const double d = vec_diff(jget(j, p), json_array_get(want, i));
        printf("  input %zu: max|diff| from the float64 reference %.2e\n", i, d);
        assert_true(d < 1e-5);
    }
    /* base64: the same floats, little-endian float32 */
    snprintf(body, sizeof body, "{\"input\":%s,\"encoding_format\":\"base64\"}", inputs);
    json_t *b = post(q.port, "/v1/embeddings", body, 200);
    for (size_t i = 0; i < json_array_size(want); i++) {
        char p[64];
        snprintf(p, sizeof p, "data.%zu.embedding", i);
        unsigned char raw[64 * 4];
        assert_int_equal(unbase64(jstr(b, p), raw, sizeof raw), 64 * 4);
        json_t *f = jget(j, p);
        for (int k = 0; k < 64; k++) {
            const uint32_t u = raw[4 * k] | (uint32_t)raw[4 * k + 1] << 8 | (uint32_t)raw[4 * k + 2] << 16 |
                               (uint32_t)raw[4 * k + 3] << 24;
            float v;
            memcpy(&v, &u, 4);
            assert_true(v == (float)json_number_value(json_array_get(f, (size_t)k)));
        }
    }
    json_decref(b);
    /* dimensions 8: the first 8 values renormalised */
    snprintf(body, sizeof body, "{\"input\":%s,\"dimensions\":8}", inputs);
    json_t *d8 = post(q.port, "/v1/embeddings", body, 200);
    for (size_t i = 0; i < json_array_size(want); i++) {
        char p[64];
        snprintf(p, sizeof p, "data.%zu.embedding", i);
        json_t *w = json_array_get(want, i), *g = jget(d8, p);
        assert_int_equal(json_array_size(g), 8);
        double ss = 0;
        for (size_t k = 0; k < 8; k++) ss += pow(json_number_value(json_array_get(w, k)), 2);
        for (size_t k = 0; k < 8; k++)
            assert_true(fabs(json_number_value(json_array_get(g, k)) - json_number_value(json_array_get(w, k)) / sqrt(ss)) <
                        1e-5);
    }
    json_decref(d8);
    /* one id list alone is one input */
    json_t *one = post(q.port, "/v1/embeddings", "{\"input\":[42]}", 200);
    assert_int_equal(json_array_size(jget(one, "data")), 1);
    assert_true(vec_diff(jget(one, "data.0.embedding"), json_array_get(want, 2)) < 1e-5);
    json_decref(one);
    json_decref(in);
    json_decref(j);
    json_decref(ex);
    free(inputs);
}

static void test_text(void **state) {
    (void)state;
    json_t *t = post(l.port, "/tokenize", "{\"prompt\":\"ROMEO: But soft\"}", 200);
    char *ids = json_dumps(json_object_get(t, "tokens"), JSON_COMPACT), body[1024];
    snprintf(body, sizeof body, "{\"input\":[\"ROMEO: But soft\",%s]}", ids);
    json_t *j = post(l.port, "/v1/embeddings", body, 200);
    assert_int_equal(json_array_size(jget(j, "data.0.embedding")), 64); /* its hidden size */
    assert_true(vec_diff(jget(j, "data.0.embedding"), jget(j, "data.1.embedding")) == 0);
    assert_int_equal(jint(j, "usage.prompt_tokens"), 2 * (json_int_t)json_array_size(json_object_get(t, "tokens")));
    json_decref(j);
    json_decref(t);
    free(ids);
}

static void expect_400(server *sv, const char *body, const char *param, const char *code, const char *needle) {
    json_t *j = post(sv->port, "/v1/embeddings", body, 400);
    assert_string_equal(jstr(j, "error.type"), "invalid_request_error");
    if (param) assert_string_equal(jstr(j, "error.param"), param);
    assert_string_equal(jstr(j, "error.code"), code);
    if (!strstr(jstr(j, "error.message"), needle)) fail_msg("%s: %s", body, jstr(j, "error.message"));
    json_decref(j);
}

static void test_errors(void **state) {
    (void)state;
    expect_400(&l, "{\"input\":[\"a\",\"\"]}", "input[1]", "invalid_value", "'input[1]' is an empty string");
    expect_400(&l, "{\"input\":\"\"}", "input", "invalid_value", "empty string");
    expect_400(&l, "{\"input\":[]}", "input", "invalid_value", "'input' is an empty list");
    expect_400(&l, "{}", "input", "missing_parameter", "'input' is required");
    expect_400(&q, "{\"input\":[[1],[]]}", "input[1]", "invalid_value", "empty list of token ids");
    char body[1024];
    int o = snprintf(body, sizeof body, "{\"input\":[[5],[");
    for (int i = 0; i < 65; i++) o += snprintf(body + o, sizeof body - o, "%s7", i ? "," : "");
    snprintf(body + o, sizeof body - o, "]]}");
    expect_400(&q, body, "input[1]", "context_length_exceeded", "'input[1]' has 65 tokens; this model's context window is 64");
    expect_400(&q, "{\"input\":[[1,256]]}", "input[0]", "invalid_token", "'input[0][1]' = 256 is outside");
    expect_400(&q, "{\"input\":\"text\"}", "input", "no_tokenizer", "no tokenizer");
    expect_400(&q, "{\"input\":[1],\"encoding_format\":\"hex\"}", "encoding_format", "invalid_value", "\"base64\"");
    expect_400(&q, "{\"input\":[1],\"dimensions\":65}", "dimensions", "invalid_value", "from 1 to 64");
    expect_400(&q, "{\"input\":[1],\"dimensions\":0}", "dimensions", "invalid_value", "from 1 to 64");
    expect_400(&q, "{\"input\":[1],\"pooling\":\"mean\"}", "pooling", "unknown_parameter", "pooling");
    expect_400(&q, "{\"input\":[true]}", "input", "invalid_type", "'input[0]' must be a string or a list of token ids");
    resp r = http(q.port, "GET", "/v1/embeddings", NULL);
    assert_int_equal(r.status, 405);
    resp_free(&r);
}

#define COMPLETION "{\"prompt\":[1,17,200],\"max_tokens\":40,\"temperature\":0}"

static void *complete(void *arg) {
    json_t **out = arg;
    *out = post(q.port, "/v1/completions", COMPLETION, 200);
    return NULL;
}

static void test_alongside_completion(void **state) {
    (void)state;
    json_t *alone = post(q.port, "/v1/completions", COMPLETION, 200);
    char *inputs, body[4096];
    json_t *ex = reference(&inputs);
    json_t *want = json_object_get(json_object_get(json_object_get(ex, "poolings"), "mean"), "normalized");
    snprintf(body, sizeof body, "{\"input\":%s}", inputs);
    json_t *during = NULL;
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, complete, &during), 0);
    for (int round = 0; round < 3; round++) {
        json_t *j = post(q.port, "/v1/embeddings", body, 200);
        for (size_t i = 0; i < json_array_size(want); i++) {
            char p[64];
            snprintf(p, sizeof p, "data.%zu.embedding", i);
            assert_true(vec_diff(jget(j, p), json_array_get(want, i)) < 1e-5);
        }
        json_decref(j);
    }
    pthread_join(th, NULL);
    assert_non_null(during);
    assert_string_equal(jstr(during, "choices.0.text"), jstr(alone, "choices.0.text"));
    assert_int_equal(jint(during, "usage.completion_tokens"), 40);
    json_decref(during);
    json_decref(alone);
    json_decref(ex);
    free(inputs);
}

/* /metrics counts the embeddings answered, their inputs and tokens, and
 * times them; a request that fails (400) is not counted. --timeout ends
 * an embeddings request as it ends a completion's wait: here at once, a
 * 503 "timeout". */
static void test_metrics_and_timeout(void **state) {
    (void)state;
    const double req0 = metric(l.port, "kvlm_embedding_requests_total"),
                 in0 = metric(l.port, "kvlm_embedding_inputs_total"),
                 tok0 = metric(l.port, "kvlm_embedding_input_tokens_total"),
                 h0 = metric(l.port, "kvlm_embedding_request_seconds_count");
    assert_true(req0 >= 0 && in0 >= 0 && tok0 >= 0 && h0 == req0);
    json_t *a = post(l.port, "/v1/embeddings", "{\"input\":[\"ROMEO:\",\"Good morrow, cousin.\"]}", 200);
    json_t *b = post(l.port, "/v1/embeddings", "{\"input\":[[10,11,12]]}", 200);
    json_decref(post(l.port, "/v1/embeddings", "{\"input\":\"\"}", 400));
    assert_int_equal(metric(l.port, "kvlm_embedding_requests_total"), req0 + 2);
    assert_int_equal(metric(l.port, "kvlm_embedding_inputs_total"), in0 + 3);
    assert_int_equal(metric(l.port, "kvlm_embedding_input_tokens_total"),
                     tok0 + jint(a, "usage.prompt_tokens") + 3);
    assert_int_equal(metric(l.port, "kvlm_embedding_request_seconds_count"), h0 + 2);
    assert_true(metric(l.port, "kvlm_embedding_request_seconds_sum") > 0);
    json_decref(a);
    json_decref(b);
    resp r = http(t.port, "POST", "/v1/embeddings", "{\"input\":\"ROMEO:\"}");
    assert_int_equal(r.status, 503);
    assert_non_null(strstr(r.body, "\"code\":\"timeout\""));
    assert_non_null(strstr(r.body, "--timeout"));
    resp_free(&r);
    assert_int_equal(metric(t.port, "kvlm_embedding_requests_total"), 0);
}

int main(int argc, char **argv) {
    (void)argc;
    if (th_server_main_init(argv[0], "test_embed_server")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference),
        cmocka_unit_test(test_text),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_alongside_completion),
        cmocka_unit_test(test_metrics_and_timeout),
    };
    return cmocka_run_group_tests(tests, start_all, stop_all) || dirty_exit;
}
