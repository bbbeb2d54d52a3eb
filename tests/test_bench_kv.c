/*
 * `kvlm bench-kv` end to end: the --json document on the reference fixture
 * and on synthetic gpt2-tiny shapes with small settings. Every field exists;
 * utilisations are fractions; paged utilisation and peak residency are at
 * least the contiguous ones; both policies generate exactly the drawn
 * output tokens; contiguous reservation never holds more requests than the
 * budget has room for and never preempts; the prefix section reuses exactly
 * the whole blocks of the shared system prompt; kvlm_measure_attention
 * gives both layouts the same output and names bad options; on a
 * Gemma-3-shaped model the windows section serves the workload with window
 * layers giving blocks back and with every layer whole. Bad flags exit
 * 2 with a message naming the flag. No timing is asserted beyond being
 * positive.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kvlm_measure.h"

#define TINY "tests/fixtures/gpt2/hf_f32"

static json_t *bench_kv_json(const char *args) {
    char *out = NULL;
    int st = th_run_kvlm(&out, "bench-kv %s --json 2>/dev/null", args);
    if (st != 0) fail_msg("kvlm bench-kv %s: exit %d: %s", args, st, out);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    if (!j) fail_msg("kvlm bench-kv %s: output is not JSON: %s\n%s", args, je.text, out);
    free(out);
    return j;
}

static double num(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    if (!json_is_number(v)) fail_msg("field '%s' is missing or not a number", key);
    return json_number_value(v);
}

static const json_t *obj(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    if (!json_is_object(v)) fail_msg("section '%s' is missing", key);
    return v;
}

static void check_fraction(const json_t *o, const char *key) {
    double u = num(o, key);
    if (!(u > 0 && u <= 1)) fail_msg("%s = %g is not a fraction in (0, 1]", key, u);
}

/* The fields a policy section holds, and their ranges. */
static void check_policy(const json_t *p) {
    const char *keys[] = {"utilisation_mean", "utilisation_peak", "utilisation_aggregate", "resident_mean",
                          "resident_peak", "tokens_per_s", "total_s", "generated_tokens", "steps", "preemptions",
                          "peak_bytes_live", "peak_bytes_reserved"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) (void)num(p, keys[i]);
    check_fraction(p, "utilisation_mean");
    check_fraction(p, "utilisation_peak");
    check_fraction(p, "utilisation_aggregate");
    assert_true(num(p, "resident_mean") > 0 && num(p, "resident_mean") <= num(p, "resident_peak"));
    assert_true(num(p, "tokens_per_s") > 0 && num(p, "total_s") > 0);
    assert_true(num(p, "peak_bytes_live") <= num(p, "peak_bytes_reserved"));
    assert_true(json_is_string(json_object_get(p, "policy")));
}

static void check_serve(const json_t *d) {
    const json_t *w = obj(d, "workload"), *c = obj(d, "contiguous"), *p = obj(d, "paged");
    check_policy(c);
    check_policy(p);
    /* same workload both ways: every request gets exactly its drawn output */
    const json_t *out = obj(w, "output"), *prompt = obj(w, "prompt");
    double want = num(out, "mean") * num(w, "requests");
    assert_int_equal((long)num(c, "generated_tokens"), lround(want));
    assert_int_equal((long)num(p, "generated_tokens"), lround(want));
    const char *lk[] = {"median", "sigma", "mean", "p50", "p99", "min", "max"};
    for (size_t i = 0; i < sizeof lk / sizeof lk[0]; i++) {
        (void)num(out, lk[i]);
        (void)num(prompt, lk[i]);
    }
    assert_true(num(prompt, "p50") <= num(prompt, "p99") && num(prompt, "p99") <= num(prompt, "max"));
    assert_true(num(prompt, "max") < num(d, "n_ctx"));
    /* paging holds at least as much of its memory in tokens and as many requests */
    assert_true(num(p, "utilisation_mean") >= num(c, "utilisation_mean"));
    assert_true(num(p, "resident_peak") >= num(c, "resident_peak"));
    /* reservation: never more requests than whole reservations fit, never a preemption */
    assert_true(num(c, "resident_peak") <= num(w, "contiguous_capacity"));
    assert_int_equal((long)num(c, "preemptions"), 0);
    const json_t *r = obj(d, "ratio");
    assert_true(num(r, "resident_peak") >= 1.0);
    assert_true(num(r, "tokens_per_s") > 0);
}

static void check_attention(const json_t *d, int want_len) {
    const json_t *a = obj(d, "attention"), *rows = json_object_get(a, "lengths");
    assert_true(json_array_size(rows) >= 1);
    int found = 0;
    for (size_t i = 0; i < json_array_size(rows); i++) {
        const json_t *row = json_array_get(rows, i);
        const char *keys[] = {"contiguous_ns_per_token_head", "paged_ns_per_token_head", "ratio",
                              "hot_contiguous_ns_per_token_head", "hot_paged_ns_per_token_head", "hot_ratio"};
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) assert_true(num(row, keys[k]) > 0);
        assert_true(num(row, "max_abs_diff") <= 1e-5);
        found |= (int)num(row, "ctx_len") == want_len;
    }
    assert_true(found);
    assert_true(num(a, "worst_ratio") > 0);
}

/* K requests, the shared prompt's whole blocks reused by all but the first. */
static void check_prefix(const json_t *d, int K, int block_size) {
    const json_t *x = obj(d, "prefix");
    const int P = (int)num(x, "prefix_tokens"), S = (int)num(x, "suffix_tokens");
    assert_int_equal((int)num(x, "requests"), K);
    assert_int_equal((int)num(x, "queries"), K);
    assert_int_equal((int)num(x, "hits"), K - 1);
    assert_true(num(x, "hit_tokens") > 0);
    assert_int_equal((long)num(x, "hit_tokens"), (long)(K - 1) * (P / block_size) * block_size);
    assert_int_equal((long)num(x, "prompt_tokens"), (long)K * (P + S));
    double rate = num(x, "hit_rate");
    assert_true(rate > 0 && rate < 1);
    assert_true(fabs(rate - num(x, "hit_tokens") / num(x, "prompt_tokens")) < 1e-5); /* 6 digits printed */
    assert_true(num(x, "ttft_cold_ms") > 0 && num(x, "ttft_hit_ms") > 0 && num(x, "speedup") > 0);
}

static void test_fixture(void **state) {
    (void)state;
    json_t *d = bench_kv_json("-m " TINY " --block-size 4 -n 24 --attn-rounds 2 --prefix-requests 3");
    check_serve(d);
    check_attention(d, 32); /* the default lengths are clipped to n_ctx 32 */
    check_prefix(d, 3, 4);
    assert_int_equal((int)num(obj(d, "workload"), "kv_blocks"), 4 * 8); /* 4 reservations of 32 tokens */
    assert_int_equal((int)num(obj(d, "workload"), "contiguous_capacity"), 4);
    const json_t *ref = obj(d, "reference");
    assert_true(fabs(num(ref, "utilisation_paged") - 0.963) < 1e-9);
    json_decref(d);
}

static void test_synthetic_tiny(void **state) {
    (void)state;
    json_t *d = bench_kv_json("--synthetic gpt2-tiny -n 16 --kv-blocks 6 --attn-lengths 8,32 --attn-rounds 2 "
                              "--prefix-requests 4 --suffix-tokens 3 --prefix-output 2 --threads 1");
    check_serve(d);
    check_attention(d, 8);
    check_prefix(d, 4, 16);
    assert_int_equal((int)num(obj(d, "prefix"), "prefix_tokens"), 32 - 3 - 2);
    assert_int_equal((int)num(obj(d, "workload"), "contiguous_capacity"), 3);
    json_decref(d);
}

/* --sections keeps only what was asked. */
static void test_sections(void **state) {
    (void)state;
    json_t *d = bench_kv_json("-m " TINY " --sections prefix --prefix-requests 2");
    assert_null(json_object_get(d, "paged"));
    assert_null(json_object_get(d, "attention"));
    check_prefix(d, 2, 16);
    json_decref(d);
}

/* The windows section on a Gemma-3-shaped model: the same drawn workload
 * paged with window layers giving blocks back and with every layer whole;
 * both generate exactly the drawn tokens, the windowed run holds at least
 * as many requests and preempts no more; on a model without windows the
 * section is skipped. */
static void test_windows(void **state) {
    (void)state;
    json_t *d = bench_kv_json("--synthetic gemma3-tiny --block-size 4 -n 24 --sections serve,windows --threads 1");
    check_serve(d);
    const json_t *w = obj(d, "windows"), *wl = obj(d, "workload");
    const json_t *whole = obj(w, "whole"), *win = obj(w, "windowed");
    check_policy(whole);
    check_policy(win);
    const long want = lround(num(obj(wl, "output"), "mean") * num(wl, "requests"));
    assert_int_equal((long)num(whole, "generated_tokens"), want);
    assert_int_equal((long)num(win, "generated_tokens"), want);
    assert_true(num(win, "resident_peak") >= num(whole, "resident_peak"));
    assert_true(num(win, "preemptions") <= num(whole, "preemptions"));
    /* f16: 2 global layers and 10 window layers of one KV head of 32 */
    assert_int_equal((long)num(w, "bytes_per_token_global"), 2 * 2 * 32 * 2);
    assert_int_equal((long)num(w, "bytes_per_token_window"), 10 * 2 * 32 * 2);
    /* 6 layer slices: 4 reservations of 32 blocks in each; 512 tokens */
    assert_int_equal((long)num(wl, "kv_blocks"), 4 * 32 * 6);
    assert_int_equal((long)num(wl, "kv_tokens"), 512);
    assert_int_equal((long)num(wl, "contiguous_capacity"), 4);
    json_decref(d);
    d = bench_kv_json("-m " TINY " --sections windows");
    assert_null(json_object_get(d, "windows"));
    json_decref(d);
}

/* The library call behind the attention section: both layouts give the
 * same output, times are positive, bad options are named. */
static void test_measure_attention(void **state) {
    (void)state;
    kvlm_error err;
    kvlm_model *m = kvlm_model_load(TINY, NULL, &err);
    assert_non_null(m);
    for (int hot = 0; hot < 2; hot++) {
        kvlm_attn_bench_options o = kvlm_attn_bench_default_params();
        o.ctx_len = 30;
        o.block_size = 4;
        o.scatter = 1;
        o.rounds = 3;
        o.hot = hot;
        o.kv_dtype = KVLM_F16;
        o.seed = 7;
        kvlm_attn_bench_result r;
        if (kvlm_measure_attention(m, &o, &r, &err)) fail_msg("%s", err.msg);
        assert_true(r.contiguous_s > 0 && r.paged_s > 0 && r.paired_ratio > 0);
        assert_true(r.contiguous_s <= r.contiguous_median_s && r.paged_s <= r.paged_median_s);
        assert_true(r.max_abs_diff <= 1e-6);
        assert_true(r.passes_per_round >= (hot ? 1 : 2 * 4)); /* 2 layers x 4 heads per sweep */
    }
    const struct {
        kvlm_attn_bench_options o;
        const char *needle;
    } bad[] = {
        {{.ctx_len = 33, .rounds = 1, .kv_dtype = KVLM_F32}, "ctx_len"},
        {{.ctx_len = -1, .rounds = 1, .kv_dtype = KVLM_F32}, "ctx_len"},
        {{.ctx_len = 8, .block_size = -1, .rounds = 1, .kv_dtype = KVLM_F32}, "block_size"},
        {{.ctx_len = 8, .rounds = 1001, .kv_dtype = KVLM_F32}, "rounds"},
        {{.ctx_len = 8, .rounds = 1, .kv_dtype = KVLM_BF16}, "kv dtype"},
    };
    /* ctx_len 0 is the model's whole context window (32 tokens here; 33 is refused above) */
    kvlm_attn_bench_options whole = kvlm_attn_bench_default_params();
    whole.rounds = 1;
    kvlm_attn_bench_result wr;
    if (kvlm_measure_attention(m, &whole, &wr, &err)) fail_msg("%s", err.msg);
    assert_true(wr.max_abs_diff <= 1e-6);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kvlm_attn_bench_result r;
        assert_int_equal(kvlm_measure_attention(m, &bad[i].o, &r, &err), KVLM_ERR_ARG);
        if (!strstr(err.msg, bad[i].needle)) fail_msg("case %zu: '%s' does not name %s", i, err.msg, bad[i].needle);
    }
    kvlm_model_free(m);
}

static void test_bad_input(void **state) {
    (void)state;
    const th_cli_case cases[] = {
        {"bench-kv", 2, "no model"},
        {"bench-kv -m " TINY " --requests 0", 2, "--requests"},
        {"bench-kv -m " TINY " -n many", 2, "-n"},
        {"bench-kv -m " TINY " --kv-blocks 1", 2, "--kv-blocks"},
        {"bench-kv -m " TINY " --kv-mib 0.001", 2, "--kv-mib"},
        {"bench-kv -m " TINY " --kv-blocks 8 --kv-mib 1", 2, "--kv-blocks and --kv-mib"},
        {"bench-kv -m " TINY " --prompt-sigma -1", 2, "--prompt-sigma"},
        {"bench-kv -m " TINY " --output-median 0", 2, "--output-median"},
        {"bench-kv -m " TINY " --batch-tokens 0", 2, "--batch-tokens"},
        {"bench-kv -m " TINY " --attn-lengths 0", 2, "--attn-lengths"},
        {"bench-kv -m " TINY " --attn-lengths 16,x", 2, "--attn-lengths"},
        {"bench-kv -m " TINY " --prefix-requests 1", 2, "--prefix-requests"},
        {"bench-kv -m " TINY " --suffix-tokens 40", 2, "--suffix-tokens"},
        {"bench-kv -m " TINY " --sections serve,bogus", 2, "--sections"},
        {"bench-kv -m " TINY " --block-size 0", 2, "--block-size"},
        {"bench-kv -m " TINY " --kv-dtype q4", 2, "--kv-dtype"},
        {"bench-kv -m " TINY " -p hello", 2, "not used"},
        {"bench-kv -m " TINY " --frobnicate", 2, "unknown argument"},
        {"bench-kv -m " TINY " --seed", 2, "needs a value"},
        {"bench-kv -m /nonexistent/model", 1, "/nonexistent/model"},
    };
    th_expect_cli(cases, sizeof cases / sizeof cases[0]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixture),
        cmocka_unit_test(test_synthetic_tiny),
        cmocka_unit_test(test_sections),
        cmocka_unit_test(test_windows),
        cmocka_unit_test(test_measure_attention),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
