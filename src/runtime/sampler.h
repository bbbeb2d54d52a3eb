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

/* Speculative verification (runtime/speculative.c) needs the chain's
 * whole distribution and the sampler's own generator: */
/* p[0..vocab) = what kvlm_sampler_next would draw from for these logits
 * (a point mass on the argmax when greedy); returns 1 when greedy. */
int smp_probs(kvlm_sampler *s, const float *logits, float *p);
/* The next uniform in [0, 1) of the sampler's seeded generator. */
double smp_uniform(kvlm_sampler *s);
/* Draws an id with probability w[id] / sum(w) (w >= 0, vocab entries) from
 * the sampler's generator; -1 when w sums to 0. */
int32_t smp_draw(kvlm_sampler *s, const float *w);
/* The vocabulary size the sampler was made for. */
int smp_vocab(const kvlm_sampler *s);

#endif
