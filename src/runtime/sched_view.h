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

/* The record is the public one (kvlm.h), so the list can be handed out as is. */
typedef kvlm_sched_choice_info sched_choice_info;

/* Writes the running choices in batch order, then the waiting ones in
 * queue order, at most cap of them; returns how many there are in all.
 * Choices n > 1 requests keep back until the first has computed the
 * prompt (they then fork its blocks) are in neither list and not listed. */
int sched_list_choices(const kvlm_sched *s, sched_choice_info *out, int cap);

#endif
