/*
 * Shared helpers for kvlm's cmocka tests: fixture paths relative to the
 * repository root, whole-file reads, and running the kvlm CLI as a child
 * process to check exit status and output.
 */
#ifndef KVLM_TEST_HELPERS_H
#define KVLM_TEST_HELPERS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "kvlm.h"

/* Reads a whole file; returns malloc'ed bytes (NUL-terminated) or NULL. */
char *th_read_file(const char *path, size_t *len);
/* Writes bytes to path; returns 0 on success. */
int th_write_file(const char *path, const void *data, size_t len);
/* A fresh scratch directory under $TMPDIR, removed by th_rmtree. */
char *th_tempdir(void);
void th_rmtree(const char *dir);
/* Runs `$KVLM args` through /bin/sh, capturing stdout+stderr into *out
 * (malloc'ed). Returns the exit status (or -1). */
int th_run_kvlm(char **out, const char *fmt, ...);

/* One kvlm command line that must fail: its exit status and a piece of
 * what it prints. */
typedef struct th_cli_case {
    const char *args;
    int status;
    const char *needle;
} th_cli_case;
/* Runs each case through th_run_kvlm; fails the test on the first whose
 * status differs or whose output lacks the needle. */
void th_expect_cli(const th_cli_case *cases, size_t n);
/* Path of the kvlm binary under test ($KVLM, default build/kvlm). */
const char *th_kvlm(void);

/* A reference-logits fixture (the .expected.json files of tests/fixtures):
 * 8 prompt ids, 8 decode ids, prefill and decode logits (8 x vocab each). */
#define TH_NPOS 8
typedef struct th_expected {
    int32_t prompt[TH_NPOS], decode[TH_NPOS];
    int vocab;
    float *prefill, *dec;
} th_expected;

/* Chi-square critical value at p = 0.001 for dof degrees of freedom
 * (Wilson-Hilferty approximation). */
double th_chi2_critical(int dof);

/* Loads path into ex; returns 0 or -1. th_expected_free releases it. */
int th_expected_load(const char *path, th_expected *ex);
void th_expected_free(th_expected *ex);

struct kvlm_model;
/* Prefill (all positions' logits) then 8 decode steps on a fresh cache with
 * the given kernels and KV dtype, cached or (no_cache) each recomputing the
 * whole context (th_recompute_step); returns the largest absolute logit
 * difference from the fixture. */
double th_parity_run(struct kvlm_model *m, const th_expected *ex, int isa, int kv_dtype, int no_cache);

/* Generation without a KV cache, one step of it: truncates seq to 0 tokens
 * and runs context[0..n) again in one engine step; logits receives the last
 * position's. What the scheduler's `recompute` option does per step. */
int th_recompute_step(kvlm_engine *e, kvlm_kv *kv, int seq, const int32_t *context, int n, float *logits,
                      kvlm_error *err);

/* The best kernel set with f32 activations this CPU has (auto may pick an
 * int8 level): avx512, avx2, neon or scalar. */
kvlm_isa th_best_f32_isa(void);

#endif
