/*
 * Speculative decoding in kvlm serve, over HTTP: a server started with a
 * draft model gives, at temperature 0, the text it gives without
 * speculation, whether the draft comes from its default, a request's
 * "kvlm_speculation" model or prompt lookup; usage reports the drafted and
 * kept tokens and /metrics sums them; n > 1 sampled choices all run to
 * max_tokens; a grammar request is served without the default speculation,
 * and refused when it asks for it.
 */
#include "server_harness.h"

#define SHAKES "models/shakespeare-gpt2"
#define DRAFT "models/shakespeare-llama"

static server sv;

static int setup(void **state) {
    (void)state;
    char *d = th_tempdir();
    if (!d) return -1;
    snprintf(sv.dir, sizeof sv.dir, "%s", d);
    free(d);
    return start_server(&sv, "-m " SHAKES " --draft " DRAFT " --draft-k 3 --max-seqs 4 --threads 1 --access-log off");
}

static int teardown(void **state) {
    (void)state;
    if (stop_server(&sv)) dirty_exit = 1;
    th_rmtree(sv.dir);
    return 0;
}

static json_int_t drafted_sum, accepted_sum;

/* The text of a greedy completion of "ROMEO:" with the given extra field;
 * counts its drafted and kept tokens. */
static char *greedy(const char *extra, int expect_spec) {
    char body[512];
    snprintf(body, sizeof body, "{\"prompt\":\"ROMEO:\",\"max_tokens\":24,\"temperature\":0%s}", extra);
    json_t *j = post(sv.port, "/v1/completions", body, 200);
    char *text = strdup(jstr(j, "choices.0.text"));
    json_t *u = jget(j, "usage.kvlm_speculation");
    if (expect_spec) {
        assert_non_null(u);
        const json_int_t d = jint(j, "usage.kvlm_speculation.drafted_tokens");
        const json_int_t a = jint(j, "usage.kvlm_speculation.accepted_tokens");
        assert_true(d > 0 && a >= 0 && a <= d);
        drafted_sum += d;
        accepted_sum += a;
    } else {
        assert_null(u);
    }
    assert_int_equal(jint(j, "usage.completion_tokens"), 24);
    json_decref(j);
    return text;
}

static void test_same_text(void **state) {
    (void)state;
    char *plain = greedy(",\"kvlm_speculation\":{\"draft\":\"none\"}", 0);
    char *dflt = greedy("", 1);
    char *model = greedy(",\"kvlm_speculation\":{\"draft\":\"model\",\"k\":2}", 1);
    char *ngram = greedy(",\"kvlm_speculation\":{\"draft\":\"ngram\",\"ngram\":2}", 1);
    assert_string_equal(plain, dflt);
    assert_string_equal(plain, model);
    assert_string_equal(plain, ngram);
    free(plain);
    free(dflt);
    free(model);
    free(ngram);
}

static void test_choices_and_grammar(void **state) {
    (void)state;
    json_t *j = post(sv.port, "/v1/completions",
                     "{\"prompt\":\"JULIET:\",\"max_tokens\":16,\"n\":3,\"temperature\":0.8,\"seed\":5}", 200);
    assert_int_equal(json_array_size(jget(j, "choices")), 3);
    assert_int_equal(jint(j, "usage.completion_tokens"), 48);
    drafted_sum += jint(j, "usage.kvlm_speculation.drafted_tokens");
    accepted_sum += jint(j, "usage.kvlm_speculation.accepted_tokens");
    json_decref(j);
    /* the default does not apply to a grammar request; asking for it is refused */
    j = post(sv.port, "/v1/completions", "{\"prompt\":\"ROMEO:\",\"max_tokens\":6,\"regex\":\"[a-z]+\"}", 200);
    assert_null(jget(j, "usage.kvlm_speculation"));
    json_decref(j);
    j = post(sv.port, "/v1/completions",
             "{\"prompt\":\"ROMEO:\",\"max_tokens\":6,\"regex\":\"[a-z]+\",\"kvlm_speculation\":{\"draft\":\"model\"}}",
             400);
    assert_string_equal(jstr(j, "error.param"), "kvlm_speculation");
    assert_string_equal(jstr(j, "error.code"), "unsupported_value");
    json_decref(j);
    /* /metrics sums what the responses reported */
    assert_float_equal(metric(sv.port, "kvlm_speculative_drafted_tokens_total"), (double)drafted_sum, 0);
    assert_float_equal(metric(sv.port, "kvlm_speculative_accepted_tokens_total"), (double)accepted_sum, 0);
    assert_true(drafted_sum > accepted_sum && accepted_sum > 0);
}

int main(int argc, char **argv) {
    (void)argc;
    if (th_server_main_init(argv[0], "test_speculative_server")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_text),
        cmocka_unit_test(test_choices_and_grammar),
    };
    int failed = cmocka_run_group_tests_name("speculative_server", tests, setup, teardown);
    return failed || dirty_exit;
}
