/*
 * The engine's thread pool: persistent workers, regions handed out item by
 * item, spin-then-sleep waits, regions whose late items the caller can
 * steal, an adaptive team size, workers that move off the caller's
 * processor, and a region trace (team_trace.c).
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
 * Waits. A worker spins on gen for at most SPIN_NS (50 us) after its last
 * item, then sleeps on a futex of its own. (Between the regions of one
 * prefill step the caller works alone for 50-100 us, so a woken worker,
 * 20-50 us to arrive on the Zen 4 VM, is found asleep at 18-47% of the
 * regions. A 400 us spin raised the worker's share of prefill items from
 * 37% to 41% and prefill by 2.4% on a quiet machine, but with more
 * threads than free cores the spinning workers delayed each other's items
 * into late regions and shrank the team: not kept; docs/threads.md.)
 * The caller wakes only the sleeping workers the region uses. The caller
 * waiting for the last items spins at most SPIN_NS too, then sleeps on
 * `done`. An idle engine therefore uses no CPU, and no wait ever spins a
 * core for longer than SPIN_NS. A worker that finds itself on the
 * processor the caller published the last region from does not spin at
 * all: the OS put both threads on one core (it often does when another
 * process holds the other core), and the spin would only take time from
 * the caller. Alternated, 3 rounds, GPT-2 f16 decode at 2 threads with
 * `taskset -c 0 yes` running: 53.3-55.1 tokens/s spinning there, 53.8-57.4
 * sleeping at once (quiet 103-110 both).
 *
 * Stealable (staged) regions. A worker descheduled while it holds an item
 * (a scheduler slice of 1-8 ms when another process holds its core) would
 * make the caller wait for that one item. For tasks that can recompute an
 * item, kern_team_stage hands out a slot of memory for the region: the
 * task's context and its mutable inputs (kern_matmul: x or its prepared
 * form; weights are immutable), one taken flag per item, and a private
 * output buffer per worker. A worker computes its item into its private
 * buffer, then owns it with a compare-and-swap of the item's flag 0 -> 1
 * and copies the outputs to the destination (commit) before counting the
 * item done; if the flag was already 1 the caller stole the item and the
 * worker drops its result. The caller computes its own items straight
 * into the destination. Out of items, it waits STEAL_FACTOR x its own
 * mean item time of this region (at least STEAL_MIN_NS), then takes every
 * item whose flag is still 0 (flag 0 -> 1, computed straight into the
 * destination) and waits only for commits already under way (a copy of a
 * few hundred bytes). So the region returns with every output written
 * once, and no worker writes a destination afterwards: a late worker's
 * compare-and-swap fails. A late worker still reads the slot (context,
 * inputs, its buffer) after the region returned, so slots are pinned: a
 * worker stores pin = slot + 1 before it claims an item (the claim's
 * release orders the pin before the caller's closing exchange) and 0 when
 * it leaves the region; kern_team_stage only fills a slot no worker pins
 * (there are `threads` slots and threads - 1 workers, each pinning one at
 * most). With no competing process steals are rare (GPT-2 f16 decode, 2
 * threads, 4900 staged regions of 16 items: 2-10 items stolen per run);
 * under `taskset -c 0 yes`, 20-46 per run, each a wait for a descheduled
 * worker cut short (docs/performance.md, "A shared machine").
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
 * item. A staged region that the caller ended by stealing is not late
 * (its wait is bounded by the steal threshold). LATE_SHRINK late regions
 * among the last 16 shrink the team by one thread (down to 1: the caller
 * alone, on whichever core the OS gives it; the workers sleep). Every PROBE_NS (doubling after each failed probe up
 * to PROBE_MAX_NS) the next regions run one thread larger: the first late
 * region ends the probe (one slow region per probe at most), PROBE_OK
 * on-time regions keep the larger size.
 *
 * Placement. A worker the OS wakes onto the processor the caller is
 * running on (the waker's processor is where the kernel puts a wakee when
 * it finds no idle one at that instant, and it may stay there) shares one
 * core with the caller: the region runs at one thread's speed however the
 * items are split, and no rule above sees it (the worker is not late, the
 * caller does not wait). The region trace (team_trace.h, KVLM_TEAM_TRACE)
 * showed it on the 2-core Zen 4 VM with other processes running: the
 * worker claimed its items on the caller's processor in 83-100% of the
 * regions it took part in, in every process. There the other core was
 * busy too, and moving the worker onto it made things worse: moved at
 * every co-located region start (2-128 ms apart), the worker queued behind
 * the other core's processes, claimed 4-6% of the items instead of 24-26%,
 * and GPT-2 Q8_0 decode fell from 58-79 to 16-27 tokens/s (alternated, 2
 * processes each). Sharing the caller's core is the best a worker can do
 * when every other core is busy; it is a loss only when another core sits
 * idle (a scheduler that packs threads onto fewer processors, or a
 * placement made while the machine was busy and never revisited). So a
 * worker that sees, as a region starts, that it is on the processor the
 * caller published from, samples /proc/stat for the other processors it
 * may run on; when over the last 50 ms or more (10 ms clock ticks) they
 * were idle for at least half of one processor's time on average, it moves
 * off (its own affinity without that processor, then the affinity it had:
 * the kernel migrates it and leaves it where it is). Attempts (a sample or
 * a move) are at least 2 ms apart, the gap doubling to 128 ms after each
 * and back to 2 ms once the last is 1 s old, so a worker that stays with a
 * busy machine's caller reads /proc/stat at most 8 times a second. Only
 * the worker's own affinity changes, and only for the two calls;
 * KVLM_TEAM_PLACE=0 turns moves off.
 *
 * Not here: no process-wide state and no lasting affinity; regions of one
 * team are opened by one thread at a time.
 */
#include <limits.h>
#if defined(__linux__) && !defined(KVLM_POSIX_ONLY)
#include <linux/futex.h>
#endif
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "kernels/team.h"
#include "kernels/team_trace.h"
#include "kernels/placement.h"

#define SPIN_NS 50000
#define LATE_FACTOR 2
#define LATE_MIN_NS 200000
#define LATE_SHRINK KERN_TEAM_LATE_SHRINK
#define PROBE_NS KERN_TEAM_PROBE_NS
#define PROBE_MAX_NS 3200000000LL
#define PROBE_OK KERN_TEAM_PROBE_OK
#define CLOSED 0xFFFFFFFFu
#define STEAL_FACTOR KERN_TEAM_STEAL_FACTOR
#define STEAL_MIN_NS KERN_TEAM_STEAL_MIN_NS
#define MOVE_MIN_NS KERN_TEAM_MOVE_MIN_NS
#define MOVE_MAX_NS KERN_TEAM_MOVE_MAX_NS
#define MOVE_RESET_NS 1000000000LL
#define IDLE_SAMPLE_NS 50000000LL /* /proc/stat counts 10 ms ticks: at least 5 of them between samples */

typedef struct kern_worker {
    _Alignas(64) atomic_uint wake; /* futex word: bumped to wake this worker */
    atomic_int sleeping;
    atomic_int pin;                /* 1 + the stage slot of the region this worker is in, 0 when none */
    pthread_t tid;
    struct kern_pool *pool;
    int index;
    int trace_cpu;                 /* tracing: the processor of this worker's first claim in the region */
    /* tracing (team_trace.h): tag << 32 | cpu << 20 | items claimed in that
     * region, stored after each claim; the first claim's time before it */
    atomic_uint_fast64_t trace_word;
    atomic_llong trace_start;
    long long moved_at, move_gap;  /* the last attempt to move off the caller's processor; the gap before the next */
    int idle_cpu;                  /* the processor the idle sample below excludes */
    long long idle_at, idle_prev, total_prev; /* the last sample of the other processors' idle and total ticks */
} kern_worker;

/* The memory of one staged region (see "Stealable regions" above): the
 * items' taken flags, the task's context and inputs, and each worker's
 * private outputs. Written by the caller only while no worker pins it. */
typedef struct kern_slot {
    unsigned char *mem;
    size_t cap;
    atomic_uchar *taken;     /* [items]: 1 once an item's outputs are owned (caller's item, commit, steal) */
    unsigned char *data;     /* the task's context and inputs (kern_team_stage's bytes) */
    unsigned char *priv;     /* [threads][priv_bytes] */
    size_t priv_bytes;
} kern_slot;

struct kern_pool {
    _Alignas(64) atomic_uint_fast64_t claim; /* tag << 32 | next item */
    _Alignas(64) atomic_uint gen;            /* tag of the last published region */
    atomic_int stop;
    _Alignas(64) atomic_uint done;           /* items finished in this region */
    atomic_int caller_sleeping;
    atomic_int ran;                          /* threads that ran an item here */
    _Alignas(64) _Atomic(kern_task) fn;
    _Atomic(kern_steal_task) steal_fn;
    _Atomic(kern_commit_task) commit_fn;
    _Atomic(void *) ctx;
    atomic_uint n;
    atomic_int size;                         /* workers 0..size-1 take part */
    atomic_int slot;                         /* the staged region's slot, -1 for kern_team_run */
    atomic_int caller_cpu;                   /* the processor the caller published the region from */
    atomic_llong discarded;                  /* results of stolen items the workers dropped */
    atomic_llong moves;                      /* workers' moves off the caller's processor */
    atomic_llong stays;                      /* moves not made: the other processors were busy */
    /* caller-only state */
    uint32_t tag;
    int threads, active, probing, probe_ok;
    uint32_t history;                        /* late flags of the last regions */
    long long next_probe, probe_gap;
    int workers_started;
    kern_worker *workers;                    /* [1..threads-1] */
    kern_slot *slots;                        /* [threads]: at most threads - 1 are pinned */
    int staged;                              /* the slot kern_team_stage filled last, -1 none */
    int staged_items;
    kern_team_counts counts;
    int print_counts;
    int place;                               /* workers move off the caller's processor (KVLM_TEAM_PLACE=0: not) */
    kern_trace *trace;                       /* KVLM_TEAM_TRACE: NULL when off */
    long long opened;                        /* when the team opened (the trace's time origin) */
};

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

#if defined(__linux__) && !defined(KVLM_POSIX_ONLY)
static void futex_wait(atomic_uint *w, unsigned expect) {
    syscall(SYS_futex, (unsigned *)w, FUTEX_WAIT_PRIVATE, expect, NULL, NULL, 0);
}

static void futex_wake(atomic_uint *w, int n) {
    syscall(SYS_futex, (unsigned *)w, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

static void futex_wait_for(atomic_uint *w, unsigned expect, long long ns) {
    struct timespec ts = {.tv_sec = ns / 1000000000LL, .tv_nsec = ns % 1000000000LL};
    syscall(SYS_futex, (unsigned *)w, FUTEX_WAIT_PRIVATE, expect, &ts, NULL, 0);
}
#else
/* Without futexes (macOS, the BSDs; on Linux under make KVLM_POSIX_ONLY=1,
 * which tests it): a sleeping thread polls
 * its word every 50 us, so a wake is never lost (it is only late by up to
 * one poll), and a wake is nothing but the store the caller already made. */
static void futex_wait_for(atomic_uint *w, unsigned expect, long long ns) {
    const long long end = ns < 0 ? -1 : now_ns() + ns;
    const struct timespec nap = {0, 50000};
    while (atomic_load(w) == expect && (end < 0 || now_ns() < end)) nanosleep(&nap, NULL);
}

static void futex_wait(atomic_uint *w, unsigned expect) { futex_wait_for(w, expect, -1); }

static void futex_wake(atomic_uint *w, int n) { (void)w, (void)n; }
#endif

/* One item of a staged region on a worker: computed into the worker's
 * private outputs, then owned (taken 0 -> 1) and copied to the destination,
 * unless the caller stole it first, in which case the result is dropped.
 * Returns whether the item was committed. */
static int run_staged_item(struct kern_pool *p, const kern_slot *s, kern_steal_task fn, kern_commit_task commit,
                           void *ctx, uint32_t i, int w) {
    if (!atomic_load_explicit(&s->taken[i], memory_order_relaxed)) { /* else stolen before it began */
        void *out = s->priv + s->priv_bytes * (size_t)w;
        fn(ctx, (int)i, w, out);
        unsigned char free_item = 0;
        if (atomic_compare_exchange_strong_explicit(&s->taken[i], &free_item, 1, memory_order_acq_rel,
                                                    memory_order_relaxed)) {
            commit(ctx, (int)i, out);
            return 1;
        }
    }
    atomic_fetch_add_explicit(&p->discarded, 1, memory_order_relaxed);
    return 0;
}

/* Tracing: worker wk claimed its ran-th item of region tag (stored before
 * the item counts as done, so the caller reads it once done reaches n). */
static void trace_claim(kern_worker *wk, uint32_t tag, int ran) {
    if (ran == 1) {
        atomic_store_explicit(&wk->trace_start, now_ns(), memory_order_relaxed);
        wk->trace_cpu = kern_cpu_now();
    }
    const uint64_t items = ran < 0xFFFFF ? (uint64_t)ran : 0xFFFFF;
    atomic_store_explicit(&wk->trace_word, (uint64_t)tag << 32 | (uint64_t)(wk->trace_cpu & 0xFFF) << 20 | items,
                          memory_order_release);
}

/* Takes and runs items of region `tag` until none is left; returns how
 * many this thread ran. In a staged region a worker first pins the
 * region's slot (before its claim, which publishes the pin to the caller's
 * close), so the slot outlives the region for as long as it computes. */
static int work(struct kern_pool *p, uint32_t tag, int w) {
    int ran = 0, pinned = 0;
    for (;;) {
        uint_fast64_t v = atomic_load_explicit(&p->claim, memory_order_acquire);
        if ((uint32_t)(v >> 32) != tag) break;
        void *ctx = atomic_load_explicit(&p->ctx, memory_order_relaxed);
        const unsigned n = atomic_load_explicit(&p->n, memory_order_relaxed);
        const int slot = atomic_load_explicit(&p->slot, memory_order_relaxed);
        const uint32_t i = (uint32_t)v;
        if (i >= n) break;
        if (slot >= 0 && w != 0 && pinned != slot + 1) {
            pinned = slot + 1;
            atomic_store_explicit(&p->workers[w].pin, pinned, memory_order_release);
        }
        if (!atomic_compare_exchange_weak_explicit(&p->claim, &v, v + 1, memory_order_acq_rel, memory_order_relaxed))
            continue;
        if (!ran) atomic_fetch_add_explicit(&p->ran, 1, memory_order_relaxed);
        ran++;
        if (p->trace && w != 0) trace_claim(&p->workers[w], tag, ran);
        int counted = 1;
        if (slot < 0) {
            atomic_load_explicit(&p->fn, memory_order_relaxed)(ctx, (int)i, w);
        } else {
            kern_steal_task fn = atomic_load_explicit(&p->steal_fn, memory_order_relaxed);
            const kern_slot *s = &p->slots[slot];
            if (w == 0) { /* the caller writes straight to the destination; no worker holds item i */
                atomic_store_explicit(&s->taken[i], 1, memory_order_relaxed);
                fn(ctx, (int)i, 0, NULL);
            } else {
                counted = run_staged_item(p, s, fn, atomic_load_explicit(&p->commit_fn, memory_order_relaxed), ctx, i, w);
            }
        }
        if (counted && atomic_fetch_add(&p->done, 1) + 1 == n && w != 0 && atomic_load(&p->caller_sleeping))
            futex_wake(&p->done, 1);
    }
    if (pinned) atomic_store_explicit(&p->workers[w].pin, 0, memory_order_release);
    return ran;
}

/* A worker woken for a region on the processor the caller published it
 * from shares one core with the caller (see "Placement" above): it moves
 * off when the other processors were mostly idle since its last sample,
 * unless it tried less than its gap ago. The gap doubles with every
 * attempt (MOVE_MIN_NS up to MOVE_MAX_NS) and starts again from MOVE_MIN_NS
 * when the last attempt is more than MOVE_RESET_NS old. */
static void place(struct kern_pool *p, kern_worker *wk) {
    const int cpu = kern_cpu_now();
    if (cpu != atomic_load_explicit(&p->caller_cpu, memory_order_relaxed)) return;
    const long long now = now_ns();
    if (now - wk->moved_at > MOVE_RESET_NS) wk->move_gap = MOVE_MIN_NS;
    if (now - wk->moved_at < wk->move_gap) return;
    wk->moved_at = now; /* every attempt waits its gap: at most a few /proc reads a second */
    wk->move_gap = wk->move_gap * 2 > MOVE_MAX_NS ? MOVE_MAX_NS : wk->move_gap * 2;
    long long idle, total;
    const int others = kern_other_idle(cpu, &idle, &total);
    if (!others) return;
    if (wk->idle_cpu != cpu || now - wk->idle_at > MOVE_RESET_NS) { /* a first sample: decide at a later attempt */
        wk->idle_cpu = cpu, wk->idle_at = now, wk->idle_prev = idle, wk->total_prev = total;
        return;
    }
    if (now - wk->idle_at < IDLE_SAMPLE_NS) return; /* too few clock ticks yet: keep the older sample */
    const long long di = idle - wk->idle_prev, dt = total - wk->total_prev;
    wk->idle_at = now, wk->idle_prev = idle, wk->total_prev = total;
    if (dt <= 0 || 2 * di * others < dt) { /* the other processors were mostly busy: stay with the caller */
        atomic_fetch_add_explicit(&p->stays, 1, memory_order_relaxed);
        return;
    }
    if (kern_move_off(cpu)) atomic_fetch_add_explicit(&p->moves, 1, memory_order_relaxed);
}

static void *worker_main(void *arg) {
    kern_worker *wk = arg;
    struct kern_pool *p = wk->pool;
    uint32_t seen = 0; /* the tag before the first region (not gen now: a region may already be out) */
    long long idle_since = now_ns();
    unsigned spins = 0;
    wk->moved_at = idle_since - MOVE_RESET_NS - 1;
    wk->idle_cpu = -1;
    for (;;) {
        if (atomic_load_explicit(&p->stop, memory_order_relaxed)) return NULL;
        const uint32_t g = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (g != seen) {
            seen = g;
            if (wk->index < atomic_load_explicit(&p->size, memory_order_relaxed)) {
                if (p->place) place(p, wk);
                if (work(p, g, wk->index)) idle_since = now_ns();
            }
            continue;
        }
        if ((++spins & 31) ||
            (now_ns() - idle_since < SPIN_NS &&
             kern_cpu_now() != atomic_load_explicit(&p->caller_cpu, memory_order_relaxed))) {
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
    kern_slot *slots = calloc((size_t)t->threads, sizeof *slots);
    if (!p || !ws || !slots) {
        free(p), free(ws), free(slots);
        t->threads = 1;
        return -1;
    }
    const char *show = getenv("KVLM_TEAM_COUNTS"), *place = getenv("KVLM_TEAM_PLACE");
    *p = (struct kern_pool){.threads = t->threads, .active = t->threads, .probe_gap = PROBE_NS, .workers = ws,
                            .slots = slots, .staged = -1, .print_counts = show && *show && *show != '0',
                            .place = !place || *place != '0'};
    atomic_init(&p->claim, (uint_fast64_t)CLOSED);
    atomic_init(&p->slot, -1);
    for (int w = 1; w < t->threads; w++) {
        ws[w] = (kern_worker){.pool = p, .index = w};
        if (pthread_create(&ws[w].tid, NULL, worker_main, &ws[w])) {
            stop_workers(p);
            free(ws), free(p), free(slots);
            t->threads = 1;
            return -1;
        }
        p->workers_started = w;
    }
    p->opened = now_ns();
    p->trace = kern_trace_open(t->threads, p->opened); /* read by workers only in regions, published after this */
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
    if (p->print_counts) {
        kern_team_counts c;
        kern_team_get_counts(t, &c);
        fprintf(stderr,
                "kvlm team: %d threads (%d at close), %lld regions (%lld staged), %lld items stolen, "
                "%lld worker results dropped, %lld late regions (%lld staged), %lld shrinks, %lld moves (%lld not made)\n",
                p->threads, p->active, c.regions, c.staged, c.steals, c.discarded, c.late, c.late_staged, c.shrinks,
                c.moves, c.stays);
    }
    if (p->trace) {
        kern_team_counts c;
        kern_team_get_counts(t, &c);
        char summary[256];
        snprintf(summary, sizeof summary,
                 "%lld regions (%lld staged), %lld stolen, %lld dropped, %lld late (%lld staged), %lld shrinks, "
                 "%lld moves, %lld not made, %d at close",
                 c.regions, c.staged, c.steals, c.discarded, c.late, c.late_staged, c.shrinks, c.moves, c.stays,
                 p->active);
        kern_trace_close(p->trace, summary);
        p->trace = NULL;
    }
    for (int s = 0; s < p->threads; s++) free(p->slots[s].mem);
    free(p->slots);
    free(p->workers);
    free(p);
    t->pool = NULL;
}

void kern_team_get_counts(const kern_team *t, kern_team_counts *c) {
    const struct kern_pool *p = t->pool;
    *c = p ? p->counts : (kern_team_counts){0};
    if (p) {
        c->discarded = atomic_load_explicit(&((struct kern_pool *)p)->discarded, memory_order_relaxed);
        c->moves = atomic_load_explicit(&((struct kern_pool *)p)->moves, memory_order_relaxed);
        c->stays = atomic_load_explicit(&((struct kern_pool *)p)->stays, memory_order_relaxed);
    }
}

const kern_trace_rec *kern_team_trace(const kern_team *t, size_t *n) {
    *n = 0;
    return t->pool && t->pool->trace ? kern_trace_records(t->pool->trace, n) : NULL;
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

int kern_team_adapt_end(kern_team *t, int size, int ran, long long own, long long wait, long long now) {
    struct kern_pool *p = t->pool;
    if (!p) return 0;
    (void)size;
    (void)ran;
    const int late = wait > LATE_FACTOR * own && wait > LATE_MIN_NS;
    p->counts.late += late;
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
        return late;
    }
    if (__builtin_popcount(p->history & 0xFFFFu) >= LATE_SHRINK && p->active > 1) {
        p->active--;
        p->history = 0;
        p->next_probe = now + p->probe_gap;
        p->counts.shrinks++;
    }
    return late;
}

static void run_serial(kern_team *t, int n_items, kern_task fn, void *ctx) {
    note(t, 1);
    for (int i = 0; i < n_items; i++) fn(ctx, i, 0);
}

/* Writes region `tag`'s job and wakes the sleeping workers it uses;
 * returns them as a mask (bit w: worker w was woken). */
static unsigned publish(struct kern_pool *p, uint32_t tag, int n_items, int size, kern_task fn, kern_steal_task steal_fn,
                    kern_commit_task commit_fn, void *ctx, int slot) {
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    atomic_store_explicit(&p->ran, 0, memory_order_relaxed);
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->steal_fn, steal_fn, memory_order_relaxed);
    atomic_store_explicit(&p->commit_fn, commit_fn, memory_order_relaxed);
    atomic_store_explicit(&p->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&p->n, (unsigned)n_items, memory_order_relaxed);
    atomic_store_explicit(&p->size, size, memory_order_relaxed);
    atomic_store_explicit(&p->slot, slot, memory_order_relaxed);
    atomic_store_explicit(&p->caller_cpu, kern_cpu_now(), memory_order_relaxed);
    atomic_store_explicit(&p->claim, (uint_fast64_t)tag << 32, memory_order_release);
    atomic_store(&p->gen, tag);
    unsigned woke = 0;
    for (int w = 1; w < size; w++)
        if (atomic_load(&p->workers[w].sleeping)) {
            atomic_fetch_add(&p->workers[w].wake, 1);
            futex_wake(&p->workers[w].wake, 1);
            woke |= 1u << (w & 31);
        }
    return woke;
}

/* Tracing: the record of a region that ended at t2 (see team_trace.h).
 * Workers' claims are read from their trace words (exact for every item
 * counted done; a worker whose only claims were stolen before it stored
 * its word shows as having claimed none). */
static void trace_region(struct kern_pool *p, char kind, uint32_t tag, int n, int size, int mine, long long t0,
                         long long t1, long long t2, long long steals, int late, unsigned woke) {
    kern_trace_rec *r = kern_trace_next(p->trace);
    if (!r) return;
    r->t0 = t0 - p->opened;
    r->own = t1 - t0 > INT_MAX ? INT_MAX : (int)(t1 - t0);
    r->wait = t2 - t1 > INT_MAX ? INT_MAX : (int)(t2 - t1);
    r->n = n, r->size = size, r->kind = kind;
    r->late = (unsigned char)late;
    r->active = (unsigned char)(p->active > 255 ? 255 : p->active);
    r->woke = (unsigned char)woke;
    r->steals = (short)(steals > SHRT_MAX ? SHRT_MAX : steals);
    r->caller_cpu = (short)(size > 1 ? atomic_load_explicit(&p->caller_cpu, memory_order_relaxed) : kern_cpu_now());
    r->caller_cpu_end = (short)kern_cpu_now();
    r->items[0] = (unsigned short)mine, r->cpu[0] = r->caller_cpu, r->start[0] = 0;
    for (int w = 1; w < size && w < KERN_TRACE_THREADS; w++) {
        const uint64_t v = atomic_load_explicit(&p->workers[w].trace_word, memory_order_acquire);
        if ((uint32_t)(v >> 32) != tag) continue;
        const long long st = atomic_load_explicit(&p->workers[w].trace_start, memory_order_relaxed) - t0;
        r->items[w] = (unsigned short)(v & 0xFFFFF);
        const int cpu = (int)(v >> 20 & 0xFFF);
        r->cpu[w] = (short)(cpu == 0xFFF ? -1 : cpu); /* 0xFFF: the system did not say (kern_cpu_now() -1) */
        r->start[w] = st < 0 ? 0 : st > INT_MAX ? INT_MAX : (int)st;
    }
}

/* The caller takes over every item of the staged region no thread has
 * committed yet (items still being computed by workers that are late),
 * computing them straight into the destination. Returns how many. */
static int steal_items(struct kern_pool *p, const kern_slot *s, kern_steal_task fn, void *ctx, unsigned n) {
    int stolen = 0;
    for (unsigned i = 0; i < n; i++) {
        unsigned char free_item = 0;
        if (atomic_load_explicit(&s->taken[i], memory_order_relaxed) ||
            !atomic_compare_exchange_strong_explicit(&s->taken[i], &free_item, 1, memory_order_acq_rel,
                                                     memory_order_relaxed))
            continue;
        fn(ctx, (int)i, 0, NULL);
        stolen++;
        atomic_fetch_add(&p->done, 1);
    }
    return stolen;
}

/* The caller, out of items, waits until all n are done: spinning for at
 * most SPIN_NS, then asleep on `done`. In a staged region (s non-NULL) it
 * steals what is still outstanding once it has waited steal_ns. */
static void wait_items(struct kern_pool *p, unsigned n, long long t1, const kern_slot *s, kern_steal_task fn,
                       void *ctx, long long steal_ns) {
    unsigned spins = 0;
    int may_steal = s != NULL;
    for (unsigned d; (d = atomic_load(&p->done)) != n;) {
        if (++spins & 31) {
            cpu_relax();
            continue;
        }
        const long long waited = now_ns() - t1;
        if (may_steal && waited >= steal_ns) {
            p->counts.steals += steal_items(p, s, fn, ctx, n);
            may_steal = 0;
            continue;
        }
        if (waited < SPIN_NS) {
            cpu_relax();
            continue;
        }
        atomic_store(&p->caller_sleeping, 1);
        if ((d = atomic_load(&p->done)) != n) {
            if (may_steal)
                futex_wait_for(&p->done, d, steal_ns - waited);
            else
                futex_wait(&p->done, d);
        }
        atomic_store(&p->caller_sleeping, 0);
    }
}

static uint32_t next_tag(struct kern_pool *p) { return ++p->tag == CLOSED ? ++p->tag : p->tag; }

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
        if (p->trace) {
            const long long t2 = now_ns();
            trace_region(p, 'p', 0, n_items, 1, n_items, t0, t2, t2, 0, 0, 0);
        }
        return;
    }
    const uint32_t tag = next_tag(p);
    const unsigned woke = publish(p, tag, n_items, size, fn, NULL, NULL, ctx, -1);
    const int mine = work(p, tag, 0);
    const long long t1 = now_ns();
    wait_items(p, (unsigned)n_items, t1, NULL, NULL, NULL, 0);
    const long long t2 = now_ns();
    atomic_exchange_explicit(&p->claim, (uint_fast64_t)tag << 32 | CLOSED, memory_order_acq_rel);
    const int ran = atomic_load_explicit(&p->ran, memory_order_relaxed);
    note(t, ran);
    p->counts.regions++;
    const int late = kern_team_adapt_end(t, size, ran, t1 - t0, t2 - t1, t2);
    if (p->trace) trace_region(p, 'p', tag, n_items, size, mine, t0, t1, t2, 0, late, woke);
}

void *kern_team_stage(kern_team *t, int n_items, size_t bytes, size_t priv_bytes) {
    struct kern_pool *p = t->pool;
    if (!p || n_items <= 0) return NULL;
    int slot = -1; /* one that no worker pins: threads slots, threads - 1 workers pinning one each at most */
    for (int k = 1; k <= p->threads && slot < 0; k++) {
        const int c = (p->staged + k + p->threads) % p->threads;
        int pinned = 0;
        for (int w = 1; w < p->threads; w++)
            pinned |= atomic_load_explicit(&p->workers[w].pin, memory_order_acquire) == c + 1;
        if (!pinned) slot = c;
    }
    if (slot < 0) return NULL;
    kern_slot *s = &p->slots[slot];
    const size_t data_off = ((size_t)n_items + 63) & ~(size_t)63, data = (bytes + 63) & ~(size_t)63,
                 priv = (priv_bytes + 63) & ~(size_t)63;
    if (priv && (size_t)p->threads > (SIZE_MAX - data_off - data) / priv) return NULL;
    const size_t need = data_off + data + priv * (size_t)p->threads;
    if (need > s->cap) {
        free(s->mem);
        s->cap = (need + 65535) & ~(size_t)65535;
        s->mem = aligned_alloc(64, s->cap);
        if (!s->mem) {
            s->cap = 0;
            return NULL;
        }
    }
    s->taken = (atomic_uchar *)s->mem;
    for (int i = 0; i < n_items; i++) atomic_store_explicit(&s->taken[i], 0, memory_order_relaxed);
    s->data = s->mem + data_off;
    s->priv = s->data + data;
    s->priv_bytes = priv;
    p->staged = slot;
    p->staged_items = n_items;
    return s->data;
}

int kern_team_run_staged(kern_team *t, int n_items, kern_steal_task fn, kern_commit_task commit) {
    struct kern_pool *p = t->pool;
    if (!p || n_items <= 0 || p->staged < 0 || p->staged_items != n_items) return -1;
    const int slot = p->staged;
    const kern_slot *s = &p->slots[slot];
    void *ctx = s->data;
    p->staged_items = 0; /* one region per stage */
    const long long t0 = now_ns();
    const int active = n_items == 1 ? 1 : kern_team_adapt_begin(t, t0);
    const int size = active < n_items ? active : n_items;
    if (size <= 1) {
        note(t, 1);
        for (int i = 0; i < n_items; i++) fn(ctx, i, 0, NULL);
        if (p->trace && n_items > 1) {
            const long long t2 = now_ns();
            trace_region(p, 's', 0, n_items, 1, n_items, t0, t2, t2, 0, 0, 0);
        }
        return 0;
    }
    const uint32_t tag = next_tag(p);
    const unsigned woke = publish(p, tag, n_items, size, NULL, fn, commit, ctx, slot);
    const int mine = work(p, tag, 0);
    const long long t1 = now_ns();
    /* Late: a multiple of the caller's own mean item time in this region. */
    long long steal_ns = STEAL_FACTOR * (t1 - t0) / (mine > 0 ? mine : 1);
    if (steal_ns < STEAL_MIN_NS) steal_ns = STEAL_MIN_NS;
    const long long steals = p->counts.steals;
    wait_items(p, (unsigned)n_items, t1, s, fn, ctx, steal_ns);
    const long long t2 = now_ns();
    /* A region the caller ended by stealing cost at most steal_ns and the
     * stolen items' time: not late, however long the worker stays away. */
    const long long wait = p->counts.steals > steals ? 0 : t2 - t1;
    atomic_exchange_explicit(&p->claim, (uint_fast64_t)tag << 32 | CLOSED, memory_order_acq_rel);
    const int ran = atomic_load_explicit(&p->ran, memory_order_relaxed);
    note(t, ran);
    p->counts.regions++;
    p->counts.staged++;
    const int late = kern_team_adapt_end(t, size, ran, t1 - t0, wait, t2);
    p->counts.late_staged += late;
    if (p->trace) trace_region(p, 's', tag, n_items, size, mine, t0, t1, t2, p->counts.steals - steals, late, woke);
    return 0;
}
