/*
 * Every SIMD kernel against the plain C reference, on sizes that exercise
 * full tiles, edge tiles and K tails (K not a multiple of the vector width),
 * for every weight dtype. Tolerance: 1e-5 relative to the size of the
 * result (summation order differs), 2e-6 absolute for GELU's polynomial exp.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kernels/float_batch.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "tensor.h"

static float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void *make_weights(kvlm_dtype t, int n, int k, unsigned *seed) {
    void *w = malloc((size_t)n * k * 4);
    if (t == KVLM_Q8_0) { /* rows of k / 32 blocks, as the KV cache stores them */
        float *x = malloc((size_t)n * k * sizeof(float));
        for (size_t i = 0; i < (size_t)n * k; i++) x[i] = frand(seed);
        quant_quantize_row(t, x, (int64_t)n * k, w);
        free(x);
        return w;
    }
    for (size_t i = 0; i < (size_t)n * k; i++) dtype_store(t, w, i, frand(seed));
    return w;
}

/* Every architecture's float SIMD levels; the CPU runs those of its own. */
static const kvlm_isa simd[] = {KVLM_ISA_AVX2, KVLM_ISA_AVX512, KVLM_ISA_NEON};
#define N_SIMD (sizeof simd / sizeof *simd)

static void test_matmul(void **state) {
    (void)state;
    const int Ms[] = {1, 2, 3, 4, 5, 7, 9, 14}, Ns[] = {1, 5, 8, 13, 15, 37}, Ks[] = {1, 7, 16, 33, 56, 64, 100, 600};
    const kvlm_dtype dts[] = {KVLM_F32, KVLM_F16, KVLM_BF16};
    unsigned seed = 1;
    int checked = 0;
    for (size_t d = 0; d < 3; d++)
        for (size_t a = 0; a < 8; a++)
            for (size_t b = 0; b < 6; b++)
                for (size_t c = 0; c < 8; c++) {
                    int M = Ms[a], N = Ns[b], K = Ks[c];
                    void *w = make_weights(dts[d], N, K, &seed);
                    float *x = malloc((size_t)M * K * 4), *bias = malloc((size_t)N * 4);
                    float *ref = malloc((size_t)M * N * 4), *got = malloc((size_t)M * N * 4);
                    for (int i = 0; i < M * K; i++) x[i] = frand(&seed);
                    for (int i = 0; i < N; i++) bias[i] = frand(&seed);
                    kern_matrix km = {dts[d], w, N, K, NULL, 0};
                    kern_matmul(kern_select(KVLM_ISA_SCALAR), &(kern_team){.threads = 2}, x, M, &km, bias, ref, N);
                    for (size_t s = 0; s < N_SIMD; s++) {
                        const kern_ops *ops = kern_select(simd[s]);
                        if (!ops) continue;
                        kern_matmul(ops, &(kern_team){.threads = 2}, x, M, &km, bias, got, N);
                        for (int i = 0; i < M * N; i++)
                            if (fabsf(got[i] - ref[i]) > 1e-5f * (1 + sqrtf((float)K)))
                                fail_msg("%s matmul %s M=%d N=%d K=%d [%d]: %g vs %g", kvlm_isa_name(simd[s]),
                                         kvlm_dtype_name(dts[d]), M, N, K, i, got[i], ref[i]);
                        checked++;
                    }
                    free(w), free(x), free(bias), free(ref), free(got);
                }
    assert_true(checked > 0 || kvlm_isa_best() == KVLM_ISA_SCALAR);
}

/* A decode row (M = 1, the prefetching single-row tiles) sums exactly as
 * the same row inside a prefill batch: bit-identical outputs, for every
 * dtype, row counts that end in every tail (8-row tiles, then 4, 2, 1 rows)
 * and K with and without vector tails. Batches of 3 rows take the tiles
 * that read the stored weights; batches of 8, 13, 14, 125 and 450 rows the
 * packed prefill path (whole tiles of x rows, then tails of 2 and 1 rows).
 * K up to 600 takes one panel for all of K in both sets; K = 1000 is cut
 * into 2 blocks by the 16-lane set (one panel in the 8-lane set) and
 * K = 2100 into 5 and 3 blocks, with a vector tail. 125 rows at K = 2100
 * (and at K = 1000 in the 16-lane set) and 450 rows at K = 600 span two
 * or more blocks of x rows. The direct form (matmul_rows_direct, never
 * packed) gives every batch the same bits. */
static void test_matmul_row1_equals_batch(void **state) {
    (void)state;
    const int Ns[] = {7, 8, 15, 16, 31, 45}, Ks[] = {24, 40, 56, 96, 129, 600, 1000, 2100},
              Ms[] = {3, 8, 13, 14, 125, 450};
    const kvlm_dtype dts[] = {KVLM_F32, KVLM_F16, KVLM_BF16};
    unsigned seed = 3;
    for (size_t s = 0; s < N_SIMD; s++) {
        const kern_ops *ops = kern_select(simd[s]);
        if (!ops) continue;
        for (size_t d = 0; d < 3; d++)
            for (size_t b = 0; b < 6; b++)
                for (size_t c = 0; c < 8; c++)
                    for (size_t a = 0; a < 6; a++) {
                        const int M = Ms[a], N = Ns[b], K = Ks[c];
                        void *w = make_weights(dts[d], N, K, &seed);
                        float *x = malloc((size_t)M * K * 4), *batch = malloc((size_t)M * N * 4);
                        float *one = malloc((size_t)N * 4), *direct = malloc((size_t)M * N * 4);
                        for (int i = 0; i < M * K; i++) x[i] = frand(&seed);
                        kern_matrix km = {dts[d], w, N, K, NULL, 0};
                        ops->matmul_rows(x, M, &km, 0, N, NULL, batch, N);
                        ops->matmul_rows_direct(x, M, &km, 0, N, NULL, direct, N);
                        for (int m = 0; m < M; m++) {
                            ops->matmul_rows(x + (size_t)m * K, 1, &km, 0, N, NULL, one, N);
                            if (memcmp(one, batch + (size_t)m * N, (size_t)N * 4))
                                fail_msg("%s %s M=%d N=%d K=%d row %d: decode differs from batch",
                                         kvlm_isa_name(simd[s]), kvlm_dtype_name(dts[d]), M, N, K, m);
                            if (memcmp(one, direct + (size_t)m * N, (size_t)N * 4))
                                fail_msg("%s %s M=%d N=%d K=%d row %d: decode differs from the direct batch",
                                         kvlm_isa_name(simd[s]), kvlm_dtype_name(dts[d]), M, N, K, m);
                        }
                        free(w), free(x), free(batch), free(one), free(direct);
                    }
    }
}

/* The float batch choice: each SIMD set measures both forms once per
 * weight dtype and K (two positive times, the faster one chosen and
 * handed out by kern_float_batch_rows for batches, never for one row),
 * keeps the answer (a second query measures nothing), and has no choice
 * for quantised weights or the scalar set. */
static void test_float_batch_choice(void **state) {
    (void)state;
    const kvlm_dtype dts[] = {KVLM_F32, KVLM_F16, KVLM_BF16};
    assert_int_equal(kern_float_batch_get(kern_select(KVLM_ISA_SCALAR), KVLM_F32, 64, NULL), -1);
    for (size_t s = 0; s < N_SIMD; s++) {
        const kern_ops *ops = kern_select(simd[s]);
        if (!ops) continue;
        assert_int_equal(kern_float_batch_get(ops, KVLM_Q8_0, 64, NULL), -1);
        for (size_t d = 0; d < 3; d++) {
            kern_float_batch fb, again;
            const int direct = kern_float_batch_get(ops, dts[d], 200, &fb);
            assert_true(direct == 0 || direct == 1);
            assert_int_equal(fb.direct, direct);
            assert_false(fb.forced);
            assert_true(fb.packed_us > 0 && fb.direct_us > 0);
            assert_int_equal(direct, fb.direct_us < fb.packed_us);
            assert_int_equal(kern_float_batch_get(ops, dts[d], 200, &again), direct);
            assert_true(again.packed_us == fb.packed_us && again.direct_us == fb.direct_us);
            kern_matrix km = {dts[d], NULL, 16, 200, NULL, 0};
            assert_ptr_equal(kern_float_batch_rows(ops, &km, 1), ops->matmul_rows);
            assert_ptr_equal(kern_float_batch_rows(ops, &km, 8), direct ? ops->matmul_rows_direct : ops->matmul_rows);
        }
    }
}

/* Large enough for the threaded split (several chunks per thread). */
static void test_matmul_threaded(void **state) {
    (void)state;
    unsigned seed = 7;
    const int M = 6, N = 1000, K = 96;
    void *w = make_weights(KVLM_F16, N, K, &seed);
    float *x = malloc(M * K * 4), *ref = malloc(M * N * 4), *got = malloc(M * N * 4);
    for (int i = 0; i < M * K; i++) x[i] = frand(&seed);
    kern_matrix km = {KVLM_F16, w, N, K, NULL, 0};
    const kern_ops *sc = kern_select(KVLM_ISA_SCALAR);
    sc->matmul_rows(x, M, &km, 0, N, NULL, ref, N);
    kern_matmul(kern_select(KVLM_ISA_AUTO), &(kern_team){.threads = 2}, x, M, &km, NULL, got, N);
    for (int i = 0; i < M * N; i++) assert_true(fabsf(got[i] - ref[i]) < 1e-4f);
    free(w), free(x), free(ref), free(got);
}

/* The grouped decode attention (one pass over K and V for the query heads
 * of a KV group) gives every head the bits of the per-head kernels of the
 * same ISA, for group sizes that take the 4- and 2-head paths and the
 * single-head rest, head sizes with and without a vector tail, and score
 * rows wider than n. */
static void test_attention_heads(void **state) {
    (void)state;
    unsigned seed = 11;
    const int ds[] = {64, 128, 24, 7}, ns[] = {1, 5, 16}, hs[] = {1, 2, 3, 4, 7};
    const kvlm_isa isas[] = {KVLM_ISA_SCALAR, KVLM_ISA_AVX2, KVLM_ISA_AVX512, KVLM_ISA_NEON};
    enum { HMAX = 7, DMAX = 128, NMAX = 16, LDS = NMAX + 3 };
    for (size_t s = 0; s < 4; s++) {
        const kern_ops *ops = kern_select(isas[s]);
        if (!ops) continue;
        for (size_t a = 0; a < 4; a++)
            for (size_t b = 0; b < 3; b++)
                for (size_t c = 0; c < 5; c++)
                    for (int kt = 0; kt < 3; kt++) {
                        const int d = ds[a], n = ns[b], H = hs[c];
                        const kvlm_dtype t = kt == 2 ? KVLM_Q8_0 : kt ? KVLM_F16 : KVLM_F32;
                        if (t == KVLM_Q8_0 && d % 32) continue; /* Q8_0 rows are whole blocks of 32 */
                        float q[HMAX * DMAX], p[HMAX * LDS], s1[HMAX * LDS] = {0}, sg[HMAX * LDS] = {0};
                        float o1[HMAX * DMAX], og[HMAX * DMAX];
                        void *kv = make_weights(t, n, d, &seed);
                        for (int i = 0; i < H * d; i++) q[i] = frand(&seed), o1[i] = og[i] = frand(&seed);
                        for (int i = 0; i < H * LDS; i++) p[i] = frand(&seed);
                        for (int h = 0; h < H; h++) {
                            ops->attn_scores(q + h * d, kv, t, n, d, 0.125f, s1 + h * LDS);
                            ops->attn_accum(p + h * LDS, kv, t, n, d, o1 + h * d);
                        }
                        ops->attn_scores_heads(q, H, kv, t, n, d, 0.125f, sg, LDS);
                        ops->attn_accum_heads(p, LDS, H, kv, t, n, d, og);
                        assert_memory_equal(s1, sg, sizeof s1);
                        assert_memory_equal(o1, og, (size_t)H * d * sizeof(float));
                        free(kv);
                    }
    }
}

/* Attention's softmax: the same bits on every ISA (the vector exponential
 * of vec_softmax.h), within 2e-6 relative of a softmax in double, over
 * lengths with and without a vector tail and scores up to +-60. */
static void test_softmax(void **state) {
    (void)state;
    unsigned seed = 5;
    const kvlm_isa isas[] = {KVLM_ISA_SCALAR, KVLM_ISA_AVX2, KVLM_ISA_AVX512, KVLM_ISA_NEON};
    const int ns[] = {1, 7, 16, 33, 100, 4096};
    for (size_t a = 0; a < 6; a++) {
        const int n = ns[a];
        float *x = malloc((size_t)n * sizeof(float)), *ref = malloc((size_t)n * sizeof(float));
        float *got = malloc((size_t)n * sizeof(float));
        for (int i = 0; i < n; i++) x[i] = 60 * frand(&seed);
        double mx = x[0], sum = 0;
        for (int i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
        for (int i = 0; i < n; i++) sum += exp((double)x[i] - mx);
        for (size_t s = 0; s < 4; s++) {
            const kern_ops *ops = kern_select(isas[s]);
            if (!ops) continue;
            memcpy(got, x, (size_t)n * sizeof(float));
            kern_softmax(ops, got, n);
            if (s == 0) memcpy(ref, got, (size_t)n * sizeof(float));
            assert_memory_equal(ref, got, (size_t)n * sizeof(float));
            for (int i = 0; i < n; i++) {
                const double want = exp((double)x[i] - mx) / sum;
                assert_true(fabs(got[i] - want) <= 2e-6 * want + 1e-30);
            }
        }
        free(x), free(ref), free(got);
    }
}

static void test_attention_and_norms(void **state) {
    (void)state;
    unsigned seed = 3;
    const int ds[] = {16, 64, 24, 7}, ns[] = {1, 5, 16};
    for (size_t s = 0; s < N_SIMD; s++) {
        const kern_ops *ops = kern_select(simd[s]), *sc = kern_select(KVLM_ISA_SCALAR);
        if (!ops) continue;
        for (size_t a = 0; a < 4; a++)
            for (size_t b = 0; b < 3; b++)
                for (int kt = 0; kt < 2; kt++) {
                    int d = ds[a], n = ns[b];
                    kvlm_dtype t = kt ? KVLM_F16 : KVLM_F32;
                    float q[64], p[16], sr[16], sg[16], oref[64] = {0}, ogot[64] = {0};
                    void *kv = make_weights(t, n, d, &seed);
                    for (int i = 0; i < d; i++) q[i] = frand(&seed);
                    for (int i = 0; i < n; i++) p[i] = frand(&seed);
                    sc->attn_scores(q, kv, t, n, d, 0.125f, sr);
                    ops->attn_scores(q, kv, t, n, d, 0.125f, sg);
                    for (int i = 0; i < n; i++) assert_true(fabsf(sr[i] - sg[i]) < 1e-5f);
                    sc->attn_accum(p, kv, t, n, d, oref);
                    ops->attn_accum(p, kv, t, n, d, ogot);
                    for (int i = 0; i < d; i++) assert_true(fabsf(oref[i] - ogot[i]) < 1e-5f);
                    free(kv);
                }
        /* LayerNorm, GELU and f16 stores over lengths with tails */
        for (int n = 1; n < 80; n += 13) {
            float x[80], w[80], bb[80], r[80], g[80];
            for (int i = 0; i < n; i++) x[i] = 3 * frand(&seed), w[i] = frand(&seed), bb[i] = frand(&seed);
            sc->layernorm(x, w, bb, n, 1e-5f, r);
            ops->layernorm(x, w, bb, n, 1e-5f, g);
            for (int i = 0; i < n; i++) assert_true(fabsf(r[i] - g[i]) < 1e-5f);
            for (int i = 0; i < n; i++) r[i] = g[i] = 8 * frand(&seed);
            sc->gelu(r, (size_t)n);
            ops->gelu(g, (size_t)n);
            for (int i = 0; i < n; i++) assert_true(fabsf(r[i] - g[i]) < 2e-6f * (1 + fabsf(r[i])));
            /* GeGLU against the scalar reference and against gelu then a product */
            float up[80], gr[80], gg[80];
            for (int i = 0; i < n; i++) x[i] = 8 * frand(&seed), up[i] = 2 * frand(&seed);
            sc->geglu(x, up, gr, (size_t)n);
            ops->geglu(x, up, gg, (size_t)n);
            for (int i = 0; i < n; i++) {
                float v = x[i];
                sc->gelu(&v, 1);
                assert_true(fabsf(gr[i] - v * up[i]) <= 1e-6f * (1 + fabsf(gr[i])));
                assert_true(fabsf(gr[i] - gg[i]) < 4e-6f * (1 + fabsf(gr[i])));
            }
            /* soft-capping at 30 (Gemma 2's final cap) over scores from -300 to 300 */
            for (int i = 0; i < n; i++) r[i] = g[i] = 300 * frand(&seed);
            sc->softcap(r, (size_t)n, 30.0f);
            ops->softcap(g, (size_t)n, 30.0f);
            for (int i = 0; i < n; i++) {
                assert_true(fabsf(r[i]) <= 30.0f);
                assert_true(fabsf(r[i] - g[i]) < 4e-6f * 30.0f);
            }
            uint16_t hr[80], hg[80];
            sc->store_row(hr, KVLM_F16, x, n);
            ops->store_row(hg, KVLM_F16, x, n);
            assert_memory_equal(hr, hg, (size_t)n * 2);
        }
    }
}

/* The scalar conversions round to nearest even and keep specials. */
static void test_half_conversions(void **state) {
    (void)state;
    assert_int_equal(f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(f32_to_f16(1e6f), 0x7c00);               /* overflow to inf */
    assert_int_equal(f32_to_f16(5.960464477539063e-8f), 0x0001); /* smallest subnormal */
    assert_int_equal(f32_to_f16(1.0f + 1.0f / 2048), 0x3c00);  /* tie to even */
    assert_true(f16_to_f32(0x0001) == 5.960464477539063e-8f);
    assert_true(isnan(f16_to_f32(f32_to_f16(NAN))));
    assert_int_equal(f32_to_bf16(1.0f), 0x3f80);
    assert_true(bf16_to_f32(0x3f80) == 1.0f);
    for (uint32_t h = 0; h < 0x7c00; h++) assert_int_equal(f32_to_f16(f16_to_f32((uint16_t)h)), h);
}

int main(void) {
    unsetenv("KVLM_FLOAT_BATCH"); /* test_float_batch_choice checks the measured choice */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_matmul_row1_equals_batch),
        cmocka_unit_test(test_matmul_threaded),
        cmocka_unit_test(test_float_batch_choice),
        cmocka_unit_test(test_attention_and_norms),
        cmocka_unit_test(test_attention_heads),
        cmocka_unit_test(test_softmax),
        cmocka_unit_test(test_half_conversions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
