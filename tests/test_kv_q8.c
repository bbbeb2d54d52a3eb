/*
 * The q8_0 KV cache: per token and KV head, head_dim / 32 blocks of an f16
 * scale and 32 int8 (34 bytes each).
 *
 * - Exact bytes: kvlm_kv_bytes_per_token and the cache's stats against
 *   2 x layers x KV heads x (head_dim + 2 x head_dim / 32), and a head dim
 *   that is not whole blocks refused with a message naming it.
 * - Kernels, on every kernel set this CPU runs: store_row writes the same
 *   bits as the scalar reference (and as the weights' quantiser), edge
 *   values included; attn_scores / attn_accum over q8_0 rows
 *   equal the same sums over the dequantised floats (1e-5 relative).
 * - Attention over q8_0 K/V against attention over the same K/V kept in
 *   f32 (decode rows through attn_seq_head, prefill tiles through
 *   attn_tile_seq), K/V in [-1, 1], queries in [-3, 3]: within Q8_TOL
 *   absolute. The int8 rounding moves a value by at most amax / 254 (0.004
 *   here), which moves the output directly and through the scores; the
 *   largest difference seen on the development machine was 0.0085.
 * - Sharing on the shipped GPT-2 (head dim 32) with q8_0 K/V: a fork
 *   continued on both sides (copy-on-write of the partly filled block)
 *   equals independent runs token for token, a prefix-cache hit equals a
 *   cold run, and a truncated sequence stepped again equals a fresh one;
 *   the cache's invariants hold throughout.
 * - The shipped GPT-2, greedy, q8_0 K/V against f16 K/V: teacher-forced
 *   on the f16 run's 48 tokens, every step's logits agree within
 *   LOGIT_TOL and the top-1 token agrees wherever the f16 margin between
 *   the first two tokens exceeds twice the step's largest logit
 *   difference; free-running, the first GREEDY_SAME tokens are identical
 *   (all 48 matched on the development machine, the largest logit
 *   difference was 0.0093).
 */
#include <math.h>
#include <stdio.h>
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

#define GPT2 "models/shakespeare-gpt2"
#define TINY "tests/fixtures/gpt2/hf_f32" /* head dim 16 */
#define Q8_TOL 0.02
#define LOGIT_TOL 0.05
#define GREEDY_N 48
#define GREEDY_SAME 16

static const kvlm_isa isas[] = {KVLM_ISA_SCALAR, KVLM_ISA_AVX2, KVLM_ISA_AVX512, KVLM_ISA_NEON};

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float frand(float lo, float hi) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return lo + (hi - lo) * (float)((rng_state >> 40) / 16777216.0);
}

/* llama-tiny reshaped: 2 layers, n_kv heads of d, GQA group, context n_ctx. */
static kvlm_model *shaped_model(int d, int n_kv, int group, int n_ctx) {
    kvlm_error err;
    kvlm_model *m = kvlm_model_synthetic("llama-tiny", KVLM_F32, 1, NULL, &err);
    if (!m) fail_msg("synthetic: %s", err.msg);
    m->cfg.n_layer = 2;
    m->cfg.n_kv_head = n_kv;
    m->cfg.n_head = n_kv * group;
    m->cfg.head_dim = d;
    m->cfg.n_ctx = n_ctx;
    m->cfg.sliding_window = 0;
    return m;
}

/* ------------------------------------------------------------ bytes */

static void test_bytes_per_token(void **state) {
    (void)state;
    const struct { int layers, kv_heads, d; size_t q8; } shapes[] = {
        {6, 4, 32, 2 * 6 * 4 * (32 + 2)},     /* the shipped GPT-2: 1632 */
        {2, 2, 64, 2 * 2 * 2 * (64 + 4)},
        {16, 8, 64, 2 * 16 * 8 * (64 + 4)},   /* Llama 3.2 1B */
        {32, 8, 128, 2 * 32 * 8 * (128 + 8)}, /* Llama 3.1 8B: 69632 */
    };
    kvlm_error err;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        kvlm_model *m = shaped_model(shapes[i].d, shapes[i].kv_heads, 1, 64);
        m->cfg.n_layer = shapes[i].layers;
        const kvlm_config *c = kvlm_model_config(m);
        assert_int_equal(kvlm_kv_bytes_per_token(c, KVLM_Q8_0), shapes[i].q8);
        assert_int_equal(kvlm_kv_bytes_per_token(c, KVLM_F16),
                         2 * (size_t)shapes[i].layers * shapes[i].kv_heads * shapes[i].d * 2);
        assert_int_equal(kvlm_kv_bytes_per_token(c, KVLM_F32),
                         2 * (size_t)shapes[i].layers * shapes[i].kv_heads * shapes[i].d * 4);
        assert_int_equal(kv_row_bytes(KVLM_Q8_0, shapes[i].d), (size_t)shapes[i].d / 32 * 34);
        kvlm_kv *kv = kvlm_kv_create(m, &(kvlm_kv_options){.dtype = KVLM_Q8_0, .block_size = 16, .n_blocks = 3}, &err);
        if (!kv) fail_msg("kv: %s", err.msg);
        kvlm_kv_stats st;
        kvlm_kv_get_stats(kv, &st);
        assert_int_equal(st.bytes_per_token, shapes[i].q8);
        assert_int_equal(st.block_bytes, 16 * shapes[i].q8);
        assert_int_equal(st.bytes_pool, 3 * 16 * shapes[i].q8);
        assert_int_equal(kv_dtype(kv), KVLM_Q8_0);
        kvlm_kv_free(kv);
        kvlm_model_free(m);
    }
    /* bf16 and the weight-only block types are no KV dtypes */
    kvlm_model *m = shaped_model(64, 2, 1, 64);
    assert_int_equal(kvlm_kv_bytes_per_token(kvlm_model_config(m), KVLM_BF16), 0);
    assert_int_equal(kvlm_kv_bytes_per_token(kvlm_model_config(m), KVLM_Q4_0), 0);
    assert_null(kvlm_kv_create(m, &(kvlm_kv_options){.dtype = KVLM_Q4_0}, &err));
    assert_int_equal(err.code, KVLM_ERR_ARG);
    assert_non_null(strstr(err.msg, "q4_0"));
    kvlm_model_free(m);
    /* head dims 16 and 48 are not whole blocks of 32 */
    m = shaped_model(48, 2, 1, 64);
    assert_int_equal(kvlm_kv_bytes_per_token(kvlm_model_config(m), KVLM_Q8_0), 0);
    assert_null(kvlm_kv_create(m, &(kvlm_kv_options){.dtype = KVLM_Q8_0}, &err));
    assert_int_equal(err.code, KVLM_ERR_ARG);
    assert_non_null(strstr(err.msg, "multiple of 32"));
    assert_non_null(strstr(err.msg, "48"));
    kvlm_model_free(m);
    const th_cli_case bad[] = {
        {"run -m " TINY " --ids 1,2 -n 2 --kv-dtype q8_0", 2, "multiple of 32"},
        {"run -m " GPT2 " -p hi -n 2 --kv-dtype q4_0", 2, "is not a KV cache dtype (f32, f16 or q8_0)"},
    };
    th_expect_cli(bad, sizeof bad / sizeof *bad);
    char *out = NULL;
    assert_int_equal(th_run_kvlm(&out, "run -m " GPT2 " --ids 1,2,3 -n 4 --temp 0 --kv-dtype q8_0 --stats"), 0);
    assert_non_null(strstr(out, "KV dtype             q8_0"));
    assert_non_null(strstr(out, "KV bytes per token   1632 (2 x 6 layers x 4 KV heads x (32 x 1 B + 1 x 2 B scale))"));
    free(out);
}

/* ------------------------------------------------------------ kernels */

static void test_kernels_each_isa(void **state) {
    (void)state;
    enum { N = 21 };
    for (int d = 32; d <= 128; d *= 2) {
        const int nb = d / 32;
        float *x = malloc((size_t)N * d * 4), *deq = malloc((size_t)N * d * 4), q[128], p[N];
        blk_q8_0 *ref = malloc((size_t)N * nb * sizeof *ref), *row = malloc((size_t)N * nb * sizeof *row);
        for (int i = 0; i < N * d; i++) x[i] = frand(-2, 2) * (i % 7 == 0 ? 3.0f : 1.0f);
        for (int i = 0; i < d; i++) q[i] = frand(-3, 3);
        for (int j = 0; j < N; j++) p[j] = frand(0, 1);
        for (int j = 0; j < N; j++) kern_ops_scalar.store_row(ref + (size_t)j * nb, KVLM_Q8_0, x + (size_t)j * d, d);
        quant_dequantize_row(KVLM_Q8_0, ref, (int64_t)N * d, deq);
        for (size_t ii = 0; ii < sizeof isas / sizeof *isas; ii++) {
            if (!kern_cpu_supports(isas[ii])) continue;
            const kern_ops *ops = kern_select(isas[ii]);
            for (int j = 0; j < N; j++) ops->store_row(row + (size_t)j * nb, KVLM_Q8_0, x + (size_t)j * d, d);
            assert_memory_equal(row, ref, (size_t)N * nb * sizeof *ref);
            /* the edges of the rounding, the same bits as the reference: a
             * zero block, halves (127 / 127 * k + 0.5 steps), -0, NaN and
             * infinities, a scale beyond f16, tiny values */
            float edge[5 * 32];
            for (int i = 0; i < 32; i++) {
                edge[i] = 0.0f;
                edge[32 + i] = i == 0 ? 127.0f : (float)(i - 16) + 0.5f;
                edge[64 + i] = i % 4 == 0 ? -0.0f : i % 4 == 1 ? NAN : i % 4 == 2 ? -INFINITY : (float)i;
                edge[96 + i] = i % 2 ? 1e9f : -3e8f * (float)i;
                edge[128 + i] = 1e-30f * (float)(i - 7);
            }
            blk_q8_0 e_ref[5], e_isa[5];
            kern_ops_scalar.store_row(e_ref, KVLM_Q8_0, edge, 5 * 32);
            ops->store_row(e_isa, KVLM_Q8_0, edge, 5 * 32);
            assert_memory_equal(e_isa, e_ref, sizeof e_ref);
            quant_quantize_row(KVLM_Q8_0, edge, 5 * 32, e_isa); /* the weights' quantiser agrees */
            assert_memory_equal(e_isa, e_ref, sizeof e_ref);
            assert_int_equal(e_ref[1].q[3], -13); /* -12.5 (scale 1) rounds away from zero */
            assert_int_equal(e_ref[1].q[20], 5);  /* 4.5 -> 5 */
            float s[N], s_f[N], o[128], o_f[128];
            ops->attn_scores(q, row, KVLM_Q8_0, N, d, 0.125f, s);
            kern_ops_scalar.attn_scores(q, deq, KVLM_F32, N, d, 0.125f, s_f);
            for (int j = 0; j < N; j++)
                if (!(fabsf(s[j] - s_f[j]) <= 1e-5f * (1 + fabsf(s_f[j]))))
                    fail_msg("%s d %d: score %d %g vs %g", kvlm_isa_name(isas[ii]), d, j, s[j], s_f[j]);
            for (int i = 0; i < d; i++) o[i] = o_f[i] = 0.5f;
            ops->attn_accum(p, row, KVLM_Q8_0, N, d, o);
            kern_ops_scalar.attn_accum(p, deq, KVLM_F32, N, d, o_f);
            for (int i = 0; i < d; i++)
                if (!(fabsf(o[i] - o_f[i]) <= 1e-5f * (1 + fabsf(o_f[i]))))
                    fail_msg("%s d %d: accum %d %g vs %g", kvlm_isa_name(isas[ii]), d, i, o[i], o_f[i]);
        }
        free(x), free(deq), free(ref), free(row);
    }
}

/* ------------------------------------------------------------ against f32 K/V */

/* Writes the same random K/V into both caches (positions 0..n). */
static void fill_both(kvlm_kv *a, int sa, kvlm_kv *b, int sb, int n, int n_kv, int d) {
    kvlm_error err;
    if (kv_append_reserve(a, sa, n, &err) || kv_append_reserve(b, sb, n, &err)) fail_msg("reserve: %s", err.msg);
    const int w = n_kv * d;
    float *k = malloc((size_t)w * 4), *v = malloc((size_t)w * 4);
    for (int p = 0; p < n; p++)
        for (int l = 0; l < 2; l++) {
            for (int i = 0; i < w; i++) k[i] = frand(-1, 1), v[i] = frand(-1, 1);
            attn_store_kv(&kern_ops_scalar, a, sa, p, l, k, v);
            attn_store_kv(&kern_ops_scalar, b, sb, p, l, k, v);
        }
    free(k), free(v);
}

static void test_attention_vs_f32(void **state) {
    (void)state;
    const struct { int d, n_kv, group, bs, n; } cases[] = {
        {32, 2, 2, 16, 70}, {64, 2, 4, 16, 100}, {128, 1, 2, 5, 45}, {64, 4, 1, 4, 33},
    };
    kvlm_error err;
    double worst_all = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const int d = cases[ci].d, n_kv = cases[ci].n_kv, group = cases[ci].group, n = cases[ci].n;
        kvlm_model *m = shaped_model(d, n_kv, group, n + 1);
        kvlm_kv *kf = kvlm_kv_create(m, &(kvlm_kv_options){.dtype = KVLM_F32, .block_size = cases[ci].bs}, &err);
        kvlm_kv *kq = kvlm_kv_create(m, &(kvlm_kv_options){.dtype = KVLM_Q8_0, .block_size = cases[ci].bs}, &err);
        assert_non_null(kf);
        assert_non_null(kq);
        const int sf = kvlm_kv_seq_new(kf, &err), sq = kvlm_kv_seq_new(kq, &err);
        fill_both(kf, sf, kq, sq, n, n_kv, d);
        const int H = n_kv * group;
        const size_t ld = (size_t)H * d;
        const float scale = 1.0f / sqrtf((float)d);
        float *q = malloc((size_t)n * ld * 4), *ref = malloc((size_t)n * ld * 4), *out = malloc((size_t)n * ld * 4);
        float *scores = malloc((size_t)n * 4);
        for (size_t i = 0; i < (size_t)n * ld; i++) q[i] = frand(-3, 3);
        void *scratch = aligned_alloc(64, (attn_tile_scratch_bytes(n * group, d) + 63) & ~(size_t)63);
        for (int l = 0; l < 2; l++) {
            /* the f32 reference: every position's row, scalar kernels */
            for (int r = 0; r < n; r++)
                for (int h = 0; h < H; h++)
                    attn_seq_head(&kern_ops_scalar, kf, sf, l, h / group, q + r * ld + (size_t)h * d, 0, r + 1, scale,
                                  scores, ref + r * ld + (size_t)h * d);
            for (size_t ii = 0; ii < sizeof isas / sizeof *isas; ii++) {
                if (!kern_cpu_supports(isas[ii])) continue;
                const kern_ops *ops = kern_select(isas[ii]);
                const attn_tile_ops *t = attn_tile_select(isas[ii]);
                for (int pass = 0; pass < 2; pass++) { /* 0: decode rows, 1: one prefill tile */
                    for (size_t i = 0; i < (size_t)n * ld; i++) out[i] = NAN;
                    if (pass == 0) {
                        for (int r = 0; r < n; r++)
                            for (int h = 0; h < H; h++)
                                attn_seq_head(ops, kq, sq, l, h / group, q + r * ld + (size_t)h * d, 0, r + 1, scale,
                                              scores, out + r * ld + (size_t)h * d);
                    } else {
                        for (int kh = 0; kh < n_kv; kh++)
                            attn_tile_seq(t, kq, sq, l, kh, group, q + (size_t)kh * group * d, ld, 0, n, 0, scale,
                                          out + (size_t)kh * group * d, ld, scratch);
                    }
                    double worst = 0;
                    for (size_t i = 0; i < (size_t)n * ld; i++) {
                        const double e = fabs((double)out[i] - ref[i]);
                        if (!(e <= worst)) worst = e;
                    }
                    if (!(worst <= Q8_TOL))
                        fail_msg("%s d %d group %d %s: |q8_0 - f32| %.4g > %g", kvlm_isa_name(isas[ii]), d, group,
                                 pass ? "tile" : "rows", worst, Q8_TOL);
                    assert_true(worst > 0); /* the int8 rounding is there */
                    if (worst > worst_all) worst_all = worst;
                }
            }
        }
        print_message("  d %d group %d: attention over q8_0 vs f32 K/V, largest difference so far %.4g\n", d, group,
                      worst_all);
        free(scratch), free(q), free(ref), free(out), free(scores);
        kv_append_commit(kf, sf, (int32_t[128]){0});
        kv_append_commit(kq, sq, (int32_t[128]){0});
        kvlm_kv_free(kf);
        kvlm_kv_free(kq);
        kvlm_model_free(m);
    }
}

/* ------------------------------------------------------------ sharing */

/* A q8_0 cache (blocks of 4 tokens) and an engine on it. */
typedef struct rig {
    kvlm_kv *kv;
    kvlm_engine *e;
    int V;
} rig;

static rig rig_open(kvlm_model *m, int prefix_cache) {
    kvlm_error err;
    rig r = {.V = kvlm_model_config(m)->vocab_size};
    kvlm_kv_options o = kvlm_kv_default_params();
    o.dtype = KVLM_Q8_0;
    o.block_size = 4;
    o.max_seqs = 6;
    o.no_prefix_cache = !prefix_cache;
    r.kv = kvlm_kv_create(m, &o, &err);
    if (!r.kv) fail_msg("kv: %s", err.msg);
    r.e = kvlm_engine_create(m, r.kv, &(kvlm_engine_options){.threads = 2}, &err);
    assert_non_null(r.e);
    return r;
}

static void rig_close(rig *r) {
    kvlm_engine_free(r->e);
    kvlm_kv_free(r->kv);
}

static void step1(rig *r, int seq, const int32_t *t, int n, float *logits) {
    kvlm_error err;
    kvlm_batch_item it = {seq, t, n, 0};
    if (kvlm_engine_step(r->e, &it, 1, logits, &err)) fail_msg("%s", err.msg);
    if (kv_check_invariants(r->kv, &err)) fail_msg("invariants: %s", err.msg);
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Greedy continuation of seq from logits lg (overwritten). */
static void greedy(rig *r, int seq, float *lg, int n, int32_t *out) {
    for (int i = 0; i < n; i++) {
        out[i] = argmax(lg, r->V);
        step1(r, seq, &out[i], 1, lg);
    }
}

static double maxdiff(const float *a, const float *b, int n) {
    double d = 0;
    for (int i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

static void test_sharing_and_truncate(void **state) {
    (void)state;
    kvlm_error err;
    kvlm_model *m = kvlm_model_load(GPT2, NULL, &err);
    if (!m) fail_msg("%s", err.msg);
    rig r = rig_open(m, 1);
    /* "I, what is the matter, and his is a great.\n" */
    const int32_t prompt[14] = {40, 11, 644, 318, 262, 2300, 11, 290, 465, 318, 257, 1049, 13, 198};
    float *lg = malloc((size_t)r.V * 4), *lg2 = malloc((size_t)r.V * 4), *cold = malloc((size_t)r.V * 4);
    /* fork after 6 tokens (a partly filled block of 4), both sides go on */
    const int parent = kvlm_kv_seq_new(r.kv, &err);
    step1(&r, parent, prompt, 6, lg);
    const int child = kvlm_kv_seq_fork(r.kv, parent, &err);
    assert_true(child >= 0);
    int32_t from_child[12], from_parent[12], solo_out[12];
    int32_t alt[1] = {0};
    memcpy(lg2, lg, (size_t)r.V * 4);
    greedy(&r, child, lg2, 12, from_child); /* the child writes first: copy-on-write */
    alt[0] = 198;
    step1(&r, parent, alt, 1, lg2); /* the parent takes another token into its own block */
    greedy(&r, parent, lg2, 11, from_parent + 1);
    kvlm_kv_stats st;
    kvlm_kv_get_stats(r.kv, &st);
    assert_true(st.cow_copies >= 1);
    rig s = rig_open(m, 0);
    int solo = kvlm_kv_seq_new(s.kv, &err);
    step1(&s, solo, prompt, 6, lg2);
    greedy(&s, solo, lg2, 12, solo_out);
    assert_memory_equal(from_child, solo_out, sizeof solo_out);
    kvlm_kv_seq_free(s.kv, solo);
    solo = kvlm_kv_seq_new(s.kv, &err);
    int32_t ctx[7];
    memcpy(ctx, prompt, 6 * sizeof *ctx);
    ctx[6] = 198;
    step1(&s, solo, ctx, 7, lg2);
    greedy(&s, solo, lg2, 11, solo_out + 1);
    assert_memory_equal(from_parent + 1, solo_out + 1, 11 * sizeof *solo_out);
    kvlm_kv_seq_free(s.kv, solo);

    /* a prefix-cache hit (12 of 14 tokens, three blocks) against a cold run */
    kvlm_kv_seq_free(r.kv, parent);
    kvlm_kv_seq_free(r.kv, child);
    int cached, a = kvlm_kv_seq_new_prefixed(r.kv, prompt, 14, &cached, &err);
    step1(&r, a, prompt + cached, 14 - cached, lg);
    kvlm_kv_seq_free(r.kv, a);
    int32_t other[14];
    memcpy(other, prompt, sizeof other);
    other[13] = 11;
    a = kvlm_kv_seq_new_prefixed(r.kv, other, 14, &cached, &err);
    assert_int_equal(cached, 12);
    step1(&r, a, other + cached, 14 - cached, lg);
    solo = kvlm_kv_seq_new(s.kv, &err);
    step1(&s, solo, other, 14, cold);
    /* the same stored bits; the hit attends its rows alone, the cold run in a tile */
    if (!(maxdiff(lg, cold, r.V) < 1e-4)) fail_msg("prefix hit vs cold: %g", maxdiff(lg, cold, r.V));

    /* truncate into the shared prefix, step again: equals a fresh run */
    assert_int_equal(kvlm_kv_seq_truncate(r.kv, a, 9, &err), 0);
    if (kv_check_invariants(r.kv, &err)) fail_msg("invariants: %s", err.msg);
    const int32_t tail[3] = {464, 5822, 11};
    step1(&r, a, tail, 3, lg);
    kvlm_kv_seq_free(s.kv, solo);
    solo = kvlm_kv_seq_new(s.kv, &err);
    int32_t fresh[12];
    memcpy(fresh, other, 9 * sizeof *fresh);
    memcpy(fresh + 9, tail, sizeof tail);
    step1(&s, solo, fresh, 12, cold);
    if (!(maxdiff(lg, cold, r.V) < 1e-4)) fail_msg("truncated vs fresh: %g", maxdiff(lg, cold, r.V));
    int32_t g1[8], g2[8];
    greedy(&r, a, lg, 8, g1);
    greedy(&s, solo, cold, 8, g2);
    assert_memory_equal(g1, g2, sizeof g1);
    kvlm_kv_get_stats(r.kv, &st);
    assert_true(st.prefix_hits >= 1);
    free(lg), free(lg2), free(cold);
    rig_close(&r);
    rig_close(&s);
    kvlm_model_free(m);
}

/* ------------------------------------------------------------ against f16 K/V */

static void test_greedy_vs_f16(void **state) {
    (void)state;
    kvlm_error err;
    kvlm_model *m = kvlm_model_load(GPT2, NULL, &err);
    if (!m) fail_msg("%s", err.msg);
    const int V = kvlm_model_config(m)->vocab_size;
    kvlm_kv *k16 = kvlm_kv_create(m, &(kvlm_kv_options){.dtype = KVLM_F16}, &err);
    kvlm_kv *k8 = kvlm_kv_create(m, &(kvlm_kv_options){.dtype = KVLM_Q8_0, .max_seqs = 2}, &err);
    kvlm_engine *e16 = kvlm_engine_create(m, k16, &(kvlm_engine_options){.threads = 2}, &err);
    kvlm_engine *e8 = kvlm_engine_create(m, k8, &(kvlm_engine_options){.threads = 2}, &err);
    assert_non_null(e16);
    assert_non_null(e8);
    const int32_t prompt[3] = {33676, 4720, 25}; /* "ROMEO:" */
    const int s16 = kvlm_kv_seq_new(k16, &err), s8 = kvlm_kv_seq_new(k8, &err), f8 = kvlm_kv_seq_new(k8, &err);
    float *l16 = malloc((size_t)V * 4), *l8 = malloc((size_t)V * 4), *lf = malloc((size_t)V * 4);
    kvlm_batch_item it = {s16, prompt, 3, 0};
    assert_int_equal(kvlm_engine_step(e16, &it, 1, l16, &err), 0);
    it.seq = s8;
    assert_int_equal(kvlm_engine_step(e8, &it, 1, l8, &err), 0);
    it.seq = f8;
    assert_int_equal(kvlm_engine_step(e8, &it, 1, lf, &err), 0);
    int same = 0, diverged = 0, decided = 0;
    double worst = 0;
    for (int step = 0; step < GREEDY_N; step++) {
        const double dl = maxdiff(l16, l8, V);
        if (dl > worst) worst = dl;
        if (!(dl <= LOGIT_TOL)) fail_msg("step %d: logits differ by %g > %g", step, dl, LOGIT_TOL);
        int t16 = argmax(l16, V), second = t16 ? 0 : 1;
        for (int i = 0; i < V; i++)
            if (i != t16 && l16[i] > l16[second]) second = i;
        if (l16[t16] - l16[second] > 2 * dl) {
            decided++;
            if (argmax(l8, V) != t16) fail_msg("step %d: top-1 %d (q8_0) vs %d (f16), margin %g", step, argmax(l8, V),
                                               t16, l16[t16] - l16[second]);
        }
        const int tf = argmax(lf, V);
        if (!diverged && tf == t16) same++;
        else diverged = 1;
        /* teacher-forced: both caches take the f16 run's token */
        int32_t tok = t16;
        it = (kvlm_batch_item){s16, &tok, 1, 0};
        assert_int_equal(kvlm_engine_step(e16, &it, 1, l16, &err), 0);
        it.seq = s8;
        assert_int_equal(kvlm_engine_step(e8, &it, 1, l8, &err), 0);
        int32_t ftok = tf; /* free-running q8_0 greedy */
        it = (kvlm_batch_item){f8, &ftok, 1, 0};
        assert_int_equal(kvlm_engine_step(e8, &it, 1, lf, &err), 0);
    }
    print_message("  greedy q8_0 vs f16 K/V: %d of %d tokens identical before the first difference; "
                  "largest logit difference %.4g; top-1 checked on %d steps\n", same, GREEDY_N, worst, decided);
    assert_true(same >= GREEDY_SAME);
    assert_true(decided >= GREEDY_N / 2);
    free(l16), free(l8), free(lf);
    kvlm_engine_free(e16);
    kvlm_engine_free(e8);
    kvlm_kv_free(k16);
    kvlm_kv_free(k8);
    kvlm_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bytes_per_token),
        cmocka_unit_test(test_kernels_each_isa),
        cmocka_unit_test(test_attention_vs_f32),
        cmocka_unit_test(test_sharing_and_truncate),
        cmocka_unit_test(test_greedy_vs_f16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
