/*
 * The token decision of one choice (decide.c): the one place a token is
 * chosen, whether drawn after a plain decode step or verified as a draft
 * of speculative decoding. The scheduler feeds it a logits row and ends
 * the choice when it says so; it never frees, truncates or plans.
 */
#ifndef KVLM_RUNTIME_DECIDE_H
#define KVLM_RUNTIME_DECIDE_H

#include <stdint.h>

#include "kvlm.h"
#include "runtime/sched_choice.h"

/* What a decision needs of its scheduler: sizes, flags and scratch rows
 * (one decision at a time, on the thread that steps the scheduler). */
typedef struct dec_ctx {
    int vocab, n_ctx;
    int recompute;         /* the scheduler's recompute policy: a drawn token makes the choice stale */
    float *masked;         /* one masked logits row (NULL until the first grammar request) */
    uint64_t *mask_bits;   /* (vocab + 63) / 64 words, with masked */
    float *p;              /* verification: one distribution (NULL until the first speculating request) */
    int32_t *top_ids;      /* top log-probabilities: 100 entries each */
    float *top_lps;
    kvlm_sched_stats *st;  /* generated and accepted tokens are counted here */
} dec_ctx;

/* Decides choice c's next token from `row`, the logits of its next
 * position:
 *   1. with a grammar, masks the row at the matcher's state (which holds
 *      every token emitted so far, kept drafts included) and at the
 *      tokens left (only tokens after which the output can still close
 *      in them, one token per byte); nothing allowed
 *      ends the choice: STOP when the output is complete, else ERROR;
 *   2. draft < 0: draws the token from the (masked) row with the choice's
 *      sampler; draft >= 0: verifies it against that row (q: the
 *      distribution it was drawn from, NULL a point mass), keeping it or
 *      drawing from the residual, and sets *kept;
 *   3. emits it: the penalty history, the token list, log-probabilities
 *      and entropy of the model's own (unmasked) row, the text stream and
 *      on_token, the grammar matcher advanced by its bytes.
 * Returns KVLM_FINISH_NONE while the choice goes on, else why it ended;
 * the caller then ends it (the token, if any was emitted, counts). */
kvlm_finish dec_token(dec_ctx *x, sched_choice *c, const float *row, int32_t draft, const float *q, int *kept);

#endif
