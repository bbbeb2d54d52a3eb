/*
 * Tensor views: a dtype, a shape and a pointer into memory someone else owns
 * (usually a memory-mapped file). Also the scalar f16/bf16 <-> f32
 * conversions used by the reference paths. Knows nothing about models.
 *
 * Block-quantised dtypes (Q8_0 ... IQ4_XS) store each row as whole blocks
 * of 32 or 256 values, so they have no per-element size: byte counts come
 * from dtype_row_bytes / tensor_nbytes, which treat the last dimension of
 * a shape as the row. Shapes are row-major ([out, in] for matrices).
 * Dequantising blocks is kernels/quant.h's job (quant_dequantize_row);
 * dtype_load reads single values of the per-element types and of Q8_0 /
 * Q4_0 only.
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
    /* MXFP4: the smallest scale byte of every block, when the loader
     * scanned them (GGUF does); 0 when not known. Other dtypes: 0. */
    uint8_t e8m0_min;
} tensor;

/* Values per block of the 32-value quantised dtypes, and their block
 * layouts (all only 2-byte aligned: a row of blocks is packed without
 * padding; every f16 is little-endian). */
#define QK 32
typedef struct blk_q8_0 {
    uint16_t d;      /* f16 scale */
    int8_t q[QK];    /* value i = d * q[i] */
} blk_q8_0;
typedef struct blk_q4_0 {
    uint16_t d;          /* f16 scale */
    uint8_t q[QK / 2];   /* value j = d * ((q[j] & 15) - 8), value j + 16 = d * ((q[j] >> 4) - 8) */
} blk_q4_0;
typedef struct blk_q4_1 {
    uint16_t d, m;       /* f16 scale and offset */
    uint8_t q[QK / 2];   /* codes c as Q4_0 (0..15); value = d * c + m */
} blk_q4_1;
typedef struct blk_q5_0 {
    uint16_t d;
    uint8_t qh[4];       /* bit i of the little-endian u32 = bit 4 of code i */
    uint8_t q[QK / 2];   /* low 4 bits of codes j (low nibble), j + 16 (high) */
} blk_q5_0;              /* value = d * (code - 16) */
typedef struct blk_q5_1 {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t q[QK / 2];   /* codes as Q5_0; value = d * code + m */
} blk_q5_1;
typedef struct blk_iq4_nl {
    uint16_t d;
    uint8_t q[QK / 2];   /* 4-bit indices as Q4_0; value = d * iq4nl_levels[index] */
} blk_iq4_nl;
typedef struct blk_mxfp4 {
    uint8_t e;           /* E8M0 scale 2^(e - 127); 0xFF (NaN) is refused at load */
    uint8_t q[QK / 2];   /* 4-bit E2M1 codes as Q4_0; value = 2^(e - 128) * mxfp4_levels[code] */
} blk_mxfp4;             /* 17 bytes: rows of it are only byte-aligned */

/* The 256-value super-blocks. Value i of a super-block belongs to
 * sub-block i / 16 (Q2_K, Q3_K, Q6_K) or i / 32 (Q4_K, Q5_K), whose scale
 * a and offset b are small integers times the f16 super-block scales;
 * value = a * code - b (Q2_K, Q4_K, Q5_K) or a * code. Code bits of value
 * i = 128h + 32j + l (h < 2, j < 4, l < 32) for the 2-bit layouts: bits 2j,
 * 2j + 1 of qs[32h + l]. */
#define QK_K 256
typedef struct blk_q2_k {
    uint8_t scales[16];  /* sub-block s: a = d * (scales[s] & 15), b = dmin * (scales[s] >> 4) */
    uint8_t qs[64];      /* 2-bit codes, layout above */
    uint16_t d, dmin;
} blk_q2_k;
typedef struct blk_q3_k {
    uint8_t hmask[32];   /* bit 4h + j of hmask[l]: 1 = code as is, 0 = code - 4 */
    uint8_t qs[64];      /* low 2 bits, layout above */
    uint8_t scales[12];  /* 16 6-bit scales: low 4 bits from nibbles of bytes 0..7 (s < 8: low
                          * nibble of byte s; else high nibble of byte s - 8), high 2 bits
                          * from bits 2(s / 4) of byte 8 + s % 4; a = d * (scale - 32) */
    uint16_t d;
} blk_q3_k;
typedef struct blk_q4_k {
    uint16_t d, dmin;
    uint8_t scales[12];  /* 8 6-bit scales sc and mins m: s < 4: sc = byte s & 63, m = byte s+4
                          * & 63; s >= 4: sc = (byte s+4 & 15) | (byte s-4 >> 6) << 4,
                          * m = (byte s+4 >> 4) | (byte s >> 6) << 4; a = d sc, b = dmin m */
    uint8_t qs[128];     /* value 64p + l: low nibble of qs[32p + l]; 64p + 32 + l: high nibble */
} blk_q4_k;
typedef struct blk_q5_k {
    uint16_t d, dmin;
    uint8_t scales[12];  /* as Q4_K */
    uint8_t qh[32];      /* bit 4 of the code of value 32s + l: bit s of qh[l] */
    uint8_t qs[128];     /* low 4 bits as Q4_K */
} blk_q5_k;
typedef struct blk_q6_k {
    uint8_t ql[128];     /* value 128h + 32c + l: low 4 bits from ql[64h + 32(c & 1) + l], low
                          * nibble for c < 2, high for c >= 2 */
    uint8_t qh[64];      /* its high 2 bits: bits 2c, 2c + 1 of qh[32h + l] */
    int8_t scales[16];   /* a = d * scales[s]; value = a * (code - 32) */
    uint16_t d;
} blk_q6_k;
typedef struct blk_iq4_xs {
    uint16_t d;
    uint16_t scales_h;   /* bits 2s, 2s + 1: the high 2 bits of sub-block s's scale */
    uint8_t scales_l[4]; /* its low 4 bits: nibble s & 1 of byte s / 2; a = d * (scale - 32) */
    uint8_t qs[128];     /* value 32s + l: IQ4_NL index in the low nibble of qs[16s + l] (l < 16),
                          * the high nibble of qs[16s + l - 16] (l >= 16); value = a * iq4nl_levels[index] */
} blk_iq4_xs;
_Static_assert(sizeof(blk_q8_0) == 34, "Q8_0 block is 34 bytes");
_Static_assert(sizeof(blk_q4_0) == 18, "Q4_0 block is 18 bytes");
_Static_assert(sizeof(blk_q4_1) == 20, "Q4_1 block is 20 bytes");
_Static_assert(sizeof(blk_q5_0) == 22, "Q5_0 block is 22 bytes");
_Static_assert(sizeof(blk_q5_1) == 24, "Q5_1 block is 24 bytes");
_Static_assert(sizeof(blk_iq4_nl) == 18, "IQ4_NL block is 18 bytes");
_Static_assert(sizeof(blk_q2_k) == 84, "Q2_K block is 84 bytes");
_Static_assert(sizeof(blk_q3_k) == 110, "Q3_K block is 110 bytes");
_Static_assert(sizeof(blk_q4_k) == 144, "Q4_K block is 144 bytes");
_Static_assert(sizeof(blk_q5_k) == 176, "Q5_K block is 176 bytes");
_Static_assert(sizeof(blk_q6_k) == 210, "Q6_K block is 210 bytes");
_Static_assert(sizeof(blk_mxfp4) == 17, "MXFP4 block is 17 bytes");
_Static_assert(sizeof(blk_iq4_xs) == 136, "IQ4_XS block is 136 bytes");

/* IQ4_NL's 16 levels (a non-uniform 4-bit grid; IQ4_XS uses them too). */
extern const int8_t iq4nl_levels[16];
/* MXFP4's 16 E2M1 values, doubled (so they are integers: 0, 1, 2, 3, 4, 6,
 * 8, 12 and their negatives; code 8 is -0, stored as 0). */
extern const int8_t mxfp4_levels[16];

/* 2^(e - 128), half of an E8M0 scale, as llama.cpp forms it (e < 2 gives
 * the subnormals 2^-128, 2^-127). e = 0xFF gives 2^127 (E8M0 NaN; files
 * with it are refused at load). */
static inline float e8m0_half_to_f32(uint8_t e) {
    const uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* 1 for every block-quantised dtype (Q8_0 and up). */
static inline int dtype_is_blocked(kvlm_dtype t) { return t >= KVLM_Q8_0 && t <= KVLM_IQ4_XS; }
/* 1 for the dtypes the library knows (the kvlm_dtype values). */
static inline int dtype_is_valid(kvlm_dtype t) { return t >= KVLM_F32 && t <= KVLM_IQ4_XS; }
/* Bytes of one block (blocked types) or one element (others); 0 for a
 * value that is no dtype. */
size_t dtype_block_bytes(kvlm_dtype t);
/* Values per storage unit: QK_K (256) for the K-quants and IQ4_XS, QK (32)
 * for the other blocked types, 1 for the others. */
static inline int dtype_block_len(kvlm_dtype t) {
    return (t >= KVLM_Q2_K && t <= KVLM_Q6_K) || t == KVLM_IQ4_XS ? QK_K : dtype_is_blocked(t) ? QK : 1;
}
/* Bytes of a row of n values. *ok is 0 (and 0 is returned) when n is
 * negative, not a multiple of the block length, or the size exceeds INT64_MAX;
 * otherwise 1. ok may be NULL. */
size_t dtype_row_bytes(kvlm_dtype t, int64_t n, int *ok);
/* Minimum alignment in bytes for reading the data in place (4 for f32, 1
 * for MXFP4, whose 17-byte blocks hold no wider field, 2 for the rest:
 * their block sizes are even and the kernels read block fields with
 * memcpy or unaligned loads). */
static inline size_t dtype_align(kvlm_dtype t) { return t == KVLM_F32 ? 4 : t == KVLM_MXFP4 ? 1 : 2; }

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

/* Element i of a row stored in dtype, widened to f32. For Q8_0 / Q4_0, i
 * may run across rows (rows are whole blocks, packed); slow for them (one
 * block header per value): fine for tests and reference paths, not for
 * matmuls. The other blocked types return 0: read them a row at a time
 * with quant_dequantize_row. */
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
    case KVLM_F32: return ((const float *)p)[i];
    default: return 0.0f;
    }
}

/* Blocked types are written a row at a time by quant_quantize_row
 * (kernels/quant.h); storing one value into them does nothing. */
static inline void dtype_store(kvlm_dtype t, void *p, size_t i, float v) {
    if (dtype_is_blocked(t)) return;
    switch (t) {
    case KVLM_F16: ((uint16_t *)p)[i] = f32_to_f16(v); break;
    case KVLM_BF16: ((uint16_t *)p)[i] = f32_to_bf16(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

/* Row `row` of a [rows, cols] matrix stored in a per-element dtype (or
 * Q8_0 / Q4_0), widened to f32. */
static inline void dtype_row_f32(kvlm_dtype t, const void *base, int64_t row, int cols, float *out) {
    const size_t off = (size_t)row * (size_t)cols;
    for (int i = 0; i < cols; i++) out[i] = dtype_load(t, base, off + (size_t)i);
}

#endif
