/*
 * Llama-family forward pass (RMSNorm, rotary embeddings, SwiGLU, grouped
 * query attention, q/k/v biases, tied and untied heads, llama3 rope
 * scaling) against the PyTorch reference fixtures in tests/fixtures/llama:
 * prefill logits and 8 cached decode steps for every variant and every
 * kernel set; KV bytes per token of grouped-query and multi-query models
 * against the formula and their multi-head twin.
 *
 * Tolerances: as for GPT-2, the reference is float64 from the stored
 * weights: 1e-4 absolute with an f32 cache; 5e-2 with an f16 cache.
 */
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kvlm.h"

#define FIX "tests/fixtures/llama/"
#define NPOS 8

typedef struct expected {
    int32_t prompt[NPOS], decode[NPOS];
    int vocab;
    float *prefill, *dec;
} expected;

static float *rows_of(json_t *a, int *vocab) {
    *vocab = (int)json_array_size(json_array_get(a, 0));
    float *out = malloc((size_t)NPOS * *vocab * sizeof(float));
    for (int i = 0; i < NPOS; i++)
        for (int j = 0; j < *vocab; j++)
            out[i * *vocab + j] = (float)json_number_value(json_array_get(json_array_get(a, (size_t)i), (size_t)j));
    return out;
}

static int load_expected(const char *path, expected *ex) {
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return -1;
    for (int i = 0; i < NPOS; i++) {
        ex->prompt[i] = (int32_t)json_integer_value(json_array_get(json_object_get(root, "prompt"), (size_t)i));
        ex->decode[i] = (int32_t)json_integer_value(json_array_get(json_object_get(root, "decode"), (size_t)i));
    }
    ex->prefill = rows_of(json_object_get(root, "prefill_logits"), &ex->vocab);
    ex->dec = rows_of(json_object_get(root, "decode_logits"), &ex->vocab);
    json_decref(root);
    return 0;
}

static double run(kvlm_model *m, const expected *ex, kvlm_isa isa, kvlm_dtype kvt) {
    kvlm_error err;
    kvlm_kv *kv = kvlm_kv_create(m, &(kvlm_kv_options){.dtype = kvt}, &err);
    kvlm_engine *e = kvlm_engine_create(m, kv, &(kvlm_engine_options){.threads = 2, .isa = isa}, &err);
    assert_non_null(e);
    int seq = kvlm_kv_seq_new(kv, &err);
    const int V = ex->vocab;
    float *lg = malloc((size_t)NPOS * V * sizeof(float));
    kvlm_batch_item it = {seq, ex->prompt, NPOS, 1};
    assert_int_equal(kvlm_engine_step(e, &it, 1, lg, &err), 0);
    double worst = 0;
    for (int i = 0; i < NPOS * V; i++) worst = fmax(worst, fabs((double)lg[i] - ex->prefill[i]));
    for (int j = 0; j < NPOS; j++) {
        it = (kvlm_batch_item){seq, &ex->decode[j], 1, 0};
        assert_int_equal(kvlm_engine_step(e, &it, 1, lg, &err), 0);
        for (int i = 0; i < V; i++) worst = fmax(worst, fabs((double)lg[i] - ex->dec[(size_t)j * V + i]));
    }
    free(lg);
    kvlm_engine_free(e);
    kvlm_kv_free(kv);
    return worst;
}

static void test_variants(void **state) {
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
        expected ex;
        assert_int_equal(load_expected(path, &ex), 0);
        kvlm_error err;
        kvlm_model *m = kvlm_model_load(dir, &err);
        if (!m) fail_msg("%s: %s", dir, err.msg);
        const kvlm_isa isas[] = {KVLM_ISA_SCALAR, KVLM_ISA_AVX2, KVLM_ISA_AVX512};
        for (size_t i = 0; i < 3; i++) {
            if (isas[i] != KVLM_ISA_SCALAR && kvlm_isa_best() < isas[i]) continue;
            double d32 = run(m, &ex, isas[i], KVLM_F32), d16 = run(m, &ex, isas[i], KVLM_F16);
            printf("  %-20s %-6s max|diff| f32 kv %.2e  f16 kv %.2e\n", variant, kvlm_isa_name(isas[i]), d32, d16);
            if (d32 >= 1e-4 || d16 >= 5e-2) fail_msg("%s %s: %g / %g", variant, kvlm_isa_name(isas[i]), d32, d16);
        }
        checked++;
        free(ex.prefill);
        free(ex.dec);
        kvlm_model_free(m);
    }
    closedir(d);
    assert_true(checked >= 4);
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
        kvlm_model *m = kvlm_model_load(dir, &err);
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
        cmocka_unit_test(test_variants),
        cmocka_unit_test(test_kv_bytes_gqa),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
