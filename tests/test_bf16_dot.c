/*
 * The avx512-bf16 level (kernels/bf16_dot.h) on x86-64 CPUs with
 * AVX512-BF16, the neon-bf16 level (BFDOT) on aarch64 CPUs with BF16
 * (skipped elsewhere; there kern_select must refuse it): activations rounded exactly as bf16_dot_round says
 * (ties to even, subnormals to signed zero, NaN quietened); bf16-weight
 * matmuls against bf16_dot_matmul_ref on K tails of the 32-value step, N
 * tails of every tile, batches of 1-17 rows and column ranges starting
 * mid-matrix; every row of a batch, every split of the output features and
 * a two-thread team giving the same bits as that row alone; other weight
 * dtypes untouched (the avx512-vnni bits; on aarch64 neon-i8mm's).
 *
 * Tolerance, with S = sum_k |bf16(x_k) * w_k| for one output:
 * |got - reference| <= 1e-6 * (1 + S). The products are exact in f32 (8 x
 * 8 significant bits); the kernel sums them in f32 lanes, K / 32 steps
 * each, then a 16-lane tree, against the reference's double sum: a few
 * float ulps of S at these K. The same bound holds neon-bf16 (16 lanes in
 * four accumulators, K / 32 steps each).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kernels/bf16_dot.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kernels/team.h"
#include "tensor.h"

static float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#if defined(__aarch64__)
#define LEVEL KVLM_ISA_NEON_BF16
#define LEVEL_NAME "neon-bf16"
#define BELOW KVLM_ISA_NEON_I8MM /* the level it builds on */
#define LEVEL_PREP bf16_dot_prep_neon
#else
#define LEVEL KVLM_ISA_AVX512_BF16
#define LEVEL_NAME "avx512-bf16"
#define BELOW KVLM_ISA_AVX512_VNNI
#define LEVEL_PREP bf16_dot_prep_avx512
#endif

static const kern_ops *bf16_ops_or_skip(void) {
    if (!kern_cpu_supports(LEVEL)) {
        printf("  this CPU has no %s: skipped\n", LEVEL_NAME);
        assert_null(kern_select(LEVEL));
        skip();
    }
    const kern_ops *ops = kern_select(LEVEL);
    assert_non_null(ops);
    assert_int_equal(ops->isa, LEVEL);
    return ops;
}

/* The rounding, by value and against the kernel's own conversion. */
static void test_round(void **state) {
    (void)state;
    /* 1 + 2^-8 is a tie between 1 and 1 + 2^-7: even (1); 1 + 3 * 2^-8
     * ties between 1 + 2^-7 (odd) and 1 + 2^-6: even */
    assert_int_equal(bf16_dot_round(1.0f), 0x3f80);
    assert_int_equal(bf16_dot_round(from_bits(0x3f808000u)), 0x3f80);
    assert_int_equal(bf16_dot_round(from_bits(0x3f818000u)), 0x3f82);
    assert_int_equal(bf16_dot_round(from_bits(0x3f808001u)), 0x3f81);
    assert_int_equal(bf16_dot_round(-2.5f), 0xc020);
    assert_int_equal(bf16_dot_round(from_bits(0x7f7fffffu)), 0x7f80); /* FLT_MAX rounds up to infinity */
    assert_int_equal(bf16_dot_round(INFINITY), 0x7f80);
    assert_int_equal(bf16_dot_round(from_bits(0x00400000u)), 0x0000); /* subnormal */
    assert_int_equal(bf16_dot_round(from_bits(0x80000001u)), 0x8000);
    assert_int_equal(bf16_dot_round(from_bits(0x7f800001u)), 0x7fc0); /* signalling NaN, quietened */
    const kern_ops *ops = bf16_ops_or_skip();
    (void)ops;
    /* 70 values: the cases above, random ones and boundaries, through the
     * kernel's conversion (two 32-value steps and a tail of 6) */
    enum { K = 70 };
    float x[K];
    const uint32_t special[] = {0x3f800000u, 0x3f808000u, 0x3f818000u, 0x3f808001u, 0xc0200000u, 0x7f7fffffu,
                                0x7f800000u, 0xff800000u, 0x00400000u, 0x80000001u, 0x00800000u, 0x807fffffu,
                                0x7f800001u, 0xffc00000u, 0x00000000u, 0x80000000u, 0x3f7fffffu, 0x477fe000u};
    const size_t ns = sizeof special / sizeof special[0];
    unsigned seed = 5;
    for (int k = 0; k < K; k++) x[k] = (size_t)k < ns ? from_bits(special[k]) : frand(&seed) * 1000.0f;
    _Alignas(64) uint16_t xb[2 * 96];
    memset(xb, 0xee, sizeof xb);
    LEVEL_PREP(x, K, 0, 1, xb);
    for (int k = 0; k < K; k++)
        if (xb[k] != bf16_dot_round(x[k])) fail_msg("value %d (%08x): kernel %04x, reference %04x", k, special[k % ns], xb[k], bf16_dot_round(x[k]));
    for (int k = K; k < bf16_dot_stride(K); k++) assert_int_equal(xb[k], 0); /* padding */
    assert_int_equal(xb[bf16_dot_stride(K)], 0xeeee);                        /* nothing past the row */
}

/* y from ops against the reference for one shape; returns the worst
 * |diff| / (1 + S). */
static double check_shape(const kern_ops *ops, int M, int N, int K, int n0, int with_bias, unsigned *seed) {
    float *x = malloc(sizeof(float) * (size_t)M * K), *bias = malloc(sizeof(float) * N);
    uint16_t *w = malloc(sizeof(uint16_t) * (size_t)N * K);
    float *y = malloc(sizeof(float) * (size_t)M * N), *r = malloc(sizeof(float) * (size_t)M * N);
    assert_true(x && bias && w && y && r);
    for (size_t i = 0; i < (size_t)M * K; i++) x[i] = frand(seed) * 3.0f;
    for (size_t i = 0; i < (size_t)N * K; i++) w[i] = bf16_dot_round(frand(seed) * 0.05f);
    for (int i = 0; i < N; i++) bias[i] = frand(seed);
    const kern_matrix wm = {KVLM_BF16, w, N, K, NULL, 0};
    for (size_t i = 0; i < (size_t)M * N; i++) y[i] = r[i] = 12345.0f;
    ops->matmul_rows(x, M, &wm, n0, N, with_bias ? bias : NULL, y, N);
    bf16_dot_matmul_ref(x, M, &wm, n0, N, with_bias ? bias : NULL, r, N);
    double worst = 0;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            const size_t i = (size_t)m * N + n;
            if (n < n0) { /* outside the range: untouched */
                assert_true(y[i] == 12345.0f);
                continue;
            }
            double S = 0;
            for (int k = 0; k < K; k++)
                S += fabs((double)bf16_to_f32(bf16_dot_round(x[(size_t)m * K + k])) * bf16_to_f32(w[(size_t)n * K + k]));
            const double e = fabs((double)y[i] - r[i]) / (1.0 + S);
            if (!(e <= 1e-6))
                fail_msg("M %d N %d K %d n0 %d: y[%d][%d] = %.9g, reference %.9g (S %.3g)", M, N, K, n0, m, n, y[i],
                         r[i], S);
            if (e > worst) worst = e;
        }
    free(x), free(bias), free(w), free(y), free(r);
    return worst;
}

static void test_shapes(void **state) {
    (void)state;
    const kern_ops *ops = bf16_ops_or_skip();
    const int Ms[] = {1, 2, 3, 4, 5, 7, 9, 17}, Ks[] = {1, 31, 32, 33, 64, 95, 773, 2048};
    unsigned seed = 11;
    double worst = 0;
    int cases = 0;
    for (size_t a = 0; a < sizeof Ms / sizeof Ms[0]; a++)
        for (size_t b = 0; b < sizeof Ks / sizeof Ks[0]; b++)
            for (int N = 1; N <= 21; N += (N < 14 ? 1 : 7)) {
                const double e = check_shape(ops, Ms[a], N, Ks[b], N > 3 ? N / 3 : 0, (N + (int)b) % 2, &seed);
                if (e > worst) worst = e;
                cases++;
            }
    /* a GPT-2 sized row set, and a batch past one L2 block of x rows */
    worst = fmax(worst, check_shape(ops, 1, 2304, 768, 0, 1, &seed));
    worst = fmax(worst, check_shape(ops, 70, 40, 3072, 5, 1, &seed));
    printf("  %d shapes, worst |diff| / (1 + S) %.3g\n", cases + 2, worst);
}

/* Row m of an M-row batch (any split of N, a 2-thread team with the
 * prepared form) = row m alone, bit for bit. */
static void test_batch_invariance(void **state) {
    (void)state;
    const kern_ops *ops = bf16_ops_or_skip();
    enum { M = 23, N = 301, K = 800 };
    unsigned seed = 3;
    float *x = malloc(sizeof(float) * M * K), *bias = malloc(sizeof(float) * N);
    uint16_t *w = malloc(sizeof(uint16_t) * N * K);
    float *batch = malloc(sizeof(float) * M * N), *split = malloc(sizeof(float) * M * N);
    float *team_y = malloc(sizeof(float) * M * N), *one = malloc(sizeof(float) * N);
    assert_true(x && bias && w && batch && split && team_y && one);
    for (size_t i = 0; i < (size_t)M * K; i++) x[i] = frand(&seed);
    for (size_t i = 0; i < (size_t)N * K; i++) w[i] = bf16_dot_round(frand(&seed) * 0.1f);
    for (int i = 0; i < N; i++) bias[i] = frand(&seed);
    const kern_matrix wm = {KVLM_BF16, w, N, K, NULL, 0};
    ops->matmul_rows(x, M, &wm, 0, N, bias, batch, N);
    for (int n0 = 0; n0 < N; n0 += 37) ops->matmul_rows(x, M, &wm, n0, n0 + 37 < N ? n0 + 37 : N, bias, split, N);
    kern_team team = {.threads = 2};
    assert_int_equal(kern_team_open(&team, 2), 0);
    kern_matmul(ops, &team, x, M, &wm, bias, team_y, N);
    kern_team_close(&team);
    assert_memory_equal(batch, split, sizeof(float) * M * N);
    assert_memory_equal(batch, team_y, sizeof(float) * M * N);
    for (int m = 0; m < M; m++) {
        ops->matmul_rows(x + (size_t)m * K, 1, &wm, 0, N, bias, one, N);
        assert_memory_equal(one, batch + (size_t)m * N, sizeof(float) * N);
    }
    free(x), free(bias), free(w), free(batch), free(split), free(team_y), free(one);
}

/* The level's name and place, and every other weight dtype computed as
 * the level below (avx512-vnni, neon-i8mm) computes it. */
static void test_level(void **state) {
    (void)state;
    assert_int_equal(KVLM_ISA_AVX512_BF16, 6);
    assert_string_equal(kvlm_isa_name(KVLM_ISA_AVX512_BF16), "avx512-bf16");
    assert_int_equal(KVLM_ISA_NEON_BF16, 10);
    assert_string_equal(kvlm_isa_name(KVLM_ISA_NEON_BF16), "neon-bf16");
    const kern_ops *ops = bf16_ops_or_skip();
    assert_int_equal(kvlm_isa_best(), LEVEL);
    const kern_ops *vnni = kern_select(BELOW);
    assert_non_null(vnni);
    enum { M = 5, N = 19, K = 256 };
    unsigned seed = 9;
    float x[M * K], wf[N * K], a[M * N], b[M * N];
    for (int i = 0; i < M * K; i++) x[i] = frand(&seed);
    for (int i = 0; i < N * K; i++) wf[i] = frand(&seed) * 0.1f;
    const kvlm_dtype types[] = {KVLM_F32, KVLM_F16, KVLM_Q8_0, KVLM_Q4_0};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        const size_t rb = dtype_row_bytes(types[t], K, NULL);
        unsigned char *wd = calloc((size_t)N, rb);
        assert_non_null(wd);
        for (int n = 0; n < N; n++) {
            if (types[t] == KVLM_Q8_0 || types[t] == KVLM_Q4_0)
                quant_quantize_row(types[t], wf + (size_t)n * K, K, wd + (size_t)n * rb);
            else
                for (int k = 0; k < K; k++) dtype_store(types[t], wd, (size_t)n * K + k, wf[(size_t)n * K + k]);
        }
        const kern_matrix wm = {types[t], wd, N, K, NULL, 0};
        for (int rows = 1; rows <= M; rows += M - 1) {
            ops->matmul_rows(x, rows, &wm, 0, N, NULL, a, N);
            vnni->matmul_rows(x, rows, &wm, 0, N, NULL, b, N);
            assert_memory_equal(a, b, sizeof(float) * (size_t)rows * N);
        }
        free(wd);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round),
        cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_level),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
