/*
 * The harmony output parser (src/app/harmony.c) through tool_calls.h's
 * harmony family, on exact gpt-oss outputs: analysis then final answer,
 * a tool call in both header orders (recipient after and before the
 * channel), a call ended by the end of the text (its <|call|> is a stop
 * token the text does not hold), a commentary preamble, a call whose body
 * is not JSON (content), text without the format (content byte for byte).
 *
 * Every case is checked whole (tc_parse) and fed in two pieces split at
 * every byte and byte by byte, with the same reasoning, content, names
 * and arguments. Also: template detection and the turn-end tokens.
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
#include "app/chat_template.h"
#include "app/harmony.h"
#include "app/tool_calls.h"

typedef struct hm_case {
    const char *text, *reasoning, *content;
    int n_calls;
    const char *name[2], *args[2];
} hm_case;

static const hm_case cases[] = {
    {"<|channel|>analysis<|message|>User greets. Reply.<|end|><|start|>assistant<|channel|>final<|message|>Hello! "
     "How can I help?",
     "User greets. Reply.", "Hello! How can I help?", 0, {0}, {0}},
    {"<|channel|>final<|message|>a <b> <|not a marker|> c<|return|>", "", "a <b> <|not a marker|> c", 0, {0}, {0}},
    {"<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
     "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>",
     "Need weather.", "", 1, {"get_weather"}, {"{\"city\":\"Paris\"}"}},
    {" to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Lyon\", \"unit\": \"celsius\"}",
     "", "", 1, {"get_weather"}, {"{\"city\": \"Lyon\", \"unit\": \"celsius\"}"}},
    {"<|channel|>commentary<|message|>Checking two cities.<|end|><|start|>assistant<|channel|>commentary "
     "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"A\"}<|call|><|start|>assistant<|channel|>"
     "commentary to=functions.add json<|message|>{\"a\":1,\"b\":2}<|call|>",
     "", "Checking two cities.", 2, {"get_weather", "add"}, {"{\"city\":\"A\"}", "{\"a\":1,\"b\":2}"}},
    {"<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": oops<|call|>", "",
     "{\"city\": oops", 0, {0}, {0}},
    {"Just text, no channels <| here.\nSecond line.", "", "Just text, no channels <| here.\nSecond line.", 0, {0},
     {0}},
    {"<|channel|>analysis<|message|>cut off mid thou", "cut off mid thou", "", 0, {0}, {0}},
    {"<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>final<|message|><|", "x", "<|", 0, {0},
     {0}},
    {"", "", "", 0, {0}, {0}},
};

typedef struct sum {
    sbuf reasoning, content;
    sbuf names[2], args[2];
    int n_calls, order_error;
} sum;

static void on_event(void *user, const tc_event *ev) {
    sum *s = user;
    if (ev->kind == TC_EV_REASONING) sbuf_add(&s->reasoning, ev->text, ev->len);
    else if (ev->kind == TC_EV_CONTENT) sbuf_add(&s->content, ev->text, ev->len);
    else if (ev->kind == TC_EV_CALL) {
        if (ev->index != s->n_calls || ev->index >= 2) s->order_error = 1;
        else sbuf_add(&s->names[s->n_calls++], ev->text, ev->len);
    } else if (ev->index >= s->n_calls) s->order_error = 1;
    else sbuf_add(&s->args[ev->index], ev->text, ev->len);
}

static void expect_buf(const sbuf *b, const char *want, const char *what, const char *text, size_t cut) {
    const size_t n = strlen(want);
    if (b->len != n || (n && memcmp(b->data, want, n)))
        fail_msg("%s of [%s] cut at %zu: got [%.*s], want [%s]", what, text, cut, (int)b->len,
                 b->data ? b->data : "", want);
}

static void check_sum(sum *s, const hm_case *c, size_t cut) {
    assert_false(s->order_error);
    expect_buf(&s->reasoning, c->reasoning, "reasoning", c->text, cut);
    expect_buf(&s->content, c->content, "content", c->text, cut);
    assert_int_equal(s->n_calls, c->n_calls);
    for (int k = 0; k < c->n_calls; k++) {
        expect_buf(&s->names[k], c->name[k], "name", c->text, cut);
        expect_buf(&s->args[k], c->args[k], "arguments", c->text, cut);
    }
    sbuf_free(&s->reasoning), sbuf_free(&s->content);
    for (int k = 0; k < 2; k++) sbuf_free(&s->names[k]), sbuf_free(&s->args[k]);
}

static void test_cases(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const hm_case *c = &cases[i];
        const size_t n = strlen(c->text);
        /* whole, through tc_parse */
        tc_result r;
        assert_int_equal(tc_parse(TC_FAMILY_HARMONY, c->text, n, &r), 0);
        sum w = {0};
        sbuf_add(&w.reasoning, r.reasoning.data, r.reasoning.len);
        sbuf_add(&w.content, r.content.data, r.content.len);
        w.n_calls = r.n_calls;
        for (int k = 0; k < r.n_calls && k < 2; k++) {
            sbuf_adds(&w.names[k], r.calls[k].name);
            sbuf_add(&w.args[k], r.calls[k].args.data, r.calls[k].args.len);
        }
        tc_result_free(&r);
        check_sum(&w, c, n);
        /* two pieces, cut at every byte */
        for (size_t cut = 0; cut <= n; cut++) {
            tc_parser *p = tc_parser_new(TC_FAMILY_HARMONY);
            sum s = {0};
            assert_int_equal(tc_parser_feed(p, c->text, cut, on_event, &s), 0);
            assert_int_equal(tc_parser_feed(p, c->text + cut, n - cut, on_event, &s), 0);
            assert_int_equal(tc_parser_finish(p, on_event, &s), 0);
            assert_int_equal(tc_parser_calls(p), c->n_calls);
            tc_parser_free(p);
            check_sum(&s, c, cut);
        }
        /* byte by byte */
        tc_parser *p = tc_parser_new(TC_FAMILY_HARMONY);
        sum s = {0};
        for (size_t k = 0; k < n; k++) assert_int_equal(tc_parser_feed(p, c->text + k, 1, on_event, &s), 0);
        assert_int_equal(tc_parser_finish(p, on_event, &s), 0);
        tc_parser_free(p);
        check_sum(&s, c, (size_t)-1);
    }
}

/* A reasoning run is released as it comes, not held to the message's end:
 * after "<|channel|>analysis<|message|>abc<|en" only "<|en" is withheld. */
static void test_streams_early(void **state) {
    (void)state;
    tc_parser *p = tc_parser_new(TC_FAMILY_HARMONY);
    sum s = {0};
    const char t[] = "<|channel|>analysis<|message|>abc<|en";
    assert_int_equal(tc_parser_feed(p, t, sizeof t - 1, on_event, &s), 0);
    assert_int_equal(s.reasoning.len, 3);
    assert_memory_equal(s.reasoning.data, "abc", 3);
    assert_int_equal(tc_parser_feed(p, "x|>", 3, on_event, &s), 0); /* "<|en" + "x|>": not a marker */
    assert_int_equal(tc_parser_finish(p, on_event, &s), 0);
    expect_buf(&s.reasoning, "abc<|enx|>", "reasoning", t, 0);
    tc_parser_free(p);
    sbuf_free(&s.reasoning), sbuf_free(&s.content);
}

static void test_template(void **state) {
    (void)state;
    const char *f = "tests/fixtures/templates/openai-gpt-oss-120b.jinja";
    char *src = th_read_file(f, NULL);
    assert_non_null(src);
    assert_true(hm_template_is_harmony(src));
    assert_int_equal(tc_family_detect(src), TC_FAMILY_HARMONY);
    assert_string_equal(tc_family_name(TC_FAMILY_HARMONY), "harmony");
    free(src);
    src = th_read_file("tests/fixtures/templates/Qwen-Qwen3-0.6B.jinja", NULL);
    assert_non_null(src);
    assert_false(hm_template_is_harmony(src));
    free(src);
    assert_true(hm_is_marker("<|call|>", 8));
    assert_true(hm_is_marker("<|channel|>", 11));
    assert_false(hm_is_marker("<|endoftext|>", 13));
    char pre[128], suf[16];
    assert_int_equal(hm_call_wrapper("get_weather", pre, sizeof pre, suf, sizeof suf), 0);
    assert_string_equal(pre, "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>");
    assert_string_equal(suf, "<|call|>");
    assert_int_equal(hm_call_wrapper("get_weather", pre, 20, suf, sizeof suf), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cases),
        cmocka_unit_test(test_streams_early),
        cmocka_unit_test(test_template),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
