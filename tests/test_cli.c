/*
 * The kvlm CLI end to end: `run` on the reference fixtures and on synthetic
 * GPT-2 124M shapes (exact KV byte counts), JSON output fields, cache on
 * equals cache off, `run` on the shipped GQA Llama (safetensors and Q8_0
 * GGUF: exact ids, no BOS because its files ask for none; a copy whose
 * tokenizer_config.json sets add_bos_token gets BOS), bench --json, and
 * bad input (missing model, invalid flags, prompts beyond the context
 * window), each with its exit status and message.
 * The commands README.md and docs/ show, run as written on the shipped
 * models (with small lengths), with exact output where it is
 * deterministic; the option layer's rules (shared flags with the same help
 * in every command, `--`, `--flag=value`, flags a command does not use).
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/options.h"
#include "kvlm_measure.h"
#include "helpers.h"

#define GPT2 "models/shakespeare-gpt2"
#define LLAMA "models/shakespeare-llama"
#define LLAMA_GGUF LLAMA "/shakespeare-llama-q8_0.gguf"

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

/* Q4_0 weights repacked for decode (the default with avx512-vnni, the
 * CPU's best or asked for) and not (--no-repack, or another --isa): the
 * same greedy ids from synthetic GPT-2 124M shapes, and the exact bytes
 * of the copy: per layer (2304 + 768 + 3072) / 4 tiles of 6 groups and
 * 768 / 4 tiles of 24 groups, 288 bytes a group, and the tied head's
 * ceil(50257 / 4) tiles of 6 groups. The logprobs are not compared: the
 * packed kernel rounds differently (tests/test_quant_int8.c), which can
 * move an activation's int8 code in a later layer; on this random model
 * they differ by up to about 1e-2, as the decode and the prefill kernels
 * of the file's layout already do. */
static void test_repack_same_tokens(void **state) {
    (void)state;
    const json_int_t bytes = 12 * ((2304 + 768 + 3072) / 4 * 6 + 768 / 4 * 24) * 288 + 12565 * 6 * 288;
    assert_int_equal(bytes, 69488064);
    const int vnni = kvlm_isa_best() == KVLM_ISA_AVX512_VNNI || kvlm_isa_best() == KVLM_ISA_AVX512_BF16;
    const char *base = "--synthetic gpt2-124m --dtype q4_0 --ids '" PROMPT8 "' -n 16 --temp 0 --ignore-eos";
    const char *variants[] = {"", " --no-repack", " --isa avx512"};
    json_t *r[3];
    for (int i = 0; i < 3; i++) {
        char args[256];
        snprintf(args, sizeof args, "%s%s", base, variants[i]);
        r[i] = run_json(args);
        assert_int_equal(stat_int(r[i], "repacked_bytes"), i == 0 && vnni ? bytes : 0);
    }
    assert_int_equal(json_array_size(json_object_get(r[0], "ids")), 16);
    if (!json_equal(json_object_get(r[0], "ids"), json_object_get(r[1], "ids")))
        fail_msg("greedy ids differ with and without the repack");
    for (int i = 0; i < 3; i++) json_decref(r[i]);
}

/* Greedy ids and logprobs; the same with the cache off; the default KV
 * cache is f16. */
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
    /* tiny model: 2 x 2 layers x 4 heads x 16 x 2 B = 512 B per token, 17 tokens */
    assert_string_equal(json_string_value(json_object_get(json_object_get(a, "stats"), "kv_dtype")), "f16");
    assert_int_equal(stat_int(a, "kv_bytes_per_token"), 512);
    assert_int_equal(stat_int(a, "kv_bytes"), 17 * 512);
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
        /* 19 tokens hold 2 x 8 layers x 2 KV heads x 8 x 2 B (f16, the default) each but the last */
        assert_int_equal(stat_int(j, "kv_tokens"), 18);
        assert_int_equal(stat_int(j, "kv_bytes"), 18 * 512);
        json_decref(j);
    }
}

/* The same Llama with a tokenizer_config.json that sets add_bos_token:
 * BOS (<|endoftext|>, 50256) goes in front of the prompt (run, and tokenize
 * --special); the echoed prompt is the text as given. */
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
    /* tokenize --special encodes as run does; plain text stays the text alone */
    assert_int_equal(th_run_kvlm(&out, "tokenize -m %s --special 'ROMEO:' 2>&1", dir), 0);
    assert_string_equal(out, "50256 33676 4720 25\n");
    free(out);
    assert_int_equal(th_run_kvlm(&out, "tokenize -m %s 'ROMEO:' 2>&1", dir), 0);
    assert_string_equal(out, "33676 4720 25\n");
    free(out);
    th_rmtree(dir);
    free(dir);
}

/* bench --json carries every section with positive figures, the default
 * KV dtype and thread count, and the paired roofline's figures agree with
 * each other. */
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
    /* the roofline's bandwidth: the larger of the buffer probe and the read of the weights themselves */
    const double bw = json_number_value(json_object_get(j, "bandwidth_gbs"));
    const double bwb = json_number_value(json_object_get(j, "buffer_bandwidth_gbs"));
    const double bww = json_number_value(json_object_get(j, "weights_bandwidth_gbs"));
    assert_true(bwb > 0 && bww > 0);
    assert_true(bw == (bwb > bww ? bwb : bww));
    /* the probe's buffer: the requested 16 MiB raised past the caches, whole 32 KiB tiles */
    const size_t buf = kvlm_read_bandwidth_buffer_bytes((size_t)16 << 20);
    assert_true(buf >= (size_t)16 << 20 && buf % 32768 == 0);
    assert_int_equal(json_integer_value(json_object_get(j, "bandwidth_buffer_mib")), (json_int_t)(buf >> 20));
    assert_int_equal(json_integer_value(json_object_get(j, "params")), 114944);
    /* the defaults: KV in f16, one thread per physical core, with the reason */
    char why[160];
    assert_string_equal(json_string_value(json_object_get(j, "kv_dtype")), "f16");
    assert_int_equal(json_integer_value(json_object_get(j, "threads")), kvlm_default_threads(why, sizeof why));
    assert_string_equal(json_string_value(json_object_get(j, "threads_reason")), why);
    /* the paired roofline: 4 reads of the decode bytes after each of the 2 decode repeats, mean against mean */
    const json_t *pr = json_object_get(json_object_get(j, "roofline"), "paired");
    assert_non_null(pr);
    assert_int_equal(json_integer_value(json_object_get(pr, "read_passes")), 8);
    const double read_ms = json_number_value(json_object_get(pr, "read_ms_per_token"));
    const double dec_ms = json_number_value(json_object_get(pr, "decode_mean_ms_per_token"));
    const double bytes = json_number_value(json_object_get(j, "decode_bytes_per_token"));
    assert_true(read_ms > 0 && dec_ms > 0);
    /* (JSON reals carry 6 significant digits) */
    assert_float_equal(json_number_value(json_object_get(pr, "ratio")), read_ms / dec_ms, 1e-4 * read_ms / dec_ms);
    assert_float_equal(json_number_value(json_object_get(pr, "read_gbs")), bytes / read_ms / 1e6,
                       1e-4 * bytes / read_ms / 1e6);
    json_decref(j);
    free(out);
}

/* bench reports the float batch kernel of each (dtype, K) of the model's
 * float matrices: gpt2-tiny (f32, K = 64 and 256) gets two measured
 * entries, each the faster of its two times; KVLM_FLOAT_BATCH sets the
 * kernel without timing. The scalar set has one kernel: no entries. */
static void test_bench_float_batch(void **state) {
    (void)state;
    const char *forms[] = {NULL, "packed", "direct"};
    for (int f = 0; f < 3; f++) {
        if (forms[f]) setenv("KVLM_FLOAT_BATCH", forms[f], 1);
        else unsetenv("KVLM_FLOAT_BATCH");
        char *out = NULL;
        assert_int_equal(
            th_run_kvlm(&out, "bench --synthetic gpt2-tiny --pp 8 --tg 2 --repeats 1 --bw-mib 16 "
                              "--no-cache-test --json 2>/dev/null"), 0);
        unsetenv("KVLM_FLOAT_BATCH");
        json_error_t je;
        json_t *j = json_loads(out, 0, &je);
        if (!j) fail_msg("bench output is not JSON: %s\n%s", je.text, out);
        const json_t *fb = json_object_get(j, "float_batch");
        if (kvlm_isa_best() == KVLM_ISA_SCALAR) assert_null(fb);
        else {
            assert_int_equal(json_array_size(fb), 2);
            for (size_t i = 0; i < 2; i++) {
                const json_t *e = json_array_get(fb, i);
                assert_string_equal(json_string_value(json_object_get(e, "dtype")), "f32");
                assert_int_equal(json_integer_value(json_object_get(e, "cols")), i ? 256 : 64);
                const char *kernel = json_string_value(json_object_get(e, "kernel"));
                const double tp = json_number_value(json_object_get(e, "packed_us"));
                const double td = json_number_value(json_object_get(e, "direct_us"));
                assert_int_equal(json_is_true(json_object_get(e, "forced")), forms[f] != NULL);
                if (forms[f]) assert_string_equal(kernel, forms[f]);
                else {
                    assert_true(tp > 0 && td > 0);
                    assert_string_equal(kernel, td < tp ? "direct" : "packed");
                }
            }
        }
        json_decref(j);
        free(out);
    }
    char *out = NULL;
    assert_int_equal(th_run_kvlm(&out, "bench --synthetic gpt2-tiny --isa scalar --pp 8 --tg 2 --repeats 1 "
                                       "--bw-mib 16 --no-cache-test --json 2>/dev/null"), 0);
    json_t *j = json_loads(out, 0, NULL);
    assert_non_null(j);
    assert_null(json_object_get(j, "float_batch"));
    json_decref(j);
    free(out);
}

/* bench --batch B: the batched decode section, its counts as asked, each
 * row's times ordered and positive; B = 1 refused. */
static void test_bench_batch(void **state) {
    (void)state;
    char *out = NULL;
    assert_int_equal(th_run_kvlm(&out, "bench --synthetic gpt2-tiny --pp 8 --tg 4 --repeats 3 --bw-mib 16 "
                                       "--no-cache-test --batch 3 --json 2>/dev/null"), 0);
    json_t *j = json_loads(out, 0, NULL);
    assert_non_null(j);
    const json_t *b = json_object_get(j, "batch");
    assert_non_null(b);
    assert_int_equal(json_integer_value(json_object_get(b, "batch")), 3);
    assert_int_equal(json_integer_value(json_object_get(b, "prompt_tokens")), 8);
    assert_int_equal(json_integer_value(json_object_get(b, "steps")), 4);
    assert_int_equal(json_integer_value(json_object_get(b, "repeats")), 3);
    static const char *const rows[] = {"one", "batched"};
    for (int k = 0; k < 2; k++) {
        const json_t *r = json_object_get(b, rows[k]);
        assert_int_equal(json_integer_value(json_object_get(r, "sequences")), k ? 3 : 1);
        const double lo = json_real_value(json_object_get(r, "min_ms_per_step"));
        const double med = json_real_value(json_object_get(r, "median_ms_per_step"));
        const double hi = json_real_value(json_object_get(r, "max_ms_per_step"));
        assert_true(lo > 0 && lo <= med && med <= hi);
        /* tokens/s is the sequences over the median step */
        assert_float_equal(json_real_value(json_object_get(r, "tokens_per_s")), (k ? 3 : 1) / (med * 1e-3),
                           1e-4 * (k ? 3 : 1) / (med * 1e-3)); /* the JSON text keeps 6 significant digits */
    }
    assert_true(json_real_value(json_object_get(b, "step_ratio")) > 0);
    assert_true(json_real_value(json_object_get(b, "throughput_ratio")) > 0);
    json_decref(j);
    free(out);
    assert_int_equal(th_run_kvlm(&out, "bench --synthetic gpt2-tiny --pp 8 --tg 4 --repeats 1 --bw-mib 16 "
                                       "--no-cache-test --batch 2 2>/dev/null"), 0);
    assert_non_null(strstr(out, "batched decode: 2 sequences decoding together vs 1"));
    assert_non_null(strstr(out, "a step of 2 costs"));
    free(out);
    assert_int_equal(th_run_kvlm(&out, "bench --synthetic gpt2-tiny --batch 1 2>&1"), 2);
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

static void test_bad_input(void **state) {
    (void)state;
    const th_cli_case cases[] = {
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
    th_expect_cli(cases, sizeof cases / sizeof cases[0]);
}

/* ------------------------------------------------- README commands */

/* Runs `kvlm ARGS`; fails unless it exits with status; returns the output. */
static char *expect_exit(int status, const char *args) {
    char *out = NULL;
    int st = th_run_kvlm(&out, "%s", args);
    if (st != status) fail_msg("kvlm %s: exit %d (want %d): %s", args, st, status, out ? out : "");
    return out;
}

/* Runs args, which must exit 0 and print exactly want. */
static void expect_output(const char *args, const char *want) {
    char *out = expect_exit(0, args);
    assert_string_equal(out, want);
    free(out);
}

static json_t *expect_json(const char *args) {
    char *out = NULL;
    int st = th_run_kvlm(&out, "%s 2>/dev/null", args);
    if (st != 0) fail_msg("kvlm %s: exit %d: %s", args, st, out ? out : "");
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    if (!j) fail_msg("kvlm %s: not one JSON document: %s\n%s", args, je.text, out);
    free(out);
    return j;
}

static json_int_t jint_at(json_t *j, const char *a, const char *b) {
    json_t *v = json_object_get(b ? json_object_get(j, a) : j, b ? b : a);
    if (!json_is_integer(v)) fail_msg("%s%s%s is not an integer", a, b ? "." : "", b ? b : "");
    return json_integer_value(v);
}

/* One rule for KV cache dtypes (kvlm_kv_dtype_parse): kvlm run, serve and
 * bench (the shared engine flags) and kvlm kv (sizing only) refuse bf16
 * with the same status and the same message, and agree on q8_0. */
static void test_kv_dtype_one_rule(void **state) {
    (void)state;
    static const char *const refusal = "--kv-dtype: 'bf16' is not a KV cache dtype (f32, f16 or q8_0)\n";
    static const char *const cmds[][2] = {
        {"run -m " TINY " --ids 1 -n 1 --kv-dtype bf16", "kvlm: "},
        {"serve -m " TINY " --kv-dtype bf16", "kvlm: "},
        {"bench -m " TINY " --kv-dtype bf16", "kvlm: "},
        {"kv --preset gpt2-124m --kv-dtype bf16", "kvlm kv: "},
    };
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char *out = expect_exit(2, cmds[i][0]);
        char want[200];
        snprintf(want, sizeof want, "%s%s", cmds[i][1], refusal);
        if (strncmp(out, want, strlen(want))) fail_msg("kvlm %s printed:\n%s\nwant first:\n%s", cmds[i][0], out, want);
        free(out);
    }
    /* q8_0 is a KV dtype for both, and both refuse it for TINY's head dim
     * of 16, which is no whole number of its 32-value blocks ... */
    char *out = expect_exit(2, "run -m " TINY " --ids 1 -n 1 --kv-dtype q8_0");
    assert_non_null(strstr(out, "multiple of 32"));
    free(out);
    out = expect_exit(2, "kv -m " TINY " --kv-dtype q8_0");
    assert_non_null(strstr(out, "multiple of 32"));
    free(out);
    /* ... and size GPT-2 124M's q8_0 cache as the library does: 2 x 12 x 12 x 68 */
    json_t *j = expect_json("kv --preset gpt2-124m --kv-dtype q8_0 --json");
    json_t *m0 = json_array_get(json_object_get(j, "models"), 0);
    assert_int_equal(jint_at(m0, "bytes_per_token", NULL), 19584);
    json_decref(j);
}

/* tokenize / detokenize as docs/tokenizer.md shows them, and --json. */
static void test_readme_tokenize(void **state) {
    (void)state;
    expect_output("tokenize -m " GPT2 " \"Hello world\"", "15496 995\n");
    expect_output("tokenize -m " GPT2 " --json \"Hello world\"", "{\"ids\":[15496,995],\"n_tokens\":2}\n");
    expect_output("tokenize -m " GPT2 " --json --pieces \" Hello\"",
                  "{\"ids\":[18435],\"n_tokens\":1,\"pieces\":[\" Hello\"]}\n");
    expect_output("detokenize -m " GPT2 " 15496 995", "Hello world");
    expect_output("detokenize -m " GPT2 " --json 15496 995",
                  "{\"ids\":[15496,995],\"text\":\"Hello world\",\"bytes\":11,\"utf8\":true}\n");
    /* 187 is the lone byte 0xFF: U+FFFD in JSON, the exact count in bytes */
    expect_output("detokenize -m " GPT2 " --json 187",
                  "{\"ids\":[187],\"text\":\"\xef\xbf\xbd\",\"bytes\":1,\"utf8\":false}\n");
    /* after --, negative ids reach the id parser, which names the bad one */
    char *out = expect_exit(2, "detokenize -m " GPT2 " -- -1 5");
    if (!strstr(out, "'-1' is not a non-negative integer") || strstr(out, "unknown"))
        fail_msg("detokenize -- -1 5: %s", out);
    free(out);
    /* after --, a text that looks like a flag is text */
    expect_output("tokenize -m " GPT2 " -- --json", "438 17752\n");
}

/* KV bytes per token of the shipped Llama from its config.json. */
static json_int_t llama_bytes_per_number(int bytes) {
    json_error_t je;
    json_t *c = json_load_file(LLAMA "/config.json", 0, &je);
    if (!c) fail_msg("%s/config.json: %s", LLAMA, je.text);
    json_int_t layers = jint_at(c, "num_hidden_layers", NULL), kvh = jint_at(c, "num_key_value_heads", NULL);
    json_int_t hd = jint_at(c, "head_dim", NULL);
    json_decref(c);
    return 2 * layers * kvh * hd * bytes;
}

/* kvlm kv -m FILE.gguf reads the GGUF's configuration: the same bytes per
 * token as the Hugging Face directory, 2 x layers x KV heads x head dim x 4
 * in f32 (1,024 B for 8 layers, 2 KV heads of 8 dims). */
static void test_readme_kv_gguf(void **state) {
    (void)state;
    const json_int_t f32 = llama_bytes_per_number(4);
    assert_int_equal(f32, 1024);
    const char *models[] = {LLAMA_GGUF, LLAMA};
    for (int i = 0; i < 2; i++) {
        char args[512];
        snprintf(args, sizeof args, "kv -m %s --kv-dtype f32 --ctx 128 --json", models[i]);
        json_t *j = expect_json(args);
        json_t *m = json_array_get(json_object_get(j, "models"), 0);
        assert_int_equal(jint_at(m, "bytes_per_token", NULL), f32);
        assert_int_equal(jint_at(m, "layers", NULL), 8);
        assert_int_equal(jint_at(m, "kv_heads", NULL), 2);
        assert_int_equal(jint_at(m, "head_dim", NULL), 8);
        assert_int_equal(jint_at(json_array_get(json_object_get(m, "totals"), 0), "bytes", NULL), 128 * f32);
        json_decref(j);
    }
    /* the human table, as README.md writes the command (f16 by default) */
    char *out = expect_exit(0, "kv -m " LLAMA_GGUF);
    if (!strstr(out, "512 B")) fail_msg("kv -m %s: no '512 B' in:\n%s", LLAMA_GGUF, out);
    free(out);
}

/* The quick start's command (KV in f16 by default, the thread count with
 * its reason; --kv-dtype f32 keeps the f32 figures) and the shipped Llama
 * (directory and GGUF), with fewer tokens. */
static void test_readme_run(void **state) {
    (void)state;
    char why[160], threads[256];
    const int n_threads = kvlm_default_threads(why, sizeof why);
    snprintf(threads, sizeof threads, "threads / kernels    %d / %s (threads: %s)\n", n_threads,
             kvlm_isa_name(kvlm_isa_best()), why);
    const char *dflt[] = {"ROMEO:", "prompt tokens        3\n", "generated tokens     8\n", threads,
                          "KV dtype             f16, 16 tokens per block\n",
                          "KV bytes per token   3072 (2 x 6 layers x 4 KV heads x 32 head dim x 2 B)\n",
                          "KV live              30720 bytes for 10 tokens\n"};
    const char *f32[] = {"ROMEO:", "prompt tokens        3\n", "generated tokens     8\n",
                         "threads / kernels    1 / scalar (threads: --threads)\n",
                         "KV dtype             f32, 16 tokens per block\n",
                         "KV bytes per token   6144 (2 x 6 layers x 4 KV heads x 32 head dim x 4 B)\n",
                         "KV live              61440 bytes for 10 tokens\n"};
    const char *extra[2] = {"", " --kv-dtype f32 --threads 1 --isa scalar"};
    const char **lines[2] = {dflt, f32};
    for (int r = 0; r < 2; r++) {
        char args[512];
        snprintf(args, sizeof args, "run -m " GPT2 " -p \"ROMEO:\" -n 8 --temp 0.8 --top-k 40 --top-p 0.9 "
                 "--frequency-penalty 0.7 --penalty-window 6 --stats%s", extra[r]);
        char *out = expect_exit(0, args);
        for (size_t i = 0; i < sizeof dflt / sizeof dflt[0]; i++)
            if (!strstr(out, lines[r][i])) fail_msg("run --stats%s: no '%s' in:\n%s", extra[r], lines[r][i], out);
        free(out);
    }
    const char *models[] = {LLAMA, LLAMA_GGUF};
    for (int i = 0; i < 2; i++) {
        char args[512];
        snprintf(args, sizeof args, "-m %s -p \"ROMEO:\" -n 6 --temp 0 --ignore-eos", models[i]);
        json_t *j = run_json(args);
        assert_int_equal(stat_int(j, "prompt_tokens"), 3);
        assert_int_equal(stat_int(j, "kv_bytes_per_token"), llama_bytes_per_number(2));
        assert_int_equal(json_array_size(json_object_get(j, "ids")), 6);
        json_decref(j);
    }
}

/* sample-stats and gen-stats with -m, as README.md's table shows them. */
static void test_readme_stats(void **state) {
    (void)state;
    json_t *j = expect_json("sample-stats -m " GPT2 " -p \"ROMEO:\" --temps 0.2,0.7,1.0,1.5 --json");
    assert_int_equal(jint_at(j, "prompt_tokens", NULL), 3);
    assert_int_equal(jint_at(j, "vocab", NULL), 50257);
    assert_int_equal(json_array_size(json_object_get(j, "temperatures")), 4);
    json_decref(j);
    char *out = expect_exit(0, "sample-stats -m " GPT2 " -p \"ROMEO:\" --temps 0.2,0.7,1.0,1.5");
    if (!strstr(out, "next-token distribution after 3 prompt tokens (vocabulary 50257)")) fail_msg("%s", out);
    free(out);
    j = expect_json("gen-stats -m " GPT2 " -p \"ROMEO:\" -n 6 --seed 1 --json");
    assert_int_equal(jint_at(j, "seed", NULL), 1);
    assert_int_equal(json_array_size(json_object_get(j, "settings")), 7);
    for (size_t i = 0; i < 7; i++) assert_int_equal(jint_at(json_array_get(json_object_get(j, "settings"), i), "tokens", NULL), 6);
    json_decref(j);
}

/* bench -m on the shipped model: its defaults (120 + 48 tokens) exceed the
 * context window of 128, so both shrink in proportion: 120 x 128 / 168 =
 * 91 prompt tokens, 128 - 91 = 37 generated. */
static void test_readme_bench(void **state) {
    (void)state;
    json_t *j = expect_json("bench -m " GPT2 " --repeats 1 --bw-mib 16 --no-cache-test --json");
    assert_int_equal(jint_at(j, "pp", "tokens"), 91);
    assert_int_equal(jint_at(j, "tg", "tokens"), 37);
    assert_null(json_object_get(j, "cache"));
    json_decref(j);
    /* given sizes are kept; the other one shrinks */
    j = expect_json("bench -m " GPT2 " --pp 100 --repeats 1 --bw-mib 16 --no-cache-test --json");
    assert_int_equal(jint_at(j, "pp", "tokens"), 100);
    assert_int_equal(jint_at(j, "tg", "tokens"), 28);
    json_decref(j);
}

/* report -m MODEL -o DIR: the default prompt is `make report`'s. */
static void test_readme_report(void **state) {
    (void)state;
    char *tmp = th_tempdir(), args[1024];
    snprintf(args, sizeof args, "report -m " GPT2 " -o %s -n 4 --temps 1 --pp 8 --tg 4 --repeats 1 --bw-mib 16", tmp);
    char *out = expect_exit(0, args);
    free(out);
    char path[1100];
    snprintf(path, sizeof path, "%s/report.json", tmp);
    json_error_t je;
    json_t *r = json_load_file(path, 0, &je);
    if (!r) fail_msg("%s: %s", path, je.text);
    json_t *m = json_object_get(r, "model");
    assert_string_equal(json_string_value(json_object_get(m, "prompt_text")), "JULIET: O Romeo, Romeo! wherefore art thou");
    json_t *t = expect_json("tokenize -m " GPT2 " --json \"JULIET: O Romeo, Romeo! wherefore art thou\"");
    assert_true(json_equal(json_object_get(m, "prompt_ids"), json_object_get(t, "ids")));
    assert_int_equal(json_array_size(json_object_get(t, "ids")), 14);
    json_decref(t);
    json_decref(r);
    th_rmtree(tmp);
    free(tmp);
}

/* perplexity -m MODEL -f FILE on the start of Tiny Shakespeare. */
static void test_readme_perplexity(void **state) {
    (void)state;
    char *tmp = th_tempdir(), file[1024], args[1200];
    snprintf(file, sizeof file, "%s/text.txt", tmp);
    const char text[] = "First Citizen:\nBefore we proceed any further, hear me speak.\n";
    assert_int_equal(th_write_file(file, text, sizeof text - 1), 0);
    snprintf(args, sizeof args, "tokenize -m " GPT2 " --json -f %s", file);
    json_t *t = expect_json(args);
    json_int_t n = jint_at(t, "n_tokens", NULL);
    json_decref(t);
    snprintf(args, sizeof args, "perplexity -m " GPT2 " -f %s --isa scalar --json", file);
    json_t *j = expect_json(args);
    assert_int_equal(jint_at(j, "file_tokens", NULL), n);
    assert_int_equal(jint_at(j, "tokens", NULL), n - 1); /* one window: every token but the first */
    assert_true(json_number_value(json_object_get(j, "perplexity")) > 1);
    json_decref(j);
    th_rmtree(tmp);
    free(tmp);
}

/* kvlm --help names the model files and the synthetic presets, and the
 * presets are the loader's. */
static void test_main_help(void **state) {
    (void)state;
    char *out = expect_exit(0, "--help");
    const char *needles[] = {".gguf", ".safetensors", "llm.c .bin", "--synthetic NAME", CLI_SYNTHETIC_PRESETS};
    for (size_t i = 0; i < sizeof needles / sizeof needles[0]; i++)
        if (!strstr(out, needles[i])) fail_msg("kvlm --help: no '%s' in:\n%s", needles[i], out);
    free(out);
    out = expect_exit(1, "run --synthetic no-such-preset --ids 1");
    if (!strstr(out, "(" CLI_SYNTHETIC_PRESETS ")")) fail_msg("presets differ from the loader's: %s", out);
    free(out);
}

/* ------------------------------------------------------ option layer */

#define MAX_FLAGS 64

typedef struct flag_help {
    char key[48];    /* the flag's spellings and value name */
    char text[512];  /* its help line(s) */
} flag_help;

/* The shared sections' flags of `kvlm CMD --help`, one block per flag. */
static int shared_help(const char *cmd, flag_help *out) {
    char args[128];
    snprintf(args, sizeof args, "%s --help", cmd);
    char *help = expect_exit(0, args);
    const char *shared_sections[] = {"model:", "engine:", "KV cache:", "input:", "general:"};
    int n = 0, in_shared = 0;
    for (char *line = strtok(help, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] != ' ') {
            in_shared = 0;
            for (size_t k = 0; k < 5; k++) in_shared |= !strcmp(line, shared_sections[k]);
            if (!strncmp(line, "sampling", 8)) in_shared = 1;
            continue;
        }
        if (!in_shared) continue;
        if (line[2] == '-') { /* a flag: "  NAMES METAVAR   help", or alone when long */
            if (n == MAX_FLAGS) fail_msg("%s --help: too many flags", cmd);
            const char *gap = strstr(line + 2, "  ");
            int k = gap ? (int)(gap - (line + 2)) : (int)strlen(line + 2);
            snprintf(out[n].key, sizeof out[n].key, "%.*s", k, line + 2);
            snprintf(out[n].text, sizeof out[n].text, "%s\n", line);
            n++;
        } else if (n) { /* a continuation line */
            strncat(out[n - 1].text, line, sizeof out[n - 1].text - strlen(out[n - 1].text) - 2);
            strcat(out[n - 1].text, "\n");
        }
    }
    free(help);
    return n;
}

/* Every command that loads a model lists the model, engine and KV flags;
 * a shared flag has the very same help text in every command. */
static void test_help_shared_flags(void **state) {
    (void)state;
    const char *cmds[] = {"run",   "bench", "bench-kv", "perplexity", "sample-stats", "gen-stats",
                          "report", "serve", "kv",       "loadgen",    "tokenize",     "detokenize"};
    const size_t n_model_cmds = 8;
    const char *must[] = {"-m, --model PATH", "--synthetic NAME", "--dtype T", "--threads N", "--isa NAME",
                          "--no-repack", "--kv-dtype T", "--block-size N", "-h, --help"};
    static flag_help seen[MAX_FLAGS], got[MAX_FLAGS];
    int n_seen = 0;
    for (size_t c = 0; c < sizeof cmds / sizeof cmds[0]; c++) {
        int n = shared_help(cmds[c], got);
        for (size_t k = 0; c < n_model_cmds && k < sizeof must / sizeof must[0]; k++) {
            int found = 0;
            for (int i = 0; i < n; i++) found |= !strcmp(got[i].key, must[k]);
            if (!found) fail_msg("kvlm %s --help: no %s", cmds[c], must[k]);
        }
        for (int i = 0; i < n; i++) {
            int j = 0;
            while (j < n_seen && strcmp(seen[j].key, got[i].key)) j++;
            if (j == n_seen) seen[n_seen++] = got[i];
            else if (strcmp(seen[j].text, got[i].text))
                fail_msg("kvlm %s --help shows %s differently:\n%s\nvs\n%s", cmds[c], got[i].key, got[i].text,
                         seen[j].text);
        }
    }
    assert_true(n_seen >= 8);
}

/* --isa everywhere a model is loaded; the cache test's switches; --flag=value. */
static void test_option_rules(void **state) {
    (void)state;
    const char *bench = "bench --synthetic gpt2-tiny --pp 8 --tg 4 --repeats 1 --bw-mib 16 --isa scalar --json";
    const struct {
        const char *flags;
        int cache;
    } cache_cases[] = {{"", 1}, {"--no-cache-test", 0}, {"--skip-cache-test", 0}, {"--no-cache-test --cache-test", 1}};
    for (size_t i = 0; i < sizeof cache_cases / sizeof cache_cases[0]; i++) {
        char args[512];
        snprintf(args, sizeof args, "%s %s", bench, cache_cases[i].flags);
        json_t *j = expect_json(args);
        assert_string_equal(json_string_value(json_object_get(j, "isa")), "scalar");
        if ((json_object_get(j, "cache") != NULL) != cache_cases[i].cache)
            fail_msg("kvlm %s: cache test %s", args, cache_cases[i].cache ? "missing" : "present");
        json_decref(j);
    }
    json_t *a = run_json("-m " TINY " --ids '" PROMPT8 "' -n 4 --temp 0 --isa scalar --block-size 4");
    json_t *b = run_json("-m " TINY " --ids='" PROMPT8 "' -n 4 --temp=0 --isa=scalar --block-size=4");
    assert_true(json_equal(json_object_get(a, "ids"), json_object_get(b, "ids")));
    assert_int_equal(stat_int(a, "kv_block_size"), 4);
    json_decref(a);
    json_decref(b);
}

static void test_option_errors(void **state) {
    (void)state;
    const th_cli_case cases[] = {
        {"bench-kv -m " TINY " -p hello", 2, "-p is not used by this command"},
        {"bench-kv -m " TINY " --tokenizer x", 2, "--tokenizer is not used"},
        {"kv --threads 2", 2, "--threads is not used"},
        {"perplexity -m " GPT2 " -f x --temp 1", 2, "--temp is not used"},
        {"gen-stats -m " TINY " --ids 1 --top-p 0.5", 2, "--top-p is not used"},
        {"loadgen -m x", 2, "-m is not used"},
        {"run -m " TINY " --ids 1 --stats=1", 2, "--stats takes no value"},
        {"run -m " TINY " --ids 1 extra", 2, "unexpected argument 'extra'"},
        {"run -m " TINY " --synthetic gpt2-tiny --ids 1", 2, "give exactly one"},
        {"run -m " TINY " --ids 1 --threads", 2, "--threads needs a value"},
        {"run -m " TINY " --ids 1 --block-size 0", 2, "--block-size: 0 is outside [1, 4096]"},
        {"run -m " TINY " --ids 1 --kv-blocks 8", 2, "--kv-blocks is not used"},
        {"serve -m " TINY " --kv-blocks 8 --kv-mib 1", 2, "--kv-blocks and --kv-mib"},
        {"run -m " GPT2 " -f /nonexistent/prompt.txt", 1, "cannot read /nonexistent/prompt.txt"},
        {"run -m " TINY " --ids 1 -p x", 2, "exactly one of -p TEXT, --ids LIST or -f FILE"},
        {"bench -m " GPT2 " --pp 127", 2, "--pp 127 leaves 1 of the context window of 128 for --tg"},
        {"tokenize -m " GPT2, 2, "usage: kvlm tokenize"},
    };
    th_expect_cli(cases, sizeof cases / sizeof cases[0]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_bytes_gpt2_124m),
        cmocka_unit_test(test_kv_dtype_one_rule),
        cmocka_unit_test(test_json_and_no_cache),
        cmocka_unit_test(test_repack_same_tokens),
        cmocka_unit_test(test_seeded_sampling),
        cmocka_unit_test(test_run_llama),
        cmocka_unit_test(test_run_bos_from_files),
        cmocka_unit_test(test_bench_json),
        cmocka_unit_test(test_bench_float_batch),
        cmocka_unit_test(test_bench_batch),
        cmocka_unit_test(test_measurement_commands),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_readme_tokenize),
        cmocka_unit_test(test_readme_kv_gguf),
        cmocka_unit_test(test_readme_run),
        cmocka_unit_test(test_readme_stats),
        cmocka_unit_test(test_readme_bench),
        cmocka_unit_test(test_readme_report),
        cmocka_unit_test(test_readme_perplexity),
        cmocka_unit_test(test_main_help),
        cmocka_unit_test(test_help_shared_flags),
        cmocka_unit_test(test_option_rules),
        cmocka_unit_test(test_option_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
