/*
 * Tensor views: a dtype, a shape and a pointer into memory someone else owns
 * (usually a memory-mapped file). Also the scalar f16/bf16 <-> f32
 * conversions used by the reference paths. Knows nothing about models.
 *
 * Block-quantised dtypes (Q8_0, Q4_0) store each row as whole blocks of
 * QK = 32 values, so they have no per-element size: byte counts come from
 * dtype_row_bytes / tensor_nbytes, which treat the last dimension of a
 * shape as the row. Shapes are row-major ([out, in] for matrices).
 */
#ifndef KVLM_TENSOR_H
#define KVLM_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kvlm.h"

#define TENSOR_MAX_DIMS 4

typedef struct tensor {
    kvlm_dtype dtype;
    int ndim;
    int64_t shape[TENSOR_MAX_DIMS];
    const void *data;
} tensor;

/* Values per block of the quantised dtypes, and their block layouts (both
 * only 2-byte aligned: a row of blocks is packed without padding). */
#define QK 32
typedef struct blk_q8_0 {
    uint16_t d;      /* f16 scale */
    int8_t q[QK];    /* value i = d * q[i] */
} blk_q8_0;
typedef struct blk_q4_0 {
    uint16_t d;          /* f16 scale */
    uint8_t q[QK / 2];   /* value j = d * ((q[j] & 15) - 8), value j + 16 = d * ((q[j] >> 4) - 8) */
} blk_q4_0;
_Static_assert(sizeof(blk_q8_0) == 34, "Q8_0 block is 34 bytes");
_Static_assert(sizeof(blk_q4_0) == 18, "Q4_0 block is 18 bytes");

/* 1 for Q8_0 and Q4_0. */
static inline int dtype_is_blocked(kvlm_dtype t) { return t == KVLM_Q8_0 || t == KVLM_Q4_0; }
/* Bytes of one QK-block (blocked types) or one element (others). */
size_t dtype_block_bytes(kvlm_dtype t);
/* Values per storage unit: QK for blocked types, 1 for the others. */
static inline int dtype_block_len(kvlm_dtype t) { return dtype_is_blocked(t) ? QK : 1; }
/* Bytes of a row of n values. *ok is 0 (and 0 is returned) when n is
 * negative, not a multiple of the block length, or the size exceeds INT64_MAX;
 * otherwise 1. ok may be NULL. */
size_t dtype_row_bytes(kvlm_dtype t, int64_t n, int *ok);
/* Minimum alignment in bytes for reading the data in place (4 for f32, 2
 * for the rest: blocks start with an f16). */
static inline size_t dtype_align(kvlm_dtype t) { return t == KVLM_F32 ? 4 : 2; }

int64_t tensor_numel(const tensor *t);
/* Bytes the tensor's data spans; rows are the last dimension. Returns 0 when
 * the size is not representable (see tensor_nbytes_checked). */
size_t tensor_nbytes(const tensor *t);
/* Same, returning -1 on a negative dimension, overflow or a row length that
 * is not a whole number of blocks; 0 and *out otherwise. */
int tensor_nbytes_checked(const tensor *t, size_t *out);
/* "[768, 2304]" into buf; returns buf. */
char *tensor_shape_str(const tensor *t, char *buf, size_t cap);

static inline float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: renormalise */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) { man <<= 1; exp--; }
            bits = sign | (exp << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Round to nearest even, with overflow to infinity and NaN preserved. */
static inline uint16_t f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* overflow */
    if (ax < 0x38800000u) { /* subnormal or zero in f16 */
        if (ax < 0x33000000u) return (uint16_t)sign;
        uint32_t e = ax >> 23, m = (ax & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* value = m * 2^(e-150); unit = 2^-24 */
        uint32_t out = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (out & 1))) out++;
        return (uint16_t)(sign | out);
    }
    uint32_t out = ((ax >> 13) - ((127 - 15) << 10));
    uint32_t rem = ax & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (out & 1))) out++;
    return (uint16_t)(sign | out);
}

static inline float bf16_to_f32(uint16_t b) {
    uint32_t bits = (uint32_t)b << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

/* Element i of a row stored in dtype, widened to f32. For the blocked
 * types i may run across rows (rows are whole blocks, packed). Slow for
 * them (one block header per value): fine for embedding lookups and the
 * reference paths, not for matmuls. */
static inline float dtype_load(kvlm_dtype t, const void *p, size_t i) {
    switch (t) {
    case KVLM_F16: return f16_to_f32(((const uint16_t *)p)[i]);
    case KVLM_BF16: return bf16_to_f32(((const uint16_t *)p)[i]);
    case KVLM_Q8_0: {
        const blk_q8_0 *b = (const blk_q8_0 *)p + i / QK;
        return f16_to_f32(b->d) * (float)b->q[i % QK];
    }
    case KVLM_Q4_0: {
        const blk_q4_0 *b = (const blk_q4_0 *)p + i / QK;
        size_t j = i % QK;
        int nib = j < QK / 2 ? (b->q[j] & 15) : (b->q[j - QK / 2] >> 4);
        return f16_to_f32(b->d) * (float)(nib - 8);
    }
    default: return ((const float *)p)[i];
    }
}

/* Blocked types are written a row at a time by quant_quantize_row
 * (kernels/quant.h); storing one value into them does nothing. */
static inline void dtype_store(kvlm_dtype t, void *p, size_t i, float v) {
    switch (t) {
    case KVLM_Q8_0: case KVLM_Q4_0: break;
    case KVLM_F16: ((uint16_t *)p)[i] = f32_to_f16(v); break;
    case KVLM_BF16: ((uint16_t *)p)[i] = f32_to_bf16(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

/* Row `row` of a [rows, cols] matrix stored in dtype, widened to f32. */
static inline void dtype_row_f32(kvlm_dtype t, const void *base, int64_t row, int cols, float *out) {
    const size_t off = (size_t)row * (size_t)cols;
    for (int i = 0; i < cols; i++) out[i] = dtype_load(t, base, off + (size_t)i);
}

#endif
