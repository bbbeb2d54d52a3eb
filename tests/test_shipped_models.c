/*
 * The trained models that ship with trained routing and a long context:
 * models/shakespeare-moe (Qwen3-MoE, 8 experts, top-2) and
 * models/shakespeare-chat (Llama, 1024-token context, ChatML template).
 * Every expected id comes from the JSON files of tests/fixtures/shipped/, which
 * tools/make_shipped_fixtures.py computes in float64 PyTorch from the
 * exported weights (each continuation cut before a step whose best two
 * logits are closer than 1e-3, so float32 kernels must agree):
 *   - `kvlm run -m models/shakespeare-moe -p ROMEO:` greedy ids;
 *   - shakespeare-chat: the rendered chat prompt's greedy ids (kvlm run
 *     --ids), a 1000-token prompt of validation conversations (positions
 *     far past 128) and its 8 greedy ids, and `kvlm chat` (standard input
 *     not a terminal, --json) answering the same system and user turns with
 *     the reference's reply, its prompt token count and finish reason;
 *   - the model's chat_template is, byte for byte, the template corpus's
 *     kvlm-shakespeare-chat.jinja (the one tests/test_templates.c checks
 *     against jinja2).
 * It does not check perplexities or sampling.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

#define MOE "models/shakespeare-moe"
#define CHAT "models/shakespeare-chat"
#define FIX "tests/fixtures/shipped/"

static json_t *load_json(const char *path) {
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) fail_msg("%s: %s", path, je.text);
    return j;
}

/* `kvlm run ARGS --json` parsed. */
static json_t *run_json(const char *args) {
    char *out = NULL;
    int st = th_run_kvlm(&out, "run %s --json 2>/dev/null", args);
    if (st != 0) fail_msg("kvlm run %s: exit %d: %s", args, st, out);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    if (!j) fail_msg("kvlm run %s: output is not JSON: %s\n%s", args, je.text, out);
    free(out);
    return j;
}

static void same_ids(json_t *got, json_t *want, const char *what) {
    if (json_array_size(got) != json_array_size(want))
        fail_msg("%s: %zu ids, want %zu", what, json_array_size(got), json_array_size(want));
    for (size_t i = 0; i < json_array_size(want); i++)
        if (json_integer_value(json_array_get(got, i)) != json_integer_value(json_array_get(want, i)))
            fail_msg("%s[%zu] = %lld, want %lld", what, i, (long long)json_integer_value(json_array_get(got, i)),
                     (long long)json_integer_value(json_array_get(want, i)));
}

/* The ids as kvlm run's --ids takes them, written to DIR/name. */
static char *write_ids(const char *dir, const char *name, json_t *ids) {
    size_t n = json_array_size(ids), cap = 8 * n + 16, len = 0;
    char *s = malloc(cap), *path = malloc(strlen(dir) + strlen(name) + 2);
    assert_non_null(s);
    for (size_t i = 0; i < n; i++)
        len += (size_t)snprintf(s + len, cap - len, "%s%lld", i ? " " : "", (long long)json_integer_value(json_array_get(ids, i)));
    sprintf(path, "%s/%s", dir, name);
    assert_int_equal(th_write_file(path, s, len), 0);
    free(s);
    return path;
}

static void test_moe_greedy(void **state) {
    (void)state;
    json_t *fx = load_json(FIX "shakespeare_moe.json");
    json_t *want = json_object_get(fx, "ids");
    assert_true(json_array_size(want) >= 8);
    char args[256];
    snprintf(args, sizeof args, "-m " MOE " -p 'ROMEO:' -n %zu --temp 0 --threads 1", json_array_size(want));
    json_t *j = run_json(args);
    same_ids(json_object_get(j, "prompt_ids"), json_object_get(fx, "prompt_ids"), "moe prompt_ids");
    same_ids(json_object_get(j, "ids"), want, "moe ids");
    assert_string_equal(json_string_value(json_object_get(j, "text")), json_string_value(json_object_get(fx, "text")));
    json_decref(j);
    json_decref(fx);
}

/* kvlm run --ids PROMPT: the reference's greedy ids. */
static void run_ids_case(json_t *c, const char *what) {
    char *dir = th_tempdir();
    assert_non_null(dir);
    char *path = write_ids(dir, "ids.txt", json_object_get(c, "prompt_ids"));
    json_t *want = json_object_get(c, "ids");
    assert_true(json_array_size(want) >= 4);
    char args[1024];
    snprintf(args, sizeof args, "-m " CHAT " --ids \"$(cat %s)\" -n %zu --temp 0 --threads 1", path,
             json_array_size(want));
    json_t *j = run_json(args);
    same_ids(json_object_get(j, "prompt_ids"), json_object_get(c, "prompt_ids"), what);
    same_ids(json_object_get(j, "ids"), want, what);
    json_decref(j);
    free(path);
    th_rmtree(dir);
    free(dir);
}

static void test_chat_prompt_greedy(void **state) {
    (void)state;
    json_t *fx = load_json(FIX "shakespeare_chat.json");
    run_ids_case(json_object_get(fx, "chat"), "chat prompt");
    json_decref(fx);
}

/* 1000 prompt tokens (the context is 1024): positions up to 1007. */
static void test_chat_long_prompt(void **state) {
    (void)state;
    json_t *fx = load_json(FIX "shakespeare_chat.json");
    json_t *c = json_object_get(fx, "long");
    assert_int_equal(json_array_size(json_object_get(c, "prompt_ids")), 1000);
    run_ids_case(c, "long prompt");
    json_decref(fx);
}

/* kvlm chat renders the system and user turns with the model's template
 * (the same ids as the reference's rendering) and replies as it does. */
static void test_chat_cli(void **state) {
    (void)state;
    json_t *fx = load_json(FIX "shakespeare_chat.json");
    json_t *c = json_object_get(fx, "chat");
    char *out = NULL;
    int st = th_run_kvlm(&out, "chat -m " CHAT " --temp 0 -n 24 --threads 1 --json --system '%s' 2>/dev/null <<'EOF'\n%s\nEOF",
                         json_string_value(json_object_get(c, "system")), json_string_value(json_object_get(c, "user")));
    if (st != 0) fail_msg("kvlm chat: exit %d: %s", st, out);
    json_error_t je;
    json_t *j = json_loads(out, JSON_DISABLE_EOF_CHECK, &je);
    if (!j) fail_msg("kvlm chat --json: not JSON: %s\n%s", je.text, out);
    assert_string_equal(json_string_value(json_object_get(j, "content")), json_string_value(json_object_get(c, "reply")));
    assert_int_equal(json_integer_value(json_object_get(j, "prompt_tokens")),
                     (json_int_t)json_array_size(json_object_get(c, "prompt_ids")));
    assert_int_equal(json_integer_value(json_object_get(j, "completion_tokens")) -
                         (json_is_true(json_object_get(c, "finished")) ? 1 : 0),
                     (json_int_t)json_array_size(json_object_get(c, "ids")));
    assert_string_equal(json_string_value(json_object_get(j, "finish_reason")),
                        json_is_true(json_object_get(c, "finished")) ? "stop" : "length");
    json_decref(j);
    free(out);
    json_decref(fx);
}

static void test_chat_template_is_the_corpus_one(void **state) {
    (void)state;
    json_t *cfg = load_json(CHAT "/tokenizer_config.json");
    size_t len;
    char *corpus = th_read_file("tests/fixtures/templates/kvlm-shakespeare-chat.jinja", &len);
    assert_non_null(corpus);
    const char *tpl = json_string_value(json_object_get(cfg, "chat_template"));
    assert_non_null(tpl);
    assert_int_equal(strlen(tpl), len);
    assert_memory_equal(tpl, corpus, len);
    free(corpus);
    json_decref(cfg);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_moe_greedy),
        cmocka_unit_test(test_chat_prompt_greedy),
        cmocka_unit_test(test_chat_long_prompt),
        cmocka_unit_test(test_chat_cli),
        cmocka_unit_test(test_chat_template_is_the_corpus_one),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
