/*
 * Fill-in-the-middle: the FIM token ids a tokenizer reports
 * (kvlm_tokenizer_fim_id, from GGUF metadata and by name) and the prompt
 * src/app/infill_request.c assembles, on tests/fixtures/fim/fim_mini.gguf
 * (tools/make_fim_fixture.py: <|fim_prefix|> 101, <|fim_suffix|> 102,
 * <|fim_middle|> 103 named by the file; <|fim_pad|> 104, <|repo_name|> 105,
 * <|file_sep|> 106 found by name).
 *
 * Checks: the ids, and those of llama.cpp's StarCoder test vocabulary
 * (found by name, the ids llama.cpp finds); the /infill and /v1/completions `suffix` prompts token
 * by token against the ids llama-server (de3ff81) assembled for the same
 * file and body (its /infill "prompt" text re-tokenised by its /tokenize,
 * written out below); the cuts when the room is short (prefix keeps its
 * end, suffix its start, extra context its end); a 400 naming every
 * missing token on the shipped GPT-2 tokenizer, which has none; malformed
 * /infill bodies refused with status, code and field.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <libgen.h>

#include "app/infill_request.h"

static kvlm_tokenizer *fim_tok, *gpt2_tok;
static char vocab_dir[4096]; /* <build>/tests/vocab: llama.cpp's test vocabularies (Makefile) */

static int setup(void **state) {
    (void)state;
    kvlm_error err;
    fim_tok = kvlm_tokenizer_load("tests/fixtures/fim/fim_mini.gguf", &err);
    if (!fim_tok) fprintf(stderr, "%s\n", err.msg);
    gpt2_tok = kvlm_tokenizer_load("models/gpt2-tokenizer", &err);
    return fim_tok && gpt2_tok ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    kvlm_tokenizer_free(fim_tok);
    kvlm_tokenizer_free(gpt2_tok);
    return 0;
}

static api_limits limits(const kvlm_tokenizer *t, int n_ctx) {
    return (api_limits){.tok = t, .model_name = "m", .n_ctx = n_ctx, .vocab = kvlm_tokenizer_vocab_size(t),
                        .max_seqs = 4, .block_size = 16, .max_prompts = 4, .kv_blocks = 4096, .random_seed = 7};
}

static void assert_ids(const int32_t *got, int n_got, const int32_t *want, int n_want) {
    if (n_got != n_want || memcmp(got, want, (size_t)n_want * sizeof *want)) {
        char g[2048] = "", w[2048] = "";
        for (int i = 0; i < n_got && strlen(g) < 2000; i++) snprintf(g + strlen(g), sizeof g - strlen(g), "%d,", got[i]);
        for (int i = 0; i < n_want && strlen(w) < 2000; i++) snprintf(w + strlen(w), sizeof w - strlen(w), "%d,", want[i]);
        fail_msg("got  %d ids [%s]\nwant %d ids [%s]", n_got, g, n_want, w);
    }
}

/* StarCoder's vocabulary names no FIM ids in its metadata: its <fim_prefix>,
 * <fim_middle>, <fim_suffix>, <fim_pad> (ids 1, 2, 3, 4) are found by
 * name, as llama.cpp finds them; it has no repository or file separator. */
static void test_fim_ids_by_name(void **state) {
    (void)state;
    char path[4200];
    snprintf(path, sizeof path, "%s/ggml-vocab-starcoder.gguf", vocab_dir);
    kvlm_error err;
    kvlm_tokenizer *t = kvlm_tokenizer_load(path, &err);
    if (!t) fail_msg("%s", err.msg);
    const int32_t want[KVLM_FIM_COUNT] = {1, 3, 2, 4, -1, -1};
    for (int k = 0; k < KVLM_FIM_COUNT; k++) assert_int_equal(kvlm_tokenizer_fim_id(t, (kvlm_fim_token)k), want[k]);
    kvlm_tokenizer_free(t);
}

static void test_fim_ids(void **state) {
    (void)state;
    const int32_t want[KVLM_FIM_COUNT] = {101, 102, 103, 104, 105, 106};
    for (int k = 0; k < KVLM_FIM_COUNT; k++) assert_int_equal(kvlm_tokenizer_fim_id(fim_tok, (kvlm_fim_token)k), want[k]);
    assert_int_equal(kvlm_tokenizer_fim_id(fim_tok, KVLM_FIM_COUNT), KVLM_NO_TOKEN);
    assert_int_equal(kvlm_tokenizer_fim_id(fim_tok, (kvlm_fim_token)-1), KVLM_NO_TOKEN);
    for (int k = 0; k < KVLM_FIM_COUNT; k++)
        assert_int_equal(kvlm_tokenizer_fim_id(gpt2_tok, (kvlm_fim_token)k), KVLM_NO_TOKEN);
}

/* llama-server's ids for {"input_prefix":"def f(x):\n    return","input_suffix":"\nprint(f(2))\n"}:
 * the repository and file markers come first even without input_extra */
static const int32_t ll_code[] = {105, 78, 90, 81, 83, 80, 75, 70, 68, 85, 0,  106, 71, 74, 77, 70, 79, 66, 78,
                                  70,  0,  101, 69, 70, 71, 1,  71, 9,  89, 10, 27, 0,   1,  1,  1,  1,  83, 70,
                                  85,  86, 83, 79, 102, 0, 81, 83, 98, 85, 9,  71, 9,   19, 10, 10, 0,  103};
/* and for {"input_prefix":"the","input_suffix":"inter","prompt":"<|fim_pad|>x",
 *          "input_extra":[{"filename":"a.py","text":"three"},{"text":"ii"}]} */
static const int32_t ll_extra[] = {105, 78, 90, 81, 83, 80, 75, 70, 68, 85, 0,  106, 66, 15, 81, 90, 0,
                                   85,  73, 83, 70, 70, 106, 85, 78, 81, 0, 74, 74, 106, 71, 74, 77, 70,
                                   79,  66, 78, 70, 0,  101, 85, 73, 70, 104, 89, 102, 98, 85, 97, 103};

static void test_infill_matches_llama_server(void **state) {
    (void)state;
    api_limits lim = limits(fim_tok, 4096);
    api_request rq;
    api_error e;
    const char *b1 = "{\"input_prefix\":\"def f(x):\\n    return\",\"input_suffix\":\"\\nprint(f(2))\\n\",\"n_predict\":3}";
    if (api_parse_infill(b1, strlen(b1), &lim, &rq, &e)) fail_msg("refused: %s", e.message);
    assert_int_equal(rq.infill, 1);
    assert_int_equal(rq.n_prompts, 1);
    assert_int_equal(rq.max_new[0], 3);
    assert_ids(rq.prompts[0], rq.n_prompt[0], ll_code, (int)(sizeof ll_code / sizeof *ll_code));
    api_request_free(&rq);
    const char *b2 = "{\"input_prefix\":\"the\",\"input_suffix\":\"inter\",\"prompt\":\"<|fim_pad|>x\",\"input_extra\":"
                     "[{\"filename\":\"a.py\",\"text\":\"three\"},{\"text\":\"ii\"}],\"cache_prompt\":true,"
                     "\"temperature\":0,\"model\":\"m\"}";
    if (api_parse_infill(b2, strlen(b2), &lim, &rq, &e)) fail_msg("refused: %s", e.message);
    assert_int_equal(rq.max_new[0], 16);
    assert_ids(rq.prompts[0], rq.n_prompt[0], ll_extra, (int)(sizeof ll_extra / sizeof *ll_extra));
    api_request_free(&rq);
}

/* /v1/completions with suffix: the prompt is the prefix. */
static void test_completion_suffix(void **state) {
    (void)state;
    api_limits lim = limits(fim_tok, 4096);
    api_request rq;
    api_error e;
    const char *b = "{\"prompt\":\"def f(x):\\n    return\",\"suffix\":\"\\nprint(f(2))\\n\",\"max_tokens\":4}";
    if (api_parse_completion(b, strlen(b), 0, &lim, &rq, &e)) fail_msg("refused: %s", e.message);
    assert_int_equal(rq.infill, 0);
    assert_ids(rq.prompts[0], rq.n_prompt[0], ll_code, (int)(sizeof ll_code / sizeof *ll_code));
    api_request_free(&rq);
    /* an empty suffix is a plain completion: "the" is 85 73 70 */
    b = "{\"prompt\":\"the\",\"suffix\":\"\"}";
    if (api_parse_completion(b, strlen(b), 0, &lim, &rq, &e)) fail_msg("refused: %s", e.message);
    const int32_t plain[] = {85, 73, 70};
    assert_ids(rq.prompts[0], rq.n_prompt[0], plain, 3);
    api_request_free(&rq);
    b = "{\"prompt\":[85,73],\"suffix\":\"x\"}";
    assert_int_equal(api_parse_completion(b, strlen(b), 0, &lim, &rq, &e), -1);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.param, "prompt");
    b = "{\"prompt\":\"a\",\"suffix\":7}";
    assert_int_equal(api_parse_completion(b, strlen(b), 0, &lim, &rq, &e), -1);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.param, "suffix");
}

/* Room 12: prefix keeps at most 3*(12/4) = 9 tokens (its last), the suffix
 * 12/4 - 2 = 1 (its first); 3 markers + 9 + 1 = 13 > 12 cuts one more
 * prefix token; no room for extra context. */
static void test_cuts(void **state) {
    (void)state;
    fim_chunk extra = {.text = "three", .text_len = 5};
    fim_input in = {.prefix = "abcdefghijklmn", .prefix_len = 14, .suffix = "xyz", .suffix_len = 3,
                    .extra = &extra, .n_extra = 1};
    int32_t *ids;
    int n;
    api_error e;
    assert_int_equal(fim_assemble(fim_tok, &in, 12, 0, &ids, &n, &e), 0);
    /* f..n is 71..79 (the letters run from 'a' = 66), x is 89 */
    const int32_t want[] = {101, 72, 73, 74, 75, 76, 77, 78, 79, 102, 89, 103};
    assert_ids(ids, n, want, 12);
    free(ids);
    /* room 40: all of prefix and suffix (20 with the markers), then the last
     * 20 of the 31 extra tokens: <|repo_name|> "myproject\n" is cut, the
     * chunk (<|file_sep|> "tmp\n" "three") and the closing <|file_sep|>
     * "filename\n" stay */
    assert_int_equal(fim_assemble(fim_tok, &in, 40, 0, &ids, &n, &e), 0);
    assert_int_equal(n, 40);
    const int32_t head[] = {106, 85, 78, 81, 0, 85, 73, 83, 70, 70, 106, 71, 74, 77, 70, 79, 66, 78, 70, 0, 101, 66};
    assert_ids(ids, 22, head, 22);
    assert_int_equal(ids[35], 102);
    assert_int_equal(ids[39], 103);
    free(ids);
    /* spm order: suffix block first */
    in.n_extra = 0;
    in.prefix_len = 2;
    assert_int_equal(fim_assemble(fim_tok, &in, 40, 1, &ids, &n, &e), 0);
    const int32_t spm[] = {102, 89, 90, 91, 101, 66, 67, 103}; /* after the 21 repository-marker ids */
    assert_int_equal(n, 29);
    assert_ids(ids + 21, 8, spm, 8);
    free(ids);
    /* a prompt that leaves no room for the markers */
    in.prompt = "abcdefgh";
    in.prompt_len = 8;
    assert_int_equal(fim_assemble(fim_tok, &in, 8, 0, &ids, &n, &e), -1);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.code, "context_length_exceeded");
}

static void test_no_fim_tokens(void **state) {
    (void)state;
    api_limits lim = limits(gpt2_tok, 1024);
    api_request rq;
    api_error e;
    const char *b = "{\"input_prefix\":\"a\",\"input_suffix\":\"b\"}";
    assert_int_equal(api_parse_infill(b, strlen(b), &lim, &rq, &e), -1);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.code, "fim_not_supported");
    assert_string_equal(e.message, "fill-in-the-middle is not supported by this model: its tokenizer names no prefix "
                                   "(tokenizer.ggml.fim_pre_token_id, <|fim_prefix|>), suffix "
                                   "(tokenizer.ggml.fim_suf_token_id, <|fim_suffix|>), middle "
                                   "(tokenizer.ggml.fim_mid_token_id, <|fim_middle|>) tokens");
    b = "{\"prompt\":\"a\",\"suffix\":\"b\"}";
    assert_int_equal(api_parse_completion(b, strlen(b), 0, &lim, &rq, &e), -1);
    assert_int_equal(e.status, 400);
    assert_string_equal(e.code, "fim_not_supported");
    assert_string_equal(e.param, "suffix");
}

static void test_bad_bodies(void **state) {
    (void)state;
    api_limits lim = limits(fim_tok, 4096);
    static const struct {
        const char *body;
        int status;
        const char *param;
    } cases[] = {
        {"{\"input_suffix\":\"b\"}", 400, "input_prefix"},
        {"{\"input_prefix\":\"a\"}", 400, "input_suffix"},
        {"{\"input_prefix\":1,\"input_suffix\":\"b\"}", 400, "input_prefix"},
        {"{\"input_prefix\":\"a\",\"input_suffix\":\"b\",\"prompt\":[1]}", 400, "prompt"},
        {"{\"input_prefix\":\"a\",\"input_suffix\":\"b\",\"input_extra\":{}}", 400, "input_extra"},
        {"{\"input_prefix\":\"a\",\"input_suffix\":\"b\",\"input_extra\":[{\"filename\":\"x\"}]}", 400, "input_extra"},
        {"{\"input_prefix\":\"a\",\"input_suffix\":\"b\",\"input_extra\":[{\"text\":\"x\",\"filename\":2}]}", 400,
         "input_extra"},
        {"{\"input_prefix\":\"a\",\"input_suffix\":\"b\",\"input_extra\":[{\"text\":\"x\",\"lang\":\"c\"}]}", 400,
         "input_extra"},
        {"{\"input_prefix\":\"a\",\"input_suffix\":\"b\",\"n_predict\":4,\"max_tokens\":4}", 400, "n_predict"},
        {"{\"input_prefix\":\"a\",\"input_suffix\":\"b\",\"samplers\":[\"top_k\"]}", 400, "samplers"},
        {"{\"input_prefix\":\"a\",\"input_suffix\":\"b\",\"bogus\":1}", 400, "bogus"},
        {"{\"input_prefix\":\"a\",\"input_suffix\":\"b\",\"n_predict\":5000}", 400, "max_tokens"},
        {"{\"input_prefix\":\"a\",\"input_suffix\":\"b\",\"model\":\"other\"}", 404, "model"},
        {"[1]", 400, ""},
        {"{", 400, ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        api_request rq;
        api_error e;
        memset(&e, 0, sizeof e);
        int rc = api_parse_infill(cases[i].body, strlen(cases[i].body), &lim, &rq, &e);
        if (rc != -1 || e.status != cases[i].status || strcmp(e.param, cases[i].param))
            fail_msg("%s: rc %d status %d param '%s' (%s)", cases[i].body, rc, e.status, e.param, e.message);
    }
    /* n_predict -1 is the default */
    const char *b = "{\"input_prefix\":\"a\",\"input_suffix\":\"b\",\"n_predict\":-1}";
    api_request rq;
    api_error e;
    if (api_parse_infill(b, strlen(b), &lim, &rq, &e)) fail_msg("refused: %s", e.message);
    assert_int_equal(rq.max_new[0], 16);
    api_request_free(&rq);
}

int main(int argc, char **argv) {
    (void)argc;
    char self[4096];
    snprintf(self, sizeof self, "%s", argv[0]);
    snprintf(vocab_dir, sizeof vocab_dir, "%s/vocab", dirname(self));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fim_ids),
        cmocka_unit_test(test_fim_ids_by_name),
        cmocka_unit_test(test_infill_matches_llama_server),
        cmocka_unit_test(test_completion_suffix),
        cmocka_unit_test(test_cuts),
        cmocka_unit_test(test_no_fim_tokens),
        cmocka_unit_test(test_bad_bodies),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
