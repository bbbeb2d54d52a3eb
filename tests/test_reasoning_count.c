/*
 * Reasoning token counting (app/reasoning_count.h) on token sequences
 * written out piece by piece, each with its exact count.
 *
 * Think tags: the tokens up to the one that completes </think>, markers
 * split over several tokens, leading whitespace before <think>, a token
 * that closes the reasoning and starts the answer; the prompt opening the
 * reasoning; an answer with no <think> (0, including a false start
 * "<thi"); a reasoning never closed (every token). Harmony: an analysis
 * message with its header and <|end|>, the final message after it not
 * counted; two analysis messages around a call; a final message only (0);
 * text without the format (0); a header with no body; the markers as
 * plain text split over tokens. No format: always 0.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "app/reasoning_count.h"

/* The count after feeding pieces (NULL-terminated). */
static int count(rc_format f, int inside, const char *const *pieces) {
    rc_counter c;
    assert_int_equal(rc_init(&c, f, inside), 0);
    for (int i = 0; pieces[i]; i++) rc_token(&c, pieces[i], strlen(pieces[i]));
    const int n = rc_tokens(&c);
    rc_free(&c);
    return n;
}

static void test_think(void **state) {
    (void)state;
    const char *const whole[] = {"<think>", "plan", " it", "</think>", "\n\n", "The", " answer", ".", NULL};
    assert_int_equal(count(RC_THINK, 0, whole), 4);
    const char *const split[] = {"\n", "<", "th", "ink>", "a", "</", "think", ">", " ", "b", NULL};
    assert_int_equal(count(RC_THINK, 0, split), 8); /* the leading newline began it */
    const char *const joined[] = {"<think>", "x", "</think>Yes", ".", NULL};
    assert_int_equal(count(RC_THINK, 0, joined), 3); /* the closing token holds the answer's start */
    const char *const inside[] = {"still", " thinking", "</think>", "done", NULL};
    assert_int_equal(count(RC_THINK, 1, inside), 3);
    const char *const never[] = {"hm", " hm", " hm", NULL};
    assert_int_equal(count(RC_THINK, 1, never), 3);
    const char *const answer[] = {"Hello", " <think>", "x", "</think>", NULL};
    assert_int_equal(count(RC_THINK, 0, answer), 0); /* <think> not at the start is text */
    const char *const false_start[] = {" ", "<thi", "s", " is", NULL};
    assert_int_equal(count(RC_THINK, 0, false_start), 0);
    const char *const pending[] = {"<th", NULL};
    assert_int_equal(count(RC_THINK, 0, pending), 0); /* ended before it was known */
}

static void test_harmony(void **state) {
    (void)state;
    const char *const an[] = {"<|channel|>", "analysis", "<|message|>", "We", " think", "<|end|>",
                              "<|start|>",   "assistant", "<|channel|>", "final", "<|message|>", "Hi", "<|return|>",
                              NULL};
    assert_int_equal(count(RC_HARMONY, 0, an), 6);
    const char *const two[] = {"<|channel|>", "analysis", "<|message|>", "a", "<|end|>",               /* 5 */
                               "<|start|>", "assistant", "<|channel|>", "commentary to=functions.f", " ", /* call */
                               "<|constrain|>", "json", "<|message|>", "{}", "<|call|>",
                               "<|start|>", "assistant", "<|channel|>", "analysis", "<|message|>", "b", "c", /* 7 */
                               "<|end|>", NULL};
    assert_int_equal(count(RC_HARMONY, 0, two), 5 + 8);
    const char *const final[] = {"<|channel|>", "final", "<|message|>", "Hi", "<|return|>", NULL};
    assert_int_equal(count(RC_HARMONY, 0, final), 0);
    const char *const plain[] = {"Just", " text", "\n", "more", NULL};
    assert_int_equal(count(RC_HARMONY, 0, plain), 0);
    const char *const empty[] = {"<|channel|>", "analysis", "<|end|>", "<|channel|>", "final", "<|message|>", "x", NULL};
    assert_int_equal(count(RC_HARMONY, 0, empty), 0); /* a header with no body is no reasoning */
    const char *const text[] = {"<", "|", "channel", "|>", "analysis", "<|", "message", "|>", "t", "<|", "end", "|>",
                                "<|", "start|>", NULL};
    assert_int_equal(count(RC_HARMONY, 0, text), 12);
}

static void test_none(void **state) {
    (void)state;
    const char *const t[] = {"<think>", "x", "</think>", "<|channel|>", "analysis", "<|message|>", "y", NULL};
    assert_int_equal(count(RC_NONE, 0, t), 0);
    assert_int_equal(count(RC_NONE, 1, t), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_think),
        cmocka_unit_test(test_harmony),
        cmocka_unit_test(test_none),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
