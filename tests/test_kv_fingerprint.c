/*
 * The KV fingerprint (runtime/kv_fingerprint.h): equal for the same model
 * loaded twice (also from another path), different for each input that
 * changes KV bytes: the model file (one byte of a tensor, the file's
 * size), the layer count, KV heads, head dim, a layer's window, rotated
 * dimensions and rotary table, the rotary frequencies, the KV dtype, the
 * format version, and, for a cache, the block size. Synthetic models
 * (no file) differ by seed and preset.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kvlm.h"
#include "model/model.h"
#include "runtime/kv_fingerprint.h"

#define GGUF "tests/fixtures/layers_gguf/gemma3-q8_0.gguf"

static kv_fingerprint fp_of(const kvlm_model *m, kvlm_dtype t) {
    kv_fingerprint fp;
    kvlm_error err;
    if (kv_fingerprint_of(m, t, &fp, &err)) fail_msg("%s", err.msg);
    return fp;
}

static kvlm_model *load(const char *path) {
    kvlm_error err;
    kvlm_model *m = kvlm_model_load(path, NULL, &err);
    if (!m) fail_msg("%s: %s", path, err.msg);
    return m;
}

static void assert_same(kv_fingerprint a, kv_fingerprint b) { assert_true(kv_fingerprint_equal(&a, &b)); }
static void assert_differ(kv_fingerprint a, kv_fingerprint b) { assert_false(kv_fingerprint_equal(&a, &b)); }

static void test_file_identity(void **state) {
    (void)state;
    kvlm_model *a = load(GGUF), *b = load(GGUF);
    const kv_fingerprint fa = fp_of(a, KVLM_F16);
    assert_same(fa, fp_of(b, KVLM_F16));
    char hex[33];
    kv_fingerprint_hex(&fa, hex);
    assert_int_equal(strlen(hex), 32);
    /* The same bytes under another path: the same fingerprint. */
    size_t n;
    unsigned char *bytes = (unsigned char *)th_read_file(GGUF, &n);
    assert_non_null(bytes);
    char *dir = th_tempdir(), path[4200];
    snprintf(path, sizeof path, "%s/copy.gguf", dir);
    assert_int_equal(th_write_file(path, bytes, n), 0);
    kvlm_model *c = load(path);
    assert_same(fa, fp_of(c, KVLM_F16));
    /* One bit of the last tensor's last byte: another model. */
    const named_tensor *last = &c->ts.items[c->ts.n_items - 1];
    const size_t off = (size_t)((const unsigned char *)last->t.data - c->ts.files[0].data) + tensor_nbytes(&last->t) - 1;
    assert_true(off < n);
    kvlm_model_free(c);
    bytes[off] ^= 0x10;
    assert_int_equal(th_write_file(path, bytes, n), 0);
    c = load(path);
    assert_differ(fa, fp_of(c, KVLM_F16));
    kvlm_model_free(c);
    /* Four more bytes at the end (the file's size): another model. */
    bytes[off] ^= 0x10;
    unsigned char *longer = calloc(n + 32, 1);
    memcpy(longer, bytes, n);
    assert_int_equal(th_write_file(path, longer, n + 32), 0);
    kvlm_model *d = kvlm_model_load(path, NULL, NULL);
    if (d) { /* a loader may refuse trailing bytes; when it loads, it differs */
        assert_differ(fa, fp_of(d, KVLM_F16));
        kvlm_model_free(d);
    }
    free(longer), free(bytes);
    th_rmtree(dir), free(dir);
    kvlm_model_free(a), kvlm_model_free(b);
}

static void test_inputs(void **state) {
    (void)state;
    kvlm_model *m = load(GGUF);
    const kv_fingerprint base = fp_of(m, KVLM_F16);
    kvlm_error err;
    /* KV dtype and format version. */
    assert_differ(base, fp_of(m, KVLM_F32));
    assert_differ(base, fp_of(m, KVLM_Q8_0));
    kv_fingerprint v;
    assert_int_equal(kv_fingerprint_of_version(m, KVLM_F16, KV_FORMAT_VERSION, &v, &err), 0);
    assert_same(base, v);
    assert_int_equal(kv_fingerprint_of_version(m, KVLM_F16, KV_FORMAT_VERSION + 1, &v, &err), 0);
    assert_differ(base, v);
    assert_int_equal(kv_fingerprint_of(m, KVLM_Q4_0, &v, &err), KVLM_ERR_ARG);
    assert_int_equal(kv_fingerprint_of(NULL, KVLM_F16, &v, &err), KVLM_ERR_ARG);
    /* The shape, one field at a time (each put back). */
    int *fields[] = {&m->cfg.n_layer, &m->cfg.n_kv_head, &m->cfg.head_dim};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        const int keep = *fields[i];
        *fields[i] = keep - 1;
        assert_differ(base, fp_of(m, KVLM_F16));
        *fields[i] = keep;
        assert_same(base, fp_of(m, KVLM_F16));
    }
    /* Per layer: window, rotated dimensions, rotary table, scale. */
    assert_non_null(m->attn);
    const int last = m->cfg.n_layer - 1;
    int *keep_win = m->layer_window;
    int wins[64];
    assert_true(m->cfg.n_layer <= 64);
    for (int l = 0; l < m->cfg.n_layer; l++) wins[l] = model_layer_window(m, l);
    wins[last] = wins[last] ? 0 : 3;
    m->layer_window = wins;
    assert_differ(base, fp_of(m, KVLM_F16));
    m->layer_window = keep_win;
    assert_same(base, fp_of(m, KVLM_F16));
    model_attn_layer keep = m->attn[last];
    m->attn[last].rope_dims -= 2;
    assert_differ(base, fp_of(m, KVLM_F16));
    m->attn[last] = keep;
    m->attn[last].rope_table ^= 1;
    assert_differ(base, fp_of(m, KVLM_F16));
    m->attn[last] = keep;
    m->attn[last].scale *= 2;
    assert_differ(base, fp_of(m, KVLM_F16));
    m->attn[last] = keep;
    /* The rotary frequencies (rope theta, scaling). */
    assert_true(m->n_rope >= 1 && m->rope_freq_n[0] > 1);
    const float f = m->rope_freq[0][1];
    m->rope_freq[0][1] = f * 1.5f;
    assert_differ(base, fp_of(m, KVLM_F16));
    m->rope_freq[0][1] = f;
    assert_same(base, fp_of(m, KVLM_F16));
    /* A cache adds its block size. */
    kvlm_kv_options o = kvlm_kv_default_params();
    o.dtype = KVLM_F16;
    o.n_blocks = 64;
    kv_fingerprint c16, c16b, c32;
    kvlm_kv *kv = kvlm_kv_create(m, &o, &err);
    assert_non_null(kv);
    assert_int_equal(kv_fingerprint_for_cache(m, kv, &c16, &err), 0);
    kvlm_kv_free(kv);
    kv = kvlm_kv_create(m, &o, &err);
    assert_int_equal(kv_fingerprint_for_cache(m, kv, &c16b, &err), 0);
    kvlm_kv_free(kv);
    o.block_size = 32;
    kv = kvlm_kv_create(m, &o, &err);
    assert_int_equal(kv_fingerprint_for_cache(m, kv, &c32, &err), 0);
    kvlm_kv_free(kv);
    assert_same(c16, c16b);
    assert_differ(c16, c32);
    assert_differ(c16, base);
    kvlm_model_free(m);
}

static void test_synthetic(void **state) {
    (void)state;
    kvlm_error err;
    kvlm_model *a = kvlm_model_synthetic("gemma3-tiny", KVLM_F32, 7, NULL, &err);
    kvlm_model *b = kvlm_model_synthetic("gemma3-tiny", KVLM_F32, 7, NULL, &err);
    kvlm_model *c = kvlm_model_synthetic("gemma3-tiny", KVLM_F32, 8, NULL, &err);
    assert_non_null(a), assert_non_null(b), assert_non_null(c);
    assert_same(fp_of(a, KVLM_F32), fp_of(b, KVLM_F32));
    assert_differ(fp_of(a, KVLM_F32), fp_of(c, KVLM_F32));
    kvlm_model_free(a), kvlm_model_free(b), kvlm_model_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_file_identity),
        cmocka_unit_test(test_inputs),
        cmocka_unit_test(test_synthetic),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
