/*
 * Measured memory read bandwidth: the denominator of kvlm's decode roofline
 * (decode is a stream of weight reads). A team of threads (the engine's
 * thread count, or every processor the process may run on) sums a buffer
 * at least twice the last-level cache (sysfs), so the passes come from
 * DRAM and not from a cache that a 64 MiB buffer fits in. Two read
 * patterns alternate over the passes and the best pass counts:
 *   - one sequential stream per thread (what the hardware prefetchers
 *     follow best);
 *   - the decode matmul's pattern: each thread's slice in tiles of 8 rows
 *     of 4 KiB read interleaved, a line of each row at a time, with the
 *     same offset of the next tile prefetched (several streams per thread,
 *     more misses in flight).
 * The buffer is asked for in huge pages (MADV_HUGEPAGE), as weights
 * mapped from a file may be. Whole 64-byte lines are summed as 64-bit integers with the widest loads
 * the CPU has (measure/read_sum.h; no floating point, so no denormal slow
 * paths; the sum is kept so no load is dropped). It
 * does not measure writes, latency or a single thread's share unless
 * asked to run one thread.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kernels/kernels.h"
#include "kvlm_measure.h"
#include "measure/read_sum.h"
#include "omp_compat.h"

/* Largest cache size the kernel reports for cpu0 (0 if sysfs has none). */
static size_t largest_cache_bytes(void) {
    size_t best = 0;
    for (int i = 0; i < 16; i++) {
        char path[96], text[32] = {0};
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        size_t got = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        text[got] = 0;
        char *end = NULL;
        unsigned long long v = strtoull(text, &end, 10);
        if (end == text) continue;
        if (*end == 'K') v <<= 10;
        else if (*end == 'M') v <<= 20;
        else if (*end == 'G') v <<= 30;
        if (v > best && v < ((size_t)1 << 40)) best = (size_t)v;
    }
    return best;
}

/* The probe's buffer: anonymous memory asked for in 2 MiB pages
 * (MADV_HUGEPAGE; the kernel may still give 4 KiB ones). Weights mapped
 * from a file can come in 2 MiB folios (ext4 on Linux 6.18 here), and a
 * buffer of 4 KiB pages read 10-25% slower than those same weights
 * (docs/performance.md, "Decode against the bandwidth roofline"). NULL
 * if it cannot be mapped. */
static uint64_t *probe_buffer(size_t bytes) {
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, MADV_HUGEPAGE);
#endif
    return p;
}

size_t kvlm_read_bandwidth_buffer_bytes(size_t bytes) {
    const size_t llc = largest_cache_bytes();
    if (llc && bytes < 2 * llc) bytes = 2 * llc;
    const size_t tile = (size_t)READ_TILE_ROWS * READ_ROW_WORDS * sizeof(uint64_t);
    return bytes / tile * tile; /* whole tiles, whole 64-byte lines */
}

double kvlm_measure_read_bandwidth_threads(size_t bytes, int passes, int threads) {
    const int nt = threads > 0 ? threads : kern_load_threads();
    bytes = kvlm_read_bandwidth_buffer_bytes(bytes);
    const size_t n = bytes / sizeof(uint64_t), tile = (size_t)READ_TILE_ROWS * READ_ROW_WORDS;
    const read_sum_ops *rs = read_sum_best();
    uint64_t *buf = n ? probe_buffer(bytes) : NULL;
    if (!buf) return 0;
    #pragma omp parallel for num_threads(nt) schedule(static)
    for (size_t i = 0; i < n; i++) buf[i] = i; /* touch every page first, by the threads that read it */
    double best = 0;
    volatile uint64_t sink = 0;
    const size_t tiles = n / tile;
    for (int p = 0; p < passes; p++) {
        double t0 = kvlm_now();
        uint64_t sum = 0;
        #pragma omp parallel num_threads(nt) reduction(+ : sum)
        {
            const int id = omp_get_thread_num(), team = omp_get_num_threads();
            const size_t a = tiles * id / team * tile, b = tiles * (id + 1) / team * tile;
            sum += p % 2 ? rs->tiled(buf + a, b - a) : rs->sequential(buf + a, b - a);
        }
        double dt = kvlm_now() - t0;
        sink += sum;
        if (dt > 0 && bytes / dt > best) best = (double)bytes / dt;
    }
    (void)sink;
    munmap(buf, bytes);
    return best;
}

double kvlm_measure_read_bandwidth(size_t bytes, int passes) {
    return kvlm_measure_read_bandwidth_threads(bytes, passes, 0);
}
