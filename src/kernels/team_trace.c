/*
 * The thread pool's region trace (team_trace.h): records in a growing
 * array owned by the team's caller, written as text when the team closes.
 * One line per region:
 *
 *   t_ms kind n size own_us wait_us late steals active ccpu ccpu_end T0 T1 ...
 *
 * where each T is thread:items@cpu+start_us, with a trailing w when the
 * worker was asleep at publication (woken by the caller), or thread:0 when
 * the thread claimed no item. The caller is thread 0 (start 0); steals are
 * the items it took over from late workers, counted apart from its own.
 *
 * Not here: what the records mean for the adaptive size (team.c); no
 * parsing (bench/team_trace.awk reads the files).
 */
#include "kernels/team_trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct kern_trace {
    char *path;
    int threads;
    kern_trace_rec *recs;
    size_t n, cap;
    long long dropped;
    long long opened; /* CLOCK_MONOTONIC ns: the records' time origin */
};

kern_trace *kern_trace_open(int threads, long long opened) {
    const char *path = getenv("KVLM_TEAM_TRACE");
    if (!path || !*path) return NULL;
    kern_trace *tr = calloc(1, sizeof *tr);
    if (!tr) return NULL;
    tr->path = strdup(path);
    if (!tr->path) {
        free(tr);
        return NULL;
    }
    tr->threads = threads;
    tr->opened = opened;
    return tr;
}

kern_trace_rec *kern_trace_next(kern_trace *tr) {
    if (tr->n == tr->cap) {
        const size_t cap = tr->cap ? tr->cap * 2 : 4096;
        kern_trace_rec *r = cap <= KERN_TRACE_MAX ? realloc(tr->recs, cap * sizeof *r) : NULL;
        if (!r) {
            tr->dropped++;
            return NULL;
        }
        tr->recs = r;
        tr->cap = cap;
    }
    kern_trace_rec *r = &tr->recs[tr->n++];
    memset(r, 0, sizeof *r);
    for (int w = 0; w < KERN_TRACE_THREADS; w++) r->cpu[w] = -1, r->start[w] = -1;
    return r;
}

const kern_trace_rec *kern_trace_records(const kern_trace *tr, size_t *n) {
    *n = tr->n;
    return tr->recs;
}

void kern_trace_close(kern_trace *tr, const char *summary) {
    if (!tr) return;
    FILE *f = fopen(tr->path, "a");
    if (!f) {
        fprintf(stderr, "kvlm team trace: cannot open %s for appending\n", tr->path);
    } else {
        const int shown = tr->threads < KERN_TRACE_THREADS ? tr->threads : KERN_TRACE_THREADS;
        fprintf(f, "# kvlm team trace: pid %ld, %d threads, opened at %.3f s (monotonic), %zu regions, %lld not recorded%s%s\n",
                (long)getpid(), tr->threads, tr->opened * 1e-9, tr->n, tr->dropped, summary ? "; " : "",
                summary ? summary : "");
        fprintf(f, "# t_ms kind n size own_us wait_us late steals active ccpu ccpu_end thread:items@cpu+start_us[w]...\n");
        for (size_t i = 0; i < tr->n; i++) {
            const kern_trace_rec *r = &tr->recs[i];
            fprintf(f, "%.3f %c %d %d %.1f %.1f %d %d %d %d %d", r->t0 * 1e-6, r->kind, r->n, r->size, r->own * 1e-3,
                    r->wait * 1e-3, r->late, r->steals, r->active, r->caller_cpu, r->caller_cpu_end);
            for (int w = 0; w < shown && w < r->size; w++) {
                if (r->start[w] < 0)
                    fprintf(f, " %d:0%s", w, r->woke >> w & 1 ? "w" : "");
                else
                    fprintf(f, " %d:%u@%d+%.1f%s", w, r->items[w], r->cpu[w], r->start[w] * 1e-3,
                            r->woke >> w & 1 ? "w" : "");
            }
            fputc('\n', f);
        }
        if (fclose(f)) fprintf(stderr, "kvlm team trace: writing %s failed\n", tr->path);
    }
    free(tr->recs);
    free(tr->path);
    free(tr);
}
