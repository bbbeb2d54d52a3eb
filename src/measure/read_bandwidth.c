/*
 * Measured memory read bandwidth: all threads sum a buffer much larger than
 * the caches, best of several passes. The denominator of kvlm's decode
 * roofline (decode is a stream of weight reads).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvlm_measure.h"

double kvlm_measure_read_bandwidth(size_t bytes, int passes) {
    size_t n = bytes / sizeof(uint64_t);
    uint64_t *buf = aligned_alloc(64, n * sizeof(uint64_t));
    if (!buf || n == 0) { free(buf); return 0; }
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) buf[i] = i; /* touch every page first */
    double best = 0;
    volatile uint64_t sink = 0;
    for (int p = 0; p < passes; p++) {
        double t0 = kvlm_now();
        uint64_t sum = 0;
        #pragma omp parallel for schedule(static) reduction(+ : sum)
        for (size_t i = 0; i < n; i++) sum += buf[i];
        double dt = kvlm_now() - t0;
        sink += sum;
        if (dt > 0 && bytes / dt > best) best = (double)bytes / dt;
    }
    (void)sink;
    free(buf);
    return best;
}
