/*
 * Tensor views: a dtype, a shape and a pointer into memory someone else owns
 * (usually a memory-mapped file). Also the scalar f16/bf16 <-> f32
 * conversions used by the reference paths. Knows nothing about models.
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

int64_t tensor_numel(const tensor *t);
size_t tensor_nbytes(const tensor *t);
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

/* Element i of a row stored in dtype, widened to f32. */
static inline float dtype_load(kvlm_dtype t, const void *p, size_t i) {
    switch (t) {
    case KVLM_F16: return f16_to_f32(((const uint16_t *)p)[i]);
    case KVLM_BF16: return bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

static inline void dtype_store(kvlm_dtype t, void *p, size_t i, float v) {
    switch (t) {
    case KVLM_F16: ((uint16_t *)p)[i] = f32_to_f16(v); break;
    case KVLM_BF16: ((uint16_t *)p)[i] = f32_to_bf16(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

#endif
