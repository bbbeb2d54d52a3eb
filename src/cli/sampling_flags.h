/*
 * The sampling flags every generating command accepts (--temp, --top-k,
 * --top-p, --min-p, penalties, --logit-bias, --sampler-order, --seed,
 * --stop), parsed into kvlm_sampler_options plus stop strings.
 */
#ifndef KVLM_CLI_SAMPLING_FLAGS_H
#define KVLM_CLI_SAMPLING_FLAGS_H

#include "kvlm.h"

#define MAX_STOPS 16
#define MAX_BIAS 1024

typedef struct sampling_flags {
    kvlm_sampler_options o;
    const char *stops[MAX_STOPS];
    int n_stops;
    kvlm_logit_bias bias[MAX_BIAS];
} sampling_flags;

/* Defaults of the CLI: temperature 0.7, top-p 0.9, seed 1 (see docs/sampling.md). */
void sampling_flags_init(sampling_flags *f);
/* If argv[*i] is a sampling flag, consumes it (and its value) and returns
 * 1; returns 0 if it is not one, -1 after printing an error. */
int sampling_flags_parse(sampling_flags *f, int argc, char **argv, int *i);
extern const char *sampling_flags_help;

#endif
