/*
 * The engine's thread pool (src/kernels/team.c): every item of a region
 * runs exactly once whatever the team size, worker numbers stay below the
 * team's thread count, every worker takes part when the items need them
 * all, a team without a pool runs items in order on the caller, the
 * adaptive size follows its policy (driven here with chosen timings, no
 * clock involved), stealable regions end with exact outputs when a worker
 * stalls inside an item and never see their destination written after
 * they returned, a worker stalled once (in a stolen item or in a plain
 * region it made late) is back in the full team for the regions after it
 * (the region trace shows every worker claiming its item), the placement
 * helpers move a thread off its processor and leave its affinity as it
 * was, staged matmuls give the one-thread bits, and an engine's logits are
 * bit for bit the same at 1, 2, 3 and 4 threads (a prefill whose regions
 * fork, then decode steps).
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kernels/team.h"
#include "kernels/team_trace.h"
#include "kernels/placement.h"
#include "kvlm.h"
#include "tensor.h"

#define MAX_ITEMS 300

typedef struct count_job {
    atomic_int runs[MAX_ITEMS];
    atomic_int bad_worker;
    int threads;
} count_job;

static void count_item(void *ctx, int item, int worker) {
    count_job *j = ctx;
    atomic_fetch_add(&j->runs[item], 1);
    if (worker < 0 || worker >= j->threads) atomic_store(&j->bad_worker, 1);
}

/* Many regions of every size from 1 to MAX_ITEMS, back to back (the gaps
 * a step has between regions, and none at all). */
static void test_every_item_once(void **state) {
    (void)state;
    for (int threads = 1; threads <= 4; threads++) {
        kern_team t;
        assert_int_equal(kern_team_open(&t, threads), 0);
        assert_int_equal(t.threads, threads);
        count_job *j = calloc(1, sizeof *j);
        j->threads = threads;
        for (int r = 0; r < 3 * MAX_ITEMS; r++) {
            const int n = 1 + r % MAX_ITEMS;
            for (int i = 0; i < n; i++) atomic_store(&j->runs[i], 0);
            kern_team_run(&t, n, count_item, j);
            for (int i = 0; i < n; i++)
                if (atomic_load(&j->runs[i]) != 1)
                    fail_msg("%d threads, region %d of %d items: item %d ran %d times", threads, r, n, i,
                             atomic_load(&j->runs[i]));
        }
        assert_int_equal(atomic_load(&j->bad_worker), 0);
        assert_true(t.peak >= 1 && t.peak <= threads);
        kern_team_close(&t);
        assert_null(t.pool);
        free(j);
    }
}

typedef struct meet_job {
    atomic_int arrived;
    atomic_int seen[8];
    int n;
} meet_job;

/* Each item waits until every item has started: the region can finish
 * only if `n` different threads take one item each. */
static void meet_item(void *ctx, int item, int worker) {
    (void)item;
    meet_job *j = ctx;
    atomic_fetch_add(&j->seen[worker], 1);
    atomic_fetch_add(&j->arrived, 1);
    while (atomic_load(&j->arrived) < j->n) sched_yield();
}

/* meet_item that gives up after 10 s (a thread missing from the team then
 * shows as another thread claiming two items instead of a hang). */
static void meet_item_bounded(void *ctx, int item, int worker) {
    (void)item;
    meet_job *j = ctx;
    atomic_fetch_add(&j->seen[worker], 1);
    atomic_fetch_add(&j->arrived, 1);
    const double give_up = kvlm_now() + 10;
    for (unsigned k = 1; atomic_load(&j->arrived) < j->n; k++) {
        sched_yield();
        if (!(k & 1023) && kvlm_now() > give_up) break;
    }
}

static void test_every_worker_takes_part(void **state) {
    (void)state;
    for (int threads = 2; threads <= 4; threads++) {
        kern_team t;
        assert_int_equal(kern_team_open(&t, threads), 0);
        assert_int_equal(kern_team_active(&t), threads);
        meet_job j = {.n = threads};
        kern_team_run(&t, threads, meet_item, &j);
        for (int w = 0; w < threads; w++) assert_int_equal(atomic_load(&j.seen[w]), 1);
        assert_int_equal(t.peak, threads);
        kern_team_close(&t);
    }
}

typedef struct order_job {
    int order[16], n, workers_sum;
} order_job;

static void order_item(void *ctx, int item, int worker) {
    order_job *j = ctx;
    j->order[j->n++] = item;
    j->workers_sum += worker;
}

/* {.threads = 3} without kern_team_open: no pool, items in order on the
 * caller (worker 0), and the team records one thread. */
static void test_no_pool_runs_on_caller(void **state) {
    (void)state;
    kern_team t = {.threads = 3};
    order_job j = {0};
    kern_team_run(&t, 10, order_item, &j);
    assert_int_equal(j.n, 10);
    for (int i = 0; i < 10; i++) assert_int_equal(j.order[i], i);
    assert_int_equal(j.workers_sum, 0);
    assert_int_equal(t.peak, 1);
    assert_int_equal(kern_team_active(&t), 1);
}

/* The adaptive size with chosen timings (ns). A region is late when the
 * caller waited more than twice its own time and more than 200 us; a
 * worker that took nothing (the caller ran the region alone) is not late,
 * however long the region. */
static void test_adaptive_policy(void **state) {
    (void)state;
    const long long ms = 1000000;
    kern_team t;
    assert_int_equal(kern_team_open(&t, 3), 0);
    long long now = 1LL << 62; /* far beyond the monotonic clock: no probe falls due in kern_team_run below */
    assert_int_equal(kern_team_adapt_begin(&t, now), 3);
    /* On time: a short wait, a wait under 200 us, a missing worker in a
     * short region and in a long one. */
    for (int i = 0; i < 40; i++) {
        kern_team_adapt_end(&t, 3, 3, 300000, 100000, now);
        kern_team_adapt_end(&t, 3, 3, 50000, 150000, now);
        kern_team_adapt_end(&t, 3, 2, 400000, 0, now);
        kern_team_adapt_end(&t, 3, 1, 5 * ms, 0, now);
    }
    assert_int_equal(kern_team_active(&t), 3);
    /* Late twice among the last 16: still 3; a third time: 2. */
    kern_team_adapt_end(&t, 3, 3, 300000, 2 * ms, now);
    kern_team_adapt_end(&t, 3, 3, 800000, 2 * ms, now);
    assert_int_equal(kern_team_active(&t), 3);
    kern_team_adapt_end(&t, 3, 3, 300000, 2 * ms, now);
    assert_int_equal(kern_team_active(&t), 2);
    /* No probe before KERN_TEAM_PROBE_NS; then one thread more. */
    assert_int_equal(kern_team_adapt_begin(&t, now + KERN_TEAM_PROBE_NS - 1), 2);
    now += KERN_TEAM_PROBE_NS;
    assert_int_equal(kern_team_adapt_begin(&t, now), 3);
    /* The probe's first late region ends it: back to 2, next probe twice as far. */
    kern_team_adapt_end(&t, 3, 3, 300000, 2 * ms, now);
    assert_int_equal(kern_team_active(&t), 2);
    assert_int_equal(kern_team_adapt_begin(&t, now + 2 * KERN_TEAM_PROBE_NS - 1), 2);
    now += 2 * KERN_TEAM_PROBE_NS;
    assert_int_equal(kern_team_adapt_begin(&t, now), 3);
    /* KERN_TEAM_PROBE_OK on-time regions keep the larger size. */
    for (int i = 0; i < KERN_TEAM_PROBE_OK; i++) {
        assert_int_equal(kern_team_adapt_begin(&t, now), 3);
        kern_team_adapt_end(&t, 3, 3, 300000, 10000, now);
    }
    assert_int_equal(kern_team_adapt_begin(&t, now + 100 * KERN_TEAM_PROBE_NS), 3);
    /* Late regions all the time: down to one thread, never below. */
    for (int i = 0; i < 10 * KERN_TEAM_LATE_SHRINK; i++) kern_team_adapt_end(&t, 3, 3, 300000, 5 * ms, now);
    assert_int_equal(kern_team_active(&t), 1);
    /* At one thread a region runs on the caller alone, in order. */
    order_job j = {0};
    kern_team_run(&t, 10, order_item, &j);
    for (int i = 0; i < 10; i++) assert_int_equal(j.order[i], i);
    assert_int_equal(j.workers_sum, 0);
    kern_team_close(&t);
}

/* Stealable regions. Item i of a region writes ITEM_OUT floats,
 * dest[i * ITEM_OUT + k] = in[i] * 1000 + k, with in[] copied into the
 * stage. A worker can be made to stall inside one chosen item until the
 * test releases it after the region returned (at most stall_ns, so a
 * broken pool fails instead of hanging): then it writes STALE values into its
 * private buffer, so a committed stalled result would show in dest. Random
 * stalls (shorter, so some are stolen and some commit) write the right
 * values. */
#define ITEM_OUT 8
#define STALE (-12345.0f)

typedef struct steal_probe {
    atomic_int stall_item;    /* the item a worker stalls in (-1: none) */
    atomic_llong stall_ns;    /* how long at most */
    atomic_int release;       /* set by the test: the stall ends */
    atomic_int stalled;       /* set when a worker entered the stall */
    atomic_int finished;      /* set when it left it */
    atomic_int caller_waits;  /* the caller's first item waits until a worker stalls */
    atomic_uint rng;          /* random stalls: 1 in 8 worker items, 0-1.5 ms (0: off) */
} steal_probe;

typedef struct steal_stage {
    steal_probe *probe;
    float *dest;
    int n;
    float in[]; /* n inputs */
} steal_stage;

static void sleep_ns(long ns) {
    struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
    nanosleep(&ts, NULL);
}

static void steal_item(const void *ctx, int item, int worker, void *out) {
    const steal_stage *j = ctx;
    steal_probe *pr = j->probe;
    float *o = out ? out : j->dest + (size_t)item * ITEM_OUT;
    if (worker == 0 && atomic_exchange(&pr->caller_waits, 0)) /* hold the caller until a worker is inside the stall */
        for (int k = 0; k < 2000 && !atomic_load(&pr->stalled); k++) sleep_ns(500000);
    int stale = 0;
    if (worker != 0 && atomic_load(&pr->stall_item) == item) {
        atomic_store(&pr->stall_item, -1);
        atomic_store(&pr->stalled, 1);
        for (long long waited = 0; !atomic_load(&pr->release) && waited < atomic_load(&pr->stall_ns); waited += 1000000)
            sleep_ns(1000000);
        stale = 1;
    } else if (atomic_load(&pr->rng)) { /* items of 10-40 us, long enough for the workers to take some */
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        const long spin = 10000 + 1000 * (item % 31);
        do clock_gettime(CLOCK_MONOTONIC, &b);
        while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < spin);
    }
    if (!stale && worker != 0 && atomic_load(&pr->rng)) {
        unsigned r = atomic_fetch_add(&pr->rng, 0x9E3779B9u) * 2654435761u;
        if ((r >> 29) == 0) /* 1 in 8 */
            sleep_ns((long)((r >> 8) % 1500000u));
    }
    for (int k = 0; k < ITEM_OUT; k++) o[k] = stale && out ? STALE : j->in[item] * 1000.0f + (float)k;
    if (stale) atomic_store(&pr->finished, 1);
}

static void steal_commit(const void *ctx, int item, const void *out) {
    const steal_stage *j = ctx;
    memcpy(j->dest + (size_t)item * ITEM_OUT, out, ITEM_OUT * sizeof(float));
}

/* Stages and runs one region of n items over dest with inputs in[i] = base + i. */
static void run_steal_region(kern_team *t, steal_probe *pr, float *dest, int n, float base) {
    steal_stage *j = kern_team_stage(t, n, sizeof *j + (size_t)n * sizeof(float), ITEM_OUT * sizeof(float));
    assert_non_null(j);
    j->probe = pr, j->dest = dest, j->n = n;
    for (int i = 0; i < n; i++) j->in[i] = base + (float)i;
    assert_int_equal(kern_team_run_staged(t, n, steal_item, steal_commit), 0);
}

static void assert_region_exact(const float *dest, int n, float base, int region) {
    for (int i = 0; i < n; i++)
        for (int k = 0; k < ITEM_OUT; k++)
            if (dest[i * ITEM_OUT + k] != (base + (float)i) * 1000.0f + (float)k)
                fail_msg("region %d item %d output %d: %g, want %g", region, i, k, dest[i * ITEM_OUT + k],
                         (base + (float)i) * 1000.0f + (float)k);
}

/* A worker that stalls inside an item until the region returned: the caller steals the item,
 * the region returns with exact outputs while the worker is still in it, and
 * the stalled worker's result is dropped, never written to the
 * destination (a canary written after the region returned survives the
 * worker's return). The next regions run normally. */
static void test_stall_is_stolen(void **state) {
    (void)state;
    for (int threads = 2; threads <= 3; threads++) {
        kern_team t;
        assert_int_equal(kern_team_open(&t, threads), 0);
        steal_probe pr = {.stall_item = -1};
        const int n = 16;
        float dest[16 * ITEM_OUT], after[16 * ITEM_OUT];
        int stolen_once = 0;
        for (int attempt = 0; attempt < 20 && !stolen_once; attempt++) {
            /* the last item: the caller takes items from the front, so a worker holds it unless the caller took all */
            atomic_store(&pr.stall_item, n - 1);
            atomic_store(&pr.stall_ns, 10000000000LL);
            atomic_store(&pr.release, 0);
            atomic_store(&pr.stalled, 0);
            atomic_store(&pr.finished, 0);
            atomic_store(&pr.caller_waits, 1);
            kern_team_counts before, c;
            kern_team_get_counts(&t, &before);
            memset(dest, 0, sizeof dest);
            run_steal_region(&t, &pr, dest, n, 3.0f);
            if (!atomic_load(&pr.stalled)) continue; /* no worker reached the item in time: try again */
            assert_region_exact(dest, n, 3.0f, attempt);
            kern_team_get_counts(&t, &c);
            assert_int_equal(c.steals - before.steals, 1);
            assert_false(atomic_load(&pr.finished)); /* returned while the worker was still asleep in the item */
            for (int i = 0; i < n * ITEM_OUT; i++) dest[i] = -1.0f;
            atomic_store(&pr.release, 1);
            while (!atomic_load(&pr.finished)) sleep_ns(1000000);
            for (int k = 0; k < 200; k++) { /* the dropped result is counted once the worker is back */
                kern_team_get_counts(&t, &c);
                if (c.discarded > before.discarded) break;
                sleep_ns(1000000);
            }
            assert_int_equal(c.discarded - before.discarded, 1);
            for (int i = 0; i < n * ITEM_OUT; i++)
                if (dest[i] != -1.0f) fail_msg("%d threads: output %d written after the region returned", threads, i);
            stolen_once = 1;
        }
        assert_true(stolen_once);
        /* the worker is back: later regions run on the team as before */
        for (int r = 0; r < 50; r++) {
            run_steal_region(&t, &pr, after, n, (float)r);
            assert_region_exact(after, n, (float)r, r);
        }
        kern_team_close(&t);
    }
}

/* Plain regions where one worker stalls once: the caller holds its first
 * item until a worker is inside the stall, so the region waits for it. */
typedef struct plain_stall {
    atomic_int stall_once, stalled, caller_waits;
    atomic_int runs[MAX_ITEMS];
} plain_stall;

static void plain_stall_item(void *ctx, int item, int worker) {
    plain_stall *j = ctx;
    if (worker == 0 && atomic_exchange(&j->caller_waits, 0))
        for (int k = 0; k < 2000 && !atomic_load(&j->stalled); k++) sleep_ns(500000);
    if (worker != 0 && atomic_exchange(&j->stall_once, 0)) {
        atomic_store(&j->stalled, 1);
        sleep_ns(100000000);
    }
    atomic_fetch_add(&j->runs[item], 1);
}

/* Regions of `threads` items that each wait for all the others (meet_item):
 * the team is whole again when every thread claims exactly one item of
 * each, as the trace records (items and processor of every thread). On a
 * busy machine other processes can make regions late and shrink the team
 * (the stall alone does not: test_adaptive_policy); then small regions run
 * until the adaptive size's probe has it whole again (at most 30 s). */
static void assert_whole_team(kern_team *t, int threads, int regions, const char *after) {
    count_job *cj = calloc(1, sizeof *cj);
    cj->threads = threads;
    for (int r = 0; r < regions; r++) {
        const double give_up = kvlm_now() + 30;
        while (kern_team_active(t) != threads && kvlm_now() < give_up) {
            kern_team_run(t, 8, count_item, cj);
            sleep_ns(1000000);
        }
        if (kern_team_active(t) != threads)
            fail_msg("%d threads after %s: adaptive size %d before region %d", threads, after, kern_team_active(t), r);
        meet_job j = {.n = threads};
        kern_team_run(t, threads, meet_item_bounded, &j);
        size_t n;
        const kern_trace_rec *rec = kern_team_trace(t, &n);
        assert_non_null(rec);
        rec += n - 1;
        assert_int_equal(rec->kind, 'p');
        assert_int_equal(rec->n, threads);
        assert_int_equal(rec->size, threads);
        for (int w = 0; w < threads; w++) {
            if (rec->items[w] != 1 || atomic_load(&j.seen[w]) != 1)
                fail_msg("%d threads after %s, region %d: thread %d claimed %u items (ran %d), want 1", threads, after,
                         r, w, rec->items[w], atomic_load(&j.seen[w]));
            /* a processor number where the system gives one (sched_getcpu), -1 elsewhere */
            if (KVLM_HAVE_AFFINITY)
                assert_true(rec->cpu[w] >= 0 && rec->cpu[w] < KERN_CPU_MAX);
            else
                assert_int_equal(rec->cpu[w], -1);
            assert_true(rec->start[w] >= 0);
        }
    }
    assert_int_equal(atomic_load(&cj->bad_worker), 0);
    free(cj);
}

/* A worker stalled once inside an item, first of a staged region (until
 * the region returned: the caller steals the item, and the region is not
 * late) and then of a plain one (100 ms: the region waits, and the trace
 * records it late): the stalled worker claims its item of every region
 * after it. */
static void test_stalled_worker_rejoins(void **state) {
    (void)state;
    char path[] = "/tmp/kvlm_test_team_trace_XXXXXX";
    const int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    for (int threads = 2; threads <= 3; threads++) {
        setenv("KVLM_TEAM_TRACE", path, 1);
        kern_team t;
        assert_int_equal(kern_team_open(&t, threads), 0);
        unsetenv("KVLM_TEAM_TRACE");
        size_t n0;
        kern_team_trace(&t, &n0);
        assert_int_equal(n0, 0);
        assert_whole_team(&t, threads, 5, "opening");

        /* staged: the stalled item is stolen */
        steal_probe pr = {.stall_item = -1};
        const int n = 16;
        float dest[16 * ITEM_OUT];
        int stolen = 0;
        for (int attempt = 0; attempt < 20 && !stolen; attempt++) {
            atomic_store(&pr.stall_item, n - 1);
            atomic_store(&pr.stall_ns, 10000000000LL);
            atomic_store(&pr.release, 0);
            atomic_store(&pr.stalled, 0);
            atomic_store(&pr.finished, 0);
            atomic_store(&pr.caller_waits, 1);
            run_steal_region(&t, &pr, dest, n, 5.0f);
            assert_region_exact(dest, n, 5.0f, attempt);
            if (!atomic_load(&pr.stalled)) continue;
            size_t nr;
            const kern_trace_rec *rec = kern_team_trace(&t, &nr);
            assert_int_equal(rec[nr - 1].kind, 's');
            assert_int_equal(rec[nr - 1].steals, 1);
            assert_int_equal(rec[nr - 1].late, 0);
            atomic_store(&pr.release, 1);
            while (!atomic_load(&pr.finished)) sleep_ns(1000000);
            stolen = 1;
        }
        assert_true(stolen);
        assert_whole_team(&t, threads, 20, "a stolen stall");

        /* plain: the region waits for the stalled worker and counts as late */
        plain_stall *ps = calloc(1, sizeof *ps);
        int late = 0;
        for (int attempt = 0; attempt < 20 && !late; attempt++) {
            atomic_store(&ps->stall_once, 1);
            atomic_store(&ps->stalled, 0);
            atomic_store(&ps->caller_waits, 1);
            for (int i = 0; i < 8; i++) atomic_store(&ps->runs[i], 0);
            kern_team_run(&t, 8, plain_stall_item, ps);
            for (int i = 0; i < 8; i++) assert_int_equal(atomic_load(&ps->runs[i]), 1);
            if (!atomic_load(&ps->stalled)) continue; /* the caller ran every item: try again */
            size_t nr;
            const kern_trace_rec *rec = kern_team_trace(&t, &nr);
            rec += nr - 1;
            assert_int_equal(rec->size, threads);
            int workers_items = 0;
            for (int w = 1; w < threads; w++) workers_items += rec->items[w];
            assert_true(workers_items >= 1);
            assert_int_equal(rec->items[0] + workers_items, 8);
            late = rec->late;
        }
        assert_true(late);
        assert_whole_team(&t, threads, 20, "a late region");
        free(ps);
        kern_team_close(&t);
    }
    /* the trace was written at close: one block per team, a header each */
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[512];
    int headers = 0, records = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "# kvlm team trace:", 18)) headers++;
        else if (line[0] != '#') records++;
    }
    fclose(f);
    unlink(path);
    assert_int_equal(headers, 2);
    assert_true(records >= 2 * (5 + 1 + 20 + 1 + 20));
}

/* The placement helpers: the other processors' clock ticks are counted
 * for every processor of the affinity mask but the one named, and a move
 * off the current processor lands elsewhere and leaves the mask as it
 * was (only when the mask has two processors or more). Without an
 * affinity call (KVLM_POSIX_ONLY) there is no processor number, no count
 * and no move. */
static void test_placement_helpers(void **state) {
    (void)state;
    kern_cpu_mask had;
    if (!KVLM_HAVE_AFFINITY) {
        assert_int_equal(kern_affinity_mask(&had), -1);
        assert_int_equal(kern_cpu_now(), -1);
        long long idle = -1, total = -1;
        assert_int_equal(kern_other_idle(0, &idle, &total), 0);
        assert_true(idle == 0 && total == 0);
        assert_int_equal(kern_move_off(0), 0);
        return;
    }
    assert_int_equal(kern_affinity_mask(&had), 0);
    const int cpu = kern_cpu_now(), allowed = kern_mask_count(&had);
    assert_true(cpu >= 0);
    long long idle = -1, total = -1;
    const int others = kern_other_idle(cpu, &idle, &total);
    assert_int_equal(others, kern_mask_has(&had, cpu) ? allowed - 1 : allowed);
    if (others) assert_true(idle >= 0 && total >= idle && total > 0);
    if (allowed < 2) {
        assert_int_equal(kern_move_off(cpu), 0);
        return;
    }
    for (int k = 0; k < 5; k++) {
        const int from = kern_cpu_now();
        assert_int_equal(kern_move_off(from), 1);
        assert_int_not_equal(kern_cpu_now(), from); /* until the scheduler moves it again: at once is unlikely */
        kern_cpu_mask now;
        assert_int_equal(kern_affinity_mask(&now), 0);
        assert_memory_equal(&now, &had, sizeof now);
    }
}

/* Many staged regions, interleaved with plain ones, while workers stall
 * at random (1 in 8 items, up to 1.5 ms; every stall's result is STALE):
 * outputs exact after every region, and no destination written after its
 * region returned (each region has its own destination, overwritten with
 * a canary once checked; the canaries are checked after the team closed,
 * which waits for every worker). The stalls also make regions late, and
 * the team may shrink to the caller alone until its next probe (0.2-3.2 s
 * later): on a slow build or a busy machine 600 regions can pass with no
 * worker item to steal, so the regions go on (up to MAX_REGIONS, 30 s)
 * until one was stolen. */
static void test_random_stalls(void **state) {
    (void)state;
    enum { REGIONS = 600, MAX_REGIONS = 20000, N = 24 };
    for (int threads = 2; threads <= 4; threads += 2) {
        kern_team t;
        assert_int_equal(kern_team_open(&t, threads), 0);
        steal_probe pr = {.stall_item = -1, .rng = 12345};
        float *dest = malloc((size_t)MAX_REGIONS * N * ITEM_OUT * sizeof(float));
        assert_non_null(dest);
        count_job *cj = calloc(1, sizeof *cj);
        cj->threads = threads;
        const double t0 = kvlm_now();
        int r; /* after the loop: the regions run, each with its own destination */
        for (r = 0; r < MAX_REGIONS; r++) {
            if (r >= REGIONS) {
                kern_team_counts so_far;
                kern_team_get_counts(&t, &so_far);
                if (so_far.steals > 0 || kvlm_now() - t0 > 30) break;
            }
            const int n = 2 + r % (N - 1);
            float *d = dest + (size_t)r * N * ITEM_OUT;
            run_steal_region(&t, &pr, d, n, (float)(r * 7));
            assert_region_exact(d, n, (float)(r * 7), r);
            for (int i = 0; i < N * ITEM_OUT; i++) d[i] = -2.0f;
            if (r % 5 == 0) { /* a plain region between staged ones */
                for (int i = 0; i < n; i++) atomic_store(&cj->runs[i], 0);
                kern_team_run(&t, n, count_item, cj);
                for (int i = 0; i < n; i++) assert_int_equal(atomic_load(&cj->runs[i]), 1);
            }
        }
        kern_team_counts c;
        kern_team_get_counts(&t, &c);
        kern_team_close(&t);
        for (size_t i = 0; i < (size_t)r * N * ITEM_OUT; i++)
            if (dest[i] != -2.0f) fail_msg("%d threads: output %zu written after its region returned", threads, i);
        /* stalls were stolen, and every drop is a steal (a worker may drop the last ones after the counts were read) */
        assert_true(c.steals > 0);
        assert_true(c.discarded <= c.steals);
        assert_int_equal(atomic_load(&cj->bad_worker), 0);
        free(dest);
        free(cj);
    }
}

/* kern_matmul stages decode-sized products (a copy of x) and those with a
 * prepared x (int8 activations), and their items may be stolen: at 3
 * threads on this machine's cores, many products in f32 and Q8_0 (with the
 * int8 kernels where the CPU has them) give the one-thread bits exactly,
 * whoever computed each item, and none reads x after it returned. */
static void test_matmul_staged_exact(void **state) {
    (void)state;
    const int N = 1000, K = 256, MAXM = 40;
    const int Ms[] = {1, 3, 16, MAXM};
    float *wf = malloc((size_t)N * K * sizeof(float)), *x = malloc((size_t)MAXM * K * sizeof(float));
    float *bias = malloc((size_t)N * sizeof(float));
    float *ref = malloc((size_t)MAXM * N * sizeof(float)), *got = malloc((size_t)MAXM * N * sizeof(float));
    const size_t qrow = dtype_row_bytes(KVLM_Q8_0, K, NULL);
    unsigned char *wq = malloc((size_t)N * qrow);
    uint32_t s = 11;
    for (int i = 0; i < N * K; i++) wf[i] = (float)((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    for (int n = 0; n < N; n++) quant_quantize_row(KVLM_Q8_0, wf + (size_t)n * K, K, wq + (size_t)n * qrow);
    for (int i = 0; i < N; i++) bias[i] = (float)i / 1000.0f;
    const kern_matrix ws[] = {{KVLM_F32, wf, N, K, NULL, 0}, {KVLM_Q8_0, wq, N, K, NULL, 0}};
    const kern_ops *ops = kern_select(KVLM_ISA_AUTO);
    kern_team one = {.threads = 1}, three;
    assert_int_equal(kern_team_open(&three, 3), 0);
    for (int wi = 0; wi < 2; wi++)
        for (int mi = 0; mi < 4; mi++) {
            const int M = Ms[mi];
            for (int rep = 0; rep < 40; rep++) {
                for (int i = 0; i < M * K; i++) x[i] = (float)((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
                kern_matmul(ops, &one, x, M, &ws[wi], bias, ref, N);
                kern_matmul(ops, &three, x, M, &ws[wi], bias, got, N);
                if (memcmp(ref, got, (size_t)M * N * sizeof(float)))
                    fail_msg("%s M %d rep %d: 3 threads differ from 1", kvlm_dtype_name(ws[wi].dtype), M, rep);
            }
        }
    kern_team_counts c;
    kern_team_get_counts(&three, &c);
    assert_true(c.staged >= 2 * 3 * 40); /* every product with M <= 16 at least */
    kern_team_close(&three);
    free(wf), free(wq), free(x), free(bias), free(ref), free(got);
}

/* Prefill (logits of every position) and decode steps of one sequence at
 * `threads` threads; returns the logits, prefill rows first. */
static float *run_engine(kvlm_model *m, int threads, int n_prompt, int n_decode) {
    const kvlm_config *c = kvlm_model_config(m);
    kvlm_error err;
    kvlm_kv *kv = kvlm_kv_create(m, NULL, &err);
    assert_non_null(kv);
    kvlm_engine *e = kvlm_engine_create(m, kv, &(kvlm_engine_options){.threads = threads}, &err);
    if (!e) fail_msg("%s", err.msg);
    assert_int_equal(kvlm_engine_threads(e), threads);
    const int seq = kvlm_kv_seq_new(kv, &err);
    assert_true(seq >= 0);
    int32_t toks[64];
    uint32_t x = 77;
    for (int i = 0; i < n_prompt + n_decode; i++) toks[i] = (int32_t)((x = x * 1664525u + 1013904223u) >> 8) % c->vocab_size;
    const size_t V = (size_t)c->vocab_size;
    float *out = malloc((size_t)(n_prompt + n_decode) * V * sizeof(float));
    kvlm_batch_item it = {seq, toks, n_prompt, 1};
    if (kvlm_engine_step(e, &it, 1, out, &err)) fail_msg("%s", err.msg);
    for (int i = 0; i < n_decode; i++) {
        it = (kvlm_batch_item){seq, &toks[n_prompt + i], 1, 0};
        if (kvlm_engine_step(e, &it, 1, out + (size_t)(n_prompt + i) * V, &err)) fail_msg("%s", err.msg);
    }
    const int used = kvlm_engine_threads_used(e);
    assert_true(used >= 1 && used <= threads);
    kvlm_engine_free(e);
    kvlm_kv_free(kv);
    return out;
}

static void test_logits_same_at_any_thread_count(void **state) {
    (void)state;
    const char *presets[] = {"gpt2-tiny", "llama-tiny"};
    const kvlm_dtype dtypes[] = {KVLM_F32, KVLM_Q8_0};
    for (int p = 0; p < 2; p++)
        for (int d = 0; d < 2; d++) {
            kvlm_error err;
            kvlm_model *m = kvlm_model_synthetic(presets[p], dtypes[d], 5, NULL, &err);
            if (!m) fail_msg("%s", err.msg);
            const int n_ctx = kvlm_model_config(m)->n_ctx, n_decode = 6, n_prompt = n_ctx - n_decode;
            const size_t n = (size_t)n_ctx * kvlm_model_config(m)->vocab_size;
            float *ref = run_engine(m, 1, n_prompt, n_decode);
            for (int threads = 2; threads <= 4; threads++) {
                float *got = run_engine(m, threads, n_prompt, n_decode);
                if (memcmp(got, ref, n * sizeof(float)))
                    fail_msg("%s %s: logits at %d threads differ from 1 thread", presets[p], kvlm_dtype_name(dtypes[d]),
                             threads);
                free(got);
            }
            free(ref);
            kvlm_model_free(m);
        }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_item_once),
        cmocka_unit_test(test_every_worker_takes_part),
        cmocka_unit_test(test_no_pool_runs_on_caller),
        cmocka_unit_test(test_adaptive_policy),
        cmocka_unit_test(test_stall_is_stolen),
        cmocka_unit_test(test_stalled_worker_rejoins),
        cmocka_unit_test(test_placement_helpers),
        cmocka_unit_test(test_random_stalls),
        cmocka_unit_test(test_matmul_staged_exact),
        cmocka_unit_test(test_logits_same_at_any_thread_count),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
