/*
 * Read bandwidth over the model's own weights (kvlm_measure_weight_read_
 * bandwidth, kvlm_measure.h): the bytes one decode step reads
 * (measure/decode_ranges.h), in the pages they live in (a file mapping,
 * possibly of huge pages, or the loader's own buffers), each range split
 * between the threads in whole 64-byte lines and summed sequentially with
 * the widest loads the CPU has (measure/read_sum.h). What a decode step
 * could reach if its matrix products cost nothing but their loads; the
 * buffer probe (read_bandwidth.c) measures memory that may be mapped
 * differently (on a Zen 4 VM, file pages mapped as 2 MiB folios read
 * faster than an anonymous buffer of 4 KiB pages).
 */
#include <stdint.h>
#include <stdlib.h>

#include "kernels/kernels.h"
#include "kvlm_measure.h"
#include "measure/decode_ranges.h"
#include "measure/read_sum.h"
#include "omp_compat.h"

/* The whole 64-byte lines inside a range. */
static void lines(const decode_range *r, const uint64_t **p, size_t *n) {
    const uintptr_t a = ((uintptr_t)r->data + 63) & ~(uintptr_t)63, b = ((uintptr_t)r->data + r->bytes) & ~(uintptr_t)63;
    *p = (const uint64_t *)a;
    *n = b > a ? (size_t)(b - a) / 64 : 0;
}

double kvlm_measure_weight_read_bandwidth(const kvlm_model *m, int passes, int threads) {
    const int nt = threads > 0 ? threads : kern_load_threads();
    const int nr = model_decode_ranges(m, NULL, 0);
    decode_range *r = malloc(sizeof *r * (size_t)(nr ? nr : 1));
    if (!r || !nr) {
        free(r);
        return 0;
    }
    model_decode_ranges(m, r, nr);
    size_t total = 0;
    for (int i = 0; i < nr; i++) {
        const uint64_t *p;
        size_t n;
        lines(&r[i], &p, &n);
        total += n * 64;
    }
    const read_sum_ops *rs = read_sum_best();
    double best = 0;
    volatile uint64_t sink = 0;
    for (int pass = 0; pass < passes && total; pass++) {
        double t0 = 0, t1 = 0;
        uint64_t sum = 0;
        /* timed from the moment every thread is in the region to the moment
         * the last one is done: waking the team (tens of microseconds, a
         * few percent of a small model's read) is not part of the read */
        #pragma omp parallel num_threads(nt) reduction(+ : sum)
        {
            const int id = omp_get_thread_num(), team = omp_get_num_threads();
            #pragma omp barrier
            #pragma omp master
            t0 = kvlm_now();
            for (int i = 0; i < nr; i++) {
                const uint64_t *p;
                size_t n;
                lines(&r[i], &p, &n);
                const size_t a = n * id / team, b = n * (id + 1) / team;
                sum += rs->sequential(p + a * READ_LINE_WORDS, (b - a) * READ_LINE_WORDS);
            }
            #pragma omp barrier
            #pragma omp master
            t1 = kvlm_now();
        }
        const double dt = t1 - t0;
        sink += sum;
        if (dt > 0 && total / dt > best) best = (double)total / dt;
    }
    (void)sink;
    free(r);
    return best;
}
