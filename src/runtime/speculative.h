/*
 * Speculative decoding: a drafter proposes the next k tokens of a
 * sequence cheaply, the target model computes all of them in one batched
 * step (logits for each of the k + 1 positions), and the drafts are
 * verified in order so that the tokens kept follow exactly the target
 * sampler's distribution:
 *
 *   draft d drawn from q, target chain distribution p at that position:
 *   accepted with probability min(1, p(d) / q(d)); on rejection the
 *   token is drawn from norm(max(0, p - q)) and the rest of the draft is
 *   dropped (Leviathan et al. 2023; Chen et al. 2023).
 *
 * q is the draft model's own chain (the request's temperature and filters,
 * no penalties) or, for prompt lookup and greedy drafting, a point mass on
 * the drafted token. With a greedy target p is a point mass too, so a
 * draft is kept exactly when it is the target's argmax: the output equals
 * decoding without speculation, token for token.
 *
 * The scheduler (runtime/scheduler.c) owns the loop: it asks for drafts
 * before planning a step, feeds each decoding choice its last token and
 * drafts as one item with logits for every row, verifies each row through
 * dec_token (runtime/decide.c, which first masks it with the request's
 * grammar, so p here is the masked chain's), and rolls the target cache
 * (and the draft model's) back over rejected tokens with
 * kvlm_kv_seq_truncate.
 */
#ifndef KVLM_RUNTIME_SPECULATIVE_H
#define KVLM_RUNTIME_SPECULATIVE_H

#include "kvlm.h"

/* The most tokens drafted per step (kvlm_speculation.k). */
#define SPEC_MAX_K 16
/* The longest n-gram prompt lookup matches (kvlm_speculation.ngram). */
#define SPEC_MAX_NGRAM 8

/* Verifies one drafted token against the target's logits row through the
 * target's sampler s (whose penalty history holds every token before this
 * position). q: the draft's distribution (vocab entries), NULL for a point
 * mass on draft. p: scratch of vocab floats. Returns 1 and *out = draft
 * when it is kept, 0 and *out = the token drawn from the residual. With a
 * point mass (prompt lookup) the token is drawn exactly as plain decoding
 * draws it and the draft is kept when they agree, which is the same rule
 * (kept with probability p(d), else a draw from p without d) coupled to
 * plain decoding: the same seed gives the same tokens with or without
 * drafts. */
int spec_verify(kvlm_sampler *s, const float *logits, int32_t draft, const float *q, float *p, int32_t *out);

/* Prompt lookup: the tokens that followed the latest earlier occurrence of
 * the sequence's last n tokens (n from max_ngram down to 1, the longest
 * match wins), at most k of them, into out. Returns how many (0: no match). */
int spec_draft_ngram(const int32_t *tokens, int n_tokens, int max_ngram, int k, int32_t *out);

/* One sequence's request to the draft model. */
typedef struct spec_job {
    const int32_t *tokens;  /* the sequence's context */
    int n_tokens;
    int *dseq;              /* its draft-cache sequence (-1: none yet, created here) */
    int *dlen;              /* tokens of `tokens` the draft cache holds */
    kvlm_sampler *dsmp;     /* the draft chain (q), with its own generator */
    int k;                  /* tokens wanted */
    int32_t *draft;         /* out: k ids */
    float *q;               /* out: k x vocab, the distribution each was drawn from
                               (one-hot when the draft chain is greedy) */
    int n_draft;            /* out: tokens drafted (0 when the draft cache is full) */
} spec_job;

/* Drafts for every job with the draft model, its steps batched across the
 * jobs: first each job's uncomputed context (catching the draft cache up),
 * then one token per step; at most as many as the draft model's context
 * window leaves room for. A job whose draft sequence cannot be created
 * drafts nothing. Returns 0, or a negative status when a draft step failed
 * (the jobs keep what earlier steps drafted; every cache stays consistent). */
int spec_draft_model(kvlm_engine *de, kvlm_kv *dkv, int vocab, spec_job *jobs, int n, kvlm_error *err);

#endif
