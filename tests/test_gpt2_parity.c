/*
 * GPT-2 forward pass against the PyTorch reference (tests/fixtures/gpt2):
 * every checkpoint variant through the real loaders, every kernel set the
 * CPU supports, prefill logits and 8 cached decode steps, f32 and f16 KV;
 * cached decode against recomputation without a cache (truncate to 0 and
 * step the whole context, th_recompute_step).
 *
 * Tolerances: the reference is float64 from the weights exactly as stored,
 * so the only difference is kvlm's f32 arithmetic: 1e-4 absolute for every
 * weight dtype with an f32 cache. An f16 cache rounds K and V to 11
 * significant bits; its bound is 5e-2 (measured worst case 1.3e-2).
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kernels/kernels.h"
#include "kvlm.h"

#define FIX "tests/fixtures/gpt2/"
#define NPOS 8
#define TOL_F32_KV 1e-4
#define TOL_F16_KV 5e-2

typedef struct expected {
    int32_t prompt[NPOS], decode[NPOS];
    int vocab;
    float *prefill, *dec; /* NPOS x vocab each */
} expected;

static void load_ids(json_t *a, int32_t *out) {
    assert_int_equal(json_array_size(a), NPOS);
    for (int i = 0; i < NPOS; i++) out[i] = (int32_t)json_integer_value(json_array_get(a, (size_t)i));
}

static float *load_rows(json_t *a, int *vocab) {
    assert_int_equal(json_array_size(a), NPOS);
    *vocab = (int)json_array_size(json_array_get(a, 0));
    float *out = malloc((size_t)NPOS * *vocab * sizeof(float));
    for (int i = 0; i < NPOS; i++)
        for (int j = 0; j < *vocab; j++)
            out[i * *vocab + j] = (float)json_number_value(json_array_get(json_array_get(a, (size_t)i), (size_t)j));
    return out;
}

static expected load_expected(const char *variant) {
    char path[256];
    snprintf(path, sizeof path, FIX "%s.expected.json", variant);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) fail_msg("%s: %s", path, je.text);
    expected ex;
    load_ids(json_object_get(root, "prompt"), ex.prompt);
    load_ids(json_object_get(root, "decode"), ex.decode);
    ex.prefill = load_rows(json_object_get(root, "prefill_logits"), &ex.vocab);
    ex.dec = load_rows(json_object_get(root, "decode_logits"), &ex.vocab);
    json_decref(root);
    return ex;
}

static double max_abs_diff(const float *a, const float *b, int n) {
    double m = 0;
    for (int i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

/* Runs prefill + 8 decode steps, cached or (no_cache) each recomputing the
 * whole context; returns the worst logit difference. */
static double run_variant(kvlm_model *m, const expected *ex, kvlm_isa isa, kvlm_dtype kvt, int no_cache) {
    kvlm_error err;
    kvlm_kv_options ko = kvlm_kv_default_params();
    ko.dtype = kvt;
    kvlm_kv *kv = kvlm_kv_create(m, &ko, &err);
    assert_non_null(kv);
    kvlm_engine_options eo = kvlm_engine_default_params();
    eo.threads = 2;
    eo.isa = isa;
    kvlm_engine *e = kvlm_engine_create(m, kv, &eo, &err);
    assert_non_null(e);
    int seq = kvlm_kv_seq_new(kv, &err);
    assert_true(seq >= 0);
    const int V = ex->vocab;
    float *logits = malloc((size_t)NPOS * V * sizeof(float));
    kvlm_batch_item it = {.seq = seq, .tokens = ex->prompt, .n_tokens = NPOS, .logits_all = 1};
    assert_int_equal(kvlm_engine_step(e, &it, 1, logits, &err), 0);
    double worst = max_abs_diff(logits, ex->prefill, NPOS * V);
    int32_t ctx[2 * NPOS];
    memcpy(ctx, ex->prompt, sizeof ex->prompt);
    memcpy(ctx + NPOS, ex->decode, sizeof ex->decode);
    for (int j = 0; j < NPOS; j++) {
        it = (kvlm_batch_item){.seq = seq, .tokens = &ex->decode[j], .n_tokens = 1};
        if (no_cache) assert_int_equal(th_recompute_step(e, kv, seq, ctx, NPOS + j + 1, logits, &err), 0);
        else assert_int_equal(kvlm_engine_step(e, &it, 1, logits, &err), 0);
        worst = fmax(worst, max_abs_diff(logits, ex->dec + (size_t)j * V, V));
    }
    assert_int_equal(kvlm_kv_seq_len(kv, seq, NULL), 2 * NPOS);
    free(logits);
    kvlm_engine_free(e);
    kvlm_kv_free(kv);
    return worst;
}

static const char *variants[][2] = {
    {"hf_f32", FIX "hf_f32"},
    {"hf_f16", FIX "hf_f16"},
    {"hf_bf16_sharded", FIX "hf_bf16_sharded"},
    {"llmc_f32", FIX "llmc_f32.bin"},
    {"llmc_bf16", FIX "llmc_bf16.bin"},
    {"hf_f32", FIX "hf_f32/model.safetensors"},
    {"hf_bf16_sharded", FIX "hf_bf16_sharded/model.safetensors.index.json"},
};

static void test_all_variants_all_isas(void **state) {
    (void)state;
    const kvlm_isa isas[] = {KVLM_ISA_SCALAR, KVLM_ISA_AVX2, KVLM_ISA_AVX512, KVLM_ISA_NEON};
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        kvlm_error err;
        kvlm_model *m = kvlm_model_load(variants[v][1], NULL, &err);
        if (!m) fail_msg("%s: %s", variants[v][1], err.msg);
        expected ex = load_expected(variants[v][0]);
        assert_int_equal(kvlm_model_config(m)->vocab_size, ex.vocab);
        for (size_t i = 0; i < sizeof isas / sizeof *isas; i++) {
            if (!kern_cpu_supports(isas[i])) continue;
            double d32 = run_variant(m, &ex, isas[i], KVLM_F32, 0);
            double d16 = run_variant(m, &ex, isas[i], KVLM_F16, 0);
            double dnc = run_variant(m, &ex, isas[i], KVLM_F32, 1);
            printf("  %-48s %-6s max|diff| f32 kv %.2e  f16 kv %.2e  no-cache %.2e\n", variants[v][1],
                   kvlm_isa_name(isas[i]), d32, d16, dnc);
            assert_true(d32 < TOL_F32_KV);
            assert_true(d16 < TOL_F16_KV);
            assert_true(dnc < TOL_F32_KV);
        }
        free(ex.prefill);
        free(ex.dec);
        kvlm_model_free(m);
    }
}

/* Cached decode and recomputation without a cache (the sequence truncated
 * to 0 and its whole context stepped again) produce the same logits. */
static void test_cache_equals_recompute(void **state) {
    (void)state;
    kvlm_error err;
    kvlm_model *m = kvlm_model_load(FIX "hf_f32", NULL, &err);
    assert_non_null(m);
    expected ex = load_expected("hf_f32");
    const int V = ex.vocab;
    kvlm_engine *e[2];
    kvlm_kv *kv[2];
    int seq[2];
    for (int k = 0; k < 2; k++) {
        kv[k] = kvlm_kv_create(m, &(kvlm_kv_options){.dtype = KVLM_F32}, &err);
        e[k] = kvlm_engine_create(m, kv[k], &(kvlm_engine_options){.threads = 2}, &err);
        seq[k] = kvlm_kv_seq_new(kv[k], &err);
    }
    float *a = malloc((size_t)V * 4), *b = malloc((size_t)V * 4);
    int32_t ctx[32];
    int n_ctx = 0;
    for (int step = 0; step < 24; step++) {
        const int32_t *tok = step == 0 ? ex.prompt : &ex.decode[(step - 1) % NPOS];
        int n = step == 0 ? NPOS : 1;
        memcpy(ctx + n_ctx, tok, (size_t)n * sizeof(int32_t));
        n_ctx += n;
        kvlm_batch_item ia = {seq[0], tok, n, 0};
        assert_int_equal(kvlm_engine_step(e[0], &ia, 1, a, &err), 0);
        assert_int_equal(th_recompute_step(e[1], kv[1], seq[1], ctx, n_ctx, b, &err), 0);
        assert_int_equal(kvlm_kv_seq_len(kv[1], seq[1], NULL), n_ctx);
        assert_true(max_abs_diff(a, b, V) < 1e-4);
    }
    /* 8 + 23 = 31 tokens; two more would pass the 32-token window. */
    kvlm_batch_item over = {seq[0], ex.prompt, 2, 0};
    assert_int_equal(kvlm_engine_step(e[0], &over, 1, a, &err), KVLM_ERR_ARG);
    assert_non_null(strstr(err.msg, "context window"));
    assert_int_equal(kvlm_kv_seq_len(kv[0], seq[0], NULL), 31);
    for (int k = 0; k < 2; k++) {
        kvlm_engine_free(e[k]);
        kvlm_kv_free(kv[k]);
    }
    free(a);
    free(b);
    free(ex.prefill);
    free(ex.dec);
    kvlm_model_free(m);
}

/* Two sequences of different lengths in one step equal two separate runs. */
static void test_batch_of_two(void **state) {
    (void)state;
    kvlm_error err;
    kvlm_model *m = kvlm_model_load(FIX "llmc_f32.bin", NULL, &err);
    assert_non_null(m);
    expected ex = load_expected("llmc_f32");
    const int V = ex.vocab;
    kvlm_kv *kv = kvlm_kv_create(m, &(kvlm_kv_options){.dtype = KVLM_F32, .max_seqs = 2}, &err);
    kvlm_engine *e = kvlm_engine_create(m, kv, &(kvlm_engine_options){.threads = 2}, &err);
    int s0 = kvlm_kv_seq_new(kv, &err), s1 = kvlm_kv_seq_new(kv, &err);
    float *lg = malloc((size_t)(NPOS + 1) * V * 4);
    kvlm_batch_item items[2] = {{s0, ex.prompt, NPOS, 1}, {s1, ex.prompt, 3, 0}};
    assert_int_equal(kvlm_engine_step(e, items, 2, lg, &err), 0);
    assert_true(max_abs_diff(lg, ex.prefill, NPOS * V) < TOL_F32_KV);
    assert_true(max_abs_diff(lg + (size_t)NPOS * V, ex.prefill + 2 * V, V) < TOL_F32_KV);
    kvlm_batch_item dup[2] = {{s0, ex.decode, 1, 0}, {s0, ex.decode, 1, 0}};
    assert_int_equal(kvlm_engine_step(e, dup, 2, lg, &err), KVLM_ERR_ARG);
    assert_int_equal(kvlm_kv_seq_len(kv, s0, NULL), NPOS);
    free(lg);
    free(ex.prefill);
    free(ex.dec);
    kvlm_engine_free(e);
    kvlm_kv_free(kv);
    kvlm_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_variants_all_isas),
        cmocka_unit_test(test_cache_equals_recompute),
        cmocka_unit_test(test_batch_of_two),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
