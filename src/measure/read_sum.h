/*
 * The read loops of the bandwidth measurement (read_bandwidth.c), one per
 * ISA: each sums 64-bit words so that every byte of the range is loaded,
 * in one of two patterns:
 *   - sequential: words [0, words) in order (one stream);
 *   - tiled: whole tiles of READ_TILE_ROWS rows of READ_ROW_WORDS words,
 *     the rows of a tile read interleaved a 64-byte line at a time and the
 *     same line of the next tile prefetched (the decode matmul's pattern:
 *     several streams, more misses in flight).
 * Every variant returns the same sum (wrapping 64-bit addition) for the
 * same words, so a test can check that none skips a load. The vector
 * variants load whole lines with the widest registers the ISA has: a
 * plain C loop compiled for the baseline x86-64 issues four 16-byte loads
 * per line and measured well below what the decode kernels stream.
 */
#ifndef KVLM_MEASURE_READ_SUM_H
#define KVLM_MEASURE_READ_SUM_H

#include <stddef.h>
#include <stdint.h>

#include "kvlm.h"

#define READ_LINE_WORDS 8  /* uint64_t per 64-byte line */
#define READ_TILE_ROWS 8   /* interleaved streams in the tiled pattern */
#define READ_ROW_WORDS 512 /* 4 KiB per row of a tile */

typedef struct read_sum_ops {
    /* p is 64-byte aligned; words a multiple of READ_LINE_WORDS. */
    uint64_t (*sequential)(const uint64_t *p, size_t words);
    /* p is 64-byte aligned; words a multiple of a tile. */
    uint64_t (*tiled)(const uint64_t *p, size_t words);
} read_sum_ops;

extern const read_sum_ops read_sum_scalar;
extern const read_sum_ops read_sum_avx2;
extern const read_sum_ops read_sum_avx512;

/* The widest set the CPU runs (scalar, avx2 or avx512; the dot-product
 * levels read like their base ISA). */
const read_sum_ops *read_sum_best(void);

#endif
