/*
 * The measurements behind `kvlm sample-stats`, `gen-stats`, `bench` and
 * `kv`, each as a function that runs it and returns the command's JSON
 * document (exactly what the command prints with --json). The commands
 * print either that document or a human table made from it; `kvlm report`
 * runs them all and keeps the documents, so every number in a report is
 * the number the single command would print.
 *
 * Each returns a new reference (the caller owns it) or NULL after printing
 * the reason on stderr.
 */
#ifndef KVLM_CLI_MEASURE_H
#define KVLM_CLI_MEASURE_H

#include <jansson.h>
#include <stdint.h>

#include "cli/session.h"
#include "app/kv_sizing.h"
#include "kvlm.h"

/* ------------------------------------------------------- sample-stats */

typedef struct sample_stats_params {
    const float *temps;  /* temperatures, each > 0 */
    int n_temps;
    int top_k;           /* the filters: 0, 1 and 0 leave the distribution as is */
    float top_p, min_p;
    int top_n;           /* most likely tokens listed at temperature 1 (<= 100) */
} sample_stats_params;

/* Next-token distribution statistics after the session's prompt. */
json_t *measure_sample_stats(const cli_session *ss, const model_flags *mf, const sample_stats_params *p);

/* ---------------------------------------------------------- gen-stats */

typedef struct gen_stats_params {
    int n;               /* tokens per setting (cut to the context window) */
    uint64_t seed;
    int stop_at_eos;
} gen_stats_params;

/* Generates under each decoding setting; "gen-stats: SETTING done" on
 * stderr after each one. */
json_t *measure_gen_stats(const cli_session *ss, const model_flags *mf, const gen_stats_params *p);

/* -------------------------------------------------------------- bench */

typedef struct bench_params {
    int pp, tg, repeats;   /* pp + tg must fit the context window */
    int threads;           /* 0: kvlm_default_threads */
    kvlm_isa isa;
    kvlm_dtype kv_dtype;
    int block_size;        /* KV block size; 0: 16 */
    int skip_cache;        /* no cache on/off comparison */
    int bw_mib;            /* buffer for the bandwidth measurement */
    int progress;          /* "measuring read bandwidth..." on stderr */
    int depth;             /* > 0: the decode test runs after a context of depth
                              tokens, computed once and found again by the prefix
                              cache (llama-bench's -d); 0: after the pp prompt.
                              depth + tg must fit the context window; no cache test */
} bench_params;

#define BENCH_MAX_REPEATS 1000

/* The one-sequence KV cache (no prefix cache, so every repeat computes its
 * prompt) and the engine options every bench measurement runs with. */
void bench_setup_options(const bench_params *p, kvlm_kv_options *ko, kvlm_engine_options *eo);

/* Prefill and decode throughput, the decode roofline, cache on vs off. */
json_t *measure_bench(kvlm_model *m, const bench_params *p);

/* Speculative decoding (d: kvlm bench's --draft or --draft-ngram) against
 * plain decoding of tg new tokens after prompt, at temperatures 0 and 0.8,
 * alternated over the repeats (cli/bench_spec.c). */
typedef struct cli_draft cli_draft;
json_t *measure_spec(kvlm_model *m, const bench_params *p, const cli_draft *d, const int32_t *prompt, int n_prompt);

/* Batched decode (kvlm bench --batch B): tg decode steps of B sequences
 * against steps of one, after pp-token prompts, alternated over the
 * repeats (cli/bench_batch.c). */
json_t *measure_batch(kvlm_model *m, const bench_params *p, int B);

/* Fits pp + tg into a context window of n_ctx tokens: the sizes not given
 * on the command line (pp_set, tg_set 0) shrink, in proportion when both
 * do; given ones are kept. Returns 0, or -1 after "kvlm CMD: ..." naming
 * the flags when they cannot fit (tg needs at least 2). */
int bench_fit_timing(const char *cmd, bench_params *p, int pp_set, int tg_set, int n_ctx);

/* ----------------------------------------------------------------- kv */

#define KV_MAX_CTX 16

/* Which models: a path (-m; only its configuration is read), a loaded
 * configuration shown under label, one preset, or (none of the three)
 * every preset. Capacity planning when have_memory is set; the other
 * plan fields at 0 take their defaults. */
typedef struct kv_request {
    const char *model;
    const kvlm_config *config;
    const char *label;
    const char *preset;
    kvlm_dtype kv_dtype, weight_dtype;
    uint64_t ctx[KV_MAX_CTX];
    int n_ctx;
    int have_memory, have_weights, have_weight_dtype;
    uint64_t memory, weights, ctx_len, mean_len, block_size;
} kv_request;

/* kv_request with the command's defaults: f16, contexts 4,096 and 131,072. */
kv_request kv_request_default(void);

/* KV bytes per token and per context (and the plan); on NULL, *status is
 * the exit status (1 model not readable, 2 impossible figures or plan). */
json_t *measure_kv(const kv_request *rq, int *status);

#endif
