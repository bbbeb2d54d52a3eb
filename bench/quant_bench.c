/*
 * Decode matmul throughput per weight dtype (f32, f16, bf16 and every block
 * type; the types kvlm cannot quantise to get pseudo-random codes with small
 * f16 scales): one activation row times an [N, K] matrix (default 8192 x
 * 2048, a 1B Llama's MLP shape), on all threads, for every kernel level the
 * CPU has (the int8- and bf16-activation levels too). Each timed call reads
 * a different matrix from a ring of them that together exceed 1 GiB, so the
 * weights come from DRAM as in a real decode step, not from a large
 * last-level cache. Prints the weight bytes read per second (median call)
 * next to the read bandwidth measured right after
 * (kvlm_measure_read_bandwidth, the roofline `kvlm bench` uses; re-measured
 * per row because a shared machine's bandwidth drifts). `make bench-quant`; never part of `make test`.
 *
 * usage: quant_bench [N K [calls [cpu|wall [DTYPE,...]]]]
 *
 * With "cpu" everything runs on one thread and is timed in that thread's
 * CPU time (CLOCK_THREAD_CPUTIME_ID), the roofline too (a one-thread read
 * of 1 GiB): on a machine shared with other jobs, wall-clock medians mostly
 * measure the scheduler, CPU time measures the kernel.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kernels/team.h"
#include "kvlm.h"
#include "kvlm_measure.h"
#include "omp_compat.h"
#include "tensor.h"
#include "bench_weights.h"

static int cpu_mode;

static double now(void) {
    if (!cpu_mode) return kvlm_now();
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Best of `passes` one-thread reads of a 1 GiB buffer, in CPU time. */
static double cpu_bandwidth(int passes) {
    const size_t n = ((size_t)1 << 30) / sizeof(uint64_t);
    uint64_t *buf = aligned_alloc(64, n * sizeof(uint64_t));
    if (!buf) return 0;
    for (size_t i = 0; i < n; i++) buf[i] = i;
    double best = 0;
    volatile uint64_t sink = 0;
    for (int p = 0; p < passes; p++) {
        double t0 = now();
        uint64_t a = 0, b = 0, c = 0, d = 0;
        for (size_t i = 0; i < n; i += 4) a += buf[i], b += buf[i + 1], c += buf[i + 2], d += buf[i + 3];
        double dt = now() - t0;
        sink += a + b + c + d;
        if (dt > 0 && n * 8.0 / dt > best) best = n * 8.0 / dt;
    }
    (void)sink;
    free(buf);
    return best;
}

static double bandwidth(int passes) {
    return cpu_mode ? cpu_bandwidth(passes) : kvlm_measure_read_bandwidth((size_t)1 << 30, passes);
}

int main(int argc, char **argv) {
    const int N = argc > 2 ? atoi(argv[1]) : 8192, K = argc > 2 ? atoi(argv[2]) : 2048;
    const int calls = argc > 3 ? atoi(argv[3]) : 40;
    cpu_mode = argc > 4 && !strcmp(argv[4], "cpu");
    if (cpu_mode) omp_set_num_threads(1);
    kern_team team = {0}; /* the engine's thread pool: every core (1 thread in cpu mode) */
    if (kern_team_open(&team, cpu_mode ? 1 : kvlm_default_threads(NULL, 0)) != 0) {
        fprintf(stderr, "quant_bench: cannot start the thread pool\n");
        return 1;
    }
    if (N <= 0 || K <= 0 || K % QK_K || calls <= 0) {
        fprintf(stderr, "usage: quant_bench [N K (K a multiple of 256) [calls]]\n");
        return 2;
    }
    const kvlm_dtype dts[] = {KVLM_F32,  KVLM_F16,  KVLM_BF16, KVLM_Q8_0, KVLM_Q4_0,   KVLM_Q4_1, KVLM_Q5_0, KVLM_Q5_1,
                              KVLM_IQ4_NL, KVLM_Q2_K, KVLM_Q3_K, KVLM_Q4_K, KVLM_Q5_K, KVLM_Q6_K,
                              KVLM_MXFP4,  KVLM_IQ4_XS};
    const kvlm_isa isas[] = {KVLM_ISA_SCALAR,      KVLM_ISA_AVX2,        KVLM_ISA_AVX512,
                             KVLM_ISA_AVX2_VNNI,   KVLM_ISA_AVX512_VNNI, KVLM_ISA_AVX512_BF16,
                             KVLM_ISA_NEON,        KVLM_ISA_NEON_DOTPROD};
    float *x = malloc((size_t)K * 4), *y = malloc((size_t)N * 4);
    if (!x || !y) return 1;
    for (int k = 0; k < K; k++) x[k] = wval(0, k);
    const double bw = bandwidth(5);
    printf("matrix %d x %d, 1 activation row, median and best of %d calls, ring of matrices >= 1 GiB\n", N, K,
           calls);
    printf("measured read bandwidth (%s, 1 GiB): %.2f GB/s\n",
           cpu_mode ? "one thread, CPU time" : "kvlm_measure_read_bandwidth", bw / 1e9);
    printf("%-7s %-11s %9s %9s %10s %10s %9s %9s\n", "dtype", "isa", "B/weight", "matrix MB", "med GB/s", "best GB/s",
           "bw GB/s", "roofline");
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) {
        if (argc > 5 && !strstr(argv[5], kvlm_dtype_name(dts[d]))) continue; /* only the listed dtypes */
        const size_t rb = dtype_row_bytes(dts[d], K, NULL), mb = rb * (size_t)N;
        const size_t ring = (((size_t)1 << 30) + mb - 1) / mb + 1, total = ring * (size_t)N;
        unsigned char *w = aligned_alloc(64, (ring * mb + 63) & ~(size_t)63);
        if (!w) return 1;
        #pragma omp parallel
        {
            float *row = malloc((size_t)K * 4);
            #pragma omp for schedule(static)
            for (size_t n = 0; n < total; n++) fill_row(dts[d], n, K, row, w + n * rb);
            free(row);
        }
        for (size_t s = 0; s < sizeof isas / sizeof *isas; s++) {
            const kern_ops *ops = kern_select(isas[s]);
            if (!ops) continue;
            const int r = isas[s] == KVLM_ISA_SCALAR ? 3 : calls;
            double *t = malloc((size_t)r * sizeof(double));
            for (int i = -1; i < r; i++) { /* i = -1: warm-up */
                kern_matrix km = {dts[d], w + (size_t)((i + 1) % (int)ring) * mb, N, K, NULL,
                                  dts[d] == KVLM_MXFP4 ? BENCH_E8M0_MIN : 0};
                double t0 = now();
                kern_matmul(ops, &team, x, 1, &km, NULL, y, N);
                if (i >= 0) t[i] = now() - t0;
            }
            qsort(t, (size_t)r, sizeof *t, cmp_double);
            /* the machine may be shared: re-measure the roofline next to each run */
            const double bw_now = isas[s] == KVLM_ISA_SCALAR ? bw : bandwidth(3);
            const double med = mb / t[r / 2], best = mb / t[0];
            printf("%-7s %-11s %9.4f %9.1f %10.2f %10.2f %9.2f %8.0f%%\n", kvlm_dtype_name(dts[d]),
                   kvlm_isa_name(isas[s]), (double)rb / K, mb / 1e6, med / 1e9, best / 1e9, bw_now / 1e9,
                   100.0 * med / bw_now);
            free(t);
        }
        free(w);
    }
    free(x), free(y);
    kern_team_close(&team);
    return 0;
}
