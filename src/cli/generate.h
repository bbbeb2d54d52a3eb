/*
 * How the CLI generates: one request on a scheduler of its own (a
 * one-request kvlm_sched over the caller's engine and KV cache: submit,
 * step until done). Sampling, penalties, log-probabilities, eos ids, stop
 * strings, max tokens and the text itself are the scheduler's, exactly as
 * for kvlm serve, so the CLI prints what the server returns for the same
 * request. This file only collects what the scheduler's events report:
 * ids, log-probabilities, text (also written to a stream as it arrives),
 * the finish reason, timings and the KV cache at the last token. A caller
 * may take the text itself as it arrives (on_text, with each token's
 * probability) and may stop a generation from outside (interrupt: a flag a
 * signal handler sets; the request is cancelled before the next step).
 *
 * Timings come from the step loop and the token events: prefill is the
 * steps up to the one that drew the first token (the prompt fits one step:
 * the budget is the whole context); time to first token runs from the
 * submission to that token's event; every later step is a decode step.
 */
#ifndef KVLM_CLI_GENERATE_H
#define KVLM_CLI_GENERATE_H

#include <stddef.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "cli/draft.h"
#include "kvlm.h"

typedef struct gen_request {
    const int32_t *prompt;
    int n_prompt;
    int max_new;                    /* tokens to generate; 0: compute the prompt only */
    const int32_t *eos_ids;         /* ids that end the generation (kvlm_eos_ids) */
    int n_eos;
    kvlm_sampler_options sampling;
    int logprobs;                   /* top-K log-probabilities per token; -1: the chosen
                                       token's only (chosen_lp); 0: none */
    int text;                       /* 1: collect text (from tok; NULL: ids) */
    const kvlm_tokenizer *tok;
    const char *const *stops;
    int n_stops;
    int recompute;                  /* no KV kept between steps (kvlm_sched_options) */
    FILE *stream;                   /* text written as it arrives; NULL: none */
    const kvlm_grammar *grammar;    /* constrained decoding; NULL: none */
    /* Text as it arrives, instead of `stream`: the bytes a token releases
     * with its log-probability (NaN unless logprobs != 0, and for the text
     * the generation ends with). NULL: none. */
    void (*on_text)(void *user, const char *text, size_t n, float logprob);
    void *user;
    /* A special token releases no text of its own; when this returns 1 for
     * its piece (the tokenizer's spelling), the piece is its text (in the
     * result and on_text), so a parser of the output sees the markers it
     * reads (harmony's <|channel|>, ...). NULL: never. */
    int (*special_text)(const char *piece, size_t n);
    /* Non-zero (set asynchronously) cancels the request before the next
     * step; the result then finishes KVLM_FINISH_CANCELLED with what was
     * generated so far. NULL: never. */
    const volatile sig_atomic_t *interrupt;
    /* Speculative decoding (mode NONE: off); a draft model's request needs
     * `draft` with one open (cli/draft.h). */
    kvlm_speculation speculation;
    const cli_draft *draft;
} gen_request;

typedef struct gen_result {
    int32_t *ids;                   /* generated ids, an ending eos id included */
    int n_ids;
    int32_t *lp_ids;                /* n_ids x logprobs */
    float *lp_vals;                 /* n_ids x logprobs */
    float *chosen_lp;               /* log-probability of each generated id */
    char *text;                     /* NUL-terminated, raw bytes (with text) */
    size_t text_len;
    kvlm_finish finish;
    double prefill_s, ttft_s;       /* see the file comment */
    double decode_s;                /* the decode steps, forward and sampling */
    int decode_steps;
    kvlm_kv_stats kv;               /* the KV cache when the last token was drawn */
    int cached;                     /* prompt tokens served from the prefix cache */
    int drafted, accepted;          /* speculative decoding: tokens drafted and kept */
} gen_result;

/* Returns 0 or a kvlm_status with err set. The KV cache must have no live
 * sequence the request would compete with. */
int gen_run(kvlm_engine *e, kvlm_kv *kv, int vocab, const gen_request *rq, gen_result *out, kvlm_error *err);
void gen_result_free(gen_result *r);
/* The finish reason as the JSON outputs name it: stop, length, timeout, cancelled, error. */
const char *gen_finish_name(kvlm_finish f);

#endif
