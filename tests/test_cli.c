/*
 * The kvlm CLI end to end: `run` on the reference fixtures and on synthetic
 * GPT-2 124M shapes (exact KV byte counts), JSON output fields, cache on
 * equals cache off, `run` on the shipped GQA Llama (safetensors and Q8_0
 * GGUF: exact ids, no BOS because its files ask for none; a copy whose
 * tokenizer_config.json sets add_bos_token gets BOS), bench --json, and
 * bad input (missing model, invalid flags, prompts beyond the context
 * window), each with its exit status and message.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

#define TINY "tests/fixtures/gpt2/hf_f32"
#define PROMPT8 "199 17 42 103 0 150 88 3"

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

static json_int_t stat_int(json_t *j, const char *key) {
    json_t *v = json_object_get(json_object_get(j, "stats"), key);
    if (!json_is_integer(v)) fail_msg("stats.%s missing", key);
    return json_integer_value(v);
}

/* GPT-2 124M shapes: 8 prompt tokens hold 589,824 bytes of f32 KV
 * (73,728 per token), 294,912 in f16, K shape (1, 12, 8, 64). */
static void test_kv_bytes_gpt2_124m(void **state) {
    (void)state;
    const char *kvt[2] = {"f32", "f16"};
    const json_int_t total[2] = {589824, 294912}, per[2] = {73728, 36864};
    for (int i = 0; i < 2; i++) {
        char args[256];
        snprintf(args, sizeof args, "--synthetic gpt2-124m --ids '%s' -n 1 --temp 0 --kv-dtype %s", PROMPT8, kvt[i]);
        json_t *j = run_json(args);
        assert_int_equal(stat_int(j, "kv_tokens"), 8);
        assert_int_equal(stat_int(j, "kv_bytes"), total[i]);
        assert_int_equal(stat_int(j, "kv_bytes_per_token"), per[i]);
        /* one 16-token block is reserved for the 8 tokens */
        assert_int_equal(stat_int(j, "kv_bytes_reserved"), 16 * per[i]);
        json_t *shape = json_object_get(json_object_get(j, "stats"), "kv_k_shape");
        const json_int_t want[4] = {1, 12, 8, 64};
        assert_int_equal(json_array_size(shape), 4);
        for (size_t d = 0; d < 4; d++) assert_int_equal(json_integer_value(json_array_get(shape, d)), want[d]);
        json_decref(j);
    }
}

/* Greedy ids and logprobs; the same with the cache off. */
static void test_json_and_no_cache(void **state) {
    (void)state;
    json_t *a = run_json("-m " TINY " --ids '" PROMPT8 "' -n 10 --temp 0 --ignore-eos --logprobs 3");
    json_t *b = run_json("-m " TINY " --ids '" PROMPT8 "' -n 10 --temp 0 --ignore-eos --no-cache");
    json_t *ia = json_object_get(a, "ids"), *ib = json_object_get(b, "ids");
    assert_int_equal(json_array_size(ia), 10);
    assert_true(json_equal(ia, ib));
    assert_int_equal(json_array_size(json_object_get(a, "prompt_ids")), 8);
    json_t *lp = json_object_get(a, "logprobs");
    assert_int_equal(json_array_size(lp), 10);
    for (size_t i = 0; i < 10; i++) {
        json_t *pos = json_array_get(lp, i), *top = json_object_get(pos, "top");
        assert_int_equal(json_array_size(top), 3);
        /* greedy: the chosen id is the most likely one, logprobs descend */
        assert_int_equal(json_integer_value(json_object_get(pos, "id")), json_integer_value(json_array_get(ia, i)));
        assert_int_equal(json_integer_value(json_object_get(json_array_get(top, 0), "id")),
                         json_integer_value(json_array_get(ia, i)));
        double l0 = json_real_value(json_object_get(json_array_get(top, 0), "logprob"));
        double l2 = json_real_value(json_object_get(json_array_get(top, 2), "logprob"));
        assert_true(l0 <= 0 && l2 <= l0);
    }
    const char *keys[] = {"prompt_tokens", "ttft_ms", "prefill_ms_per_token", "tpot_ms", "kv_bytes",
                          "kv_bytes_per_token", "kv_k_shape", "kv_bytes_reserved"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        assert_non_null(json_object_get(json_object_get(a, "stats"), keys[k]));
    /* tiny model: 2 x 2 layers x 4 heads x 16 x 4 B = 1024 B per token, 17 tokens */
    assert_int_equal(stat_int(a, "kv_bytes_per_token"), 1024);
    assert_int_equal(stat_int(a, "kv_bytes"), 17 * 1024);
    json_decref(a);
    json_decref(b);
}

/* The same seed gives the same sampled ids; another seed differs. */
static void test_seeded_sampling(void **state) {
    (void)state;
    json_t *a = run_json("-m " TINY " --ids '" PROMPT8 "' -n 16 --temp 1.0 --top-p 1 --seed 7 --ignore-eos");
    json_t *b = run_json("-m " TINY " --ids '" PROMPT8 "' -n 16 --temp 1.0 --top-p 1 --seed 7 --ignore-eos");
    json_t *c = run_json("-m " TINY " --ids '" PROMPT8 "' -n 16 --temp 1.0 --top-p 1 --seed 8 --ignore-eos");
    assert_true(json_equal(json_object_get(a, "ids"), json_object_get(b, "ids")));
    assert_false(json_equal(json_object_get(a, "ids"), json_object_get(c, "ids")));
    json_decref(a);
    json_decref(b);
    json_decref(c);
}

static void expect_ids(json_t *j, const char *key, const int32_t *want, size_t n) {
    json_t *a = json_object_get(j, key);
    if (json_array_size(a) != n) fail_msg("%s has %zu ids, want %zu", key, json_array_size(a), n);
    for (size_t i = 0; i < n; i++)
        if (json_integer_value(json_array_get(a, i)) != want[i])
            fail_msg("%s[%zu] = %lld, want %d", key, i, (long long)json_integer_value(json_array_get(a, i)), want[i]);
}

#define LLAMA "models/shakespeare-llama"

/* The shipped GQA Llama (8 query heads over 2 KV heads): greedy ids from
 * the safetensors, the Q8_0 GGUF and with the cache off. Its files ask for
 * no BOS (no tokenizer_config.json; GGUF add_bos_token false). */
static void test_run_llama(void **state) {
    (void)state;
    const int32_t prompt[3] = {33676, 4720, 25}; /* "ROMEO:" */
    const int32_t ids[16] = {198, 40, 2937, 25, 198, 40, 2937, 25, 198, 40, 2937, 25, 198, 198, 40, 2937};
    const char *runs[3] = {"-m " LLAMA, "-m " LLAMA " --no-cache", "-m " LLAMA "/shakespeare-llama-q8_0.gguf"};
    for (int r = 0; r < 3; r++) {
        char args[256];
        snprintf(args, sizeof args, "%s -p 'ROMEO:' -n 16 --temp 0 --threads 1", runs[r]);
        json_t *j = run_json(args);
        expect_ids(j, "prompt_ids", prompt, 3);
        expect_ids(j, "ids", ids, 16);
        assert_string_equal(json_string_value(json_object_get(j, "text")), "\nIUS:\nIUS:\nIUS:\n\nIUS");
        assert_string_equal(json_string_value(json_object_get(j, "finish_reason")), "length");
        /* 19 tokens hold 2 x 8 layers x 2 KV heads x 8 x 4 B each but the last */
        assert_int_equal(stat_int(j, "kv_tokens"), 18);
        assert_int_equal(stat_int(j, "kv_bytes"), 18 * 1024);
        json_decref(j);
    }
}

/* The same Llama with a tokenizer_config.json that sets add_bos_token:
 * BOS (<|endoftext|>, 50256) goes in front of the prompt; the echoed prompt
 * is the text as given. */
static void test_run_bos_from_files(void **state) {
    (void)state;
    char *dir = th_tempdir(), cmd[2048], args[1200];
    assert_non_null(dir);
    snprintf(cmd, sizeof cmd, "for f in config.json model.safetensors vocab.json merges.txt; do ln -s \"$PWD/%s/$f\" %s/$f; done",
             LLAMA, dir);
    assert_int_equal(system(cmd), 0);
    const char *cfg = "{\"add_bos_token\": true, \"bos_token\": {\"content\": \"<|endoftext|>\", \"special\": true}, "
                      "\"eos_token\": \"<|endoftext|>\"}";
    snprintf(cmd, sizeof cmd, "%s/tokenizer_config.json", dir);
    assert_int_equal(th_write_file(cmd, cfg, strlen(cfg)), 0);
    snprintf(args, sizeof args, "-m %s -p 'ROMEO:' -n 4 --temp 0 --threads 1", dir);
    json_t *j = run_json(args);
    const int32_t prompt[4] = {50256, 33676, 4720, 25}, ids[4] = {198, 40, 2937, 25};
    expect_ids(j, "prompt_ids", prompt, 4);
    expect_ids(j, "ids", ids, 4);
    json_decref(j);
    char *out = NULL;
    assert_int_equal(th_run_kvlm(&out, "run %s 2>/dev/null", args), 0);
    assert_string_equal(out, "ROMEO:\nIUS:\n");
    free(out);
    th_rmtree(dir);
    free(dir);
}

/* bench --json carries every section with positive figures. */
static void test_bench_json(void **state) {
    (void)state;
    char *out = NULL;
    int st = th_run_kvlm(&out, "bench --synthetic gpt2-tiny --pp 8 --tg 8 --repeats 2 --bw-mib 16 --json 2>/dev/null");
    assert_int_equal(st, 0);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    if (!j) fail_msg("bench output is not JSON: %s\n%s", je.text, out);
    const char *paths[][2] = {{"pp", "mean_tok_s"}, {"pp", "sd_tok_s"}, {"tg", "median_tok_s"},
                              {"roofline", "ratio"}, {"cache", "speedup"}};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        json_t *v = json_object_get(json_object_get(j, paths[i][0]), paths[i][1]);
        if (!json_is_number(v) || json_number_value(v) < 0) fail_msg("%s.%s missing", paths[i][0], paths[i][1]);
    }
    assert_true(json_number_value(json_object_get(j, "bandwidth_gbs")) > 0);
    assert_int_equal(json_integer_value(json_object_get(j, "params")), 114944);
    json_decref(j);
    free(out);
}

/* sample-stats and gen-stats JSON on the reference model. */
static void test_measurement_commands(void **state) {
    (void)state;
    char *out = NULL;
    assert_int_equal(th_run_kvlm(&out, "sample-stats -m " TINY " --ids '" PROMPT8 "' --temps 0.5,1 --top-p 0.9 --json"), 0);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    if (!j) fail_msg("sample-stats: %s\n%s", je.text, out);
    json_t *temps = json_object_get(j, "temperatures");
    assert_int_equal(json_array_size(temps), 2);
    json_t *s0 = json_object_get(json_array_get(temps, 0), "stats"), *s1 = json_object_get(json_array_get(temps, 1), "stats");
    /* a colder distribution has less entropy and a larger top-1 */
    assert_true(json_real_value(json_object_get(s0, "entropy")) < json_real_value(json_object_get(s1, "entropy")));
    assert_true(json_real_value(json_object_get(s0, "top1")) > json_real_value(json_object_get(s1, "top1")));
    assert_int_equal(json_integer_value(json_object_get(s1, "support")), 200);
    assert_non_null(json_object_get(json_array_get(temps, 0), "filtered"));
    json_decref(j);
    free(out);
    assert_int_equal(th_run_kvlm(&out, "gen-stats -m " TINY " --ids '" PROMPT8 "' -n 12 --json 2>/dev/null"), 0);
    j = json_loads(out, 0, &je);
    if (!j) fail_msg("gen-stats: %s\n%s", je.text, out);
    json_t *settings = json_object_get(j, "settings");
    assert_int_equal(json_array_size(settings), 7);
    for (size_t i = 0; i < 7; i++) {
        json_t *r = json_array_get(settings, i);
        assert_int_equal(json_integer_value(json_object_get(r, "tokens")), 12);
        double d = json_real_value(json_object_get(r, "distinct_ratio"));
        assert_true(d > 0 && d <= 1);
    }
    json_decref(j);
    free(out);
}

typedef struct bad_case {
    const char *args;
    int status;
    const char *needle;
} bad_case;

static void test_bad_input(void **state) {
    (void)state;
    const bad_case cases[] = {
        {"run -m /nonexistent/model --ids 1", 1, "/nonexistent/model: no such file"},
        {"run --ids 1", 2, "no model"},
        {"run -m " TINY, 2, "exactly one of -p"},
        {"run -m " TINY " --ids 1 --temp -1", 2, "--temp"},
        {"run -m " TINY " --ids 1 --temp abc", 2, "not a number"},
        {"run -m " TINY " --ids 1 --top-p 1.5", 2, "--top-p"},
        {"run -m " TINY " --ids 1 -n x", 2, "not an integer"},
        {"run -m " TINY " --ids 1 --kv-dtype q4", 2, "--kv-dtype"},
        {"run -m " TINY " --ids 1 --threads 0", 2, "--threads"},
        {"run -m " TINY " --ids 1 --isa sse9", 2, "--isa"},
        {"run -m " TINY " --ids '1 x 3'", 2, "not a list"},
        {"run -m " TINY " --ids 200", 2, "outside the vocabulary"},
        {"run -m " TINY " --ids 1 --bogus", 2, "unknown argument"},
        {"run -m " TINY " --ids '1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 "
         "31 32 33'", 2, "more than the context window of 32"},
        {"run -m " TINY " --ids '1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 "
         "31 32'", 2, "leaves no room to generate"},
        {"run --synthetic gpt2-999m --ids 1", 1, "unknown synthetic preset"},
        {"bench -m " TINY " --pp 30 --tg 8", 2, "exceed the context window"},
        {"frobnicate", 2, "unknown command"},
        {"run -m " TINY " --ids 1 --sampler-order top_k", 2, "exactly once"},
        {"run -m " TINY " --ids 1 --logit-bias 5", 2, "--logit-bias"},
        {"run -m " TINY " --ids 1 --logit-bias 999:1", 2, "outside the vocabulary"},
        {"sample-stats -m " TINY " --ids 1 --temps 0", 2, "--temps"},
        {"gen-stats -m " TINY, 2, "exactly one of -p"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = NULL;
        int st = th_run_kvlm(&out, "%s", cases[i].args);
        if (st != cases[i].status || !strstr(out, cases[i].needle))
            fail_msg("kvlm %s: exit %d (want %d), output: %s (want '%s')", cases[i].args, st, cases[i].status, out,
                     cases[i].needle);
        free(out);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_bytes_gpt2_124m),
        cmocka_unit_test(test_json_and_no_cache),
        cmocka_unit_test(test_seeded_sampling),
        cmocka_unit_test(test_run_llama),
        cmocka_unit_test(test_run_bos_from_files),
        cmocka_unit_test(test_bench_json),
        cmocka_unit_test(test_measurement_commands),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
