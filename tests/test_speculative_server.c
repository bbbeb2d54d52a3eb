/*
 * Speculative decoding in kvlm serve, over HTTP: a server started with a
 * draft model (fixed drafting) gives, at temperature 0, the text it gives without
 * speculation, whether the draft comes from its default, a request's
 * "kvlm_speculation" model or prompt lookup; usage reports the drafted and
 * kept tokens and /metrics sums them; n > 1 sampled choices all run to
 * max_tokens; a response_format json_schema request with prompt lookup
 * gives the content it gives without speculation, and a grammar request
 * takes the server's default. A server without speculation flags drafts
 * by prompt lookup by default (usage reports drafted tokens on the looping
 * greedy text, which is that of a request asking for no speculation, and
 * sampled text is plain decoding's for its seed); one started with
 * --no-draft drafts nothing.
 */
#include "server_harness.h"

#define SHAKES "models/shakespeare-gpt2"
#define DRAFT "models/shakespeare-llama"

static server sv, dflt, off;

static int setup(void **state) {
    (void)state;
    char *d = th_tempdir();
    if (!d) return -1;
    snprintf(sv.dir, sizeof sv.dir, "%s", d);
    free(d);
    /* fixed drafting: these tests count drafts that must be made */
    return start_server(&sv, "-m " SHAKES " --draft " DRAFT " --draft-k 3 --draft-fixed --max-seqs 4 --threads 1 "
                             "--access-log off") ||
           start_server_in_tempdir(&dflt, "-m " SHAKES " --max-seqs 2 --threads 1 --access-log off") ||
           start_server_in_tempdir(&off, "-m " SHAKES " --no-draft --max-seqs 2 --threads 1 --access-log off");
}

static int teardown(void **state) {
    (void)state;
    if (stop_server(&sv)) dirty_exit = 1;
    th_rmtree(sv.dir);
    if (stop_server(&dflt) || stop_server(&off)) dirty_exit = 1;
    th_rmtree(dflt.dir);
    th_rmtree(off.dir);
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
    char *model = greedy(",\"kvlm_speculation\":{\"draft\":\"model\",\"k\":2,\"adaptive\":false}", 1);
    char *ngram = greedy(",\"kvlm_speculation\":{\"draft\":\"ngram\",\"ngram\":2,\"adaptive\":false}", 1);
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
    /* a grammar request takes the server's default speculation */
    j = post(sv.port, "/v1/completions", "{\"prompt\":\"ROMEO:\",\"max_tokens\":6,\"regex\":\"[a-z]+\"}", 200);
    assert_non_null(jget(j, "usage.kvlm_speculation"));
    drafted_sum += jint(j, "usage.kvlm_speculation.drafted_tokens");
    accepted_sum += jint(j, "usage.kvlm_speculation.accepted_tokens");
    json_decref(j);
    /* /metrics sums what the responses reported */
    assert_float_equal(metric(sv.port, "kvlm_speculative_drafted_tokens_total"), (double)drafted_sum, 0);
    assert_float_equal(metric(sv.port, "kvlm_speculative_accepted_tokens_total"), (double)accepted_sum, 0);
    assert_true(drafted_sum > accepted_sum && accepted_sum > 0);
}

/* The content of a greedy json_schema completion with the given
 * kvlm_speculation; counts its drafted and kept tokens. */
static char *schema_content(const char *spec, json_int_t *drafted, json_int_t *accepted) {
    char body[1024];
    snprintf(body, sizeof body,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"ROMEO:\"}],\"max_tokens\":100,\"temperature\":0,"
             "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"speech\",\"schema\":"
             "{\"type\":\"object\",\"properties\":{\"lines\":{\"type\":\"array\",\"items\":{\"type\":\"string\","
             "\"maxLength\":40},\"maxItems\":2}},\"required\":[\"lines\"]}}},\"kvlm_speculation\":%s}",
             spec);
    json_t *j = post(sv.port, "/v1/chat/completions", body, 200);
    assert_string_equal(jstr(j, "choices.0.finish_reason"), "stop");
    char *content = strdup(jstr(j, "choices.0.message.content"));
    *drafted = jget(j, "usage.kvlm_speculation") ? jint(j, "usage.kvlm_speculation.drafted_tokens") : 0;
    *accepted = jget(j, "usage.kvlm_speculation") ? jint(j, "usage.kvlm_speculation.accepted_tokens") : 0;
    drafted_sum += *drafted;
    accepted_sum += *accepted;
    json_decref(j);
    return content;
}

/* response_format json_schema with prompt lookup: 200 and, at temperature
 * 0, the content of the same request without speculation, which is valid
 * JSON with the schema's array. */
static void test_schema_ngram(void **state) {
    (void)state;
    json_int_t d0, a0, d1, a1;
    char *plain = schema_content("{\"draft\":\"none\"}", &d0, &a0);
    char *ngram = schema_content("{\"draft\":\"ngram\",\"ngram\":3,\"adaptive\":false}", &d1, &a1);
    assert_string_equal(plain, ngram);
    assert_int_equal(d0, 0);
    if (!(d1 > 0 && a1 > 0 && a1 < d1)) fail_msg("%lld drafted, %lld kept", (long long)d1, (long long)a1);
    json_error_t jerr;
    json_t *doc = json_loads(plain, 0, &jerr);
    assert_non_null(doc);
    assert_true(json_is_array(json_object_get(doc, "lines")));
    assert_int_equal(json_object_size(doc), 1);
    json_decref(doc);
    free(plain);
    free(ngram);
}

/* A completion of "ROMEO:" from server x; its text, and its drafted
 * tokens (-1: usage has no kvlm_speculation). */
static char *complete(server *x, const char *extra, json_int_t *drafted) {
    char body[512];
    snprintf(body, sizeof body, "{\"prompt\":\"ROMEO:\",\"max_tokens\":60%s}", extra);
    json_t *j = post(x->port, "/v1/completions", body, 200);
    char *text = strdup(jstr(j, "choices.0.text"));
    *drafted = jget(j, "usage.kvlm_speculation") ? jint(j, "usage.kvlm_speculation.drafted_tokens") : -1;
    assert_int_equal(jint(j, "usage.completion_tokens"), 60);
    json_decref(j);
    return text;
}

/* kvlm serve without flags: prompt lookup by default, adaptive; its text
 * is plain decoding's (greedy, and sampled for a seed); --no-draft: none. */
static void test_default_on(void **state) {
    (void)state;
    json_int_t d_dflt, d_none, d_off;
    /* the greedy text loops ("And I'll not, ..."): the first steps' shadow
     * drafts are kept, so it drafts whatever the step times say later */
    char *a = complete(&dflt, ",\"temperature\":0", &d_dflt);
    char *b = complete(&dflt, ",\"temperature\":0,\"kvlm_speculation\":{\"draft\":\"none\"}", &d_none);
    char *c = complete(&off, ",\"temperature\":0", &d_off);
    if (!(d_dflt > 0)) fail_msg("the default drafted %lld tokens", (long long)d_dflt);
    assert_int_equal(d_none, -1);
    assert_int_equal(d_off, -1);
    assert_string_equal(a, b);
    assert_string_equal(a, c);
    free(a);
    free(b);
    free(c);
    a = complete(&dflt, ",\"temperature\":0.8,\"seed\":11", &d_dflt);
    c = complete(&off, ",\"temperature\":0.8,\"seed\":11", &d_off);
    assert_string_equal(a, c);
    assert_int_equal(d_off, -1);
    free(a);
    free(c);
    assert_float_equal(metric(off.port, "kvlm_speculative_drafted_tokens_total"), 0, 0);
    assert_true(metric(dflt.port, "kvlm_speculative_drafted_tokens_total") > 0);
}

int main(int argc, char **argv) {
    (void)argc;
    if (th_server_main_init(argv[0], "test_speculative_server")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_text),
        cmocka_unit_test(test_schema_ngram),
        cmocka_unit_test(test_choices_and_grammar),
        cmocka_unit_test(test_default_on),
    };
    int failed = cmocka_run_group_tests_name("speculative_server", tests, setup, teardown);
    return failed || dirty_exit;
}
