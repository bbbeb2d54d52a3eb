/*
 * Mixtures of experts (Qwen3-MoE, Qwen2-MoE with its shared expert,
 * Mixtral) against the float64 PyTorch reference fixtures of
 * tests/fixtures/moe (tools/make_moe_fixtures.py): prefill logits and 8
 * cached decode steps on every kernel set within 1e-4 (f32 cache); two
 * sequences in one step (their rows grouped by expert together) give each
 * one's logits alone; the GGUF files of tests/fixtures/moe_gguf (gguf-py in
 * llama.cpp's converter layout, quantised by llama-quantize) decode the
 * reference's greedy ids; bad configurations and expert tensors fail to
 * load with a message naming the key or tensor.
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

#define FIX "tests/fixtures/moe/"
static const char *const variants[] = {"qwen3_moe", "qwen2_moe", "mixtral"};

static void test_reference(void **state) {
    (void)state;
    for (size_t v = 0; v < 3; v++) {
        char dir[256], path[256];
        snprintf(dir, sizeof dir, FIX "%s", variants[v]);
        snprintf(path, sizeof path, FIX "%s.expected.json", variants[v]);
        th_expected ex;
        if (th_expected_load(path, &ex)) fail_msg("%s: cannot read", path);
        kvlm_error err;
        kvlm_model *m = kvlm_model_load(dir, NULL, &err);
        if (!m) fail_msg("%s: %s", dir, err.msg);
        const kvlm_config *c = kvlm_model_config(m);
        assert_int_equal(c->n_expert, 8);
        assert_int_equal(c->n_expert_used, v == 0 ? 3 : 2);
        assert_int_equal(c->n_ff_expert, 16);
        assert_int_equal(c->n_ff_shared, v == 1 ? 24 : 0);
        assert_int_equal(c->expert_norm_topk, v != 1);
        /* every tensor of the file counted once; a token uses k of 8 experts of 3 x 16 x 32 */
        uint64_t file_bytes, file_params;
        assert_int_equal(kvlm_weight_bytes(dir, &file_bytes, &file_params, &err), 0);
        assert_int_equal(kvlm_model_param_count(m), file_params);
        assert_int_equal(kvlm_model_active_param_count(m), file_params - 2u * (8u - (unsigned)c->n_expert_used) * 3u * 16u * 32u);
        /* decode reads, per layer, q k v o (3,072 floats), the router (256), k experts (1,536 each) and
         * the shared expert (2,304); then the head (4,096) and one embedding row (32) */
        const size_t per_layer = 3072 + 256 + (size_t)c->n_expert_used * 1536 + (v == 1 ? 2304 : 0);
        assert_int_equal(kvlm_model_decode_bytes(m), 4 * (2 * per_layer + 4096 + 32));
        const kvlm_isa isas[] = {KVLM_ISA_SCALAR, KVLM_ISA_AVX2, KVLM_ISA_AVX512};
        for (size_t i = 0; i < 3; i++) {
            if (!kern_cpu_supports(isas[i])) continue;
            const double d = th_parity_run(m, &ex, isas[i], KVLM_F32, 0);
            printf("  %-10s %-7s max|diff| %.2e\n", variants[v], kvlm_isa_name(isas[i]), d);
            if (!(d < 1e-4)) fail_msg("%s %s: %g", variants[v], kvlm_isa_name(isas[i]), d);
        }
        th_expected_free(&ex);
        kvlm_model_free(m);
    }
}

/* Runs items on a fresh cache and returns the logits of every position. */
static float *step_logits(kvlm_model *m, const int32_t *const *toks, const int *n, int n_seq) {
    kvlm_error err;
    kvlm_kv_options ko = kvlm_kv_default_params();
    ko.dtype = KVLM_F32;
    ko.max_seqs = 2;
    kvlm_kv *kv = kvlm_kv_create(m, &ko, &err);
    assert_non_null(kv);
    kvlm_engine_options eo = kvlm_engine_default_params();
    eo.threads = 2;
    kvlm_engine *e = kvlm_engine_create(m, kv, &eo, &err);
    assert_non_null(e);
    kvlm_batch_item items[2];
    for (int s = 0; s < n_seq; s++) {
        const int seq = kvlm_kv_seq_new(kv, &err);
        if (seq < 0) fail_msg("seq: %s", err.msg);
        items[s] = (kvlm_batch_item){.seq = seq, .tokens = toks[s], .n_tokens = n[s], .logits_all = 1};
    }
    float *logits = malloc(kvlm_engine_logits_size(e, items, n_seq) * sizeof(float));
    if (kvlm_engine_step(e, items, n_seq, logits, &err)) fail_msg("step: %s", err.msg);
    kvlm_engine_free(e);
    kvlm_kv_free(kv);
    return logits;
}

/* Two sequences in one step route 16 rows together; each sequence's
 * logits equal its own step's within 1e-5 (each row's sum runs in rank
 * order, so only a kernel's batch form could differ; measured: 0). */
static void test_batch_grouping(void **state) {
    (void)state;
    const int32_t a[] = {1, 100, 17, 42, 103, 0, 90, 88, 5, 6}, b[] = {3, 64, 127, 123, 2, 31};
    const int na = 10, nb = 6;
    for (size_t v = 0; v < 3; v++) {
        char dir[256];
        snprintf(dir, sizeof dir, FIX "%s", variants[v]);
        kvlm_error err;
        kvlm_model *m = kvlm_model_load(dir, NULL, &err);
        if (!m) fail_msg("%s: %s", dir, err.msg);
        const int V = kvlm_model_config(m)->vocab_size;
        const int32_t *both[] = {a, b}, *ta[] = {a}, *tb[] = {b};
        const int nboth[] = {na, nb};
        float *lab = step_logits(m, both, nboth, 2), *la = step_logits(m, ta, &na, 1), *lb = step_logits(m, tb, &nb, 1);
        double d = 0;
        for (int i = 0; i < na * V; i++) d = fmax(d, fabs(lab[i] - la[i]));
        for (int i = 0; i < nb * V; i++) d = fmax(d, fabs(lab[na * V + i] - lb[i]));
        printf("  %-10s batch of 2 vs alone: max|diff| %.2e\n", variants[v], d);
        assert_true(d < 1e-5);
        free(lab), free(la), free(lb);
        kvlm_model_free(m);
    }
}

/* A 40-token prefill (rows per expert well above moe_ffn.c's SMALL_ROWS:
 * one team-wide matmul per expert) against the same tokens decoded one
 * at a time (the two-region schedule for a few rows): the same logits to
 * 1e-4 at every position (the attention kernels of prefill tiles and
 * decode rows round differently too; measured about 1.5e-5). */
static void test_schedules(void **state) {
    (void)state;
    enum { N = 40 };
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (int32_t)((i * 37 + 11) % 128);
    for (size_t v = 0; v < 3; v++) {
        char dir[256];
        snprintf(dir, sizeof dir, FIX "%s", variants[v]);
        kvlm_error err;
        kvlm_model *m = kvlm_model_load(dir, NULL, &err);
        if (!m) fail_msg("%s: %s", dir, err.msg);
        const int V = kvlm_model_config(m)->vocab_size, n = N;
        const int32_t *t[] = {ids};
        float *pre = step_logits(m, t, &n, 1);
        kvlm_kv_options ko = kvlm_kv_default_params();
        ko.dtype = KVLM_F32;
        kvlm_kv *kv = kvlm_kv_create(m, &ko, &err);
        kvlm_engine_options eo = kvlm_engine_default_params();
        eo.threads = 2;
        kvlm_engine *e = kvlm_engine_create(m, kv, &eo, &err);
        const int seq = kvlm_kv_seq_new(kv, &err);
        float *one = malloc((size_t)V * sizeof(float));
        double d = 0;
        for (int i = 0; i < N; i++) {
            kvlm_batch_item it = {.seq = seq, .tokens = &ids[i], .n_tokens = 1, .logits_all = 0};
            if (kvlm_engine_step(e, &it, 1, one, &err)) fail_msg("step %d: %s", i, err.msg);
            for (int k = 0; k < V; k++) d = fmax(d, fabs(one[k] - pre[(size_t)i * V + k]));
        }
        printf("  %-10s prefill of %d vs one token a step: max|diff| %.2e\n", variants[v], N, d);
        assert_true(d < 1e-4);
        free(one);
        free(pre);
        kvlm_engine_free(e);
        kvlm_kv_free(kv);
        kvlm_model_free(m);
    }
}

/* Writes dir/config.json = the fixture's with key set to value, and links
 * its weights. */
static void write_config(const char *tmp, const char *variant, const char *key, int value) {
    char src[256], dst[512], w[512], wd[512];
    snprintf(src, sizeof src, FIX "%s/config.json", variant);
    json_error_t je;
    json_t *root = json_load_file(src, 0, &je);
    assert_non_null(root);
    json_object_set_new(root, key, json_integer(value));
    snprintf(dst, sizeof dst, "%s/config.json", tmp);
    assert_int_equal(json_dump_file(root, dst, 0), 0);
    json_decref(root);
    char *cwd = realpath(".", NULL);
    snprintf(w, sizeof w, "%s/" FIX "%s/model.safetensors", cwd, variant);
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
    write_config(tmp, "qwen3_moe", "num_experts_per_tok", 0);
    expect_load_error(tmp, KVLM_ERR_FORMAT, "num_experts_per_tok = 0");
    write_config(tmp, "qwen3_moe", "num_experts_per_tok", 9);
    expect_load_error(tmp, KVLM_ERR_FORMAT, "num_experts_per_tok = 9");
    write_config(tmp, "mixtral", "num_local_experts", 9); /* the file has 8: expert 8 is missing */
    expect_load_error(tmp, KVLM_ERR_FORMAT, "model.layers.0.block_sparse_moe.gate.weight");
    write_config(tmp, "qwen2_moe", "moe_intermediate_size", 32); /* misshaped experts */
    expect_load_error(tmp, KVLM_ERR_FORMAT, "model.layers.0.mlp.experts.0.gate_proj.weight");
    write_config(tmp, "qwen2_moe", "decoder_sparse_step", 2);
    expect_load_error(tmp, KVLM_ERR_UNSUPPORTED, "decoder_sparse_step");
    th_rmtree(tmp);
    free(tmp);
}

/* Bad GGUF files, each a byte patch of a good one: position of the bytes
 * just after the string key (a GGUF string: u64 length, then the bytes). */
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

static void write_patched(const char *path, const char *buf, size_t len) {
    assert_int_equal(th_write_file(path, buf, len), 0);
}

#define GOOD "tests/fixtures/moe_gguf/qwen3moe-q4_k_m.gguf"

static void test_bad_gguf(void **state) {
    (void)state;
    size_t len;
    char *good = th_read_file(GOOD, &len), *buf = malloc(len), *tmp = th_tempdir(), path[512];
    assert_non_null(good);
    snprintf(path, sizeof path, "%s/bad.gguf", tmp);
    /* expert_used_count (type u32, then the value) of 0, then of 5 > expert_count 4 */
    const size_t used = after_string(good, len, "qwen3moe.expert_used_count");
    const uint32_t values[] = {0, 5};
    for (int i = 0; i < 2; i++) {
        memcpy(buf, good, len);
        memcpy(buf + used + 4, &values[i], 4);
        write_patched(path, buf, len);
        expect_load_error(path, KVLM_ERR_FORMAT, "qwen3moe.expert_used_count");
    }
    /* expert_count 0 in a qwen3moe file */
    memcpy(buf, good, len);
    memset(buf + after_string(good, len, "qwen3moe.expert_count") + 4, 0, 4);
    write_patched(path, buf, len);
    expect_load_error(path, KVLM_ERR_FORMAT, "qwen3moe.expert_count");
    /* a missing expert tensor: its name changed */
    memcpy(buf, good, len);
    buf[after_string(good, len, "blk.0.ffn_down_exps.weight") - 1] = 'X';
    write_patched(path, buf, len);
    expect_load_error(path, KVLM_ERR_FORMAT, "missing tensor 'blk.0.ffn_down_exps.weight'");
    /* a misshaped one: ffn_up_exps with 2 experts (n_dims u32, then ne[0..2]) */
    memcpy(buf, good, len);
    const uint64_t two = 2;
    memcpy(buf + after_string(good, len, "blk.0.ffn_up_exps.weight") + 4 + 16, &two, 8);
    write_patched(path, buf, len);
    expect_load_error(path, KVLM_ERR_FORMAT, "tensor 'blk.0.ffn_up_exps.weight' has shape [2, 256, 256], expected [4, 256, 256]");
    /* the command line: exit 2, the message names the tensor */
    char args[700];
    snprintf(args, sizeof args, "run -m %s -p hi -n 1", path);
    const th_cli_case cli[] = {{args, 2, "blk.0.ffn_up_exps.weight"}};
    th_expect_cli(cli, 1);
    free(buf);
    free(good);
    th_rmtree(tmp);
    free(tmp);
}

/* The synthetic mixtures of experts: shapes, the depth suffix, counts. */
static void test_synthetic(void **state) {
    (void)state;
    kvlm_error err;
    kvlm_model *m = kvlm_model_synthetic("qwen3moe-tiny:1", KVLM_Q8_0, 7, NULL, &err);
    if (!m) fail_msg("%s", err.msg);
    const kvlm_config *c = kvlm_model_config(m);
    assert_string_equal(c->arch, "qwen3moe");
    assert_int_equal(c->n_layer, 1);
    assert_int_equal(c->n_expert, 8);
    assert_int_equal(c->n_expert_used, 2);
    /* embedding 256 x 64; attention 4 x 64 x 64 ... : q, o 64 x 64, k, v 32 x 64; router 8 x 64; experts 3 x 32 x 64 */
    const size_t shared = 256 * 64 + 64 + 2 * 64 + 2 * 16 + 2 * 4096 + 2 * 2048 + 512;
    assert_int_equal(kvlm_model_param_count(m), shared + 8 * 6144);
    assert_int_equal(kvlm_model_active_param_count(m), shared + 2 * 6144);
    const int32_t ids[] = {1, 2, 3, 4};
    const int n = 4;
    const int32_t *t[] = {ids};
    float *lg = step_logits(m, t, &n, 1);
    for (int i = 0; i < 4 * 256; i++) assert_true(isfinite(lg[i]));
    free(lg);
    kvlm_model_free(m);
    assert_null(kvlm_model_synthetic("qwen3moe-tiny:3", KVLM_F32, 7, NULL, &err));
    assert_non_null(strstr(err.msg, "layer count"));
    assert_null(kvlm_model_synthetic("llama-tiny:1", KVLM_F32, 7, NULL, &err));
    assert_non_null(strstr(err.msg, "only the mixtures of experts"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference),
        cmocka_unit_test(test_batch_grouping),
        cmocka_unit_test(test_schedules),
        cmocka_unit_test(test_bad_hf),
        cmocka_unit_test(test_bad_gguf),
        cmocka_unit_test(test_synthetic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
