/*
 * What the files of `kvlm bench-kv` share: the prefix-cache benchmark
 * (bench_kv_prefix.c) called by the command (bench_kv_cmd.c), and two small
 * helpers both use (the seeded generator of prompt ids, the median).
 */
#ifndef KVLM_CLI_BENCH_KV_H
#define KVLM_CLI_BENCH_KV_H

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>

#include "cli/session.h"
#include "kvlm.h"

typedef struct bkv_prefix_params {
    int requests;        /* K >= 2 */
    int prefix_tokens;   /* shared system prompt, cut to fit the context window */
    int suffix_tokens;   /* distinct per request; 0: min(16, n_ctx / 16), at least 1 */
    int output_tokens;   /* generated per request */
    int batch_tokens;    /* scheduler's per-step token budget (prefill chunk) */
    int progress;        /* 1: progress lines on stderr */
    uint64_t seed;
} bkv_prefix_params;

typedef struct bkv_prefix_result {
    int requests, prefix_tokens, suffix_tokens, output_tokens;
    double ttft_cold_s;  /* median over the K requests, prefix cache off */
    double ttft_first_s; /* the first request, prefix cache on (a miss) */
    double ttft_hit_s;   /* median over the K - 1 later requests, prefix cache on */
    uint64_t queries, query_tokens, hits, hit_tokens; /* the cached rig's KV counters */
} bkv_prefix_result;

/* Fills the request shape of r from p and the model. Returns 0, or 2 after
 * printing which flag leaves no room for a system prompt. */
int bkv_prefix_shape(const bkv_prefix_params *p, const kvlm_config *c, bkv_prefix_result *r);
/* Runs the benchmark on r's shape (from bkv_prefix_shape). Returns 0 or 1
 * after printing the error. */
int bkv_prefix_run(kvlm_model *m, const model_flags *mf, const bkv_prefix_params *p, bkv_prefix_result *r);
json_t *bkv_prefix_json(const bkv_prefix_result *r);
void bkv_prefix_print(const bkv_prefix_result *r);

static inline uint64_t bkv_splitmix(uint64_t *s) {
    uint64_t x = (*s += 0x9e3779b97f4a7c15ull);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static inline int bkv_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v in place. */
static inline double bkv_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bkv_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static inline double bkv_div(double a, double b) { return b > 0 ? a / b : 0; }

#endif
