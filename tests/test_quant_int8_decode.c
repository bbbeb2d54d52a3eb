/*
 * The int8 decode of Q4_K, Q5_K and Q6_K weights (quant_int8_decode.h,
 * quant_int8_decode_rows_* in quant_int8.h): every ISA instance the CPU
 * runs against quant_int8_matmul_ref (the same activation codes and exact
 * integer block sums), on weight-row tails of its tile (1..13 rows, a
 * column range starting mid-matrix), 1..8 super-blocks per row, every row
 * count below the panel kernels' threshold, saturated codes and scales;
 * the avx512-vnni / avx2-vnni matmul_rows taking it below that threshold;
 * and the calls it declines.
 *
 * Tolerance, with S = sum_k |x_k * w_k| for one output (w dequantised):
 * |got - reference| <= 1e-6 * (1 + S). Both sum the same exact int32 block
 * sums; they differ only in the float rounding of d * sc * dx, of its
 * product with the block sum and in the order of the K / 32 block terms
 * (8 float lanes then a horizontal sum, against a double sum): a few float
 * ulps of S at these K.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kernels/quant_int8.h"
#include "tensor.h"

typedef int (*decode_fn)(const float *, int, const kern_matrix *, int, int, const float *, float *, int);
typedef int (*min_rows_fn)(kvlm_dtype);
static const kvlm_isa isas[] = {KVLM_ISA_AVX512_VNNI, KVLM_ISA_AVX2_VNNI};
static const decode_fn decode[] = {quant_int8_decode_rows_avx512, quant_int8_decode_rows_avx2};
static const min_rows_fn min_rows[] = {quant_int8_min_rows_avx512, quant_int8_min_rows_avx2};
static const kvlm_dtype ktypes[] = {KVLM_Q4_K, KVLM_Q5_K, KVLM_Q6_K};

static float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* Random blocks (every code and 6-bit scale pattern), finite moderate f16
 * scales; sat: every code byte and scale byte 0xff (the largest codes and
 * scales, Q6_K scales -1). */
static void fill_blocks(kvlm_dtype t, size_t nblocks, unsigned char *dst, unsigned *seed, int sat) {
    const size_t bb = dtype_block_bytes(t);
    for (size_t i = 0; i < nblocks * bb; i++)
        dst[i] = sat ? 0xff : (unsigned char)((*seed = *seed * 1664525u + 1013904223u) >> 24);
    for (size_t b = 0; b < nblocks; b++) {
        unsigned char *blk = dst + b * bb;
        const size_t at[2] = {t == KVLM_Q6_K ? 208 : 0, 2};
        for (int f = 0; f < (t == KVLM_Q6_K ? 1 : 2); f++) {
            const uint16_t h = f32_to_f16(frand(seed) * 0.05f);
            memcpy(blk + at[f], &h, 2);
        }
    }
}

/* One shape: every ISA the CPU has, called directly on [n0, N) and through
 * its kern_ops for M below the threshold. Returns the ISAs checked. */
static int check_case(kvlm_dtype t, int M, int N, int K, int n0, int sat, unsigned *seed) {
    const size_t rb = dtype_row_bytes(t, K, NULL);
    unsigned char *wq = malloc((size_t)N * rb);
    float *wd = malloc((size_t)N * K * 4), *x = malloc((size_t)M * K * 4), *bias = malloc((size_t)N * 4);
    float *ref = malloc((size_t)M * N * 4), *got = malloc((size_t)M * N * 4);
    fill_blocks(t, (size_t)N * K / QK_K, wq, seed, sat);
    for (int n = 0; n < N; n++) quant_dequantize_row(t, wq + (size_t)n * rb, K, wd + (size_t)n * K);
    for (int i = 0; i < M * K; i++) x[i] = frand(seed) * (i % 7 == 0 ? 4.0f : 1.0f);
    for (int i = 0; i < N; i++) bias[i] = frand(seed);
    const kern_matrix kq = {t, wq, N, K, NULL, 0};
    quant_int8_matmul_ref(x, M, &kq, 0, N, bias, ref, N);
    int checked = 0;
    for (size_t s = 0; s < 2; s++) {
        if (!kern_cpu_supports(isas[s])) continue;
        for (int via = 0; via < 2; via++) {
            if (via == 1 && M >= min_rows[s](t)) continue;
            for (int i = 0; i < M * N; i++) got[i] = -12345.0f;
            if (via == 0) assert_int_equal(decode[s](x, M, &kq, n0, N, bias, got, N), 1);
            else kern_select(isas[s])->matmul_rows(x, M, &kq, n0, N, bias, got, N);
            for (int m = 0; m < M; m++)
                for (int n = 0; n < N; n++) {
                    const size_t i = (size_t)m * N + n;
                    if (n < n0) {
                        assert_true(got[i] == -12345.0f);
                        continue;
                    }
                    double S = 0;
                    for (int k = 0; k < K; k++) S += fabs((double)x[(size_t)m * K + k] * wd[(size_t)n * K + k]);
                    if (!(fabs((double)got[i] - ref[i]) <= 1e-6 * (1 + S)))
                        fail_msg("%s %s M=%d N=%d K=%d n0=%d sat=%d [%d,%d]: %.9g vs reference %.9g (S %g)",
                                 kvlm_isa_name(isas[s]), kvlm_dtype_name(t), M, N, K, n0, sat, m, n, got[i], ref[i],
                                 S);
                }
        }
        checked++;
    }
    free(wq), free(wd), free(x), free(bias), free(ref), free(got);
    return checked;
}

static int want_isas(void) { return kern_cpu_supports(isas[0]) + kern_cpu_supports(isas[1]); }

/* Tile tails (the avx512 tile is 4 weight rows by 4 rows of x, avx2 2 by
 * 1), 1..8 super-blocks, rows of x 1..15 (whole tiles of rows of x and
 * their 1..3-row tails), a range starting mid-matrix. */
static void test_shapes(void **state) {
    (void)state;
    const int Ns[] = {1, 2, 3, 4, 5, 7, 8, 9, 13}, Ks[] = {256, 512, 768, 2048}, Ms[] = {1, 2, 3, 4, 6, 9, 15};
    unsigned seed = 21;
    int checked = 0, cases = 0;
    for (size_t t = 0; t < 3; t++)
        for (size_t a = 0; a < 7; a++)
            for (size_t b = 0; b < 9; b++)
                for (size_t c = 0; c < 4; c++) {
                    const int n0 = Ns[b] > 4 ? 3 : 0;
                    checked += check_case(ktypes[t], Ms[a], Ns[b], Ks[c], n0, 0, &seed);
                    cases++;
                }
    assert_int_equal(checked, want_isas() * cases);
}

/* Every code and scale at its largest (Q6_K: scales -1), and a large K. */
static void test_saturated_and_long(void **state) {
    (void)state;
    unsigned seed = 23;
    int checked = 0;
    for (size_t t = 0; t < 3; t++) {
        checked += check_case(ktypes[t], 1, 6, 512, 0, 1, &seed);
        checked += check_case(ktypes[t], 1, 9, 8192, 0, 0, &seed);
    }
    assert_int_equal(checked, want_isas() * 6);
}

/* The threaded driver with one row of x and a matrix split into items
 * (the shapes test covers the values against the reference). */
static void test_threaded(void **state) {
    (void)state;
    unsigned seed = 29;
    const int N = 1000, K = 512;
    for (size_t t = 0; t < 3; t++) {
        const size_t rb = dtype_row_bytes(ktypes[t], K, NULL);
        unsigned char *wq = malloc((size_t)N * rb);
        float *x = malloc((size_t)K * 4), *ref = malloc((size_t)N * 4), *got = malloc((size_t)N * 4);
        fill_blocks(ktypes[t], (size_t)N * K / QK_K, wq, &seed, 0);
        for (int i = 0; i < K; i++) x[i] = frand(&seed);
        const kern_matrix kq = {ktypes[t], wq, N, K, NULL, 0};
        for (size_t s = 0; s < 2; s++) {
            if (!kern_cpu_supports(isas[s])) continue;
            /* each output's sums do not depend on the split: the bits of one call */
            kern_matmul(kern_select(isas[s]), &(kern_team){.threads = 2}, x, 1, &kq, NULL, got, N);
            assert_int_equal(decode[s](x, 1, &kq, 0, N, NULL, ref, N), 1);
            assert_memory_equal(got, ref, (size_t)N * 4);
        }
        free(wq), free(x), free(ref), free(got);
    }
}

/* Declined: other dtypes, K not whole super-blocks, no rows; y untouched. */
static void test_declines(void **state) {
    (void)state;
    unsigned char w[256 * 2] = {0};
    float x[512] = {0}, y[4] = {7, 7, 7, 7};
    const kern_matrix q8 = {KVLM_Q8_0, w, 2, 64, NULL, 0}, odd = {KVLM_Q4_K, w, 1, 128, NULL, 0}, ok = {KVLM_Q6_K, w, 1, 256, NULL, 0};
    for (size_t s = 0; s < 2; s++) {
        if (!kern_cpu_supports(isas[s])) continue;
        assert_int_equal(decode[s](x, 1, &q8, 0, 2, NULL, y, 2), 0);
        assert_int_equal(decode[s](x, 1, &odd, 0, 1, NULL, y, 1), 0);
        assert_int_equal(decode[s](x, 0, &ok, 0, 1, NULL, y, 1), 0);
        for (int i = 0; i < 4; i++) assert_true(y[i] == 7.0f);
        /* all-zero weights and activations: exactly 0 */
        assert_int_equal(decode[s](x, 1, &ok, 0, 1, NULL, y, 1), 1);
        assert_true(y[0] == 0.0f);
        y[0] = 7.0f;
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_saturated_and_long),
        cmocka_unit_test(test_threaded),
        cmocka_unit_test(test_declines),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
