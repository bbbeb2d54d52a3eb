/*
 * The families whose layers attend differently, from Hugging Face files
 * (tests/fixtures/layers, float64 reference logits from
 * tools/layers_reference.py): Gemma 2 (window on alternate layers,
 * attention and final soft-capping, query_pre_attn_scalar, (1 + w) norms
 * before and after each sublayer, GeGLU, scaled embeddings), Gemma 3 (five
 * window layers to one global, their own rotary bases, linear scaling of
 * the global one, q/k norms), SmolLM3 (no rotary on some layers), Granite
 * (its four multipliers), Qwen2 with a window from max_window_layers on,
 * Phi-3 with a partial rotary embedding and LongRoPE.
 *
 * Each: prefill of 8 tokens then 8 decode steps (16 positions: past the
 * window of 5 and, for Gemma 3, across the local/global boundary), f32 KV,
 * every kernel set, cached and recomputed; logits within 1e-4 of the
 * reference. The GGUF files of the same models (llama.cpp's layout, Q8_0 by
 * llama-quantize) give the reference's logits on their dequantised weights
 * (1e-4, float-activation kernels, f32 KV) and its greedy ids, and stay
 * within 0.5 of llama.cpp's own prefill logits on the same file (measured
 * 0.035-0.32: its 8-bit activations and F16 KV; on the F32 files, not
 * committed, llama.cpp is within 0.013 of the reference). Then the
 * description the loader built (windows, rotated
 * dimensions, tables, scales) is checked field by field, so a test of the
 * logits cannot pass on a description that happens to match. Bad input
 * (config.json edits and malformed GGUF files): each refusal names its key
 * and `kvlm run` exits 2.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "helpers.h"
#include "kvlm.h"
#include "kernels/kernels.h"
#include "model/model.h"

#define FIX "tests/fixtures/layers/"
#define TOL 1e-4

static const char *const variants[] = {"gemma2", "gemma3", "smollm3", "granite", "qwen2_swa", "phi3_longrope"};

static kvlm_model *load(const char *v) {
    char p[256];
    kvlm_error err;
    snprintf(p, sizeof p, FIX "%s", v);
    kvlm_model *m = kvlm_model_load(p, NULL, &err);
    if (!m) fail_msg("%s: %s", v, err.msg);
    return m;
}

static void test_parity(void **state) {
    (void)state;
    const kvlm_isa isas[] = {KVLM_ISA_SCALAR, KVLM_ISA_AVX2, KVLM_ISA_AVX512};
    for (size_t i = 0; i < sizeof variants / sizeof *variants; i++) {
        char p[256];
        snprintf(p, sizeof p, FIX "%s.expected.json", variants[i]);
        th_expected ex;
        assert_int_equal(th_expected_load(p, &ex), 0);
        kvlm_model *m = load(variants[i]);
        for (size_t k = 0; k < sizeof isas / sizeof *isas; k++) {
            if (!kern_cpu_supports(isas[k])) continue;
            for (int nc = 0; nc < 2; nc++) {
                const double d = th_parity_run(m, &ex, isas[k], KVLM_F32, nc);
                printf("  %-14s %-7s %s: max|diff| %.2e\n", variants[i], kvlm_isa_name(isas[k]),
                       nc ? "recompute" : "cached", d);
                if (!(d < TOL)) fail_msg("%s %s: %g", variants[i], kvlm_isa_name(isas[k]), d);
            }
        }
        kvlm_model_free(m);
        th_expected_free(&ex);
    }
}

static void test_description(void **state) {
    (void)state;
    kvlm_model *m = load("gemma3");
    assert_int_equal(m->cfg.sliding_window, 0); /* mixed: the cache keeps every block */
    for (int l = 0; l < 6; l++) {
        const model_attn_layer a = model_layer_attn(m, l);
        assert_int_equal(a.window, l == 5 ? 0 : 5);
        assert_int_equal(model_layer_window(m, l), l == 5 ? 0 : 5);
        assert_int_equal(a.rope_table, l == 5 ? 0 : 1);
        assert_int_equal(a.rope_dims, 16);
        assert_float_equal(a.scale, 0.25, 1e-7);
    }
    assert_int_equal(m->n_rope, 2);
    assert_float_equal(m->rope_freq[0][1], pow(1e6, -2.0 / 16) / 8, 1e-9); /* global: base 1M, linear 8 */
    assert_float_equal(m->rope_freq[1][1], pow(1e4, -2.0 / 16), 1e-9);     /* local: base 10k */
    assert_float_equal(m->embed_scale, sqrt(32.0), 1e-6);
    assert_int_equal(m->mlp_act, MLP_GELU_TANH);
    kvlm_model_free(m);

    m = load("gemma2");
    for (int l = 0; l < 4; l++) {
        const model_attn_layer a = model_layer_attn(m, l);
        assert_int_equal(a.window, l % 2 ? 0 : 5);
        assert_float_equal(a.softcap, 3.0, 0);
        assert_float_equal(a.scale, 1 / sqrt(24.0), 1e-7);
    }
    assert_float_equal(m->final_softcap, 4.0, 0);
    kvlm_model_free(m);

    m = load("smollm3");
    for (int l = 0; l < 4; l++) assert_int_equal(model_layer_attn(m, l).rope_dims, l == 3 ? 0 : 16);
    kvlm_model_free(m);

    m = load("granite");
    assert_float_equal(model_layer_attn(m, 0).scale, 0.1, 1e-7);
    assert_float_equal(m->embed_scale, 3.0, 0), assert_float_equal(m->residual_scale, 0.5, 0);
    assert_float_equal(m->logit_scale, 1 / 2.5, 1e-7);
    kvlm_model_free(m);

    m = load("qwen2_swa");
    assert_int_equal(model_layer_window(m, 0), 0);
    assert_int_equal(model_layer_window(m, 1), 5), assert_int_equal(model_layer_window(m, 2), 5);
    kvlm_model_free(m);

    m = load("phi3_longrope");
    assert_int_equal(model_layer_attn(m, 0).rope_dims, 12);
    assert_int_equal(m->rope_freq_n[0], 6);
    assert_float_equal(m->rope_freq[0][5], pow(1e4, -10.0 / 12) / 8.0, 1e-9); /* long factor 8 */
    assert_float_equal(m->rope_mscale[0], sqrt(1 + log(2.0) / log(32.0)), 1e-6);
    kvlm_model_free(m);
}

static int argmax(const float *v, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

/* llama.cpp's prefill logits on the same file (its Q8 activations and F16
 * KV move them by up to 0.32 from the reference here). */
static float *llamacpp_prefill(const char *path, int V) {
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) fail_msg("%s: %s", path, je.text);
    json_t *rows = json_object_get(json_object_get(root, "llamacpp"), "prefill_logits");
    if (json_array_size(rows) != TH_NPOS) fail_msg("%s: no llamacpp.prefill_logits", path);
    float *out = malloc((size_t)TH_NPOS * V * sizeof *out);
    for (int i = 0; i < TH_NPOS; i++)
        for (int j = 0; j < V; j++)
            out[(size_t)i * V + j] = (float)json_number_value(json_array_get(json_array_get(rows, (size_t)i), (size_t)j));
    json_decref(root);
    return out;
}

/* The same families from GGUF files in llama.cpp's converter layout,
 * quantised by llama-quantize (tests/fixtures/layers_gguf): Q8_0 files of
 * the fixtures (tools/make_layers_gguf.py) and Q4_K_M files of widened ones
 * (hidden 256, heads of 64: K-quant rows are 256 values;
 * tools/make_layers_kquant.py). Prefill and greedy decoding against the
 * float64 reference on the dequantised weights (the file's "decode" ids are
 * its greedy ids), on the float-activation kernel sets with f32 KV;
 * llama.cpp's prefill logits within 0.5. */
static void check_gguf(const char *name) {
    const kvlm_isa isas[] = {KVLM_ISA_SCALAR, KVLM_ISA_AVX2, KVLM_ISA_AVX512};
    char p[256], e[256];
    kvlm_error err;
    snprintf(p, sizeof p, "tests/fixtures/layers_gguf/%s.gguf", name);
    snprintf(e, sizeof e, "tests/fixtures/layers_gguf/%s.expected.json", name);
    th_expected ex;
    assert_int_equal(th_expected_load(e, &ex), 0);
    const int V = ex.vocab;
    float *lc = llamacpp_prefill(e, V);
    kvlm_model *m = kvlm_model_load(p, NULL, &err);
    if (!m) fail_msg("%s: %s", p, err.msg);
    for (size_t k = 0; k < sizeof isas / sizeof *isas; k++) {
        if (!kern_cpu_supports(isas[k])) continue;
        kvlm_kv *kv = kvlm_kv_create(m, &(kvlm_kv_options){.dtype = KVLM_F32, .block_size = 4}, &err);
        kvlm_engine *en = kvlm_engine_create(m, kv, &(kvlm_engine_options){.threads = 2, .isa = isas[k]}, &err);
        assert_non_null(en);
        const int seq = kvlm_kv_seq_new(kv, &err);
        float *lg = malloc((size_t)TH_NPOS * V * sizeof *lg);
        kvlm_batch_item it = {seq, ex.prompt, TH_NPOS, 1};
        if (kvlm_engine_step(en, &it, 1, lg, &err)) fail_msg("%s: %s", p, err.msg);
        double worst = 0, vs_lc = 0;
        for (size_t i = 0; i < (size_t)TH_NPOS * V; i++) {
            worst = fmax(worst, fabs((double)lg[i] - ex.prefill[i]));
            vs_lc = fmax(vs_lc, fabs((double)lg[i] - lc[i]));
        }
        int next = argmax(lg + (size_t)(TH_NPOS - 1) * V, V);
        for (int g = 0; g < TH_NPOS; g++) {
            if (next != ex.decode[g])
                fail_msg("%s %s: greedy step %d: kvlm %d, reference %d", name, kvlm_isa_name(isas[k]), g, next,
                         ex.decode[g]);
            it = (kvlm_batch_item){seq, &ex.decode[g], 1, 0};
            if (kvlm_engine_step(en, &it, 1, lg, &err)) fail_msg("%s: %s", p, err.msg);
            for (int i = 0; i < V; i++) worst = fmax(worst, fabs((double)lg[i] - ex.dec[(size_t)g * V + i]));
            next = argmax(lg, V);
        }
        printf("  %-26s %-7s max|diff| %.2e (reference), %.3f (llama.cpp prefill)\n", name, kvlm_isa_name(isas[k]),
               worst, vs_lc);
        if (!(worst < TOL)) fail_msg("%s %s: %g from the reference", name, kvlm_isa_name(isas[k]), worst);
        if (!(vs_lc < 0.5)) fail_msg("%s %s: %g from llama.cpp", name, kvlm_isa_name(isas[k]), vs_lc);
        free(lg);
        kvlm_engine_free(en);
        kvlm_kv_free(kv);
    }
    kvlm_model_free(m);
    free(lc);
    th_expected_free(&ex);
}

static void test_gguf_q8_0(void **state) {
    (void)state;
    static const char *const files[] = {"gemma2-q8_0", "gemma3-q8_0", "smollm3-q8_0", "granite-q8_0",
                                        "phi3_longrope-q8_0"};
    for (size_t f = 0; f < sizeof files / sizeof *files; f++) check_gguf(files[f]);
}

/* Q4_K_M (Q4_K and Q6_K blocks) of the widened families, and `kvlm
 * perplexity --chunks --context 64` on the Shakespeare slice (bytes as
 * ids) within 0.5% of llama-perplexity's figure and within 0.2% of the
 * float64 reference's, both in the expected file. */
static void test_gguf_q4_k_m(void **state) {
    (void)state;
    static const char *const files[] = {"granite-wide-q4_k_m", "phi3_longrope-wide-q4_k_m"};
    for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
        check_gguf(files[f]);
        char e[256];
        snprintf(e, sizeof e, "tests/fixtures/layers_gguf/%s.expected.json", files[f]);
        json_error_t je;
        json_t *ex = json_load_file(e, 0, &je);
        assert_non_null(ex);
        json_t *pp = json_object_get(ex, "perplexity");
        const double lc = json_number_value(json_object_get(pp, "llama_cpp"));
        const double ref = json_number_value(json_object_get(pp, "reference"));
        assert_true(lc > 1 && ref > 1);
        char *out = NULL;
        int st = th_run_kvlm(&out, "perplexity -m tests/fixtures/layers_gguf/%s.gguf -f "
                             "tests/fixtures/shakespeare_val_slice.txt --chunks --context 64 --json 2>/dev/null",
                             files[f]);
        if (st != 0) fail_msg("kvlm perplexity %s: exit %d: %s", files[f], st, out);
        json_t *j = json_loads(out, 0, &je);
        if (!j) fail_msg("%s: not JSON: %s", files[f], out);
        assert_int_equal((long)json_integer_value(json_object_get(j, "windows")),
                         (long)json_integer_value(json_object_get(pp, "chunks")));
        assert_int_equal((long)json_integer_value(json_object_get(j, "tokens")), 47 * 31);
        const double k = json_number_value(json_object_get(j, "perplexity"));
        printf("  %-26s perplexity kvlm %.4f, llama.cpp %.4f, reference %.4f\n", files[f], k, lc, ref);
        if (!(fabs(k - lc) <= 5e-3 * lc)) fail_msg("%s: perplexity %g, llama.cpp %g", files[f], k, lc);
        if (!(fabs(k - ref) <= 2e-3 * ref)) fail_msg("%s: perplexity %g, reference %g", files[f], k, ref);
        json_decref(j);
        free(out);
        json_decref(ex);
    }
}

/* Long context (tests/fixtures/layers/gemma3_long.expected.json): the
 * gemma3 fixture's weights with a window of 512 in a context of 8192; a
 * prompt of 4096 ids prefilled in chunks, then 4 decode steps; logits of
 * the last 4 prompt positions and of each decode step against the float64
 * reference (1e-4). Chunks of 1000 over 16-slot blocks and of 512 (a chunk
 * edge on every window edge) over 5-slot blocks. */
static void test_long_context(void **state) {
    (void)state;
    json_error_t je;
    json_t *ex = json_load_file(FIX "gemma3_long.expected.json", 0, &je);
    if (!ex) fail_msg("gemma3_long: %s", je.text);
    const int n = (int)json_integer_value(json_object_get(ex, "n_prompt"));
    json_t *ids_j = json_object_get(ex, "ids"), *lg_j = json_object_get(ex, "logits");
    const int total = (int)json_array_size(ids_j), V = 256;
    assert_int_equal(n, 4096), assert_int_equal(total, 4100), assert_int_equal(json_array_size(lg_j), 8);
    int32_t *ids = malloc((size_t)total * sizeof *ids);
    for (int i = 0; i < total; i++) ids[i] = (int32_t)json_integer_value(json_array_get(ids_j, (size_t)i));
    char *dir = th_tempdir(), src[256], dst[512];
    size_t bytes;
    char *w = th_read_file(FIX "gemma3/model.safetensors", &bytes);
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    assert_int_equal(th_write_file(dst, w, bytes), 0);
    free(w);
    snprintf(src, sizeof src, FIX "gemma3/config.json");
    json_t *cfg = json_load_file(src, 0, &je);
    json_object_set_new(cfg, "sliding_window", json_integer(512));
    json_object_set_new(cfg, "max_position_embeddings", json_integer(8192));
    snprintf(dst, sizeof dst, "%s/config.json", dir);
    assert_int_equal(json_dump_file(cfg, dst, 0), 0);
    json_decref(cfg);
    kvlm_error err;
    kvlm_model *m = kvlm_model_load(dir, NULL, &err);
    if (!m) fail_msg("%s", err.msg);
    assert_int_equal(model_layer_window(m, 0), 512), assert_int_equal(model_layer_window(m, 5), 0);
    const struct { int block, chunk; } runs[] = {{16, 1000}, {5, 512}};
    float *lg = malloc((size_t)1000 * V * sizeof *lg);
    for (size_t r = 0; r < sizeof runs / sizeof *runs; r++) {
        kvlm_kv *kv = kvlm_kv_create(m, &(kvlm_kv_options){.dtype = KVLM_F32, .block_size = runs[r].block}, &err);
        kvlm_engine *e = kvlm_engine_create(m, kv, &(kvlm_engine_options){.threads = 2}, &err);
        assert_non_null(e);
        const int seq = kvlm_kv_seq_new(kv, &err);
        double worst = 0;
        for (int p = 0; p < n; p += runs[r].chunk) {
            const int k = n - p < runs[r].chunk ? n - p : runs[r].chunk;
            kvlm_batch_item it = {seq, ids + p, k, 1};
            if (kvlm_engine_step(e, &it, 1, lg, &err)) fail_msg("prefill: %s", err.msg);
            for (int q = p; q < p + k; q++) {
                if (q < n - 4) continue;
                json_t *row = json_array_get(lg_j, (size_t)(q - (n - 4)));
                for (int i = 0; i < V; i++)
                    worst = fmax(worst, fabs(lg[(size_t)(q - p) * V + i] - json_number_value(json_array_get(row, (size_t)i))));
            }
        }
        for (int j = 0; j < 4; j++) {
            kvlm_batch_item it = {seq, ids + n + j, 1, 0};
            if (kvlm_engine_step(e, &it, 1, lg, &err)) fail_msg("decode: %s", err.msg);
            json_t *row = json_array_get(lg_j, (size_t)(4 + j));
            for (int i = 0; i < V; i++) worst = fmax(worst, fabs(lg[i] - json_number_value(json_array_get(row, (size_t)i))));
        }
        printf("  gemma3_long    window 512, 4096 + 4 tokens, chunks of %d, blocks of %d: max|diff| %.2e\n",
               runs[r].chunk, runs[r].block, worst);
        if (!(worst < TOL)) fail_msg("long context: %g", worst);
        kvlm_engine_free(e);
        kvlm_kv_free(kv);
    }
    free(lg);
    free(ids);
    kvlm_model_free(m);
    json_decref(ex);
    th_rmtree(dir);
    free(dir);
}

/* A copy of a fixture in dir with config.json's key set to value (JSON
 * text; NULL deletes it). */
static void edited(const char *variant, const char *dir, const char *key, const char *value) {
    char src[256], dst[512];
    size_t n;
    snprintf(src, sizeof src, FIX "%s/model.safetensors", variant);
    char *w = th_read_file(src, &n);
    assert_non_null(w);
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    assert_int_equal(th_write_file(dst, w, n), 0);
    free(w);
    snprintf(src, sizeof src, FIX "%s/config.json", variant);
    json_error_t je;
    json_t *cfg = json_load_file(src, 0, &je);
    assert_non_null(cfg);
    if (value) json_object_set_new(cfg, key, json_loads(value, JSON_DECODE_ANY, &je));
    else json_object_del(cfg, key);
    snprintf(dst, sizeof dst, "%s/config.json", dir);
    assert_int_equal(json_dump_file(cfg, dst, 0), 0);
    json_decref(cfg);
}

/* Bad input: each refusal names the key (or tensor) and kvlm exits 2. */
static void test_refusals(void **state) {
    (void)state;
    static const struct {
        const char *variant, *key, *value, *needle;
    } hf[] = {
        {"gemma2", "attn_logit_softcapping", NULL, "gemma2 needs attn_logit_softcapping and final_logit_softcapping"},
        {"gemma2", "layer_types", "[\"sliding_attention\", \"full_attention\"]",
         "layer_types must list one type for each of the 4 layers"},
        {"gemma2", "layer_types", "[\"sliding_attention\", \"full_attention\", \"local\", \"full_attention\"]",
         "layer_types[2] is neither"},
        {"gemma3", "sliding_window", "100", "sliding_window = 100 exceeds max_position_embeddings = 64"},
        {"gemma3", "sliding_window_pattern", "7", "sliding_window_pattern = 7 does not fit 6 layers"},
        {"gemma3", "hidden_activation", "\"relu\"", "hidden_activation 'relu' is not supported"},
        {"smollm3", "no_rope_layers", "[1, 1, 0]", "no_rope_layers must list one 0 or 1 for each of the 4 layers"},
        {"granite", "logits_scaling", "0", "logits_scaling must be a number in (0, 1e+09)"},
        {"phi3_longrope", "rope_scaling", "{\"type\": \"longrope\", \"long_factor\": [1, 2, 3, 4, 5], "
         "\"short_factor\": [1, 1, 1, 1, 1, 1]}", "rope_scaling.long_factor must list 6 numbers (rotary dimensions / 2), not 5"},
        {"phi3_longrope", "original_max_position_embeddings", NULL, "longrope needs original_max_position_embeddings"},
        {"qwen2_swa", "max_window_layers", "-1", "max_window_layers must be a non-negative integer"},
    };
    char *dir = th_tempdir();
    char args[600];
    for (size_t i = 0; i < sizeof hf / sizeof *hf; i++) {
        edited(hf[i].variant, dir, hf[i].key, hf[i].value);
        snprintf(args, sizeof args, "run -m %s --ids 1 -n 1 2>&1", dir);
        const th_cli_case c = {args, 2, hf[i].needle};
        th_expect_cli(&c, 1);
    }
    const th_cli_case g[] = {
        {"run -m tests/fixtures/layers_gguf/bad-gemma2-no-softcap.gguf --ids 1 -n 1 2>&1", 2,
         "'gemma2.attn_logit_softcapping' is missing"},
        {"run -m tests/fixtures/layers_gguf/bad-gemma3-pattern.gguf --ids 1 -n 1 2>&1", 2,
         "gemma3.attention.sliding_window_pattern must hold one bool for each of the 6 layers"},
        {"run -m tests/fixtures/layers_gguf/bad-gemma3-window.gguf --ids 1 -n 1 2>&1", 2,
         "gemma3.attention.sliding_window = 100 exceeds gemma3.context_length = 64"},
        {"run -m tests/fixtures/layers_gguf/bad-phi3-factors.gguf --ids 1 -n 1 2>&1", 2,
         "tensor 'rope_factors_long.weight' must be F32 [6]"},
    };
    th_expect_cli(g, sizeof g / sizeof *g);
    th_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parity),
        cmocka_unit_test(test_description),
        cmocka_unit_test(test_gguf_q8_0),
        cmocka_unit_test(test_gguf_q4_k_m),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_long_context),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
