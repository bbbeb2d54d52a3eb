/*
 * Int8 activations for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K and Q6_K
 * weights
 * (kernels/quant_int8.h): the
 * activation codes on known values, the vector quantisers against the C
 * one (bytes and scales equal), the avx512-vnni / avx2-vnni matmuls
 * against the C reference of the same integer math, the reference against
 * the f32-activation matmul, and the ISA levels' selection.
 *
 * Tolerances, with S = sum_k |x_k * w_k| for one output (w dequantised):
 *  - vector quantiser vs C quantiser: exact (every byte, every scale);
 *  - SIMD int8 matmul vs quant_int8_matmul_ref: 1e-6 * (1 + S). Both use the
 *    same codes and exact int32 block sums; they differ only in the float
 *    rounding of dw * dx, of its product with the block sum and of the
 *    order of the K / 32 block terms (float lanes, then a horizontal sum;
 *    the reference sums in double), a few float ulps of S at these K;
 *    The AVX512-VNNI Q4_0 decode kernel, called directly, has the same
 *    bound, and so has its form for packed weights (q4_0_packed.h), which
 *    adds each block's int32 sum as one float product where the row-major
 *    kernel adds four lanes per block: the two differ by at most the sum
 *    of their bounds, 2e-6 * (1 + S);
 *  - reference vs the f32-activation matmul of the same weights: the
 *    activation quantisation bound sum_k |w_k| * dx_k / 2 (+ 1e-5 (1 + S)).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kvlm_measure.h"
#include "kernels/kernels.h"
#include "kernels/q4_0_packed.h"
#include "kernels/quant.h"
#include "kernels/quant_int8.h"
#include "kernels/team.h"
#include "model/model.h"
#include "tensor.h"

static const kvlm_dtype qtypes[] = {KVLM_Q8_0, KVLM_Q4_0, KVLM_Q4_1, KVLM_Q5_0, KVLM_Q5_1};
#define NQTYPES 5
static const kvlm_dtype ktypes[] = {KVLM_Q4_K, KVLM_Q5_K, KVLM_Q6_K};
static const kvlm_isa vnni[] = {KVLM_ISA_AVX512_VNNI, KVLM_ISA_AVX2_VNNI};
typedef void (*quantize_fn)(const float *, int, int8_t *, float *);
static const quantize_fn vnni_quantize[] = {quant_int8_quantize_row_avx512, quant_int8_quantize_row_avx2};

static float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static void test_known_codes(void **state) {
    (void)state;
    float x[64];
    int8_t q[64];
    float d[2];
    /* block 0: x = i - 16, amax 16, id = 127 / 16 = 7.9375 (exact) */
    for (int i = 0; i < 32; i++) x[i] = (float)(i - 16);
    /* block 1: amax 127 (id = 1), halves round to even */
    for (int i = 0; i < 32; i++) x[32 + i] = 0.0f;
    x[32] = 127.0f, x[33] = 2.5f, x[34] = 3.5f, x[35] = -2.5f, x[36] = -0.5f, x[37] = 0.49f;
    quant_int8_quantize_row(x, 64, q, d);
    assert_true(d[0] == 16.0f / 127.0f);
    assert_true(d[1] == 1.0f);
    const int8_t want0[] = {-127, -119, -111, -103, -95, -87, -79, -71};
    assert_memory_equal(q, want0, 8);
    assert_int_equal(q[16], 0);
    assert_int_equal(q[17], 8);   /* 7.9375 */
    assert_int_equal(q[18], 16);  /* 15.875 */
    assert_int_equal(q[31], 119); /* 119.0625 */
    const int8_t want1[] = {127, 2, 4, -2, 0, 0, 0};
    assert_memory_equal(q + 32, want1, 7);
    /* an all-zero block: scale 0, codes 0 */
    memset(x, 0, sizeof x);
    quant_int8_quantize_row(x, 32, q, d);
    assert_true(d[0] == 0.0f);
    for (int i = 0; i < 32; i++) assert_int_equal(q[i], 0);
}

/* Every vector quantiser the CPU runs gives the C quantiser's bytes. */
static void test_vector_quantisers(void **state) {
    (void)state;
    unsigned seed = 3;
    const int K = 32 * 37;
    float *x = malloc(K * 4), d0[37], d1[37];
    int8_t q0[32 * 37], q1[32 * 37];
    for (int i = 0; i < K; i++) x[i] = frand(&seed) * (i % 97 == 0 ? 1000.0f : 1.0f);
    for (int i = 64; i < 96; i++) x[i] = 0.0f;                     /* an all-zero block */
    for (int i = 96; i < 128; i++) x[i] = (float)(i - 112) / 4.0f; /* exact halves after scaling */
    quant_int8_quantize_row(x, K, q0, d0);
    int ran = 0;
    for (size_t s = 0; s < 2; s++) {
        if (!kern_cpu_supports(vnni[s])) continue;
        memset(q1, 0x55, sizeof q1);
        vnni_quantize[s](x, K, q1, d1);
        assert_memory_equal(q0, q1, sizeof q0);
        assert_memory_equal(d0, d1, sizeof d0);
        ran++;
    }
    assert_true(ran == kern_cpu_supports(vnni[0]) + kern_cpu_supports(vnni[1]));
    free(x);
}

/* Random K-quant blocks: random bytes, the f16 scale fields finite and
 * moderate (as tests/test_quant_blocks.c). */
static void random_kblocks(kvlm_dtype t, size_t nblocks, unsigned char *dst, unsigned *seed) {
    const size_t bb = dtype_block_bytes(t);
    for (size_t i = 0; i < nblocks * bb; i++) dst[i] = (unsigned char)((*seed = *seed * 1664525u + 1013904223u) >> 24);
    if (t == KVLM_MXFP4) { /* scales 2^-8 .. 2^-1, and the subnormal bytes 0 and 1 */
        for (size_t b = 0; b < nblocks; b++) dst[b * bb] = (unsigned char)(b % 13 == 5 ? (unsigned)(b % 2) : 120u + dst[b * bb] % 8u);
        return;
    }
    for (size_t b = 0; b < nblocks; b++) {
        unsigned char *blk = dst + b * bb;
        const size_t at[2] = {t == KVLM_Q6_K ? 208 : 0, 2};
        for (int f = 0; f < (t == KVLM_Q6_K || t == KVLM_IQ4_XS ? 1 : 2); f++) {
            const uint16_t h = f32_to_f16(frand(seed) * 0.05f);
            memcpy(blk + at[f], &h, 2);
        }
    }
}

static double abs_dot(const float *x, const float *w, int K) {
    double s = 0;
    for (int k = 0; k < K; k++) s += fabs((double)x[k] * w[k]);
    return s;
}

/* One shape, one weight type: every int8 ISA the CPU has against the
 * reference, and the reference against f32 activations. Returns the number
 * of ISAs checked. */
static int check_case(kvlm_dtype t, int M, int N, int K, unsigned *seed) {
    const size_t rb = dtype_row_bytes(t, K, NULL);
    float *wf = malloc((size_t)N * K * 4), *wd = malloc((size_t)N * K * 4);
    unsigned char *wq = malloc((size_t)N * rb);
    float *x = malloc((size_t)M * K * 4), *bias = malloc((size_t)N * 4);
    float *ref = malloc((size_t)M * N * 4), *got = malloc((size_t)M * N * 4), *f32 = malloc((size_t)M * N * 4);
    float *dx = malloc((size_t)(K / 32) * 4);
    int8_t *qx = malloc((size_t)K);
    for (size_t i = 0; i < (size_t)N * K; i++) wf[i] = frand(seed);
    for (int i = 0; i < M * K; i++) x[i] = frand(seed) * (i % 5 == 0 ? 3.0f : 1.0f);
    for (int i = 0; i < N; i++) bias[i] = frand(seed);
    if (!quant_can_quantize(t)) random_kblocks(t, (size_t)N * K / dtype_block_len(t), wq, seed);
    for (int n = 0; n < N; n++) {
        if (quant_can_quantize(t)) quant_quantize_row(t, wf + (size_t)n * K, K, wq + (size_t)n * rb);
        quant_dequantize_row(t, wq + (size_t)n * rb, K, wd + (size_t)n * K);
    }
    kern_matrix kq = {t, wq, N, K, NULL, 0}, kd = {KVLM_F32, wd, N, K, NULL, 0};
    quant_int8_matmul_ref(x, M, &kq, 0, N, bias, ref, N);
    kern_select(KVLM_ISA_SCALAR)->matmul_rows(x, M, &kd, 0, N, bias, f32, N);
    for (int m = 0; m < M; m++) {
        quant_int8_quantize_row(x + (size_t)m * K, K, qx, dx);
        for (int n = 0; n < N; n++) {
            const size_t i = (size_t)m * N + n;
            const double S = abs_dot(x + (size_t)m * K, wd + (size_t)n * K, K);
            double bound = 1e-5 * (1 + S);
            for (int k = 0; k < K; k++) bound += fabs(wd[(size_t)n * K + k]) * dx[k / 32] * 0.5;
            if (fabs((double)ref[i] - f32[i]) > bound)
                fail_msg("%s M=%d N=%d K=%d [%d,%d]: int8 reference %g vs f32 activations %g beyond %g",
                         kvlm_dtype_name(t), M, N, K, m, n, ref[i], f32[i], bound);
        }
    }
    int checked = 0;
    for (size_t s = 0; s < 2; s++) {
        const kern_ops *ops = kern_cpu_supports(vnni[s]) ? kern_select(vnni[s]) : NULL;
        if (!ops || (quant_int8_lut_supports(t) && vnni[s] != KVLM_ISA_AVX512_VNNI)) continue;
        for (int i = 0; i < M * N; i++) got[i] = -12345.0f;
        ops->matmul_rows(x, M, &kq, 0, N, bias, got, N);
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                const size_t i = (size_t)m * N + n;
                const double S = abs_dot(x + (size_t)m * K, wd + (size_t)n * K, K);
                if (fabs((double)got[i] - ref[i]) > 1e-6 * (1 + S))
                    fail_msg("%s %s M=%d N=%d K=%d [%d,%d]: %.9g vs reference %.9g", kvlm_isa_name(vnni[s]),
                             kvlm_dtype_name(t), M, N, K, m, n, got[i], ref[i]);
            }
        checked++;
    }
    free(wf), free(wd), free(wq), free(x), free(bias), free(ref), free(got), free(f32), free(dx), free(qx);
    return checked;
}

/* check_case for a table dtype on avx512-vnni (the only level with its
 * int8 kernel), plus the prepared form over two column ranges: the same
 * bits as matmul_rows. Returns 1. */
static int check_lut(kvlm_dtype t, int M, int N, int K, unsigned *seed) {
    const unsigned s0 = *seed;
    const int n = check_case(t, M, N, K, seed);
    assert_int_equal(n, 1);
    /* the same weights and x again (check_case's draws replayed) */
    unsigned s1 = s0;
    const size_t rb = dtype_row_bytes(t, K, NULL);
    unsigned char *wq = malloc((size_t)N * rb);
    float *x = malloc((size_t)M * K * 4), *bias = malloc((size_t)N * 4), *y0 = malloc((size_t)M * N * 4),
          *y1 = malloc((size_t)M * N * 4);
    for (size_t i = 0; i < (size_t)N * K; i++) (void)frand(&s1);
    for (int i = 0; i < M * K; i++) x[i] = frand(&s1) * (i % 5 == 0 ? 3.0f : 1.0f);
    for (int i = 0; i < N; i++) bias[i] = frand(&s1);
    random_kblocks(t, (size_t)N * K / dtype_block_len(t), wq, &s1);
    const kern_ops *ops = kern_select(KVLM_ISA_AVX512_VNNI);
    const kern_matrix kq = {t, wq, N, K, NULL, 0};
    size_t panel = 1;
    const size_t pb = ops->matmul_prep_bytes(M, &kq, &panel);
    assert_true(pb > 0);
    assert_int_equal(panel, 0);
    void *buf = aligned_alloc(64, (pb + 63) & ~(size_t)63);
    ops->matmul_prep(x, M, &kq, 0, M / 2, buf);
    ops->matmul_prep(x, M, &kq, M / 2, M, buf);
    ops->matmul_rows(x, M, &kq, 0, N, bias, y0, N);
    ops->matmul_rows_prep(buf, NULL, &kq, 0, N / 2, bias, y1, N);
    ops->matmul_rows_prep(buf, NULL, &kq, N / 2, N, bias, y1, N);
    assert_memory_equal(y0, y1, (size_t)M * N * 4);
    /* both forms of the weight side (with AVX512-VBMI and without) give
     * the bits above, from a range starting mid-matrix too */
    const size_t lb = quant_int8_lut_bytes_avx512(M, &kq);
    void *act = aligned_alloc(64, (lb + 63) & ~(size_t)63);
    quant_int8_lut_prep_avx512(x, M, &kq, 0, M, act);
    for (int form = 0; form < 2; form++) {
        if (form == 1 && !__builtin_cpu_supports("avx512vbmi")) break;
        for (int i = 0; i < M * N; i++) y1[i] = -1.0f;
        (form ? quant_int8_lut_rows_vbmi_avx512 : quant_int8_lut_rows_base_avx512)(act, M, &kq, 0, N / 2, bias, y1, N);
        (form ? quant_int8_lut_rows_vbmi_avx512 : quant_int8_lut_rows_base_avx512)(act, M, &kq, N / 2, N, bias, y1, N);
        assert_memory_equal(y0, y1, (size_t)M * N * 4);
    }
    free(act);
    free(buf), free(wq), free(x), free(bias), free(y0), free(y1);
    return 1;
}

/* One MXFP4 row of x against N weight rows (smallest scale byte e8m0_min
 * as a loader states it) through both weight-side forms
 * (quant_int8_lut_tile.h): the base form's bits from the VBMI one, which
 * runs one-row calls through the scales' exponents when the products fit.
 * Returns whether this call did. */
static int lut_mx1_case(const unsigned char *wq, const float *x, int N, int K, uint8_t e8m0_min) {
    const kern_matrix kq = {.dtype = KVLM_MXFP4, .data = wq, .rows = N, .cols = K, .e8m0_min = e8m0_min};
    const size_t lb = quant_int8_lut_bytes_avx512(1, &kq);
    void *act = aligned_alloc(64, (lb + 63) & ~(size_t)63);
    float *y0 = malloc((size_t)N * 4), *y1 = malloc((size_t)N * 4), *bias = malloc((size_t)N * 4);
    for (int n = 0; n < N; n++) bias[n] = 0.25f * (float)(n % 3);
    quant_int8_lut_prep_avx512(x, 1, &kq, 0, 1, act);
    quant_int8_lut_rows_base_avx512(act, 1, &kq, 0, N, bias, y0, N);
    const unsigned long c0 = quant_int8_lut_mx1_calls();
    quant_int8_lut_rows_vbmi_avx512(act, 1, &kq, 0, N, bias, y1, N);
    const int took = (int)(quant_int8_lut_mx1_calls() - c0);
    assert_memory_equal(y0, y1, (size_t)N * 4);
    free(act), free(y0), free(y1), free(bias);
    return took;
}

/* The exponent form of MXFP4 decode. Taken for ordinary scales and
 * activations (K = 2880 ends in a short group of 2 blocks, which takes the
 * float steps), and at its edge: a dx of 1.5 * 2^-116 against the smallest
 * scale byte 118 makes the smallest product scale 1.5 * 2^-126, still
 * normal. Not taken when the smallest scale byte is not known (0), or is
 * too small for that dx, for a block of zeros in x, or for activations of
 * 254 and more (dx >= 2). In every case the bits of the base form. */
static void test_lut_mxfp4_exponent_form(void **state) {
    (void)state;
    if (!kern_cpu_supports(KVLM_ISA_AVX512_VNNI) || !__builtin_cpu_supports("avx512vbmi")) skip();
    const int N = 9, K = 2880, nb = K / QK;
    const size_t rb = dtype_row_bytes(KVLM_MXFP4, K, NULL);
    unsigned char *wq = malloc((size_t)N * rb);
    float *x = malloc((size_t)K * 4), *x2 = malloc((size_t)K * 4);
    unsigned seed = 41;
    for (size_t i = 0; i < (size_t)N * rb; i++) wq[i] = (unsigned char)((seed = seed * 1664525u + 1013904223u) >> 24);
    for (size_t b = 0; b < (size_t)N * nb; b++) wq[b * sizeof(blk_mxfp4)] = (unsigned char)(118 + b % 10);
    for (int k = 0; k < K; k++) x[k] = frand(&seed) * (k % 7 == 0 ? 8.0f : 1.0f);
    assert_int_equal(lut_mx1_case(wq, x, N, K, 118), 1); /* two 4-row tiles and a 1-row tail */
    assert_int_equal(lut_mx1_case(wq, x, N, K, 0), 0);
    memcpy(x2, x, (size_t)K * 4);
    for (int k = 96; k < 128; k++) x2[k] = (k == 100 ? 127.0f * 1.5f : 0.5f) * 0x1p-116f; /* block 3: dx 1.5 * 2^-116 */
    assert_int_equal(lut_mx1_case(wq, x2, N, K, 118), 1);
    assert_int_equal(lut_mx1_case(wq, x2, N, K, 117), 0);
    memcpy(x2, x, (size_t)K * 4);
    for (int k = 64; k < 96; k++) x2[k] = 0.0f; /* block 2: zeros */
    assert_int_equal(lut_mx1_case(wq, x2, N, K, 118), 0);
    memcpy(x2, x, (size_t)K * 4);
    x2[200] = 254.0f; /* block 6: dx = 2 */
    assert_int_equal(lut_mx1_case(wq, x2, N, K, 118), 0);
    x2[200] = 253.0f;
    assert_int_equal(lut_mx1_case(wq, x2, N, K, 118), 1);
    wq[5 * rb + 40 * sizeof(blk_mxfp4)] = 0; /* a subnormal scale, stated as the smallest */
    assert_int_equal(lut_mx1_case(wq, x, N, K, 0), 0);
    free(wq), free(x), free(x2);
}

/* Row tiles (4 x 4 and 2 x 3 plus the one-row tail), weight-row tails, odd
 * block counts (the zmm kernel's half pair) and a buffer too large for the
 * stack (M = 24, K = 1024). */
static void test_matmul_shapes(void **state) {
    (void)state;
    const int Ms[] = {1, 2, 3, 4, 5, 7, 9}, Ns[] = {1, 3, 4, 5, 8, 9, 13}, Ks[] = {32, 64, 96, 160, 288};
    unsigned seed = 5;
    int checked = 0, want = kern_cpu_supports(vnni[0]) + kern_cpu_supports(vnni[1]);
    for (size_t t = 0; t < NQTYPES; t++) {
        for (size_t a = 0; a < 7; a++)
            for (size_t b = 0; b < 7; b++)
                for (size_t c = 0; c < 5; c++) checked += check_case(qtypes[t], Ms[a], Ns[b], Ks[c], &seed);
        checked += check_case(qtypes[t], 24, 17, 1024, &seed);
        /* decode batches: whole MR_MAX tiles of rows and their tails over
         * the same weight rows, up to the prefill kernels' 16 */
        for (int M = 6; M <= 16; M += M < 8 ? 2 : M < 12 ? 4 : M < 15 ? 3 : 1)
            checked += check_case(qtypes[t], M, 9, 288, &seed);
    }
    assert_int_equal(checked, want * NQTYPES * (7 * 7 * 5 + 1 + 5));
    for (size_t t = 0; t < NQTYPES; t++) {
        assert_int_equal(quant_int8_min_rows_avx512(qtypes[t]), 1);
        assert_int_equal(quant_int8_min_rows_avx2(qtypes[t]), 1);
    }
}

/* The K-quants: K = 256 .. 1280 (the zmm kernel's padded offset sums at
 * 768 and 1280), row counts below the panel threshold (the int8 decode
 * kernels, tests/test_quant_int8_decode.c), whole tiles and single tail
 * rows, weight-row tails. */
static void test_matmul_kquants(void **state) {
    (void)state;
    const int Ms[] = {1, 2, 4, 5, 7, 8, 15}, Ns[] = {1, 4, 5, 11}, Ks[] = {256, 512, 768, 1280};
    unsigned seed = 17;
    int checked = 0, want = kern_cpu_supports(vnni[0]) + kern_cpu_supports(vnni[1]);
    for (size_t t = 0; t < 3; t++) {
        for (size_t a = 0; a < 7; a++)
            for (size_t b = 0; b < 4; b++)
                for (size_t c = 0; c < 4; c++) checked += check_case(ktypes[t], Ms[a], Ns[b], Ks[c], &seed);
        checked += check_case(ktypes[t], 13, 9, 2048, &seed);
        checked += check_case(ktypes[t], 16, 9, 512, &seed); /* the prefill kernels' first row count */
    }
    assert_int_equal(checked, want * 3 * (7 * 4 * 4 + 2));
    assert_int_equal(quant_int8_min_rows_avx512(KVLM_Q4_0), 1);
    assert_int_equal(quant_int8_min_rows_avx512(KVLM_Q6_K), 16);
    assert_int_equal(quant_int8_min_rows_avx2(KVLM_Q4_K), 8);
}

/* MXFP4 and IQ4_XS (the AVX512-VNNI table kernel): decode and prefill
 * row counts (4 x 4 tiles and their 1..3-row tails), weight-row tails,
 * MXFP4 block counts that end in a short group (K = 32, 96, 160, 224), a
 * buffer too large for the stack; the weight side with and without
 * AVX512-VBMI bit for bit. The reference itself is checked against
 * f32 activations in check_case for every shape; avx2-vnni has no table
 * kernel (its f32-activation kernels run, tested in test_quant). */
static void test_matmul_lut(void **state) {
    (void)state;
    const int Ms[] = {1, 2, 3, 4, 5, 9}, Ns[] = {1, 3, 4, 5, 9}, Kx[] = {32, 96, 128, 160, 224, 512},
              Ki[] = {256, 512, 768};
    unsigned seed = 23;
    int checked = 0;
    for (size_t a = 0; a < 6; a++)
        for (size_t b = 0; b < 5; b++) {
            for (size_t c = 0; c < 6; c++)
                if (kern_cpu_supports(KVLM_ISA_AVX512_VNNI)) checked += check_lut(KVLM_MXFP4, Ms[a], Ns[b], Kx[c], &seed);
            for (size_t c = 0; c < 3; c++)
                if (kern_cpu_supports(KVLM_ISA_AVX512_VNNI)) checked += check_lut(KVLM_IQ4_XS, Ms[a], Ns[b], Ki[c], &seed);
        }
    if (kern_cpu_supports(KVLM_ISA_AVX512_VNNI)) {
        checked += check_lut(KVLM_MXFP4, 24, 9, 2880, &seed);
        checked += check_lut(KVLM_IQ4_XS, 30, 7, 2048, &seed);
        assert_int_equal(checked, 6 * 5 * 9 + 2);
    }
    assert_int_equal(quant_int8_lut_supports(KVLM_MXFP4) + quant_int8_lut_supports(KVLM_IQ4_XS), 2);
    assert_int_equal(quant_int8_lut_supports(KVLM_Q4_0) + quant_int8_lut_supports(KVLM_IQ4_NL), 0);
}

/* The threaded driver, and a column range starting mid-matrix that leaves
 * the rest of y untouched. */
static void test_threaded_and_ranges(void **state) {
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
        quant_int8_matmul_ref(x, M, &kq, 0, N, NULL, ref, N);
        for (size_t s = 0; s < 2; s++) {
            if (!kern_cpu_supports(vnni[s])) continue;
            const kern_ops *ops = kern_select(vnni[s]);
            kern_matmul(ops, &(kern_team){.threads = 2}, x, M, &kq, NULL, got, N);
            for (int i = 0; i < M * N; i++) assert_true(fabsf(got[i] - ref[i]) < 1e-4f);
            for (int i = 0; i < M * N; i++) got[i] = -12345.0f;
            ops->matmul_rows(x, M, &kq, 333, 345, NULL, got, N);
            for (int m = 0; m < M; m++)
                for (int n = 0; n < N; n++) {
                    const float g = got[(size_t)m * N + n];
                    if (n < 333 || n >= 345) assert_true(g == -12345.0f);
                    else assert_true(fabsf(g - ref[(size_t)m * N + n]) < 1e-4f);
                }
        }
        free(wf), free(x), free(wq), free(ref), free(got);
    }
}

/* The prepared path of kern_matmul (activations prepared once, shared by
 * the items; teams with a pool) against matmul_rows over the whole range:
 * the same bits at 1, 2 and 3 threads, for every type, with row tiles,
 * weight panels and their tails, and row chunks (K = 8192: the activation
 * tiles are cut into several L2 chunks), and for decode's 1-3 rows and
 * decode batches of 6 and 12 (each type's decode kernel; work large
 * enough to be split into items);
 * matmul_rows against the reference within the tolerance above. Decode
 * also prepared in two calls (rows [0, 1), then [1, M)) and run as two
 * ranges of outputs: the same bits. */
static void test_prepared_threads(void **state) {
    (void)state;
    const kvlm_dtype all[] = {KVLM_Q8_0, KVLM_Q4_0, KVLM_Q4_1, KVLM_Q5_0, KVLM_Q5_1, KVLM_Q4_K, KVLM_Q5_K, KVLM_Q6_K};
    const size_t ntypes = sizeof all / sizeof all[0];
    const struct { int M, N, K; } shapes[] = {{37, 70, 512}, {4, 33, 256}, {50, 40, 8192},
                                              {1, 70, 1024}, {2, 37, 1024}, {3, 50, 8192},
                                              {6, 45, 2048}, {12, 33, 512}};
    const size_t nshapes = sizeof shapes / sizeof shapes[0];
    unsigned seed = 23;
    int checked = 0;
    for (size_t ti = 0; ti < ntypes; ti++)
        for (size_t si = 0; si < nshapes; si++) {
            const kvlm_dtype t = all[ti];
            const int M = shapes[si].M, N = shapes[si].N, K = shapes[si].K;
            const size_t rb = dtype_row_bytes(t, K, NULL);
            unsigned char *wq = malloc((size_t)N * rb);
            float *wf = malloc((size_t)K * 4), *wd = malloc((size_t)N * K * 4), *x = malloc((size_t)M * K * 4);
            float *bias = malloc((size_t)N * 4), *ref = malloc((size_t)M * N * 4);
            float *y1 = malloc((size_t)M * N * 4), *yt = malloc((size_t)M * N * 4);
            if (!quant_can_quantize(t)) random_kblocks(t, (size_t)N * K / dtype_block_len(t), wq, &seed);
            for (int n = 0; n < N; n++) {
                if (quant_can_quantize(t)) {
                    for (int k = 0; k < K; k++) wf[k] = frand(&seed);
                    quant_quantize_row(t, wf, K, wq + (size_t)n * rb);
                }
                quant_dequantize_row(t, wq + (size_t)n * rb, K, wd + (size_t)n * K);
            }
            for (int i = 0; i < M * K; i++) x[i] = frand(&seed) * (i % 7 == 0 ? 4.0f : 1.0f);
            for (int i = 0; i < N; i++) bias[i] = frand(&seed);
            const kern_matrix kq = {t, wq, N, K, NULL, 0};
            quant_int8_matmul_ref(x, M, &kq, 0, N, bias, ref, N);
            for (size_t s = 0; s < 2; s++) {
                if (!kern_cpu_supports(vnni[s])) continue;
                const kern_ops *ops = kern_select(vnni[s]);
                size_t panel = 0;
                const size_t pre = ops->matmul_prep_bytes(M, &kq, &panel);
                assert_true(pre > 0);
                if (M >= 16) assert_true(panel > 0);
                ops->matmul_rows(x, M, &kq, 0, N, bias, y1, N);
                if (M < 16) {
                    unsigned char *buf = aligned_alloc(64, (pre + panel + 63) / 64 * 64);
                    ops->matmul_prep(x, M, &kq, 0, 1, buf);
                    ops->matmul_prep(x, M, &kq, 1, M, buf);
                    for (int i = 0; i < M * N; i++) yt[i] = -12345.0f;
                    ops->matmul_rows_prep(buf, panel ? buf + pre : NULL, &kq, 0, N / 2, bias, yt, N);
                    ops->matmul_rows_prep(buf, panel ? buf + pre : NULL, &kq, N / 2, N, bias, yt, N);
                    assert_memory_equal(yt, y1, (size_t)M * N * 4);
                    free(buf);
                }
                for (int m = 0; m < M; m++)
                    for (int n = 0; n < N; n++) {
                        const double S = abs_dot(x + (size_t)m * K, wd + (size_t)n * K, K);
                        const size_t i = (size_t)m * N + n;
                        if (fabs((double)y1[i] - ref[i]) > 1e-6 * (1 + S))
                            fail_msg("%s %s M=%d N=%d K=%d [%d,%d]: %.9g vs reference %.9g", kvlm_isa_name(vnni[s]),
                                     kvlm_dtype_name(t), M, N, K, m, n, y1[i], ref[i]);
                    }
                for (int th = 1; th <= 3; th++) {
                    kern_team team;
                    assert_int_equal(kern_team_open(&team, th), 0);
                    for (int i = 0; i < M * N; i++) yt[i] = -12345.0f;
                    kern_matmul(ops, &team, x, M, &kq, bias, yt, N);
                    kern_matmul(ops, &team, x, M, &kq, bias, yt, N); /* the team's scratch reused */
                    kern_team_close(&team);
                    assert_memory_equal(yt, y1, (size_t)M * N * 4);
                    checked++;
                }
            }
            free(wq), free(wf), free(wd), free(x), free(bias), free(ref), free(y1), free(yt);
        }
    assert_int_equal(checked, (int)ntypes * (int)nshapes * 3 * (kern_cpu_supports(vnni[0]) + kern_cpu_supports(vnni[1])));
}

/* One direct call of the AVX512-VNNI Q4_0 decode kernel on [n0, N): the
 * reference within 1e-6 * (1 + S), outputs before n0 untouched. sat: every
 * code byte `sat_byte` and every scale the largest finite f16 (65504), x
 * at +-4 (codes +-127). */
static void check_q4_0_decode(int M, int N, int K, int n0, int sat, unsigned char sat_byte, unsigned *seed) {
    const size_t rb = dtype_row_bytes(KVLM_Q4_0, K, NULL);
    float *wf = malloc((size_t)K * 4), *wd = malloc((size_t)N * K * 4), *x = malloc((size_t)M * K * 4);
    unsigned char *wq = malloc((size_t)N * rb);
    float *bias = malloc((size_t)N * 4), *ref = malloc((size_t)M * N * 4), *got = malloc((size_t)M * N * 4);
    for (int n = 0; n < N; n++) {
        unsigned char *row = wq + (size_t)n * rb;
        if (sat) {
            for (int b = 0; b < K / QK; b++) {
                const uint16_t h = 0x7bff;
                memcpy(row + (size_t)b * sizeof(blk_q4_0), &h, 2);
                memset(row + (size_t)b * sizeof(blk_q4_0) + 2, sat_byte, QK / 2);
            }
        } else {
            for (int k = 0; k < K; k++) wf[k] = frand(seed);
            quant_quantize_row(KVLM_Q4_0, wf, K, row);
        }
        quant_dequantize_row(KVLM_Q4_0, row, K, wd + (size_t)n * K);
    }
    for (int i = 0; i < M * K; i++) x[i] = sat ? (i % 2 ? 4.0f : -4.0f) : frand(seed) * (i % 7 == 0 ? 4.0f : 1.0f);
    if (!sat && M > 1) memset(x + K, 0, (size_t)K * 4); /* a zero row: every dx 0 */
    for (int i = 0; i < N; i++) bias[i] = frand(seed);
    const kern_matrix kq = {KVLM_Q4_0, wq, N, K, NULL, 0};
    quant_int8_matmul_ref(x, M, &kq, 0, N, bias, ref, N);
    for (int i = 0; i < M * N; i++) got[i] = -12345.0f;
    assert_int_equal(quant_int8_q4_0_decode_avx512(x, M, &kq, n0, N, bias, got, N), 1);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            const size_t i = (size_t)m * N + n;
            if (n < n0) {
                assert_true(got[i] == -12345.0f);
                continue;
            }
            const double S = abs_dot(x + (size_t)m * K, wd + (size_t)n * K, K);
            if (!(fabs((double)got[i] - ref[i]) <= 1e-6 * (1 + S)))
                fail_msg("q4_0 decode M=%d N=%d K=%d n0=%d sat=%d [%d,%d]: %.9g vs reference %.9g", M, N, K, n0, sat,
                         m, n, got[i], ref[i]);
        }
    /* both forms of the weight side (AVX512-VBMI + GFNI, and without) give
     * the bits of the call above */
    const size_t bytes = quant_int8_q4_0_decode_bytes_avx512(M, &kq);
    void *act = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
    float *alt = malloc((size_t)M * N * 4);
    quant_int8_q4_0_decode_prep_avx512(x, M, &kq, 0, M, act);
    for (int form = 0; form < 2; form++) {
        if (form == 1 && !(__builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("gfni"))) break;
        memcpy(alt, got, (size_t)M * N * 4);
        for (int m = 0; m < M; m++)
            for (int n = n0; n < N; n++) alt[(size_t)m * N + n] = -1.0f;
        (form ? quant_int8_q4_0_rows_vbmi_avx512 : quant_int8_q4_0_rows_base_avx512)(act, M, &kq, n0, N, bias, alt, N);
        assert_memory_equal(alt, got, (size_t)M * N * 4);
    }
    free(act), free(alt);
    free(wf), free(wd), free(x), free(wq), free(bias), free(ref), free(got);
}

/* The AVX512-VNNI Q4_0 decode kernel called directly: 1..3 rows of x,
 * weight-row tails of its 4-row tile and a range starting mid-matrix,
 * block counts with every remainder of its 4-block group (1, 3, 4, 5, 7,
 * 64 blocks), K = 8192 at 3 rows (activations on the heap), saturated
 * codes (all 15, all 0: -8) and scales; its two forms (with and without
 * AVX512-VBMI and GFNI) bit for bit; and the calls it declines. */
static void test_q4_0_decode_avx512(void **state) {
    (void)state;
    if (!kern_cpu_supports(KVLM_ISA_AVX512_VNNI)) skip();
    const int Ms[] = {1, 2, 3}, Ns[] = {1, 3, 4, 5, 9, 13}, Ks[] = {32, 96, 128, 160, 224, 2048};
    unsigned seed = 29;
    for (size_t a = 0; a < 3; a++)
        for (size_t b = 0; b < 6; b++)
            for (size_t c = 0; c < 6; c++) check_q4_0_decode(Ms[a], Ns[b], Ks[c], Ns[b] > 4 ? 3 : 0, 0, 0, &seed);
    check_q4_0_decode(3, 9, 8192, 1, 0, 0, &seed);
    check_q4_0_decode(1, 6, 4096, 0, 1, 0xff, &seed);
    check_q4_0_decode(2, 6, 160, 0, 1, 0x00, &seed);
    float x[4 * 64] = {0}, y[16];
    unsigned char w[4 * 2 * sizeof(blk_q8_0)] = {0};
    const kern_matrix q4 = {KVLM_Q4_0, w, 4, 64, NULL, 0}, q8 = {KVLM_Q8_0, w, 4, 64, NULL, 0};
    assert_int_equal(quant_int8_q4_0_decode_avx512(x, 4, &q4, 0, 4, NULL, y, 4), 0);
    assert_int_equal(quant_int8_q4_0_decode_avx512(x, 0, &q4, 0, 4, NULL, y, 4), 0);
    assert_int_equal(quant_int8_q4_0_decode_avx512(x, 1, &q8, 0, 4, NULL, y, 4), 0);
}

/* The packed layout (q4_0_packed.h) element by element: code byte i of
 * block b of row n at tile n / 4, group b / 4, vector i / 4, lane
 * 4 (n % 4) + b % 4, byte i % 4; its scale in the group's last 32 bytes at
 * the same lane; everything else (rows and blocks past the matrix's) zero. */
static void check_pack_layout(int N, int K, unsigned *seed) {
    const size_t rb = dtype_row_bytes(KVLM_Q4_0, K, NULL);
    const int nb = K / QK, ng = (nb + 3) / 4, tiles = (N + 3) / 4;
    unsigned char *wq = malloc((size_t)N * rb);
    for (size_t i = 0; i < (size_t)N * rb; i++) wq[i] = (unsigned char)(frand(seed) * 127.0f + 128.0f);
    const size_t size = q4_0_packed_size(N, K);
    assert_int_equal(size, (size_t)tiles * ng * 288);
    unsigned char *got = malloc(size), *want = calloc(1, size);
    memset(got, 0xa5, size);
    q4_0_pack(wq, N, K, 0, tiles / 2, got); /* in two calls, as threads split it */
    q4_0_pack(wq, N, K, tiles / 2, tiles, got);
    for (int n = 0; n < N; n++)
        for (int b = 0; b < nb; b++) {
            const unsigned char *blk = wq + (size_t)n * rb + (size_t)b * sizeof(blk_q4_0);
            const size_t grp = ((size_t)(n / 4) * ng + b / 4) * 288;
            const int lane = 4 * (n % 4) + b % 4;
            for (int i = 0; i < QK / 2; i++) want[grp + 64 * (i / 4) + 4 * lane + i % 4] = blk[2 + i];
            want[grp + 256 + 2 * lane] = blk[0], want[grp + 256 + 2 * lane + 1] = blk[1];
        }
    assert_memory_equal(got, want, size);
    /* unpacking any row range gives the file's rows back */
    unsigned char *back = malloc((size_t)N * rb);
    const int r0 = N / 3, r1 = N - N / 4;
    memset(back, 0x5a, (size_t)N * rb);
    q4_0_unpack(got, K, 0, r0, back);
    q4_0_unpack(got, K, r0, r1, back + (size_t)r0 * rb);
    q4_0_unpack(got, K, r1, N, back + (size_t)r1 * rb);
    assert_memory_equal(back, wq, (size_t)N * rb);
    free(wq), free(got), free(want), free(back);
}

/* The AVX512-VNNI Q4_0 decode kernel on packed weights (kern_matrix
 * .packed) against the same kernel on the file's layout and the
 * reference, through matmul_rows, the prepared form (prepared in two
 * calls, rows in two ranges: the bits of matmul_rows) and kern_matmul at
 * 1-3 threads (the same bits); a direct call on a range starting
 * mid-tile leaves the rows before it alone. Shapes: rows with every
 * remainder mod 4 and the 16-row step, block counts with every remainder
 * of the 4-block group, K up to 8192. */
static void check_q4_0_packed(int M, int N, int K, unsigned *seed) {
    const size_t rb = dtype_row_bytes(KVLM_Q4_0, K, NULL);
    float *wf = malloc((size_t)K * 4), *wd = malloc((size_t)N * K * 4), *x = malloc((size_t)M * K * 4);
    unsigned char *wq = malloc((size_t)N * rb);
    float *bias = malloc((size_t)N * 4), *ref = malloc((size_t)M * N * 4), *row = malloc((size_t)M * N * 4);
    float *got = malloc((size_t)M * N * 4), *alt = malloc((size_t)M * N * 4);
    for (int n = 0; n < N; n++) {
        for (int k = 0; k < K; k++) wf[k] = frand(seed);
        quant_quantize_row(KVLM_Q4_0, wf, K, wq + (size_t)n * rb);
        quant_dequantize_row(KVLM_Q4_0, wq + (size_t)n * rb, K, wd + (size_t)n * K);
    }
    for (int i = 0; i < M * K; i++) x[i] = frand(seed) * (i % 7 == 0 ? 4.0f : 1.0f);
    for (int i = 0; i < N; i++) bias[i] = frand(seed);
    void *pk = aligned_alloc(64, (q4_0_packed_size(N, K) + 63) & ~(size_t)63);
    q4_0_pack(wq, N, K, 0, (N + 3) / 4, pk);
    const kern_matrix kq = {KVLM_Q4_0, wq, N, K, NULL, 0}, kp = {KVLM_Q4_0, wq, N, K, pk, 0};
    const kern_ops *ops = kern_select(KVLM_ISA_AVX512_VNNI);
    quant_int8_matmul_ref(x, M, &kq, 0, N, bias, ref, N);
    ops->matmul_rows(x, M, &kq, 0, N, bias, row, N);
    ops->matmul_rows(x, M, &kp, 0, N, bias, got, N);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            const size_t i = (size_t)m * N + n;
            const double S = abs_dot(x + (size_t)m * K, wd + (size_t)n * K, K);
            if (!(fabs((double)got[i] - ref[i]) <= 1e-6 * (1 + S)) || !(fabs((double)got[i] - row[i]) <= 2e-6 * (1 + S)))
                fail_msg("q4_0 packed M=%d N=%d K=%d [%d,%d]: %.9g vs reference %.9g, row-major kernel %.9g", M, N, K,
                         m, n, got[i], ref[i], row[i]);
        }
    size_t panel = 0;
    const size_t pre = ops->matmul_prep_bytes(M, &kp, &panel);
    assert_true(pre > 0);
    assert_int_equal(panel, 0);
    unsigned char *buf = aligned_alloc(64, (pre + 63) & ~(size_t)63);
    ops->matmul_prep(x, M, &kp, 0, 1, buf);
    ops->matmul_prep(x, M, &kp, 1, M, buf);
    for (int i = 0; i < M * N; i++) alt[i] = -12345.0f;
    ops->matmul_rows_prep(buf, NULL, &kp, 0, N / 2, bias, alt, N);
    ops->matmul_rows_prep(buf, NULL, &kp, N / 2, N, bias, alt, N);
    assert_memory_equal(alt, got, (size_t)M * N * 4);
    free(buf);
    for (int th = 1; th <= 3; th++) {
        kern_team team;
        assert_int_equal(kern_team_open(&team, th), 0);
        for (int i = 0; i < M * N; i++) alt[i] = -12345.0f;
        kern_matmul(ops, &team, x, M, &kp, bias, alt, N);
        kern_team_close(&team);
        assert_memory_equal(alt, got, (size_t)M * N * 4);
    }
    const int n0 = N > 5 ? 5 : 0;
    for (int i = 0; i < M * N; i++) alt[i] = -12345.0f;
    assert_int_equal(quant_int8_q4_0_decode_avx512(x, M, &kp, n0, N, bias, alt, N), 1);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            const size_t i = (size_t)m * N + n;
            if (n < n0) assert_true(alt[i] == -12345.0f);
            else assert_true(alt[i] == got[i]);
        }
    free(pk), free(wf), free(wd), free(x), free(wq), free(bias), free(ref), free(row), free(got), free(alt);
}

/* With a packed copy, every other kernel of the avx512-vnni level (the
 * prefill and small-batch ones, M = 4 .. 40) reads only the packed copy:
 * the matrix's data points at zeros here, and the outputs are the bits
 * the same kernels give on the file's layout, through matmul_rows, the
 * prepared form in two row ranges, and kern_matmul at 1-3 threads. */
static void check_q4_0_prefill_packed(int M, int N, int K, unsigned *seed) {
    const size_t rb = dtype_row_bytes(KVLM_Q4_0, K, NULL);
    unsigned char *wq = malloc((size_t)N * rb), *zero = calloc((size_t)N, rb);
    float *wf = malloc((size_t)K * 4), *x = malloc((size_t)M * K * 4), *bias = malloc((size_t)N * 4);
    float *want = malloc((size_t)M * N * 4), *got = malloc((size_t)M * N * 4);
    for (int n = 0; n < N; n++) {
        for (int k = 0; k < K; k++) wf[k] = frand(seed);
        quant_quantize_row(KVLM_Q4_0, wf, K, wq + (size_t)n * rb);
    }
    for (int i = 0; i < M * K; i++) x[i] = frand(seed);
    for (int i = 0; i < N; i++) bias[i] = frand(seed);
    void *pk = aligned_alloc(64, (q4_0_packed_size(N, K) + 63) & ~(size_t)63);
    q4_0_pack(wq, N, K, 0, (N + 3) / 4, pk);
    const kern_matrix kq = {KVLM_Q4_0, wq, N, K, NULL, 0}, kp = {KVLM_Q4_0, zero, N, K, pk, 0};
    const kern_ops *ops = kern_select(KVLM_ISA_AVX512_VNNI);
    ops->matmul_rows(x, M, &kq, 0, N, bias, want, N);
    for (int i = 0; i < M * N; i++) got[i] = -12345.0f;
    ops->matmul_rows(x, M, &kp, 0, N, bias, got, N);
    if (memcmp(got, want, (size_t)M * N * 4)) fail_msg("q4_0 packed prefill M=%d N=%d K=%d differs", M, N, K);
    size_t panel = 0;
    const size_t pre = ops->matmul_prep_bytes(M, &kp, &panel);
    assert_true(pre > 0);
    unsigned char *buf = aligned_alloc(64, ((pre + 63) & ~(size_t)63) + ((panel + 63) & ~(size_t)63));
    ops->matmul_prep(x, M, &kp, 0, M, buf);
    for (int i = 0; i < M * N; i++) got[i] = -12345.0f;
    ops->matmul_rows_prep(buf, buf + ((pre + 63) & ~(size_t)63), &kp, 0, N / 3, bias, got, N);
    ops->matmul_rows_prep(buf, buf + ((pre + 63) & ~(size_t)63), &kp, N / 3, N, bias, got, N);
    assert_memory_equal(got, want, (size_t)M * N * 4);
    free(buf);
    for (int th = 1; th <= 3; th++) {
        kern_team team;
        assert_int_equal(kern_team_open(&team, th), 0);
        for (int i = 0; i < M * N; i++) got[i] = -12345.0f;
        kern_matmul(ops, &team, x, M, &kp, bias, got, N);
        kern_team_close(&team);
        assert_memory_equal(got, want, (size_t)M * N * 4);
    }
    free(pk), free(wq), free(zero), free(wf), free(x), free(bias), free(want), free(got);
}

static void test_q4_0_packed(void **state) {
    (void)state;
    unsigned seed = 31;
    const int Ns[] = {1, 3, 4, 5, 6, 7, 16, 17, 37, 70}, Ks[] = {32, 64, 96, 128, 160, 224, 2048};
    for (size_t a = 0; a < 10; a++)
        for (size_t b = 0; b < 7; b++) check_pack_layout(Ns[a], Ks[b], &seed);
    assert_int_equal(q4_0_packed_size(4, 48), 0);
    assert_int_equal(q4_0_packed_size(0, 64), 0);
    assert_int_equal(q4_0_packed_size(8, 4096), 8 * 4096 / 32 * 18); /* the file's bytes: no padding */
    if (!kern_cpu_supports(KVLM_ISA_AVX512_VNNI)) skip();
    for (int M = 1; M <= 3; M++)
        for (size_t a = 0; a < 10; a++)
            for (size_t b = 0; b < 7; b++) check_q4_0_packed(M, Ns[a], Ks[b], &seed);
    check_q4_0_packed(3, 70, 8192, &seed);
    check_q4_0_packed(1, 300, 768, &seed);
    const int Mp[] = {4, 5, 9, 16, 40};
    for (size_t i = 0; i < 5; i++) check_q4_0_prefill_packed(Mp[i], i % 2 ? 37 : 70, i < 3 ? 256 : 2048, &seed);
    check_q4_0_prefill_packed(17, 300, 96, &seed);
}

/* Load-time repacking (kvlm_model_params) of a synthetic Q4_0 Llama:
 * nothing with repack 0 or for other ISAs; with avx512-vnni (and
 * avx512-bf16, which is avx512-vnni for Q4_0) every layer matrix and the
 * head get their packed form (q4_0_pack's bytes), the bytes kept are the
 * sum of q4_0_packed_size over them, and kvlm_model_decode_bytes counts
 * the copies' bytes. */
static kvlm_model *q4_0_llama(kvlm_isa isa, int repack) {
    kvlm_error err;
    kvlm_model_params mp = kvlm_model_default_params();
    mp.isa = isa;
    mp.repack = repack;
    kvlm_model *m = kvlm_model_synthetic("llama-tiny", KVLM_Q4_0, 3, &mp, &err);
    if (!m) fail_msg("%s", err.msg);
    return m;
}

static void test_model_repack(void **state) {
    (void)state;
    kvlm_model *plain = q4_0_llama(KVLM_ISA_AUTO, 0);
    const size_t decode_before = kvlm_model_decode_bytes(plain);
    assert_int_equal(kvlm_model_repacked_bytes(plain), 0);
    kvlm_model_free(plain);
    const kvlm_isa others[] = {KVLM_ISA_SCALAR, KVLM_ISA_AVX2, KVLM_ISA_AVX512};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        kvlm_model *o = q4_0_llama(others[i], 1);
        assert_int_equal(kvlm_model_repacked_bytes(o), 0);
        assert_null(o->layers[0].wq.packed);
        kvlm_model_free(o);
    }
    kvlm_model *m = q4_0_llama(KVLM_ISA_AUTO, 1); /* the defaults but for the preset */
    const size_t added = kvlm_model_repacked_bytes(m);
    const int packs = kvlm_isa_best() == KVLM_ISA_AVX512_VNNI || kvlm_isa_best() == KVLM_ISA_AVX512_BF16;
    size_t want = 0, decode_want = decode_before;
    int n = 0;
    for (int l = 0; l <= m->cfg.n_layer; l++) {
        model_layer *L = l < m->cfg.n_layer ? &m->layers[l] : NULL;
        const kern_matrix *ws[] = {L ? &L->wq : &m->lm_head, L ? &L->wk : NULL, L ? &L->wv : NULL, L ? &L->wo : NULL,
                                   L ? &L->w_gate : NULL, L ? &L->w_up : NULL, L ? &L->w_down : NULL};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) {
            if (!ws[i]) continue;
            const kern_matrix *w = ws[i];
            assert_int_equal(w->dtype, KVLM_Q4_0);
            if (!packs) {
                assert_null(w->packed);
                continue;
            }
            assert_non_null(w->packed);
            const size_t size = q4_0_packed_size(w->rows, w->cols);
            unsigned char *p = malloc(size);
            q4_0_pack(w->data, w->rows, w->cols, 0, (w->rows + 3) / 4, p);
            assert_memory_equal(p, w->packed, size);
            free(p);
            want += size;
            n++;
            /* the roofline counts what decode reads: the packed copy of the rows it uses */
            const int rows = L ? w->rows : m->cfg.vocab_size;
            decode_want += q4_0_packed_size(rows, w->cols) - (size_t)rows * (w->cols / 32) * 18;
        }
    }
    assert_int_equal(added, want);
    assert_int_equal(kvlm_model_decode_bytes(m), decode_want);
    assert_int_equal(n, packs ? 7 * m->cfg.n_layer + 1 : 0);
    kvlm_model_free(m);
}

/* The levels: names, numbers kept for the old ones, auto picks the
 * int8 level the CPU has, and every op other than the quantised matmul is
 * the base ISA's (f32 weights give the base ISA's bits). */
static void test_isa_levels(void **state) {
    (void)state;
    assert_int_equal(KVLM_ISA_AVX512, 3);
    assert_int_equal(KVLM_ISA_AVX512_VNNI, 4);
    assert_int_equal(KVLM_ISA_AVX2_VNNI, 5);
    assert_string_equal(kvlm_isa_name(KVLM_ISA_AVX512_VNNI), "avx512-vnni");
    assert_string_equal(kvlm_isa_name(KVLM_ISA_AVX2_VNNI), "avx2-vnni");
    if (kern_cpu_supports(KVLM_ISA_AVX512_BF16)) assert_int_equal(kvlm_isa_best(), KVLM_ISA_AVX512_BF16);
    else if (kern_cpu_supports(KVLM_ISA_AVX512_VNNI)) assert_int_equal(kvlm_isa_best(), KVLM_ISA_AVX512_VNNI);
    else if (!kern_cpu_supports(KVLM_ISA_AVX512) && kern_cpu_supports(KVLM_ISA_AVX2_VNNI))
        assert_int_equal(kvlm_isa_best(), KVLM_ISA_AVX2_VNNI);
    const kvlm_isa base[] = {KVLM_ISA_AVX512, KVLM_ISA_AVX2};
    unsigned seed = 11;
    const int M = 3, N = 20, K = 64;
    float w[20 * 64], x[3 * 64], y0[60], y1[60];
    for (int i = 0; i < N * K; i++) w[i] = frand(&seed);
    for (int i = 0; i < M * K; i++) x[i] = frand(&seed);
    for (size_t s = 0; s < 2; s++) {
        if (!kern_cpu_supports(vnni[s])) {
            assert_null(kern_select(vnni[s]));
            continue;
        }
        assert_true(kern_cpu_supports(base[s]));
        const kern_ops *v = kern_select(vnni[s]), *b = kern_select(base[s]);
        assert_int_equal(v->isa, vnni[s]);
        assert_true(v->attn_scores == b->attn_scores && v->attn_accum == b->attn_accum && v->gelu == b->gelu &&
                    v->layernorm == b->layernorm && v->rmsnorm == b->rmsnorm && v->swiglu == b->swiglu &&
                    v->store_row == b->store_row);
        const kern_matrix km = {KVLM_F32, w, N, K, NULL, 0};
        v->matmul_rows(x, M, &km, 0, N, NULL, y0, N);
        b->matmul_rows(x, M, &km, 0, N, NULL, y1, N);
        assert_memory_equal(y0, y1, sizeof y0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_codes),
        cmocka_unit_test(test_vector_quantisers),
        cmocka_unit_test(test_matmul_shapes),
        cmocka_unit_test(test_matmul_kquants),
        cmocka_unit_test(test_matmul_lut),
        cmocka_unit_test(test_lut_mxfp4_exponent_form),
        cmocka_unit_test(test_threaded_and_ranges),
        cmocka_unit_test(test_prepared_threads),
        cmocka_unit_test(test_q4_0_decode_avx512),
        cmocka_unit_test(test_q4_0_packed),
        cmocka_unit_test(test_model_repack),
        cmocka_unit_test(test_isa_levels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
