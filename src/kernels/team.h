/*
 * The engine's own thread pool (see team.c for the design and the measured
 * thresholds). A kern_team (kernels.h) owns one pool: threads - 1 persistent
 * workers created once, plus the calling thread. A region is (task, context,
 * number of items); items are handed out one at a time from an atomic
 * counter, the caller works too, and kern_team_run returns when every item
 * has run. Which thread runs which item is not fixed, so a task must write
 * only its item's outputs (results never depend on the thread count); the
 * worker number passed to the task (0 for the caller, < team->threads) is
 * only for per-thread scratch.
 *
 * One caller at a time per team: regions of one team are never opened
 * concurrently (an engine steps from one thread at a time). Nothing here
 * touches process-wide state (no OpenMP, no signal masks, no affinity).
 */
#ifndef KVLM_KERNELS_TEAM_H
#define KVLM_KERNELS_TEAM_H

#include "kernels/kernels.h"

/* One item of a region: worker is 0 (the caller) .. team->threads - 1. */
typedef void (*kern_task)(void *ctx, int item, int worker);

/* Starts threads - 1 workers for t (t->threads = threads, t->peak = 0).
 * Returns 0, or -1 if a thread could not be started (t is then a
 * one-thread team that runs every region on the caller; nothing leaks). */
int kern_team_open(kern_team *t, int threads);

/* Stops and joins the workers; the team runs on the caller afterwards. */
void kern_team_close(kern_team *t);

/* Runs fn(ctx, i, worker) for i in 0..n_items-1 and returns when all have
 * run. With no pool (a team written as {.threads = N}), one item, or an
 * adaptive size of 1, every item runs on the caller in order. */
void kern_team_run(kern_team *t, int n_items, kern_task fn, void *ctx);

/* The number of threads the next region would use (the adaptive size:
 * team->threads unless workers were found late, see team.c). */
int kern_team_active(const kern_team *t);

/* The adaptive size's policy, split out so tests can drive it with chosen
 * timings (nanoseconds): _begin at the start of a region returns the size
 * it may use (starting a probe when one is due); _end records a region of
 * `size` threads of which `ran` took items, the caller's own time and its
 * wait for the others. kern_team_run calls both. */
int kern_team_adapt_begin(kern_team *t, long long now);
void kern_team_adapt_end(kern_team *t, int size, int ran, long long own, long long wait, long long now);

/* The policy's thresholds (team.c explains how they were chosen). */
#define KERN_TEAM_LATE_SHRINK 3            /* late regions among the last 16 that shrink the team */
#define KERN_TEAM_PROBE_NS 200000000LL     /* first probe after a shrink */
#define KERN_TEAM_PROBE_OK 64              /* on-time regions that keep a probe's size */

#endif
