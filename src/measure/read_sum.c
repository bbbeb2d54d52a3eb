/*
 * The plain C read loops of read_sum.h (the reference the vector ones are
 * tested against, and the loop of CPUs without AVX2) and the choice of the
 * widest set the CPU runs.
 */
#include "measure/read_sum.h"

#include "kernels/kernels.h"

static uint64_t scalar_sequential(const uint64_t *p, size_t words) {
    uint64_t s[READ_LINE_WORDS] = {0};
    for (size_t i = 0; i + READ_LINE_WORDS <= words; i += READ_LINE_WORDS)
        for (int q = 0; q < READ_LINE_WORDS; q++) s[q] += p[i + q];
    uint64_t t = 0;
    for (int q = 0; q < READ_LINE_WORDS; q++) t += s[q];
    return t;
}

static uint64_t scalar_tiled(const uint64_t *p, size_t words) {
    const size_t tile = (size_t)READ_TILE_ROWS * READ_ROW_WORDS;
    uint64_t s[READ_LINE_WORDS] = {0};
    for (size_t t = 0; t + tile <= words; t += tile) {
        const int pf = t + 2 * tile <= words;
        for (size_t k = 0; k < READ_ROW_WORDS; k += READ_LINE_WORDS)
            for (int j = 0; j < READ_TILE_ROWS; j++) {
                const uint64_t *r = p + t + (size_t)j * READ_ROW_WORDS + k;
                if (pf) __builtin_prefetch(r + tile, 0, 3);
                for (int q = 0; q < READ_LINE_WORDS; q++) s[q] += r[q];
            }
    }
    uint64_t u = 0;
    for (int q = 0; q < READ_LINE_WORDS; q++) u += s[q];
    return u;
}

const read_sum_ops read_sum_scalar = {scalar_sequential, scalar_tiled};

const read_sum_ops *read_sum_best(void) {
#if defined(__x86_64__)
    if (kern_cpu_supports(KVLM_ISA_AVX512)) return &read_sum_avx512;
    if (kern_cpu_supports(KVLM_ISA_AVX2)) return &read_sum_avx2;
#endif
    return &read_sum_scalar;
}
