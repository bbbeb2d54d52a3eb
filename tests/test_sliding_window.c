/*
 * Sliding-window attention and the KV blocks it releases, plus the model
 * files of the new families that kvlm refuses or reads specially.
 *
 * The window fixture is tests/fixtures/llama/mistral_swa (Mistral,
 * sliding_window 5, float64 reference logits from tools/llama_reference.py):
 * with 4-token blocks the 16 positions of prompt + decode cross four block
 * boundaries, so the cache gives blocks back during the run. Checked: the
 * logits of prefill and of every decode step (1e-4, as every parity test),
 * the exact used / cached block counts after each step, the cache's
 * invariants, a truncation into released blocks refused, a prefix-cache hit
 * on released blocks giving the same logits, and a block released by one
 * sequence staying intact for the fork that still holds it.
 *
 * Refusals (each names the field): a GGUF general.architecture kvlm does
 * not run, LongRoPE factors of the wrong length, a rope_scaling type kvlm
 * does not know, a rope_scaling context length that is no integer in
 * range, a partial_rotary_factor that rotates no even count, a window
 * longer than the context; Qwen's use_sliding_window from
 * max_window_layers on gives per-layer windows.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kvlm.h"
#include "model/model.h"
#include "runtime/kvcache.h"

#define FIX "tests/fixtures/llama/"
#define TOL 1e-4

static double max_diff(const float *a, const float *b, int n) {
    double w = 0;
    for (int i = 0; i < n; i++) w = fmax(w, fabs((double)a[i] - b[i]));
    return w;
}

static void step(kvlm_engine *e, int seq, const int32_t *toks, int n, int all, float *logits) {
    kvlm_error err;
    kvlm_batch_item it = {seq, toks, n, all};
    if (kvlm_engine_step(e, &it, 1, logits, &err)) fail_msg("step: %s", err.msg);
}

static void check_invariants(const kvlm_kv *kv) {
    kvlm_error err;
    if (kv_check_invariants(kv, &err)) fail_msg("invariants: %s", err.msg);
}

static kvlm_kv_stats stats(const kvlm_kv *kv) {
    kvlm_kv_stats st;
    kvlm_kv_get_stats(kv, &st);
    return st;
}

/* Used blocks after a length of 8, 9, ..., 16 tokens with W = 5 and 4-token
 * blocks: blocks up to position len - 5 are released (none before len 8). */
static const size_t used_at[9] = {1, 2, 2, 2, 1, 2, 2, 2, 1};

static void run_window(kvlm_model *m, const th_expected *ex, kvlm_isa isa) {
    kvlm_error err;
    const int V = ex->vocab;
    kvlm_kv *kv = kvlm_kv_create(m, &(kvlm_kv_options){.dtype = KVLM_F32, .block_size = 4, .max_seqs = 2}, &err);
    assert_non_null(kv);
    kvlm_engine *e = kvlm_engine_create(m, kv, &(kvlm_engine_options){.threads = 2, .isa = isa}, &err);
    assert_non_null(e);
    float *lg = malloc((size_t)TH_NPOS * V * sizeof(float));
    int seq = kvlm_kv_seq_new(kv, &err);
    step(e, seq, ex->prompt, TH_NPOS, 1, lg);
    double worst = max_diff(lg, ex->prefill, TH_NPOS * V);
    assert_int_equal(stats(kv).blocks_used, used_at[0]);
    for (int j = 0; j < TH_NPOS; j++) {
        step(e, seq, &ex->decode[j], 1, 0, lg);
        worst = fmax(worst, max_diff(lg, ex->dec + (size_t)j * V, V));
        assert_int_equal(stats(kv).blocks_used, used_at[j + 1]);
        check_invariants(kv);
    }
    printf("  mistral_swa %-6s block 4: max|diff| %.2e\n", kvlm_isa_name(isa), worst);
    if (worst >= TOL) fail_msg("window parity %g", worst);
    /* Blocks 0..2 (positions 0..11) are full and indexed: on the LRU list. */
    const int *table;
    assert_int_equal(kv_seq_blocks(kv, seq, &table), 4);
    assert_int_equal(table[0], -1), assert_int_equal(table[2], -1), assert_true(table[3] >= 0);
    assert_int_equal(stats(kv).blocks_cached, 3);

    /* Truncation needing released positions is refused; 16 (no-op) is fine. */
    assert_int_equal(kvlm_kv_seq_truncate(kv, seq, 10, &err), KVLM_ERR_ARG);
    assert_non_null(strstr(err.msg, "sliding window of 5"));
    assert_non_null(strstr(err.msg, "at least 16"));
    assert_int_equal(kvlm_kv_seq_truncate(kv, seq, 16, &err), 0);

    /* A new sequence finds the released blocks in the prefix cache and its
     * last 4 tokens give the logits after the whole context. Of the 12
     * cached tokens its window (positions 8.. at 12 tokens) reads only
     * block 2: blocks 0 and 1 are matched (their token ids verify the
     * chain) but not taken, and stay cached. */
    int32_t ctx[2 * TH_NPOS];
    memcpy(ctx, ex->prompt, sizeof ex->prompt);
    memcpy(ctx + TH_NPOS, ex->decode, sizeof ex->decode);
    int n_cached = -1, s2 = kvlm_kv_seq_new_prefixed(kv, ctx, 2 * TH_NPOS, &n_cached, &err);
    assert_true(s2 >= 0);
    assert_int_equal(n_cached, 12);
    assert_int_equal(stats(kv).blocks_cached, 2);
    assert_int_equal(stats(kv).blocks_used, 2); /* seq's block 3 and s2's block 2 */
    assert_int_equal(kv_seq_blocks(kv, s2, &table), 3);
    assert_int_equal(table[0], -1), assert_int_equal(table[1], -1), assert_true(table[2] >= 0);
    check_invariants(kv);
    step(e, s2, ctx + 12, 4, 0, lg);
    double d = max_diff(lg, ex->dec + (size_t)(TH_NPOS - 1) * V, V);
    if (d >= TOL) fail_msg("prefix hit after release: %g", d);
    assert_int_equal(stats(kv).blocks_used, 2);
    assert_int_equal(stats(kv).blocks_cached, 3);
    check_invariants(kv);
    /* Truncated to 0 (the scheduler's recompute), the context runs again. */
    assert_int_equal(kvlm_kv_seq_truncate(kv, s2, 0, &err), 0);
    step(e, s2, ctx, 2 * TH_NPOS, 0, lg);
    d = max_diff(lg, ex->dec + (size_t)(TH_NPOS - 1) * V, V);
    if (d >= TOL) fail_msg("recompute after release: %g", d);
    check_invariants(kv);
    free(lg);
    kvlm_engine_free(e);
    kvlm_kv_free(kv);
}

/* The windowed fixture (window 5) and its reference logits. */
static kvlm_model *load_swa(th_expected *ex) {
    if (th_expected_load(FIX "mistral_swa.expected.json", ex)) fail_msg("mistral_swa.expected.json");
    kvlm_error err;
    kvlm_model *m = kvlm_model_load(FIX "mistral_swa", NULL, &err);
    if (!m) fail_msg("%s", err.msg);
    return m;
}

static void test_window_release(void **state) {
    (void)state;
    th_expected ex;
    kvlm_model *m = load_swa(&ex);
    assert_int_equal(kvlm_model_config(m)->sliding_window, 5);
    run_window(m, &ex, KVLM_ISA_SCALAR);
    if (kvlm_isa_best() != KVLM_ISA_SCALAR) run_window(m, &ex, kvlm_isa_best());
    th_expected_free(&ex);
    kvlm_model_free(m);
}

/* A block one sequence releases stays with the fork that still reads it. */
static void shared_release(kvlm_model *m, const th_expected *ex, int no_prefix_cache) {
    kvlm_error err;
    const int V = ex->vocab;
    kvlm_kv *kv = kvlm_kv_create(
        m, &(kvlm_kv_options){.dtype = KVLM_F32, .block_size = 4, .max_seqs = 2, .no_prefix_cache = no_prefix_cache},
        &err);
    kvlm_engine *e = kvlm_engine_create(m, kv, &(kvlm_engine_options){.threads = 1}, &err);
    assert_non_null(e);
    float *lg = malloc((size_t)V * sizeof(float));
    int a = kvlm_kv_seq_new(kv, &err);
    step(e, a, ex->prompt, 4, 0, lg);
    int b = kvlm_kv_seq_fork(kv, a, &err);
    assert_true(b >= 0);
    assert_int_equal(stats(kv).blocks_used, 1);
    step(e, a, ex->prompt + 4, 4, 0, lg); /* a: 8 tokens, gives block 0 back */
    const int *ta, *tb;
    kv_seq_blocks(kv, a, &ta);
    kv_seq_blocks(kv, b, &tb);
    assert_int_equal(ta[0], -1);
    assert_true(tb[0] >= 0);
    assert_int_equal(stats(kv).blocks_used, 2);
    assert_int_equal(stats(kv).blocks_shared, 0);
    check_invariants(kv);
    /* b goes on from its 4 tokens over the block a released. */
    step(e, b, ex->prompt + 4, 4, 0, lg);
    double d = max_diff(lg, ex->prefill + (size_t)(TH_NPOS - 1) * V, V);
    if (d >= TOL) fail_msg("fork after release: %g", d);
    kvlm_kv_seq_free(kv, b);
    kvlm_kv_seq_free(kv, a);
    kvlm_kv_stats st = stats(kv);
    assert_int_equal(st.blocks_used, 0);
    /* Full indexed blocks stay cached for reuse (a's two; b's copy of a's
     * second block was not registered twice), unless there is no prefix
     * cache. */
    assert_int_equal(st.blocks_cached, no_prefix_cache ? 0 : 2);
    assert_int_equal(st.blocks_free, st.blocks_total - st.blocks_cached);
    check_invariants(kv);
    free(lg);
    kvlm_engine_free(e);
    kvlm_kv_free(kv);
}

static void test_window_shared_blocks(void **state) {
    (void)state;
    th_expected ex;
    kvlm_model *m = load_swa(&ex);
    shared_release(m, &ex, 0);
    shared_release(m, &ex, 1);
    th_expected_free(&ex);
    kvlm_model_free(m);
}

/* With reserve_tokens nothing is released (the reservation is kept), and
 * attention still applies the window. */
static void test_window_reserved(void **state) {
    (void)state;
    th_expected ex;
    kvlm_model *m = load_swa(&ex);
    kvlm_error err;
    kvlm_kv *kv = kvlm_kv_create(m, &(kvlm_kv_options){.block_size = 4, .reserve_tokens = 64}, &err);
    kvlm_engine *e = kvlm_engine_create(m, kv, &(kvlm_engine_options){.threads = 1}, &err);
    float *lg = malloc((size_t)TH_NPOS * ex.vocab * sizeof(float));
    int seq = kvlm_kv_seq_new(kv, &err);
    step(e, seq, ex.prompt, TH_NPOS, 1, lg);
    double w = max_diff(lg, ex.prefill, TH_NPOS * ex.vocab);
    for (int j = 0; j < TH_NPOS; j++) {
        step(e, seq, &ex.decode[j], 1, 0, lg);
        w = fmax(w, max_diff(lg, ex.dec + (size_t)j * ex.vocab, ex.vocab));
    }
    if (w >= TOL) fail_msg("reserved window parity %g", w);
    assert_int_equal(stats(kv).blocks_used, 16);
    check_invariants(kv);
    free(lg);
    kvlm_engine_free(e);
    kvlm_kv_free(kv);
    kvlm_model_free(m);
    th_expected_free(&ex);
}

/* The configs of the new families as kvlm reads them. */
static void test_family_configs(void **state) {
    (void)state;
    kvlm_config c;
    kvlm_error err;
    assert_int_equal(kvlm_config_load(FIX "qwen3", &c, &err), 0);
    assert_string_equal(c.arch, "qwen3");
    assert_int_equal(c.qk_norm, 1), assert_int_equal(c.head_dim, 24), assert_int_equal(c.n_embd, 64);
    assert_int_equal(c.tie_embeddings, 1), assert_int_equal(c.qkv_bias, 0), assert_int_equal(c.sliding_window, 0);
    assert_int_equal(kvlm_config_load(FIX "phi3", &c, &err), 0);
    assert_string_equal(c.arch, "phi3");
    assert_int_equal(c.sliding_window, 7), assert_int_equal(c.qk_norm, 0), assert_int_equal(c.rope_interleaved, 0);
    assert_int_equal(kvlm_config_load(FIX "mqa", &c, &err), 0);
    assert_int_equal(c.sliding_window, 0);
    assert_int_equal(kvlm_config_load("tests/fixtures/llama_gguf/phi3_q8_0.gguf", &c, &err), 0);
    assert_string_equal(c.arch, "phi3");
    assert_int_equal(c.sliding_window, 7), assert_int_equal(c.rope_interleaved, 0);
    assert_int_equal(kvlm_config_load("tests/fixtures/llama_gguf/mistral_swa_q8_0.gguf", &c, &err), 0);
    assert_string_equal(c.arch, "llama");
    assert_int_equal(c.sliding_window, 5), assert_int_equal(c.rope_interleaved, 1);
    assert_int_equal(kvlm_config_load("tests/fixtures/llama_gguf/qwen3_q8_0.gguf", &c, &err), 0);
    assert_int_equal(c.qk_norm, 1), assert_int_equal(c.head_dim, 24), assert_int_equal(c.tie_embeddings, 1);
    /* Phi-3's fused matrices are counted once: the same parameters as the
     * split layout would have. */
    kvlm_model *m = kvlm_model_load(FIX "phi3", NULL, &err);
    assert_non_null(m);
    const size_t C = 64, F = 96, qkv = (4 + 2 * 2) * 16, V = 256;
    assert_int_equal(kvlm_model_param_count(m), 2 * V * C + C + 2 * (2 * C + qkv * C + C * 4 * 16 + 3 * F * C));
    kvlm_model_free(m);
}

/* config.json of a fixture with one field replaced (value: JSON text, or
 * NULL to delete it), written beside a copy of its weights in dir. */
static void edited_copy(const char *variant, const char *dir, const char *key, const char *value) {
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

static void expect_refused(const char *path, int code, const char *a, const char *b) {
    kvlm_error err;
    kvlm_model *m = kvlm_model_load(path, NULL, &err);
    if (m) fail_msg("%s loaded; expected '%s'", path, a);
    if (err.code != code || !strstr(err.msg, a) || (b && !strstr(err.msg, b)))
        fail_msg("%s: code %d '%s'; expected %d '%s' '%s'", path, err.code, err.msg, code, a, b ? b : "");
}

static void test_refusals(void **state) {
    (void)state;
    char *dir = th_tempdir();
    /* LongRoPE factors: one per rotated pair (16 / 2 here). */
    edited_copy("phi3", dir, "rope_scaling",
                "{\"type\": \"longrope\", \"long_factor\": [1], \"short_factor\": [1], \"factor\": 32}");
    expect_refused(dir, KVLM_ERR_FORMAT, "rope_scaling.long_factor must list 8 numbers (rotary dimensions / 2), not 1",
                   "config.json");
    edited_copy("phi3", dir, "rope_scaling",
                "{\"rope_type\": \"su\", \"long_factor\": [1,1,1,1,1,1,1,1], \"short_factor\": [1,1,1,1,1,1,1]}");
    expect_refused(dir, KVLM_ERR_FORMAT, "rope_scaling.short_factor must list 8 numbers", NULL);
    edited_copy("phi3", dir, "rope_scaling", "{\"rope_type\": \"dynamic\", \"factor\": 4}");
    expect_refused(dir, KVLM_ERR_UNSUPPORTED, "rope_scaling.rope_type 'dynamic' is not supported", "yarn");
    /* YaRN needs the original context, in rope_scaling or beside it */
    edited_copy("llama3_rope", dir, "rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 4}");
    expect_refused(dir, KVLM_ERR_FORMAT, "rope_scaling (yarn) needs original_max_position_embeddings", NULL);
    edited_copy("llama3_rope", dir, "rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 0.5, "
                "\"original_max_position_embeddings\": 64}");
    expect_refused(dir, KVLM_ERR_FORMAT, "rope_scaling (yarn)", "factor");
    /* a context length that no int holds (found by the config.json fuzzer) */
    edited_copy("llama3_rope", dir, "rope_scaling",
                "{\"rope_type\": \"llama3\", \"factor\": 4.0, \"low_freq_factor\": 0.5, \"high_freq_factor\": 2.0, "
                "\"original_max_position_embeddings\": 5.5e67}");
    expect_refused(dir, KVLM_ERR_FORMAT, "field 'original_max_position_embeddings' must be an integer", NULL);
    edited_copy("phi3", dir, "partial_rotary_factor", "0.3125");
    expect_refused(dir, KVLM_ERR_FORMAT, "partial_rotary_factor = 0.3125 rotates 5 of 16", NULL);
    edited_copy("phi3", dir, "partial_rotary_factor", "1.5");
    expect_refused(dir, KVLM_ERR_FORMAT, "partial_rotary_factor must be a number in (0, 1]", NULL);
    edited_copy("phi3", dir, "sliding_window", "-3");
    expect_refused(dir, KVLM_ERR_FORMAT, "field 'sliding_window'", NULL);
    /* Qwen: a window only on layers max_window_layers.. ... */
    edited_copy("qwen3", dir, "use_sliding_window", "true");
    kvlm_error err;
    kvlm_model *m = kvlm_model_load(dir, NULL, &err); /* sliding_window null: no window */
    assert_non_null(m);
    kvlm_model_free(m);
    char cfg[512];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    json_error_t je;
    json_t *j = json_load_file(cfg, 0, &je);
    json_object_set_new(j, "sliding_window", json_integer(4));
    json_object_set_new(j, "max_window_layers", json_integer(1));
    json_dump_file(j, cfg, 0);
    m = kvlm_model_load(dir, NULL, &err);
    assert_non_null(m);
    assert_int_equal(kvlm_model_config(m)->sliding_window, 0); /* not every layer: no model-wide window */
    assert_int_equal(model_layer_window(m, 0), 0);
    assert_int_equal(model_layer_window(m, 1), 4);
    kvlm_model_free(m);
    json_object_set_new(j, "sliding_window", json_integer(65));
    json_dump_file(j, cfg, 0);
    expect_refused(dir, KVLM_ERR_FORMAT, "sliding_window = 65 exceeds max_position_embeddings = 64", NULL);
    json_object_set_new(j, "sliding_window", json_integer(4));
    /* ... and one that leaves every layer full is no window at all. */
    json_object_set_new(j, "max_window_layers", json_integer(2));
    json_dump_file(j, cfg, 0);
    json_decref(j);
    m = kvlm_model_load(dir, NULL, &err);
    assert_non_null(m);
    assert_int_equal(kvlm_model_config(m)->sliding_window, 0);
    kvlm_model_free(m);
    /* A window at least as long as the context never masks: stored as 0. */
    edited_copy("phi3", dir, "sliding_window", "64");
    m = kvlm_model_load(dir, NULL, &err);
    assert_non_null(m);
    assert_int_equal(kvlm_model_config(m)->sliding_window, 0);
    kvlm_model_free(m);

    /* Mistral without the key gets Hugging Face's default window of 4096
     * (stored when the context is longer); null is no window. */
    edited_copy("mistral_swa", dir, "sliding_window", NULL);
    j = json_load_file(cfg, 0, &je);
    json_object_set_new(j, "max_position_embeddings", json_integer(8192));
    json_dump_file(j, cfg, 0);
    kvlm_config c;
    assert_int_equal(kvlm_config_load(dir, &c, &err), 0);
    assert_int_equal(c.sliding_window, 4096);
    json_object_set_new(j, "sliding_window", json_null());
    json_dump_file(j, cfg, 0);
    json_decref(j);
    assert_int_equal(kvlm_config_load(dir, &c, &err), 0);
    assert_int_equal(c.sliding_window, 0);

    /* GGUF: an architecture kvlm does not run is named with the list. */
    size_t n;
    unsigned char *g = (unsigned char *)th_read_file("tests/fixtures/llama_gguf/qwen3_q8_0.gguf", &n);
    assert_non_null(g);
    unsigned char *at = memmem(g, n, "general.architecture", 20);
    assert_non_null(at);
    at = memmem(at, n - (size_t)(at - g), "qwen3", 5);
    assert_non_null(at);
    memcpy(at, "gemma", 5);
    char path[512];
    snprintf(path, sizeof path, "%s/other.gguf", dir);
    assert_int_equal(th_write_file(path, g, n), 0);
    free(g);
    expect_refused(path, KVLM_ERR_UNSUPPORTED, "general.architecture 'gemma' is not supported",
                   "(gpt2, llama, mistral, qwen2, qwen3, phi3, gemma2, gemma3, smollm3, granite, qwen2moe, qwen3moe, gpt-oss)");
    th_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_window_release),
        cmocka_unit_test(test_window_shared_blocks),
        cmocka_unit_test(test_window_reserved),
        cmocka_unit_test(test_family_configs),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
