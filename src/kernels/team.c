/*
 * The engine's thread pool: persistent workers, regions handed out item by
 * item, spin-then-sleep waits, and an adaptive team size.
 *
 * A region. The caller writes the job (task, context, items, size) and
 * publishes it by storing claim = (tag << 32 | 0) and gen = tag. Every
 * participant (the caller is worker 0) takes items with a compare-and-swap
 * on claim that succeeds only while claim still carries the region's tag,
 * so a worker that wakes late, after the region ended, takes nothing: it
 * never runs an item of a region it did not see published, and a slow or
 * descheduled worker's share is simply taken by the others. The caller
 * returns when `done` reaches the number of items, then closes the region
 * (claim = tag << 32 | CLOSED, an exchange that orders every successful
 * claim of this region before the next job is written).
 *
 * Waits. A worker spins on gen for at most SPIN_NS after its last item
 * (the gaps between the regions of one step are a few microseconds; the
 * gap between two steps is longer), then sleeps on a futex of its own;
 * the caller wakes only the sleeping workers the region uses. The caller
 * waiting for the last items spins at most SPIN_NS too, then sleeps on
 * `done`. An idle engine therefore uses no CPU, and no wait ever spins a
 * core for longer than SPIN_NS.
 *
 * Adaptive size. When another process holds one of the cores, a worker
 * that took an item may be descheduled for a scheduler slice or more (waits
 * of 1-8 ms measured here, against regions of 20 us-4 ms), and the caller,
 * having finished everything else, waits for it; or the worker never gets
 * to run at all during the region. The caller times each region: `own`
 * from publication until no item was left, `wait` from then until the last
 * item finished. A region is late when wait > LATE_FACTOR x own and wait >
 * LATE_MIN_NS. Measured on the 2-core Xeon VM (GPT-2 f16 decode, 2
 * threads, 3271 regions, no competing process): wait p50 1 us, p90 71 us,
 * p99 331 us, wait / own p99 0.17; a futex wake reaches a sleeping thread
 * in 6-67 us (mean of 200, after 0.1-10 ms asleep). A worker that takes no
 * item at all does not make a region late: the caller then ran it alone,
 * which costs what a smaller team would, so shrinking gains nothing. (An
 * earlier rule also counted such absences; low-priority background jobs
 * delay a woken worker that often, and the team shrank to one thread with
 * no busy core: K-quant decode at 2 threads ran at 1-thread speed.)
 * With `taskset -c 0 yes` running, the worker was absent from 68% of the
 * regions (1227 of 1796) and made the caller wait 1-8 ms when it held an
 * item. LATE_SHRINK late regions among the last 16 shrink the team by one
 * thread (down to 1: the caller alone, on whichever core the OS gives it;
 * the workers sleep). Every PROBE_NS (doubling after each failed probe up
 * to PROBE_MAX_NS) the next regions run one thread larger: the first late
 * region ends the probe (one slow region per probe at most), PROBE_OK
 * on-time regions keep the larger size.
 *
 * Not here: no thread affinity, no process-wide state; regions of one team
 * are opened by one thread at a time.
 */
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "kernels/team.h"

#define SPIN_NS 50000
#define LATE_FACTOR 2
#define LATE_MIN_NS 200000
#define LATE_SHRINK KERN_TEAM_LATE_SHRINK
#define PROBE_NS KERN_TEAM_PROBE_NS
#define PROBE_MAX_NS 3200000000LL
#define PROBE_OK KERN_TEAM_PROBE_OK
#define CLOSED 0xFFFFFFFFu

typedef struct kern_worker {
    _Alignas(64) atomic_uint wake; /* futex word: bumped to wake this worker */
    atomic_int sleeping;
    pthread_t tid;
    struct kern_pool *pool;
    int index;
} kern_worker;

struct kern_pool {
    _Alignas(64) atomic_uint_fast64_t claim; /* tag << 32 | next item */
    _Alignas(64) atomic_uint gen;            /* tag of the last published region */
    atomic_int stop;
    _Alignas(64) atomic_uint done;           /* items finished in this region */
    atomic_int caller_sleeping;
    atomic_int ran;                          /* threads that ran an item here */
    _Alignas(64) _Atomic(kern_task) fn;
    _Atomic(void *) ctx;
    atomic_uint n;
    atomic_int size;                         /* workers 0..size-1 take part */
    /* caller-only state */
    uint32_t tag;
    int threads, active, probing, probe_ok;
    uint32_t history;                        /* late flags of the last regions */
    long long next_probe, probe_gap;
    int workers_started;
    kern_worker *workers;                    /* [1..threads-1] */
};

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void futex_wait(atomic_uint *w, unsigned expect) {
    syscall(SYS_futex, (unsigned *)w, FUTEX_WAIT_PRIVATE, expect, NULL, NULL, 0);
}

static void futex_wake(atomic_uint *w, int n) {
    syscall(SYS_futex, (unsigned *)w, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

/* Takes and runs items of region `tag` until none is left; returns whether
 * this thread ran at least one. */
static int work(struct kern_pool *p, uint32_t tag, int w) {
    int ran = 0;
    for (;;) {
        uint_fast64_t v = atomic_load_explicit(&p->claim, memory_order_acquire);
        if ((uint32_t)(v >> 32) != tag) return ran;
        kern_task fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
        void *ctx = atomic_load_explicit(&p->ctx, memory_order_relaxed);
        const unsigned n = atomic_load_explicit(&p->n, memory_order_relaxed);
        const uint32_t i = (uint32_t)v;
        if (i >= n) return ran;
        if (!atomic_compare_exchange_weak_explicit(&p->claim, &v, v + 1, memory_order_acq_rel, memory_order_relaxed))
            continue;
        if (!ran) atomic_fetch_add_explicit(&p->ran, 1, memory_order_relaxed);
        ran = 1;
        fn(ctx, (int)i, w);
        if (atomic_fetch_add(&p->done, 1) + 1 == n && w != 0 && atomic_load(&p->caller_sleeping))
            futex_wake(&p->done, 1);
    }
}

static void *worker_main(void *arg) {
    kern_worker *wk = arg;
    struct kern_pool *p = wk->pool;
    uint32_t seen = 0; /* the tag before the first region (not gen now: a region may already be out) */
    long long idle_since = now_ns();
    unsigned spins = 0;
    for (;;) {
        if (atomic_load_explicit(&p->stop, memory_order_relaxed)) return NULL;
        const uint32_t g = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (g != seen) {
            seen = g;
            if (wk->index < atomic_load_explicit(&p->size, memory_order_relaxed) && work(p, g, wk->index))
                idle_since = now_ns();
            continue;
        }
        if ((++spins & 31) || now_ns() - idle_since < SPIN_NS) {
            cpu_relax();
            continue;
        }
        /* Sleep: announce it, then look once more (the caller stores gen
         * before it reads `sleeping`, so one of the two sees the other). */
        atomic_store(&wk->sleeping, 1);
        const unsigned token = atomic_load(&wk->wake);
        if (atomic_load(&p->gen) == seen && !atomic_load(&p->stop)) futex_wait(&wk->wake, token);
        atomic_store(&wk->sleeping, 0);
        idle_since = now_ns();
    }
}

static void stop_workers(struct kern_pool *p) {
    atomic_store(&p->stop, 1);
    for (int w = 1; w < p->workers_started + 1; w++) {
        atomic_fetch_add(&p->workers[w].wake, 1);
        futex_wake(&p->workers[w].wake, 1);
    }
    for (int w = 1; w < p->workers_started + 1; w++) pthread_join(p->workers[w].tid, NULL);
}

int kern_team_open(kern_team *t, int threads) {
    t->threads = threads < 1 ? 1 : threads;
    t->peak = 0;
    t->pool = NULL;
    t->scratch = NULL;
    t->scratch_bytes = 0;
    if (t->threads == 1) return 0;
    struct kern_pool *p = aligned_alloc(64, (sizeof *p + 63) & ~(size_t)63);
    kern_worker *ws = aligned_alloc(64, sizeof *ws * (size_t)t->threads);
    if (!p || !ws) {
        free(p), free(ws);
        t->threads = 1;
        return -1;
    }
    *p = (struct kern_pool){.threads = t->threads, .active = t->threads, .probe_gap = PROBE_NS, .workers = ws};
    atomic_init(&p->claim, (uint_fast64_t)CLOSED);
    for (int w = 1; w < t->threads; w++) {
        ws[w] = (kern_worker){.pool = p, .index = w};
        if (pthread_create(&ws[w].tid, NULL, worker_main, &ws[w])) {
            stop_workers(p);
            free(ws), free(p);
            t->threads = 1;
            return -1;
        }
        p->workers_started = w;
    }
    t->pool = p;
    return 0;
}

void kern_team_close(kern_team *t) {
    struct kern_pool *p = t->pool;
    free(t->scratch);
    t->scratch = NULL;
    t->scratch_bytes = 0;
    if (!p) return;
    stop_workers(p);
    free(p->workers);
    free(p);
    t->pool = NULL;
}

int kern_team_active(const kern_team *t) { return t->pool ? t->pool->active : 1; }

static void note(kern_team *t, int n) {
    if (n > t->peak) t->peak = n;
}

void kern_team_note(kern_team *t) { note(t, 1); }

int kern_team_adapt_begin(kern_team *t, long long now) {
    struct kern_pool *p = t->pool;
    if (!p) return 1;
    if (p->active < p->threads && !p->probing && now >= p->next_probe) {
        p->active++;
        p->probing = 1;
        p->probe_ok = 0;
    }
    return p->active;
}

void kern_team_adapt_end(kern_team *t, int size, int ran, long long own, long long wait, long long now) {
    struct kern_pool *p = t->pool;
    if (!p) return;
    (void)size;
    (void)ran;
    const int late = wait > LATE_FACTOR * own && wait > LATE_MIN_NS;
    p->history = p->history << 1 | (uint32_t)late;
    if (p->probing) {
        if (late) { /* the larger team is still slow: back to the smaller, probe later */
            p->active--;
            p->probing = 0;
            p->history = 0;
            p->probe_gap = p->probe_gap * 2 > PROBE_MAX_NS ? PROBE_MAX_NS : p->probe_gap * 2;
            p->next_probe = now + p->probe_gap;
        } else if (++p->probe_ok >= PROBE_OK) {
            p->probing = 0;
            p->probe_gap = PROBE_NS;
            p->next_probe = now + p->probe_gap;
        }
        return;
    }
    if (__builtin_popcount(p->history & 0xFFFFu) >= LATE_SHRINK && p->active > 1) {
        p->active--;
        p->history = 0;
        p->next_probe = now + p->probe_gap;
    }
}

static void run_serial(kern_team *t, int n_items, kern_task fn, void *ctx) {
    note(t, 1);
    for (int i = 0; i < n_items; i++) fn(ctx, i, 0);
}

void kern_team_run(kern_team *t, int n_items, kern_task fn, void *ctx) {
    struct kern_pool *p = t->pool;
    if (n_items <= 0) return;
    if (!p || n_items == 1) {
        run_serial(t, n_items, fn, ctx);
        return;
    }
    const long long t0 = now_ns();
    const int active = kern_team_adapt_begin(t, t0);
    const int size = active < n_items ? active : n_items;
    if (size <= 1) {
        run_serial(t, n_items, fn, ctx);
        return;
    }
    const uint32_t tag = ++p->tag == CLOSED ? ++p->tag : p->tag;
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    atomic_store_explicit(&p->ran, 0, memory_order_relaxed);
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&p->n, (unsigned)n_items, memory_order_relaxed);
    atomic_store_explicit(&p->size, size, memory_order_relaxed);
    atomic_store_explicit(&p->claim, (uint_fast64_t)tag << 32, memory_order_release);
    atomic_store(&p->gen, tag);
    for (int w = 1; w < size; w++)
        if (atomic_load(&p->workers[w].sleeping)) {
            atomic_fetch_add(&p->workers[w].wake, 1);
            futex_wake(&p->workers[w].wake, 1);
        }
    work(p, tag, 0);
    const long long t1 = now_ns();
    const unsigned n = (unsigned)n_items;
    unsigned spins = 0;
    for (unsigned d; (d = atomic_load(&p->done)) != n;) {
        if ((++spins & 31) || now_ns() - t1 < SPIN_NS) {
            cpu_relax();
            continue;
        }
        atomic_store(&p->caller_sleeping, 1);
        if ((d = atomic_load(&p->done)) != n) futex_wait(&p->done, d);
        atomic_store(&p->caller_sleeping, 0);
    }
    const long long t2 = now_ns();
    atomic_exchange_explicit(&p->claim, (uint_fast64_t)tag << 32 | CLOSED, memory_order_acq_rel);
    const int ran = atomic_load_explicit(&p->ran, memory_order_relaxed);
    note(t, ran);
    kern_team_adapt_end(t, size, ran, t1 - t0, t2 - t1, t2);
}
