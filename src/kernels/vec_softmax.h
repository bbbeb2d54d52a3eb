/*
 * Vector kernels for the sampler: max, scaled division, exp-and-sum and a
 * threshold filter over a row of logits (50k-150k floats per token).
 *
 * Invariant: every ISA variant gives bit-identical results. The exponential
 * (vec_expf) uses only IEEE multiply, add, subtract and exact conversions,
 * in one fixed order, never a fused multiply-add (the vec_* files are built
 * with -ffp-contract=off), and the sum of an exp row is defined lane-wise:
 * 16 double accumulators (lane j takes elements i = j mod 16 of the whole
 * 16-element blocks, in order), folded 8+8, 4+4, 2+2, 1+1, then the tail
 * added in order. So a seeded sampler draws the same tokens on every ISA
 * and machine. These kernels know nothing about tokens or sampling options.
 */
#ifndef KVLM_VEC_SOFTMAX_H
#define KVLM_VEC_SOFTMAX_H

#include <stddef.h>
#include <stdint.h>

#include "kvlm.h"

/* The exponential's constants, shared by every variant (see vec_expf). */
#define VEC_EXP_LO -86.5f        /* below: 0 (keeps every result normal) */
#define VEC_EXP_HI 88.0f
#define VEC_EXP_LOG2E 1.44269504088896341f
#define VEC_EXP_MAGIC 12582912.0f /* 1.5 x 2^23: adding it rounds to an integer */
#define VEC_EXP_LN2_HI 0.693359375f
#define VEC_EXP_LN2_LO -2.12194440e-4f
#define VEC_EXP_C0 1.9875691500e-4f
#define VEC_EXP_C1 1.3981999507e-3f
#define VEC_EXP_C2 8.3334519073e-3f
#define VEC_EXP_C3 4.1665795894e-2f
#define VEC_EXP_C4 1.6666665459e-1f
#define VEC_EXP_C5 5.0000001201e-1f

/* exp(x) within 2 ulp for x in [-86.5, 88]; 0 below -86.5 (and for NaN),
 * exp(88) above. The reference every ISA variant reproduces bit for bit. */
float vec_expf(float x);

typedef struct vec_softmax_ops {
    kvlm_isa isa;
    /* Largest of x[0..n), NaNs ignored; -INFINITY when n == 0 or all NaN. */
    float (*max)(const float *x, size_t n);
    /* x[i] /= d for i < n. */
    void (*div)(float *x, size_t n, float d);
    /* y[i] = vec_expf(x[i] - shift) for i < n; returns their sum (see above). */
    double (*exp_sum)(const float *x, float *y, size_t n, float shift);
    /* Writes the indices i < n with p[i] >= cut to out, ascending; returns
     * how many. */
    size_t (*keep_ge)(const float *p, size_t n, float cut, int32_t *out);
} vec_softmax_ops;

extern const vec_softmax_ops vec_softmax_scalar;
extern const vec_softmax_ops vec_softmax_avx2;
extern const vec_softmax_ops vec_softmax_avx512;
extern const vec_softmax_ops vec_softmax_neon;

/* The ops for isa (AUTO: the best the CPU has); NULL if the CPU lacks it. */
const vec_softmax_ops *vec_softmax_select(kvlm_isa isa);
/* The ops of a resolved isa the caller knows the CPU has (a kern_ops'
 * isa), without asking the CPU again: for per-call use on hot paths. */
const vec_softmax_ops *vec_softmax_of(kvlm_isa isa);

#endif
