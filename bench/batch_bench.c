/*
 * Matmul time per call against the number of activation rows M (a decode
 * step of M sequences), per weight dtype, on one kernel level (default:
 * the best the CPU has): does a step of M rows share each weight load, or
 * cost M steps of one? One thread, timed in its CPU time
 * (CLOCK_THREAD_CPUTIME_ID) so a shared machine's scheduler does not enter
 * the figures; each timed call reads a different matrix from a ring of
 * them that together exceed 512 MiB, so the weights come from memory as in
 * a decode step. Prints the median time per call and its ratio to M = 1.
 * `make bench-batch`; never part of `make test`.
 *
 * usage: batch_bench [N K [calls [ISA [DTYPE,...]]]]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kvlm.h"
#include "omp_compat.h"
#include "tensor.h"
#include "bench_weights.h"

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const int N = argc > 2 ? atoi(argv[1]) : 4096, K = argc > 2 ? atoi(argv[2]) : 2048;
    const int calls = argc > 3 ? atoi(argv[3]) : 30;
    kvlm_isa isa = KVLM_ISA_AUTO;
    if (argc > 4 && strcmp(argv[4], "auto")) {
        isa = (kvlm_isa)-1;
        for (int i = KVLM_ISA_SCALAR; i < 32; i++)
            if (kvlm_isa_name((kvlm_isa)i) && !strcmp(kvlm_isa_name((kvlm_isa)i), argv[4])) isa = (kvlm_isa)i;
        if (isa == (kvlm_isa)-1) {
            fprintf(stderr, "batch_bench: unknown ISA %s\n", argv[4]);
            return 2;
        }
    }
    if (N <= 0 || K <= 0 || K % QK_K || calls <= 0) {
        fprintf(stderr, "usage: batch_bench [N K (K a multiple of 256) [calls [ISA [DTYPE,...]]]]\n");
        return 2;
    }
    const kern_ops *ops = kern_select(isa);
    if (!ops) {
        fprintf(stderr, "batch_bench: the CPU lacks %s\n", argv[4]);
        return 2;
    }
    omp_set_num_threads(1);
    kern_team team = {.threads = 1};
    const kvlm_dtype dts[] = {KVLM_F16,  KVLM_BF16, KVLM_Q8_0, KVLM_Q4_0, KVLM_Q5_0,
                              KVLM_Q4_K, KVLM_Q5_K, KVLM_Q6_K};
    const int ms[] = {1, 2, 3, 4, 6, 8, 12, 16};
    enum { NM = sizeof ms / sizeof *ms };
    float *x = malloc((size_t)16 * K * 4), *y = malloc((size_t)16 * N * 4);
    if (!x || !y) return 1;
    for (int k = 0; k < 16 * K; k++) x[k] = wval(0, k);
    printf("matrix %d x %d, kernels %s, one thread, CPU time per call (median of %d), ratio to M = 1\n", N, K,
           kvlm_isa_name(ops->isa), calls);
    printf("%-6s", "dtype");
    for (int i = 0; i < NM; i++) printf(" %8s%-2d", "M=", ms[i]);
    printf("\n");
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) {
        if (argc > 5 && !strstr(argv[5], kvlm_dtype_name(dts[d]))) continue;
        const size_t rb = dtype_row_bytes(dts[d], K, NULL), mb = rb * (size_t)N;
        const size_t ring = (((size_t)1 << 29) + mb - 1) / mb + 1, total = ring * (size_t)N;
        unsigned char *w = aligned_alloc(64, (ring * mb + 63) & ~(size_t)63);
        float *row = malloc((size_t)K * 4);
        if (!w || !row) return 1;
        for (size_t n = 0; n < total; n++) fill_row(dts[d], n, K, row, w + n * rb);
        free(row);
        double med[NM];
        double *t = malloc((size_t)calls * sizeof(double));
        for (int mi = 0; mi < NM; mi++) {
            for (int i = -1; i < calls; i++) {
                kern_matrix km = {dts[d], w + (size_t)((i + 1 + mi * 7) % (int)ring) * mb, N, K, NULL, 0};
                const double t0 = cpu_now();
                kern_matmul(ops, &team, x, ms[mi], &km, NULL, y, N);
                if (i >= 0) t[i] = cpu_now() - t0;
            }
            qsort(t, (size_t)calls, sizeof *t, cmp_double);
            med[mi] = t[calls / 2];
        }
        printf("%-6s", kvlm_dtype_name(dts[d]));
        for (int i = 0; i < NM; i++) printf(" %6.2fms   ", med[i] * 1e3);
        printf("\n%-6s", "");
        for (int i = 0; i < NM; i++) printf(" %6.2fx    ", med[i] / med[0]);
        printf("\n");
        fflush(stdout);
        free(t);
        free(w);
    }
    free(x), free(y);
    return 0;
}
