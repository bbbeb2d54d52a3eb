/*
 * Tiled prefill attention (kernels/attn_tile.h through runtime/attention.c
 * attn_tile_seq) against a float64 reference computed from the K/V the
 * cache holds, and against the per-row path (attn_seq_head), on every
 * kernel set this CPU runs (scalar, AVX2, AVX-512). Cases cover head dims
 * 8, 24, 32, 40, 64 and 128 (multiples of 16 and not), contexts and tiles
 * that are not multiples of 16 keys, blocks of 4, 5 and 16 slots (chunks
 * cut at block ends), GQA groups 1, 2, 4 and 8, sliding windows (with the
 * blocks before them released), prefill continuing after cached positions,
 * a tile of one row, and the layer options: logit soft-capping, attention
 * sinks (one logit per query head in the denominator) and a query scale
 * other than 1/sqrt(d). K/V are f32, f16 and q8_0 (the cache's dtypes; the
 * reference reads the values the cache holds, so q8_0 is checked against its
 * own dequantised numbers here and against f32 K/V in test_kv_q8.c); the
 * widening of f16, bf16 and q8_0 is checked exactly.
 *
 * Tolerance: outputs are convex combinations of values in [-1, 1]; 4e-6
 * absolute, both against the float64 reference and against the per-row
 * path (float sums of <= 256 terms, an exponential within 2 ulp; the
 * largest differences seen on this CPU are 3.5e-7 and 4.7e-7).
 *
 * Then through the engine (llama-tiny, groups of 2, tiles of 32
 * positions): one step holding rows of three sequences (a prefill after a
 * cached prefix, a fresh prefill crossing a tile boundary, a decode row)
 * gives the logits of each sequence stepped alone (1e-4, as the parity
 * tests), on every kernel set.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kernels/attn_tile.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kvlm.h"
#include "model/model.h"
#include "runtime/attention.h"
#include "runtime/kvcache.h"
#include "tensor.h"

#define TOL 4e-6

static uint64_t rng_state = 88172645463325252ull;
static float frand(float lo, float hi) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return lo + (hi - lo) * (float)((rng_state >> 40) / 16777216.0);
}

static const kvlm_isa isas[] = {KVLM_ISA_SCALAR, KVLM_ISA_AVX2, KVLM_ISA_AVX512, KVLM_ISA_NEON};

typedef struct tcase {
    int d, n_kv, group, bs;
    kvlm_dtype dt;
    int window, cached, np; /* positions 0..cached-1 committed first, then np attended */
    float softcap;          /* > 0: scores capped (Gemma 2) */
    int sinks;              /* 1: a learned sink logit per query head */
    float scale;            /* query scale; 0: 1 / sqrt(d) */
} tcase;

static const tcase cases[] = {
    {64, 2, 4, 16, KVLM_F16, 0, 0, 37, 0, 0, 0},   /* GQA 4, tile and context tails */
    {64, 1, 1, 16, KVLM_F32, 0, 0, 64, 0, 0, 0},   /* MHA, whole chunks */
    {24, 2, 2, 5, KVLM_F32, 0, 13, 29, 0, 0, 0},   /* head dim padded to 32, 5-slot blocks, cached prefix */
    {8, 1, 8, 16, KVLM_F16, 0, 40, 9, 0, 0, 0},    /* GQA 8, tiny head dim, after a prefix */
    {64, 4, 4, 4, KVLM_F16, 7, 20, 30, 0, 0, 0},   /* window 7 over 4-slot blocks */
    {40, 2, 1, 16, KVLM_F32, 33, 100, 50, 0, 0, 0},/* window 33: chunks start inside a block */
    {64, 2, 4, 16, KVLM_F16, 0, 50, 1, 0, 0, 0},   /* a tile of one row */
    {32, 2, 2, 16, KVLM_F32, 0, 0, 160, 0, 0, 0},  /* a long tile (several row groups, many chunks) */
    {128, 2, 2, 16, KVLM_F16, 0, 5, 21, 0, 0, 0},  /* head dim 128 */
    {64, 2, 4, 16, KVLM_Q8_0, 0, 0, 37, 0, 0, 0},  /* q8_0: int8 blocks widened with their scales */
    {32, 2, 2, 5, KVLM_Q8_0, 0, 13, 29, 0, 0, 0},  /* q8_0, one block per head, 5-slot blocks */
    {128, 2, 2, 4, KVLM_Q8_0, 7, 20, 30, 0, 0, 0}, /* q8_0, head dim 128, window 7 */
    /* soft-capping (a cap low enough to bend most scores), sinks, a query
     * scale other than 1 / sqrt(d), with windows and every KV dtype */
    {64, 2, 4, 16, KVLM_F16, 0, 0, 37, 1.5f, 0, 0},
    {32, 2, 2, 5, KVLM_F32, 9, 13, 29, 2.0f, 1, 0.0625f},
    {64, 1, 8, 16, KVLM_Q8_0, 0, 20, 30, 0, 1, 0},
    {128, 2, 2, 4, KVLM_F32, 7, 20, 30, 50.0f, 1, 0.5f},
    {64, 2, 4, 16, KVLM_F16, 0, 50, 1, 1.0f, 1, 0},
};

static kvlm_model *shaped_model(const tcase *c, int n_ctx) {
    kvlm_error err;
    kvlm_model *m = kvlm_model_synthetic("llama-tiny", KVLM_F32, 1, NULL, &err);
    if (!m) fail_msg("synthetic: %s", err.msg);
    m->cfg.n_layer = 2;
    m->cfg.n_kv_head = c->n_kv;
    m->cfg.n_head = c->n_kv * c->group;
    m->cfg.head_dim = c->d;
    m->cfg.n_ctx = n_ctx;
    m->cfg.sliding_window = c->window;
    return m;
}

/* Random K/V for positions [from, from + n) of every layer and KV head;
 * leaves the append pending when commit is 0. */
static void append_kv(kvlm_kv *kv, int seq, const tcase *c, int from, int n, int commit) {
    kvlm_error err;
    if (kv_append_reserve(kv, seq, n, &err)) fail_msg("reserve: %s", err.msg);
    const int w = c->n_kv * c->d;
    float *k = malloc((size_t)w * sizeof *k), *v = malloc((size_t)w * sizeof *v);
    for (int p = from; p < from + n; p++)
        for (int l = 0; l < 2; l++) {
            for (int i = 0; i < w; i++) k[i] = frand(-1, 1), v[i] = frand(-1, 1);
            attn_store_kv(&kern_ops_scalar, kv, seq, p, l, k, v);
        }
    free(k);
    free(v);
    if (commit) {
        int32_t *toks = calloc((size_t)n, sizeof *toks);
        kv_append_commit(kv, seq, toks);
        free(toks);
    }
}

/* out = softmax(cap(scale q.K)) V over keys lo..p in float64, from the
 * K/V the cache holds; cap(s) = softcap tanh(s / softcap) when softcap >
 * 0; a sink (not NAN) adds exp(sink) to the denominator. */
static void reference(const kvlm_kv *kv, int seq, int layer, int kh, int d, const float *q, int lo, int p,
                      float scale, float softcap, double sink, double *out) {
    const int n = p + 1 - lo;
    double *s = malloc((size_t)n * sizeof *s), mx = isnan(sink) ? -INFINITY : sink, sum = 0;
    float *row = malloc((size_t)d * sizeof *row);
    for (int j = 0; j < n; j++) {
        attn_load_kv(kv, seq, lo + j, layer, kh, 0, row);
        double a = 0;
        for (int i = 0; i < d; i++) a += (double)q[i] * row[i];
        s[j] = a * scale;
        if (softcap > 0) s[j] = softcap * tanh(s[j] / softcap);
        mx = fmax(mx, s[j]);
    }
    for (int i = 0; i < d; i++) out[i] = 0;
    if (!isnan(sink)) sum = exp(sink - mx);
    for (int j = 0; j < n; j++) {
        s[j] = exp(s[j] - mx);
        sum += s[j];
        attn_load_kv(kv, seq, lo + j, layer, kh, 1, row);
        for (int i = 0; i < d; i++) out[i] += s[j] * row[i];
    }
    for (int i = 0; i < d; i++) out[i] /= sum;
    free(s);
    free(row);
}

static void run_case(const tcase *c) {
    kvlm_error err;
    const int n_ctx = c->cached + c->np + 3;
    kvlm_model *m = shaped_model(c, n_ctx);
    kvlm_kv_options o = kvlm_kv_default_params();
    o.dtype = c->dt;
    o.block_size = c->bs;
    kvlm_kv *kv = kvlm_kv_create(m, &o, &err);
    if (!kv) fail_msg("kv: %s", err.msg);
    const int seq = kvlm_kv_seq_new(kv, &err);
    assert_true(seq >= 0);
    if (c->cached) append_kv(kv, seq, c, 0, c->cached, 1);
    append_kv(kv, seq, c, c->cached, c->np, 0); /* pending, as during a step */
    const int d = c->d, H = c->n_kv * c->group, rows = c->np;
    const size_t ldq = (size_t)H * d + 7; /* not the packed width */
    const float scale = c->scale > 0 ? c->scale : 1.0f / sqrtf((float)d);
    float sinks[64];
    for (int h = 0; h < H; h++) sinks[h] = c->sinks ? frand(-2, 4) : NAN;
    float *q = malloc((size_t)rows * ldq * sizeof *q), *out = malloc((size_t)rows * ldq * sizeof *out);
    float *ref_row = malloc((size_t)rows * ldq * sizeof *ref_row), *scores = malloc((size_t)n_ctx * sizeof *scores);
    double *ref = malloc((size_t)rows * H * d * sizeof *ref);
    for (size_t i = 0; i < (size_t)rows * ldq; i++) q[i] = frand(-3, 3); /* peaked softmax: rescaling happens */
    void *scratch = aligned_alloc(64, (attn_tile_scratch_bytes(rows * c->group, d) + 63) & ~(size_t)63);
    for (int l = 0; l < 2; l++) {
        for (int r = 0; r < rows; r++)
            for (int h = 0; h < H; h++) {
                const int p = c->cached + r, lo = c->window && p + 1 > c->window ? p + 1 - c->window : 0;
                reference(kv, seq, l, h / c->group, d, q + r * ldq + (size_t)h * d, lo, p, scale, c->softcap, sinks[h],
                          ref + ((size_t)r * H + h) * d);
            }
        for (size_t ii = 0; ii < sizeof isas / sizeof *isas; ii++) {
            if (!kern_cpu_supports(isas[ii])) continue;
            const attn_tile_ops *t = attn_tile_select(isas[ii]);
            const kern_ops *ops = kern_select(isas[ii]);
            assert_non_null(t);
            assert_int_equal(t->isa, isas[ii]);
            for (size_t i = 0; i < (size_t)rows * ldq; i++) out[i] = NAN, ref_row[i] = NAN;
            for (int kh = 0; kh < c->n_kv; kh++) {
                const size_t col = (size_t)kh * c->group * d;
                const attn_extra x = {c->softcap, c->sinks ? sinks + kh * c->group : NULL};
                if (c->softcap > 0 || c->sinks)
                    attn_tile_seq_x(t, kv, seq, l, kh, c->group, q + col, ldq, c->cached, rows, c->window, scale, &x,
                                    out + col, ldq, scratch);
                else
                    attn_tile_seq(t, kv, seq, l, kh, c->group, q + col, ldq, c->cached, rows, c->window, scale,
                                  out + col, ldq, scratch);
            }
            for (int r = 0; r < rows; r++)
                for (int h = 0; h < H; h++) {
                    const int p = c->cached + r, lo = c->window && p + 1 > c->window ? p + 1 - c->window : 0;
                    const attn_extra x = {c->softcap, c->sinks ? sinks + h : NULL};
                    if (c->softcap > 0 || c->sinks)
                        attn_seq_heads_x(ops, kv, seq, l, h / c->group, 1, q + r * ldq + (size_t)h * d, lo, p + 1,
                                         scale, &x, scores, ref_row + r * ldq + (size_t)h * d);
                    else
                        attn_seq_head(ops, kv, seq, l, h / c->group, q + r * ldq + (size_t)h * d, lo, p + 1, scale,
                                      scores, ref_row + r * ldq + (size_t)h * d);
                }
            double worst = 0, worst_row = 0;
            for (int r = 0; r < rows; r++)
                for (int h = 0; h < H; h++)
                    for (int i = 0; i < d; i++) {
                        const double a = out[r * ldq + (size_t)h * d + i], b = ref_row[r * ldq + (size_t)h * d + i];
                        const double e = fabs(a - ref[((size_t)r * H + h) * d + i]);
                        if (!(e <= worst)) worst = e; /* NaN too */
                        if (!(fabs(a - b) <= worst_row)) worst_row = fabs(a - b);
                    }
            if (!(worst <= TOL) || !(worst_row <= TOL))
                fail_msg("%s d %d group %d bs %d %s window %d cached %d np %d softcap %g sinks %d layer %d: |tile - "
                         "f64| %.3g, |tile - per-row| %.3g (tolerance %g)",
                         kvlm_isa_name(isas[ii]), d, c->group, c->bs, kvlm_dtype_name(c->dt), c->window, c->cached,
                         c->np, c->softcap, c->sinks, l, worst, worst_row, TOL);
        }
    }
    kv_append_commit(kv, seq, (int32_t[256]){0});
    free(scratch);
    free(q);
    free(out);
    free(ref_row);
    free(scores);
    free(ref);
    kvlm_kv_free(kv);
    kvlm_model_free(m);
}

static void test_against_reference(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(&cases[i]);
}

/* f32, f16 and bf16 widen exactly (every length 0..40: vector body and
 * tail), q8_0 for 0 to 3 blocks. */
static void test_widen_exact(void **state) {
    (void)state;
    float f[40], out[41];
    uint16_t h[40], b[40];
    for (int i = 0; i < 40; i++) {
        f[i] = frand(-100, 100);
        h[i] = f32_to_f16(f[i]);
        b[i] = f32_to_bf16(f[i]);
    }
    for (size_t ii = 0; ii < sizeof isas / sizeof *isas; ii++) {
        if (!kern_cpu_supports(isas[ii])) continue;
        const attn_tile_ops *t = attn_tile_select(isas[ii]);
        for (size_t n = 0; n <= 40; n++) {
            const void *src[3] = {f, h, b};
            const kvlm_dtype dts[3] = {KVLM_F32, KVLM_F16, KVLM_BF16};
            for (int k = 0; k < 3; k++) {
                out[n] = 12345.0f;
                t->widen(src[k], dts[k], n, out);
                for (size_t i = 0; i < n; i++) assert_true(out[i] == dtype_load(dts[k], src[k], i));
                assert_true(out[n] == 12345.0f);
            }
        }
        /* q8_0: whole blocks of 32 */
        blk_q8_0 q[3];
        quant_quantize_row(KVLM_Q8_0, f, 32, q);
        quant_quantize_row(KVLM_Q8_0, f + 8, 32, q + 1);
        q[2] = q[0];
        q[2].d = f32_to_f16(-1e-3f);
        for (size_t n = 0; n <= 96; n += 32) {
            float wide[97];
            wide[n] = 12345.0f;
            t->widen(q, KVLM_Q8_0, n, wide);
            for (size_t i = 0; i < n; i++) assert_true(wide[i] == dtype_load(KVLM_Q8_0, q, i));
            assert_true(wide[n] == 12345.0f);
        }
    }
}

/* The VNNI sets use the tiles of their base ISA. */
static void test_select(void **state) {
    (void)state;
#if defined(__x86_64__)
    if (kern_cpu_supports(KVLM_ISA_AVX512_VNNI)) assert_ptr_equal(attn_tile_select(KVLM_ISA_AVX512_VNNI), &attn_tile_avx512);
    if (kern_cpu_supports(KVLM_ISA_AVX2_VNNI)) assert_ptr_equal(attn_tile_select(KVLM_ISA_AVX2_VNNI), &attn_tile_avx2);
#elif defined(__aarch64__)
    if (kern_cpu_supports(KVLM_ISA_NEON)) assert_ptr_equal(attn_tile_select(KVLM_ISA_NEON), &attn_tile_neon);
    if (kern_cpu_supports(KVLM_ISA_NEON_DOTPROD)) assert_ptr_equal(attn_tile_select(KVLM_ISA_NEON_DOTPROD), &attn_tile_neon);
#endif
    assert_ptr_equal(attn_tile_select(KVLM_ISA_SCALAR), &attn_tile_scalar);
}

/* ------------------------------------------------------------ through the engine */

static void toks(int32_t *t, int n, int seed) {
    for (int i = 0; i < n; i++) t[i] = (i * 37 + seed * 11 + 5) % 256;
}

static void test_batch_of_sequences(void **state) {
    (void)state;
    kvlm_error err;
    kvlm_model *m = kvlm_model_synthetic("llama-tiny", KVLM_F32, 7, NULL, &err);
    if (!m) fail_msg("synthetic: %s", err.msg);
    const int V = kvlm_model_config(m)->vocab_size;
    int32_t a[31], b[45], c[31];
    toks(a, 31, 1), toks(b, 45, 2), toks(c, 31, 3);
    for (size_t ii = 0; ii < sizeof isas / sizeof *isas; ii++) {
        if (!kern_cpu_supports(isas[ii])) continue;
        kvlm_engine_options eo = kvlm_engine_default_params();
        eo.isa = isas[ii];
        eo.threads = 2;
        kvlm_kv_options ko = kvlm_kv_default_params();
        ko.dtype = KVLM_F32;
        ko.block_size = 16;
        ko.max_seqs = 4;
        ko.no_prefix_cache = 1;
        /* Together: a's first 11 and c's first 30 positions cached, then one
         * step with a's next 20, all of b (two tiles) and c's last token. */
        kvlm_kv *kv = kvlm_kv_create(m, &ko, &err);
        kvlm_engine *e = kvlm_engine_create(m, kv, &eo, &err);
        if (!kv || !e) fail_msg("create: %s", err.msg);
        const int sa = kvlm_kv_seq_new(kv, &err), sb = kvlm_kv_seq_new(kv, &err), sc = kvlm_kv_seq_new(kv, &err);
        float *pre = malloc((size_t)30 * V * sizeof *pre);
        kvlm_batch_item first[2] = {{sa, a, 11, 0}, {sc, c, 30, 0}};
        if (kvlm_engine_step(e, first, 2, pre, &err)) fail_msg("step: %s", err.msg);
        const int n_rows = 20 + 45 + 1;
        float *together = malloc((size_t)n_rows * V * sizeof *together);
        kvlm_batch_item step[3] = {{sa, a + 11, 20, 1}, {sb, b, 45, 1}, {sc, c + 30, 1, 1}};
        if (kvlm_engine_step(e, step, 3, together, &err)) fail_msg("step: %s", err.msg);
        kvlm_engine_free(e);
        kvlm_kv_free(kv);
        /* Alone: each sequence in an engine of its own, same history. */
        const int32_t *src[3] = {a, b, c};
        const int cached[3] = {11, 0, 30}, n[3] = {20, 45, 1};
        int row = 0;
        for (int s = 0; s < 3; s++) {
            kv = kvlm_kv_create(m, &ko, &err);
            e = kvlm_engine_create(m, kv, &eo, &err);
            const int sq = kvlm_kv_seq_new(kv, &err);
            if (cached[s]) {
                kvlm_batch_item it = {sq, src[s], cached[s], 0};
                if (kvlm_engine_step(e, &it, 1, pre, &err)) fail_msg("step: %s", err.msg);
            }
            float *alone = malloc((size_t)n[s] * V * sizeof *alone);
            kvlm_batch_item it = {sq, src[s] + cached[s], n[s], 1};
            if (kvlm_engine_step(e, &it, 1, alone, &err)) fail_msg("step: %s", err.msg);
            double worst = 0;
            for (size_t i = 0; i < (size_t)n[s] * V; i++) {
                const double diff = fabs((double)alone[i] - together[(size_t)row * V + i]);
                if (!(diff <= worst)) worst = diff;
            }
            if (!(worst <= 1e-4))
                fail_msg("%s: sequence %d alone vs in the batch differ by %.3g", kvlm_isa_name(isas[ii]), s, worst);
            row += n[s];
            free(alone);
            kvlm_engine_free(e);
            kvlm_kv_free(kv);
        }
        free(pre);
        free(together);
    }
    kvlm_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_reference),
        cmocka_unit_test(test_widen_exact),
        cmocka_unit_test(test_select),
        cmocka_unit_test(test_batch_of_sequences),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
