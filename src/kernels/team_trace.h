/*
 * The thread pool's region trace: one record per region of a team (who ran
 * how many items, on which processor, how soon each worker arrived, the
 * caller's own time and its wait, steals, the adaptive size), kept in
 * memory while the team runs and written when it closes. Off unless
 * KVLM_TEAM_TRACE names a file in the environment when the team opens; off
 * costs one untaken branch per region and per claimed item.
 *
 * The caller alone appends records (team.c fills them); the file is opened
 * for appending, so every team of a process writes its block there, each
 * headed by a comment line. docs/threads.md describes the columns.
 */
#ifndef KVLM_KERNELS_TEAM_TRACE_H
#define KVLM_KERNELS_TEAM_TRACE_H

#include <stddef.h>

#define KERN_TRACE_THREADS 8 /* threads recorded per region (workers above are folded out) */

typedef struct kern_trace_rec {
    long long t0;                         /* ns since the team opened, at publication */
    int own, wait;                        /* ns: caller from publication until no item was left; then until all were done */
    int n, size;                          /* items; threads the region was offered to (1: the caller alone) */
    char kind;                            /* 'p' plain, 's' staged (stealable) */
    unsigned char late, active;           /* counted late; adaptive size after the region */
    unsigned char woke;                   /* bit w: worker w was asleep at publication and was woken */
    short steals, caller_cpu, caller_cpu_end;
    unsigned short items[KERN_TRACE_THREADS]; /* items each thread claimed (the caller's own, steals apart) */
    short cpu[KERN_TRACE_THREADS];        /* processor of the thread's first claim, -1 if it claimed none */
    int start[KERN_TRACE_THREADS];        /* ns from publication to the thread's first claim, -1 if none */
} kern_trace_rec;

typedef struct kern_trace kern_trace;

/* A trace for a team of `threads` opened at `opened` (CLOCK_MONOTONIC ns,
 * the origin of the records' times), or NULL when KVLM_TEAM_TRACE is unset
 * or empty (or memory runs out: tracing is then off). */
kern_trace *kern_trace_open(int threads, long long opened);

/* The record of the next region, zeroed with cpu[] and start[] at -1, or
 * NULL once the trace is full (KERN_TRACE_MAX records; later regions are
 * counted as dropped) or memory runs out. */
kern_trace_rec *kern_trace_next(kern_trace *tr);

/* The records so far (*n of them), oldest first; valid until the next
 * kern_trace_next or kern_trace_close. */
const kern_trace_rec *kern_trace_records(const kern_trace *tr, size_t *n);

/* Appends the records to the file, prefixed by a header naming the
 * process, the team and `summary` (one line, may be NULL), and frees tr.
 * Failures to write are reported on stderr (tracing never stops a run). */
void kern_trace_close(kern_trace *tr, const char *summary);

#define KERN_TRACE_MAX (1 << 20)

#endif
