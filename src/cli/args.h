/*
 * Turning argument strings into values, for the option layer (options.h)
 * and the subcommands: strict number parsing (the whole string, within a
 * range, with a message naming the flag), token-id lists, the text of a
 * file argument, and the JSON printer of the measurement commands.
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
/* Parses ids separated by spaces or commas; *ids is malloc'ed. A bad
 * element is named in the message ("'-1' is not a token id"). */
int arg_ids(const char *flag, const char *s, int32_t **ids, size_t *n);
/* The whole file at path ('-': standard input), NUL-terminated, malloc'ed;
 * NULL after "kvlm: FLAG: cannot read PATH: reason" on stderr. */
char *arg_read_file(const char *flag, const char *path, size_t *len);

/* Prints a measurement document as indented JSON (6 significant digits). */
void cli_print_json(const json_t *doc);

#endif
