/*
 * GET /kvlm/model of models whose layers attend differently, over HTTP:
 * one kvlm serve with the Gemma 3 and Gemma 2 fixtures of
 * tests/fixtures/layers (f16 KV, blocks of 16, context 64).
 *
 * Checks, as exact numbers: sliding_window is the window layers' window
 * (5) though only some layers have it; layers.global / layers.window and
 * each layer type's window, layer count, KV bytes per token and whether
 * it releases blocks; kv.bytes_per_token_global / _window and
 * kv.max_context_bytes equal what `kvlm kv -m FILE --json` prints for the
 * same file (global bytes per token x 64 + window bytes per token x 5), and
 * kv.max_context_pool_bytes the whole blocks this pool holds for a 64-token
 * sequence. A model with no window reports sliding_window 0, every layer
 * global and max_context_bytes = bytes per token x context.
 */
#include "server_harness.h"

static server sv;

static int start_all(void **state) {
    (void)state;
    return start_server_in_tempdir(&sv, "-m tests/fixtures/layers/gemma3 -m tests/fixtures/layers/gemma2 "
                                        "-m models/shakespeare-gpt2 --kv-dtype f16 --block-size 16 --threads 1 "
                                        "--max-seqs 2 --no-draft --access-log off");
}

static int stop_all(void **state) {
    (void)state;
    int rc = stop_server(&sv);
    th_rmtree(sv.dir);
    return rc;
}

static json_t *get_json(const char *path) {
    resp r = http(sv.port, "GET", path, NULL);
    if (r.status != 200) fail_msg("GET %s: status %d: %s", path, r.status, r.body);
    json_t *j = json_loads(r.body, 0, NULL);
    if (!j) fail_msg("GET %s: not JSON: %s", path, r.body);
    resp_free(&r);
    return j;
}

/* `kvlm kv -m path --json`'s first model. */
static json_t *kv_cli(const char *path) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "%s kv -m %s --kv-dtype f16 --json", kvlm_bin, path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    json_error_t e;
    json_t *j = json_loadf(p, 0, &e);
    assert_int_equal(pclose(p), 0);
    if (!j) fail_msg("kvlm kv --json: %s", e.text);
    json_t *m = json_incref(json_array_get(json_object_get(j, "models"), 0));
    json_decref(j);
    return m;
}

static void check_type(json_t *m, int i, int window, int n_layers, int bytes, int releases) {
    char path[64];
    snprintf(path, sizeof path, "layers.types.%d", i);
    json_t *t = jget(m, path);
    assert_non_null(t);
    assert_int_equal(jint(t, "window"), window);
    assert_int_equal(jint(t, "n_layers"), n_layers);
    assert_int_equal(jint(t, "kv_bytes_per_token"), bytes);
    assert_int_equal(json_is_true(json_object_get(t, "releases")), releases);
}

static void check_against_cli(json_t *m, const char *path) {
    json_t *k = kv_cli(path);
    assert_int_equal(jint(m, "kv.bytes_per_token"), jint(k, "bytes_per_token"));
    assert_int_equal(jint(m, "kv.bytes_per_token_global"), jint(k, "bytes_per_token_global"));
    assert_int_equal(jint(m, "kv.bytes_per_token_window"), jint(k, "bytes_per_token_window"));
    assert_int_equal(jint(m, "kv.max_context_bytes"), jint(k, "max_context_bytes"));
    assert_int_equal(jint(m, "sliding_window"), jint(k, "window"));
    assert_int_equal(jint(m, "layers.window"), jint(k, "window_layers"));
    json_decref(k);
}

static void test_gemma3(void **state) {
    (void)state;
    json_t *m = get_json("/kvlm/model"); /* the first model */
    assert_string_equal(jstr(m, "model"), "gemma3");
    assert_int_equal(jint(m, "n_ctx"), 64);
    assert_int_equal(jint(m, "sliding_window"), 5);
    assert_int_equal(jint(m, "layers.global"), 1);
    assert_int_equal(jint(m, "layers.window"), 5);
    assert_int_equal(json_array_size(jget(m, "layers.types")), 2);
    /* a layer: 2 (K and V) x 1 KV head x 16 x 2 bytes = 64 */
    check_type(m, 0, 0, 1, 64, 0);
    check_type(m, 1, 5, 5, 320, 1);
    assert_int_equal(jint(m, "kv.bytes_per_token"), 384);
    assert_int_equal(jint(m, "kv.bytes_per_token_global"), 64);
    assert_int_equal(jint(m, "kv.bytes_per_token_window"), 320);
    assert_int_equal(jint(m, "kv.max_context_bytes"), 64 * 64 + 320 * 5); /* 5696 */
    /* whole blocks: the global layer 4 of 16 tokens; the window layers,
     * at 64 tokens, only the block holding positions 60..63 */
    assert_int_equal(jint(m, "kv.max_context_pool_bytes"), 4 * 16 * 64 + 1 * 16 * 320);
    check_against_cli(m, "tests/fixtures/layers/gemma3");
    json_decref(m);
}

static void test_gemma2(void **state) {
    (void)state;
    json_t *m = get_json("/kvlm/model?model=gemma2");
    assert_string_equal(jstr(m, "architecture"), "gemma2");
    assert_int_equal(jint(m, "sliding_window"), 5);
    assert_int_equal(jint(m, "layers.global"), 2);
    assert_int_equal(jint(m, "layers.window"), 2);
    check_type(m, 0, 0, 2, 128, 0);
    check_type(m, 1, 5, 2, 128, 1);
    assert_int_equal(jint(m, "kv.bytes_per_token"), 256);
    assert_int_equal(jint(m, "kv.max_context_bytes"), 128 * 64 + 128 * 5); /* 8832 */
    assert_int_equal(jint(m, "kv.max_context_pool_bytes"), 4 * 16 * 128 + 1 * 16 * 128);
    check_against_cli(m, "tests/fixtures/layers/gemma2");
    json_decref(m);
}

static void test_no_window(void **state) {
    (void)state;
    json_t *m = get_json("/kvlm/model?model=shakespeare-gpt2");
    const json_int_t bpt = 2 * 6 * 4 * 32 * 2, ctx = jint(m, "n_ctx");
    assert_int_equal(ctx, 128);
    assert_int_equal(jint(m, "sliding_window"), 0);
    assert_int_equal(jint(m, "layers.global"), 6);
    assert_int_equal(jint(m, "layers.window"), 0);
    assert_int_equal(json_array_size(jget(m, "layers.types")), 1);
    check_type(m, 0, 0, 6, (int)bpt, 0);
    assert_int_equal(jint(m, "kv.bytes_per_token_window"), 0);
    assert_int_equal(jint(m, "kv.max_context_bytes"), bpt * ctx);
    assert_int_equal(jint(m, "kv.max_context_pool_bytes"), bpt * ctx);
    json_decref(m);
}

int main(int argc, char **argv) {
    (void)argc;
    if (th_server_main_init(argv[0], "test_server_layers")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemma3),
        cmocka_unit_test(test_gemma2),
        cmocka_unit_test(test_no_window),
    };
    return cmocka_run_group_tests(tests, start_all, stop_all) || dirty_exit;
}
