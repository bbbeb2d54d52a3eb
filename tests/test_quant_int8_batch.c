/*
 * Decode batches of the 32-value block types (Q8_0, Q4_0, Q4_1, Q5_0,
 * Q5_1) on the int8 levels (kernels/quant_int8_batch.h): 2 to 15 rows of
 * x, whole 4-row tiles and their tails over the same weight rows, give
 * each row exactly the bits it gets in a call of its own (the kernels'
 * agreement with the C reference at these row counts is
 * tests/test_quant_int8.c's); the same for the K-quants (Q4_K, Q5_K,
 * Q6_K) in their decode kernel (kernels/quant_int8_decode.h), 2 to 15
 * rows. Skips the levels the CPU lacks; the count of rows checked says
 * how many ran.
 */
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kernels/quant_int8.h"
#include "tensor.h"

static const kvlm_dtype qtypes[] = {KVLM_Q8_0, KVLM_Q4_0, KVLM_Q4_1, KVLM_Q5_0, KVLM_Q5_1};
#define NQTYPES 5
static const kvlm_isa vnni[] = {KVLM_ISA_AVX512_VNNI, KVLM_ISA_AVX2_VNNI};

static float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

/* A decode batch of the 32-value block types (2 .. 15 rows, below the
 * prefill kernels) gives each row the bits it gets alone: the rows share
 * each weight load, not their sums. Not Q4_0 on avx512-vnni, whose own
 * decode kernel (quant_int8_q4_0_avx512.c) takes 1 to 3 rows and sums in
 * another order. */
static void test_batch_rows_alone(void **state) {
    (void)state;
    const int Ms[] = {2, 3, 5, 6, 9, 15}, N = 13, K = 288;
    unsigned seed = 23;
    int checked = 0;
    for (size_t t = 0; t < NQTYPES; t++) {
        const size_t rb = dtype_row_bytes(qtypes[t], K, NULL);
        float *wf = malloc((size_t)N * K * 4), *x = malloc((size_t)15 * K * 4);
        float *yb = malloc((size_t)15 * N * 4), *y1 = malloc((size_t)N * 4), *bias = malloc((size_t)N * 4);
        unsigned char *wq = malloc((size_t)N * rb);
        for (int i = 0; i < N * K; i++) wf[i] = frand(&seed);
        for (int i = 0; i < 15 * K; i++) x[i] = frand(&seed) * (i % 7 == 0 ? 4.0f : 1.0f);
        for (int i = 0; i < N; i++) bias[i] = frand(&seed);
        for (int n = 0; n < N; n++) quant_quantize_row(qtypes[t], wf + (size_t)n * K, K, wq + (size_t)n * rb);
        const kern_matrix kq = {qtypes[t], wq, N, K, NULL, 0};
        for (size_t s = 0; s < 2; s++) {
            const kern_ops *ops = kern_cpu_supports(vnni[s]) ? kern_select(vnni[s]) : NULL;
            if (!ops) continue;
            if (qtypes[t] == KVLM_Q4_0 && vnni[s] == KVLM_ISA_AVX512_VNNI) continue;
            for (size_t a = 0; a < sizeof Ms / sizeof *Ms; a++) {
                ops->matmul_rows(x, Ms[a], &kq, 0, N, bias, yb, N);
                for (int m = 0; m < Ms[a]; m++) {
                    ops->matmul_rows(x + (size_t)m * K, 1, &kq, 0, N, bias, y1, N);
                    if (memcmp(yb + (size_t)m * N, y1, (size_t)N * 4))
                        fail_msg("%s %s M=%d row %d: batch and alone differ (%.9g vs %.9g at column 0)",
                                 kvlm_dtype_name(qtypes[t]), kvlm_isa_name(vnni[s]), Ms[a], m, yb[(size_t)m * N],
                                 y1[0]);
                    checked++;
                }
            }
        }
        free(wf), free(x), free(yb), free(y1), free(bias), free(wq);
    }
    const int want = kern_cpu_supports(vnni[0]) + kern_cpu_supports(vnni[1]);
    assert_int_equal(checked, (want * NQTYPES - kern_cpu_supports(vnni[0])) * (2 + 3 + 5 + 6 + 9 + 15));
}

/* The K-quant decode kernel (quant_int8_decode.h) up to the prefill
 * kernels' 16 rows on avx512-vnni (whole tiles of 4 rows of x and their
 * tails over 4-row weight tiles and single tail rows), below 8 on
 * avx2-vnni (one row of x per tile): each row gets exactly the bits it
 * gets alone; the rows share each unpacked block, not their sums. */
static void test_kquant_rows_alone(void **state) {
    (void)state;
    static const kvlm_dtype ktypes[] = {KVLM_Q4_K, KVLM_Q5_K, KVLM_Q6_K};
    const int Ms[] = {2, 3, 4, 5, 7, 8, 15}, N = 11, K = 768;
    unsigned seed = 29;
    int checked = 0;
    for (size_t t = 0; t < 3; t++) {
        const size_t rb = dtype_row_bytes(ktypes[t], K, NULL);
        float *wf = malloc((size_t)N * K * 4), *x = malloc((size_t)15 * K * 4);
        float *yb = malloc((size_t)16 * N * 4), *y1 = malloc((size_t)N * 4), *bias = malloc((size_t)N * 4);
        unsigned char *wq = malloc((size_t)N * rb);
        for (int i = 0; i < N * K; i++) wf[i] = frand(&seed) * (1.0f + (float)(i % 97) / 16.0f);
        for (int i = 0; i < 15 * K; i++) x[i] = frand(&seed) * (i % 7 == 0 ? 4.0f : 1.0f);
        for (int i = 0; i < N; i++) bias[i] = frand(&seed);
        for (int n = 0; n < N; n++) quant_quantize_row(ktypes[t], wf + (size_t)n * K, K, wq + (size_t)n * rb);
        const kern_matrix kq = {ktypes[t], wq, N, K, NULL, 0};
        for (size_t s = 0; s < 2; s++) {
            const kern_ops *ops = kern_cpu_supports(vnni[s]) ? kern_select(vnni[s]) : NULL;
            if (!ops) continue;
            for (size_t a = 0; a < sizeof Ms / sizeof *Ms; a++) {
                /* avx2-vnni: the panel kernels from 8 rows */
                if (Ms[a] >= (s ? quant_int8_min_rows_avx2 : quant_int8_min_rows_avx512)(ktypes[t])) continue;
                for (int i = 0; i < 16 * N; i++) yb[i] = -12345.0f;
                ops->matmul_rows(x, Ms[a], &kq, 0, N, bias, yb, N);
                for (int m = 0; m < Ms[a]; m++) {
                    ops->matmul_rows(x + (size_t)m * K, 1, &kq, 0, N, bias, y1, N);
                    if (memcmp(yb + (size_t)m * N, y1, (size_t)N * 4))
                        fail_msg("%s %s M=%d row %d: batch and alone differ (%.9g vs %.9g at column 0)",
                                 kvlm_dtype_name(ktypes[t]), kvlm_isa_name(vnni[s]), Ms[a], m, yb[(size_t)m * N],
                                 y1[0]);
                    checked++;
                }
                assert_true(yb[(size_t)Ms[a] * N] == -12345.0f); /* no row past M written */
            }
        }
        free(wf), free(x), free(yb), free(y1), free(bias), free(wq);
    }
    assert_int_equal(checked, 3 * (kern_cpu_supports(vnni[0]) * (2 + 3 + 4 + 5 + 7 + 8 + 15) +
                                   kern_cpu_supports(vnni[1]) * (2 + 3 + 4 + 5 + 7)));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_batch_rows_alone),
        cmocka_unit_test(test_kquant_rows_alone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
