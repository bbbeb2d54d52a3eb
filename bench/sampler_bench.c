/*
 * Sampler cost per token: microseconds per kvlm_sampler_next at 50k and 150k
 * vocabularies (GPT-2's 50257, Qwen2's 151936) for greedy, temperature 0.8
 * with top-p 0.95, top-k 40 + top-p 0.95, temperature 1 over the whole
 * vocabulary, and min-p 0.05; logits are Gaussian with a flat (sd 1, as a
 * random-weight model gives) and a peaked (sd 4) spread. Timed in the
 * thread's CPU time (a shared machine's scheduler does not count), median
 * of the calls. Then the vector kernels alone (exp and sum over a row) per
 * ISA the CPU has. `make bench-sampler`; never part of `make test`.
 *
 * usage: sampler_bench [calls]
 * Built with -DSAMPLER_BENCH_PUBLIC_ONLY it uses only the public API, so
 * the same file measures an older libkvlm.a.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvlm.h"
#ifndef SAMPLER_BENCH_PUBLIC_ONLY
#include "kernels/vec_softmax.h"
#endif

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return t[n / 2];
}

/* Gaussian logits with standard deviation sd (Box-Muller on a fixed LCG). */
static void gaussian(float *x, int n, float sd, uint64_t seed) {
    uint64_t st = seed * 2862933555777941757ull + 3037000493ull;
    for (int i = 0; i < n; i += 2) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        double u1 = ((double)(st >> 11) + 1.0) / 9007199254740993.0;
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        double u2 = (double)(st >> 11) / 9007199254740992.0;
        double r = sqrt(-2 * log(u1));
        x[i] = (float)(sd * r * cos(6.283185307179586 * u2));
        if (i + 1 < n) x[i + 1] = (float)(sd * r * sin(6.283185307179586 * u2));
    }
}

int main(int argc, char **argv) {
    const int calls = argc > 1 ? atoi(argv[1]) : 200;
    const int vocabs[2] = {50257, 151936};
    const float sds[2] = {1.0f, 4.0f};
    struct { const char *name; float t; int k; float p, minp; } cfg[] = {
        {"greedy", 0, 0, 1, 0},
        {"t0.8 top-p0.95", 0.8f, 0, 0.95f, 0},
        {"t0.8 top-k40 top-p0.95", 0.8f, 40, 0.95f, 0},
        {"t1.0 full vocab", 1.0f, 0, 1, 0},
        {"t0.8 min-p0.05", 0.8f, 0, 1, 0.05f},
    };
    const int nrows = 8; /* distinct logits rows, cycled */
    double *t = malloc((size_t)calls * sizeof *t);
    printf("%-24s %8s %6s %12s\n", "sampler", "vocab", "sd", "us/sample");
    for (int v = 0; v < 2; v++) {
        const int V = vocabs[v];
        float *rows = malloc((size_t)nrows * V * sizeof(float));
        for (int si = 0; si < 2; si++) {
            for (int r = 0; r < nrows; r++) gaussian(rows + (size_t)r * V, V, sds[si], (uint64_t)(r + 1));
            for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
                kvlm_sampler_options o = kvlm_sampler_default_params();
                o.temperature = cfg[c].t, o.top_k = cfg[c].k, o.top_p = cfg[c].p, o.min_p = cfg[c].minp, o.seed = 7;
                kvlm_error err;
                kvlm_sampler *s = kvlm_sampler_create(&o, V, &err);
                if (!s) { fprintf(stderr, "%s\n", err.msg); return 1; }
                int64_t check = 0;
                for (int i = 0; i < calls; i++) {
                    const double t0 = cpu_now();
                    check += kvlm_sampler_next(s, rows + (size_t)(i % nrows) * V);
                    t[i] = cpu_now() - t0;
                }
                kvlm_sampler_free(s);
                printf("%-24s %8d %6.1f %12.1f   (id sum %lld)\n", cfg[c].name, V, sds[si], 1e6 * median(t, calls),
                       (long long)check);
            }
        }
        free(rows);
    }
#ifndef SAMPLER_BENCH_PUBLIC_ONLY
    printf("\n%-24s %8s %12s\n", "exp+sum kernel", "vocab", "us/row");
    const kvlm_isa isas[4] = {KVLM_ISA_SCALAR, KVLM_ISA_AVX2, KVLM_ISA_AVX512, KVLM_ISA_NEON};
    for (int v = 0; v < 2; v++) {
        const int V = vocabs[v];
        float *x = malloc((size_t)V * sizeof(float)), *y = malloc((size_t)V * sizeof(float));
        gaussian(x, V, 1.0f, 1);
        for (int k = 0; k < 4; k++) {
            const vec_softmax_ops *ops = vec_softmax_select(isas[k]);
            if (!ops) continue;
            for (int i = 0; i < calls; i++) {
                const double t0 = cpu_now();
                volatile double sum = ops->exp_sum(x, y, (size_t)V, ops->max(x, (size_t)V));
                (void)sum;
                t[i] = cpu_now() - t0;
            }
            printf("%-24s %8d %12.1f\n", kvlm_isa_name(isas[k]), V, 1e6 * median(t, calls));
        }
        free(x);
        free(y);
    }
#endif
    free(t);
    return 0;
}
