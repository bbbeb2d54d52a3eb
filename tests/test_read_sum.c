/*
 * The bandwidth measurement's read loops (measure/read_sum.h): every ISA
 * variant the CPU has returns the exact wrapping 64-bit sum of every word,
 * computed here independently, for sequential ranges with and without a
 * tail shorter than the vector loop's step, and for one to three tiles
 * (the prefetch of a next tile switched on and off); so no variant skips a
 * line. A variant the CPU lacks is reported as skipped, not passed. The
 * read test over a model's own weights covers exactly the decode byte
 * ranges, which add up to kvlm_model_decode_bytes.
 */
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kernels/kernels.h"
#include "kvlm_measure.h"
#include "measure/decode_ranges.h"
#include "measure/read_sum.h"

static uint64_t exact_sum(const uint64_t *p, size_t words) {
    uint64_t t = 0;
    for (size_t i = 0; i < words; i++) t += p[i];
    return t;
}

static void check_variant(const read_sum_ops *rs, const char *name) {
    const size_t tile = (size_t)READ_TILE_ROWS * READ_ROW_WORDS, cap = 3 * tile;
    uint64_t *buf = aligned_alloc(64, cap * sizeof(uint64_t));
    assert_non_null(buf);
    uint64_t st = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < cap; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        buf[i] = st; /* large values: the sum wraps */
    }
    const size_t seq[] = {0, 8, 16, 24, 32, 40, 56, 64, 4096 + 24, cap};
    for (size_t i = 0; i < sizeof seq / sizeof seq[0]; i++) {
        const uint64_t got = rs->sequential(buf, seq[i]), want = exact_sum(buf, seq[i]);
        if (got != want) fail_msg("%s sequential, %zu words: %llu, want %llu", name, seq[i], (unsigned long long)got,
                                  (unsigned long long)want);
    }
    for (size_t n = 1; n <= 3; n++) {
        const uint64_t got = rs->tiled(buf, n * tile), want = exact_sum(buf, n * tile);
        if (got != want) fail_msg("%s tiled, %zu tiles: %llu, want %llu", name, n, (unsigned long long)got,
                                  (unsigned long long)want);
    }
    free(buf);
}

static void test_scalar(void **state) {
    (void)state;
    check_variant(&read_sum_scalar, "scalar");
}

/* The vector variants are x86-64's (elsewhere the scalar loops run). */
static void test_avx2(void **state) {
    (void)state;
#if defined(__x86_64__)
    if (!kern_cpu_supports(KVLM_ISA_AVX2)) skip();
    check_variant(&read_sum_avx2, "avx2");
#else
    skip();
#endif
}

static void test_avx512(void **state) {
    (void)state;
#if defined(__x86_64__)
    if (!kern_cpu_supports(KVLM_ISA_AVX512)) skip();
    check_variant(&read_sum_avx512, "avx512");
#else
    skip();
#endif
}

static void test_best_is_widest(void **state) {
    (void)state;
#if defined(__x86_64__)
    const read_sum_ops *want = kern_cpu_supports(KVLM_ISA_AVX512) ? &read_sum_avx512
                               : kern_cpu_supports(KVLM_ISA_AVX2) ? &read_sum_avx2
                                                                  : &read_sum_scalar;
#else
    const read_sum_ops *want = &read_sum_scalar;
#endif
    assert_ptr_equal(read_sum_best(), want);
}

/* llama-tiny: per layer q, k, v, o, gate, up, down; the tied output head
 * in full; one token-embedding row (no learned positions). The ranges are
 * the weights' own memory and add up to the roofline's numerator; the
 * weight read test reads them. */
static void test_weight_ranges(void **state) {
    (void)state;
    kvlm_error err;
    kvlm_model *m = kvlm_model_synthetic("llama-tiny", KVLM_Q8_0, 1, NULL, &err);
    assert_non_null(m);
    const kvlm_config *c = kvlm_model_config(m);
    const int n = model_decode_ranges(m, NULL, 0);
    assert_int_equal(n, 7 * c->n_layer + 2);
    decode_range *r = calloc((size_t)n, sizeof *r);
    assert_int_equal(model_decode_ranges(m, r, n), n);
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        assert_non_null(r[i].data);
        assert_true(r[i].bytes > 0);
        total += r[i].bytes;
    }
    assert_int_equal(total, kvlm_model_decode_bytes(m));
    /* the last range is one embedding row: C values of Q8_0, 34 bytes per 32 */
    assert_int_equal(r[n - 1].bytes, (size_t)c->n_embd / 32 * 34);
    assert_true(kvlm_measure_weight_read_bandwidth(m, 2, 2) > 0);
    free(r);
    kvlm_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scalar),
        cmocka_unit_test(test_avx2),
        cmocka_unit_test(test_avx512),
        cmocka_unit_test(test_best_is_widest),
        cmocka_unit_test(test_weight_ranges),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
