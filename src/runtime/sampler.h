/*
 * Sampler internals: a seeded generator (xoshiro256**) and the processing of
 * one logits row into a token: temperature, top-k, top-p, then a draw.
 * The row passes run with vector kernels chosen by cpuid.
 */
#ifndef KVLM_SAMPLER_H
#define KVLM_SAMPLER_H

#include "kvlm.h"

typedef struct smp_rng {
    uint64_t s[4];
} smp_rng;

void smp_rng_seed(smp_rng *r, uint64_t seed);
/* Uniform in [0, 1). */
double smp_rng_uniform(smp_rng *r);

/* Runs the sampler's row passes with isa's kernels (tests compare them; the
 * tokens are the same on every ISA). Returns 0, or -1 if the CPU lacks isa. */
int smp_use_isa(kvlm_sampler *s, kvlm_isa isa);

#endif
