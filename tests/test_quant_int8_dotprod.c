/*
 * The neon-dotprod level (aarch64 only; kernels/quant_int8_dotprod.c):
 * int8 activations for Q8_0, Q4_0, Q4_K, Q5_K and Q6_K weights with SDOT,
 * and the neon-i8mm level (kernels/quant_int8_i8mm.c: SMMLA for Q8_0 /
 * Q4_0 and, in quant_int8_k_i8mm.c, the K-quants with two or more rows of
 * x), each against the C
 * reference of the same integer math (quant_int8_matmul_ref), as
 * tests/test_quant_int8.c checks the x86 int8 levels. Every test skips on a
 * CPU without the dot-product extension (QEMU -cpu cortex-a53), where
 * kern_select must give NULL and auto the neon level; the neon-i8mm checks
 * skip on a CPU without i8mm (QEMU -cpu neoverse-n1), where kern_select
 * must give NULL for it and auto neon-dotprod.
 *
 * Tolerances, with S = sum_k |x_k * w_k| for one output (w dequantised):
 *  - the activation codes and scales of the prepared form vs
 *    quant_int8_quantize_row: exact;
 *  - the SIMD matmul vs quant_int8_matmul_ref: 1e-6 * (1 + S), the x86
 *    int8 levels' bound (same codes, exact int32 block sums; only the
 *    float rounding of dw * dx, of its product with the block sum and the
 *    order of the block terms differ);
 *  - the prepared path at 1-3 threads and split in two ranges: the same
 *    bits as matmul_rows;
 *  - neon-i8mm's K-quants vs neon-dotprod's: the same bits (exact integer
 *    group sums either way, the same float steps), however split;
 *  - other weight dtypes and every other op: the neon set's bits.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kernels/quant_int8.h"
#include "kernels/team.h"
#include "tensor.h"

static float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static double abs_dot(const float *x, const float *w, int K) {
    double s = 0;
    for (int k = 0; k < K; k++) s += fabs((double)x[k] * w[k]);
    return s;
}

/* Random K-quant blocks: random bytes, the f16 scale fields finite and
 * moderate (as tests/test_quant_int8.c). */
static void random_kblocks(kvlm_dtype t, size_t nblocks, unsigned char *dst, unsigned *seed) {
    const size_t bb = dtype_block_bytes(t);
    for (size_t i = 0; i < nblocks * bb; i++) dst[i] = (unsigned char)((*seed = *seed * 1664525u + 1013904223u) >> 24);
    for (size_t b = 0; b < nblocks; b++) {
        unsigned char *blk = dst + b * bb;
        const size_t at[2] = {t == KVLM_Q6_K ? 208 : 0, 2};
        for (int f = 0; f < (t == KVLM_Q6_K ? 1 : 2); f++) {
            const uint16_t h = f32_to_f16(frand(seed) * 0.05f);
            memcpy(blk + at[f], &h, 2);
        }
    }
}

static const kern_ops *dotprod_or_skip(void) {
    if (!kern_cpu_supports(KVLM_ISA_NEON_DOTPROD)) {
        assert_null(kern_select(KVLM_ISA_NEON_DOTPROD));
        assert_int_equal(kvlm_isa_best(), kern_cpu_supports(KVLM_ISA_NEON) ? KVLM_ISA_NEON : KVLM_ISA_SCALAR);
        return NULL;
    }
    const kern_ops *ops = kern_select(KVLM_ISA_NEON_DOTPROD);
    assert_non_null(ops);
    assert_int_equal(ops->isa, KVLM_ISA_NEON_DOTPROD);
    return ops;
}

/* The prepared form holds quant_int8_quantize_row's codes and scales. */
static void test_codes(void **state) {
    (void)state;
    if (!dotprod_or_skip()) skip();
    unsigned seed = 3;
    const int M = 2, K = 32 * 37;
    float *x = malloc((size_t)M * K * 4), d0[37];
    int8_t q0[32 * 37];
    for (int i = 0; i < M * K; i++) x[i] = frand(&seed) * (i % 97 == 0 ? 1000.0f : 1.0f);
    for (int i = 64; i < 96; i++) x[i] = 0.0f;                     /* an all-zero block */
    for (int i = 96; i < 128; i++) x[i] = (float)(i - 112) / 4.0f; /* exact halves after scaling */
    const kern_matrix w = {KVLM_Q8_0, NULL, 1, K, NULL, 0};
    const size_t bytes = quant_int8_dotprod_prep_bytes(M, &w, NULL);
    assert_int_equal(bytes, 64 + ((size_t)M * K + 63) / 64 * 64 + (size_t)M * 37 * 4 + (size_t)M * 74 * 4);
    unsigned char *buf = aligned_alloc(64, (bytes + 63) / 64 * 64);
    quant_int8_dotprod_prep(x, M, &w, 0, M, buf);
    const int8_t *q = (const int8_t *)(buf + 64);
    const float *d = (const float *)(buf + 64 + ((size_t)M * K + 63) / 64 * 64);
    const int32_t *qs = (const int32_t *)(d + M * 37);
    for (int m = 0; m < M; m++) {
        quant_int8_quantize_row(x + (size_t)m * K, K, q0, d0);
        assert_memory_equal(q + (size_t)m * K, q0, sizeof q0);
        assert_memory_equal(d + (size_t)m * 37, d0, sizeof d0);
        for (int g = 0; g < 74; g++) { /* the sums of each 16 codes */
            int32_t want = 0;
            for (int i = 0; i < 16; i++) want += q0[16 * g + i];
            assert_int_equal(qs[m * 74 + g], want);
        }
    }
    /* K-quants: a panel for one weight row (256 codes, 16 + 16 floats);
     * no prepared form for the other dtypes or K not whole blocks */
    const kern_matrix k4 = {KVLM_Q4_K, NULL, 1, 256, NULL, 0}, k4bad = {KVLM_Q4_K, NULL, 1, 96, NULL, 0};
    const kern_matrix f = {KVLM_F32, NULL, 1, 64, NULL, 0}, q5 = {KVLM_Q5_0, NULL, 1, 64, NULL, 0};
    size_t panel = 7;
    assert_int_equal(quant_int8_dotprod_prep_bytes(1, &k4, &panel), 64 + 256 + 8 * 4 + 16 * 4);
    assert_int_equal(panel, 384);
    assert_int_equal(quant_int8_dotprod_prep_bytes(1, &k4bad, &panel), 0);
    assert_int_equal(panel, 0);
    assert_int_equal(quant_int8_dotprod_prep_bytes(1, &f, NULL), 0);
    assert_int_equal(quant_int8_dotprod_prep_bytes(1, &q5, NULL), 0);
    free(buf), free(x);
}

/* One shape and weight type: matmul_rows against the reference; the
 * prepared form in two row calls and two output ranges, and kern_matmul at
 * 1-3 threads, give its bits. Returns 1. */
static int check_case(const kern_ops *ops, kvlm_dtype t, int M, int N, int K, unsigned *seed) {
    const size_t rb = dtype_row_bytes(t, K, NULL);
    float *wf = malloc((size_t)K * 4), *wd = malloc((size_t)N * K * 4);
    unsigned char *wq = malloc((size_t)N * rb);
    float *x = malloc((size_t)M * K * 4), *bias = malloc((size_t)N * 4);
    float *ref = malloc((size_t)M * N * 4), *got = malloc((size_t)M * N * 4), *alt = malloc((size_t)M * N * 4);
    if (!quant_can_quantize(t)) random_kblocks(t, (size_t)N * K / QK_K, wq, seed);
    for (int n = 0; n < N; n++) {
        if (quant_can_quantize(t)) {
            for (int k = 0; k < K; k++) wf[k] = frand(seed);
            quant_quantize_row(t, wf, K, wq + (size_t)n * rb);
        }
        quant_dequantize_row(t, wq + (size_t)n * rb, K, wd + (size_t)n * K);
    }
    for (int i = 0; i < M * K; i++) x[i] = frand(seed) * (i % 5 == 0 ? 3.0f : 1.0f);
    for (int i = 0; i < N; i++) bias[i] = frand(seed);
    const kern_matrix kq = {t, wq, N, K, NULL, 0};
    quant_int8_matmul_ref(x, M, &kq, 0, N, bias, ref, N);
    for (int i = 0; i < M * N; i++) got[i] = -12345.0f;
    ops->matmul_rows(x, M, &kq, 0, N, bias, got, N);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            const size_t i = (size_t)m * N + n;
            const double S = abs_dot(x + (size_t)m * K, wd + (size_t)n * K, K);
            if (fabs((double)got[i] - ref[i]) > 1e-6 * (1 + S))
                fail_msg("%s %s M=%d N=%d K=%d [%d,%d]: %.9g vs reference %.9g", kvlm_isa_name(ops->isa),
                         kvlm_dtype_name(t), M, N, K, m, n, got[i], ref[i]);
        }
    size_t panel = 1;
    const size_t pre = ops->matmul_prep_bytes(M, &kq, &panel);
    assert_true(pre > 0);
    if (t == KVLM_Q8_0 || t == KVLM_Q4_0) assert_int_equal(panel, 0);
    else assert_true(panel >= (size_t)K + (size_t)K / 16 * 8);
    const size_t at = (pre + 63) / 64 * 64;
    unsigned char *buf = aligned_alloc(64, at + panel);
    ops->matmul_prep(x, M, &kq, 0, M / 2, buf);
    ops->matmul_prep(x, M, &kq, M / 2, M, buf);
    for (int i = 0; i < M * N; i++) alt[i] = -12345.0f;
    ops->matmul_rows_prep(buf, panel ? buf + at : NULL, &kq, 0, N / 2, bias, alt, N);
    ops->matmul_rows_prep(buf, panel ? buf + at : NULL, &kq, N / 2, N, bias, alt, N);
    assert_memory_equal(alt, got, (size_t)M * N * 4);
    free(buf);
    for (int th = 1; th <= 3; th++) {
        kern_team team;
        assert_int_equal(kern_team_open(&team, th), 0);
        for (int i = 0; i < M * N; i++) alt[i] = -12345.0f;
        kern_matmul(ops, &team, x, M, &kq, bias, alt, N);
        kern_team_close(&team);
        assert_memory_equal(alt, got, (size_t)M * N * 4);
    }
    free(wf), free(wd), free(wq), free(x), free(bias), free(ref), free(got), free(alt);
    return 1;
}

/* Row tiles (2 rows and the one-row tail), weight-row tails (4-row tiles
 * and single rows), block counts 1..9 and a large K; at neon-dotprod and,
 * where the CPU has it, neon-i8mm (2 x 4 and 2 x 2 SMMLA tiles, the odd
 * row and weight row; a range starting on an odd weight row: N = 3). */
static void test_matmul_shapes(void **state) {
    (void)state;
    const kern_ops *ops = dotprod_or_skip();
    if (!ops) skip();
    const kern_ops *mm = kern_select(KVLM_ISA_NEON_I8MM);
    assert_true(!mm == !kern_cpu_supports(KVLM_ISA_NEON_I8MM));
    const kvlm_dtype ts[] = {KVLM_Q8_0, KVLM_Q4_0};
    const int Ms[] = {1, 2, 3, 5}, Ns[] = {1, 3, 4, 5, 9, 70}, Ks[] = {32, 64, 96, 288};
    unsigned seed = 5;
    int checked = 0;
    for (size_t t = 0; t < 2; t++) {
        for (size_t a = 0; a < 4; a++)
            for (size_t b = 0; b < 6; b++)
                for (size_t c = 0; c < 4; c++) checked += check_case(ops, ts[t], Ms[a], Ns[b], Ks[c], &seed);
        checked += check_case(ops, ts[t], 9, 37, 4096, &seed);
    }
    assert_int_equal(checked, 2 * (4 * 6 * 4 + 1));
    if (!mm) return;
    /* neon-i8mm: one row is neon-dotprod's; fewer shapes keep the emulated
     * run short */
    const int Mi[] = {2, 3, 5}, Ni[] = {1, 3, 4, 5, 9}, Ki[] = {32, 96, 288};
    checked = 0;
    for (size_t t = 0; t < 2; t++) {
        for (size_t a = 0; a < 3; a++)
            for (size_t b = 0; b < 5; b++)
                for (size_t c = 0; c < 3; c++) checked += check_case(mm, ts[t], Mi[a], Ni[b], Ki[c], &seed);
        checked += check_case(mm, ts[t], 7, 37, 1024, &seed);
    }
    checked += check_case(mm, KVLM_Q4_0, 1, 9, 96, &seed);
    assert_int_equal(checked, 2 * (3 * 5 * 3 + 1) + 1);
}

/* The K-quants: one to five 256-value blocks, decode and batch rows,
 * weight-row tails. */
static void test_matmul_kquants(void **state) {
    (void)state;
    const kern_ops *ops = dotprod_or_skip();
    if (!ops) skip();
    const kvlm_dtype ts[] = {KVLM_Q4_K, KVLM_Q5_K, KVLM_Q6_K};
    const int Ms[] = {1, 2, 5}, Ns[] = {1, 4, 11}, Ks[] = {256, 768, 1280};
    unsigned seed = 17;
    int checked = 0;
    for (size_t t = 0; t < 3; t++)
        for (size_t a = 0; a < 3; a++)
            for (size_t b = 0; b < 3; b++)
                for (size_t c = 0; c < 3; c++) checked += check_case(ops, ts[t], Ms[a], Ns[b], Ks[c], &seed);
    assert_int_equal(checked, 3 * 27);
}

/* neon-i8mm's K-quant SMMLA tiles against neon-dotprod: matmul_rows over
 * all weight rows and over odd ranges, the prepared form in odd row and
 * range splits, and kern_matmul at 1-3 threads give neon-dotprod's bits
 * (each within the reference's tolerance: check_case). Returns 1. */
static int same_bits(const kern_ops *dp, const kern_ops *mm, kvlm_dtype t, int M, int N, int K, unsigned *seed) {
    const size_t rb = dtype_row_bytes(t, K, NULL);
    unsigned char *wq = malloc((size_t)N * rb);
    float *x = malloc((size_t)M * K * 4), *bias = malloc((size_t)N * 4);
    float *want = malloc((size_t)M * N * 4), *got = malloc((size_t)M * N * 4);
    random_kblocks(t, (size_t)N * K / QK_K, wq, seed);
    for (int i = 0; i < M * K; i++) x[i] = frand(seed) * (i % 7 == 0 ? 4.0f : 1.0f);
    for (int i = 0; i < N; i++) bias[i] = frand(seed);
    const kern_matrix kq = {t, wq, N, K, NULL, 0};
    dp->matmul_rows(x, M, &kq, 0, N, bias, want, N);
    for (int i = 0; i < M * N; i++) got[i] = -12345.0f;
    mm->matmul_rows(x, M, &kq, 0, N, bias, got, N);
    for (int i = 0; i < M * N; i++)
        if (memcmp(&got[i], &want[i], 4))
            fail_msg("%s M=%d N=%d K=%d [%d,%d]: neon-i8mm %.9g, neon-dotprod %.9g", kvlm_dtype_name(t), M, N, K,
                     i / N, i % N, got[i], want[i]);
    /* odd ranges: [0, 1), [1, n), [n, N) with n odd */
    const int cut = N > 4 ? 3 : N > 1 ? 1 : 0;
    for (int i = 0; i < M * N; i++) got[i] = -12345.0f;
    mm->matmul_rows(x, M, &kq, 0, N > 1 ? 1 : N, bias, got, N);
    if (N > 1) mm->matmul_rows(x, M, &kq, 1, cut > 1 ? cut : N, bias, got, N);
    if (cut > 1) mm->matmul_rows(x, M, &kq, cut, N, bias, got, N);
    assert_memory_equal(got, want, (size_t)M * N * 4);
    size_t panel = 0;
    const size_t pre = (mm->matmul_prep_bytes(M, &kq, &panel) + 63) / 64 * 64;
    assert_int_equal(panel, (size_t)6 * K);
    unsigned char *buf = aligned_alloc(64, pre + panel);
    mm->matmul_prep(x, M, &kq, 0, 1, buf); /* rows of x prepared in odd parts */
    mm->matmul_prep(x, M, &kq, 1, M / 2 | 1, buf);
    mm->matmul_prep(x, M, &kq, M / 2 | 1, M, buf);
    for (int i = 0; i < M * N; i++) got[i] = -12345.0f;
    for (int n = 0; n < N; n += cut + 2) /* ranges of odd and even length, at odd and even starts */
        mm->matmul_rows_prep(buf, buf + pre, &kq, n, n + cut + 2 < N ? n + cut + 2 : N, bias, got, N);
    assert_memory_equal(got, want, (size_t)M * N * 4);
    free(buf);
    for (int th = 1; th <= 3; th++) {
        kern_team team;
        assert_int_equal(kern_team_open(&team, th), 0);
        for (int i = 0; i < M * N; i++) got[i] = -12345.0f;
        kern_matmul(mm, &team, x, M, &kq, bias, got, N);
        kern_team_close(&team);
        assert_memory_equal(got, want, (size_t)M * N * 4);
    }
    free(wq), free(x), free(bias), free(want), free(got);
    return 1;
}

/* The K-quants at neon-i8mm: the SMMLA tiles with whole and odd row
 * counts (M = 2, 3, 5, 16, 33), weight-row pairs and the odd last row
 * (N = 1, 2, 5, 11), one and three 256-value blocks; one row of x stays
 * neon-dotprod's. Skips without i8mm. */
static void test_i8mm_kquants(void **state) {
    (void)state;
    const kern_ops *dp = dotprod_or_skip();
    if (!dp || !kern_cpu_supports(KVLM_ISA_NEON_I8MM)) skip();
    const kern_ops *mm = kern_select(KVLM_ISA_NEON_I8MM);
    assert_non_null(mm);
    const kvlm_dtype ts[] = {KVLM_Q4_K, KVLM_Q5_K, KVLM_Q6_K};
    const int Ms[] = {2, 3, 5, 16, 33}, Ns[] = {1, 2, 5, 11}, Ks[] = {256, 768};
    unsigned seed = 29;
    int checked = 0;
    for (size_t t = 0; t < 3; t++) {
        for (size_t a = 0; a < 5; a++)
            for (size_t b = 0; b < 4; b++)
                for (size_t c = 0; c < 2; c++) checked += same_bits(dp, mm, ts[t], Ms[a], Ns[b], Ks[c], &seed);
        checked += check_case(mm, ts[t], 5, 11, 768, &seed);  /* the reference's tolerance */
        checked += check_case(mm, ts[t], 16, 4, 1280, &seed);
        checked += check_case(mm, ts[t], 1, 5, 256, &seed); /* decode: neon-dotprod's path */
    }
    assert_int_equal(checked, 3 * (5 * 4 * 2 + 3));
}

/* The NEON unpacking of K-quant rows (quant_int8_row_codes_neon, plain
 * Advanced SIMD: runs on every aarch64 CPU) gives quant_int8_row_codes'
 * bytes and floats exactly: 40 random blocks of each type, every code
 * value, two rows at once; Q8_0 passed through. */
static void test_row_codes_neon(void **state) {
    (void)state;
    enum { NB = 40, K = NB * QK_K };
    const kvlm_dtype ts[] = {KVLM_Q4_K, KVLM_Q5_K, KVLM_Q6_K, KVLM_Q8_0};
    unsigned seed = 23;
    unsigned char *row = malloc(NB * dtype_block_bytes(KVLM_Q6_K) + NB * dtype_block_bytes(KVLM_Q5_K));
    int8_t *w0 = malloc(K), *w1 = malloc(K);
    float *a0 = malloc(sizeof(float) * K / 16), *a1 = malloc(sizeof(float) * K / 16);
    float *b0 = malloc(sizeof(float) * K / 16), *b1 = malloc(sizeof(float) * K / 16);
    assert_true(row && w0 && w1 && a0 && a1 && b0 && b1);
    for (size_t t = 0; t < 4; t++) {
        if (ts[t] == KVLM_Q8_0) {
            for (int i = 0; i < K / QK; i++) quant_quantize_row(KVLM_Q8_0, (float[QK]){(float)i, -1.5f, 0.25f},
                                                                QK, row + (size_t)i * dtype_block_bytes(KVLM_Q8_0));
        } else {
            random_kblocks(ts[t], NB, row, &seed);
        }
        memset(w0, 0x55, K), memset(w1, 0x66, K);
        memset(a0, 0x55, sizeof(float) * K / 16), memset(a1, 0x66, sizeof(float) * K / 16);
        memset(b0, 0x55, sizeof(float) * K / 16), memset(b1, 0x66, sizeof(float) * K / 16);
        quant_int8_row_codes(ts[t], row, K, w0, a0, b0);
        quant_int8_row_codes_neon(ts[t], row, K, w1, a1, b1);
        assert_memory_equal(w0, w1, K);
        assert_memory_equal(a0, a1, sizeof(float) * K / 16);
        assert_memory_equal(b0, b1, sizeof(float) * K / 16);
        int lo = 127, hi = -128;
        for (int i = 0; i < K; i++) lo = w0[i] < lo ? w0[i] : lo, hi = w0[i] > hi ? w0[i] : hi;
        if (ts[t] == KVLM_Q4_K) assert_true(lo == 0 && hi == 15);
        if (ts[t] == KVLM_Q5_K) assert_true(lo == 0 && hi == 31);
        if (ts[t] == KVLM_Q6_K) assert_true(lo == -32 && hi == 31);
    }
    free(row), free(w0), free(w1), free(a0), free(a1), free(b0), free(b1);
}

/* Every op but the quantised matmul is the neon set's; other weight
 * dtypes (f32, Q5_0) give the neon set's bits. */
static void test_level(void **state) {
    (void)state;
    assert_string_equal(kvlm_isa_name(KVLM_ISA_NEON), "neon");
    assert_string_equal(kvlm_isa_name(KVLM_ISA_NEON_DOTPROD), "neon-dotprod");
    assert_int_equal(KVLM_ISA_NEON, 7);
    assert_int_equal(KVLM_ISA_NEON_DOTPROD, 8);
    assert_string_equal(kvlm_isa_name(KVLM_ISA_NEON_I8MM), "neon-i8mm");
    assert_int_equal(KVLM_ISA_NEON_I8MM, 9);
    const kern_ops *v = dotprod_or_skip();
    if (!v) skip();
    const int i8mm = kern_cpu_supports(KVLM_ISA_NEON_I8MM);
    const kvlm_isa best = kern_cpu_supports(KVLM_ISA_NEON_BF16) ? KVLM_ISA_NEON_BF16
                          : i8mm                                ? KVLM_ISA_NEON_I8MM
                                                                : KVLM_ISA_NEON_DOTPROD;
    assert_int_equal(kvlm_isa_best(), best);
    if (i8mm) { /* every op but the int8 matmul is neon-dotprod's */
        const kern_ops *mm = kern_select(KVLM_ISA_NEON_I8MM);
        assert_int_equal(mm->isa, KVLM_ISA_NEON_I8MM);
        assert_true(mm->matmul_prep == v->matmul_prep && mm->attn_scores == v->attn_scores &&
                    mm->rmsnorm == v->rmsnorm && mm->swiglu == v->swiglu);
        /* the prepared form's bytes are neon-dotprod's; the K-quant panel
         * holds two weight rows (6 K bytes) from two rows of x on */
        const kern_matrix q8 = {KVLM_Q8_0, NULL, 1, 512, NULL, 0}, k6 = {KVLM_Q6_K, NULL, 1, 512, NULL, 0};
        size_t pv = 7, pm = 7;
        assert_int_equal(mm->matmul_prep_bytes(3, &q8, &pm), v->matmul_prep_bytes(3, &q8, &pv));
        assert_int_equal(pm, 0);
        assert_int_equal(mm->matmul_prep_bytes(1, &k6, &pm), v->matmul_prep_bytes(1, &k6, &pv));
        assert_int_equal(pm, pv);
        assert_int_equal(pm, 512 + 2 * 32 * 4);
        assert_int_equal(mm->matmul_prep_bytes(2, &k6, &pm), v->matmul_prep_bytes(2, &k6, &pv));
        assert_int_equal(pm, 6 * 512);
    } else {
        assert_null(kern_select(KVLM_ISA_NEON_I8MM));
    }
    const kern_ops *b = kern_select(KVLM_ISA_NEON);
    assert_true(v->attn_scores == b->attn_scores && v->attn_accum == b->attn_accum && v->gelu == b->gelu &&
                v->layernorm == b->layernorm && v->rmsnorm == b->rmsnorm && v->swiglu == b->swiglu &&
                v->store_row == b->store_row);
    unsigned seed = 11;
    enum { M = 3, N = 20, K = 256 };
    static float w[N * K], x[M * K], y0[M * N], y1[M * N];
    static unsigned char wk[N * K / 32 * 22]; /* Q5_0: 22 bytes per 32 values */
    for (int i = 0; i < N * K; i++) w[i] = frand(&seed);
    for (int i = 0; i < M * K; i++) x[i] = frand(&seed);
    for (size_t i = 0; i < sizeof wk; i++) wk[i] = (unsigned char)(frand(&seed) * 100);
    for (size_t blk = 0; blk < sizeof wk / 22; blk++) { /* finite f16 scales */
        const uint16_t h = f32_to_f16(0.01f);
        memcpy(wk + blk * 22, &h, 2);
    }
    const kern_matrix mats[] = {{KVLM_F32, w, N, K, NULL, 0}, {KVLM_Q5_0, wk, N, K, NULL, 0}};
    for (size_t i = 0; i < 2; i++) {
        v->matmul_rows(x, M, &mats[i], 0, N, NULL, y0, N);
        b->matmul_rows(x, M, &mats[i], 0, N, NULL, y1, N);
        assert_memory_equal(y0, y1, sizeof y0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codes),
        cmocka_unit_test(test_matmul_shapes),
        cmocka_unit_test(test_matmul_kquants),
        cmocka_unit_test(test_i8mm_kquants),
        cmocka_unit_test(test_row_codes_neon),
        cmocka_unit_test(test_level),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
