/*
 * Fill-in-the-middle through kvlm serve, over HTTP: POST /infill and
 * /v1/completions with `suffix`. Servers: tests/fixtures/fim/fim_mini.gguf
 * (a tokenizer with FIM tokens, tools/make_fim_fixture.py) and the shipped
 * Llama, whose tokenizer has none.
 *
 * Checks: /infill runs the 56-token prompt llama-server (de3ff81) builds
 * for the same body and file, and greedy decoding picks the tokens
 * llama-server picked there (253 then 26, "9"); its reply carries
 * llama.cpp's "content" and "stop" beside the OpenAI fields, streamed
 * chunks too, and the streamed content is the whole one; `suffix` on
 * /v1/completions runs the same prompt and text; the shipped model
 * answers 400 fim_not_supported naming the missing tokens on both paths;
 * GET /infill is a 405.
 */
#include "server_harness.h"

#include "app/sbuf.h"

static server f, l;

static int start_all(void **state) {
    (void)state;
    return start_server_in_tempdir(&f, "-m tests/fixtures/fim/fim_mini.gguf --threads 1 --max-seqs 2") ||
           start_server_in_tempdir(&l, "-m models/shakespeare-llama/shakespeare-llama-q8_0.gguf --threads 1 "
                                       "--max-seqs 2");
}

static int stop_all(void **state) {
    (void)state;
    int rc = stop_server(&f) | stop_server(&l);
    th_rmtree(f.dir);
    th_rmtree(l.dir);
    return rc;
}

#define CODE "\"def f(x):\\n    return\""
#define AFTER "\"\\nprint(f(2))\\n\""

static void test_infill(void **state) {
    (void)state;
    json_t *j = post(f.port, "/infill", "{\"input_prefix\":" CODE ",\"input_suffix\":" AFTER ",\"n_predict\":2,"
                     "\"temperature\":0,\"logprobs\":1,\"return_tokens_as_token_ids\":true}", 200);
    assert_int_equal(jint(j, "usage.prompt_tokens"), 56);
    assert_int_equal(jint(j, "usage.completion_tokens"), 2);
    assert_string_equal(jstr(j, "choices.0.logprobs.tokens.0"), "token_id:253");
    assert_string_equal(jstr(j, "choices.0.logprobs.tokens.1"), "token_id:26");
    assert_string_equal(jstr(j, "choices.0.text"), "9");
    assert_string_equal(jstr(j, "content"), "9");
    assert_true(json_is_true(jget(j, "stop")));
    assert_string_equal(jstr(j, "object"), "text_completion");
    json_decref(j);
    /* the same prompt as a completion with a suffix */
    j = post(f.port, "/v1/completions", "{\"prompt\":" CODE ",\"suffix\":" AFTER ",\"max_tokens\":2,"
             "\"temperature\":0}", 200);
    assert_int_equal(jint(j, "usage.prompt_tokens"), 56);
    assert_string_equal(jstr(j, "choices.0.text"), "9");
    assert_null(jget(j, "content"));
    json_decref(j);
}

static void test_infill_stream(void **state) {
    (void)state;
    resp r = http(f.port, "POST", "/infill", "{\"input_prefix\":" CODE ",\"input_suffix\":" AFTER ",\"n_predict\":4,"
                  "\"temperature\":0,\"stream\":true}");
    assert_int_equal(r.status, 200);
    json_t *evs = sse_events(r.body);
    const size_t n = json_array_size(evs);
    assert_true(n >= 1);
    sbuf content = {0}, text = {0};
    for (size_t i = 0; i < n; i++) {
        json_t *ev = json_array_get(evs, i);
        sbuf_adds(&content, jstr(ev, "content"));
        sbuf_adds(&text, jstr(ev, "choices.0.text"));
        assert_int_equal(json_is_true(jget(ev, "stop")), i == n - 1);
    }
    json_t *j = post(f.port, "/infill", "{\"input_prefix\":" CODE ",\"input_suffix\":" AFTER ",\"n_predict\":4,"
                     "\"temperature\":0}", 200);
    assert_string_equal(content.data ? content.data : "", jstr(j, "content"));
    assert_string_equal(text.data ? text.data : "", jstr(j, "content"));
    json_decref(j);
    sbuf_free(&content);
    sbuf_free(&text);
    json_decref(evs);
    resp_free(&r);
}

static void test_no_fim_tokens(void **state) {
    (void)state;
    json_t *j = post(l.port, "/infill", "{\"input_prefix\":\"a\",\"input_suffix\":\"b\"}", 400);
    assert_string_equal(jstr(j, "error.code"), "fim_not_supported");
    assert_string_equal(jstr(j, "error.type"), "invalid_request_error");
    assert_string_equal(jstr(j, "error.message"),
                        "fill-in-the-middle is not supported by this model: its tokenizer names no prefix "
                        "(tokenizer.ggml.fim_pre_token_id, <|fim_prefix|>), suffix "
                        "(tokenizer.ggml.fim_suf_token_id, <|fim_suffix|>), middle "
                        "(tokenizer.ggml.fim_mid_token_id, <|fim_middle|>) tokens");
    json_decref(j);
    j = post(l.port, "/v1/completions", "{\"prompt\":\"a\",\"suffix\":\"b\"}", 400);
    assert_string_equal(jstr(j, "error.code"), "fim_not_supported");
    assert_string_equal(jstr(j, "error.param"), "suffix");
    json_decref(j);
    /* an empty suffix is a plain completion */
    j = post(l.port, "/v1/completions", "{\"prompt\":\"a\",\"suffix\":\"\",\"max_tokens\":1}", 200);
    json_decref(j);
    resp r = http(f.port, "GET", "/infill", NULL);
    assert_int_equal(r.status, 405);
    resp_free(&r);
}

int main(int argc, char **argv) {
    (void)argc;
    if (th_server_main_init(argv[0], "test_fim_server")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_infill),
        cmocka_unit_test(test_infill_stream),
        cmocka_unit_test(test_no_fim_tokens),
    };
    return cmocka_run_group_tests(tests, start_all, stop_all) || dirty_exit;
}
