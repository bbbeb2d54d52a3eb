/*
 * Llama-family forward pass (RMSNorm, rotary embeddings, SwiGLU, grouped
 * query attention, q/k/v biases, tied and untied heads, llama3 rope
 * scaling, Qwen3's q/k norms, Phi-3's fused matrices, sliding windows)
 * against the PyTorch reference fixtures: every Hugging Face variant in
 * tests/fixtures/llama and every GGUF file of tests/fixtures/llama_gguf
 * (F32, F16, BF16, Q8_0, Q4_0, qwen3, phi3, a windowed llama, a GPT-2), for
 * prefill logits and 8 cached decode steps on every kernel set; KV bytes
 * per token of grouped-query and multi-query models against the formula
 * and their multi-head twin.
 *
 * Tolerances: the references are float64 from the weights as stored
 * (dequantised for Q8_0/Q4_0), so only kvlm's f32 arithmetic differs:
 * 1e-4 absolute with an f32 cache, 5e-2 with an f16 cache.
 */
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kernels/kernels.h"
#include "kvlm.h"

#define FIX "tests/fixtures/llama/"

/* One model against one fixture on every kernel set, f32 and f16 caches. */
static void check_model(const char *path, const char *expected_path, const char *label) {
    th_expected ex;
    if (th_expected_load(expected_path, &ex)) fail_msg("%s: cannot read", expected_path);
    kvlm_error err;
    kvlm_model *m = kvlm_model_load(path, NULL, &err);
    if (!m) fail_msg("%s: %s", path, err.msg);
    const kvlm_isa isas[] = {KVLM_ISA_SCALAR, KVLM_ISA_AVX2, KVLM_ISA_AVX512, KVLM_ISA_NEON};
    for (size_t i = 0; i < sizeof isas / sizeof *isas; i++) {
        if (!kern_cpu_supports(isas[i])) continue;
        double d32 = th_parity_run(m, &ex, isas[i], KVLM_F32, 0), d16 = th_parity_run(m, &ex, isas[i], KVLM_F16, 0);
        printf("  %-22s %-6s max|diff| f32 kv %.2e  f16 kv %.2e\n", label, kvlm_isa_name(isas[i]), d32, d16);
        if (d32 >= 1e-4 || d16 >= 5e-2) fail_msg("%s %s: %g / %g", label, kvlm_isa_name(isas[i]), d32, d16);
    }
    th_expected_free(&ex);
    kvlm_model_free(m);
}

static void test_hf_variants(void **state) {
    (void)state;
    DIR *d = opendir(FIX);
    if (!d) fail_msg("%s is missing", FIX);
    struct dirent *de;
    int checked = 0;
    while ((de = readdir(d))) {
        const char *suffix = ".expected.json";
        size_t n = strlen(de->d_name), k = strlen(suffix);
        if (n <= k || strcmp(de->d_name + n - k, suffix)) continue;
        char variant[256], dir[512], path[512];
        snprintf(variant, sizeof variant, "%.*s", (int)(n - k), de->d_name);
        snprintf(dir, sizeof dir, FIX "%s", variant);
        snprintf(path, sizeof path, FIX "%s", de->d_name);
        check_model(dir, path, variant);
        checked++;
    }
    closedir(d);
    assert_true(checked >= 10);
}

static void test_gguf_files(void **state) {
    (void)state;
    json_error_t je;
    json_t *man = json_load_file("tests/fixtures/llama_gguf/manifest.json", 0, &je);
    if (!man) fail_msg("manifest: %s", je.text);
    size_t i;
    json_t *e;
    json_array_foreach(man, i, e) {
        const char *g = json_string_value(json_object_get(e, "gguf"));
        const char *x = json_string_value(json_object_get(e, "expected"));
        assert_non_null(g);
        assert_non_null(x);
        check_model(g, x, strrchr(g, '/') + 1);
    }
    assert_true(json_array_size(man) >= 6);
    json_decref(man);
}

/* 2 x layers x KV heads x head dim x bytes, and the multi-head twin holds
 * exactly n_head / n_kv_head times more. */
static void test_kv_bytes_gqa(void **state) {
    (void)state;
    const char *names[] = {"mha", "gqa", "mqa"};
    size_t per[3];
    int heads[3], kvh[3];
    for (int i = 0; i < 3; i++) {
        char dir[256];
        snprintf(dir, sizeof dir, FIX "%s", names[i]);
        kvlm_error err;
        kvlm_model *m = kvlm_model_load(dir, NULL, &err);
        if (!m) fail_msg("%s: %s", dir, err.msg);
        const kvlm_config *c = kvlm_model_config(m);
        kvlm_kv *kv = kvlm_kv_create(m, &(kvlm_kv_options){.dtype = KVLM_F16}, &err);
        kvlm_kv_stats st;
        kvlm_kv_get_stats(kv, &st);
        assert_int_equal(st.bytes_per_token, (size_t)2 * c->n_layer * c->n_kv_head * c->head_dim * 2);
        per[i] = st.bytes_per_token;
        heads[i] = c->n_head;
        kvh[i] = c->n_kv_head;
        kvlm_kv_free(kv);
        kvlm_model_free(m);
    }
    assert_int_equal(heads[0], kvh[0]);
    for (int i = 1; i < 3; i++) {
        assert_true(kvh[i] < heads[i]);
        assert_int_equal(per[0], per[i] * (size_t)(heads[i] / kvh[i]));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hf_variants),
        cmocka_unit_test(test_gguf_files),
        cmocka_unit_test(test_kv_bytes_gqa),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
