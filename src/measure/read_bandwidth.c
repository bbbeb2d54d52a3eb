/*
 * Measured memory read bandwidth: every processor the process may run on
 * (kern_load_threads, an explicit team size, not the process-wide OpenMP
 * default) sums a buffer much larger than the caches, best of several
 * passes. The denominator of kvlm's decode roofline (decode is a stream of
 * weight reads): the machine's bandwidth, not one engine's share of it.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kvlm_measure.h"

double kvlm_measure_read_bandwidth(size_t bytes, int passes) {
    const int nt = kern_load_threads();
    size_t n = bytes / sizeof(uint64_t);
    /* aligned_alloc wants a multiple of the alignment: whole 64-byte lines */
    n -= n % 8;
    bytes = n * sizeof(uint64_t);
    uint64_t *buf = n ? aligned_alloc(64, bytes) : NULL;
    if (!buf) return 0;
    #pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++) buf[i] = i; /* touch every page first */
    double best = 0;
    volatile uint64_t sink = 0;
    for (int p = 0; p < passes; p++) {
        double t0 = kvlm_now();
        uint64_t sum = 0;
        #pragma omp parallel for num_threads(nt) schedule(static) reduction(+ : sum)
        for (size_t i = 0; i < n; i++) sum += buf[i];
        double dt = kvlm_now() - t0;
        sink += sum;
        if (dt > 0 && bytes / dt > best) best = (double)bytes / dt;
    }
    (void)sink;
    free(buf);
    return best;
}
