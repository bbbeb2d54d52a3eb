/*
 * Command-line helpers shared by the subcommands: strict number parsing
 * (the whole string, within a range, with a message naming the flag),
 * token-id lists, and loading a model from -m or --synthetic.
 */
#ifndef KVLM_CLI_ARGS_H
#define KVLM_CLI_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "kvlm.h"

#define EXIT_USAGE 2

/* Each returns 0, or prints "kvlm: FLAG: ..." to stderr and returns -1. */
int arg_int(const char *flag, const char *s, long lo, long hi, int *out);
int arg_u64(const char *flag, const char *s, uint64_t *out);
int arg_float(const char *flag, const char *s, double lo, double hi, float *out);
/* Parses a comma-separated list of at most max numbers, each in [lo, hi]. */
int arg_floats(const char *flag, const char *s, double lo, double hi, float *out, int max, int *n);
/* Parses ids separated by spaces or commas; *ids is malloc'ed. */
int arg_ids(const char *flag, const char *s, int32_t **ids, size_t *n);
/* Returns the value after argv[*i] (advancing *i) or NULL with a message. */
const char *arg_value(int argc, char **argv, int *i);

/* Prints a measurement document as indented JSON (6 significant digits). */
void cli_print_json(const json_t *doc);

/* Loads -m PATH, or a synthetic preset when path is NULL (exactly one is
 * set); prints errors. */
kvlm_model *cli_load_model(const char *path, const char *synthetic, kvlm_dtype synth_dtype);

#endif
