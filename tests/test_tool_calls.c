/*
 * The tool-call output parser (src/app/tool_calls.c) on synthetic model
 * outputs of each template family: the call syntax the family's template
 * writes for an assistant's tool call (as jinja2 renders the fixture
 * templates in tests/fixtures/templates/expected.json), near misses that
 * must stay content, calls cut short, several calls, text around them.
 *
 * Every case is checked three ways with the same expected content, names
 * and arguments: the whole text at once, fed byte by byte, and split in
 * two at every byte position; a streamed call's name must arrive before
 * any of its arguments. Family detection is checked on the real templates.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "helpers.h"
#include "app/tool_calls.h"

typedef struct want_call {
    const char *name, *args;
} want_call;

typedef struct tc_case {
    tc_family family;
    const char *text;
    const char *content;     /* expected content */
    int n_calls;
    want_call calls[3];
} tc_case;

/* What a stream of events adds up to, and whether it was in order. */
typedef struct stream_sum {
    tc_result r;
    int order_error;
    int started[8];
} stream_sum;

static void on_event(void *user, const tc_event *ev) {
    stream_sum *s = user;
    if (ev->kind == TC_EV_CALL) {
        if (ev->index != s->r.n_calls || ev->index >= 8) s->order_error = 1;
        else s->started[ev->index] = 1;
        s->r.calls = realloc(s->r.calls, (size_t)(s->r.n_calls + 1) * sizeof *s->r.calls);
        assert_non_null(s->r.calls);
        memset(&s->r.calls[s->r.n_calls], 0, sizeof *s->r.calls);
        s->r.calls[s->r.n_calls++].name = strndup(ev->text, ev->len);
    } else if (ev->kind == TC_EV_ARGS) {
        if (ev->index < 0 || ev->index >= s->r.n_calls || !s->started[ev->index]) s->order_error = 1;
        else sbuf_add(&s->r.calls[ev->index].args, ev->text, ev->len);
    } else {
        sbuf_add(&s->r.content, ev->text, ev->len);
    }
}

static void check_result(const tc_case *c, const tc_result *r, const char *how) {
    const char *content = r->content.data ? r->content.data : "";
    if (strcmp(content, c->content) || r->n_calls != c->n_calls)
        fprintf(stderr, "  %s of %s: content '%s' (want '%s'), %d calls (want %d)\n", how, c->text, content,
                c->content, r->n_calls, c->n_calls);
    assert_string_equal(content, c->content);
    assert_int_equal(r->n_calls, c->n_calls);
    for (int i = 0; i < c->n_calls; i++) {
        assert_string_equal(r->calls[i].name, c->calls[i].name);
        assert_string_equal(r->calls[i].args.data ? r->calls[i].args.data : "", c->calls[i].args);
    }
}

/* Feeds text in pieces cut at the positions in cuts (ascending). */
static void check_stream(const tc_case *c, const size_t *cuts, int n_cuts, const char *how) {
    stream_sum s;
    memset(&s, 0, sizeof s);
    tc_parser *p = tc_parser_new(c->family);
    assert_non_null(p);
    size_t at = 0, n = strlen(c->text);
    for (int i = 0; i <= n_cuts; i++) {
        size_t to = i < n_cuts ? cuts[i] : n;
        assert_int_equal(tc_parser_feed(p, c->text + at, to - at, on_event, &s), 0);
        at = to;
    }
    assert_int_equal(tc_parser_finish(p, on_event, &s), 0);
    assert_int_equal(tc_parser_calls(p), c->n_calls);
    tc_parser_free(p);
    assert_int_equal(s.order_error, 0);
    check_result(c, &s.r, how);
    tc_result_free(&s.r);
}

static void run_case(const tc_case *c) {
    tc_result r;
    assert_int_equal(tc_parse(c->family, c->text, strlen(c->text), &r), 0);
    check_result(c, &r, "whole");
    tc_result_free(&r);
    size_t n = strlen(c->text);
    size_t *cuts = malloc((n + 1) * sizeof *cuts);
    assert_non_null(cuts);
    for (size_t i = 0; i < n; i++) cuts[i] = i + 1;
    check_stream(c, cuts, n ? (int)n - 1 : 0, "byte by byte");
    for (size_t k = 0; k <= n; k++) check_stream(c, &k, 1, "split in two");
    free(cuts);
}

static void run_cases(const tc_case *cases, size_t n) {
    for (size_t i = 0; i < n; i++) run_case(&cases[i]);
}

#define WEATHER "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}"
#define WEATHER_ARGS "{\"city\": \"Paris\", \"unit\": \"celsius\"}"

static void test_hermes(void **state) {
    (void)state;
    static const tc_case cases[] = {
        /* Qwen2.5's and Hermes 3's rendering of the fixture conversation's call */
        {TC_FAMILY_HERMES, "<tool_call>\n" WEATHER "\n</tool_call>", "", 1, {{"get_weather", WEATHER_ARGS}}},
        {TC_FAMILY_HERMES, "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n"
                           "<tool_call>\n{\"name\": \"b\", \"arguments\": {\"y\": [true, null]}}\n</tool_call>",
         "Let me check.", 2, {{"a", "{\"x\": 1}"}, {"b", "{\"y\": [true, null]}"}}},
        {TC_FAMILY_HERMES, "<tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>\n\nDone.", "Done.", 1, {{"f", "{}"}}},
        /* arguments before the name; braces and escapes inside strings */
        {TC_FAMILY_HERMES, "<tool_call>{\"arguments\": {\"a\": [1, {\"b\": \"}\\\"]\"}]}, \"name\": \"f\\u0041\"}</tool_call>",
         "", 1, {{"fA", "{\"a\": [1, {\"b\": \"}\\\"]\"}]}"}}},
        /* no closing tag at the end; no arguments at all */
        {TC_FAMILY_HERMES, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"k\": \"v\"}}", "", 1, {{"f", "{\"k\": \"v\"}"}}},
        {TC_FAMILY_HERMES, "<tool_call>{\"name\": \"now\"}</tool_call>", "", 1, {{"now", "{}"}}},
        /* cut off by max_tokens after the name: the call keeps what came */
        {TC_FAMILY_HERMES, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1", "", 1, {{"f", "{\"x\": 1"}}},
        /* not calls: given back as content, byte for byte */
        {TC_FAMILY_HERMES, "1 < 2, and <tool is a word; so is <tool_call", "1 < 2, and <tool is a word; so is <tool_call", 0, {{0}}},
        {TC_FAMILY_HERMES, "<tool_call>\nnot json\n</tool_call>", "<tool_call>\nnot json\n</tool_call>", 0, {{0}}},
        {TC_FAMILY_HERMES, "x <tool_call>{\"x\": 1}</tool_call>", "x <tool_call>{\"x\": 1}</tool_call>", 0, {{0}}},
        {TC_FAMILY_HERMES, "<tool_call>{\"name\": 7}", "<tool_call>{\"name\": 7}", 0, {{0}}},
        {TC_FAMILY_HERMES, "<tool_call>\n<function=f>\n</function>\n</tool_call>",
         "<tool_call>\n<function=f>\n</function>\n</tool_call>", 0, {{0}}},
        {TC_FAMILY_HERMES, "<tool_call>{\"name\": \"get_wea", "<tool_call>{\"name\": \"get_wea", 0, {{0}}},
        {TC_FAMILY_HERMES, "  spaced  \n", "  spaced  \n", 0, {{0}}},
        {TC_FAMILY_HERMES, "", "", 0, {{0}}},
        /* the llama3 and mistral syntaxes are content in this family */
        {TC_FAMILY_HERMES, "{\"name\": \"f\", \"parameters\": {}}", "{\"name\": \"f\", \"parameters\": {}}", 0, {{0}}},
    };
    run_cases(cases, sizeof cases / sizeof *cases);
}

static void test_llama3(void **state) {
    (void)state;
    static const tc_case cases[] = {
        /* Llama 3.1/3.2's rendering of the fixture conversation's call */
        {TC_FAMILY_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"celsius\"}}", "", 1,
         {{"get_weather", WEATHER_ARGS}}},
        {TC_FAMILY_LLAMA3, "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"q\": \"x;y\"}}", "", 1, {{"f", "{\"q\": \"x;y\"}"}}},
        {TC_FAMILY_LLAMA3, "\n\n{\"name\": \"a\", \"parameters\": {\"n\": 1}}; {\"name\": \"b\", \"parameters\": {\"n\": 2}}",
         "", 2, {{"a", "{\"n\": 1}"}, {"b", "{\"n\": 2}"}}},
        {TC_FAMILY_LLAMA3, "{\"name\": \"f\", \"parameters\": {\"a\": 1}} and then text", "and then text", 1, {{"f", "{\"a\": 1}"}}},
        {TC_FAMILY_LLAMA3, "{\"name\": \"f\", \"arguments\": {\"a\": -1.5e3}}", "", 1, {{"f", "{\"a\": -1.5e3}"}}},
        /* JSON that is not a call, a call not at the start */
        {TC_FAMILY_LLAMA3, "{\"answer\": 42}", "{\"answer\": 42}", 0, {{0}}},
        {TC_FAMILY_LLAMA3, " {\"answer\": {\"name\": \"x\"}}", " {\"answer\": {\"name\": \"x\"}}", 0, {{0}}},
        {TC_FAMILY_LLAMA3, "The JSON is {\"name\": \"x\", \"parameters\": {}}", "The JSON is {\"name\": \"x\", \"parameters\": {}}", 0, {{0}}},
        /* a call whose name was sent stays a call; what breaks it is content */
        {TC_FAMILY_LLAMA3, "{\"name\": \"x\", \"parameters\": [1]}", "[1]}", 1, {{"x", "{}"}}},
        {TC_FAMILY_LLAMA3, "{oops", "{oops", 0, {{0}}},
        {TC_FAMILY_LLAMA3, "<tool_call>{\"name\": \"f\"}</tool_call>", "<tool_call>{\"name\": \"f\"}</tool_call>", 0, {{0}}},
    };
    run_cases(cases, sizeof cases / sizeof *cases);
}

static void test_mistral(void **state) {
    (void)state;
    static const tc_case cases[] = {
        /* Mistral Nemo's rendering of the fixture conversation's call */
        {TC_FAMILY_MISTRAL, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"celsius\"}, "
                            "\"id\": \"call00001\"}]", "", 1, {{"get_weather", WEATHER_ARGS}}},
        {TC_FAMILY_MISTRAL, "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {}}, {\"name\": \"b\", \"arguments\": {\"s\": \"]\"}}]",
         "", 2, {{"a", "{}"}, {"b", "{\"s\": \"]\"}"}}},
        /* Mistral Small 3.2 / Devstral: name[ARGS]{...}, with an optional [CALL_ID] */
        {TC_FAMILY_MISTRAL, "[TOOL_CALLS]get_weather[ARGS]" WEATHER_ARGS, "", 1, {{"get_weather", WEATHER_ARGS}}},
        {TC_FAMILY_MISTRAL, "Sure.[TOOL_CALLS]a[ARGS]{\"x\": 1}[TOOL_CALLS]b[CALL_ID]123456789[ARGS]{\"y\": \"}\"}",
         "Sure.", 2, {{"a", "{\"x\": 1}"}, {"b", "{\"y\": \"}\"}"}}},
        {TC_FAMILY_MISTRAL, "[TOOL_CALLS]f[ARGS]{\"x\": [1, 2", "", 1, {{"f", "{\"x\": [1, 2"}}},
        /* not calls */
        {TC_FAMILY_MISTRAL, "Use [TOOLS] or [TOOL_CALL maybe", "Use [TOOLS] or [TOOL_CALL maybe", 0, {{0}}},
        {TC_FAMILY_MISTRAL, "[TOOL_CALLS] what?", "[TOOL_CALLS] what?", 0, {{0}}},
        {TC_FAMILY_MISTRAL, "[TOOL_CALLS]f[ARG]{}", "[TOOL_CALLS]f[ARG]{}", 0, {{0}}},
        {TC_FAMILY_MISTRAL, "[TOOL_CALLS][{\"id\": \"x\"}]", "[TOOL_CALLS][{\"id\": \"x\"}]", 0, {{0}}},
    };
    run_cases(cases, sizeof cases / sizeof *cases);
}

static void test_generic(void **state) {
    (void)state;
    static const tc_case cases[] = {
        {TC_FAMILY_GENERIC, "<tool_call>\n" WEATHER "\n</tool_call>", "", 1, {{"get_weather", WEATHER_ARGS}}},
        {TC_FAMILY_GENERIC, "[TOOL_CALLS][" WEATHER "]", "", 1, {{"get_weather", WEATHER_ARGS}}},
        {TC_FAMILY_GENERIC, WEATHER, "", 1, {{"get_weather", WEATHER_ARGS}}},
        {TC_FAMILY_GENERIC, "Hello, world! {\"name\": 1}", "Hello, world! {\"name\": 1}", 0, {{0}}},
        {TC_FAMILY_GENERIC, "caf\xc3\xa9 \xe2\x82\xac", "caf\xc3\xa9 \xe2\x82\xac", 0, {{0}}},
    };
    run_cases(cases, sizeof cases / sizeof *cases);
}

static void test_family_detect(void **state) {
    (void)state;
    static const struct {
        const char *file;
        tc_family want;
    } cases[] = {
        {"meta-llama-Llama-3.1-8B-Instruct", TC_FAMILY_LLAMA3},
        {"meta-llama-Llama-3.2-3B-Instruct", TC_FAMILY_LLAMA3},
        {"meta-llama-Llama-3.3-70B-Instruct", TC_FAMILY_LLAMA3},
        {"Qwen-Qwen2.5-7B-Instruct", TC_FAMILY_HERMES},
        {"Qwen-Qwen3-0.6B", TC_FAMILY_HERMES},
        {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use", TC_FAMILY_HERMES},
        {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", TC_FAMILY_HERMES},
        {"mistralai-Mistral-Nemo-Instruct-2407", TC_FAMILY_MISTRAL},
        {"Mistral-Small-3.2-24B-Instruct-2506", TC_FAMILY_MISTRAL},
        {"unsloth-mistral-Devstral-Small-2507", TC_FAMILY_MISTRAL},
        {"google-gemma-2-2b-it", TC_FAMILY_GENERIC},
        {"microsoft-Phi-3.5-mini-instruct", TC_FAMILY_GENERIC},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char path[256];
        snprintf(path, sizeof path, "tests/fixtures/templates/%s.jinja", cases[i].file);
        size_t n;
        char *src = th_read_file(path, &n);
        assert_non_null(src);
        if (tc_family_detect(src) != cases[i].want)
            fprintf(stderr, "  %s: %s, want %s\n", cases[i].file, tc_family_name(tc_family_detect(src)),
                    tc_family_name(cases[i].want));
        assert_int_equal(tc_family_detect(src), cases[i].want);
        free(src);
    }
    assert_int_equal(tc_family_detect(NULL), TC_FAMILY_GENERIC);
    tc_syntax h = tc_family_syntax(TC_FAMILY_HERMES), l = tc_family_syntax(TC_FAMILY_LLAMA3);
    assert_string_equal(h.prefix, "<tool_call>\n");
    assert_string_equal(h.suffix, "\n</tool_call>");
    assert_string_equal(l.args_key, "parameters");
    assert_true(tc_is_marker("[TOOL_CALLS]", 12));
    assert_true(tc_is_marker("<|python_tag|>", 14));
    assert_true(tc_is_marker("[ARGS]", 6));
    assert_false(tc_is_marker("[TOOL_CALLS", 11));
    assert_false(tc_is_marker("<|eot_id|>", 10));
    assert_false(tc_is_marker(NULL, 0));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hermes),  cmocka_unit_test(test_llama3),        cmocka_unit_test(test_mistral),
        cmocka_unit_test(test_generic), cmocka_unit_test(test_family_detect),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
