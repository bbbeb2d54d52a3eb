/*
 * The defaults of the scheduler's parameter structs (kvlm_sched_options,
 * kvlm_request_params, kvlm_speculation), the values a program starts
 * from so that a field added later keeps its default. They agree with
 * what the scheduler reads a zero field as (scheduler.c), except where a
 * zero has a meaning of its own (a request's sampling: greedy).
 */
#include "kvlm.h"

kvlm_sched_options kvlm_sched_default_params(void) {
    return (kvlm_sched_options){.max_batch_tokens = 256, .max_waiting = 256, .recompute = 0, .max_prefill_tokens = 0};
}

kvlm_speculation kvlm_speculation_default_params(void) {
    return (kvlm_speculation){.mode = KVLM_DRAFT_NONE, .k = 4, .ngram = 3, .fixed = 0};
}

kvlm_request_params kvlm_request_default_params(void) {
    return (kvlm_request_params){.max_tokens = 16,
                                 .n_choices = 1,
                                 .sampling = kvlm_sampler_default_params(),
                                 .speculation = kvlm_speculation_default_params()};
}
