/*
 * The OpenAI request parser (src/app/openai_request.c) as a unit, with
 * the shipped GPT-2 tokenizer (models/gpt2-tokenizer) and two chat
 * templates: one that renders tools (a fixture template) and the plain
 * one, which does not.
 *
 * Checks, with exact statuses, codes, fields and messages: the fields of
 * OpenAI's API that do not change kvlm's output are accepted and ignored
 * (and still type-checked); integers written with a zero fraction are taken
 * as integers and other fractions refused; what would change the output
 * and cannot be honoured is refused naming the field and why; a NUL in any
 * string names the field; a body that is not JSON is explained without the
 * JSON library's words.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "app/openai_request.h"
#include "app/structured.h"

static kvlm_tokenizer *tok;
static chat_template tools_tpl, plain_tpl;

static int setup(void **state) {
    (void)state;
    kvlm_error err;
    tok = kvlm_tokenizer_load("models/gpt2-tokenizer", &err);
    if (!tok) return -1;
    if (chat_template_load(&tools_tpl, "models/gpt2-tokenizer", "models/gpt2-tokenizer",
                           "tests/fixtures/templates/Qwen-Qwen2.5-7B-Instruct.jinja", &err) ||
        chat_template_load(&plain_tpl, "models/gpt2-tokenizer", "models/gpt2-tokenizer", "plain", &err))
        return -1;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    chat_template_free(&tools_tpl);
    chat_template_free(&plain_tpl);
    kvlm_tokenizer_free(tok);
    return 0;
}

static api_limits limits(const chat_template *tpl) {
    return (api_limits){.tok = tok, .tpl = tpl, .model_name = "m", .n_ctx = 256, .vocab = 50257, .max_seqs = 4,
                        .block_size = 16, .max_prompts = 4, .kv_blocks = 64, .random_seed = 99};
}

/* Parses body (chat or completions) with tpl; returns the status (0 when accepted). */
static int parse(const char *body, size_t len, int chat, const chat_template *tpl, api_request *rq, api_error *e) {
    api_limits lim = limits(tpl);
    memset(e, 0, sizeof *e);
    return api_parse_completion(body, len, chat, &lim, rq, e) ? e->status : 0;
}

static void expect_ok(const char *body, int chat, const chat_template *tpl, api_request *rq) {
    api_error e;
    int st = parse(body, strlen(body), chat, tpl, rq, &e);
    if (st) fail_msg("%s: refused with %d %s", body, st, e.message);
}

static void expect_fail_len(const char *body, size_t len, int chat, const chat_template *tpl, int status,
                            const char *code, const char *param, const char *message) {
    api_request rq;
    api_error e;
    int st = parse(body, len, chat, tpl, &rq, &e);
    if (st != status) fail_msg("%s: status %d (%s), expected %d", body, st, st ? e.message : "accepted", status);
    if (code) assert_string_equal(e.code, code);
    assert_string_equal(e.param, param);
    assert_string_equal(e.message, message);
    assert_null(strstr(e.message, "JSON_"));
}

static void expect_fail(const char *body, int chat, const chat_template *tpl, int status, const char *code,
                        const char *param, const char *message) {
    expect_fail_len(body, strlen(body), chat, tpl, status, code, param, message);
}

#define MSG "\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]"

/* Each harmless field alone, on chat completions, with both templates. */
static void test_harmless_chat_fields(void **state) {
    (void)state;
    static const char *const extra[] = {
        "\"user\":\"u-1\"",
        "\"parallel_tool_calls\":false",
        "\"reasoning_effort\":\"low\"",
        "\"service_tier\":\"auto\"",
        "\"store\":false",
        "\"metadata\":{\"k\":\"v\"}",
        "\"response_format\":{\"type\":\"text\"}",
        "\"tools\":[]",
        "\"tool_choice\":\"none\"",
        "\"tool_choice\":\"auto\"",
        "\"tools\":[],\"tool_choice\":\"none\"",
        "\"prediction\":{\"type\":\"content\",\"content\":\"Hello\"}",
        "\"modalities\":[\"text\"]",
        "\"stream\":true,\"stream_options\":{\"include_usage\":true,\"include_obfuscation\":false}",
        "\"user\":null,\"store\":null,\"metadata\":null,\"response_format\":null,\"tool_choice\":null",
    };
    for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++)
        for (int t = 0; t < 2; t++) {
            char body[512];
            snprintf(body, sizeof body, "{" MSG ",%s}", extra[i]);
            api_request rq;
            expect_ok(body, 1, t ? &tools_tpl : &plain_tpl, &rq);
            assert_int_equal(rq.n, 1);
            assert_int_equal(rq.n_prompts, 1);
            api_request_free(&rq);
        }
}

/* The same prompt with and without the ignored fields gives the same request. */
static void test_ignored_fields_change_nothing(void **state) {
    (void)state;
    api_request a, b;
    expect_ok("{" MSG ",\"max_tokens\":7,\"seed\":3}", 1, &tools_tpl, &a);
    expect_ok("{" MSG ",\"max_tokens\":7,\"seed\":3,\"user\":\"x\",\"prompt_cache_key\":\"k\",\"store\":true,"
              "\"service_tier\":\"default\","
              "\"reasoning_effort\":\"high\",\"parallel_tool_calls\":true,\"response_format\":{\"type\":\"text\"},"
              "\"tools\":[],\"metadata\":{},\"prediction\":{\"type\":\"content\",\"content\":[{\"type\":\"text\","
              "\"text\":\"x\"}]}}",
              1, &tools_tpl, &b);
    assert_int_equal(a.n_prompt[0], b.n_prompt[0]);
    assert_memory_equal(a.prompts[0], b.prompts[0], (size_t)a.n_prompt[0] * sizeof(int32_t));
    assert_int_equal(a.max_new[0], 7);
    assert_int_equal(b.max_new[0], 7);
    assert_int_equal(b.sampling.seed, 3);
    api_request_free(&a);
    api_request_free(&b);
}

static void test_harmless_completion_fields(void **state) {
    (void)state;
    api_request rq;
    expect_ok("{\"prompt\":\"Hello\",\"user\":\"u\",\"prompt_cache_key\":\"tenant-1\",\"store\":false,"
              "\"service_tier\":\"auto\",\"metadata\":{\"a\":\"b\"},"
              "\"max_tokens\":10.0,\"n\":2.0,\"best_of\":2.0,\"logprobs\":3.0,\"seed\":12.0,\"top_k\":5.0}",
              0, &plain_tpl, &rq);
    assert_int_equal(rq.max_new[0], 10);
    assert_int_equal(rq.n, 2);
    assert_int_equal(rq.top_logprobs, 3);
    assert_int_equal(rq.sampling.seed, 12);
    assert_int_equal(rq.sampling.top_k, 5);
    assert_int_equal(rq.n_prompt[0], 1); /* "Hello" is GPT-2's token 15496 */
    assert_int_equal(rq.prompts[0][0], 15496);
    api_request_free(&rq);
}

static void test_integers_written_as_floats(void **state) {
    (void)state;
    api_request rq;
    expect_ok("{" MSG ",\"max_completion_tokens\":4.0,\"n\":3.0,\"logprobs\":true,\"top_logprobs\":2.0,"
              "\"seed\":-7.0}", 1, &plain_tpl, &rq);
    assert_int_equal(rq.max_new[0], 4);
    assert_int_equal(rq.n, 3);
    assert_int_equal(rq.top_logprobs, 2);
    assert_int_equal((int64_t)rq.sampling.seed, -7);
    api_request_free(&rq);
    expect_fail("{\"prompt\":\"a\",\"max_tokens\":10.5}", 0, &plain_tpl, 400, "invalid_type", "max_tokens",
                "'max_tokens' must be an integer, got 10.5");
    expect_fail("{" MSG ",\"n\":2.25}", 1, &plain_tpl, 400, "invalid_type", "n", "'n' must be an integer, got 2.25");
    expect_fail("{\"prompt\":\"a\",\"seed\":1e30}", 0, &plain_tpl, 400, "invalid_type", "seed",
                "'seed' must be an integer, got 1e+30");
    expect_fail("{\"prompt\":\"a\",\"max_tokens\":0.0}", 0, &plain_tpl, 400, "invalid_value", "max_tokens",
                "'max_tokens' must be between 1 and 2147483647, got 0");
    expect_fail("{\"prompt\":\"a\",\"top_k\":\"3\"}", 0, &plain_tpl, 400, "invalid_type", "top_k",
                "'top_k' must be an integer");
}

/* What would change the output and cannot be honoured: 400 naming the field and why. */
static void test_refused_fields(void **state) {
    (void)state;
    /* a bad part after a good one: refused, and (under LeakSanitizer) the
     * text gathered so far is freed; found by the request fuzzer */
    expect_fail("{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                "{\"type\":\"image_url\"}]}]}",
                1, &plain_tpl, 400, "unsupported_content", "messages[0].content",
                "'messages[0].content[1]' must be {\"type\": \"text\", \"text\": string}; other parts are not "
                "supported");
    expect_fail("{" MSG ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}", 1, &plain_tpl, 400,
                "unsupported_parameter", "tools",
                "'tools' is not supported: this model's chat template does not render tools");
    expect_fail("{" MSG ",\"modalities\":[\"text\",\"audio\"]}", 1, &tools_tpl, 400, "unsupported_parameter",
                "modalities", "'modalities' may only list \"text\": this server generates text only");
    expect_fail("{" MSG ",\"reasoning_effort\":\"max\"}", 1, &tools_tpl, 400, "invalid_value", "reasoning_effort",
                "'reasoning_effort' must be one of none, minimal, low, medium, high, xhigh");
    expect_fail("{" MSG ",\"parallel_tool_calls\":\"yes\"}", 1, &tools_tpl, 400, "invalid_type",
                "parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    expect_fail("{" MSG ",\"prediction\":{\"type\":\"diff\",\"content\":\"x\"}}", 1, &tools_tpl, 400, "invalid_type",
                "prediction",
                "'prediction' must be {\"type\": \"content\", \"content\": a string or a list of text parts}");
    expect_fail("{\"prompt\":\"a\",\"user\":5}", 0, &plain_tpl, 400, "invalid_type", "user", "'user' must be a string");
    expect_fail("{" MSG ",\"prompt_cache_key\":[1]}", 1, &plain_tpl, 400, "invalid_type", "prompt_cache_key",
                "'prompt_cache_key' must be a string");
    expect_fail("{\"prompt\":\"a\",\"store\":\"no\"}", 0, &plain_tpl, 400, "invalid_type", "store",
                "'store' must be a boolean");
    expect_fail("{\"prompt\":\"a\",\"metadata\":{\"a\":1}}", 0, &plain_tpl, 400, "invalid_type", "metadata",
                "'metadata' must be an object of strings; 'a' is not a string");
    expect_fail("{" MSG ",\"functions\":[]}", 1, &tools_tpl, 400, "unsupported_parameter", "functions",
                "'functions' is not supported by this server");
    /* tools belong to chat completions only */
    expect_fail("{\"prompt\":\"a\",\"tools\":[]}", 0, &plain_tpl, 400, "unknown_parameter", "tools",
                "Unrecognized request argument supplied: tools");
}

#define TOOL(n) "{\"type\":\"function\",\"function\":{\"name\":\"" n "\",\"parameters\":{\"type\":\"object\"}}}"
#define TOOLS "\"tools\":[" TOOL("get_weather") "," TOOL("add") "]"

/* response_format, grammar and regex on both endpoints, tools and
 * tool_choice on chat: what the request carries once accepted. */
static void test_structured_fields(void **state) {
    (void)state;
    api_request rq;
    for (int chat = 0; chat < 2; chat++) {
        const char *p = chat ? MSG : "\"prompt\":\"a\"";
        char body[1024];
        snprintf(body, sizeof body, "{%s,\"response_format\":{\"type\":\"json_object\"}}", p);
        expect_ok(body, chat, &tools_tpl, &rq);
        assert_int_equal(rq.format, API_FORMAT_JSON_OBJECT);
        assert_null(rq.format_text);
        api_request_free(&rq);
        snprintf(body, sizeof body,
                 "{%s,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"person-1\","
                 "\"description\":\"d\",\"strict\":true,\"schema\":{\"type\":\"object\",\"properties\":"
                 "{\"b\":{\"type\":\"integer\"},\"a\":{\"type\":\"string\"}}}}}}", p);
        expect_ok(body, chat, &tools_tpl, &rq);
        assert_int_equal(rq.format, API_FORMAT_JSON_SCHEMA);
        /* the schema's text, keys in the client's order */
        assert_string_equal(rq.format_text, "{\"type\":\"object\",\"properties\":{\"b\":{\"type\":\"integer\"},"
                                            "\"a\":{\"type\":\"string\"}}}");
        assert_int_equal(rq.format_len, strlen(rq.format_text));
        api_request_free(&rq);
        snprintf(body, sizeof body, "{%s,\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
                 "{\"name\":\"x\"}}}", p);
        expect_ok(body, chat, &tools_tpl, &rq); /* no schema: any JSON object */
        assert_int_equal(rq.format, API_FORMAT_JSON_OBJECT);
        api_request_free(&rq);
        snprintf(body, sizeof body, "{%s,\"grammar\":\"root ::= \\\"yes\\\" | \\\"no\\\"\"}", p);
        expect_ok(body, chat, &tools_tpl, &rq);
        assert_int_equal(rq.format, API_FORMAT_GRAMMAR);
        assert_string_equal(rq.format_text, "root ::= \"yes\" | \"no\"");
        api_request_free(&rq);
        snprintf(body, sizeof body, "{%s,\"regex\":\"[0-9]{3}-[a-z]+\"}", p);
        expect_ok(body, chat, &tools_tpl, &rq);
        assert_int_equal(rq.format, API_FORMAT_REGEX);
        assert_string_equal(rq.format_text, "[0-9]{3}-[a-z]+");
        assert_int_equal(rq.tool_choice, API_TOOLS_OFF);
        api_request_free(&rq);
    }
    static const struct {
        const char *extra;
        api_tool_choice want;
        const char *name;
    } choices[] = {
        {TOOLS, API_TOOLS_AUTO, NULL},
        {TOOLS ",\"tool_choice\":\"auto\"", API_TOOLS_AUTO, NULL},
        {TOOLS ",\"tool_choice\":\"none\"", API_TOOLS_OFF, NULL},
        {TOOLS ",\"tool_choice\":\"required\"", API_TOOLS_REQUIRED, NULL},
        {TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"add\"}}", API_TOOLS_NAMED, "add"},
        {TOOLS ",\"response_format\":{\"type\":\"json_object\"}", API_TOOLS_AUTO, NULL},
        {"\"tool_choice\":\"auto\"", API_TOOLS_OFF, NULL},
    };
    for (size_t i = 0; i < sizeof choices / sizeof *choices; i++) {
        char body[1024];
        snprintf(body, sizeof body, "{" MSG ",%s}", choices[i].extra);
        expect_ok(body, 1, &tools_tpl, &rq);
        assert_int_equal(rq.tool_choice, choices[i].want);
        if (choices[i].name) assert_string_equal(rq.tool_name, choices[i].name);
        else assert_null(rq.tool_name);
        /* calls are parsed unless the output has a format of its own */
        assert_int_equal(rq.parse_calls, choices[i].want != API_TOOLS_OFF && !strstr(choices[i].extra, "json_object"));
        if (choices[i].want != API_TOOLS_OFF) {
            assert_string_equal(rq.tools_json, "[" TOOL("get_weather") "," TOOL("add") "]");
            assert_int_equal(rq.tool_family, 1); /* Qwen2.5: hermes */
        } else {
            assert_null(rq.tools_json);
        }
        api_request_free(&rq);
    }
}

/* tool_choice "none" leaves the tools out of the prompt; "auto" renders them. */
static void test_tool_choice_none_prompt(void **state) {
    (void)state;
    api_request plain, none, with;
    expect_ok("{" MSG "}", 1, &tools_tpl, &plain);
    expect_ok("{" MSG "," TOOLS ",\"tool_choice\":\"none\"}", 1, &tools_tpl, &none);
    expect_ok("{" MSG "," TOOLS "}", 1, &tools_tpl, &with);
    assert_int_equal(none.n_prompt[0], plain.n_prompt[0]);
    assert_memory_equal(none.prompts[0], plain.prompts[0], (size_t)plain.n_prompt[0] * sizeof(int32_t));
    assert_true(with.n_prompt[0] > plain.n_prompt[0] + 20);
    api_request_free(&plain);
    api_request_free(&none);
    api_request_free(&with);
    /* "none" with a template that renders no tools: accepted, nothing shown */
    expect_ok("{" MSG "," TOOLS ",\"tool_choice\":\"none\"}", 1, &plain_tpl, &none);
    api_request_free(&none);
}

/* The schema a forced call is constrained by: the named tool alone, or
 * anyOf over the tools; "parameters" as the key in the llama3 family. */
static void test_call_schema(void **state) {
    (void)state;
    api_request rq;
    expect_ok("{" MSG "," TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"add\"}}}", 1,
              &tools_tpl, &rq);
    char *s = structured_call_schema(&rq);
    assert_string_equal(s, "{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"add\"},\"arguments\":"
                           "{\"type\":\"object\"}},\"required\":[\"name\",\"arguments\"],\"additionalProperties\":false}");
    free(s);
    rq.tool_family = 2; /* llama3 */
    free(rq.tool_name);
    rq.tool_name = NULL;
    rq.tool_choice = API_TOOLS_REQUIRED;
    s = structured_call_schema(&rq);
    assert_string_equal(s, "{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"get_weather\"},"
                           "\"parameters\":{\"type\":\"object\"}},\"required\":[\"name\",\"parameters\"],"
                           "\"additionalProperties\":false},{\"type\":\"object\",\"properties\":{\"name\":{\"const\":"
                           "\"add\"},\"parameters\":{\"type\":\"object\"}},\"required\":[\"name\",\"parameters\"],"
                           "\"additionalProperties\":false}]}");
    free(s);
    api_request_free(&rq);
    expect_ok("{" MSG "}", 1, &tools_tpl, &rq);
    assert_null(structured_call_schema(&rq));
    api_request_free(&rq);
}

static void test_structured_refused(void **state) {
    (void)state;
    static const struct {
        int chat;
        const char *extra, *code, *param, *message;
    } cases[] = {
        {1, "\"response_format\":\"text\"", "invalid_type", "response_format",
         "'response_format' must be an object with a 'type'"},
        {0, "\"response_format\":{\"type\":\"xml\"}", "invalid_value", "response_format.type",
         "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", got 'xml'"},
        {1, "\"response_format\":{\"type\":\"json_object\",\"schema\":{}}", "unknown_parameter",
         "response_format.schema", "Unrecognized argument 'response_format.schema'"},
        {1, "\"response_format\":{\"type\":\"json_schema\"}", "missing_parameter", "response_format.json_schema",
         "'response_format.json_schema' must be an object with 'name' and 'schema'"},
        {1, "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{}}}", "missing_parameter",
         "response_format.json_schema.name",
         "'response_format.json_schema.name' must be 1 to 64 letters, digits, '_' or '-'"},
        {1, "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"a b\",\"schema\":{}}}",
         "invalid_value", "response_format.json_schema.name",
         "'response_format.json_schema.name' must be 1 to 64 letters, digits, '_' or '-'"},
        {0, "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"a\",\"schema\":[1]}}",
         "invalid_type", "response_format.json_schema.schema",
         "'response_format.json_schema.schema' must be a JSON Schema object"},
        {1, "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"a\",\"strict\":\"yes\"}}",
         "invalid_type", "response_format.json_schema.strict", "'response_format.json_schema.strict' must be a boolean"},
        {1, "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"a\",\"format\":1}}",
         "unknown_parameter", "response_format.json_schema.format",
         "Unrecognized argument 'response_format.json_schema.format'"},
        {0, "\"grammar\":\"\"", "invalid_value", "grammar", "'grammar' must be a non-empty string of at most 65536 bytes"},
        {1, "\"regex\":7", "invalid_type", "regex", "'regex' must be a non-empty string of at most 4096 bytes"},
        {0, "\"response_format\":{\"type\":\"json_object\"},\"regex\":\"a\"", "invalid_value", "regex",
         "give at most one of 'response_format' (json_object or json_schema), 'grammar' and 'regex'"},
        {1, "\"grammar\":\"root ::= \\\"a\\\"\",\"regex\":\"a\"", "invalid_value", "regex",
         "give at most one of 'response_format' (json_object or json_schema), 'grammar' and 'regex'"},
        {1, "\"tools\":{}", "invalid_type", "tools", "'tools' must be a list of functions"},
        {1, "\"tools\":[{\"type\":\"code_interpreter\"}]", "invalid_value", "tools[0]",
         "'tools[0]' must be {\"type\": \"function\", \"function\": {\"name\": ...}}"},
        {1, "\"tools\":[{\"type\":\"function\"}]", "missing_parameter", "tools[0].function",
         "'tools[0].function' must be an object"},
        {1, "\"tools\":[" TOOL("a") ",{\"type\":\"function\",\"function\":{\"name\":\"has space\"}}]",
         "invalid_value", "tools[1].function.name", "'tools[1].function.name' must be 1 to 64 letters, digits, '_' or '-'"},
        {1, "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"parameters\":\"{}\"}}]",
         "invalid_type", "tools[0].function.parameters", "'tools[0].function.parameters' must be a JSON Schema object"},
        {1, "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"returns\":{}}}]",
         "unknown_parameter", "tools[0].function.returns", "Unrecognized argument 'tools[0].function.returns'"},
        {1, "\"tools\":[" TOOL("a") "," TOOL("a") "]", "invalid_value", "tools[1].function.name",
         "'tools[1].function.name' repeats the name 'a' of tools[0]"},
        {1, "\"tool_choice\":\"sometimes\"", "invalid_value", "tool_choice",
         "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": "
         "{\"name\": string}}"},
        {1, "\"tool_choice\":\"required\"", "invalid_value", "tool_choice",
         "'tool_choice' \"required\" needs 'tools' (a non-empty list)"},
        {1, "\"tools\":[],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}", "invalid_value",
         "tool_choice", "'tool_choice' naming a function needs 'tools' (a non-empty list)"},
        {1, TOOLS ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"mul\"}}", "invalid_value",
         "tool_choice.function.name", "'tool_choice' names the function 'mul', which is not in 'tools'"},
        {1, TOOLS ",\"tool_choice\":{\"type\":\"function\",\"name\":\"add\"}", "invalid_value", "tool_choice",
         "'tool_choice' naming a function must be {\"type\": \"function\", \"function\": {\"name\": string}}"},
        {1, TOOLS ",\"tool_choice\":\"required\",\"response_format\":{\"type\":\"json_object\"}", "invalid_value",
         "tool_choice", "'tool_choice' \"required\" cannot be combined with 'response_format', 'grammar' or 'regex': "
         "a forced call has its own format"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char body[1024];
        snprintf(body, sizeof body, "{%s,%s}", cases[i].chat ? MSG : "\"prompt\":\"a\"", cases[i].extra);
        expect_fail(body, cases[i].chat, &tools_tpl, 400, cases[i].code, cases[i].param, cases[i].message);
    }
    char big[70000];
    int n = snprintf(big, sizeof big, "{\"prompt\":\"a\",\"grammar\":\"");
    memset(big + n, 'x', 65537);
    memcpy(big + n + 65537, "\"}", 3);
    expect_fail(big, 0, &tools_tpl, 400, "invalid_value", "grammar",
                "'grammar' must be a non-empty string of at most 65536 bytes");
}

/* A NUL anywhere names the field; the body's other faults are explained
 * in this API's words, with the line and column. */
static void test_nul_and_json_errors(void **state) {
    (void)state;
    expect_fail("{\"prompt\":\"a\\u0000b\"}", 0, &plain_tpl, 400, "invalid_value", "prompt",
                "'prompt' contains a NUL character (\\u0000), which is not accepted");
    expect_fail("{\"prompt\":[\"ok\",\"a\\u0000\"]}", 0, &plain_tpl, 400, "invalid_value", "prompt[1]",
                "'prompt[1]' contains a NUL character (\\u0000), which is not accepted");
    expect_fail("{\"messages\":[{\"role\":\"user\",\"content\":\"x\\u0000\"}]}", 1, &plain_tpl, 400, "invalid_value",
                "messages[0].content", "'messages[0].content' contains a NUL character (\\u0000), which is not accepted");
    expect_fail("{\"stop\":[\"\\u0000\"],\"prompt\":\"a\"}", 0, &plain_tpl, 400, "invalid_value", "stop[0]",
                "'stop[0]' contains a NUL character (\\u0000), which is not accepted");
    expect_fail("{\"pro\\u0000mpt\":\"a\"}", 0, &plain_tpl, 400, "invalid_json", "",
                "the request body is not valid JSON: a key contains a NUL character (\\u0000) (line 1, column 15)");
    expect_fail("{\"prompt\":", 0, &plain_tpl, 400, "invalid_json", "",
                "the request body is not valid JSON: it ends before the JSON value is complete (line 1, column 10)");
    expect_fail("{\"prompt\":\"a\"} x", 0, &plain_tpl, 400, "invalid_json", "",
                "the request body is not valid JSON: there is more text after the JSON value (line 1, column 16)");
    expect_fail("{\"prompt\":\"a\",\"prompt\":\"b\"}", 0, &plain_tpl, 400, "invalid_json", "",
                "the request body is not valid JSON: an object has the same key twice (line 1, column 22)");
    expect_fail("{\"prompt\":\"a\",\"max_tokens\":1e999}", 0, &plain_tpl, 400, "invalid_json", "",
                "the request body is not valid JSON: a number is too large (line 1, column 32)");
    expect_fail("{\"prompt\":nope}", 0, &plain_tpl, 400, "invalid_json", "",
                "the request body is not valid JSON: invalid syntax (line 1, column 14)");
    char deep[5000];
    size_t n = 0;
    n += (size_t)snprintf(deep, sizeof deep, "{\"prompt\":");
    for (int i = 0; i < 2100; i++) deep[n++] = '[';
    expect_fail_len(deep, n, 0, &plain_tpl, 400, "invalid_json", "",
                    "the request body is not valid JSON: it is nested too deeply (line 1, column 2058)");
    /* /tokenize and /detokenize share the loader */
    api_limits lim = limits(&plain_tpl);
    api_error e;
    int32_t *ids;
    size_t k;
    static const char tz[] = "{\"prompt\":\"\\u0000\"}";
    assert_int_equal(api_parse_tokenize(tz, sizeof tz - 1, &lim, &ids, &k, &e), -1);
    assert_string_equal(e.param, "prompt");
    assert_string_equal(e.message, "'prompt' contains a NUL character (\\u0000), which is not accepted");
    static const char tk[] = "{\"tokens\":[1,2],\"model\":\"m\\u0000\"}";
    assert_int_equal(api_parse_detokenize(tk, sizeof tk - 1, &lim, &ids, &k, &e), -1);
    assert_string_equal(e.param, "model");
}

/* /tokenize accepts an empty tools list with a template that renders none. */
static void test_tokenize_empty_tools(void **state) {
    (void)state;
    api_limits lim = limits(&plain_tpl);
    api_error e;
    int32_t *ids = NULL;
    size_t k = 0;
    static const char body[] = "{" MSG ",\"tools\":[],\"add_generation_prompt\":false}";
    assert_int_equal(api_parse_tokenize(body, sizeof body - 1, &lim, &ids, &k, &e), 0);
    assert_true(k > 0);
    free(ids);
}

/* chat_template_kwargs reach the template as variables: Qwen3's template
 * closes an empty think block when enable_thinking is false. */
static void test_template_kwargs(void **state) {
    (void)state;
    chat_template q3;
    kvlm_error err;
    assert_int_equal(chat_template_load(&q3, "models/gpt2-tokenizer", "models/gpt2-tokenizer",
                                        "tests/fixtures/templates/Qwen-Qwen3-0.6B.jinja", &err),
                     0);
    json_t *msgs = json_pack("[{ssss}]", "role", "user", "content", "hi");
    json_t *kw = json_pack("{sb}", "enable_thinking", 0);
    sbuf with = {0}, without = {0};
    char msg[200];
    int raised;
    assert_int_equal(chat_render_vars(&q3, msgs, NULL, kw, 1, &with, msg, sizeof msg, &raised), 0);
    assert_int_equal(chat_render_vars(&q3, msgs, NULL, NULL, 1, &without, msg, sizeof msg, &raised), 0);
    static const char closed[] = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
    assert_true(with.len == without.len + strlen("<think>\n\n</think>\n\n"));
    assert_memory_equal(with.data + with.len - strlen(closed), closed, strlen(closed));
    sbuf_free(&with);
    sbuf_free(&without);
    json_decref(kw);
    json_decref(msgs);

    api_limits lim = limits(&q3);
    api_error e;
    int32_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    static const char on[] = "{" MSG "}";
    static const char off[] = "{" MSG ",\"chat_template_kwargs\":{\"enable_thinking\":false}}";
    assert_int_equal(api_parse_tokenize(on, sizeof on - 1, &lim, &a, &na, &e), 0);
    assert_int_equal(api_parse_tokenize(off, sizeof off - 1, &lim, &b, &nb, &e), 0);
    assert_true(nb > na);
    assert_memory_equal(a, b, na * sizeof *a);
    free(a);
    free(b);
    expect_fail("{" MSG ",\"chat_template_kwargs\":[1]}", 1, &q3, 400, "invalid_type", "chat_template_kwargs",
                "'chat_template_kwargs' must be an object of template variables");
    expect_fail("{" MSG ",\"chat_template_kwargs\":{\"messages\":[]}}", 1, &q3, 400, "invalid_value",
                "chat_template_kwargs", "'chat_template_kwargs' may not set 'messages': the server sets it");
    api_request rq;
    expect_ok("{" MSG ",\"chat_template_kwargs\":{\"enable_thinking\":false}}", 1, &q3, &rq);
    api_request_free(&rq);
    chat_template_free(&q3);
}

/* kvlm_speculation: parsed into the scheduler's settings, or refused by field. */
static void test_speculation(void **state) {
    (void)state;
    api_request rq;
    expect_ok("{\"prompt\":\"a\",\"kvlm_speculation\":{\"draft\":\"ngram\",\"k\":6,\"ngram\":2}}", 0, &plain_tpl, &rq);
    assert_int_equal(rq.speculation_given, 1);
    assert_int_equal(rq.speculation.mode, KVLM_DRAFT_NGRAM);
    assert_int_equal(rq.speculation.k, 6);
    assert_int_equal(rq.speculation.ngram, 2);
    assert_int_equal(rq.speculation.fixed, 0); /* adaptive unless asked */
    api_request_free(&rq);
    expect_ok("{\"prompt\":\"a\",\"kvlm_speculation\":{\"draft\":\"ngram\",\"adaptive\":false}}", 0, &plain_tpl, &rq);
    assert_int_equal(rq.speculation.fixed, 1);
    assert_int_equal(rq.speculation.k, 4);
    assert_int_equal(rq.speculation.ngram, 3);
    api_request_free(&rq);
    expect_ok("{\"prompt\":\"a\",\"kvlm_speculation\":{\"draft\":\"ngram\",\"adaptive\":true}}", 0, &plain_tpl, &rq);
    assert_int_equal(rq.speculation.fixed, 0);
    api_request_free(&rq);
    expect_ok("{" MSG ",\"kvlm_speculation\":{\"draft\":\"none\"}}", 1, &plain_tpl, &rq);
    assert_int_equal(rq.speculation_given, 1);
    assert_int_equal(rq.speculation.mode, KVLM_DRAFT_NONE);
    api_request_free(&rq);
    expect_ok("{\"prompt\":\"a\"}", 0, &plain_tpl, &rq);
    assert_int_equal(rq.speculation_given, 0);
    api_request_free(&rq);
    expect_fail("{\"prompt\":\"a\",\"kvlm_speculation\":{\"draft\":\"model\"}}", 0, &plain_tpl, 400, "invalid_value",
                "kvlm_speculation.draft",
                "'kvlm_speculation.draft' \"model\": this server has no draft model (kvlm serve --draft)");
    expect_fail("{\"prompt\":\"a\",\"kvlm_speculation\":{\"draft\":\"big\"}}", 0, &plain_tpl, 400, "invalid_value",
                "kvlm_speculation.draft", "'kvlm_speculation.draft' must be \"none\", \"ngram\" or \"model\"");
    expect_fail("{\"prompt\":\"a\",\"kvlm_speculation\":{\"draft\":\"ngram\",\"k\":17}}", 0, &plain_tpl, 400,
                "invalid_value", "kvlm_speculation.k", "'kvlm_speculation.k' must be an integer from 1 to 16");
    expect_fail("{\"prompt\":\"a\",\"kvlm_speculation\":{\"draft\":\"ngram\",\"ngram\":0}}", 0, &plain_tpl, 400,
                "invalid_value", "kvlm_speculation.ngram", "'kvlm_speculation.ngram' must be an integer from 1 to 8");
    expect_fail("{\"prompt\":\"a\",\"kvlm_speculation\":{\"draft\":\"ngram\",\"depth\":2}}", 0, &plain_tpl, 400,
                "unknown_parameter", "kvlm_speculation",
                "Unrecognized argument 'kvlm_speculation.depth' (draft, k, ngram, adaptive)");
    expect_fail("{\"prompt\":\"a\",\"kvlm_speculation\":{\"draft\":\"ngram\",\"adaptive\":1}}", 0, &plain_tpl, 400,
                "invalid_type", "kvlm_speculation.adaptive", "'kvlm_speculation.adaptive' must be true or false");
    expect_fail("{\"prompt\":\"a\",\"kvlm_speculation\":4}", 0, &plain_tpl, 400, "invalid_type", "kvlm_speculation",
                "'kvlm_speculation' must be an object");
    /* a grammar and speculation together */
    expect_ok("{\"prompt\":\"a\",\"regex\":\"[a-z]+\",\"kvlm_speculation\":{\"draft\":\"ngram\",\"k\":5}}", 0, &plain_tpl,
              &rq);
    assert_int_equal(rq.format, API_FORMAT_REGEX);
    assert_int_equal(rq.speculation_given, 1);
    assert_int_equal(rq.speculation.mode, KVLM_DRAFT_NGRAM);
    assert_int_equal(rq.speculation.k, 5);
    api_request_free(&rq);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_harmless_chat_fields),   cmocka_unit_test(test_ignored_fields_change_nothing),
        cmocka_unit_test(test_harmless_completion_fields), cmocka_unit_test(test_integers_written_as_floats),
        cmocka_unit_test(test_refused_fields),         cmocka_unit_test(test_nul_and_json_errors),
        cmocka_unit_test(test_tokenize_empty_tools),   cmocka_unit_test(test_structured_fields),
        cmocka_unit_test(test_tool_choice_none_prompt), cmocka_unit_test(test_structured_refused),
        cmocka_unit_test(test_call_schema),
        cmocka_unit_test(test_speculation),
        cmocka_unit_test(test_template_kwargs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
