/*
 * Anthropic Messages and OpenAI Responses through kvlm serve, over HTTP
 * (the SDK test, tests/sdk/sdk.test.mjs, drives the same endpoints with
 * the official clients). Server: the shipped Llama (GGUF) with a short
 * template in the hermes tool-call syntax.
 *
 * Checks: a stop sequence ends a message with stop_reason "stop_sequence"
 * naming which one, streamed and whole alike (the same text, usage and
 * the event names in Anthropic's order); count_tokens is the prompt
 * /v1/messages runs; errors on /v1/messages paths (400, 404, 405) are in
 * Anthropic's shape and on /v1/responses in OpenAI's; a stored response
 * comes back from GET /v1/responses/{id} as it was sent, one made with
 * store false does not; previous_response_id continues the conversation;
 * a Responses stream numbers its events from 0 and ends with the object
 * the store keeps; with a reasoning template (its answer opens with
 * <think>) the output is a thinking block, whole and streamed, and on
 * /v1/responses a reasoning item with the reasoning_text events; usage
 * counts the reasoning tokens on both OpenAI APIs, whole and streamed.
 */
#include "server_harness.h"

#include "app/sbuf.h"

#define GGUF "models/shakespeare-llama/shakespeare-llama-q8_0.gguf"

static server l, t; /* t: a reasoning template (tests/fixtures/tool_template/think-mini.jinja) */

static int start_all(void **state) {
    (void)state;
    return start_server_in_tempdir(&l, "-m " GGUF " --threads 1 --max-seqs 2 --chat-template "
                                       "tests/fixtures/tool_template/hermes-mini.jinja") ||
           start_server_in_tempdir(&t, "-m " GGUF " --threads 1 --max-seqs 2 --chat-template "
                                       "tests/fixtures/tool_template/think-mini.jinja");
}

static int stop_all(void **state) {
    (void)state;
    int rc = stop_server(&l) | stop_server(&t);
    th_rmtree(l.dir);
    th_rmtree(t.dir);
    return rc;
}

/* The events of an `event: NAME` / `data: JSON` stream: [[name, data], ...]. */
static json_t *named_events(const char *body) {
    json_t *arr = json_array();
    for (const char *p = body; (p = strstr(p, "event: "));) {
        const char *nl = strchr(p, '\n');
        if (!nl || strncmp(nl + 1, "data: ", 6)) FAIL("malformed event: %s", p);
        const char *end = strstr(nl, "\n\n");
        if (!end) FAIL("unterminated event: %s", p);
        json_t *j = json_loadb(nl + 7, (size_t)(end - nl - 7), 0, NULL);
        if (!j) FAIL("event data is not JSON: %.*s", (int)(end - p), p);
        json_array_append_new(arr, json_pack("[s%o]", p + 7, (size_t)(nl - p - 7), j));
        p = end + 2;
    }
    return arr;
}

static const char *ev_name(json_t *evs, size_t i) { return json_string_value(json_array_get(json_array_get(evs, i), 0)); }
static json_t *ev_data(json_t *evs, size_t i) { return json_array_get(json_array_get(evs, i), 1); }

static void test_stop_sequence(void **state) {
    (void)state;
    static const char body[] = "{\"max_tokens\":60,\"temperature\":0,\"stop_sequences\":[\"zzz\",\"the\"],"
                               "\"messages\":[{\"role\":\"user\",\"content\":\"ROMEO:\"}]%s}";
    char b[512];
    snprintf(b, sizeof b, body, "");
    json_t *m = post(l.port, "/v1/messages", b, 200);
    assert_string_equal(jstr(m, "type"), "message");
    assert_memory_equal(jstr(m, "id"), "msg_", 4);
    assert_string_equal(jstr(m, "stop_reason"), "stop_sequence");
    assert_string_equal(jstr(m, "stop_sequence"), "the");
    const char *text = jstr(m, "content.0.text");
    assert_null(strstr(text, "the"));
    const json_int_t out = jint(m, "usage.output_tokens");
    assert_true(out >= 1 && out < 60);
    snprintf(b, sizeof b, body, ",\"stream\":true");
    resp r = http(l.port, "POST", "/v1/messages", b);
    assert_int_equal(r.status, 200);
    json_t *evs = named_events(r.body);
    const size_t n = json_array_size(evs);
    assert_true(n >= 7);
    static const char *const head[] = {"message_start", "ping", "content_block_start"};
    for (size_t i = 0; i < 3; i++) assert_string_equal(ev_name(evs, i), head[i]);
    sbuf streamed = {0};
    for (size_t i = 3; i < n - 3; i++) {
        assert_string_equal(ev_name(evs, i), "content_block_delta");
        assert_string_equal(jstr(ev_data(evs, i), "delta.type"), "text_delta");
        sbuf_adds(&streamed, jstr(ev_data(evs, i), "delta.text"));
    }
    assert_string_equal(ev_name(evs, n - 3), "content_block_stop");
    assert_string_equal(ev_name(evs, n - 2), "message_delta");
    assert_string_equal(ev_name(evs, n - 1), "message_stop");
    for (size_t i = 0; i < n; i++) assert_string_equal(jstr(ev_data(evs, i), "type"), ev_name(evs, i));
    assert_string_equal(streamed.data, text);
    json_t *delta = ev_data(evs, n - 2);
    assert_string_equal(jstr(delta, "delta.stop_reason"), "stop_sequence");
    assert_string_equal(jstr(delta, "delta.stop_sequence"), "the");
    assert_int_equal(jint(delta, "usage.output_tokens"), out);
    assert_int_equal(jint(delta, "usage.input_tokens") + jint(delta, "usage.cache_read_input_tokens"),
                     jint(m, "usage.input_tokens") + jint(m, "usage.cache_read_input_tokens"));
    sbuf_free(&streamed);
    json_decref(evs);
    resp_free(&r);
    /* count_tokens: the prompt the same body runs */
    json_t *c = post(l.port, "/v1/messages/count_tokens",
                     "{\"messages\":[{\"role\":\"user\",\"content\":\"ROMEO:\"}]}", 200);
    assert_int_equal(jint(c, "input_tokens"), jint(m, "usage.input_tokens") + jint(m, "usage.cache_read_input_tokens"));
    json_decref(c);
    json_decref(m);
}

static void expect_anthropic_error(const char *method, const char *path, const char *body, int status,
                                   const char *type, const char *message) {
    resp r = http(l.port, method, path, body);
    if (r.status != status) fail_msg("%s %s: %d %s", method, path, r.status, r.body);
    json_t *j = json_loads(r.body, 0, NULL);
    assert_non_null(j);
    assert_string_equal(jstr(j, "type"), "error");
    assert_string_equal(jstr(j, "error.type"), type);
    assert_string_equal(jstr(j, "error.message"), message);
    assert_int_equal(json_object_size(j), 2);
    json_decref(j);
    resp_free(&r);
}

static void test_error_shapes(void **state) {
    (void)state;
    expect_anthropic_error("POST", "/v1/messages", "{\"messages\":[", 400, "invalid_request_error",
                           "the request body is not valid JSON: it ends before the JSON value is complete (line 1, "
                           "column 13)");
    expect_anthropic_error("POST", "/v1/messages", "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":"
                           "\"x\"}],\"model\":\"claude-x\"}", 404, "not_found_error",
                           "The model 'claude-x' does not exist; this server serves 'shakespeare-llama-q8_0'");
    expect_anthropic_error("POST", "/v1/messages/batches", "{}", 404, "not_found_error",
                           "no endpoint POST /v1/messages/batches");
    expect_anthropic_error("GET", "/v1/messages", NULL, 405, "invalid_request_error",
                           "/v1/messages takes POST, not GET");
    expect_anthropic_error("POST", "/v1/messages", "{\"max_tokens\":100,\"messages\":[{\"role\":\"user\",\"content\":"
                           "\"x\"}],\"tools\":[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}],"
                           "\"tool_choice\":{\"type\":\"tool\",\"name\":\"g\"}}", 400, "invalid_request_error",
                           "'tool_choice' names the function 'g', which is not in 'tools'");
    /* Responses: OpenAI's shape */
    resp r = http(l.port, "POST", "/v1/responses", "{\"input\":\"x\",\"seed\":3}");
    assert_int_equal(r.status, 400);
    json_t *j = json_loads(r.body, 0, NULL);
    assert_string_equal(jstr(j, "error.type"), "invalid_request_error");
    assert_string_equal(jstr(j, "error.code"), "unknown_parameter");
    assert_string_equal(jstr(j, "error.param"), "seed");
    json_decref(j);
    resp_free(&r);
}

static void test_responses_store(void **state) {
    (void)state;
    json_t *a = post(l.port, "/v1/responses", "{\"input\":\"ROMEO:\",\"instructions\":\"Speak.\",\"max_output_tokens\":4}",
                     200);
    assert_memory_equal(jstr(a, "id"), "resp_", 5);
    assert_string_equal(jstr(a, "status"), "incomplete");
    assert_string_equal(jstr(a, "incomplete_details.reason"), "max_output_tokens");
    assert_int_equal(jint(a, "usage.output_tokens"), 4);
    assert_string_equal(jstr(a, "instructions"), "Speak.");
    char path[128];
    snprintf(path, sizeof path, "/v1/responses/%s", jstr(a, "id"));
    resp r = http(l.port, "GET", path, NULL);
    assert_int_equal(r.status, 200);
    json_t *got = json_loads(r.body, 0, NULL);
    assert_true(json_equal(got, a));
    json_decref(got);
    resp_free(&r);
    /* continued: the stored input and answer come first, the instructions do not */
    char body[256];
    snprintf(body, sizeof body, "{\"input\":\"JULIET:\",\"previous_response_id\":\"%s\",\"max_output_tokens\":2}",
             jstr(a, "id"));
    json_t *b = post(l.port, "/v1/responses", body, 200);
    assert_string_equal(jstr(b, "previous_response_id"), jstr(a, "id"));
    json_t *t = post(l.port, "/tokenize", "{\"messages\":[{\"role\":\"user\",\"content\":\"ROMEO:\"}]}", 200);
    json_t *ti = post(l.port, "/tokenize", "{\"messages\":[{\"role\":\"system\",\"content\":\"Speak.\"},"
                                           "{\"role\":\"user\",\"content\":\"ROMEO:\"}]}", 200);
    assert_int_equal(jint(a, "usage.input_tokens"), jint(ti, "count"));
    assert_true(jint(b, "usage.input_tokens") > jint(t, "count") + 4);
    json_decref(t);
    json_decref(ti);
    /* store false: not kept */
    json_t *c = post(l.port, "/v1/responses", "{\"input\":\"ROMEO:\",\"store\":false,\"max_output_tokens\":1}", 200);
    assert_true(json_is_false(jget(c, "store")));
    snprintf(path, sizeof path, "/v1/responses/%s", jstr(c, "id"));
    r = http(l.port, "GET", path, NULL);
    assert_int_equal(r.status, 404);
    resp_free(&r);
    snprintf(body, sizeof body, "{\"input\":\"x\",\"previous_response_id\":\"%s\"}", jstr(c, "id"));
    r = http(l.port, "POST", "/v1/responses", body);
    assert_int_equal(r.status, 404);
    assert_non_null(strstr(r.body, "\"code\":\"previous_response_not_found\""));
    resp_free(&r);
    json_decref(a);
    json_decref(b);
    json_decref(c);
}

static void test_responses_stream(void **state) {
    (void)state;
    resp r = http(l.port, "POST", "/v1/responses", "{\"input\":\"ROMEO:\",\"max_output_tokens\":6,\"stream\":true}");
    assert_int_equal(r.status, 200);
    json_t *evs = named_events(r.body);
    const size_t n = json_array_size(evs);
    static const char *const head[] = {"response.created", "response.in_progress", "response.output_item.added",
                                       "response.content_part.added"};
    static const char *const tail[] = {"response.output_text.done", "response.content_part.done",
                                       "response.output_item.done", "response.incomplete"};
    assert_true(n > 8);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(jint(ev_data(evs, i), "sequence_number"), (json_int_t)i);
        assert_string_equal(jstr(ev_data(evs, i), "type"), ev_name(evs, i));
        if (i < 4) assert_string_equal(ev_name(evs, i), head[i]);
        else if (i >= n - 4) assert_string_equal(ev_name(evs, i), tail[i - (n - 4)]);
        else assert_string_equal(ev_name(evs, i), "response.output_text.delta");
    }
    json_t *last = jget(ev_data(evs, n - 1), "response");
    char path[128];
    snprintf(path, sizeof path, "/v1/responses/%s", jstr(last, "id"));
    resp g = http(l.port, "GET", path, NULL);
    assert_int_equal(g.status, 200);
    json_t *stored = json_loads(g.body, 0, NULL);
    assert_true(json_equal(stored, last));
    assert_string_equal(jstr(stored, "output.0.content.0.text"), jstr(ev_data(evs, n - 4), "text"));
    json_decref(stored);
    resp_free(&g);
    json_decref(evs);
    resp_free(&r);
}

/* The template opens the answer with <think>: what the model writes is a
 * thinking block, whole and streamed, exactly the chat API's raw content
 * for the same greedy request (the shipped model never closes it). */
static void test_thinking(void **state) {
    (void)state;
    static const char conv[] = "\"max_tokens\":12,\"temperature\":0,\"messages\":[{\"role\":\"user\",\"content\":"
                               "\"ROMEO:\"},{\"role\":\"assistant\",\"content\":\"hm</think>Yes.\"},"
                               "{\"role\":\"user\",\"content\":\"Go\"}]";
    char b[512];
    snprintf(b, sizeof b, "{%s}", conv);
    json_t *chat = post(t.port, "/v1/chat/completions", b, 200);
    const char *raw = jstr(chat, "choices.0.message.content");
    assert_null(strstr(raw, "</think>"));
    assert_true(strlen(raw) > 0);
    json_t *m = post(t.port, "/v1/messages", b, 200);
    assert_int_equal(json_array_size(jget(m, "content")), 1);
    assert_string_equal(jstr(m, "content.0.type"), "thinking");
    assert_string_equal(jstr(m, "content.0.thinking"), raw);
    assert_string_equal(jstr(m, "content.0.signature"), "");
    assert_string_equal(jstr(m, "stop_reason"), "max_tokens");
    snprintf(b, sizeof b, "{%s,\"stream\":true}", conv);
    resp r = http(t.port, "POST", "/v1/messages", b);
    assert_int_equal(r.status, 200);
    json_t *evs = named_events(r.body);
    const size_t n = json_array_size(evs);
    assert_string_equal(ev_name(evs, 2), "content_block_start");
    assert_string_equal(jstr(ev_data(evs, 2), "content_block.type"), "thinking");
    sbuf streamed = {0};
    for (size_t i = 3; i < n - 3; i++) {
        assert_string_equal(jstr(ev_data(evs, i), "delta.type"), "thinking_delta");
        sbuf_adds(&streamed, jstr(ev_data(evs, i), "delta.thinking"));
    }
    assert_true(n - 6 <= 12); /* one delta per token at most, not one per byte */
    assert_string_equal(streamed.data, raw);
    assert_string_equal(ev_name(evs, n - 3), "content_block_stop");
    sbuf_free(&streamed);
    json_decref(evs);
    resp_free(&r);
    json_decref(m);
    json_decref(chat);
}

/* The last usage object of a stream: chat chunks, or Responses events (in their response). */
static json_t *stream_usage(int port, const char *path, const char *body) {
    resp r = http(port, "POST", path, body);
    assert_int_equal(r.status, 200);
    const int named = strstr(path, "responses") != NULL; /* event: NAME lines, no [DONE] */
    json_t *evs = named ? named_events(r.body) : sse_events(r.body), *u = NULL;
    for (size_t i = 0; i < json_array_size(evs); i++) {
        json_t *e = named ? ev_data(evs, i) : json_array_get(evs, i), *x = json_object_get(e, "usage");
        if (!x) x = json_object_get(json_object_get(e, "response"), "usage");
        if (json_is_object(x)) json_decref(u), u = json_incref(x);
    }
    json_decref(evs);
    resp_free(&r);
    if (!u) fail_msg("no usage in the stream of %s", path);
    return u;
}

/* usage's reasoning tokens: the prompt opens <think> and the shipped model
 * never closes it, so all 12 generated tokens are reasoning, on
 * /v1/chat/completions (completion_tokens_details) and /v1/responses
 * (output_tokens_details), whole and streamed. A regex makes the model
 * write "ab</think>" and an answer: the tokens through the one completing
 * </think> (8 of the 13, the end of text included) are reasoning, found
 * from the response's own logprobs. A template that does not reason, and
 * the completions API, report 0. */
static void test_reasoning_tokens(void **state) {
    (void)state;
    static const char chat[] = "{\"max_tokens\":12,\"temperature\":0,\"messages\":[{\"role\":\"user\",\"content\":"
                               "\"ROMEO:\"}]%s}";
    char b[512];
    snprintf(b, sizeof b, chat, "");
    json_t *j = post(t.port, "/v1/chat/completions", b, 200);
    assert_int_equal(jint(j, "usage.completion_tokens"), 12);
    assert_int_equal(jint(j, "usage.completion_tokens_details.reasoning_tokens"), 12);
    json_decref(j);
    snprintf(b, sizeof b, chat, ",\"stream\":true,\"stream_options\":{\"include_usage\":true}");
    json_t *u = stream_usage(t.port, "/v1/chat/completions", b);
    assert_int_equal(jint(u, "completion_tokens_details.reasoning_tokens"), 12);
    json_decref(u);
    static const char resp_body[] = "{\"input\":\"ROMEO:\",\"max_output_tokens\":12,\"temperature\":0%s}";
    snprintf(b, sizeof b, resp_body, "");
    j = post(t.port, "/v1/responses", b, 200);
    assert_int_equal(jint(j, "usage.output_tokens"), 12);
    assert_int_equal(jint(j, "usage.output_tokens_details.reasoning_tokens"), 12);
    json_decref(j);
    snprintf(b, sizeof b, resp_body, ",\"stream\":true");
    u = stream_usage(t.port, "/v1/responses", b);
    assert_int_equal(jint(u, "output_tokens_details.reasoning_tokens"), 12);
    json_decref(u);

    static const char closed[] = "{\"max_tokens\":40,\"temperature\":0,\"logprobs\":true,\"regex\":\"ab</think>\\n\\ncd\","
                                 "\"messages\":[{\"role\":\"user\",\"content\":\"ROMEO:\"}]%s}";
    snprintf(b, sizeof b, closed, "");
    j = post(t.port, "/v1/chat/completions", b, 200);
    assert_string_equal(jstr(j, "choices.0.message.content"), "ab</think>\n\ncd");
    const int through = tokens_through(jget(j, "choices.0.logprobs.content"), "</think>");
    assert_int_equal(through, 8);
    assert_int_equal(jint(j, "usage.completion_tokens"), 13);
    assert_int_equal(jint(j, "usage.completion_tokens_details.reasoning_tokens"), through);
    json_decref(j);
    snprintf(b, sizeof b, closed, ",\"stream\":true,\"stream_options\":{\"include_usage\":true}");
    u = stream_usage(t.port, "/v1/chat/completions", b);
    assert_int_equal(jint(u, "completion_tokens_details.reasoning_tokens"), 8);
    json_decref(u);

    snprintf(b, sizeof b, chat, "");
    j = post(l.port, "/v1/chat/completions", b, 200);
    assert_int_equal(jint(j, "usage.completion_tokens"), 12);
    assert_int_equal(jint(j, "usage.completion_tokens_details.reasoning_tokens"), 0);
    json_decref(j);
    j = post(t.port, "/v1/completions", "{\"prompt\":\"<think>\",\"max_tokens\":3,\"temperature\":0}", 200);
    assert_int_equal(jint(j, "usage.completion_tokens_details.reasoning_tokens"), 0);
    json_decref(j);
}

/* The same template on /v1/responses: the output is one reasoning item
 * (no message: the model never closes its reasoning) whose text is the
 * chat API's raw content, whole and streamed with the reasoning events in
 * order; the stored assistant turn leaves the reasoning out. */
static void test_responses_reasoning(void **state) {
    (void)state;
    json_t *chat = post(t.port, "/v1/chat/completions", "{\"max_tokens\":12,\"temperature\":0,\"messages\":[{\"role\":"
                        "\"user\",\"content\":\"ROMEO:\"}]}", 200);
    const char *raw = jstr(chat, "choices.0.message.content");
    assert_true(strlen(raw) > 0);
    static const char body[] = "{\"input\":\"ROMEO:\",\"max_output_tokens\":12,\"temperature\":0%s}";
    char b[256];
    snprintf(b, sizeof b, body, "");
    json_t *o = post(t.port, "/v1/responses", b, 200);
    assert_int_equal(json_array_size(jget(o, "output")), 1);
    assert_string_equal(jstr(o, "output.0.type"), "reasoning");
    assert_memory_equal(jstr(o, "output.0.id"), "rs_", 3);
    assert_string_equal(jstr(o, "output.0.status"), "completed");
    assert_int_equal(json_array_size(jget(o, "output.0.summary")), 0);
    assert_int_equal(json_array_size(jget(o, "output.0.content")), 1);
    assert_string_equal(jstr(o, "output.0.content.0.type"), "reasoning_text");
    assert_string_equal(jstr(o, "output.0.content.0.text"), raw);
    assert_string_equal(jstr(o, "status"), "incomplete");
    snprintf(b, sizeof b, body, ",\"stream\":true");
    resp r = http(t.port, "POST", "/v1/responses", b);
    assert_int_equal(r.status, 200);
    json_t *evs = named_events(r.body);
    const size_t n = json_array_size(evs);
    static const char *const head[] = {"response.created", "response.in_progress", "response.output_item.added",
                                       "response.content_part.added"};
    static const char *const tail[] = {"response.reasoning_text.done", "response.content_part.done",
                                       "response.output_item.done", "response.incomplete"};
    assert_true(n > 8 && n - 8 <= 12); /* one delta per token at most */
    sbuf streamed = {0};
    for (size_t i = 0; i < n; i++) {
        json_t *d = ev_data(evs, i);
        assert_int_equal(jint(d, "sequence_number"), (json_int_t)i);
        if (i < 4) assert_string_equal(ev_name(evs, i), head[i]);
        else if (i >= n - 4) assert_string_equal(ev_name(evs, i), tail[i - (n - 4)]);
        else {
            assert_string_equal(ev_name(evs, i), "response.reasoning_text.delta");
            assert_string_equal(jstr(d, "item_id"), jstr(ev_data(evs, 2), "item.id"));
            assert_int_equal(jint(d, "output_index"), 0);
            assert_int_equal(jint(d, "content_index"), 0);
            sbuf_adds(&streamed, jstr(d, "delta"));
        }
    }
    assert_string_equal(jstr(ev_data(evs, 2), "item.type"), "reasoning");
    assert_string_equal(jstr(ev_data(evs, 2), "item.status"), "in_progress");
    assert_string_equal(jstr(ev_data(evs, 3), "part.type"), "reasoning_text");
    assert_string_equal(streamed.data, raw);
    assert_string_equal(jstr(ev_data(evs, n - 4), "text"), raw);
    assert_string_equal(jstr(ev_data(evs, n - 3), "part.text"), raw);
    assert_string_equal(jstr(ev_data(evs, n - 2), "item.content.0.text"), raw);
    assert_string_equal(jstr(ev_data(evs, n - 2), "item.id"), jstr(ev_data(evs, 2), "item.id"));
    json_t *last = jget(ev_data(evs, n - 1), "response");
    assert_true(json_equal(jget(last, "output.0"), jget(ev_data(evs, n - 2), "item")));
    assert_int_equal(json_array_size(jget(last, "output")), 1);
    /* the next turn sees the answer only (empty here), not the reasoning */
    char next[256];
    snprintf(next, sizeof next, "{\"input\":\"Go\",\"max_output_tokens\":1,\"previous_response_id\":\"%s\"}",
             jstr(last, "id"));
    json_t *c = post(t.port, "/v1/responses", next, 200);
    json_t *cc = post(t.port, "/v1/chat/completions", "{\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":"
                      "\"ROMEO:\"},{\"role\":\"assistant\",\"content\":\"\"},{\"role\":\"user\",\"content\":\"Go\"}]}", 200);
    assert_int_equal(jint(c, "usage.input_tokens"), jint(cc, "usage.prompt_tokens"));
    json_decref(c);
    json_decref(cc);
    sbuf_free(&streamed);
    json_decref(evs);
    resp_free(&r);
    json_decref(o);
    json_decref(chat);
}

int main(int argc, char **argv) {
    (void)argc;
    if (th_server_main_init(argv[0], "test_api_server")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stop_sequence),
        cmocka_unit_test(test_error_shapes),
        cmocka_unit_test(test_responses_store),
        cmocka_unit_test(test_responses_stream),
        cmocka_unit_test(test_thinking),
        cmocka_unit_test(test_reasoning_tokens),
        cmocka_unit_test(test_responses_reasoning),
    };
    return cmocka_run_group_tests(tests, start_all, stop_all) || dirty_exit;
}
