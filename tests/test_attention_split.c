/*
 * Decode attention with the context cut into parts (runtime/attention.h:
 * attn_seq_heads_part per range, attn_merge_parts) against the same row
 * attended whole (attn_seq_heads_x), on every kernel set this CPU runs.
 * Cases: K/V f32, f16 and q8_0; a paged cache (blocks on demand) and a
 * contiguous one (reserve_tokens = n_ctx); sliding windows whose older
 * blocks went back to the pool; soft-capping and sinks; groups of 1 and 4
 * query heads on one KV head (Gemma 3 1B's shape, head dim 256); cuts into
 * 2, 3 and 8 parts, parts that start and end inside blocks, and a part of
 * one position.
 *
 * Tolerance: outputs are convex combinations of values in [-1, 1]; the
 * merge rescales each part's normalised output by its weight (float
 * products of a double-rounded weight), 4e-6 absolute as the tiled path's
 * tests (test_attention_tile.c). A wrong weight (a part's sum or largest
 * score off, a sink counted once per part) moves outputs by far more.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kernels/kernels.h"
#include "kvlm.h"
#include "model/model.h"
#include "runtime/attention.h"
#include "runtime/kv_layout.h"
#include "runtime/kvcache.h"
#include "tensor.h"

#define TOL 4e-6

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static float frand(float lo, float hi) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return lo + (hi - lo) * (float)((rng_state >> 40) / 16777216.0);
}

static const kvlm_isa isas[] = {KVLM_ISA_SCALAR, KVLM_ISA_AVX2, KVLM_ISA_AVX512, KVLM_ISA_NEON};

typedef struct scase {
    int d, group, bs;
    kvlm_dtype dt;
    int window, n;     /* the row at position n - 1 attends keys [lo, n) */
    int contiguous;    /* 1: reserve_tokens = n_ctx */
    float softcap;
    int sinks;
} scase;

static const scase cases[] = {
    {256, 4, 16, KVLM_F16, 0, 700, 0, 0, 0},      /* Gemma 3 1B's global layer shape */
    {256, 4, 16, KVLM_F16, 512, 900, 0, 0, 0},    /* its window layers, older blocks released */
    {64, 1, 5, KVLM_F32, 0, 301, 1, 0, 0},        /* contiguous, 5-slot blocks */
    {64, 4, 16, KVLM_Q8_0, 0, 530, 0, 0, 0},      /* q8_0 K/V */
    {128, 4, 4, KVLM_Q8_0, 37, 400, 1, 0, 0},     /* q8_0, a window inside blocks, contiguous */
    {64, 4, 16, KVLM_F16, 0, 333, 0, 1.5f, 1},    /* soft-cap and sinks */
    {32, 2, 16, KVLM_F32, 100, 260, 1, 30.0f, 1}, /* window, cap, sinks, contiguous */
};

static kvlm_model *shaped_model(const scase *c) {
    kvlm_error err;
    kvlm_model *m = kvlm_model_synthetic("llama-tiny", KVLM_F32, 1, NULL, &err);
    if (!m) fail_msg("synthetic: %s", err.msg);
    m->cfg.n_layer = 2;
    m->cfg.n_kv_head = 1;
    m->cfg.n_head = c->group;
    m->cfg.head_dim = c->d;
    m->cfg.n_ctx = c->n + 4;
    m->cfg.sliding_window = c->window;
    return m;
}

/* Random K/V for positions [0, n - 1) committed, then position n - 1
 * reserved (pending, as during a decode step). */
static void fill(kvlm_kv *kv, int seq, const scase *c) {
    kvlm_error err;
    float *k = malloc((size_t)c->d * sizeof *k), *v = malloc((size_t)c->d * sizeof *v);
    for (int step = 0; step < 2; step++) {
        const int from = step ? c->n - 1 : 0, cnt = step ? 1 : c->n - 1;
        if (kv_append_reserve(kv, seq, cnt, &err)) fail_msg("reserve: %s", err.msg);
        for (int p = from; p < from + cnt; p++)
            for (int l = 0; l < 2; l++) {
                for (int i = 0; i < c->d; i++) k[i] = frand(-1, 1), v[i] = frand(-1, 1);
                attn_store_kv(&kern_ops_scalar, kv, seq, p, l, k, v);
            }
        if (!step) {
            int32_t *toks = calloc((size_t)cnt, sizeof *toks);
            kv_append_commit(kv, seq, toks);
            free(toks);
        }
    }
    free(k);
    free(v);
}

static void run_case(const scase *c) {
    kvlm_error err;
    kvlm_model *m = shaped_model(c);
    kvlm_kv_options o = kvlm_kv_default_params();
    o.dtype = c->dt;
    o.block_size = c->bs;
    if (c->contiguous) o.reserve_tokens = m->cfg.n_ctx;
    kvlm_kv *kv = kvlm_kv_create(m, &o, &err);
    if (!kv) fail_msg("kv: %s", err.msg);
    const int seq = kvlm_kv_seq_new(kv, &err);
    assert_true(seq >= 0);
    fill(kv, seq, c);
    const int d = c->d, G = c->group, n = c->n, lo = c->window && n > c->window ? n - c->window : 0;
    if (c->window && !c->contiguous) /* the window layer's blocks before lo went back to the pool */
        assert_int_equal(kv_layer_table(kv, seq, 0)[0], -1);
    const float scale = 1.0f / sqrtf((float)d);
    float sinks[8], q[8 * 256], whole[8 * 256], merged[8 * 256];
    float *scores = malloc((size_t)G * n * sizeof *scores);
    float *outs = malloc((size_t)8 * G * d * sizeof *outs), mx[8 * 8], sum[8 * 8];
    for (int h = 0; h < G; h++) sinks[h] = frand(-2, 4);
    for (int i = 0; i < G * d; i++) q[i] = frand(-3, 3);
    const attn_extra x = {c->softcap, c->sinks ? sinks : NULL};
    /* cut points: even parts, and uneven ones with a part of one position */
    const int len = n - lo;
    const int cuts[][9] = {{2, 0, len / 2, len}, {3, 0, 1, len / 3, len}, {8, 0}, {3, 0, len - 1 - len / 2, len - 1, len}};
    for (size_t ii = 0; ii < sizeof isas / sizeof *isas; ii++) {
        if (!kern_cpu_supports(isas[ii])) continue;
        const kern_ops *ops = kern_select(isas[ii]);
        for (int l = 0; l < 2; l++) {
            attn_seq_heads_x(ops, kv, seq, l, 0, G, q, lo, n, scale, &x, scores, whole);
            for (size_t ci = 0; ci < sizeof cuts / sizeof *cuts; ci++) {
                const int parts = cuts[ci][0];
                int at[9];
                for (int p = 0; p <= parts; p++) at[p] = ci == 2 ? len * p / parts : cuts[ci][1 + p];
                for (int p = 0; p < parts; p++) {
                    assert_true(at[p] < at[p + 1]);
                    attn_seq_heads_part(ops, kv, seq, l, 0, G, q, lo + at[p], lo + at[p + 1], scale, c->softcap,
                                        scores, outs + (size_t)p * G * d, mx + p * G, sum + p * G);
                    for (int h = 0; h < G; h++) assert_true(sum[p * G + h] >= 1.0f);
                }
                for (int i = 0; i < G * d; i++) merged[i] = NAN;
                attn_merge_parts(parts, G, d, outs, mx, sum, c->sinks ? sinks : NULL, merged);
                double worst = 0;
                for (int i = 0; i < G * d; i++)
                    if (!(fabs((double)merged[i] - whole[i]) <= worst)) worst = fabs((double)merged[i] - whole[i]);
                if (!(worst <= TOL))
                    fail_msg("%s d %d group %d bs %d %s window %d n %d contiguous %d softcap %g sinks %d layer %d, "
                             "%d parts: |merged - whole| %.3g (tolerance %g)",
                             kvlm_isa_name(isas[ii]), d, G, c->bs, kvlm_dtype_name(c->dt), c->window, n,
                             c->contiguous, c->softcap, c->sinks, l, parts, worst, TOL);
            }
        }
    }
    /* the merge's own arithmetic on known numbers: two parts with outputs
     * 1 and 3, largest scores 0 and ln 2, sums 1 and 1 (weights 1 : 2),
     * with a sink of ln 1 = 0 in the denominator: (1 + 6) / (1 + 2 + 1) */
    {
        const float po[2] = {1.0f, 3.0f}, pm[2] = {0.0f, logf(2.0f)}, ps[2] = {1.0f, 1.0f}, sk[1] = {0.0f};
        float r = 0;
        attn_merge_parts(2, 1, 1, po, pm, ps, NULL, &r);
        assert_float_equal(r, 7.0f / 3.0f, 1e-6);
        attn_merge_parts(2, 1, 1, po, pm, ps, sk, &r);
        assert_float_equal(r, 7.0f / 4.0f, 1e-6);
    }
    kv_append_commit(kv, seq, (int32_t[1]){0});
    free(scores);
    free(outs);
    kvlm_kv_free(kv);
    kvlm_model_free(m);
}

static void test_split_matches_whole(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(&cases[i]);
}

/* Through the engine: gemma3-tiny (one KV head, four query heads, window
 * 8 on five layers of six) decoding at position 700 with 2 threads (the
 * global layers' context cut into 2 parts of 350: fewer (row, KV head)
 * items than threads) against 1 thread (never cut): logits within 1e-4
 * (the parity tests' tolerance), on every kernel set, f32 and q8_0 K/V. */
static void test_engine_decode(void **state) {
    (void)state;
    kvlm_error err;
    kvlm_model *m = kvlm_model_synthetic("gemma3-tiny", KVLM_F32, 11, NULL, &err);
    if (!m) fail_msg("synthetic: %s", err.msg);
    m->cfg.n_ctx = 768;
    const int V = kvlm_model_config(m)->vocab_size, n = 700;
    int32_t *toks = malloc((size_t)(n + 1) * sizeof *toks);
    for (int i = 0; i <= n; i++) toks[i] = (int32_t)((i * 37 + 11) % V);
    float *pre = malloc((size_t)V * sizeof *pre), *logits[2];
    const kvlm_dtype dts[2] = {KVLM_F32, KVLM_Q8_0};
    for (size_t ii = 0; ii < sizeof isas / sizeof *isas; ii++) {
        if (!kern_cpu_supports(isas[ii])) continue;
        for (int di = 0; di < 2; di++) {
            for (int th = 1; th <= 2; th++) {
                kvlm_engine_options eo = kvlm_engine_default_params();
                eo.isa = isas[ii];
                eo.threads = th;
                kvlm_kv_options ko = kvlm_kv_default_params();
                ko.dtype = dts[di];
                kvlm_kv *kv = kvlm_kv_create(m, &ko, &err);
                kvlm_engine *e = kv ? kvlm_engine_create(m, kv, &eo, &err) : NULL;
                if (!kv || !e) fail_msg("create: %s", err.msg);
                const int sq = kvlm_kv_seq_new(kv, &err);
                kvlm_batch_item it = {sq, toks, n, 0};
                if (kvlm_engine_step(e, &it, 1, pre, &err)) fail_msg("prefill: %s", err.msg);
                logits[th - 1] = malloc((size_t)V * sizeof(float));
                kvlm_batch_item dec = {sq, toks + n, 1, 1};
                if (kvlm_engine_step(e, &dec, 1, logits[th - 1], &err)) fail_msg("decode: %s", err.msg);
                kvlm_engine_free(e);
                kvlm_kv_free(kv);
            }
            double worst = 0, spread = 0;
            for (int i = 0; i < V; i++) {
                const double diff = fabs((double)logits[0][i] - logits[1][i]);
                if (!(diff <= worst)) worst = diff;
                spread = fmax(spread, fabs((double)logits[0][i] - logits[0][0]));
            }
            if (!(worst <= 1e-4))
                fail_msg("%s %s KV: decode at %d with 2 threads vs 1 differs by %.3g", kvlm_isa_name(isas[ii]),
                         kvlm_dtype_name(dts[di]), n, worst);
            assert_true(spread > 1e-3); /* logits that say something */
            free(logits[0]);
            free(logits[1]);
        }
    }
    free(pre);
    free(toks);
    kvlm_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_matches_whole),
        cmocka_unit_test(test_engine_decode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
