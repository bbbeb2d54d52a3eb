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
 * touches process-wide state (no OpenMP, no signal masks); a worker
 * changes only its own affinity, for an instant, to leave the caller's
 * processor (team.c, "Placement").
 */
#ifndef KVLM_KERNELS_TEAM_H
#define KVLM_KERNELS_TEAM_H

#include "kernels/kernels.h"

/* One item of a region: worker is 0 (the caller) .. team->threads - 1. */
typedef void (*kern_task)(void *ctx, int item, int worker);

/* An item of a staged (stealable) region: writes the item's outputs to
 * `out` (a worker's private buffer of the stage's priv_bytes) or, when out
 * is NULL, straight to their destination. ctx is the stage's memory. */
typedef void (*kern_steal_task)(const void *ctx, int item, int worker, void *out);
/* Copies item's outputs from a worker's private buffer to the destination. */
typedef void (*kern_commit_task)(const void *ctx, int item, const void *out);

/* What the pool did since it was opened (KVLM_TEAM_COUNTS=1 in the
 * environment prints them to stderr when the team closes). */
typedef struct kern_team_counts {
    long long regions;     /* regions handed to two or more threads */
    long long staged;      /* of which staged (kern_team_run_staged) */
    long long steals;      /* items the caller computed itself because a worker held them too long */
    long long discarded;   /* worker results dropped: their item had been stolen */
    long long late;        /* regions the adaptive size counted as late */
    long long late_staged; /* of which staged */
    long long shrinks;     /* times the adaptive size dropped a thread */
    long long moves;       /* times a worker moved off the caller's processor */
    long long stays;       /* times a worker on the caller's processor stayed: the others were busy */
} kern_team_counts;

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

/* Stealable regions, for tasks whose items can be recomputed: first
 * kern_team_stage(t, n_items, bytes, priv_bytes) returns `bytes` of memory
 * (64-byte aligned) for the task's context and every input it reads that
 * is not immutable for the team's life; the caller fills it, then
 * kern_team_run_staged(t, n_items, fn, commit) runs the region on it.
 * Workers compute an item into a private buffer of priv_bytes and commit
 * it (commit copies it to the destination) unless the caller, waiting for
 * a worker that holds an item too long, stole the item and computed it
 * itself (out = NULL). When kern_team_run_staged returns, every item's
 * outputs are in place and no worker writes a destination again; a late
 * worker may still read the stage, which is reused only after it left.
 * Results must not depend on who computed an item. kern_team_stage
 * returns NULL for a team without a pool or when memory runs out (run the
 * region with kern_team_run instead); kern_team_run_staged returns -1,
 * running nothing, unless the last kern_team_stage of t was for n_items
 * and has not run yet. */
void *kern_team_stage(kern_team *t, int n_items, size_t bytes, size_t priv_bytes);
int kern_team_run_staged(kern_team *t, int n_items, kern_steal_task fn, kern_commit_task commit);

void kern_team_get_counts(const kern_team *t, kern_team_counts *c);

/* The region trace of a team opened with KVLM_TEAM_TRACE set (team_trace.h:
 * one record per region, oldest first, *n of them), or NULL (*n = 0) when
 * the team has no trace; valid until the team's next region or close. */
struct kern_trace_rec;
const struct kern_trace_rec *kern_team_trace(const kern_team *t, size_t *n);

/* The number of threads the next region would use (the adaptive size:
 * team->threads unless workers were found late, see team.c). */
int kern_team_active(const kern_team *t);

/* The adaptive size's policy, split out so tests can drive it with chosen
 * timings (nanoseconds): _begin at the start of a region returns the size
 * it may use (starting a probe when one is due); _end records a region of
 * `size` threads of which `ran` took items, the caller's own time and its
 * wait for the others, and returns whether it counted as late. The run
 * functions call both. */
int kern_team_adapt_begin(kern_team *t, long long now);
int kern_team_adapt_end(kern_team *t, int size, int ran, long long own, long long wait, long long now);

/* The policy's thresholds (team.c explains how they were chosen). */
#define KERN_TEAM_LATE_SHRINK 3            /* late regions among the last 16 that shrink the team */
#define KERN_TEAM_PROBE_NS 200000000LL     /* first probe after a shrink */
#define KERN_TEAM_PROBE_OK 64              /* on-time regions that keep a probe's size */
#define KERN_TEAM_STEAL_FACTOR 3           /* steal after this many of the caller's mean item times */
#define KERN_TEAM_STEAL_MIN_NS 50000LL     /* and never sooner */
#define KERN_TEAM_MOVE_MIN_NS 2000000LL    /* a worker moves off the caller's processor at most this often, */
#define KERN_TEAM_MOVE_MAX_NS 128000000LL  /* the gap doubling after each move up to this */

#endif
