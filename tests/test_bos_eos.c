/*
 * BOS and end-of-sequence ids follow the model's own files. The shipped
 * models ask for no BOS (GPT-2 vocab.json + merges.txt; the Llama's
 * directory has no tokenizer_config.json and its GGUF says add_bos_token
 * false) and end on 50256. A tokenizer_config.json with add_bos_token puts
 * BOS in front of a prompt, once even when the text starts with it (a chat
 * template that writes it), and its eos_token joins the end ids.
 * eos_token_id lists in config.json and generation_config.json make up the
 * model's set; a generation_config.json that is malformed or names an id
 * beyond the vocabulary is refused naming the file.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kvlm.h"

#define GPT2 "models/shakespeare-gpt2"
#define LLAMA "models/shakespeare-llama"
#define TINY "tests/fixtures/gpt2/hf_f32"

static void expect_prompt(const kvlm_tokenizer *t, const char *text, int allow_special, const int32_t *want,
                          size_t n) {
    int32_t *ids = NULL;
    size_t k = 0;
    kvlm_error err;
    assert_int_equal(kvlm_tokenizer_encode_prompt(t, text, strlen(text), allow_special, &ids, &k, &err), 0);
    if (k != n) fail_msg("'%s': %zu ids, want %zu", text, k, n);
    assert_memory_equal(ids, want, n * sizeof(int32_t));
    free(ids);
}

static void expect_eos(const kvlm_model *m, const kvlm_tokenizer *t, const int32_t *want, int n) {
    int32_t ids[16];
    assert_int_equal(kvlm_eos_ids(m, t, ids, 16), n);
    assert_memory_equal(ids, want, (size_t)n * sizeof(int32_t));
}

static const int32_t romeo[3] = {33676, 4720, 25}; /* "ROMEO:" */

static void test_shipped_models(void **state) {
    (void)state;
    const char *paths[3] = {GPT2, LLAMA, LLAMA "/shakespeare-llama-q8_0.gguf"};
    const int32_t eos[1] = {50256};
    for (int i = 0; i < 3; i++) {
        kvlm_error err;
        kvlm_model *m = kvlm_model_load(paths[i], NULL, &err);
        if (!m) fail_msg("%s: %s", paths[i], err.msg);
        kvlm_tokenizer *t = kvlm_tokenizer_load(kvlm_model_tokenizer_path(m), &err);
        if (!t) fail_msg("%s: %s", paths[i], err.msg);
        assert_int_equal(kvlm_tokenizer_add_bos(t), 0);
        assert_int_equal(kvlm_tokenizer_bos_id(t), 50256);
        expect_prompt(t, "ROMEO:", 1, romeo, 3);
        const kvlm_config *c = kvlm_model_config(m);
        assert_int_equal(c->eos_id, 50256);
        assert_int_equal(c->n_eos, 1);
        expect_eos(m, t, eos, 1);
        expect_eos(m, NULL, eos, 1);
        /* <|endoftext|> stays one special token */
        assert_true(kvlm_tokenizer_is_special(t, 50256));
        kvlm_tokenizer_free(t);
        kvlm_model_free(m);
    }
}

/* The Llama's files with a tokenizer_config.json beside them. */
static char *llama_with_config(const char *cfg) {
    char *dir = th_tempdir(), cmd[2048];
    assert_non_null(dir);
    snprintf(cmd, sizeof cmd, "for f in config.json model.safetensors vocab.json merges.txt; do ln -s \"$PWD/%s/$f\" %s/$f; done",
             LLAMA, dir);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s/tokenizer_config.json", dir);
    assert_int_equal(th_write_file(cmd, cfg, strlen(cfg)), 0);
    return dir;
}

static void test_add_bos_token(void **state) {
    (void)state;
    char *dir = llama_with_config("{\"add_bos_token\": true, \"bos_token\": {\"content\": \"<|endoftext|>\"}}");
    kvlm_error err;
    kvlm_tokenizer *t = kvlm_tokenizer_load(dir, &err);
    assert_non_null(t);
    assert_int_equal(kvlm_tokenizer_add_bos(t), 1);
    const int32_t with_bos[4] = {50256, 33676, 4720, 25};
    expect_prompt(t, "ROMEO:", 1, with_bos, 4);
    expect_prompt(t, "ROMEO:", 0, with_bos, 4);
    /* a text that starts with BOS keeps only its own */
    expect_prompt(t, "<|endoftext|>ROMEO:", 1, with_bos, 4);
    /* as plain text it is no BOS: BOS is added in front of its pieces */
    int32_t *ids = NULL;
    size_t n = 0;
    assert_int_equal(kvlm_tokenizer_encode_prompt(t, "<|endoftext|>ROMEO:", 19, 0, &ids, &n, &err), 0);
    assert_true(n > 4);
    assert_int_equal(ids[0], 50256);
    assert_int_not_equal(ids[1], 50256);
    free(ids);
    /* plain encoding adds nothing */
    assert_int_equal(kvlm_tokenizer_encode(t, "ROMEO:", 6, 1, &ids, &n, &err), 0);
    assert_int_equal(n, 3);
    assert_memory_equal(ids, romeo, sizeof romeo);
    free(ids);
    kvlm_tokenizer_free(t);
    th_rmtree(dir);
    free(dir);
    /* add_bos_token false, and an eos_token that differs from config.json's:
     * both end a generation */
    dir = llama_with_config("{\"add_bos_token\": false, \"eos_token\": {\"content\": \"!\", \"special\": true}}");
    t = kvlm_tokenizer_load(dir, &err);
    kvlm_model *m = kvlm_model_load(dir, NULL, &err);
    assert_non_null(t);
    assert_non_null(m);
    expect_prompt(t, "ROMEO:", 1, romeo, 3);
    assert_int_equal(kvlm_tokenizer_eos_id(t), 0); /* "!" */
    const int32_t both[2] = {50256, 0};
    expect_eos(m, t, both, 2);
    kvlm_model_free(m);
    kvlm_tokenizer_free(t);
    th_rmtree(dir);
    free(dir);
}

/* The tiny reference model with config.json eos [199, 7] and
 * generation_config.json as given. */
static char *tiny_with(const char *gen) {
    char *dir = th_tempdir(), path[1200];
    assert_non_null(dir);
    json_t *cfg = json_load_file(TINY "/config.json", 0, NULL);
    assert_non_null(cfg);
    json_object_set_new(cfg, "eos_token_id", json_pack("[ii]", 199, 7));
    snprintf(path, sizeof path, "%s/config.json", dir);
    assert_int_equal(json_dump_file(cfg, path, 0), 0);
    json_decref(cfg);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "ln -s \"$PWD/" TINY "/model.safetensors\" %s/model.safetensors", dir);
    assert_int_equal(system(cmd), 0);
    if (gen) {
        snprintf(path, sizeof path, "%s/generation_config.json", dir);
        assert_int_equal(th_write_file(path, gen, strlen(gen)), 0);
    }
    return dir;
}

static void test_eos_lists(void **state) {
    (void)state;
    kvlm_error err;
    char *dir = tiny_with("{\"bos_token_id\": 199, \"eos_token_id\": [150, 199]}");
    kvlm_model *m = kvlm_model_load(dir, NULL, &err);
    if (!m) fail_msg("%s", err.msg);
    const kvlm_config *c = kvlm_model_config(m);
    assert_int_equal(c->eos_id, 199);
    assert_int_equal(c->n_eos, 3);
    const int32_t want[3] = {199, 7, 150};
    assert_memory_equal(c->eos_ids, want, sizeof want);
    expect_eos(m, NULL, want, 3);
    kvlm_config cfg;
    assert_int_equal(kvlm_config_load(dir, &cfg, &err), 0);
    assert_int_equal(cfg.n_eos, 3);
    assert_memory_equal(cfg.eos_ids, want, sizeof want);
    kvlm_model_free(m);
    th_rmtree(dir);
    free(dir);
    /* a single id in generation_config.json */
    dir = tiny_with("{\"eos_token_id\": 3}");
    m = kvlm_model_load(dir, NULL, &err);
    assert_non_null(m);
    const int32_t want2[3] = {199, 7, 3};
    expect_eos(m, NULL, want2, 3);
    kvlm_model_free(m);
    th_rmtree(dir);
    free(dir);
    /* refused, naming the file and what is wrong */
    static const struct {
        const char *json, *needle;
    } bad[] = {
        {"{\"eos_token_id\": 300}", "generation_config.json: eos_token_id = 300 is not below vocab_size = 200"},
        {"{\"eos_token_id\": [1, \"x\"]}", "generation_config.json: eos_token_id[1] is not an integer"},
        {"{\"eos_token_id\": 1.5}", "generation_config.json: field 'eos_token_id' must be an integer"},
        {"{\"eos_token_id\": [1, 2, 3, 4, 5, 6, 8, 9]}", "more than 8 distinct ids"},
        {"{\"eos_token_id\":", "generation_config.json: not valid JSON"},
        {"[3]", "generation_config.json: not a JSON object"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dir = tiny_with(bad[i].json);
        m = kvlm_model_load(dir, NULL, &err);
        if (m || err.code != KVLM_ERR_FORMAT || !strstr(err.msg, bad[i].needle))
            fail_msg("%s: loaded %d, error %d '%s' (want '%s')", bad[i].json, m != NULL, err.code, err.msg,
                     bad[i].needle);
        th_rmtree(dir);
        free(dir);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shipped_models),
        cmocka_unit_test(test_add_bos_token),
        cmocka_unit_test(test_eos_lists),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
