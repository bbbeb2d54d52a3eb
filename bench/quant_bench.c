/*
 * Decode matmul throughput per weight dtype: one activation row times a
 * large [N, K] matrix (default 8192 x 4096, far larger than the caches),
 * on all threads, for every ISA the CPU has. Prints the weight bytes read
 * per second next to the machine's read bandwidth measured in the same run
 * (kvlm_measure_read_bandwidth), so the ratio is the kernel's share of the
 * roofline. `make bench-quant`; never part of `make test`.
 *
 * usage: quant_bench [N K [repeats]]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kvlm.h"
#include "tensor.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const int N = argc > 2 ? atoi(argv[1]) : 8192, K = argc > 2 ? atoi(argv[2]) : 4096;
    const int reps = argc > 3 ? atoi(argv[3]) : 30;
    if (N <= 0 || K <= 0 || K % QK || reps <= 0) {
        fprintf(stderr, "usage: quant_bench [N K (K a multiple of 32) [repeats]]\n");
        return 2;
    }
    const kvlm_dtype dts[] = {KVLM_F32, KVLM_F16, KVLM_BF16, KVLM_Q8_0, KVLM_Q4_0};
    const kvlm_isa isas[] = {KVLM_ISA_SCALAR, KVLM_ISA_AVX2, KVLM_ISA_AVX512};
    float *row = malloc((size_t)K * 4), *x = malloc((size_t)K * 4), *y = malloc((size_t)N * 4);
    for (int k = 0; k < K; k++) x[k] = (float)((k * 7919) % 1000) / 1000.0f - 0.5f;
    double bw = kvlm_measure_read_bandwidth((size_t)1 << 30, 5);
    printf("matrix %d x %d, 1 activation row, best and median of %d runs\n", N, K, reps);
    printf("measured read bandwidth: %.2f GB/s\n", bw / 1e9);
    printf("%-6s %-7s %12s %10s %10s %10s %9s\n", "dtype", "isa", "weight MB", "best GB/s", "med GB/s",
           "B/weight", "roofline");
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) {
        const size_t rb = dtype_row_bytes(dts[d], K, NULL), bytes = rb * (size_t)N;
        unsigned char *w = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        if (!w || !row || !x || !y) return 1;
        for (int n = 0; n < N; n++) {
            for (int k = 0; k < K; k++) row[k] = (float)(((n + 1) * (k + 3) * 2654435761u) >> 20 & 1023) / 512 - 1;
            if (dtype_is_blocked(dts[d])) quant_quantize_row(dts[d], row, K, w + (size_t)n * rb);
            else
                for (int k = 0; k < K; k++) dtype_store(dts[d], w + (size_t)n * rb, (size_t)k, row[k]);
        }
        kern_matrix km = {dts[d], w, N, K};
        for (size_t s = 0; s < 3; s++) {
            const kern_ops *ops = kern_select(isas[s]);
            if (!ops) continue;
            int r = isas[s] == KVLM_ISA_SCALAR ? 3 : reps;
            double *t = malloc((size_t)r * sizeof(double));
            kern_matmul(ops, x, 1, &km, NULL, y, N); /* warm-up */
            for (int i = 0; i < r; i++) {
                double t0 = kvlm_now();
                kern_matmul(ops, x, 1, &km, NULL, y, N);
                t[i] = kvlm_now() - t0;
            }
            qsort(t, (size_t)r, sizeof *t, cmp_double);
            double best = bytes / t[0], med = bytes / t[r / 2];
            printf("%-6s %-7s %12.1f %10.2f %10.2f %10.4f %8.0f%%\n", kvlm_dtype_name(dts[d]),
                   kvlm_isa_name(isas[s]), bytes / 1e6, best / 1e9, med / 1e9, (double)rb / K,
                   100.0 * med / bw);
            free(t);
        }
        free(w);
    }
    free(row), free(x), free(y);
    return 0;
}
