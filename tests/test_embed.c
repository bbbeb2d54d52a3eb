/*
 * Embeddings (kvlm_embed) against the float64 reference of
 * tools/embed_reference.py (tests/fixtures/embed/qwen3.expected.json: four
 * inputs through the Qwen3 fixture, mean, cls and last pooling, raw and
 * L2-normalised): each pooling within 1e-5 on the f32 kernels; inputs
 * batched in one step equal to one at a time and to steps cut by the token
 * budget or by few sequence slots; the pooling read from a GGUF's
 * pooling_type and from a sentence-transformers 1_Pooling/config.json; the
 * errors (empty input, too long, outside the vocabulary, output too small,
 * no sequence slot) with the input index named; running sequences keep
 * their tokens; `kvlm embed` prints the reference's vector and refuses an
 * unknown pooling.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"
#include "kvlm.h"

#define EXPECTED "tests/fixtures/embed/qwen3.expected.json"
#define MODEL "tests/fixtures/llama/qwen3"
#define GGUF "tests/fixtures/embed/qwen3_mean_f32.gguf"
#define MAX_IN 8
#define TOL 1e-5

typedef struct fixture {
    int n;                       /* inputs */
    int32_t *ids[MAX_IN];
    int len[MAX_IN];
    json_t *root;
} fixture;

static void fixture_load(fixture *f) {
    memset(f, 0, sizeof *f);
    f->root = json_load_file(EXPECTED, 0, NULL);
    assert_non_null(f->root);
    json_t *in = json_object_get(f->root, "inputs");
    f->n = (int)json_array_size(in);
    assert_true(f->n >= 3 && f->n <= MAX_IN);
    for (int i = 0; i < f->n; i++) {
        json_t *a = json_array_get(in, (size_t)i);
        f->len[i] = (int)json_array_size(a);
        f->ids[i] = malloc((size_t)f->len[i] * sizeof(int32_t));
        for (int j = 0; j < f->len[i]; j++) f->ids[i][j] = (int32_t)json_integer_value(json_array_get(a, (size_t)j));
    }
}

static void fixture_free(fixture *f) {
    for (int i = 0; i < f->n; i++) free(f->ids[i]);
    json_decref(f->root);
}

/* Largest |got - expected| over every input of pooling `pool`, kind "raw" or "normalized". */
static double max_diff(const fixture *f, const char *pool, const char *kind, const float *got, int C) {
    json_t *rows = json_object_get(json_object_get(json_object_get(f->root, "poolings"), pool), kind);
    assert_int_equal(json_array_size(rows), f->n);
    double d = 0;
    for (int i = 0; i < f->n; i++) {
        json_t *r = json_array_get(rows, (size_t)i);
        assert_int_equal(json_array_size(r), C);
        for (int k = 0; k < C; k++) {
            const double x = fabs(got[(size_t)i * C + k] - json_real_value(json_array_get(r, (size_t)k)));
            if (x > d) d = x;
        }
    }
    return d;
}

typedef struct rig {
    kvlm_model *m;
    kvlm_kv *kv;
    kvlm_engine *e;
    int C;
} rig;

static void rig_open(rig *r, const char *path, kvlm_isa isa, int max_seqs) {
    kvlm_error err;
    r->m = kvlm_model_load(path, NULL, &err);
    if (!r->m) fail_msg("%s: %s", path, err.msg);
    kvlm_kv_options ko = kvlm_kv_default_params();
    ko.max_seqs = max_seqs;
    r->kv = kvlm_kv_create(r->m, &ko, &err);
    if (!r->kv) fail_msg("kv: %s", err.msg);
    kvlm_engine_options eo = kvlm_engine_default_params();
    eo.isa = isa;
    eo.threads = 2;
    r->e = kvlm_engine_create(r->m, r->kv, &eo, &err);
    if (!r->e) fail_msg("engine: %s", err.msg);
    r->C = kvlm_model_config(r->m)->n_embd;
}

static void rig_close(rig *r) {
    kvlm_engine_free(r->e);
    kvlm_kv_free(r->kv);
    kvlm_model_free(r->m);
}

static float *embed_all(rig *r, const fixture *f, kvlm_pooling pool, int raw, int budget) {
    kvlm_embed_params p = kvlm_embed_default_params();
    p.pooling = pool;
    p.raw = raw;
    p.max_batch_tokens = budget;
    const size_t need = kvlm_embed_size(r->e, f->len, f->n, &p);
    assert_int_equal(need, (size_t)f->n * r->C);
    float *out = malloc(need * sizeof *out);
    kvlm_error err;
    if (kvlm_embed(r->e, (const int32_t *const *)f->ids, f->len, f->n, &p, out, need, &err))
        fail_msg("kvlm_embed: %s", err.msg);
    return out;
}

static void test_reference_each_pooling(void **state) {
    (void)state;
    fixture f;
    fixture_load(&f);
    static const char *const names[] = {"mean", "cls", "last"};
    const kvlm_pooling pools[] = {KVLM_POOLING_MEAN, KVLM_POOLING_CLS, KVLM_POOLING_LAST};
    const kvlm_isa isas[] = {KVLM_ISA_SCALAR, th_best_f32_isa()};
    for (int s = 0; s < 2; s++) {
        rig r;
        rig_open(&r, MODEL, isas[s], 8);
        for (int k = 0; k < 3; k++)
            for (int raw = 0; raw < 2; raw++) {
                float *got = embed_all(&r, &f, pools[k], raw, 0);
                const double d = max_diff(&f, names[k], raw ? "raw" : "normalized", got, r.C);
                printf("  %-6s %-4s %-10s max|diff| %.2e\n", kvlm_isa_name(isas[s]), names[k],
                       raw ? "raw" : "normalized", d);
                if (!(d < TOL)) fail_msg("%s %s: %g", names[k], raw ? "raw" : "normalized", d);
                for (int i = 0; !raw && i < f.n; i++) {
                    double ss = 0;
                    for (int c = 0; c < r.C; c++) ss += (double)got[(size_t)i * r.C + c] * got[(size_t)i * r.C + c];
                    assert_true(fabs(sqrt(ss) - 1) < 1e-6);
                }
                free(got);
            }
        kvlm_kv_stats st;
        kvlm_kv_get_stats(r.kv, &st);
        assert_int_equal(st.seqs, 0); /* every input's sequence was freed */
        rig_close(&r);
    }
    fixture_free(&f);
}

/* One step for all, one call per input, a budget of 16 tokens per step
 * and a cache of 2 sequences give the same vectors. */
static void test_batched_equals_single(void **state) {
    (void)state;
    fixture f;
    fixture_load(&f);
    rig r, r2;
    rig_open(&r, MODEL, th_best_f32_isa(), 8);
    rig_open(&r2, MODEL, th_best_f32_isa(), 2);
    float *all = embed_all(&r, &f, KVLM_POOLING_MEAN, 0, 0);
    float *cut = embed_all(&r, &f, KVLM_POOLING_MEAN, 0, 16);
    float *two = embed_all(&r2, &f, KVLM_POOLING_MEAN, 0, 0);
    double d1 = 0, d2 = 0, d3 = 0;
    kvlm_embed_params p = kvlm_embed_default_params();
    p.pooling = KVLM_POOLING_MEAN;
    for (int i = 0; i < f.n; i++) {
        float one[512];
        assert_true(r.C <= 512);
        kvlm_error err;
        const int32_t *in = f.ids[i];
        if (kvlm_embed(r.e, &in, &f.len[i], 1, &p, one, 512, &err)) fail_msg("%s", err.msg);
        for (int c = 0; c < r.C; c++) {
            const size_t at = (size_t)i * r.C + c;
            d1 = fmax(d1, fabs(one[c] - all[at]));
            d2 = fmax(d2, fabs(cut[at] - all[at]));
            d3 = fmax(d3, fabs(two[at] - all[at]));
        }
    }
    printf("  batched vs one by one %.2e, budget 16 %.2e, 2 slots %.2e\n", d1, d2, d3);
    assert_true(d1 < 1e-6 && d2 < 1e-6 && d3 < 1e-6);
    free(all);
    free(cut);
    free(two);
    rig_close(&r);
    rig_close(&r2);
    fixture_free(&f);
}

static void test_pooling_from_files(void **state) {
    (void)state;
    fixture f;
    fixture_load(&f);
    const char *src = NULL;
    /* GGUF qwen3.pooling_type = 1: mean, and the default params use it */
    rig r;
    rig_open(&r, GGUF, th_best_f32_isa(), 8);
    assert_int_equal(kvlm_model_pooling(r.m, &src), KVLM_POOLING_MEAN);
    assert_string_equal(src, "gguf");
    float *got = embed_all(&r, &f, KVLM_POOLING_UNSPECIFIED, 0, 0);
    const double d = max_diff(&f, "mean", "normalized", got, r.C);
    printf("  gguf pooling_type 1: mean, max|diff| %.2e\n", d);
    assert_true(d < TOL);
    free(got);
    rig_close(&r);

    /* a Hugging Face directory: no 1_Pooling is last-token */
    kvlm_error err;
    kvlm_model *m = kvlm_model_load(MODEL, NULL, &err);
    assert_non_null(m);
    assert_int_equal(kvlm_model_pooling(m, &src), KVLM_POOLING_LAST);
    assert_string_equal(src, "default");
    kvlm_model_free(m);

    /* the same weights with a sentence-transformers 1_Pooling/config.json */
    char *dir = th_tempdir(), path[1024], target[1024], cwd[512];
    assert_non_null(getcwd(cwd, sizeof cwd));
    static const char *const files[] = {"config.json", "model.safetensors"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        snprintf(target, sizeof target, "%s/" MODEL "/%s", cwd, files[i]);
        assert_int_equal(symlink(target, path), 0);
    }
    snprintf(path, sizeof path, "%s/1_Pooling", dir);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/1_Pooling/config.json", dir);
    const char *cls = "{\"word_embedding_dimension\": 64, \"pooling_mode_cls_token\": true,"
                      " \"pooling_mode_mean_tokens\": false, \"pooling_mode_max_tokens\": false}";
    assert_int_equal(th_write_file(path, cls, strlen(cls)), 0);
    rig_open(&r, dir, th_best_f32_isa(), 8);
    assert_int_equal(kvlm_model_pooling(r.m, &src), KVLM_POOLING_CLS);
    assert_string_equal(src, "1_Pooling");
    got = embed_all(&r, &f, KVLM_POOLING_UNSPECIFIED, 0, 0);
    assert_true(max_diff(&f, "cls", "normalized", got, r.C) < TOL);
    free(got);
    rig_close(&r);

    /* a mode kvlm does not compute: the default params are refused, an explicit pooling works */
    const char *mx = "{\"pooling_mode_max_tokens\": true}";
    assert_int_equal(th_write_file(path, mx, strlen(mx)), 0);
    rig_open(&r, dir, th_best_f32_isa(), 8);
    assert_int_equal(kvlm_model_pooling(r.m, &src), KVLM_POOLING_UNSPECIFIED);
    assert_string_equal(src, "1_Pooling: pooling_mode_max_tokens");
    float out[64 * MAX_IN];
    kvlm_embed_params p = kvlm_embed_default_params();
    assert_int_equal(kvlm_embed_size(r.e, f.len, f.n, &p), 0);
    assert_int_equal(kvlm_embed(r.e, (const int32_t *const *)f.ids, f.len, f.n, &p, out, 64 * MAX_IN, &err),
                     KVLM_ERR_ARG);
    assert_non_null(strstr(err.msg, "pooling_mode_max_tokens"));
    p.pooling = KVLM_POOLING_LAST;
    assert_int_equal(kvlm_embed(r.e, (const int32_t *const *)f.ids, f.len, f.n, &p, out, 64 * MAX_IN, &err), 0);
    assert_true(max_diff(&f, "last", "normalized", out, r.C) < TOL);
    rig_close(&r);
    th_rmtree(dir);
    free(dir);
    fixture_free(&f);
}

static void test_errors(void **state) {
    (void)state;
    rig r;
    rig_open(&r, MODEL, th_best_f32_isa(), 1);
    kvlm_error err;
    int32_t a[70], b[1] = {5};
    for (int i = 0; i < 70; i++) a[i] = i;
    const int32_t *in[3] = {b, b, a};
    int len[3] = {1, 0, 2};
    float out[64 * 70];
    const size_t cap = sizeof out / sizeof *out;
    kvlm_embed_params p = kvlm_embed_default_params();
    assert_int_equal(kvlm_embed(r.e, in, len, 3, &p, out, cap, &err), KVLM_ERR_ARG);
    assert_non_null(strstr(err.msg, "input 1 is empty"));
    len[1] = 1, len[2] = 65; /* the context is 64 */
    assert_int_equal(kvlm_embed(r.e, in, len, 3, &p, out, cap, &err), KVLM_ERR_ARG);
    assert_non_null(strstr(err.msg, "input 2 has 65 tokens; the context window is 64"));
    len[2] = 3;
    a[1] = 256; /* the vocabulary is 256 */
    assert_int_equal(kvlm_embed(r.e, in, len, 3, &p, out, cap, &err), KVLM_ERR_ARG);
    assert_non_null(strstr(err.msg, "input 2, token 1: id 256"));
    a[1] = 1;
    assert_int_equal(kvlm_embed(r.e, in, len, 3, &p, out, 3 * 64 - 1, &err), KVLM_ERR_ARG);
    assert_non_null(strstr(err.msg, "holds 191 floats; these inputs need 192"));
    assert_int_equal(kvlm_embed(r.e, in, len, 0, &p, out, cap, &err), KVLM_ERR_ARG);
    p.pooling = (kvlm_pooling)7;
    assert_int_equal(kvlm_embed(r.e, in, len, 3, &p, out, cap, &err), KVLM_ERR_ARG);
    p = kvlm_embed_default_params();
    /* pooling none: one vector per token */
    p.pooling = KVLM_POOLING_NONE;
    assert_int_equal(kvlm_embed_size(r.e, len, 3, &p), (size_t)5 * 64);
    assert_int_equal(kvlm_embed(r.e, in, len, 3, &p, out, cap, &err), 0);
    float last[64];
    p.pooling = KVLM_POOLING_LAST;
    assert_int_equal(kvlm_embed(r.e, &in[2], &len[2], 1, &p, last, 64, &err), 0);
    assert_memory_equal(last, out + 4 * 64, sizeof last); /* the last token of input 2 */
    /* the one sequence slot taken: nothing fits now; the sequence keeps its tokens */
    const int seq = kvlm_kv_seq_new(r.kv, &err);
    assert_true(seq >= 0);
    const kvlm_batch_item it = {.seq = seq, .tokens = a, .n_tokens = 3, .logits_all = -1};
    assert_int_equal(kvlm_engine_step(r.e, &it, 1, NULL, &err), 0);
    assert_int_equal(kvlm_embed(r.e, in, len, 3, &p, out, cap, &err), KVLM_ERR_NOMEM);
    assert_non_null(strstr(err.msg, "input 0"));
    assert_int_equal(kvlm_kv_seq_len(r.kv, seq, &err), 3);
    kvlm_kv_seq_free(r.kv, seq);
    assert_int_equal(kvlm_embed(r.e, in, len, 3, &p, out, cap, &err), 0);
    rig_close(&r);
}

static void test_names(void **state) {
    (void)state;
    kvlm_pooling p;
    kvlm_error err;
    assert_int_equal(kvlm_pooling_parse("MEAN", &p, &err), 0);
    assert_int_equal(p, KVLM_POOLING_MEAN);
    assert_int_equal(kvlm_pooling_parse("last", &p, &err), 0);
    assert_int_equal(p, KVLM_POOLING_LAST);
    assert_int_equal(kvlm_pooling_parse("max", &p, &err), KVLM_ERR_ARG);
    assert_non_null(strstr(err.msg, "'max'"));
    assert_string_equal(kvlm_pooling_name(KVLM_POOLING_CLS), "cls");
    assert_string_equal(kvlm_pooling_name(KVLM_POOLING_NONE), "none");
    assert_null(kvlm_pooling_name((kvlm_pooling)9));
    /* a synthetic model names no pooling: last */
    kvlm_model *m = kvlm_model_synthetic("llama-tiny", KVLM_F32, 1, NULL, &err);
    assert_non_null(m);
    const char *src;
    assert_int_equal(kvlm_model_pooling(m, &src), KVLM_POOLING_LAST);
    assert_string_equal(src, "default");
    kvlm_model_free(m);
}

static void test_cli(void **state) {
    (void)state;
    fixture f;
    fixture_load(&f);
    char ids[512];
    size_t o = 0;
    for (int j = 0; j < f.len[0]; j++) o += (size_t)snprintf(ids + o, sizeof ids - o, j ? ",%d" : "%d", f.ids[0][j]);
    char *out = NULL;
    /* the GGUF names mean pooling: no flag needed */
    assert_int_equal(th_run_kvlm(&out, "embed -m " GGUF " --kv-dtype f32 --ids %s", ids), 0);
    json_t *want = json_array_get(json_object_get(json_object_get(json_object_get(f.root, "poolings"), "mean"),
                                                  "normalized"), 0);
    char *p = out;
    double d = 0;
    for (size_t k = 0; k < json_array_size(want); k++) {
        char *end;
        const double v = strtod(p, &end);
        assert_true(end != p);
        d = fmax(d, fabs(v - json_real_value(json_array_get(want, k))));
        p = end;
    }
    printf("  kvlm embed: max|diff| %.2e\n", d);
    assert_true(d < TOL);
    free(out);
    assert_int_equal(th_run_kvlm(&out, "embed -m " GGUF " --ids 1,2 --pooling max"), 2);
    assert_non_null(strstr(out, "pooling 'max' is not one of mean, cls, last, none"));
    free(out);
    fixture_free(&f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reference_each_pooling),
        cmocka_unit_test(test_batched_equals_single),
        cmocka_unit_test(test_pooling_from_files),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
