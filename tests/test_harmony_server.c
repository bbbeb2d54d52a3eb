/*
 * gpt-oss's harmony format through kvlm serve: the gpt-oss-shaped MXFP4
 * fixture (tests/fixtures/moe_gguf/gpt-oss-mxfp4.gguf, random weights,
 * its context_length raised from 256 to 1024 in a copy so that the
 * template's system prompt and tools fit) with gpt-oss's own template.
 *
 * A forced call (tool_choice naming the function) is written by the
 * grammar as a harmony call message and read back as tool_calls: the
 * name, arguments that satisfy the schema (a city from its enum and
 * nothing else), finish_reason "tool_calls", no content; streamed, the
 * same call in the same delta shapes. The round trip: the call and the
 * tool's answer sent back render (through /tokenize and /detokenize) to
 * exactly what jinja2 renders for the same conversation
 * (tests/fixtures/harmony/roundtrip-CITY.expected.json, made by
 * tools/template_reference.py render; the date the template writes is
 * the reference's fixed one), and the second request is answered. An
 * assistant message sent back with reasoning_content renders as jinja2
 * renders its "thinking" (roundtrip-thinking). "required" with one tool
 * is that tool's call; with two a call of either, valid for its schema.
 * Anthropic's /v1/messages reads the same call as a tool_use block.
 * <|call|> and <|return|> end the turn, <|end|> does not. Sampled text
 * with the format's markers made likelier: streamed equals whole, and no
 * marker that opens or closes a message is content. usage counts the
 * analysis message's tokens as reasoning tokens, whole and streamed.
 */
#include "server_harness.h"
#include "app/sbuf.h"

#define GGUF "tests/fixtures/moe_gguf/gpt-oss-mxfp4.gguf"
#define TPL "tests/fixtures/templates/openai-gpt-oss-120b.jinja"
#define FIX "tests/fixtures/harmony/"

static server h;

#define CITY_TOOL                                                                                             \
    "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Current weather for a " \
    "city.\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"enum\":"     \
    "[\"Paris\",\"Lyon\"]}},\"required\":[\"city\"],\"additionalProperties\":false}}}"
#define ADD_TOOL                                                                                              \
    "{\"type\":\"function\",\"function\":{\"name\":\"add\",\"description\":\"Adds.\",\"parameters\":{\"type\"" \
    ":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}}}"
#define ASK "{\"role\":\"user\",\"content\":\"What's the weather?\"}"

/* A copy of the fixture whose gpt-oss.context_length (u32) is 1024. */
static int widened_copy(const char *dir, char *path, size_t cap) {
    size_t len = 0;
    char *buf = th_read_file(GGUF, &len);
    static const char key[] = "gpt-oss.context_length";
    const size_t k = sizeof key - 1;
    size_t at = 0;
    for (size_t i = 8; buf && !at && i + k + 8 <= len; i++) {
        uint64_t n;
        memcpy(&n, buf + i - 8, 8);
        if (n == k && !memcmp(buf + i, key, k)) at = i + k;
    }
    uint32_t type = 0, ctx = 1024;
    if (at) memcpy(&type, buf + at, 4);
    if (!at || type != 4) { /* GGUF u32 */
        free(buf);
        return -1;
    }
    memcpy(buf + at + 4, &ctx, 4);
    snprintf(path, cap, "%s/gpt-oss-1k.gguf", dir);
    int rc = th_write_file(path, buf, len);
    free(buf);
    return rc;
}

static int start(void **state) {
    (void)state;
    char *d = th_tempdir(), model[600], args[900];
    if (!d) return -1;
    snprintf(h.dir, sizeof h.dir, "%s", d);
    free(d);
    if (widened_copy(h.dir, model, sizeof model)) return -1;
    snprintf(args, sizeof args, "-m %s --threads 1 --max-seqs 2 --no-draft --chat-template " TPL, model);
    return start_server(&h, args);
}

static int stop(void **state) {
    (void)state;
    int rc = stop_server(&h);
    th_rmtree(h.dir);
    return rc;
}

/* The arguments of a get_weather call: {"city": "Paris" or "Lyon"}, and
 * the city. */
static const char *check_args(const char *args) {
    json_error_t je;
    json_t *a = json_loads(args, 0, &je);
    if (!a) fail_msg("arguments are not JSON: %s (%s)", args, je.text);
    assert_int_equal(json_object_size(a), 1);
    const char *c = json_string_value(json_object_get(a, "city"));
    assert_non_null(c);
    const char *city = !strcmp(c, "Paris") ? "Paris" : !strcmp(c, "Lyon") ? "Lyon" : NULL;
    if (!city) fail_msg("city %s is not in the enum", c);
    json_decref(a);
    return city;
}

/* The streamed choice: content, reasoning, calls (id, name, arguments
 * joined), finish reason. */
typedef struct streamed {
    sbuf content, reasoning;
    json_t *calls;
    char finish[32];
} streamed;

static void read_stream(const char *body, streamed *s) {
    memset(s, 0, sizeof *s);
    s->calls = json_array();
    json_t *ev = sse_events(body), *e;
    size_t i;
    json_array_foreach(ev, i, e) {
        json_t *ch = jget(e, "choices.0");
        if (!ch) continue;
        json_t *c = jget(ch, "delta.content"), *r = jget(ch, "delta.reasoning_content"), *tc = jget(ch, "delta.tool_calls");
        if (json_is_string(c)) sbuf_add(&s->content, json_string_value(c), json_string_length(c));
        if (json_is_string(r)) sbuf_add(&s->reasoning, json_string_value(r), json_string_length(r));
        if (json_is_string(jget(ch, "finish_reason"))) snprintf(s->finish, sizeof s->finish, "%s", jstr(ch, "finish_reason"));
        th_tool_call_deltas(s->calls, tc);
    }
    json_decref(ev);
}

static void streamed_free(streamed *s) {
    sbuf_free(&s->content);
    sbuf_free(&s->reasoning);
    json_decref(s->calls);
}

static char *rendered(const char *body);

static void test_forced_call_round_trip(void **state) {
    (void)state;
    static const char ask[] = "{\"messages\":[" ASK "],\"tools\":[" CITY_TOOL "],\"tool_choice\":{\"type\":"
                              "\"function\",\"function\":{\"name\":\"get_weather\"}},\"max_tokens\":120,"
                              "\"temperature\":0";
    char body[4096];
    snprintf(body, sizeof body, "%s}", ask);
    json_t *whole = post(h.port, "/v1/chat/completions", body, 200);
    assert_string_equal(jstr(whole, "choices.0.finish_reason"), "tool_calls");
    assert_true(json_is_null(jget(whole, "choices.0.message.content")));
    assert_null(jget(whole, "choices.0.message.reasoning_content"));
    assert_int_equal(json_array_size(jget(whole, "choices.0.message.tool_calls")), 1);
    const char *id = jstr(whole, "choices.0.message.tool_calls.0.id");
    assert_int_equal(strlen(id), 29);
    assert_string_equal(jstr(whole, "choices.0.message.tool_calls.0.type"), "function");
    assert_string_equal(jstr(whole, "choices.0.message.tool_calls.0.function.name"), "get_weather");
    const char *args = jstr(whole, "choices.0.message.tool_calls.0.function.arguments");
    const char *city = check_args(args);
    /* streamed: the same call, the same finish, nothing else */
    snprintf(body, sizeof body, "%s,\"stream\":true}", ask);
    resp r = http(h.port, "POST", "/v1/chat/completions", body);
    assert_int_equal(r.status, 200);
    streamed s;
    read_stream(r.body, &s);
    resp_free(&r);
    assert_int_equal(json_array_size(s.calls), 1);
    assert_string_equal(jstr(s.calls, "0.name"), "get_weather");
    assert_string_equal(jstr(s.calls, "0.arguments"), args);
    assert_string_equal(s.finish, "tool_calls");
    assert_int_equal(s.content.len, 0);
    assert_int_equal(s.reasoning.len, 0);
    streamed_free(&s);
    /* the round trip: the assistant's message as it came, then the tool's answer */
    json_t *rt = json_loads("{\"messages\":[" ASK "],\"tools\":[" CITY_TOOL "]}", 0, NULL);
    json_t *msgs = json_object_get(rt, "messages");
    json_array_append(msgs, jget(whole, "choices.0.message"));
    json_array_append_new(msgs, json_pack("{sssOss}", "role", "tool", "tool_call_id",
                                          jget(whole, "choices.0.message.tool_calls.0.id"), "content",
                                          "{\"temperature\": 21.5}"));
    char *rtb = json_dumps(rt, JSON_COMPACT), path[128];
    snprintf(path, sizeof path, FIX "roundtrip-%s.expected.json", city);
    json_t *want = json_load_file(path, 0, NULL);
    assert_non_null(want);
    char *got = rendered(rtb);
    if (strcmp(got, jstr(want, "output"))) fprintf(stderr, "  want [%s]\n  got  [%s]\n", jstr(want, "output"), got);
    assert_string_equal(got, jstr(want, "output"));
    json_object_set_new(rt, "max_tokens", json_integer(4));
    free(rtb);
    rtb = json_dumps(rt, JSON_COMPACT);
    json_t *answer = post(h.port, "/v1/chat/completions", rtb, 200);
    assert_true(jint(answer, "usage.prompt_tokens") > jint(whole, "usage.prompt_tokens"));
    json_decref(answer);
    free(got);
    json_decref(want);
    free(rtb);
    json_decref(rt);
    json_decref(whole);
}

/* The rendered prompt of body, its date the reference's. */
static char *rendered(const char *body) {
    char *got = rendered_prompt(h.port, body);
    char *date = strstr(got, "Current date: "); /* the template writes today's date (strftime_now) */
    assert_non_null(date);
    assert_true(strlen(date) > 24 && date[18] == '-' && date[21] == '-');
    memcpy(date + 14, "2024-07-26", 10);
    return got;
}

/* An assistant message sent back with the reasoning_content a response
 * gave it: rendered as gpt-oss's analysis message before the call, as
 * jinja2 renders the message's "thinking" (llama-server's mapping). */
static void test_reasoning_sent_back(void **state) {
    (void)state;
    static const char body[] =
        "{\"messages\":[" ASK ",{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"The user wants "
        "the weather; call get_weather.\",\"tool_calls\":[{\"id\":\"call_0\",\"type\":\"function\",\"function\":"
        "{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}]},{\"role\":\"tool\","
        "\"tool_call_id\":\"call_0\",\"content\":\"{\\\"temperature\\\": 21.5}\"}],\"tools\":[" CITY_TOOL "]}";
    json_t *want = json_load_file(FIX "roundtrip-thinking.expected.json", 0, NULL);
    assert_non_null(want);
    char *got = rendered(body);
    assert_string_equal(got, jstr(want, "output"));
    free(got);
    json_decref(want);
    /* only an assistant's, and a string */
    json_t *bad = post(h.port, "/v1/chat/completions",
                       "{\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"reasoning_content\":\"b\"}]}", 400);
    assert_string_equal(jstr(bad, "error.param"), "messages[0].reasoning_content");
    json_decref(bad);
}

/* The turn ends at <|call|> and at <|return|> (one token, "stop"), not at
 * the <|end|> that closes each message (max_tokens, "length"). Ids of the
 * fixture's vocabulary, checked through /tokenize. */
static void test_turn_ends(void **state) {
    (void)state;
    static const struct {
        const char *text;
        int id, n;
        const char *finish;
    } cases[] = {{"<|call|>", 513, 1, "stop"}, {"<|return|>", 512, 1, "stop"}, {"<|end|>", 508, 5, "length"}};
    for (int i = 0; i < 3; i++) {
        char body[256];
        snprintf(body, sizeof body, "{\"prompt\":\"%s\"}", cases[i].text);
        json_t *t = post(h.port, "/tokenize", body, 200);
        assert_int_equal(jint(t, "count"), 1);
        assert_int_equal(jint(t, "tokens.0"), cases[i].id);
        json_decref(t);
        snprintf(body, sizeof body,
                 "{\"messages\":[" ASK "],\"max_tokens\":5,\"logit_bias\":{\"%d\":100}}", cases[i].id);
        json_t *r = post(h.port, "/v1/chat/completions", body, 200);
        assert_string_equal(jstr(r, "choices.0.finish_reason"), cases[i].finish);
        assert_int_equal(jint(r, "usage.completion_tokens"), cases[i].n);
        json_decref(r);
    }
}

/* Sampled text with the format's special tokens made likelier (the
 * random model then writes headers and bodies of its own): streamed and
 * whole, the same reasoning, content, calls and finish. */
static void test_stream_matches_whole(void **state) {
    (void)state;
    int headed = 0;
    for (int seed = 1; seed <= 8; seed++) {
        char body[1024];
        snprintf(body, sizeof body,
                 "{\"messages\":[" ASK "],\"tools\":[" CITY_TOOL "],\"max_tokens\":40,\"temperature\":1.5,"
                 "\"seed\":%d,\"logprobs\":true,\"logit_bias\":{\"507\":3,\"509\":3,\"510\":3,\"511\":3}}", seed);
        json_t *whole = post(h.port, "/v1/chat/completions", body, 200);
        body[strlen(body) - 1] = 0;
        strcat(body, ",\"stream\":true}");
        resp r = http(h.port, "POST", "/v1/chat/completions", body);
        assert_int_equal(r.status, 200);
        streamed s;
        read_stream(r.body, &s);
        resp_free(&r);
        json_t *msg = jget(whole, "choices.0.message"), *c = jget(msg, "content"), *rc = jget(msg, "reasoning_content");
        assert_int_equal(s.content.len, json_is_string(c) ? json_string_length(c) : 0);
        if (s.content.len) assert_memory_equal(s.content.data, json_string_value(c), s.content.len);
        assert_int_equal(s.reasoning.len, json_is_string(rc) ? json_string_length(rc) : 0);
        if (s.reasoning.len) assert_memory_equal(s.reasoning.data, json_string_value(rc), s.reasoning.len);
        assert_int_equal(json_array_size(s.calls), json_array_size(jget(msg, "tool_calls")));
        assert_string_equal(s.finish, jstr(whole, "choices.0.finish_reason"));
        /* markers that open or close messages are never content */
        static const char *const never[] = {"<|channel|>", "<|start|>", "<|end|>"};
        for (int k = 0; k < 3 && json_is_string(c); k++) assert_null(strstr(json_string_value(c), never[k]));
        json_t *lp = jget(whole, "choices.0.logprobs.content"), *t;
        size_t k;
        json_array_foreach(lp, k, t) headed += !strcmp(jstr(t, "token"), "<|channel|>");
        streamed_free(&s);
        json_decref(whole);
    }
    assert_true(headed > 0); /* the parser saw the format's markers */
}

/* Regexes (in a JSON string) for an analysis message and a final one. */
#define HM_ANALYSIS "<\\\\|channel\\\\|>analysis<\\\\|message\\\\|>think<\\\\|end\\\\|>"
#define HM_FINAL "<\\\\|start\\\\|>assistant<\\\\|channel\\\\|>final<\\\\|message\\\\|>ok<\\\\|return\\\\|>"

/* usage.completion_tokens_details.reasoning_tokens: a regex has the model
 * write an analysis message then a final one (the markers as text, a few
 * bytes a token in this vocabulary): the tokens through the analysis's
 * <|end|> are reasoning (37 of 90, found from the response's own
 * logprobs), whole and streamed; the final message alone has none. */
static void test_reasoning_tokens(void **state) {
    (void)state;
    static const char fmt[] = "{\"messages\":[" ASK "],\"max_tokens\":120,\"temperature\":0,\"logprobs\":true,"
                              "\"regex\":\"%s\"%s}";
    char body[1024];
    snprintf(body, sizeof body, fmt, HM_ANALYSIS HM_FINAL, "");
    json_t *r = post(h.port, "/v1/chat/completions", body, 200);
    assert_string_equal(jstr(r, "choices.0.message.content"),
                        "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>final<|message|>ok"
                        "<|return|>");
    const int through = tokens_through(jget(r, "choices.0.logprobs.content"), "<|end|>");
    assert_int_equal(through, 37);
    assert_int_equal(jint(r, "usage.completion_tokens"), 90);
    assert_int_equal(jint(r, "usage.completion_tokens_details.reasoning_tokens"), through);
    json_decref(r);
    snprintf(body, sizeof body, fmt, HM_ANALYSIS HM_FINAL, ",\"stream\":true,\"stream_options\":{\"include_usage\":true}");
    resp s = http(h.port, "POST", "/v1/chat/completions", body);
    assert_int_equal(s.status, 200);
    json_t *evs = sse_events(s.body);
    json_t *last = json_array_get(evs, json_array_size(evs) - 1);
    assert_int_equal(jint(last, "usage.completion_tokens"), 90);
    assert_int_equal(jint(last, "usage.completion_tokens_details.reasoning_tokens"), 37);
    json_decref(evs);
    resp_free(&s);
    snprintf(body, sizeof body, fmt, HM_FINAL, "");
    r = post(h.port, "/v1/chat/completions", body, 200);
    assert_true(jint(r, "usage.completion_tokens") > 40);
    assert_int_equal(jint(r, "usage.completion_tokens_details.reasoning_tokens"), 0);
    json_decref(r);
}

static void test_required(void **state) {
    (void)state;
    json_t *one = post(h.port, "/v1/chat/completions",
                       "{\"messages\":[" ASK "],\"tools\":[" CITY_TOOL "],\"tool_choice\":\"required\","
                       "\"max_tokens\":120,\"temperature\":0}", 200);
    assert_string_equal(jstr(one, "choices.0.finish_reason"), "tool_calls");
    assert_string_equal(jstr(one, "choices.0.message.tool_calls.0.function.name"), "get_weather");
    check_args(jstr(one, "choices.0.message.tool_calls.0.function.arguments"));
    json_decref(one);
    /* two tools: a call of either, its arguments valid for the one named */
    for (int seed = 1; seed <= 4; seed++) {
        char body[2048];
        snprintf(body, sizeof body,
                 "{\"messages\":[" ASK "],\"tools\":[" CITY_TOOL "," ADD_TOOL "],\"tool_choice\":\"required\","
                 "\"max_tokens\":120,\"seed\":%d}", seed);
        json_t *two = post(h.port, "/v1/chat/completions", body, 200);
        assert_string_equal(jstr(two, "choices.0.finish_reason"), "tool_calls");
        assert_int_equal(json_array_size(jget(two, "choices.0.message.tool_calls")), 1);
        const char *name = jstr(two, "choices.0.message.tool_calls.0.function.name");
        const char *args = jstr(two, "choices.0.message.tool_calls.0.function.arguments");
        if (!strcmp(name, "get_weather")) {
            check_args(args);
        } else {
            assert_string_equal(name, "add");
            json_t *a = json_loads(args, 0, NULL);
            if (!a) fail_msg("arguments are not JSON: %s", args);
            assert_true(json_is_integer(json_object_get(a, "a")));
            json_decref(a);
        }
        json_decref(two);
    }
}

/* Anthropic's Messages API reads the same harmony call as a tool_use block. */
static void test_anthropic_tool_use(void **state) {
    (void)state;
    json_t *m = post(h.port, "/v1/messages",
                     "{\"max_tokens\":120,\"temperature\":0,\"messages\":[" ASK "],"
                     "\"tools\":[{\"name\":\"get_weather\",\"description\":\"Current weather for a city.\","
                     "\"input_schema\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"enum\":"
                     "[\"Paris\",\"Lyon\"]}},\"required\":[\"city\"],\"additionalProperties\":false}}],"
                     "\"tool_choice\":{\"type\":\"tool\",\"name\":\"get_weather\"}}", 200);
    assert_string_equal(jstr(m, "stop_reason"), "tool_use");
    json_t *content = jget(m, "content"), *b;
    size_t i;
    int uses = 0;
    json_array_foreach(content, i, b) {
        if (strcmp(jstr(b, "type"), "tool_use")) continue;
        uses++;
        assert_string_equal(jstr(b, "name"), "get_weather");
        char *in = json_dumps(jget(b, "input"), JSON_COMPACT);
        check_args(in);
        free(in);
    }
    assert_int_equal(uses, 1);
    json_decref(m);
}

int main(int argc, char **argv) {
    (void)argc;
    if (th_server_main_init(argv[0], "test_harmony_server")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forced_call_round_trip),
        cmocka_unit_test(test_reasoning_sent_back),
        cmocka_unit_test(test_turn_ends),
        cmocka_unit_test(test_stream_matches_whole),
        cmocka_unit_test(test_required),
        cmocka_unit_test(test_reasoning_tokens),
        cmocka_unit_test(test_anthropic_tool_use),
    };
    return cmocka_run_group_tests(tests, start, stop);
}
