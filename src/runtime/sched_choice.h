/*
 * The scheduler's state of one request and of each of its choices, shared
 * by scheduler.c (admission, planning, steps, ending) and decide.c (the
 * token decision of one choice). Nothing else includes it; the rest of the
 * program sees choices through kvlm.h and sched_view.h.
 */
#ifndef KVLM_RUNTIME_SCHED_CHOICE_H
#define KVLM_RUNTIME_SCHED_CHOICE_H

#include <stdint.h>

#include "kvlm.h"
#include "runtime/constrain.h"
#include "runtime/spec_policy.h"
#include "runtime/speculative.h"

enum { CS_FORKWAIT, CS_WAITING, CS_RUNNING, CS_DONE };

typedef struct sched_req sched_req;

typedef struct sched_choice {
    sched_req *req;
    int index, state, seq;
    int32_t *tokens;       /* prompt + generated, capacity n_ctx */
    int n_tokens, n_computed, generated, chunk;
    kvlm_sampler *smp;
    kvlm_text_stream *text; /* NULL unless the request asked for text */
    int stale;             /* recompute: drew a token since its KV was last dropped */
    gr_matcher *gm;        /* the request's grammar, at the bytes of every token emitted
                              so far (NULL: none); preemption keeps it, as it keeps the tokens */
    const gr_trie *trie;   /* the vocabulary trie the masks walk (with gm) */
    uint64_t admitted;     /* admission order, for choosing whom to preempt */
    /* speculative decoding (the request's kvlm_speculation) */
    int32_t draft[SPEC_MAX_K];
    int n_draft;           /* drafts riding on this step's decode item */
    float *q;              /* draft model: k x vocab, each draft's distribution */
    kvlm_sampler *dsmp;    /* draft model: the draft chain */
    int dseq, dlen;        /* draft model: its cache sequence (-1: none) and tokens held */
    int drafted, accepted; /* tokens drafted for this choice, and how many were kept */
    int no_spec;           /* drafts no more (a sliding window refused a rollback) */
    spec_policy pol;       /* the adaptive policy's state (unless speculation.fixed) */
    int32_t shadow[SPEC_MAX_K]; /* prompt lookup while not drafting: what it would have drafted */
    int n_shadow, shadow_at; /* how many (0: none pending), and the token index the first predicts */
} sched_choice;

struct sched_req {
    int64_t id;
    kvlm_request_params p; /* prompt and eos_ids point at copies owned here */
    sched_choice *choices;
    int n_done;
    int counted;           /* prompt tokens counted once, not on recomputation */
};

#endif
