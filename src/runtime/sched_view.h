/*
 * A read-only look at the scheduler's choices, for live views of what it
 * is doing (kvlm serve's GET /kvlm/engine): which choices are in the
 * batch, which wait, how far each has got and which KV sequence holds its
 * blocks. Call it between steps from the thread that steps the scheduler;
 * nothing here changes the scheduler.
 */
#ifndef KVLM_SCHED_VIEW_H
#define KVLM_SCHED_VIEW_H

#include <stdint.h>

#include "kvlm.h"

typedef struct sched_choice_info {
    void *user;        /* the request's kvlm_request_params.user */
    int64_t request;   /* kvlm_sched_submit's id */
    int choice;        /* index within the request */
    int running;       /* 1: in the batch; 0: in the waiting queue (new or preempted) */
    int seq;           /* its KV sequence; -1 while waiting */
    int n_prompt;      /* prompt tokens */
    int n_tokens;      /* prompt + generated */
    int n_computed;    /* tokens whose K/V are in the cache */
    int generated;     /* tokens drawn so far */
    int max_tokens;    /* the request's max_tokens */
} sched_choice_info;

/* Writes the running choices in batch order, then the waiting ones in
 * queue order, at most cap of them; returns how many there are in all.
 * Choices n > 1 requests keep back until the first has computed the
 * prompt (they then fork its blocks) are in neither list and not listed. */
int sched_list_choices(const kvlm_sched *s, sched_choice_info *out, int cap);

#endif
