/*
 * Deterministic weights for the kernel benchmarks (bench/quant_bench.c,
 * bench/batch_bench.c): pseudo-random values in [-1, 1), rows of any
 * weight type made from them (random code bytes and small finite f16
 * scales, or E8M0 ones for MXFP4, for the block types kvlm only reads),
 * and the comparison their medians sort with. Header-only: each benchmark
 * is one translation unit linked against libkvlm.a. Not for tests: a fixture
 * made here proves nothing about a format.
 */
#ifndef KVLM_BENCH_WEIGHTS_H
#define KVLM_BENCH_WEIGHTS_H

#include <stdint.h>
#include <string.h>

#include "kernels/quant.h"
#include "kvlm.h"
#include "tensor.h"

static inline int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Deterministic pseudo-random weights in [-1, 1). */
static inline float wval(size_t n, int k) {
    uint64_t h = (n + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)(k + 7) * 0xC2B2AE3D27D4EB4Full;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return (float)(h & 0xffff) / 32768.0f - 1.0f;
}

/* The smallest MXFP4 scale byte random_row writes (kern_matrix e8m0_min). */
#define BENCH_E8M0_MIN 118

/* Byte offsets of the f16 fields of a block of t (up to 2; -1 = none). */
static inline void f16_fields(kvlm_dtype t, int at[2]) {
    at[0] = 0, at[1] = -1;
    switch (t) {
    case KVLM_Q4_1: case KVLM_Q5_1: case KVLM_Q4_K: case KVLM_Q5_K: at[1] = 2; break;
    case KVLM_Q2_K: at[0] = 80, at[1] = 82; break;
    case KVLM_Q3_K: at[0] = 108; break;
    case KVLM_Q6_K: at[0] = 208; break;
    case KVLM_MXFP4: at[0] = -1; break; /* an E8M0 byte, set by random_row */
    default: break;
    }
}

/* Row n of a type kvlm only reads: pseudo-random code bytes, small finite
 * f16 scales (the kernels' work does not depend on the values). */
static inline void random_row(kvlm_dtype t, size_t n, int K, unsigned char *dst) {
    const size_t bb = dtype_block_bytes(t), nb = (size_t)(K / dtype_block_len(t));
    for (size_t i = 0; i < nb * bb; i++) dst[i] = (unsigned char)(wval(n, (int)i) * 128.0f + 128.0f);
    int at[2];
    f16_fields(t, at);
    for (size_t b = 0; b < nb; b++)
        for (int f = 0; f < 2; f++)
            if (at[f] >= 0) {
                const uint16_t h = f32_to_f16(0.01f * wval(n, (int)b + f));
                memcpy(dst + b * bb + (size_t)at[f], &h, 2);
            }
    if (t == KVLM_MXFP4) /* scales 2^-10 .. 2^-3, as trained weights have */
        for (size_t b = 0; b < nb; b++) dst[b * bb] = (unsigned char)(BENCH_E8M0_MIN + (n + b) % 8);
}

/* Row n of an [N, K] matrix of type t at dst: the values wval(n, k)
 * quantised (or stored) as t, or random_row for a type kvlm only reads.
 * row: K floats of scratch. */
static inline void fill_row(kvlm_dtype t, size_t n, int K, float *row, unsigned char *dst) {
    for (int k = 0; k < K; k++) row[k] = wval(n, k);
    if (dtype_is_blocked(t) && !quant_can_quantize(t)) random_row(t, n, K, dst);
    else if (dtype_is_blocked(t)) quant_quantize_row(t, row, K, dst);
    else
        for (int k = 0; k < K; k++) dtype_store(t, dst, (size_t)k, row[k]);
}

#endif
