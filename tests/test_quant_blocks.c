/*
 * The GGUF block types beyond Q8_0 / Q4_0 (Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K,
 * Q3_K, Q4_K, Q5_K, Q6_K, MXFP4, IQ4_XS): names and byte sizes, dequantisation value by
 * value against an independent implementation, the matmul kernels of every
 * ISA, and the GGUF reader's row-length and alignment errors for them.
 *
 * Dequantisation is compared bit for bit with tests/fixtures/quant (the
 * f32 values gguf-py's numpy dequantiser gives for random valid blocks; see
 * the README there): every value is a * code +/- b evaluated in f32 in the
 * same order, a * code exact, so there is no rounding freedom to allow for.
 *
 * Matmul tolerances, with S = sum_k |x_k * w_k| for one output (w the
 * dequantised weights):
 *  - the C quantised matmul equals the C f32 matmul of the dequantised
 *    matrix exactly (same products, same order);
 *  - every kernel multiplies exactly the dequantised weights (checked bit
 *    for bit with identity activations);
 *  - every SIMD path vs the C one: 1e-5 * S. The SIMD kernels multiply the
 *    same exact weights and only sum in another order (VW lanes over K,
 *    then a horizontal sum), whose error is at most about
 *    (K / VW + log2 VW) * 2^-24 * S <= 4.1e-6 * S for K <= 1024.
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/gguf.h"
#include "helpers.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "tensor.h"

/* The 32-value types first (test_matmul_paths counts them). */
static const kvlm_dtype new_types[] = {KVLM_Q4_1, KVLM_Q5_0, KVLM_Q5_1, KVLM_IQ4_NL, KVLM_MXFP4, KVLM_Q2_K,
                                       KVLM_Q3_K, KVLM_Q4_K, KVLM_Q5_K, KVLM_Q6_K, KVLM_IQ4_XS};
#define N_32 5
#define N_NEW (sizeof new_types / sizeof new_types[0])
static const kvlm_isa all_isas[] = {KVLM_ISA_SCALAR, KVLM_ISA_AVX2, KVLM_ISA_AVX512, KVLM_ISA_NEON};

/* The best kernel set with f32 activations (auto may pick an int8 level,
 * tested with its own tolerances in tests/test_quant_int8.c). */
static kvlm_isa best_f32_isa(void) {
    return th_best_f32_isa();
}

static uint32_t rnd(uint32_t *s) {
    *s ^= *s << 13, *s ^= *s >> 17, *s ^= *s << 5;
    return *s;
}

static float frand(uint32_t *s) { return (float)(rnd(s) >> 8) / 8388608.0f - 1.0f; }

static void test_names_and_sizes(void **state) {
    (void)state;
    static const struct { kvlm_dtype t; const char *name; int bl; int bb; } want[] = {
        {KVLM_Q4_1, "q4_1", 32, 20},   {KVLM_Q5_0, "q5_0", 32, 22},   {KVLM_Q5_1, "q5_1", 32, 24},
        {KVLM_Q2_K, "q2_k", 256, 84},  {KVLM_Q3_K, "q3_k", 256, 110}, {KVLM_Q4_K, "q4_k", 256, 144},
        {KVLM_Q5_K, "q5_k", 256, 176}, {KVLM_Q6_K, "q6_k", 256, 210}, {KVLM_IQ4_NL, "iq4_nl", 32, 18},
        {KVLM_MXFP4, "mxfp4", 32, 17},  {KVLM_IQ4_XS, "iq4_xs", 256, 136},
    };
    assert_int_equal(KVLM_Q4_0, 4); /* the existing values keep their numbers */
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const kvlm_dtype t = want[i].t;
        assert_int_equal(t, KVLM_Q4_0 + 1 + (int)i); /* the enum's order */
        assert_string_equal(kvlm_dtype_name(t), want[i].name);
        kvlm_dtype p = KVLM_F32;
        char upper[16];
        for (size_t c = 0; c <= strlen(want[i].name); c++) upper[c] = (char)toupper((unsigned char)want[i].name[c]);
        assert_int_equal(kvlm_dtype_parse(upper, &p, NULL), 0);
        assert_int_equal(p, t);
        assert_true(dtype_is_blocked(t));
        assert_int_equal(dtype_block_len(t), want[i].bl);
        assert_int_equal(dtype_block_bytes(t), want[i].bb);
        assert_int_equal(kvlm_dtype_size(t), 0);
        assert_int_equal(dtype_align(t), t == KVLM_MXFP4 ? 1 : 2); /* 17-byte blocks */
        int ok = 0;
        assert_int_equal(dtype_row_bytes(t, 4096, &ok), 4096 / want[i].bl * want[i].bb);
        assert_int_equal(ok, 1);
        assert_int_equal(dtype_row_bytes(t, 288, &ok), want[i].bl == 256 ? 0 : 9 * want[i].bb);
        assert_int_equal(ok, want[i].bl == 32); /* 288 values are not whole 256-blocks */
        dtype_row_bytes(t, 16, &ok);
        assert_int_equal(ok, 0);
        tensor tt = {.dtype = t, .ndim = 2, .shape = {3, 512}};
        size_t nb = 0;
        assert_int_equal(tensor_nbytes_checked(&tt, &nb), 0);
        assert_int_equal(nb, 3 * 512 / want[i].bl * want[i].bb);
        tt.shape[1] = 128 + 256;
        assert_int_equal(tensor_nbytes_checked(&tt, &nb), want[i].bl == 32 ? 0 : -1);
    }
    kvlm_dtype p;
    assert_int_equal(kvlm_dtype_parse("q4_k_m", &p, NULL), KVLM_ERR_ARG); /* a file type, not a tensor type */
    assert_int_equal(kvlm_dtype_parse("iq4_ks", &p, NULL), KVLM_ERR_ARG);
    assert_false(dtype_is_blocked((kvlm_dtype)16));
    assert_int_equal(dtype_block_bytes((kvlm_dtype)16), 0);
    assert_string_equal(kvlm_dtype_name((kvlm_dtype)16), "?");
    /* E8M0 halves: the two subnormal scales, 1 (e = 128), the largest */
    assert_true(e8m0_half_to_f32(0) == ldexpf(1.0f, -128) && e8m0_half_to_f32(1) == ldexpf(1.0f, -127));
    assert_true(e8m0_half_to_f32(128) == 1.0f && e8m0_half_to_f32(254) == ldexpf(1.0f, 126));
}

/* Every type's fixture blocks dequantise to the fixture's values, bit for
 * bit (Q8_0 and Q4_0 too). */
static void test_dequantize_fixtures(void **state) {
    (void)state;
    const kvlm_dtype all[] = {KVLM_Q8_0, KVLM_Q4_0, KVLM_Q4_1, KVLM_Q5_0, KVLM_Q5_1, KVLM_IQ4_NL, KVLM_Q2_K,
                              KVLM_Q3_K, KVLM_Q4_K, KVLM_Q5_K, KVLM_Q6_K, KVLM_MXFP4, KVLM_IQ4_XS};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        const kvlm_dtype t = all[i];
        char path[128];
        size_t nq, nv;
        snprintf(path, sizeof path, "tests/fixtures/quant/%s.blocks", kvlm_dtype_name(t));
        unsigned char *q = (unsigned char *)th_read_file(path, &nq);
        snprintf(path, sizeof path, "tests/fixtures/quant/%s.f32", kvlm_dtype_name(t));
        float *want = (float *)th_read_file(path, &nv);
        if (!q || !want) fail_msg("cannot read the fixture %s", path);
        const int64_t n = (int64_t)(nv / 4);
        assert_int_equal(nq % dtype_block_bytes(t), 0);
        assert_int_equal(n, (int64_t)(nq / dtype_block_bytes(t)) * dtype_block_len(t));
        assert_true(n >= 512);
        float *got = malloc((size_t)n * 4);
        quant_dequantize_row(t, q, n, got);
        int nonzero = 0;
        for (int64_t k = 0; k < n; k++) {
            if (memcmp(&got[k], &want[k], 4))
                fail_msg("%s value %lld (block %lld): %.9g, gguf-py gives %.9g", kvlm_dtype_name(t), (long long)k,
                         (long long)(k / dtype_block_len(t)), got[k], want[k]);
            nonzero += got[k] != 0;
        }
        assert_true(nonzero > n / 2); /* the fixture is not degenerate */
        free(q), free(want), free(got);
    }
}

/* Random valid blocks: random code bytes, every f16 field a finite value
 * of moderate size (so S stays far from overflow), MXFP4 scales 2^-12 ..
 * 2^-5 (times levels up to 12). */
static void random_blocks(kvlm_dtype t, size_t nblocks, unsigned char *dst, uint32_t *seed) {
    const size_t bb = dtype_block_bytes(t);
    for (size_t i = 0; i < nblocks * bb; i++) dst[i] = (unsigned char)rnd(seed);
    size_t f16_at[2] = {0, 0};
    int nf = 1;
    switch (t) {
    case KVLM_Q4_1: case KVLM_Q5_1: case KVLM_Q4_K: case KVLM_Q5_K: f16_at[1] = 2, nf = 2; break;
    case KVLM_Q2_K: f16_at[0] = 80, f16_at[1] = 82, nf = 2; break;
    case KVLM_Q3_K: f16_at[0] = 108; break;
    case KVLM_Q6_K: f16_at[0] = 208; break;
    case KVLM_MXFP4:
        for (size_t b = 0; b < nblocks; b++) dst[b * bb] = (unsigned char)(116 + rnd(seed) % 8);
        return;
    default: break;
    }
    for (size_t b = 0; b < nblocks; b++)
        for (int f = 0; f < nf; f++) {
            const uint16_t h = f32_to_f16(frand(seed) * 0.05f);
            memcpy(dst + b * bb + f16_at[f], &h, 2);
        }
}

static double abs_dot(const float *x, const float *w, int K) {
    double s = 0;
    for (int k = 0; k < K; k++) s += fabs((double)x[k] * w[k]);
    return s;
}

static void check_case(kvlm_dtype t, int M, int N, int K, uint32_t *seed, int *checked) {
    const size_t rb = dtype_row_bytes(t, K, NULL);
    unsigned char *wq = malloc((size_t)N * rb);
    float *wd = malloc((size_t)N * K * 4), *x = malloc((size_t)M * K * 4), *bias = malloc((size_t)N * 4);
    float *ref = malloc((size_t)M * N * 4), *deq = malloc((size_t)M * N * 4), *got = malloc((size_t)M * N * 4);
    random_blocks(t, (size_t)N * K / dtype_block_len(t), wq, seed);
    for (int n = 0; n < N; n++) quant_dequantize_row(t, wq + (size_t)n * rb, K, wd + (size_t)n * K);
    for (int i = 0; i < M * K; i++) x[i] = frand(seed);
    for (int i = 0; i < N; i++) bias[i] = frand(seed);
    const kern_ops *sc = kern_select(KVLM_ISA_SCALAR);
    kern_matrix kq = {t, wq, N, K, NULL, 0}, kd = {KVLM_F32, wd, N, K, NULL, 0};
    sc->matmul_rows(x, M, &kq, 0, N, bias, ref, N);
    sc->matmul_rows(x, M, &kd, 0, N, bias, deq, N);
    if (memcmp(ref, deq, (size_t)M * N * 4)) fail_msg("%s: C matmul differs from the f32 matmul of the dequantised matrix", kvlm_dtype_name(t));
    for (size_t s = 1; s < 4; s++) {
        const kern_ops *ops = kern_select(all_isas[s]);
        if (!ops) continue;
        for (int i = 0; i < M * N; i++) got[i] = NAN;
        ops->matmul_rows(x, M, &kq, 0, N, bias, got, N);
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                const size_t i = (size_t)m * N + n;
                const double S = abs_dot(x + (size_t)m * K, wd + (size_t)n * K, K) + fabs(bias[n]);
                if (!(fabs((double)got[i] - ref[i]) <= 1e-5 * S))
                    fail_msg("%s %s matmul M=%d N=%d K=%d [%d,%d]: %.9g vs C %.9g (S %g)", kvlm_isa_name(all_isas[s]),
                             kvlm_dtype_name(t), M, N, K, m, n, got[i], ref[i], S);
            }
        (*checked)++;
    }
    free(wq), free(wd), free(x), free(bias), free(ref), free(deq), free(got);
}

/* The weights every kernel multiplies are exactly the dequantised values:
 * with x = rows of the identity matrix, y = W^T bit for bit (one product
 * w * 1 plus zeros in every sum), through the prefill path (M = K rows at
 * once) and the decode path (one row of the identity at a time). */
static void test_kernels_use_exact_weights(void **state) {
    (void)state;
    enum { K = 256, N = 11 };
    uint32_t seed = 4242;
    float *x = calloc((size_t)K * K, 4), *wd = malloc((size_t)N * K * 4), *y = malloc((size_t)K * N * 4);
    unsigned char *wq = malloc((size_t)N * 210);
    for (int k = 0; k < K; k++) x[(size_t)k * K + k] = 1.0f;
    int checked = 0;
    for (size_t t = 0; t < N_NEW; t++) {
        const size_t rb = dtype_row_bytes(new_types[t], K, NULL);
        random_blocks(new_types[t], (size_t)N * K / dtype_block_len(new_types[t]), wq, &seed);
        for (int n = 0; n < N; n++) quant_dequantize_row(new_types[t], wq + (size_t)n * rb, K, wd + (size_t)n * K);
        kern_matrix kq = {new_types[t], wq, N, K, NULL, 0};
        for (size_t s = 0; s < 4; s++) {
            const kern_ops *ops = kern_select(all_isas[s]);
            if (!ops) continue;
            for (int pass = 0; pass < 2; pass++) {
                for (int i = 0; i < K * N; i++) y[i] = NAN;
                if (pass == 0) ops->matmul_rows(x, K, &kq, 0, N, NULL, y, N);
                else
                    for (int k = 0; k < K; k++) ops->matmul_rows(x + (size_t)k * K, 1, &kq, 0, N, NULL, y + (size_t)k * N, N);
                for (int k = 0; k < K; k++)
                    for (int n = 0; n < N; n++)
                        if (memcmp(&y[(size_t)k * N + n], &wd[(size_t)n * K + k], 4) &&
                            !(y[(size_t)k * N + n] == 0 && wd[(size_t)n * K + k] == 0)) /* -0 + 0 = +0 */
                            fail_msg("%s %s %s: weight [%d,%d] is %.9g, dequantised %.9g", kvlm_isa_name(all_isas[s]),
                                     kvlm_dtype_name(new_types[t]), pass ? "decode" : "prefill", n, k,
                                     y[(size_t)k * N + n], wd[(size_t)n * K + k]);
                checked++;
            }
        }
    }
    assert_true(checked >= 2 * (int)N_NEW);
    free(x), free(wd), free(y), free(wq);
}

/* M = 1..9 (decode and every prefill tile shape with tails), N with tails
 * of the 8-row decode tile and the prefill tiles, K = 256..1024. */
static void test_matmul_paths(void **state) {
    (void)state;
    const int Ns[] = {1, 5, 11, 19}, Ks[] = {256, 512, 1024};
    uint32_t seed = 0x9e3779b9u;
    int checked = 0;
    for (size_t t = 0; t < N_NEW; t++)
        for (int M = 1; M <= 9; M++)
            for (size_t b = 0; b < 4; b++)
                for (size_t c = 0; c < 3; c++)
                    if ((M + (int)b + (int)c) % 3 == 0 || M <= 2) /* a spread of shapes, not all 9 x 4 x 3 */
                        check_case(new_types[t], M, Ns[b], Ks[c], &seed, &checked);
    /* 32-value types at K that is no multiple of 256 (MXFP4: odd rows of 17-byte blocks, byte-aligned) */
    for (size_t t = 0; t < N_32; t++) {
        check_case(new_types[t], 3, 7, 96, &seed, &checked);
        check_case(new_types[t], 1, 9, 32, &seed, &checked);
    }
    if (kern_cpu_supports(KVLM_ISA_AVX512)) assert_true(checked > 2 * (int)N_NEW * 30);
    else assert_true(checked > 0 || kvlm_isa_best() == KVLM_ISA_SCALAR);
}

/* The threaded driver, and a column range n0..n1 that starts mid-matrix. */
static void test_matmul_threaded_and_ranges(void **state) {
    (void)state;
    uint32_t seed = 77;
    const int M = 6, N = 300, K = 512;
    for (size_t t = 0; t < N_NEW; t++) {
        const size_t rb = dtype_row_bytes(new_types[t], K, NULL);
        unsigned char *wq = malloc((size_t)N * rb);
        float *x = malloc((size_t)M * K * 4), *ref = malloc((size_t)M * N * 4), *got = malloc((size_t)M * N * 4);
        random_blocks(new_types[t], (size_t)N * K / dtype_block_len(new_types[t]), wq, &seed);
        for (int i = 0; i < M * K; i++) x[i] = frand(&seed);
        kern_matrix kq = {new_types[t], wq, N, K, NULL, 0};
        const kern_ops *sc = kern_select(KVLM_ISA_SCALAR), *best = kern_select(best_f32_isa());
        sc->matmul_rows(x, M, &kq, 0, N, NULL, ref, N);
        for (int Mi = 1; Mi <= M; Mi += M - 1) { /* decode and prefill */
            for (int i = 0; i < M * N; i++) got[i] = NAN;
            kern_matmul(best, &(kern_team){.threads = 2}, x, Mi, &kq, NULL, got, N);
            for (int i = 0; i < Mi * N; i++) assert_true(fabsf(got[i] - ref[i]) <= 1e-3f * (1 + fabsf(ref[i])));
        }
        for (int i = 0; i < M * N; i++) got[i] = -12345.0f;
        best->matmul_rows(x, M, &kq, 133, 145, NULL, got, N);
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                const float g = got[(size_t)m * N + n];
                if (n < 133 || n >= 145) assert_true(g == -12345.0f);
                else assert_true(fabsf(g - ref[(size_t)m * N + n]) <= 1e-3f * (1 + fabsf(ref[(size_t)m * N + n])));
            }
        free(wq), free(x), free(ref), free(got);
    }
}

/* ------------------------------------------------------- GGUF error paths */

typedef struct gbuf { unsigned char b[4096]; size_t n; } gbuf;
static void put(gbuf *g, const void *p, size_t n) { memcpy(g->b + g->n, p, n), g->n += n; }
static void u32(gbuf *g, uint32_t v) { put(g, &v, 4); }
static void u64(gbuf *g, uint64_t v) { put(g, &v, 8); }
static void str(gbuf *g, const char *s) { u64(g, strlen(s)), put(g, s, strlen(s)); }

/* A GGUF v3 file with general.alignment `align` and one [rows, ne0]
 * tensor of `type`, its data at offset 0 (filled with zero bytes). */
static void one_tensor(gbuf *g, const char *name, uint32_t type, uint64_t ne0, uint64_t rows, uint32_t align,
                       size_t data_bytes) {
    g->n = 0;
    put(g, "GGUF", 4), u32(g, 3), u64(g, 1), u64(g, 1);
    str(g, "general.alignment"), u32(g, GGUF_TYPE_U32), u32(g, align);
    str(g, name), u32(g, 2), u64(g, ne0), u64(g, rows), u32(g, type), u64(g, 0);
    while (g->n % align) g->b[g->n++] = 0;
    memset(g->b + g->n, 0, data_bytes), g->n += data_bytes;
}

static int load(const gbuf *g, const char *dir, kvlm_error *err, kvlm_dtype *dt, size_t *bytes) {
    char path[600];
    snprintf(path, sizeof path, "%s/q.gguf", dir);
    assert_int_equal(th_write_file(path, g->b, g->n), 0);
    tensor_set ts;
    gguf_meta m;
    tensor_set_init(&ts);
    int rc = gguf_load(&ts, &m, path, err);
    if (rc == KVLM_OK) {
        const named_tensor *nt = tensor_set_find(&ts, "blk.0.ffn_down.weight", NULL);
        if (!nt) nt = tensor_set_find(&ts, "blk.0.ffn_down.weightx", NULL); /* the odd-offset files */
        assert_non_null(nt);
        *dt = nt->t.dtype;
        *bytes = tensor_nbytes(&nt->t);
    }
    gguf_meta_free(&m);
    tensor_set_free(&ts);
    return rc;
}

static void test_gguf_types_and_errors(void **state) {
    (void)state;
    char *dir = th_tempdir();
    assert_non_null(dir);
    static const struct { uint32_t ggml; kvlm_dtype t; } map[] = {
        {GGML_TYPE_Q4_1, KVLM_Q4_1}, {GGML_TYPE_Q5_0, KVLM_Q5_0}, {GGML_TYPE_Q5_1, KVLM_Q5_1},
        {GGML_TYPE_Q2_K, KVLM_Q2_K}, {GGML_TYPE_Q3_K, KVLM_Q3_K}, {GGML_TYPE_Q4_K, KVLM_Q4_K},
        {GGML_TYPE_Q5_K, KVLM_Q5_K}, {GGML_TYPE_Q6_K, KVLM_Q6_K}, {GGML_TYPE_IQ4_NL, KVLM_IQ4_NL},
        {GGML_TYPE_IQ4_XS, KVLM_IQ4_XS}, {GGML_TYPE_MXFP4, KVLM_MXFP4},
    };
    gbuf *g = malloc(sizeof *g);
    kvlm_error err = {0};
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++) {
        const size_t bytes = 2 * 512 / (size_t)dtype_block_len(map[i].t) * dtype_block_bytes(map[i].t);
        one_tensor(g, "blk.0.ffn_down.weight", map[i].ggml, 512, 2, 32, bytes);
        kvlm_dtype dt = KVLM_F32;
        size_t nb = 0;
        if (load(g, dir, &err, &dt, &nb)) fail_msg("%s rejected: %s", kvlm_dtype_name(map[i].t), err.msg);
        assert_int_equal(dt, map[i].t);
        assert_int_equal(nb, bytes);
        /* one byte short of the data: refused */
        one_tensor(g, "blk.0.ffn_down.weight", map[i].ggml, 512, 2, 32, bytes - 1);
        assert_int_equal(load(g, dir, &err, &dt, &nb), KVLM_ERR_FORMAT);
    }
    /* a row that is not whole 256-value blocks: names the tensor, its row and the block */
    one_tensor(g, "blk.0.ffn_down.weight", GGML_TYPE_Q4_K, 384, 2, 32, 1024);
    kvlm_dtype dt;
    size_t nb;
    assert_int_equal(load(g, dir, &err, &dt, &nb), KVLM_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "'blk.0.ffn_down.weight'"));
    assert_non_null(strstr(err.msg, "ne[0] = 384"));
    assert_non_null(strstr(err.msg, "q4_k block of 256"));
    one_tensor(g, "blk.0.ffn_down.weight", GGML_TYPE_Q5_1, 48, 1, 32, 64);
    assert_int_equal(load(g, dir, &err, &dt, &nb), KVLM_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "ne[0] = 48 is not a multiple of the q5_1 block of 32"));
    /* alignment 1 and an odd data offset: the 2-byte-aligned blocks are refused */
    one_tensor(g, "blk.0.ffn_down.weight", GGML_TYPE_Q6_K, 256, 1, 1, 210);
    if ((g->n - 210) % 2 == 0) { /* make the data offset odd: one more byte of name */
        one_tensor(g, "blk.0.ffn_down.weightx", GGML_TYPE_Q6_K, 256, 1, 1, 210);
    }
    assert_int_equal(load(g, dir, &err, &dt, &nb), KVLM_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "not aligned to its 2-byte values"));
    /* MXFP4 at an odd data offset (alignment 1) is read in place */
    one_tensor(g, "blk.0.ffn_down.weight", GGML_TYPE_MXFP4, 32, 1, 1, 17);
    if ((g->n - 17) % 2 == 0) one_tensor(g, "blk.0.ffn_down.weightx", GGML_TYPE_MXFP4, 32, 1, 1, 17);
    assert_int_equal((g->n - 17) % 2, 1);
    assert_int_equal(load(g, dir, &err, &dt, &nb), KVLM_OK);
    assert_int_equal(dt, KVLM_MXFP4);
    /* an MXFP4 scale byte of 0xFF (E8M0 NaN) in block 5 of row 1: names the tensor and the block */
    one_tensor(g, "blk.0.ffn_down.weight", GGML_TYPE_MXFP4, 128, 2, 32, 2 * 4 * 17);
    g->b[g->n - 2 * 4 * 17 + 5 * 17] = 0xFF;
    assert_int_equal(load(g, dir, &err, &dt, &nb), KVLM_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "tensor 'blk.0.ffn_down.weight': MXFP4 block 5 has scale byte 0xFF"));
    g->b[g->n - 2 * 4 * 17 + 5 * 17] = 0xFE; /* the largest valid scale */
    assert_int_equal(load(g, dir, &err, &dt, &nb), KVLM_OK);
    /* types kvlm still does not read name themselves and the supported list */
    one_tensor(g, "blk.0.ffn_down.weight", 22 /* IQ2_S */, 256, 1, 32, 82);
    assert_int_equal(load(g, dir, &err, &dt, &nb), KVLM_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "type IQ2_S (22) is not supported"));
    assert_non_null(strstr(err.msg, "Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4"));
    free(g);
    th_rmtree(dir);
    free(dir);
}

/* A synthetic model in a type the library cannot quantise to is refused. */
static void test_synthetic_refuses_read_only_types(void **state) {
    (void)state;
    kvlm_error err = {0};
    assert_null(kvlm_model_synthetic("llama-tiny", KVLM_Q4_K, 1, NULL, &err));
    assert_int_equal(err.code, KVLM_ERR_UNSUPPORTED);
    assert_non_null(strstr(err.msg, "cannot quantise to q4_k"));
    assert_null(kvlm_model_synthetic("llama-tiny", (kvlm_dtype)99, 1, NULL, &err));
    assert_int_equal(err.code, KVLM_ERR_UNSUPPORTED);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_and_sizes),
        cmocka_unit_test(test_dequantize_fixtures),
        cmocka_unit_test(test_kernels_use_exact_weights),
        cmocka_unit_test(test_matmul_paths),
        cmocka_unit_test(test_matmul_threaded_and_ranges),
        cmocka_unit_test(test_gguf_types_and_errors),
        cmocka_unit_test(test_synthetic_refuses_read_only_types),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
