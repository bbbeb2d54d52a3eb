/*
 * Tools and structured output through kvlm serve, with the request bodies
 * OpenAI's official clients send (tool_calls whose arguments are JSON
 * strings, an assistant turn with content null, tool turns carrying only
 * tool_call_id, stream_options.include_usage).
 *
 * Server G: the shipped GPT-2 with Qwen2.5's template (hermes call
 * syntax). A client-shaped conversation with one and with two tool calls
 * and their answers renders, through /tokenize, to exactly what Python's
 * jinja2 rendered for the same conversation (tests/fixtures/templates).
 *
 * Server L: the shipped Llama (GGUF) with a short template in the same
 * syntax (tests/fixtures/tool_template/hermes-mini.jinja: Qwen's own
 * system prompt alone is longer than the model's 128-token context). With tools
 * and tool_choice "auto", streaming and not streaming give the same
 * content for the same seed, and a streamed token's log-probabilities
 * arrive once per token even while its text is withheld. Malformed tools,
 * tool_choice and response_format bodies are refused over HTTP in
 * OpenAI's error shape, naming the field.
 *
 * The shipped Llama, which knows nothing of JSON, is forced into calls by
 * the grammar engine: tool_choice naming a function and "required",
 * streamed and whole, then the round trip with the tool's answer; the same
 * forced call in the llama3 and mistral syntaxes (servers L3 and LM, short
 * templates of those families in tests/fixtures/tool_template/); and
 * response_format json_schema yields JSON with the schema's properties.
 */
#include "server_harness.h"

#define GPT2 "models/shakespeare-gpt2"
#define GGUF "models/shakespeare-llama/shakespeare-llama-q8_0.gguf"
#define TPL "tests/fixtures/templates/"
#define MINI "tests/fixtures/tool_template/"

static server g, l, l3, lm;
static json_t *expected;

static int start_all(void **state) {
    (void)state;
    json_error_t je;
    json_t *root = json_load_file(TPL "expected.json", 0, &je);
    expected = json_incref(json_object_get(json_object_get(root, "expected"), "Qwen-Qwen2.5-7B-Instruct"));
    json_decref(root);
    if (!expected) return -1;
    if (start_server_in_tempdir(&g, "-m " GPT2 " --threads 1 --max-seqs 2 --chat-template " TPL "Qwen-Qwen2.5-7B-Instruct.jinja"))
        return -1;
    return start_server_in_tempdir(&l, "-m " GGUF " --threads 1 --max-seqs 4 --chat-template " MINI "hermes-mini.jinja") ||
           start_server_in_tempdir(&l3, "-m " GGUF " --threads 1 --max-seqs 2 --chat-template " MINI "llama3-mini.jinja") ||
           start_server_in_tempdir(&lm, "-m " GGUF " --threads 1 --max-seqs 2 --chat-template " MINI "mistral-mini.jinja");
}

static int stop_all(void **state) {
    (void)state;
    int rc = stop_server(&g) | stop_server(&l) | stop_server(&l3) | stop_server(&lm);
    th_rmtree(g.dir), th_rmtree(l.dir), th_rmtree(l3.dir), th_rmtree(lm.dir);
    json_decref(expected);
    return rc;
}

#define WEATHER_TOOL                                                                                             \
    "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Current weather for a "     \
    "city.\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\",\"description\":" \
    "\"City name, e.g. Paris\"},\"unit\":{\"type\":\"string\",\"enum\":[\"celsius\",\"fahrenheit\"]}},"        \
    "\"required\":[\"city\"]}}}"
/* For forced calls: the shipped models ramble inside any string they may
 * write, so the strings are bounded (and a call fits max_tokens). */
#define CITY_TOOL                                                                                                \
    "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","   \
    "\"properties\":{\"city\":{\"type\":\"string\",\"maxLength\":12},\"unit\":{\"type\":\"string\",\"enum\":"     \
    "[\"celsius\",\"fahrenheit\"]}},\"required\":[\"city\"],\"additionalProperties\":false}}}"
#define ADD_TOOL                                                                                                 \
    "{\"type\":\"function\",\"function\":{\"name\":\"add\",\"parameters\":{\"type\":\"object\",\"properties\":"  \
    "{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}},\"required\":[\"a\",\"b\"],"                 \
    "\"additionalProperties\":false},\"strict\":true}}"


/* The fixture conversations tool_call and parallel_tool_calls as a client
 * sends them: arguments as JSON strings (JSON.stringify's compact form),
 * the assistant's content null, tool turns without a name. */
static void test_client_shapes_render_as_jinja2(void **state) {
    (void)state;
    static const char one[] =
        "{\"model\":null,\"tools\":[" WEATHER_TOOL "],\"messages\":["
        "{\"role\":\"system\",\"content\":\"You can call tools.\"},"
        "{\"role\":\"user\",\"content\":\"What's the weather in Paris?\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call00001\",\"type\":\"function\","
        "\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\",\\\"unit\\\":\\\"celsius\\\"}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call00001\",\"content\":\"{\\\"temperature\\\": 21.5, \\\"sky\\\": \\\"clear\\\"}\"}]}";
    static const char two[] =
        "{\"tools\":[" WEATHER_TOOL "],\"messages\":["
        "{\"role\":\"system\",\"content\":\"You are a helpful assistant.\"},"
        "{\"role\":\"user\",\"content\":\"Weather in Paris and in Lyon, in celsius?\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":["
        "{\"id\":\"call00001\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
        "\"arguments\":\"{\\\"city\\\":\\\"Paris\\\",\\\"unit\\\":\\\"celsius\\\"}\"}},"
        "{\"id\":\"call00002\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
        "\"arguments\":\"{\\\"city\\\": \\\"Lyon\\\", \\\"unit\\\": \\\"celsius\\\"}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call00001\",\"content\":\"{\\\"temperature\\\": 21.5}\"},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call00002\",\"content\":\"{\\\"temperature\\\": 19}\"},"
        "{\"role\":\"assistant\",\"content\":\"Paris: 21.5 \\u00b0C, Lyon: 19 \\u00b0C.\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"Thanks! And Nice?\"}]}]}";
    static const struct {
        const char *body, *conv;
    } cases[] = {{one, "tool_call"}, {two, "parallel_tool_calls"}};
    for (int i = 0; i < 2; i++) {
        const char *want = json_string_value(json_object_get(json_object_get(expected, cases[i].conv), "output"));
        assert_non_null(want);
        char *got = rendered_prompt(g.port, cases[i].body);
        if (strcmp(got, want)) fprintf(stderr, "  %s:\n  want [%s]\n  got  [%s]\n", cases[i].conv, want, got);
        assert_string_equal(got, want);
        free(got);
    }
}

static void expect_error(int port, const char *path, const char *body, int status, const char *code, const char *param,
                         const char *needle) {
    json_t *r = post(port, path, body, status);
    if (code) assert_string_equal(jstr(r, "error.code"), code);
    assert_string_equal(jstr(r, "error.param"), param);
    assert_string_equal(jstr(r, "error.type"), "invalid_request_error");
    if (!strstr(jstr(r, "error.message"), needle))
        fail_msg("%s: message '%s' lacks '%s'", body, jstr(r, "error.message"), needle);
    json_decref(r);
}

#define HI "\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]"

static void test_refused_over_http(void **state) {
    (void)state;
    const char *chat = "/v1/chat/completions";
    expect_error(l.port, chat, "{" HI ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get weather\"}}]}",
                 400, "invalid_value", "tools[0].function.name", "must be 1 to 64 letters");
    expect_error(l.port, chat, "{" HI ",\"tools\":[" WEATHER_TOOL "],\"tool_choice\":{\"type\":\"function\","
                 "\"function\":{\"name\":\"add\"}}}", 400, "invalid_value", "tool_choice.function.name",
                 "'tool_choice' names the function 'add', which is not in 'tools'");
    expect_error(l.port, "/v1/completions", "{\"prompt\":\"a\",\"response_format\":{\"type\":\"json_schema\","
                 "\"json_schema\":{\"schema\":{}}}}", 400, "missing_parameter", "response_format.json_schema.name",
                 "must be 1 to 64 letters");
    expect_error(l.port, chat, "{" HI ",\"regex\":\"a+\",\"grammar\":\"root ::= \\\"a\\\"\"}", 400, "invalid_value",
                 "regex", "give at most one of");
}

/* What a streamed chat choice adds up to. */
typedef struct streamed {
    char *content;
    size_t content_len;
    json_t *calls;      /* [{id, name, arguments}] */
    const char *finish;
    int n_logprobs;
    json_int_t completion_tokens;
} streamed;

static void read_stream(const char *body, streamed *s) {
    memset(s, 0, sizeof *s);
    s->calls = json_array();
    json_t *ev = sse_events(body), *e;
    size_t i;
    json_array_foreach(ev, i, e) {
        if (json_is_object(jget(e, "usage"))) s->completion_tokens = jint(e, "usage.completion_tokens");
        json_t *ch = jget(e, "choices.0");
        if (!ch) continue;
        json_t *c = jget(ch, "delta.content"), *tc = jget(ch, "delta.tool_calls"), *lp = jget(ch, "logprobs.content");
        if (json_is_string(c)) {
            s->content = realloc(s->content, s->content_len + json_string_length(c) + 1);
            assert_non_null(s->content);
            memcpy(s->content + s->content_len, json_string_value(c), json_string_length(c) + 1);
            s->content_len += json_string_length(c);
        }
        if (json_is_array(lp)) s->n_logprobs += (int)json_array_size(lp);
        if (json_is_string(jget(ch, "finish_reason"))) s->finish = strdup(jstr(ch, "finish_reason"));
        th_tool_call_deltas(s->calls, tc);
    }
    json_decref(ev);
}

static void streamed_free(streamed *s) {
    free(s->content);
    json_decref(s->calls);
    free((char *)s->finish);
}

static void test_auto_stream_matches_whole(void **state) {
    (void)state;
    for (int seed = 1; seed <= 4; seed++) {
        char body[2048];
        snprintf(body, sizeof body,
                 "{\"model\":null,\"messages\":[{\"role\":\"user\",\"content\":\"What's the weather in Paris?\"}],"
                 "\"tools\":[" WEATHER_TOOL "," ADD_TOOL "],\"tool_choice\":\"auto\",\"max_tokens\":24,"
                 "\"temperature\":1.0,\"seed\":%d,\"logprobs\":true}",
                 seed);
        json_t *whole = post(l.port, "/v1/chat/completions", body, 200);
        body[strlen(body) - 1] = 0;
        strcat(body, ",\"stream\":true,\"stream_options\":{\"include_usage\":true}}");
        resp r = http(l.port, "POST", "/v1/chat/completions", body);
        assert_int_equal(r.status, 200);
        streamed s;
        read_stream(r.body, &s);
        resp_free(&r);
        json_t *msg = jget(whole, "choices.0.message");
        json_t *calls = jget(msg, "tool_calls");
        /* the same split of the same text into content and calls */
        assert_int_equal(json_array_size(calls), json_array_size(s.calls));
        json_t *content = jget(msg, "content");
        assert_string_equal(json_is_string(content) ? json_string_value(content) : "",
                            s.content ? s.content : "");
        assert_string_equal(jstr(whole, "choices.0.finish_reason"), s.finish);
        /* every token's log-probabilities once, text withheld or not */
        assert_int_equal(s.completion_tokens, jint(whole, "usage.completion_tokens"));
        assert_int_equal(s.n_logprobs, (int)json_array_size(jget(whole, "choices.0.logprobs.content")));
        assert_int_equal(s.n_logprobs, (int)s.completion_tokens);
        streamed_free(&s);
        json_decref(whole);
    }
}

/* The start-up line names the call syntax read from each template. */
static void test_family_in_startup_line(void **state) {
    (void)state;
    const server *svs[] = {&g, &l, &l3, &lm};
    static const char *const family[] = {"hermes", "hermes", "llama3", "mistral"};
    for (int i = 0; i < 4; i++) {
        char *log = th_read_file(svs[i]->log, NULL), want[80];
        snprintf(want, sizeof want, "kvlm serve: tool calls read in the %s syntax", family[i]);
        if (!log || !strstr(log, want)) fail_msg("server %d: no '%s' in %s", i, want, log ? log : "(no log)");
        free(log);
    }
}

/* A call of get_weather: a name and arguments that are a JSON object with
 * a string "city" and, if any, a unit from the enum. */
static void check_weather_args(const char *args) {
    json_error_t je;
    json_t *a = json_loads(args, 0, &je);
    if (!a) fail_msg("arguments are not JSON: %s (%s)", args, je.text);
    assert_true(json_is_object(a));
    assert_true(json_is_string(json_object_get(a, "city")));
    json_t *u = json_object_get(a, "unit");
    if (u) assert_true(!strcmp(json_string_value(u), "celsius") || !strcmp(json_string_value(u), "fahrenheit"));
    const char *k;
    json_t *v;
    json_object_foreach(a, k, v) assert_true(!strcmp(k, "city") || !strcmp(k, "unit"));
    json_decref(a);
}

static void test_forced_call_round_trip(void **state) {
    (void)state;
    static const char ask[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"What's the weather in Paris?\"}],"
                              "\"tools\":[" CITY_TOOL "," ADD_TOOL "],\"tool_choice\":{\"type\":\"function\","
                              "\"function\":{\"name\":\"get_weather\"}},\"max_tokens\":100,\"seed\":5";
    char body[4096];
    snprintf(body, sizeof body, "%s}", ask);
    json_t *whole = post(l.port, "/v1/chat/completions", body, 200);
    assert_string_equal(jstr(whole, "choices.0.finish_reason"), "tool_calls");
    assert_true(json_is_null(jget(whole, "choices.0.message.content")));
    assert_int_equal(json_array_size(jget(whole, "choices.0.message.tool_calls")), 1);
    const char *id = jstr(whole, "choices.0.message.tool_calls.0.id");
    assert_int_equal(strlen(id), 29);
    assert_memory_equal(id, "call_", 5);
    assert_string_equal(jstr(whole, "choices.0.message.tool_calls.0.type"), "function");
    assert_string_equal(jstr(whole, "choices.0.message.tool_calls.0.function.name"), "get_weather");
    const char *args = jstr(whole, "choices.0.message.tool_calls.0.function.arguments");
    check_weather_args(args);
    /* streamed with the same seed: the same call, in pieces */
    snprintf(body, sizeof body, "%s,\"stream\":true}", ask);
    resp r = http(l.port, "POST", "/v1/chat/completions", body);
    assert_int_equal(r.status, 200);
    streamed s;
    read_stream(r.body, &s);
    resp_free(&r);
    assert_int_equal(json_array_size(s.calls), 1);
    assert_string_equal(jstr(s.calls, "0.name"), "get_weather");
    assert_string_equal(jstr(s.calls, "0.arguments"), args);
    assert_string_equal(s.finish, "tool_calls");
    assert_int_equal(s.content_len, 0);
    streamed_free(&s);
    /* the round trip: the call and the tool's answer go back */
    json_t *rt = json_loads("{\"messages\":[{\"role\":\"user\",\"content\":\"What's the weather in Paris?\"}],"
                            "\"tools\":[" CITY_TOOL "],\"max_tokens\":8,\"seed\":1}", 0, NULL);
    json_t *msgs = json_object_get(rt, "messages");
    json_array_append(msgs, jget(whole, "choices.0.message"));
    json_array_append_new(msgs, json_pack("{sssOss}", "role", "tool", "tool_call_id",
                                          jget(whole, "choices.0.message.tool_calls.0.id"), "content",
                                          "{\"temperature\": 21.5}"));
    char *rtb = json_dumps(rt, JSON_COMPACT);
    json_t *answer = post(l.port, "/v1/chat/completions", rtb, 200);
    assert_true(jint(answer, "usage.prompt_tokens") > jint(whole, "usage.prompt_tokens"));
    free(rtb);
    json_decref(answer);
    json_decref(rt);
    json_decref(whole);
    /* "required": a call of one of the tools */
    json_t *req = post(l.port, "/v1/chat/completions",
                       "{\"messages\":[{\"role\":\"user\",\"content\":\"Add 2 and 3\"}],\"tools\":[" CITY_TOOL
                       "," ADD_TOOL "],\"tool_choice\":\"required\",\"max_tokens\":100,\"seed\":9}", 200);
    const char *name = jstr(req, "choices.0.message.tool_calls.0.function.name");
    assert_true(!strcmp(name, "get_weather") || !strcmp(name, "add"));
    assert_string_equal(jstr(req, "choices.0.finish_reason"), "tool_calls");
    json_decref(req);
}

/* A forced call written in each family's syntax is read back as a call. */
static void test_forced_call_families(void **state) {
    (void)state;
    const server *svs[] = {&l, &l3, &lm};
    for (int i = 0; i < 3; i++) {
        for (int stream = 0; stream < 2; stream++) {
            char body[2048];
            snprintf(body, sizeof body,
                     "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}],\"tools\":[" CITY_TOOL "],"
                     "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}},"
                     "\"max_tokens\":90,\"seed\":5,\"stream\":%s}", stream ? "true" : "false");
            resp r = http(svs[i]->port, "POST", "/v1/chat/completions", body);
            if (r.status != 200) fail_msg("server %d: %d %s", i, r.status, r.body);
            const char *name = NULL, *args = NULL, *finish = NULL;
            json_t *whole = NULL;
            streamed s;
            if (stream) {
                read_stream(r.body, &s);
                assert_int_equal(json_array_size(s.calls), 1);
                name = jstr(s.calls, "0.name");
                args = jstr(s.calls, "0.arguments");
                finish = s.finish;
                assert_int_equal(s.content_len, 0);
            } else {
                whole = json_loads(r.body, 0, NULL);
                assert_int_equal(json_array_size(jget(whole, "choices.0.message.tool_calls")), 1);
                name = jstr(whole, "choices.0.message.tool_calls.0.function.name");
                args = jstr(whole, "choices.0.message.tool_calls.0.function.arguments");
                finish = jstr(whole, "choices.0.finish_reason");
                assert_true(json_is_null(jget(whole, "choices.0.message.content")));
            }
            assert_string_equal(name, "get_weather");
            check_weather_args(args);
            assert_string_equal(finish, "tool_calls");
            if (stream) streamed_free(&s);
            json_decref(whole);
            resp_free(&r);
        }
    }
}

static void test_json_schema_response(void **state) {
    (void)state;
    json_t *r = post(l.port, "/v1/chat/completions",
                     "{\"messages\":[{\"role\":\"user\",\"content\":\"A person\"}],\"max_tokens\":100,\"seed\":3,"
                     "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"person\",\"strict\":true,"
                     "\"schema\":{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":16},\"age\":"
                     "{\"type\":\"integer\",\"minimum\":0,\"maximum\":150}},\"required\":[\"name\",\"age\"],"
                     "\"additionalProperties\":false}}}}",
                     200);
    json_t *p = json_loads(jstr(r, "choices.0.message.content"), 0, NULL);
    assert_non_null(p);
    assert_true(json_is_string(json_object_get(p, "name")));
    json_int_t age = json_integer_value(json_object_get(p, "age"));
    assert_true(json_is_integer(json_object_get(p, "age")) && age >= 0 && age <= 150);
    assert_int_equal(json_object_size(p), 2);
    json_decref(p);
    json_decref(r);
}

int main(int argc, char **argv) {
    (void)argc;
    if (th_server_main_init(argv[0], "test_tools_server")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_client_shapes_render_as_jinja2),
        cmocka_unit_test(test_refused_over_http),
        cmocka_unit_test(test_auto_stream_matches_whole),
        cmocka_unit_test(test_family_in_startup_line),
        cmocka_unit_test(test_forced_call_round_trip),
        cmocka_unit_test(test_forced_call_families),
        cmocka_unit_test(test_json_schema_response),
    };
    int failed = cmocka_run_group_tests_name("tools_server", tests, start_all, stop_all);
    return failed || dirty_exit;
}
