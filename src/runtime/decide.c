/*
 * One token decision (see decide.h): mask, then sample or verify, then
 * emit. Plain decoding calls it once per step with no draft; speculative
 * verification calls it once per draft row, in order, and once more for
 * the row after the last kept draft, so a grammar, penalties and stop
 * strings see exactly the token sequence plain decoding would build.
 *
 * Invariants:
 * - The grammar matcher is advanced in emit, so when a row is masked it
 *   stands after every token emitted so far: a draft after a kept draft
 *   is judged by the grammar state that kept draft reached.
 * - The target distribution p is the sampler chain over the masked row. A
 *   draft the grammar forbids has p = 0 and is rejected; the residual is
 *   drawn from the masked p, so no forbidden token is ever emitted.
 * - Greedy with a grammar: p is a point mass on the masked row's argmax,
 *   so a draft is kept exactly when it is that argmax, and the output is
 *   plain grammar decoding's, token for token.
 * - The draft model's q is its own, unmasked chain. Verification is exact
 *   for any q the draft was really drawn from (a token is kept with
 *   min(q, p) and the residual supplies max(0, p - q)), so masking q is not
 *   needed for the distribution; q's mass on forbidden tokens only lowers
 *   acceptance.
 * - Log-probabilities and entropy are the model's (the unmasked row), as
 *   without speculation.
 *
 * - Closing within the budget: the mask keeps only the tokens after which
 *   the grammar can still be completed in the tokens left, counting one
 *   token per byte of its shortest completion (every byte-level
 *   vocabulary has a token for each byte, so that many tokens always
 *   suffice). While every allowed token leaves enough, the mask, and so
 *   the distribution and the draws of a seeded sampler, are exactly the
 *   unlimited ones; when the budget binds, the tokens that would strand the
 *   output are dropped and the output closes by the last token. If no
 *   token fits (a vocabulary without the byte's own token), the unlimited
 *   mask is used.
 * Nothing here frees a choice, touches the KV cache or counts drafts: the
 * scheduler does, from the returned finish reason and *kept.
 */
#include "runtime/decide.h"

#include <math.h>

#include "runtime/sampler.h"

static int is_eos(const sched_req *r, int32_t id) {
    for (int i = 0; i < r->p.n_eos; i++)
        if (r->p.eos_ids[i] == id) return 1;
    return 0;
}

/* The chosen token id of a choice, drawn from (or verified against) the
 * logits row of its position: the grammar advanced by its bytes, then
 * appended, counted, reported with its log-probabilities and text; returns
 * why the choice ends (KVLM_FINISH_NONE: it goes on). */
static kvlm_finish emit(dec_ctx *x, sched_choice *c, int32_t id, const float *logits) {
    sched_req *r = c->req;
    const int eos = is_eos(r, id);
    if (c->gm) {
        /* A token the mask did not allow (every allowed token banned by
         * logit_bias) or a matcher out of memory ends the choice before
         * the token is emitted. */
        size_t len = 0;
        const char *piece = eos ? "" : kvlm_tokenizer_piece(r->p.tokenizer, id, &len);
        if (eos ? !gr_matcher_accepting(c->gm) : !piece || len == 0 || gr_matcher_advance(c->gm, piece, len) != 0)
            return KVLM_FINISH_ERROR;
    }
    kvlm_sampler_accept(c->smp, &id, 1);
    c->tokens[c->n_tokens++] = id;
    c->generated++;
    c->stale = x->recompute;
    x->st->generated_tokens++;
    /* The log-softmax costs a pass over the vocabulary: only when asked. */
    kvlm_token_event ev = {.choice = c->index, .id = id, .logprob = NAN, .text = "", .entropy = NAN};
    if (r->p.logprobs) ev.logprob = kvlm_token_logprob(logits, x->vocab, id);
    if (r->p.entropy) ev.entropy = kvlm_logits_entropy(logits, x->vocab);
    if (r->p.logprobs > 0) {
        ev.top_n = kvlm_top_logprobs(logits, x->vocab, r->p.logprobs, x->top_ids, x->top_lps);
        ev.top_ids = x->top_ids;
        ev.top_logprobs = x->top_lps;
    }
    int stop = 0; /* 1: a stop string completed; < 0: out of memory */
    if (c->text && !eos) stop = kvlm_text_stream_push(c->text, id, &ev.text, &ev.text_len, NULL);
    if (r->p.on_token && r->p.on_token(r->p.user, &ev) && stop == 0) stop = 1;
    return stop < 0                                                      ? KVLM_FINISH_ERROR
           : stop || eos                                                 ? KVLM_FINISH_STOP
           : c->generated >= r->p.max_tokens || c->n_tokens >= x->n_ctx ? KVLM_FINISH_LENGTH
                                                                         : KVLM_FINISH_NONE;
}

/* The most bytes the output may still need to close after this token:
 * one byte per token left after it (max_tokens or the context window,
 * whichever ends first). */
static int close_limit(const dec_ctx *x, const sched_choice *c) {
    const int by_max = c->req->p.max_tokens - c->generated, by_ctx = x->n_ctx - c->n_tokens;
    return (by_max < by_ctx ? by_max : by_ctx) - 1;
}

kvlm_finish dec_token(dec_ctx *x, sched_choice *c, const float *row, int32_t draft, const float *q, int *kept) {
    sched_req *r = c->req;
    const float *dist = row; /* what the sampler chain sees */
    if (kept) *kept = 0;
    if (c->gm) {
        /* The mask comes before every processor. Nothing allowed: the
         * output is complete (STOP) or the vocabulary cannot continue it. */
        int n = cst_mask_logits(c->gm, c->trie, row, x->masked, x->mask_bits, x->vocab, r->p.eos_ids, r->p.n_eos,
                                close_limit(x, c));
        if (n == 0 && !gr_matcher_accepting(c->gm)) /* no token of one byte on the closing path: unlimited */
            n = cst_mask_logits(c->gm, c->trie, row, x->masked, x->mask_bits, x->vocab, r->p.eos_ids, r->p.n_eos,
                                GR_NO_CLOSE);
        if (n <= 0) return n == 0 && gr_matcher_accepting(c->gm) ? KVLM_FINISH_STOP : KVLM_FINISH_ERROR;
        dist = x->masked;
    }
    int32_t id;
    if (draft >= 0) {
        const int k = spec_verify(c->smp, dist, draft, q, x->p, &id);
        if (k) {
            c->accepted++;
            x->st->accepted_tokens++;
        }
        if (kept) *kept = k;
    } else {
        id = kvlm_sampler_next(c->smp, dist);
    }
    return emit(x, c, id, row);
}
