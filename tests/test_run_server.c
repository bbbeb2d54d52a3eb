/*
 * One generation path: the same request through `kvlm run` and through
 * `kvlm serve`'s /v1/completions gives the same text, the same token ids
 * (the server's through return_tokens_as_token_ids) and the same finish
 * reason, on models/shakespeare-gpt2 with its own tokenizer: greedy, with
 * the end-of-sequence token forced by logit_bias (drawn, counted, no text),
 * and with a stop string (also streamed). The expected ids and text are
 * written out, so a change that broke both sides alike still fails.
 */
#include "server_harness.h"

#define SHAKES "models/shakespeare-gpt2"

static server shakes;

static int shakes_setup(void **state) {
    (void)state;
    char *d = th_tempdir();
    if (!d) return -1;
    snprintf(shakes.dir, sizeof shakes.dir, "%s", d);
    free(d);
    return start_server(&shakes, "-m " SHAKES " --max-seqs 2 --threads 1");
}

static int shakes_teardown(void **state) {
    (void)state;
    int rc = stop_server(&shakes);
    th_rmtree(shakes.dir);
    return rc;
}

/* The ids of choice 0 from return_tokens_as_token_ids logprobs. */
static int server_ids(json_t *j, int32_t *ids, int cap) {
    json_t *toks = jget(j, "choices.0.logprobs.tokens");
    if (!json_is_array(toks)) FAIL("no logprobs.tokens");
    int n = 0;
    size_t i;
    json_t *t;
    json_array_foreach(toks, i, t) {
        const char *v = json_string_value(t);
        if (!v || strncmp(v, "token_id:", 9) || n == cap) FAIL("logprobs.tokens[%zu] is not a token_id: %s", i, v);
        ids[n++] = atoi(v + 9);
    }
    return n;
}

/* `kvlm run FLAGS` and POST /v1/completions with FIELDS, both for the
 * prompt "ROMEO:" greedy with at most 12 tokens, give want_ids, want_text
 * and want_finish; the plain CLI output is the prompt, the text and a
 * newline. */
static void same_as_cli(const char *flags, const char *fields, const int32_t *want_ids, int n_want,
                        const char *want_text, const char *want_finish) {
    char *out = NULL;
    int st = th_run_kvlm(&out, "run -m " SHAKES " -p 'ROMEO:' -n 12 --temp 0 --threads 1 --json %s 2>/dev/null", flags);
    if (st) fail_msg("kvlm run %s: exit %d: %s", flags, st, out);
    json_t *cli = json_loads(out, 0, NULL);
    if (!cli) fail_msg("kvlm run %s: not JSON: %s", flags, out);
    free(out);
    char body[512];
    snprintf(body, sizeof body, "{\"prompt\":\"ROMEO:\",\"max_tokens\":12,\"temperature\":0,\"logprobs\":1,"
             "\"return_tokens_as_token_ids\":true%s%s}", *fields ? "," : "", fields);
    json_t *srv = post(shakes.port, "/v1/completions", body, 200);
    /* the CLI */
    json_t *cids = json_object_get(cli, "ids");
    assert_int_equal(json_array_size(cids), (size_t)n_want);
    for (int i = 0; i < n_want; i++) assert_int_equal(json_integer_value(json_array_get(cids, (size_t)i)), want_ids[i]);
    assert_string_equal(jstr(cli, "text"), want_text);
    assert_string_equal(jstr(cli, "finish_reason"), want_finish);
    const int32_t prompt[3] = {33676, 4720, 25}; /* "ROMEO:", no BOS: GPT-2's files ask for none */
    json_t *pids = json_object_get(cli, "prompt_ids");
    assert_int_equal(json_array_size(pids), 3);
    for (int i = 0; i < 3; i++) assert_int_equal(json_integer_value(json_array_get(pids, (size_t)i)), prompt[i]);
    /* the server */
    int32_t sids[16];
    int n = server_ids(srv, sids, 16);
    assert_int_equal(n, n_want);
    assert_memory_equal(sids, want_ids, (size_t)n_want * sizeof(int32_t));
    assert_string_equal(jstr(srv, "choices.0.text"), want_text);
    assert_string_equal(jstr(srv, "choices.0.finish_reason"), want_finish);
    assert_int_equal(jint(srv, "usage.completion_tokens"), n_want);
    assert_int_equal(jint(srv, "usage.prompt_tokens"), 3);
    /* plain output: the prompt as given, then the same text */
    st = th_run_kvlm(&out, "run -m " SHAKES " -p 'ROMEO:' -n 12 --temp 0 --threads 1 %s 2>/dev/null", flags);
    assert_int_equal(st, 0);
    char want_plain[256];
    snprintf(want_plain, sizeof want_plain, "ROMEO:%s\n", want_text);
    assert_string_equal(out, want_plain);
    free(out);
    json_decref(cli);
    json_decref(srv);
}

static void test_run_equals_completion(void **state) {
    (void)state;
    const int32_t ids[12] = {198, 40, 1183, 407, 11, 198, 1870, 314, 1183, 407, 11, 198};
    same_as_cli("", "", ids, 12, "\nI'll not,\nAnd I'll not,\n", "length");
}

/* EOS forced: the token is drawn, counted and reported, but is no text. */
static void test_run_equals_completion_eos(void **state) {
    (void)state;
    const int32_t eos[1] = {50256};
    same_as_cli("--logit-bias 50256:100", "\"logit_bias\":{\"50256\":100}", eos, 1, "", "stop");
}

/* A stop string: the text ends before it; the ids end with the token that
 * completed it. Streamed deltas add up to the same text. */
static void test_run_equals_completion_stop(void **state) {
    (void)state;
    const int32_t ids[4] = {198, 40, 1183, 407};
    same_as_cli("--stop ' not'", "\"stop\":[\" not\"]", ids, 4, "\nI'll", "stop");
    resp r = http(shakes.port, "POST", "/v1/completions",
                  "{\"prompt\":\"ROMEO:\",\"max_tokens\":12,\"temperature\":0,\"stop\":[\" not\"],\"stream\":true}");
    assert_int_equal(r.status, 200);
    json_t *ev = sse_events(r.body);
    char text[256] = "";
    const char *finish = NULL;
    size_t i;
    json_t *e;
    json_array_foreach(ev, i, e) {
        json_t *c = json_array_get(json_object_get(e, "choices"), 0);
        if (json_is_string(json_object_get(c, "text")))
            strncat(text, json_string_value(json_object_get(c, "text")), sizeof text - strlen(text) - 1);
        if (json_is_string(json_object_get(c, "finish_reason"))) finish = json_string_value(json_object_get(c, "finish_reason"));
    }
    assert_string_equal(text, "\nI'll");
    assert_non_null(finish);
    assert_string_equal(finish, "stop");
    json_decref(ev);
    resp_free(&r);
}

int main(int argc, char **argv) {
    (void)argc;
    if (th_server_main_init(argv[0], "test_run_server")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_equals_completion),
        cmocka_unit_test(test_run_equals_completion_eos),
        cmocka_unit_test(test_run_equals_completion_stop),
    };
    int failed = cmocka_run_group_tests_name("run_vs_server", tests, shakes_setup, shakes_teardown);
    return failed || dirty_exit;
}
