/*
 * The Anthropic Messages and OpenAI Responses request parsers
 * (src/app/anthropic_request.c, src/app/responses_request.c) as units,
 * with the shipped GPT-2 tokenizer and a chat template that renders tools
 * (tests/fixtures/templates/Qwen-Qwen2.5-7B-Instruct.jinja), and the
 * bounded response store (src/server/responses_store.c).
 *
 * Checks: each body translates into exactly the chat body written out by
 * hand, and runs as exactly the tokens that chat body runs as; sampling,
 * stop strings, max tokens and tool choice land in the request; fields
 * that change nothing are accepted, what kvlm cannot honour is refused
 * with the status, code, field and message; count_tokens counts the
 * prompt /v1/messages runs; a Responses conversation continues from the
 * stored turns without the earlier instructions; the store drops entries
 * past their count, byte and age limits, oldest first; the reasoning
 * splitter gives the same reasoning and answer whole and byte by byte.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "app/anthropic_request.h"
#include "app/reasoning.h"
#include "app/responses_request.h"
#include "server/responses_store.h"

static kvlm_tokenizer *tok;
static chat_template tpl;

static int setup(void **state) {
    (void)state;
    kvlm_error err;
    tok = kvlm_tokenizer_load("models/gpt2-tokenizer", &err);
    if (!tok) return -1;
    return chat_template_load(&tpl, "models/gpt2-tokenizer", "models/gpt2-tokenizer",
                              "tests/fixtures/templates/Qwen-Qwen2.5-7B-Instruct.jinja", &err);
}

static int teardown(void **state) {
    (void)state;
    chat_template_free(&tpl);
    kvlm_tokenizer_free(tok);
    return 0;
}

static api_limits limits(void) {
    return (api_limits){.tok = tok, .tpl = &tpl, .model_name = "m", .n_ctx = 1024, .vocab = 50257, .max_seqs = 4,
                        .block_size = 16, .max_prompts = 4, .kv_blocks = 256, .random_seed = 7};
}

static json_t *load(const char *text) {
    json_error_t je;
    json_t *j = json_loads(text, 0, &je);
    if (!j) fail_msg("test JSON does not parse: %s: %s", je.text, text);
    return j;
}

static void assert_json(json_t *got, const char *want_text) {
    json_t *want = load(want_text);
    if (!json_equal(got, want)) {
        char *g = json_dumps(got, JSON_COMPACT | JSON_SORT_KEYS), *w = json_dumps(want, JSON_COMPACT | JSON_SORT_KEYS);
        fail_msg("got  %s\nwant %s", g, w);
    }
    json_decref(want);
}

/* The request the chat body `chat` runs as, compared with rq: same prompt tokens. */
static void assert_same_prompt(const api_request *rq, const char *chat) {
    api_limits lim = limits();
    api_request c;
    api_error e;
    if (api_parse_completion(chat, strlen(chat), 1, &lim, &c, &e)) fail_msg("chat body refused: %s", e.message);
    assert_int_equal(rq->n_prompts, 1);
    assert_int_equal(rq->n_prompt[0], c.n_prompt[0]);
    assert_memory_equal(rq->prompts[0], c.prompts[0], (size_t)c.n_prompt[0] * sizeof(int32_t));
    api_request_free(&c);
}

/* ------------------------------------------------------------ Anthropic */

static const char anth_conv[] =
    "{\"model\":\"m\",\"max_tokens\":20,\"system\":[{\"type\":\"text\",\"text\":\"Be brief.\"},"
    "{\"type\":\"text\",\"text\":\"Use tools.\",\"cache_control\":{\"type\":\"ephemeral\"}}],"
    "\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
    "{\"role\":\"assistant\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hm\",\"signature\":\"x\"},"
    "{\"type\":\"text\",\"text\":\"Looking.\"},{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"get_weather\","
    "\"input\":{\"city\":\"Paris\"}}]},"
    "{\"role\":\"user\",\"content\":[{\"type\":\"tool_result\",\"tool_use_id\":\"toolu_1\",\"content\":"
    "[{\"type\":\"text\",\"text\":\"21 C\"}]},{\"type\":\"text\",\"text\":\"And Rome?\"}]}],"
    "\"tools\":[{\"name\":\"get_weather\",\"description\":\"Weather\",\"input_schema\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}],"
    "\"tool_choice\":{\"type\":\"tool\",\"name\":\"get_weather\"},\"temperature\":0.5,\"top_p\":0.9,\"top_k\":7,"
    "\"stop_sequences\":[\"END\",\"\\n\\n\"],\"metadata\":{\"user_id\":\"u1\"},"
    "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":1024}}";

static const char anth_conv_as_chat[] =
    "{\"model\":\"m\",\"max_tokens\":20,\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\\nUse tools.\"},"
    "{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
    "{\"role\":\"assistant\",\"content\":\"Looking.\",\"tool_calls\":[{\"id\":\"toolu_1\",\"type\":\"function\","
    "\"function\":{\"name\":\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}]},"
    "{\"role\":\"tool\",\"tool_call_id\":\"toolu_1\",\"content\":\"21 C\"},"
    "{\"role\":\"user\",\"content\":\"And Rome?\"}],"
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"Weather\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}}],"
    "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}},\"temperature\":0.5,"
    "\"top_p\":0.9,\"top_k\":7,\"stop\":[\"END\",\"\\n\\n\"]}";

static void test_anthropic_translation(void **state) {
    (void)state;
    api_error e;
    json_t *root = load(anth_conv), *chat = anth_to_chat(root, 0, &e);
    if (!chat) fail_msg("refused: %s", e.message);
    assert_json(chat, anth_conv_as_chat);
    json_decref(chat);
    json_decref(root);
}

static void test_anthropic_request(void **state) {
    (void)state;
    api_limits lim = limits();
    api_request rq;
    api_error e;
    if (anth_parse_messages(anth_conv, strlen(anth_conv), &lim, &rq, &e)) fail_msg("refused: %s", e.message);
    assert_int_equal(rq.shape, API_SHAPE_ANTHROPIC);
    assert_int_equal(rq.max_new[0], 20);
    assert_int_equal(rq.stream, 0);
    assert_float_equal(rq.sampling.temperature, 0.5, 1e-6);
    assert_float_equal(rq.sampling.top_p, 0.9, 1e-6);
    assert_int_equal(rq.sampling.top_k, 7);
    assert_int_equal(rq.n_stops, 2);
    assert_string_equal(rq.stops[0], "END");
    assert_string_equal(rq.stops[1], "\n\n");
    assert_int_equal(rq.tool_choice, API_TOOLS_NAMED);
    assert_string_equal(rq.tool_name, "get_weather");
    assert_same_prompt(&rq, anth_conv_as_chat);
    int n = 0;
    /* count_tokens: the same prompt, without the generation fields */
    static const char count[] =
        "{\"model\":\"m\",\"system\":\"Be brief.\",\"messages\":[{\"role\":\"user\",\"content\":\"Hi there\"}]}";
    static const char same[] = "{\"model\":\"m\",\"max_tokens\":5,\"system\":\"Be brief.\","
                               "\"messages\":[{\"role\":\"user\",\"content\":\"Hi there\"}]}";
    api_request_free(&rq);
    if (anth_count_tokens(count, strlen(count), &lim, &n, &e)) fail_msg("count refused: %s", e.message);
    if (anth_parse_messages(same, strlen(same), &lim, &rq, &e)) fail_msg("refused: %s", e.message);
    assert_int_equal(n, rq.n_prompt[0]);
    assert_true(n > 8);
    api_request_free(&rq);
    /* tool_choice any is required; none leaves the tools out of the prompt */
    static const char any[] = "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{"
                              "\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}],\"tool_choice\":{\"type\":\"any\"}}";
    if (anth_parse_messages(any, strlen(any), &lim, &rq, &e)) fail_msg("refused: %s", e.message);
    assert_int_equal(rq.tool_choice, API_TOOLS_REQUIRED);
    api_request_free(&rq);
    static const char none[] = "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"tools\":[{"
                               "\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}],\"tool_choice\":{\"type\":\"none\"}}";
    if (anth_parse_messages(none, strlen(none), &lim, &rq, &e)) fail_msg("refused: %s", e.message);
    assert_int_equal(rq.tool_choice, API_TOOLS_OFF);
    assert_same_prompt(&rq, "{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}");
    api_request_free(&rq);
}

static void expect_anth_fail(const char *body, int status, const char *param, const char *message) {
    api_limits lim = limits();
    api_request rq;
    api_error e;
    memset(&e, 0, sizeof e);
    if (!anth_parse_messages(body, strlen(body), &lim, &rq, &e)) fail_msg("%s: accepted", body);
    assert_int_equal(e.status, status);
    assert_string_equal(e.param, param);
    assert_string_equal(e.message, message);
}

#define MSG "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]"

static void test_anthropic_refusals(void **state) {
    (void)state;
    expect_anth_fail("{" MSG "}", 400, "max_tokens", "max_tokens: Field required");
    expect_anth_fail("{\"max_tokens\":0," MSG "}", 400, "max_tokens", "max_tokens: must be an integer of at least 1");
    expect_anth_fail("{\"max_tokens\":5,\"temperature\":1.5," MSG "}", 400, "temperature",
                     "temperature: must be a number from 0 to 1");
    expect_anth_fail("{\"max_tokens\":5,\"frequency_penalty\":1," MSG "}", 400, "frequency_penalty",
                     "frequency_penalty: Extra inputs are not permitted");
    expect_anth_fail("{\"max_tokens\":5,\"messages\":[{\"role\":\"system\",\"content\":\"x\"}]}", 400,
                     "messages[0].role", "messages[0].role: must be \"user\" or \"assistant\"");
    expect_anth_fail("{\"max_tokens\":5,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image\","
                     "\"source\":{}}]}]}", 400, "messages[0].content[0]",
                     "messages[0].content[0]: content blocks of type 'image' are not supported in user turns");
    expect_anth_fail("{\"max_tokens\":5," MSG ",\"tools\":[{\"type\":\"web_search_20250305\",\"name\":\"web_search\"}]}",
                     400, "tools[0]", "tools[0]: server tools ('web_search_20250305') are not supported; give custom "
                     "tools with name and input_schema");
    expect_anth_fail("{\"max_tokens\":5," MSG ",\"tools\":[{\"name\":\"f\",\"input_schema\":{}}],"
                     "\"tool_choice\":{\"type\":\"tool\"}}", 400, "tool_choice",
                     "tool_choice.name: Field required for type \"tool\"");
    expect_anth_fail("{\"max_tokens\":5," MSG ",\"metadata\":{\"user_id\":3}}", 400, "metadata",
                     "metadata.user_id: must be a string");
    expect_anth_fail("{\"max_tokens\":5,\"model\":\"claude\"," MSG "}", 404, "model",
                     "The model 'claude' does not exist; this server serves 'm'");
    expect_anth_fail("[1]", 400, "", "the request body must be a JSON object");
}

/* ------------------------------------------------------------ Responses */

static const char *lookup_id;
static json_t *lookup(void *user, const char *id) {
    (void)user;
    lookup_id = id;
    if (strcmp(id, "resp_old")) return NULL;
    return load("[{\"role\":\"user\",\"content\":\"Weather?\"},{\"role\":\"assistant\",\"content\":\"\","
                "\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                "\"arguments\":\"{}\"}}]}]");
}

static const char resp_body[] =
    "{\"model\":\"m\",\"instructions\":\"Be brief.\",\"previous_response_id\":\"resp_old\",\"max_output_tokens\":12,"
    "\"store\":false,\"metadata\":{\"k\":\"v\"},\"truncation\":\"disabled\",\"reasoning\":{},\"include\":[],"
    "\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"call_1\",\"output\":\"21 C\"},"
    "{\"role\":\"developer\",\"content\":[{\"type\":\"input_text\",\"text\":\"Note: \"},{\"type\":\"input_text\","
    "\"text\":\"Celsius.\"}]},{\"type\":\"function_call\",\"call_id\":\"call_2\",\"name\":\"a\",\"arguments\":\"{}\"},"
    "{\"type\":\"function_call\",\"call_id\":\"call_3\",\"name\":\"b\",\"arguments\":\"{\\\"x\\\":1}\"},"
    "{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[]}],"
    "\"tools\":[{\"type\":\"function\",\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\"},\"strict\":true}],"
    "\"tool_choice\":{\"type\":\"function\",\"name\":\"get_weather\"}}";

static const char resp_conv[] =
    "[{\"role\":\"user\",\"content\":\"Weather?\"},{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"id\":"
    "\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"{}\"}}]},"
    "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"21 C\"},"
    "{\"role\":\"system\",\"content\":\"Note: Celsius.\"},"
    "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":["
    "{\"id\":\"call_2\",\"type\":\"function\",\"function\":{\"name\":\"a\",\"arguments\":\"{}\"}},"
    "{\"id\":\"call_3\",\"type\":\"function\",\"function\":{\"name\":\"b\",\"arguments\":\"{\\\"x\\\":1}\"}}]}]";

static void test_responses_translation(void **state) {
    (void)state;
    api_error e;
    json_t *conv, *echo, *root = load(resp_body), *chat = oresp_to_chat(root, lookup, NULL, &conv, &echo, &e);
    if (!chat) fail_msg("refused: %s", e.message);
    assert_string_equal(lookup_id, "resp_old");
    assert_json(conv, resp_conv);
    /* the chat messages: the instructions first, then the conversation */
    json_t *msgs = json_object_get(chat, "messages");
    assert_int_equal(json_array_size(msgs), 6);
    assert_json(json_array_get(msgs, 0), "{\"role\":\"system\",\"content\":\"Be brief.\"}");
    assert_json(json_object_get(chat, "tools"), "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
                "\"parameters\":{\"type\":\"object\"},\"strict\":true}}]");
    assert_json(json_object_get(chat, "tool_choice"), "{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}");
    assert_int_equal(json_integer_value(json_object_get(chat, "max_tokens")), 12);
    assert_string_equal(json_string_value(json_object_get(echo, "previous_response_id")), "resp_old");
    assert_string_equal(json_string_value(json_object_get(echo, "instructions")), "Be brief.");
    json_decref(conv);
    json_decref(echo);
    json_decref(chat);
    json_decref(root);
}

static void test_responses_request(void **state) {
    (void)state;
    api_limits lim = limits();
    api_request rq;
    api_error e;
    if (oresp_parse(resp_body, strlen(resp_body), &lim, lookup, NULL, &rq, &e)) fail_msg("refused: %s", e.message);
    assert_int_equal(rq.shape, API_SHAPE_RESPONSES);
    assert_int_equal(rq.store, 0);
    assert_int_equal(rq.max_new[0], 12);
    assert_int_equal(rq.tool_choice, API_TOOLS_NAMED);
    json_t *conv = load(rq.conversation);
    assert_json(conv, resp_conv);
    json_decref(conv);
    api_request_free(&rq);
    /* a string input is one user turn; text.format json_schema is the schema constraint */
    static const char s[] = "{\"input\":\"Name a king.\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"k\","
                            "\"schema\":{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"string\"}}},"
                            "\"strict\":true}}}";
    if (oresp_parse(s, strlen(s), &lim, lookup, NULL, &rq, &e)) fail_msg("refused: %s", e.message);
    assert_int_equal(rq.store, 1);
    assert_int_equal(rq.format, API_FORMAT_JSON_SCHEMA);
    assert_string_equal(rq.format_text, "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"string\"}}}");
    assert_string_equal(rq.conversation, "[{\"role\":\"user\",\"content\":\"Name a king.\"}]");
    assert_same_prompt(&rq, "{\"messages\":[{\"role\":\"user\",\"content\":\"Name a king.\"}]}");
    api_request_free(&rq);
}

static void expect_resp_fail(const char *body, int status, const char *param, const char *message) {
    api_limits lim = limits();
    api_request rq;
    api_error e;
    memset(&e, 0, sizeof e);
    if (!oresp_parse(body, strlen(body), &lim, lookup, NULL, &rq, &e)) fail_msg("%s: accepted", body);
    assert_int_equal(e.status, status);
    assert_string_equal(e.param, param);
    assert_string_equal(e.message, message);
}

static void test_responses_refusals(void **state) {
    (void)state;
    expect_resp_fail("{}", 400, "input", "'input' must be a string or a list of items");
    expect_resp_fail("{\"input\":[]}", 400, "input", "'input' has no message");
    expect_resp_fail("{\"input\":\"x\",\"previous_response_id\":\"resp_gone\"}", 404, "previous_response_id",
                     "Previous response with id 'resp_gone' not found (never stored, expired or evicted).");
    expect_resp_fail("{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"image_url\":\"x\"}]}]}",
                     400, "input[0].content[0]",
                     "'input[0].content[0]' must be an input_text or output_text part: this server reads text only");
    expect_resp_fail("{\"input\":\"x\",\"tools\":[{\"type\":\"web_search\"}]}", 400, "tools[0]",
                     "'tools[0]': tools of type 'web_search' are not supported (function only)");
    expect_resp_fail("{\"input\":\"x\",\"background\":true}", 400, "background",
                     "'background' is not supported by this server");
    expect_resp_fail("{\"input\":\"x\",\"include\":[\"reasoning.encrypted_content\"]}", 400, "include",
                     "'include' is not supported by this server");
    expect_resp_fail("{\"input\":\"x\",\"seed\":1}", 400, "seed", "Unknown parameter: 'seed'.");
    expect_resp_fail("{\"input\":\"x\",\"text\":{\"format\":{\"type\":\"yaml\"}}}", 400, "text.format.type",
                     "'text.format.type' must be text, json_object or json_schema");
    expect_resp_fail("{\"input\":\"x\",\"temperature\":7}", 400, "temperature",
                     "'temperature' must be between 0 and 2, got 7");
    expect_resp_fail("{\"input\":\"x\",\"max_output_tokens\":5000}", 400, "max_tokens",
                     "This model's maximum context length is 1024 tokens. However, you requested 5060 tokens (60 in "
                     "the prompt, 5000 for the completion). Please reduce the prompt or 'max_tokens'.");
}

/* ------------------------------------------------------------ reasoning */

static void emit_to(void *user, int thinking, const char *text, size_t n) {
    sbuf *b = user;
    sbuf_add(&b[thinking ? 0 : 1], text, n);
}

/* Whole and fed one byte at a time: the same reasoning and answer. */
static void expect_split(const char *text, int inside, const char *thinking, const char *answer) {
    sbuf t = {0}, a = {0};
    rs_split_all(text, strlen(text), inside, &t, &a);
    assert_int_equal(t.len, strlen(thinking));
    assert_int_equal(a.len, strlen(answer));
    if (t.len) assert_memory_equal(t.data, thinking, t.len);
    if (a.len) assert_memory_equal(a.data, answer, a.len);
    sbuf_free(&t);
    sbuf_free(&a);
    sbuf b[2] = {{0}, {0}};
    rs_split s;
    rs_init(&s, inside);
    for (size_t i = 0; text[i]; i++) rs_feed(&s, text + i, 1, emit_to, b);
    rs_finish(&s, emit_to, b);
    rs_free(&s);
    assert_int_equal(b[0].len, strlen(thinking));
    assert_int_equal(b[1].len, strlen(answer));
    if (b[0].len) assert_memory_equal(b[0].data, thinking, b[0].len);
    if (b[1].len) assert_memory_equal(b[1].data, answer, b[1].len);
    sbuf_free(&b[0]);
    sbuf_free(&b[1]);
}

static void test_reasoning_split(void **state) {
    (void)state;
    expect_split("\n<think>plan </thi nk> a</think>\n\nThe answer.", 0, "plan </thi nk> a", "The answer.");
    expect_split("still thinking</think> done", 1, "still thinking", "done");
    expect_split("<thin", 0, "", "<thin");                 /* ended before the marker was whole */
    expect_split("  <thinking>x", 0, "", "  <thinking>x");  /* not the marker: the answer, whitespace kept */
    expect_split("no reasoning <think>here</think>", 0, "", "no reasoning <think>here</think>");
    expect_split("cut off </thi", 1, "cut off </thi", "");
    expect_split("", 1, "", "");
    assert_true(rs_prompt_opens("assistant: <think>\n", 19));
    assert_false(rs_prompt_opens("assistant: <think>x", 19));
    assert_true(rs_template_reasons("{{ c.split('</think>')[-1] }}"));
    assert_false(rs_template_reasons("{{ m.content }}"));
}

/* ------------------------------------------------------------ the store */

static void test_store_limits(void **state) {
    (void)state;
    resp_store *rs = rstore_create(3, 1 << 20, 100.0);
    char id[16];
    for (int i = 0; i < 4; i++) {
        snprintf(id, sizeof id, "r%d", i);
        assert_int_equal(rstore_put(rs, id, "[{\"role\":\"user\",\"content\":\"a\"}]", "{\"id\":1}", 10.0 * i), 0);
    }
    /* four puts, three kept: the oldest went */
    assert_int_equal(rstore_count(rs), 3);
    assert_null(rstore_conversation(rs, "r0", 30.0));
    json_t *c = rstore_conversation(rs, "r1", 30.0);
    assert_json(c, "[{\"role\":\"user\",\"content\":\"a\"}]");
    json_decref(c);
    char *b = rstore_body(rs, "r3", 30.0);
    assert_string_equal(b, "{\"id\":1}");
    free(b);
    /* r1 was stored at 10 s: expired past 110 s, r2 (20 s) not yet at 115 s */
    assert_null(rstore_body(rs, "r1", 115.0));
    assert_int_equal(rstore_count(rs), 2);
    b = rstore_body(rs, "r2", 115.0);
    assert_non_null(b);
    free(b);
    rstore_free(rs);
    /* the byte bound: an entry bigger than the store is not kept; older ones make room */
    rs = rstore_create(100, 600, 100.0);
    char big[700];
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    assert_int_equal(rstore_put(rs, "big", "[]", big, 0), 0);
    assert_int_equal(rstore_count(rs), 0);
    char mid[200];
    memset(mid, 'y', sizeof mid - 1);
    mid[sizeof mid - 1] = 0;
    for (int i = 0; i < 4; i++) {
        snprintf(id, sizeof id, "m%d", i);
        assert_int_equal(rstore_put(rs, id, "[]", mid, 1), 0);
    }
    assert_true(rstore_count(rs) < 4);
    b = rstore_body(rs, "m3", 1);
    assert_non_null(b);
    free(b);
    assert_null(rstore_body(rs, "m0", 1));
    rstore_free(rs);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_anthropic_translation), cmocka_unit_test(test_anthropic_request),
        cmocka_unit_test(test_anthropic_refusals),    cmocka_unit_test(test_responses_translation),
        cmocka_unit_test(test_responses_request),     cmocka_unit_test(test_responses_refusals),
        cmocka_unit_test(test_reasoning_split),       cmocka_unit_test(test_store_limits),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
