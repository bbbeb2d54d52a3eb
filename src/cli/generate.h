/*
 * One generation on one sequence: prefill the prompt in a single batched
 * step, then decode one token per step until n tokens or end-of-sequence.
 * Times both phases separately (the figures `run --stats` and `bench`
 * report) and optionally records the top-K log-probabilities per position.
 * The sampler's penalty history receives the prompt and every token drawn.
 */
#ifndef KVLM_CLI_GENERATE_H
#define KVLM_CLI_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "kvlm.h"

typedef struct gen_request {
    const int32_t *prompt;
    int n_prompt;
    int max_new;        /* tokens to generate */
    int stop_at_eos;    /* stop after sampling the model's eos id */
    int logprobs_k;     /* 0: none */
    /* Called after each sampled token; may be NULL. Returning non-zero
     * ends the generation (a stop string completed). */
    int (*on_token)(int32_t id, void *ctx);
    void *ctx;
} gen_request;

typedef struct gen_result {
    int32_t *ids;           /* generated ids (malloc'ed) */
    int n_ids;
    int32_t *lp_ids;        /* n_ids x logprobs_k */
    float *lp_vals;         /* n_ids x logprobs_k */
    float *chosen_lp;       /* logprob of each generated id */
    double prefill_s;       /* the prompt's forward step */
    double ttft_s;          /* prefill + first sample */
    double decode_s;        /* all decode steps (forward + sample) */
    int decode_steps;
    int stopped_eos;        /* the end-of-sequence token was sampled */
    int stopped_callback;   /* on_token asked to stop */
} gen_result;

/* Returns 0 or a kvlm_status with err set. seq must be empty. */
int gen_run(kvlm_engine *e, int seq, kvlm_sampler *smp, int vocab, int eos_id,
            const gen_request *rq, gen_result *out, kvlm_error *err);
void gen_result_free(gen_result *r);

#endif
