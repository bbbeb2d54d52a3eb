/*
 * Block-quantised weights (Q8_0, Q4_0): byte sizes, quantise/dequantise on
 * known values, and the matmul kernels.
 *
 * Tolerances, with S = sum_k |x_k * w_k| for one output (w dequantised):
 *  - C quantised matmul vs the C f32 matmul of the dequantised matrix:
 *    1e-6 * S (the products are identical and summed in the same order, so
 *    in practice the results are bit-equal);
 *  - every SIMD path vs the C quantised matmul: 1e-5 * (1 + S) (summation
 *    order; the one-row path also scales block sums rather than weights);
 *  - quantised vs original f32 weights: the quantisation bound
 *    sum_k |x_k| * e_k, e_k = d/2 (Q8_0) or |d| (Q4_0) of w_k's block.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "tensor.h"

static const kvlm_dtype qtypes[] = {KVLM_Q8_0, KVLM_Q4_0};
static const kvlm_isa all_isas[] = {KVLM_ISA_SCALAR, KVLM_ISA_AVX2, KVLM_ISA_AVX512, KVLM_ISA_NEON};

/* The best kernel set with f32 activations (auto may pick an int8 level,
 * tested with its own tolerances in tests/test_quant_int8.c). */
static kvlm_isa best_f32_isa(void) {
    return th_best_f32_isa();
}

static float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void test_sizes_and_names(void **state) {
    (void)state;
    int ok;
    assert_int_equal(dtype_row_bytes(KVLM_Q8_0, 64, &ok), 68);
    assert_int_equal(ok, 1);
    assert_int_equal(dtype_row_bytes(KVLM_Q4_0, 4096, &ok), 128 * 18);
    assert_int_equal(dtype_row_bytes(KVLM_F16, 7, &ok), 14);
    assert_int_equal(dtype_row_bytes(KVLM_Q8_0, 33, &ok), 0);
    assert_int_equal(ok, 0);
    dtype_row_bytes(KVLM_Q4_0, -32, &ok);
    assert_int_equal(ok, 0);
    dtype_row_bytes(KVLM_F32, INT64_MAX, &ok);
    assert_int_equal(ok, 0);
    dtype_row_bytes(KVLM_Q8_0, INT64_MAX - 31, &ok); /* a multiple of 32 whose bytes overflow */
    assert_int_equal(ok, 0);
    tensor t = {.dtype = KVLM_Q4_0, .ndim = 2, .shape = {3, 64}};
    assert_int_equal(tensor_nbytes(&t), 3 * 36);
    assert_int_equal(tensor_numel(&t), 192);
    t.shape[1] = 48;
    size_t n;
    assert_int_equal(tensor_nbytes_checked(&t, &n), -1);
    assert_int_equal(tensor_nbytes(&t), 0);
    t = (tensor){.dtype = KVLM_Q8_0, .ndim = 3, .shape = {1ll << 40, 1ll << 20, 32}};
    assert_int_equal(tensor_nbytes_checked(&t, &n), -1);
    assert_int_equal(kvlm_dtype_size(KVLM_Q8_0), 0);
    kvlm_dtype d;
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(kvlm_dtype_parse(kvlm_dtype_name(qtypes[i]), &d, NULL), 0);
        assert_int_equal(d, qtypes[i]);
    }
    assert_int_equal(kvlm_dtype_parse("Q4_0", &d, NULL), 0);
    assert_int_equal(d, KVLM_Q4_0);
    assert_int_equal(kvlm_dtype_parse("q4_2", &d, NULL), KVLM_ERR_ARG);
}

/* Values that are exactly representable round-trip bit for bit, and the
 * block bytes are the documented layout. */
static void test_known_blocks(void **state) {
    (void)state;
    float x[64], y[64];
    /* Q8_0: d = 63.5 / 127 = 0.5 exactly, codes -127, -119, ..., 121 */
    for (int i = 0; i < 32; i++) x[i] = 0.5f * (float)(-127 + 8 * i);
    blk_q8_0 b8;
    quant_quantize_row(KVLM_Q8_0, x, 32, &b8);
    assert_int_equal(b8.d, 0x3800); /* f16 0.5 */
    for (int i = 0; i < 32; i++) assert_int_equal(b8.q[i], -127 + 8 * i);
    quant_dequantize_row(KVLM_Q8_0, &b8, 32, y);
    assert_memory_equal(x, y, 32 * sizeof(float));

    /* Q8_0 with a rounded scale: x = i - 16, d = f16(16/127) = 0.1259765625 */
    for (int i = 0; i < 32; i++) x[i] = (float)(i - 16);
    quant_quantize_row(KVLM_Q8_0, x, 32, &b8);
    assert_int_equal(b8.d, 0x3008);
    assert_int_equal(b8.q[0], -127);
    assert_int_equal(b8.q[16], 0);
    assert_int_equal(b8.q[17], 8);   /* 1 / 0.126 = 7.94 */
    assert_int_equal(b8.q[31], 119); /* 15 / 0.126 = 119.07 */
    assert_true(fabsf(dtype_load(KVLM_Q8_0, &b8, 17) - 1.0078125f) == 0);

    /* Q4_0: m = 8 (code 0), d = 8 / -8 = -1, code c gives 8 - c */
    for (int i = 0; i < 32; i++) x[i] = (float)(8 - i % 16);
    blk_q4_0 b4;
    quant_quantize_row(KVLM_Q4_0, x, 32, &b4);
    assert_int_equal(b4.d, 0xbc00); /* f16 -1 */
    for (int j = 0; j < 16; j++) assert_int_equal(b4.q[j], 0x11 * j); /* value j low, value j+16 high */
    quant_dequantize_row(KVLM_Q4_0, &b4, 32, y);
    for (int i = 0; i < 32; i++) assert_true(x[i] == y[i]); /* (0 comes back as -0: d < 0) */
    /* and the nibble order on a hand-made block: low nibble = value j */
    b4.d = 0x3c00; /* 1.0 */
    memset(b4.q, 0, sizeof b4.q);
    b4.q[3] = 0xf9; /* value 3 = 9 - 8 = 1, value 19 = 15 - 8 = 7 */
    assert_true(dtype_load(KVLM_Q4_0, &b4, 3) == 1.0f);
    assert_true(dtype_load(KVLM_Q4_0, &b4, 19) == 7.0f);
    assert_true(dtype_load(KVLM_Q4_0, &b4, 4) == -8.0f);

    /* zero blocks: d = 0, every value 0 */
    memset(x, 0, sizeof x);
    blk_q8_0 z8[2];
    blk_q4_0 z4[2];
    quant_quantize_row(KVLM_Q8_0, x, 64, z8);
    quant_quantize_row(KVLM_Q4_0, x, 64, z4);
    assert_int_equal(z8[1].d, 0);
    assert_int_equal(z4[1].d, 0);
    quant_dequantize_row(KVLM_Q8_0, z8, 64, y);
    for (int i = 0; i < 64; i++) assert_true(y[i] == 0);
    quant_dequantize_row(KVLM_Q4_0, z4, 64, y);
    for (int i = 0; i < 64; i++) assert_true(y[i] == 0);

    /* non-finite inputs and huge values do not trap (defined codes) */
    x[0] = NAN, x[1] = INFINITY, x[2] = 1e30f;
    quant_quantize_row(KVLM_Q8_0, x, 32, z8);
    quant_quantize_row(KVLM_Q4_0, x, 32, z4);
}

/* Random rows: every value within the quantisation step of its block. */
static void test_round_trip_error(void **state) {
    (void)state;
    unsigned seed = 11;
    enum { N = 32 * 64 };
    float *x = malloc(N * 4), *y = malloc(N * 4);
    void *q = malloc(N * 2);
    for (size_t t = 0; t < 2; t++) {
        for (int i = 0; i < N; i++) x[i] = frand(&seed) * (1.0f + (float)(i / 32));
        quant_quantize_row(qtypes[t], x, N, q);
        quant_dequantize_row(qtypes[t], q, N, y);
        double worst = 0;
        for (int b = 0; b < N / 32; b++) {
            const uint16_t dh = qtypes[t] == KVLM_Q8_0 ? ((blk_q8_0 *)q)[b].d : ((blk_q4_0 *)q)[b].d;
            const float d = fabsf(f16_to_f32(dh));
            const float bound = (qtypes[t] == KVLM_Q8_0 ? 0.5f : 1.0f) * d * 1.0001f;
            for (int i = b * 32; i < b * 32 + 32; i++) {
                if (fabsf(x[i] - y[i]) > bound)
                    fail_msg("%s value %d: %g -> %g (step %g)", kvlm_dtype_name(qtypes[t]), i, x[i], y[i], d);
                if (fabsf(x[i] - y[i]) / d > worst) worst = fabsf(x[i] - y[i]) / d;
            }
        }
        assert_true(worst > 0.25); /* the bound is not vacuous */
    }
    free(x), free(y), free(q);
}

static double abs_dot(const float *x, const float *w, int K) {
    double s = 0;
    for (int k = 0; k < K; k++) s += fabs((double)x[k] * w[k]);
    return s;
}

/* One (dtype, M, N, K) case: all ISAs against the C path and against f32. */
static int check_case(kvlm_dtype t, int M, int N, int K, unsigned *seed) {
    const size_t rb = dtype_row_bytes(t, K, NULL);
    float *wf = malloc((size_t)N * K * 4), *wd = malloc((size_t)N * K * 4);
    unsigned char *wq = malloc((size_t)N * rb);
    float *x = malloc((size_t)M * K * 4), *bias = malloc((size_t)N * 4);
    float *ref = malloc((size_t)M * N * 4), *got = malloc((size_t)M * N * 4), *orig = malloc((size_t)M * N * 4);
    for (size_t i = 0; i < (size_t)N * K; i++) wf[i] = frand(seed);
    for (int i = 0; i < M * K; i++) x[i] = frand(seed);
    for (int i = 0; i < N; i++) bias[i] = frand(seed);
    for (int n = 0; n < N; n++) {
        quant_quantize_row(t, wf + (size_t)n * K, K, wq + (size_t)n * rb);
        quant_dequantize_row(t, wq + (size_t)n * rb, K, wd + (size_t)n * K);
    }
    const kern_ops *sc = kern_select(KVLM_ISA_SCALAR);
    kern_matrix kd = {KVLM_F32, wd, N, K, NULL, 0}, kf = {KVLM_F32, wf, N, K, NULL, 0}, kq = {t, wq, N, K, NULL, 0};
    sc->matmul_rows(x, M, &kd, 0, N, bias, ref, N);
    sc->matmul_rows(x, M, &kf, 0, N, bias, orig, N);
    int checked = 0;
    for (size_t s = 0; s < 4; s++) {
        const kern_ops *ops = kern_select(all_isas[s]);
        if (!ops) continue;
        memset(got, 0, (size_t)M * N * 4);
        ops->matmul_rows(x, M, &kq, 0, N, bias, got, N);
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                const size_t i = (size_t)m * N + n;
                const double S = abs_dot(x + (size_t)m * K, wd + (size_t)n * K, K);
                const double tol = s == 0 ? 1e-6 * S : 1e-5 * (1 + S);
                if (fabs((double)got[i] - ref[i]) > tol)
                    fail_msg("%s %s matmul M=%d N=%d K=%d [%d,%d]: %.9g vs dequantised f32 %.9g",
                             kvlm_isa_name(all_isas[s]), kvlm_dtype_name(t), M, N, K, m, n, got[i], ref[i]);
                if (s == 0) { /* against the unquantised weights: the quantisation bound */
                    double bound = 1e-5 * (1 + S);
                    for (int k = 0; k < K; k++) {
                        const unsigned char *blk = wq + (size_t)n * rb + (size_t)(k / 32) * dtype_block_bytes(t);
                        uint16_t dh;
                        memcpy(&dh, blk, 2);
                        bound += fabs(x[(size_t)m * K + k]) * fabs(f16_to_f32(dh)) * (t == KVLM_Q8_0 ? 0.5 : 1.0);
                    }
                    if (fabs((double)got[i] - orig[i]) > bound)
                        fail_msg("%s M=%d N=%d K=%d [%d,%d]: %g vs f32 %g beyond the quantisation bound %g",
                                 kvlm_dtype_name(t), M, N, K, m, n, got[i], orig[i], bound);
                }
            }
        checked++;
    }
    free(wf), free(wd), free(wq), free(x), free(bias), free(ref), free(got), free(orig);
    return checked;
}

static void test_matmul_paths(void **state) {
    (void)state;
    const int Ms[] = {1, 2, 3, 4, 5, 7, 9}, Ns[] = {1, 3, 5, 8, 13, 37}, Ks[] = {32, 64, 96, 160, 256};
    unsigned seed = 5;
    int checked = 0;
    for (size_t t = 0; t < 2; t++)
        for (size_t a = 0; a < 7; a++)
            for (size_t b = 0; b < 6; b++)
                for (size_t c = 0; c < 5; c++) checked += check_case(qtypes[t], Ms[a], Ns[b], Ks[c], &seed);
    assert_true(checked >= 2 * 7 * 6 * 5);
    assert_true(checked > 2 * 7 * 6 * 5 || kvlm_isa_best() == KVLM_ISA_SCALAR);
}

/* The threaded driver over a matrix large enough to split, and a column
 * range n0..n1 that starts mid-matrix (one thread's share). */
static void test_matmul_threaded_and_ranges(void **state) {
    (void)state;
    unsigned seed = 9;
    const int M = 6, N = 1000, K = 512;
    for (size_t t = 0; t < 2; t++) {
        const size_t rb = dtype_row_bytes(qtypes[t], K, NULL);
        float *wf = malloc((size_t)N * K * 4), *x = malloc((size_t)M * K * 4);
        unsigned char *wq = malloc((size_t)N * rb);
        float *ref = malloc((size_t)M * N * 4), *got = malloc((size_t)M * N * 4);
        for (size_t i = 0; i < (size_t)N * K; i++) wf[i] = frand(&seed);
        for (int i = 0; i < M * K; i++) x[i] = frand(&seed);
        for (int n = 0; n < N; n++) quant_quantize_row(qtypes[t], wf + (size_t)n * K, K, wq + (size_t)n * rb);
        kern_matrix kq = {qtypes[t], wq, N, K, NULL, 0};
        const kern_ops *sc = kern_select(KVLM_ISA_SCALAR), *best = kern_select(best_f32_isa());
        sc->matmul_rows(x, M, &kq, 0, N, NULL, ref, N);
        kern_matmul(best, &(kern_team){.threads = 2}, x, M, &kq, NULL, got, N);
        for (int i = 0; i < M * N; i++) assert_true(fabsf(got[i] - ref[i]) < 1e-3f);
        for (int i = 0; i < M * N; i++) got[i] = -12345.0f;
        best->matmul_rows(x, M, &kq, 333, 345, NULL, got, N);
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                float g = got[(size_t)m * N + n];
                if (n < 333 || n >= 345) assert_true(g == -12345.0f); /* untouched outside the range */
                else assert_true(fabsf(g - ref[(size_t)m * N + n]) < 1e-3f);
            }
        free(wf), free(x), free(wq), free(ref), free(got);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sizes_and_names),
        cmocka_unit_test(test_known_blocks),
        cmocka_unit_test(test_round_trip_error),
        cmocka_unit_test(test_matmul_paths),
        cmocka_unit_test(test_matmul_threaded_and_ranges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
