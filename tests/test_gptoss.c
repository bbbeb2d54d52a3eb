/*
 * gpt-oss against the float64 PyTorch reference (tools/moe_reference.py's
 * gptoss_forward, fixture tests/fixtures/moe/gpt_oss from
 * tools/make_moe_fixtures.py): attention sinks, a 128-token window on
 * layer 0 only, YaRN rotary scaling, biases on q/k/v/o, router and
 * experts, top-k-then-softmax routing and the clamped SwiGLU. A prompt of
 * 136 ids (past the window) prefilled in one step and in chunks, then 8
 * cached decode steps, every position's logits within 1e-4 (f32 cache) on
 * every kernel set; the configuration as read; bad configurations and
 * tensors fail to load with a message naming the key or tensor.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "helpers.h"
#include "kernels/kernels.h"
#include "kvlm.h"
#include "kvlm_measure.h"
#include "app/chat_template.h"
#include "model/model.h"
#include "formats/gguf.h"
#include "formats/tensor_set.h"
#include "tensor.h"

#define FIX "tests/fixtures/moe/"
#define TOL 1e-4

typedef struct gpt_expected {
    int n_prompt, total, vocab;
    int32_t *ids;
    double *logits; /* [total, vocab] */
} gpt_expected;

static void load_expected(const char *path, gpt_expected *ex) {
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j) fail_msg("%s: %s", path, je.text);
    json_t *ids = json_object_get(j, "ids"), *lg = json_object_get(j, "logits");
    ex->n_prompt = (int)json_integer_value(json_object_get(j, "n_prompt"));
    ex->vocab = (int)json_integer_value(json_object_get(j, "vocab"));
    ex->total = (int)json_array_size(ids);
    assert_int_equal(json_array_size(lg), ex->total);
    ex->ids = malloc((size_t)ex->total * sizeof *ex->ids);
    ex->logits = malloc((size_t)ex->total * ex->vocab * sizeof *ex->logits);
    for (int i = 0; i < ex->total; i++) {
        ex->ids[i] = (int32_t)json_integer_value(json_array_get(ids, (size_t)i));
        json_t *row = json_array_get(lg, (size_t)i);
        assert_int_equal(json_array_size(row), ex->vocab);
        for (int v = 0; v < ex->vocab; v++) ex->logits[(size_t)i * ex->vocab + v] = json_number_value(json_array_get(row, (size_t)v));
    }
    json_decref(j);
}

/* Prefill in chunks of `chunk` ids (logits of every position), then the
 * decode ids one a step; the largest |kvlm - reference|. */
static double run(kvlm_model *m, const gpt_expected *ex, kvlm_isa isa, int chunk, int block) {
    kvlm_error err;
    kvlm_kv *kv = kvlm_kv_create(m, &(kvlm_kv_options){.dtype = KVLM_F32, .block_size = block}, &err);
    if (!kv) fail_msg("kv: %s", err.msg);
    kvlm_engine *e = kvlm_engine_create(m, kv, &(kvlm_engine_options){.threads = 2, .isa = isa}, &err);
    if (!e) fail_msg("engine: %s", err.msg);
    const int seq = kvlm_kv_seq_new(kv, &err), V = ex->vocab;
    float *lg = malloc((size_t)chunk * V * sizeof *lg);
    double worst = 0;
    for (int p = 0; p < ex->total;) {
        const int k = p < ex->n_prompt ? (ex->n_prompt - p < chunk ? ex->n_prompt - p : chunk) : 1;
        kvlm_batch_item it = {seq, ex->ids + p, k, 1};
        if (kvlm_engine_step(e, &it, 1, lg, &err)) fail_msg("step at %d: %s", p, err.msg);
        for (int q = 0; q < k; q++)
            for (int v = 0; v < V; v++)
                worst = fmax(worst, fabs(lg[(size_t)q * V + v] - ex->logits[(size_t)(p + q) * V + v]));
        p += k;
    }
    free(lg);
    kvlm_engine_free(e);
    kvlm_kv_free(kv);
    return worst;
}

static void test_reference(void **state) {
    (void)state;
    gpt_expected ex;
    load_expected(FIX "gpt_oss.expected.json", &ex);
    assert_int_equal(ex.n_prompt, 136), assert_int_equal(ex.total, 144), assert_int_equal(ex.vocab, 64);
    kvlm_error err;
    kvlm_model *m = kvlm_model_load(FIX "gpt_oss", NULL, &err);
    if (!m) fail_msg("%s", err.msg);
    const kvlm_config *c = kvlm_model_config(m);
    assert_string_equal(c->arch, "gpt-oss");
    assert_int_equal(c->n_expert, 8), assert_int_equal(c->n_expert_used, 3), assert_int_equal(c->n_ff_expert, 32);
    assert_int_equal(c->expert_norm_topk, 0), assert_int_equal(c->qkv_bias, 1);
    assert_int_equal(model_layer_window(m, 0), 128), assert_int_equal(model_layer_window(m, 1), 0);
    const model_attn_layer a0 = model_layer_attn(m, 0);
    assert_non_null(a0.sinks);
    /* every tensor of the file counted once; a token uses 3 of 8 experts of 3 x 32 x 32 weights and 2 x 32 + 32
     * biases */
    uint64_t file_bytes, file_params;
    assert_int_equal(kvlm_weight_bytes(FIX "gpt_oss", &file_bytes, &file_params, &err), 0);
    assert_int_equal(kvlm_model_param_count(m), file_params);
    assert_int_equal(kvlm_model_active_param_count(m), file_params - 2u * 5u * (3u * 32u * 32u + 96u));
    /* YaRN, factor 4 over 64 positions, 4 frequencies of base 10000 over 8
     * dimensions: the range r(32) = -0.50 .. r(1) = 1.008 (not truncated)
     * keeps frequency 0, mixes 1 (t = 1 / 1.008) and divides 2 and 3 by 4;
     * cos and sin times 0.1 ln 4 + 1. */
    const double t1 = 1.0 / (8 * log(64 / (2 * M_PI)) / (2 * log(10000.0)));
    assert_float_equal(m->rope_freq[0][0], 1.0, 1e-7);
    assert_float_equal(m->rope_freq[0][1], 0.1 * (t1 / 4 + 1 - t1), 1e-7);
    assert_float_equal(m->rope_freq[0][2], 0.01 / 4, 1e-9);
    assert_float_equal(m->rope_freq[0][3], 0.001 / 4, 1e-10);
    assert_float_equal(m->rope_mscale[0], 0.1 * log(4.0) + 1, 1e-6);
    const kvlm_isa isas[] = {KVLM_ISA_SCALAR, KVLM_ISA_AVX2, KVLM_ISA_AVX512};
    for (size_t i = 0; i < 3; i++) {
        if (!kern_cpu_supports(isas[i])) continue;
        const double d = run(m, &ex, isas[i], 136, 16);
        printf("  gpt_oss %-7s 136 + 8 positions, window 128: max|diff| %.2e\n", kvlm_isa_name(isas[i]), d);
        if (!(d < TOL)) fail_msg("%s: %g", kvlm_isa_name(isas[i]), d);
    }
    /* chunks ending at and across the window edge, small blocks */
    const double d = run(m, &ex, KVLM_ISA_AUTO, 64, 5);
    printf("  gpt_oss chunks of 64, blocks of 5: max|diff| %.2e\n", d);
    if (!(d < TOL)) fail_msg("chunks: %g", d);
    kvlm_model_free(m);
    free(ex.ids), free(ex.logits);
}

/* Writes tmp/config.json = the fixture's with key (a JSON value) set, or
 * removed when value is NULL, and links its weights. */
static void write_config(const char *tmp, const char *key, json_t *value) {
    json_error_t je;
    json_t *root = json_load_file(FIX "gpt_oss/config.json", 0, &je);
    assert_non_null(root);
    if (value) json_object_set_new(root, key, value);
    else json_object_del(root, key);
    char dst[512], w[512], wd[512];
    snprintf(dst, sizeof dst, "%s/config.json", tmp);
    assert_int_equal(json_dump_file(root, dst, 0), 0);
    json_decref(root);
    char *cwd = realpath(".", NULL);
    snprintf(w, sizeof w, "%s/" FIX "gpt_oss/model.safetensors", cwd);
    snprintf(wd, sizeof wd, "%s/model.safetensors", tmp);
    free(cwd);
    unlink(wd);
    assert_int_equal(symlink(w, wd), 0);
}

static void expect_load_error(const char *path, int code, const char *needle) {
    kvlm_error err;
    kvlm_model *m = kvlm_model_load(path, NULL, &err);
    if (m) fail_msg("%s loaded; expected an error naming %s", path, needle);
    printf("  %s\n", err.msg);
    assert_int_equal(err.code, code);
    if (!strstr(err.msg, needle)) fail_msg("'%s' does not name %s", err.msg, needle);
}

static void test_bad_hf(void **state) {
    (void)state;
    char *tmp = th_tempdir();
    write_config(tmp, "num_experts_per_tok", json_integer(0));
    expect_load_error(tmp, KVLM_ERR_FORMAT, "num_experts_per_tok = 0");
    write_config(tmp, "num_experts_per_tok", json_integer(9));
    expect_load_error(tmp, KVLM_ERR_FORMAT, "num_experts_per_tok = 9");
    write_config(tmp, "num_local_experts", json_integer(6)); /* the file has 8 */
    expect_load_error(tmp, KVLM_ERR_FORMAT, "model.layers.0.mlp.experts.gate_up_proj");
    write_config(tmp, "intermediate_size", json_integer(16));
    expect_load_error(tmp, KVLM_ERR_FORMAT, "model.layers.0.mlp.experts.gate_up_proj");
    write_config(tmp, "num_attention_heads", json_integer(8)); /* sinks [4] for 8 heads (q_proj first) */
    expect_load_error(tmp, KVLM_ERR_FORMAT, "model.layers.0.self_attn.q_proj.weight");
    write_config(tmp, "swiglu_limit", json_string("seven"));
    expect_load_error(tmp, KVLM_ERR_FORMAT, "swiglu_limit");
    json_t *sc = json_pack("{s:s, s:f, s:f, s:f}", "rope_type", "yarn", "factor", 4.0, "beta_fast", 1.0, "beta_slow", 32.0);
    write_config(tmp, "rope_scaling", sc);
    expect_load_error(tmp, KVLM_ERR_FORMAT, "beta_fast");
    write_config(tmp, "layer_types", json_pack("[s]", "full_attention"));
    expect_load_error(tmp, KVLM_ERR_FORMAT, "layer_types");
    th_rmtree(tmp);
    free(tmp);
}

#define GGUF "tests/fixtures/moe_gguf/gpt-oss-mxfp4.gguf"
#define GGUF_TOL 1e-3 /* f16 / MXFP4 weights, f32 activations (as test_llamacpp_files.c) */

static double row_diff(const float *a, json_t *row, int V) {
    assert_int_equal(json_array_size(row), V);
    double d = 0;
    for (int i = 0; i < V; i++) d = fmax(d, fabs(a[i] - json_number_value(json_array_get(row, (size_t)i))));
    return d;
}

static int argmax(const float *v, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

/* The GGUF file (tools/make_gptoss_gguf.py: gguf-py in the converter's
 * layout, experts MXFP4): the logits at positions around the window's edge
 * and 8 greedy ids with their logits equal the float64 reference of the
 * dequantised weights on every kernel set (llama.cpp's greedy ids on the
 * file are the same 8, recorded in the expected file); its vocabulary
 * splits text as llama.cpp does. */
static void test_gguf(void **state) {
    (void)state;
    json_error_t je;
    json_t *ex = json_load_file("tests/fixtures/moe_gguf/gpt-oss-mxfp4.expected.json", 0, &je);
    if (!ex) fail_msg("%s", je.text);
    json_t *pj = json_object_get(ex, "prompt"), *cp = json_object_get(ex, "check_positions");
    json_t *cl = json_object_get(ex, "check_logits"), *gi = json_object_get(ex, "greedy_ids");
    json_t *gl = json_object_get(ex, "greedy_logits");
    const int n = (int)json_array_size(pj), V = (int)json_integer_value(json_object_get(ex, "vocab"));
    assert_int_equal(n, 136), assert_int_equal(json_array_size(gi), 8);
    assert_true(json_equal(gi, json_object_get(ex, "llama_cpp_greedy_ids")));
    /* the vocabulary's pre-tokenizer "gpt-4o": llama.cpp's ids for a text that tells it from Qwen2's and
     * Tekken's (digit triples, contractions of any case attached, CamelCase) */
    kvlm_error terr;
    kvlm_tokenizer *tok = kvlm_tokenizer_load(GGUF, &terr);
    if (!tok) fail_msg("tokenizer: %s", terr.msg);
    const char *text = json_string_value(json_object_get(ex, "text"));
    json_t *want = json_object_get(ex, "llama_cpp_text_ids");
    int32_t *tid = NULL;
    size_t ntid = 0;
    assert_int_equal(kvlm_tokenizer_encode(tok, text, strlen(text), 0, &tid, &ntid, &terr), 0);
    assert_int_equal(ntid, json_array_size(want));
    for (size_t i = 0; i < ntid; i++) assert_int_equal(tid[i], json_integer_value(json_array_get(want, i)));
    printf("  gpt-4o pre-tokenizer: %zu ids equal llama.cpp's\n", ntid);
    free(tid);
    kvlm_tokenizer_free(tok);
    int32_t ids[136];
    for (int i = 0; i < n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(pj, (size_t)i));
    kvlm_error err;
    kvlm_model *m = kvlm_model_load(GGUF, NULL, &err);
    if (!m) fail_msg("%s", err.msg);
    const kvlm_config *c = kvlm_model_config(m);
    assert_string_equal(c->arch, "gpt-oss");
    assert_int_equal(c->vocab_size, V);
    assert_int_equal(c->n_expert, 8), assert_int_equal(c->n_expert_used, 3), assert_int_equal(c->n_ff_expert, 64);
    assert_int_equal(model_layer_window(m, 0), 128), assert_int_equal(model_layer_window(m, 1), 0);
    assert_int_equal(m->layers[0].moe->gate[0].dtype, KVLM_MXFP4);
    assert_int_equal(m->layers[1].moe->down[7].dtype, KVLM_MXFP4);
    assert_non_null(m->layers[1].moe->router_b);
    assert_float_equal(m->layers[0].moe->limit, 7.0, 0), assert_float_equal(m->layers[0].moe->alpha, 1.702, 1e-6);
    assert_int_equal(m->layers[0].moe->topk_softmax, 1);
    const kvlm_isa isas[] = {KVLM_ISA_SCALAR, KVLM_ISA_AVX2, KVLM_ISA_AVX512};
    float *lg = malloc((size_t)n * V * sizeof *lg);
    for (size_t k = 0; k < 3; k++) {
        if (!kern_cpu_supports(isas[k])) continue;
        kvlm_kv *kv = kvlm_kv_create(m, &(kvlm_kv_options){.dtype = KVLM_F32}, &err);
        kvlm_engine *e = kvlm_engine_create(m, kv, &(kvlm_engine_options){.threads = 2, .isa = isas[k]}, &err);
        assert_non_null(e);
        const int seq = kvlm_kv_seq_new(kv, &err);
        kvlm_batch_item it = {seq, ids, n, 1};
        if (kvlm_engine_step(e, &it, 1, lg, &err)) fail_msg("prefill: %s", err.msg);
        double d = 0;
        for (size_t q = 0; q < json_array_size(cp); q++) {
            const int p = (int)json_integer_value(json_array_get(cp, q));
            d = fmax(d, row_diff(lg + (size_t)p * V, json_array_get(cl, q), V));
        }
        float *last = lg + (size_t)(n - 1) * V;
        for (int g = 0; g < 8; g++) {
            const int32_t want = (int32_t)json_integer_value(json_array_get(gi, (size_t)g));
            d = fmax(d, row_diff(last, json_array_get(gl, (size_t)g), V));
            if (argmax(last, V) != want) fail_msg("%s: greedy step %d: kvlm %d, reference %d", kvlm_isa_name(isas[k]), g,
                                                  argmax(last, V), want);
            it = (kvlm_batch_item){seq, &want, 1, 0};
            if (g < 7 && kvlm_engine_step(e, &it, 1, lg, &err)) fail_msg("decode: %s", err.msg);
            last = lg;
        }
        printf("  gpt-oss-mxfp4.gguf %-7s max|logit diff| %.2e, 8 greedy ids equal\n", kvlm_isa_name(isas[k]), d);
        if (!(d < GGUF_TOL)) fail_msg("%s: %g", kvlm_isa_name(isas[k]), d);
        kvlm_engine_free(e);
        kvlm_kv_free(kv);
    }
    free(lg);
    kvlm_model_free(m);
    json_decref(ex);
}

/* The prompt's 136 tokens then 8 tokens decoded one at a time (ids of the
 * expected file's greedy run) on ISA isa with `threads` engine threads:
 * the decode steps' logits, [8, V]. */
static float *decode_run(kvlm_model *m, kvlm_isa isa, int threads, const int32_t *ids, int n, const int32_t *next,
                         int V) {
    kvlm_error err;
    kvlm_kv *kv = kvlm_kv_create(m, &(kvlm_kv_options){.dtype = KVLM_F32}, &err);
    kvlm_engine *e = kvlm_engine_create(m, kv, &(kvlm_engine_options){.threads = threads, .isa = isa}, &err);
    assert_non_null(e);
    const int seq = kvlm_kv_seq_new(kv, &err);
    float *lg = malloc((size_t)9 * V * sizeof *lg);
    kvlm_batch_item it = {seq, ids, n, 0};
    if (kvlm_engine_step(e, &it, 1, lg, &err)) fail_msg("prefill: %s", err.msg);
    for (int g = 0; g < 8; g++) {
        it = (kvlm_batch_item){seq, &next[g], 1, 0};
        if (kvlm_engine_step(e, &it, 1, lg + (size_t)g * V, &err)) fail_msg("decode: %s", err.msg);
    }
    kvlm_engine_free(e);
    kvlm_kv_free(kv);
    return lg;
}

/* Decode on avx512-vnni (the MXFP4 table kernel on int8 activations): with
 * 2 threads the experts' items read each expert's inputs prepared once per
 * region (moe_ffn.c), with 1 thread every item prepares its own; the
 * logits of 8 decode steps are the same bits, and the greedy ids of the
 * first 7 steps are the reference's. */
static void test_gguf_int8_decode(void **state) {
    (void)state;
    if (!kern_cpu_supports(KVLM_ISA_AVX512_VNNI)) skip();
    json_error_t je;
    json_t *ex = json_load_file("tests/fixtures/moe_gguf/gpt-oss-mxfp4.expected.json", 0, &je);
    if (!ex) fail_msg("%s", je.text);
    json_t *pj = json_object_get(ex, "prompt"), *gi = json_object_get(ex, "greedy_ids");
    const int n = (int)json_array_size(pj), V = (int)json_integer_value(json_object_get(ex, "vocab"));
    int32_t ids[136], next[8];
    assert_int_equal(n, 136);
    for (int i = 0; i < n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(pj, (size_t)i));
    for (int g = 0; g < 8; g++) next[g] = (int32_t)json_integer_value(json_array_get(gi, (size_t)g));
    kvlm_error err;
    kvlm_model *m = kvlm_model_load(GGUF, NULL, &err);
    if (!m) fail_msg("%s", err.msg);
    /* the experts' matrices carry the loader's smallest scale bytes (gguf-py
     * wrote 121..123 here; the rows of 64 values are too short for the
     * kernel's exponent form, tests/test_quant_int8.c tests that) */
    assert_int_equal(m->layers[0].moe->gate[0].e8m0_min, 123);
    assert_int_equal(m->layers[1].moe->down[7].e8m0_min, 121);
    float *two = decode_run(m, KVLM_ISA_AVX512_VNNI, 2, ids, n, next, V);
    float *one = decode_run(m, KVLM_ISA_AVX512_VNNI, 1, ids, n, next, V);
    double d = 0;
    for (size_t i = 0; i < (size_t)8 * V; i++) d = fmax(d, fabs((double)two[i] - one[i]));
    int same = 0;
    for (int g = 0; g < 7; g++) same += argmax(two + (size_t)g * V, V) == next[g + 1];
    printf("  avx512-vnni decode, 2 threads vs 1: max|logit diff| %.2e, %d of 7 greedy ids equal\n", d, same);
    assert_memory_equal(two, one, (size_t)8 * V * sizeof(float));
    assert_int_equal(same, 7);
    free(two), free(one);
    kvlm_model_free(m);
    json_decref(ex);
}

/* The loader notes each MXFP4 tensor's smallest scale byte (what the
 * decode kernel's exponent form needs), equal to a scan of its blocks. */
static void test_gguf_e8m0_min(void **state) {
    (void)state;
    tensor_set ts = {0};
    gguf_meta meta;
    kvlm_error err;
    if (gguf_load(&ts, &meta, GGUF, &err)) fail_msg("%s", err.msg);
    int seen = 0;
    for (int i = 0; i < ts.n_items; i++) {
        const tensor *t = &ts.items[i].t;
        if (t->dtype != KVLM_MXFP4) {
            assert_int_equal(t->e8m0_min, 0);
            continue;
        }
        size_t n = 1;
        for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
        unsigned least = 0xFF;
        for (size_t b = 0; b < n / QK; b++) {
            const unsigned e = ((const unsigned char *)t->data)[b * sizeof(blk_mxfp4)];
            if (e < least) least = e;
        }
        assert_int_equal(t->e8m0_min, least);
        assert_true(least > 0);
        seen++;
    }
    assert_true(seen >= 3);
    gguf_meta_free(&meta);
    tensor_set_free(&ts);
}

/* Bad GGUF files, each a byte patch of the good one: the position just
 * after a string key (a GGUF string: u64 length, then the bytes). */
static size_t after_string(const char *buf, size_t len, const char *key) {
    const size_t k = strlen(key);
    for (size_t i = 8; i + k <= len; i++)
        if (!memcmp(buf + i, key, k)) {
            uint64_t n;
            memcpy(&n, buf + i - 8, 8);
            if (n == k) return i + k;
        }
    fail_msg("%s not found", key);
    return 0;
}

static void test_bad_gguf(void **state) {
    (void)state;
    size_t len;
    char *good = th_read_file(GGUF, &len), *buf = malloc(len), *tmp = th_tempdir(), path[512];
    assert_non_null(good);
    snprintf(path, sizeof path, "%s/bad.gguf", tmp);
    /* expert_used_count (u32) of 0, then of 9 > expert_count 8 */
    const size_t used = after_string(good, len, "gpt-oss.expert_used_count");
    const uint32_t values[] = {0, 9};
    for (int i = 0; i < 2; i++) {
        memcpy(buf, good, len);
        memcpy(buf + used + 4, &values[i], 4);
        assert_int_equal(th_write_file(path, buf, len), 0);
        expect_load_error(path, KVLM_ERR_FORMAT, "gpt-oss.expert_used_count");
    }
    /* missing tensors: a name changed */
    const char *gone[] = {"blk.1.attn_sinks.weight", "blk.0.ffn_up_exps.weight", "blk.0.ffn_gate_inp.bias",
                          "blk.1.ffn_down_exps.bias", "blk.0.attn_output.bias"};
    for (size_t i = 0; i < sizeof gone / sizeof *gone; i++) {
        memcpy(buf, good, len);
        buf[after_string(good, len, gone[i]) - 1] = 'X';
        assert_int_equal(th_write_file(path, buf, len), 0);
        char want[96];
        snprintf(want, sizeof want, "missing tensor '%s'", gone[i]);
        expect_load_error(path, KVLM_ERR_FORMAT, want);
    }
    /* misshaped: ffn_gate_exps.bias [8, 64] with 4 experts (n_dims u32, then ne[0], ne[1]) */
    memcpy(buf, good, len);
    const uint64_t four = 4;
    memcpy(buf + after_string(good, len, "blk.0.ffn_gate_exps.bias") + 4 + 8, &four, 8);
    assert_int_equal(th_write_file(path, buf, len), 0);
    expect_load_error(path, KVLM_ERR_FORMAT, "tensor 'blk.0.ffn_gate_exps.bias' has shape [4, 64], expected [8, 64]");
    /* attn_sinks of 8 heads (n_dims 1, ne[0]) */
    memcpy(buf, good, len);
    const uint64_t eight = 8;
    memcpy(buf + after_string(good, len, "blk.0.attn_sinks.weight") + 4, &eight, 8);
    assert_int_equal(th_write_file(path, buf, len), 0);
    expect_load_error(path, KVLM_ERR_FORMAT, "blk.0.attn_sinks.weight");
    /* the command line: exit 2, the message names the tensor */
    char args[700];
    snprintf(args, sizeof args, "run -m %s -p hi -n 1", path);
    const th_cli_case cli[] = {{args, 2, "blk.0.attn_sinks.weight"}};
    th_expect_cli(cli, 1);
    free(buf);
    free(good);
    th_rmtree(tmp);
    free(tmp);
}

/* The harmony chat template ends the assistant's turn with <|return|>
 * (an answer) or <|call|> (a tool call), not with the <|end|> that closes
 * each of its messages (the analysis message before the answer among
 * them); Phi-3's with <|end|> alone. */
static void test_turn_end(void **state) {
    (void)state;
    chat_template t;
    kvlm_error err;
    const char *f = "tests/fixtures/templates/openai-gpt-oss-120b.jinja";
    if (chat_template_load(&t, "models/gpt2-tokenizer", "models/gpt2-tokenizer", f, &err)) fail_msg("%s", err.msg);
    const char *ends[CHAT_MAX_TURN_ENDS];
    assert_int_equal(chat_turn_ends(&t, ends), 2);
    assert_string_equal(ends[0], "<|return|>");
    assert_string_equal(ends[1], "<|call|>");
    chat_template_free(&t);
    f = "tests/fixtures/templates/microsoft-Phi-3.5-mini-instruct.jinja";
    if (chat_template_load(&t, "models/gpt2-tokenizer", "models/gpt2-tokenizer", f, &err)) fail_msg("%s", err.msg);
    assert_int_equal(chat_turn_ends(&t, ends), 1);
    assert_string_equal(ends[0], "<|end|>");
    chat_template_free(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference),
        cmocka_unit_test(test_bad_hf),
        cmocka_unit_test(test_gguf),
        cmocka_unit_test(test_gguf_int8_decode),
        cmocka_unit_test(test_gguf_e8m0_min),
        cmocka_unit_test(test_bad_gguf),
        cmocka_unit_test(test_turn_end),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
