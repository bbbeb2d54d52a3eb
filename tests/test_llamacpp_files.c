/*
 * GGUF files made by llama.cpp's own tools (tests/fixtures/llamacpp: gguf-py
 * writer, llama-quantize's default K-quant, Q8_0 and IQ4_XS mixes, and
 * MXFP4 matrices over Q8_0 by its --tensor-type) for gpt2, llama
 * (grouped-query), qwen2 (q/k/v biases) and qwen3 (q/k norms), and
 * (tests/fixtures/moe_gguf) the mixtures of experts qwen3moe, qwen2moe and
 * Mixtral (llama with experts), each against
 * two independent oracles recorded in its .expected.json:
 *
 * - the float64 NumPy reference on the weights gguf-py dequantises from the
 *   file (tools/llamacpp_reference.py): logits at every prompt position and
 *   for 16 greedy decode steps within LOGIT_TOL, greedy ids identical, on
 *   every kernel set with an f32 KV cache;
 * - llama.cpp's llama-perplexity -c 128 on tests/fixtures/shakespeare_val_
 *   slice.txt: `kvlm perplexity --chunks --context 128 --kv-dtype f32` (the
 *   same protocol, the reference's f32 K/V) scores the same chunks, lands within PPL_REF_REL of the reference's
 *   perplexity under that protocol and within PPL_REL of llama.cpp's value.
 *
 * Tolerances: the reference logits are stored to 5 decimals (5e-6); kvlm
 * computes in f32 with f32 activations against the exact dequantised
 * weights, so only summation order and f32 rounding differ (measured
 * <= 2e-5 on logits of magnitude ~10 on every kernel set); LOGIT_TOL = 1e-3
 * leaves room for that and fails on any wrong block layout, scale or rope
 * pairing (those move logits by 0.1 or more). PPL_REF_REL = 1e-5 (measured
 * <= 3e-7). PPL_REL = 0.5%: llama.cpp quantises activations to 8 bits inside
 * its quantised dot products and keeps an F16 KV cache, which moves its
 * logits by ~0.2 on these files and its perplexity by up to 0.45% over the
 * full set (0.01-0.29% on the committed files); a different tokenization or
 * protocol moves it by far more.
 *
 * The logits and the perplexity against the reference run on the f32-
 * activation kernel sets (--isa forced: avx512 or avx2, not auto). Where
 * the CPU has an int8-activation level (avx512-vnni, avx2-vnni; on aarch64
 * neon-dotprod and neon-i8mm, whose SMMLA tiles take the prompt's rows:
 * Q8_0, Q4_0, Q4_K, Q5_K and Q6_K tensors with 8-bit activations, as
 * llama.cpp does) the perplexity runs again on it and must land within
 * PPL_INT8_REL = 0.5% of the f32-activation reference and within PPL_REL
 * of llama.cpp's; on a file of f32, Q4_K, Q5_K and Q6_K tensors only,
 * neon-i8mm's must equal neon-dotprod's exactly (the same bits). The
 * int8 bound is wider than the 0.2% kvlm allows for a real model
 * because these random-weight models score worse than uniform (perplexity
 * 7,000-12,700 over a vocabulary of ~509: large, confidently wrong logits),
 * which amplifies activation rounding: measured -0.05% (gpt2-q3_k_m),
 * +0.13% (llama-q4_k_m), +0.38% (qwen2-q6_k), +0.19% (qwen2-q8_0); on the
 * trained models/shakespeare-llama the same kernels move it by 0.01-0.04%
 * (tests/test_perplexity.c checks 0.2% there), and llama.cpp's own 8-bit
 * activations land up to 0.45% from the reference on this set.
 *
 * Not in `make test` until kvlm loads every file here (K-quants, llama.cpp's
 * tokenizer.ggml.pre names, qwen3): run with `make test-llamacpp`.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kernels/kernels.h"
#include "kvlm.h"

#define FIX "tests/fixtures/llamacpp/"
#define PPL_TEXT "tests/fixtures/shakespeare_val_slice.txt"
#define LOGIT_TOL 1e-3
#define PPL_REF_REL 1e-5
#define PPL_REL 5e-3
#define PPL_INT8_REL 5e-3
#define MAX_TOK 64

typedef struct expected {
    int32_t prompt[MAX_TOK], greedy[MAX_TOK];
    int n_prompt, n_greedy, vocab;
    float *prefill, *greedy_logits; /* n_prompt x vocab, n_greedy x vocab */
    double ppl, ref_ppl;
    int chunks, ctx, scored_per_chunk;
} expected;

static int ids_of(json_t *a, int32_t *out, int *n) {
    if (!json_is_array(a) || json_array_size(a) == 0 || json_array_size(a) > MAX_TOK) return -1;
    *n = (int)json_array_size(a);
    for (int i = 0; i < *n; i++) out[i] = (int32_t)json_integer_value(json_array_get(a, (size_t)i));
    return 0;
}

static float *rows_of(json_t *a, int n, int vocab) {
    if (json_array_size(a) != (size_t)n) return NULL;
    float *out = malloc((size_t)n * vocab * sizeof *out);
    for (int i = 0; out && i < n; i++) {
        json_t *r = json_array_get(a, (size_t)i);
        if (json_array_size(r) != (size_t)vocab) {
            free(out);
            return NULL;
        }
        for (int j = 0; j < vocab; j++) out[(size_t)i * vocab + j] = (float)json_number_value(json_array_get(r, (size_t)j));
    }
    return out;
}

static void load_expected(const char *path, expected *x) {
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) fail_msg("%s: %s", path, je.text);
    memset(x, 0, sizeof *x);
    json_t *ref = json_object_get(root, "reference"), *lc = json_object_get(root, "llama_cpp");
    json_t *ppl = json_object_get(lc, "perplexity");
    if (ids_of(json_object_get(root, "prompt"), x->prompt, &x->n_prompt) ||
        ids_of(json_object_get(ref, "greedy_ids"), x->greedy, &x->n_greedy))
        fail_msg("%s: prompt or greedy_ids missing", path);
    x->vocab = (int)json_array_size(json_array_get(json_object_get(ref, "prefill_logits"), 0));
    x->prefill = rows_of(json_object_get(ref, "prefill_logits"), x->n_prompt, x->vocab);
    x->greedy_logits = rows_of(json_object_get(ref, "greedy_logits"), x->n_greedy, x->vocab);
    x->ppl = json_number_value(json_object_get(ppl, "perplexity"));
    x->ref_ppl = json_number_value(json_object_get(ref, "perplexity"));
    x->chunks = (int)json_integer_value(json_object_get(ppl, "chunks"));
    x->ctx = (int)json_integer_value(json_object_get(ppl, "ctx"));
    x->scored_per_chunk = (int)json_integer_value(json_object_get(ppl, "scored_per_chunk"));
    if (!x->prefill || !x->greedy_logits || x->ppl <= 1 || x->ref_ppl <= 1 || x->chunks < 2 || x->ctx < 2)
        fail_msg("%s: malformed", path);
    json_decref(root);
}

static int argmax(const float *v, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

/* Prefill then cached greedy decoding on one kernel set; returns the largest
 * logit difference and checks every greedy id. */
static double run_one(kvlm_model *m, const expected *x, kvlm_isa isa, const char *label) {
    kvlm_error err;
    kvlm_kv *kv = kvlm_kv_create(m, &(kvlm_kv_options){.dtype = KVLM_F32}, &err);
    if (!kv) fail_msg("%s: %s", label, err.msg);
    kvlm_engine *e = kvlm_engine_create(m, kv, &(kvlm_engine_options){.threads = 2, .isa = isa}, &err);
    if (!e) fail_msg("%s: %s", label, err.msg);
    int seq = kvlm_kv_seq_new(kv, &err);
    assert_true(seq >= 0);
    const int V = x->vocab;
    assert_int_equal(kvlm_model_config(m)->vocab_size, V);
    float *lg = malloc((size_t)x->n_prompt * V * sizeof *lg);
    kvlm_batch_item it = {seq, x->prompt, x->n_prompt, 1};
    if (kvlm_engine_step(e, &it, 1, lg, &err)) fail_msg("%s: prefill: %s", label, err.msg);
    double worst = 0;
    for (size_t i = 0; i < (size_t)x->n_prompt * V; i++) worst = fmax(worst, fabs((double)lg[i] - x->prefill[i]));
    const float *last = lg + (size_t)(x->n_prompt - 1) * V;
    for (int g = 0; g < x->n_greedy; g++) {
        for (int i = 0; i < V; i++) worst = fmax(worst, fabs((double)last[i] - x->greedy_logits[(size_t)g * V + i]));
        int id = argmax(last, V);
        if (id != x->greedy[g]) fail_msg("%s: greedy step %d: kvlm %d, reference %d", label, g, id, x->greedy[g]);
        it = (kvlm_batch_item){seq, &x->greedy[g], 1, 0};
        if (g + 1 < x->n_greedy && kvlm_engine_step(e, &it, 1, lg, &err))
            fail_msg("%s: decode: %s", label, err.msg);
        last = lg;
    }
    free(lg);
    kvlm_engine_free(e);
    kvlm_kv_free(kv);
    return worst;
}

static double json_num(json_t *o, const char *k) {
    json_t *v = json_object_get(o, k);
    if (!json_is_number(v)) fail_msg("no number '%s'", k);
    return json_number_value(v);
}

/* kvlm perplexity on kernel set isa; the tolerance against the reference
 * is PPL_REF_REL with f32 activations, PPL_INT8_REL with int8 ones. */
static double check_perplexity(const char *path, const expected *x, const char *label, kvlm_isa isa, double ref_rel) {
    char *out = NULL;
    int st = th_run_kvlm(&out, "perplexity -m %s -f " PPL_TEXT " --chunks --context %d --isa %s --kv-dtype f32 "
                         "--json 2>/dev/null",
                         path, x->ctx, kvlm_isa_name(isa));
    if (st) fail_msg("%s: kvlm perplexity exit %d: %s", label, st, out);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    if (!j) fail_msg("%s: not JSON: %s", label, out);
    double ppl = json_num(j, "perplexity");
    int windows = (int)json_num(j, "windows"), scored = (int)json_num(j, "tokens");
    printf("  %-22s %-11s perplexity kvlm %.4f  reference %.4f (%+.3f%%)  llama.cpp %.4f  (%+.3f%%, %d chunks)\n",
           label, kvlm_isa_name(isa), ppl, x->ref_ppl, 100 * (ppl / x->ref_ppl - 1), x->ppl,
           100 * (ppl / x->ppl - 1), windows);
    assert_int_equal(windows, x->chunks);
    assert_int_equal(scored, x->chunks * x->scored_per_chunk);
    if (fabs(ppl / x->ref_ppl - 1) > ref_rel)
        fail_msg("%s %s: perplexity %.6f vs reference %.6f", label, kvlm_isa_name(isa), ppl, x->ref_ppl);
    if (fabs(ppl / x->ppl - 1) > PPL_REL) fail_msg("%s: perplexity %.4f vs llama.cpp %.4f", label, ppl, x->ppl);
    json_decref(j);
    free(out);
    return ppl;
}

/* Whether a manifest entry's tensor types are f32 and the K-quants the
 * int8 levels take (Q4_K, Q5_K, Q6_K) only. */
static int kquant_only(const json_t *ent) {
    const json_t *types = json_object_get(ent, "tensor_types");
    if (!json_is_array(types) || json_array_size(types) == 0) return 0;
    size_t i;
    const json_t *t;
    json_array_foreach(types, i, t) {
        const char *n = json_string_value(t);
        if (!n || (strcmp(n, "F32") && strcmp(n, "Q4_K") && strcmp(n, "Q5_K") && strcmp(n, "Q6_K"))) return 0;
    }
    return 1;
}

/* Every file of dir's manifest.json (at least min_files of them). */
static void check_dir(const char *dir, size_t min_files) {
    json_error_t je;
    char mpath[512];
    snprintf(mpath, sizeof mpath, "%smanifest.json", dir);
    json_t *man = json_load_file(mpath, 0, &je);
    if (!man) fail_msg("manifest: %s", je.text);
    size_t k;
    json_t *ent;
    json_array_foreach(man, k, ent) {
        char path[512], xpath[512];
        const char *g = json_string_value(json_object_get(ent, "gguf"));
        const char *xe = json_string_value(json_object_get(ent, "expected"));
        assert_non_null(g);
        assert_non_null(xe);
        snprintf(path, sizeof path, "%s%s", dir, g);
        snprintf(xpath, sizeof xpath, "%s%s", dir, xe);
        expected x;
        load_expected(xpath, &x);
        kvlm_error err;
        kvlm_model *m = kvlm_model_load(path, NULL, &err);
        if (!m) fail_msg("%s: %s", path, err.msg);
        const kvlm_isa isas[] = {KVLM_ISA_SCALAR, KVLM_ISA_AVX2, KVLM_ISA_AVX512, KVLM_ISA_NEON};
        for (size_t i = 0; i < 4; i++) {
            if (!kern_cpu_supports(isas[i])) continue;
            double d = run_one(m, &x, isas[i], g);
            printf("  %-22s %-6s max|logit diff| %.2e, %d greedy ids equal\n", g, kvlm_isa_name(isas[i]), d,
                   x.n_greedy);
            if (d >= LOGIT_TOL) fail_msg("%s %s: logits differ by %g", g, kvlm_isa_name(isas[i]), d);
        }
        kvlm_model_free(m);
        const kvlm_isa f32 = th_best_f32_isa();
        check_perplexity(path, &x, g, f32, PPL_REF_REL);
        const kvlm_isa int8[] = {KVLM_ISA_AVX512_VNNI, KVLM_ISA_AVX2_VNNI, KVLM_ISA_NEON_DOTPROD, KVLM_ISA_NEON_I8MM};
        double ppl8[4] = {0};
        for (size_t i = 0; i < 4; i++)
            if (kern_cpu_supports(int8[i])) ppl8[i] = check_perplexity(path, &x, g, int8[i], PPL_INT8_REL);
        /* neon-i8mm's K-quant tiles give neon-dotprod's bits: a file of f32
         * and those K-quants scores the same to the last bit at both */
        if (ppl8[2] > 0 && ppl8[3] > 0 && kquant_only(ent)) {
            if (ppl8[3] != ppl8[2]) fail_msg("%s: perplexity %.17g at neon-i8mm, %.17g at neon-dotprod", g, ppl8[3], ppl8[2]);
            printf("  %-22s neon-i8mm perplexity equal to neon-dotprod's (%.17g)\n", g, ppl8[3]);
        }
        free(x.prefill);
        free(x.greedy_logits);
    }
    assert_true(json_array_size(man) >= min_files);
    json_decref(man);
}

static void test_llamacpp_files(void **state) {
    (void)state;
    check_dir(FIX, 5);
}

/* The mixtures of experts (qwen3moe, qwen2moe, Mixtral as llama with
 * experts): the same oracles. */
static void test_moe_files(void **state) {
    (void)state;
    check_dir("tests/fixtures/moe_gguf/", 3);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llamacpp_files),
        cmocka_unit_test(test_moe_files),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
