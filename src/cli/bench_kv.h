/*
 * What the files of `kvlm bench-kv` share: the serving runs under one KV
 * policy or another (bench_kv_serve.c) and the prefix-cache benchmark
 * (bench_kv_prefix.c), called by the command (bench_kv_cmd.c), and two
 * small helpers they use (the seeded generator of prompt ids, the median).
 */
#ifndef KVLM_CLI_BENCH_KV_H
#define KVLM_CLI_BENCH_KV_H

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>

#include "cli/session.h"
#include "kvlm.h"

/* The drawn requests of the serve and windows sections. */
typedef struct bkv_lengths {
    double mean;
    int p50, p99, min, max;
} bkv_lengths;

typedef struct bkv_workload {
    int n, n_ctx;
    int *prompt_len, *output_len;
    int32_t **prompts;
    double prompt_median, output_median, prompt_sigma, output_sigma;
    bkv_lengths ps, os;
} bkv_workload;

/* How a serving run's cache keeps its blocks: contiguous max-length
 * reservation, paged (window layers give back what their window left), or
 * paged keeping every layer whole (kvlm_kv_options.keep_whole). */
typedef enum bkv_policy { BKV_CONTIGUOUS, BKV_PAGED, BKV_PAGED_WHOLE } bkv_policy;

typedef struct bkv_serve_result {
    double util_mean, util_peak, util_aggregate;  /* fractions */
    double resident_mean, tokens_per_s, total_s;
    double cpu_s, tokens_per_cpu_s;  /* process CPU time: robust to other load on the machine */
    int resident_peak;
    uint64_t generated, steps, preemptions, prefix_hit_tokens;
    size_t peak_bytes_live, peak_bytes_reserved;
} bkv_serve_result;

typedef struct bkv_serve_ctx {
    kvlm_model *m;
    const kvlm_config *c;
    const model_flags *mf;
    size_t kv_blocks;                 /* the budget, in blocks of the cache */
    int max_seqs, prefix_cache, batch_tokens, repeats, progress;
    int failed;                       /* requests that ended in an error (set by the run) */
} bkv_serve_ctx;

/* Serves every request of w under policy[0] and policy[1], alternating
 * over ctx->repeats (A B, B A, ...; the schedule is deterministic, so only
 * the timings differ between repeats and their medians are kept) after a
 * warm-up of two requests. Returns 0, or -1 after printing the error. */
int bkv_serve_pair(bkv_serve_ctx *ctx, const bkv_workload *w, const bkv_policy policy[2], bkv_serve_result res[2]);

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
