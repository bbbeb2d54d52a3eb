/*
 * The engine's live view (see engine_view.h): the snapshot written by hand
 * into a reused buffer (tens of microseconds of the engine thread's CPU
 * time; docs/engine-view.md, "Cost"), the per-second history ring, and the
 * snapshot's own build-time statistics.
 */
#include "server/engine_view.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/srv.h"

#define BUILD_INTERVAL 0.1 /* seconds between snapshots while requests run */
#define HISTORY 300        /* seconds kept */
#define BUILD_HIST_US 2000 /* build-time histogram: 1 us buckets, then one overflow bucket */

typedef struct second {
    long long t;                 /* Unix second */
    double ttft_ms, tpot_ms;     /* medians; NAN: no sample */
    double tok_s;                /* tokens generated in the second; NAN: no sample */
    int running, waiting, blocks_used;   /* peaks over the second */
    int sampled;                 /* the engine published during it */
} second;

typedef struct samples {
    double *v;
    int n, cap;
} samples;

struct engine_view {
    /* engine thread only */
    double last_build;
    uint64_t last_sig;
    int built;
    int *refs;
    unsigned char *cached;
    char *text;                  /* the per-block parts of a snapshot, written here first */
    size_t n_refs;
    kvlm_sched_choice_info *choices;
    int cap_choices;
    char *model_json;            /* the model name as a JSON string */
    sbuf spare;                  /* the buffer the next snapshot is written into */
    second cur;                  /* the second being filled */
    samples ttft, tpot;
    uint64_t gen_mark;           /* generated tokens when cur began */
    uint64_t requests;
    uint64_t builds;
    double build_us_sum;
    uint32_t build_hist[BUILD_HIST_US + 1];
    /* under the server's mu */
    sbuf snap;
    second ring[HISTORY];
    int ring_head, ring_len;     /* oldest entry, entries */
};

engine_view *view_create(void) {
    engine_view *v = calloc(1, sizeof *v);
    if (v) v->cur.t = -1;
    return v;
}

void view_free(engine_view *v) {
    if (!v) return;
    free(v->refs);
    free(v->cached);
    free(v->text);
    free(v->choices);
    free(v->model_json);
    free(v->ttft.v);
    free(v->tpot.v);
    sbuf_free(&v->spare);
    sbuf_free(&v->snap);
    free(v);
}

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The engine thread's CPU time: what a snapshot costs it, whatever other
 * processes take of the machine meanwhile. */
static double thread_cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void add_sample(samples *s, double x) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        double *v = realloc(s->v, (size_t)cap * sizeof *v);
        if (!v) return; /* the median of the samples kept */
        s->v = v;
        s->cap = cap;
    }
    s->v[s->n++] = x;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median in milliseconds (NAN without samples); empties s. */
static double take_median_ms(samples *s) {
    if (!s->n) return NAN;
    qsort(s->v, (size_t)s->n, sizeof *s->v, cmp_double);
    double m = s->n % 2 ? s->v[s->n / 2] : 0.5 * (s->v[s->n / 2 - 1] + s->v[s->n / 2]);
    s->n = 0;
    return m * 1e3;
}

void view_observe_ttft(engine_view *v, double seconds) { add_sample(&v->ttft, seconds); }
void view_observe_tpot(engine_view *v, double seconds) { add_sample(&v->tpot, seconds); }
void view_count_request(engine_view *v) { v->requests++; }

/* ------------------------------------------------------------ history */

static void ring_push_locked(engine_view *v, const second *x) {
    const int at = (v->ring_head + v->ring_len) % HISTORY;
    v->ring[at] = *x;
    if (v->ring_len < HISTORY) v->ring_len++;
    else v->ring_head = (v->ring_head + 1) % HISTORY;
}

/* Closes the seconds before `now_sec`: the current one with its medians
 * and token count, any the engine slept through as empty. */
static void roll_seconds(srv *s, engine_view *v, long long now_sec, const kvlm_sched_stats *st) {
    if (v->cur.t == now_sec) return;
    if (v->cur.t >= 0) {
        second done = v->cur;
        done.ttft_ms = take_median_ms(&v->ttft);
        done.tpot_ms = take_median_ms(&v->tpot);
        done.tok_s = (double)(st->generated_tokens - v->gen_mark);
        long long gap = now_sec - v->cur.t - 1;
        if (gap > HISTORY) gap = HISTORY;
        pthread_mutex_lock(&s->mu);
        ring_push_locked(v, &done);
        for (long long k = 1; k <= gap; k++)
            ring_push_locked(v, &(second){.t = now_sec - gap - 1 + k, .ttft_ms = NAN, .tpot_ms = NAN, .tok_s = NAN});
        pthread_mutex_unlock(&s->mu);
    } else {
        v->ttft.n = v->tpot.n = 0;
    }
    v->gen_mark = st->generated_tokens;
    v->cur = (second){.t = now_sec};
}

static void put_num(sbuf *o, double x, const char *fmt) {
    if (isnan(x)) sbuf_adds(o, "null");
    else sbuf_printf(o, fmt, x);
}

char *view_history(srv *s, size_t *len) {
    engine_view *v = s->view;
    static const char *const names[] = {"t", "ttft_ms_p50", "tpot_ms_p50", "output_tok_s", "running", "waiting",
                                        "kv_blocks_used"};
    sbuf o = {0};
    sbuf_printf(&o, "{\"interval_s\":1");
    pthread_mutex_lock(&s->mu);
    for (int f = 0; f < 7; f++) {
        sbuf_printf(&o, ",\"%s\":[", names[f]);
        for (int i = 0; i < v->ring_len; i++) {
            const second *x = &v->ring[(v->ring_head + i) % HISTORY];
            if (i) sbuf_add(&o, ",", 1);
            switch (f) {
            case 0: sbuf_printf(&o, "%lld", x->t); break;
            case 1: put_num(&o, x->ttft_ms, "%.3f"); break;
            case 2: put_num(&o, x->tpot_ms, "%.3f"); break;
            case 3: put_num(&o, x->tok_s, "%.0f"); break;
            case 4: put_num(&o, x->sampled ? x->running : NAN, "%.0f"); break;
            case 5: put_num(&o, x->sampled ? x->waiting : NAN, "%.0f"); break;
            default: put_num(&o, x->sampled ? x->blocks_used : NAN, "%.0f"); break;
            }
        }
        sbuf_add(&o, "]", 1);
    }
    pthread_mutex_unlock(&s->mu);
    sbuf_add(&o, "}", 1);
    if (o.failed) {
        sbuf_free(&o);
        return NULL;
    }
    *len = o.len;
    return o.data;
}

/* ------------------------------------------------------------ snapshot */

static int grow_buffers(engine_view *v, size_t n_blocks, int n_choices) {
    if (n_blocks > v->n_refs) {
        int *r = realloc(v->refs, n_blocks * sizeof *r);
        if (!r) return -1;
        v->refs = r;
        unsigned char *c = realloc(v->cached, n_blocks);
        if (!c) return -1;
        v->cached = c;
        char *t = realloc(v->text, n_blocks * 12);
        if (!t) return -1;
        v->text = t;
        v->n_refs = n_blocks;
    }
    if (n_choices > v->cap_choices) {
        kvlm_sched_choice_info *c = realloc(v->choices, (size_t)n_choices * sizeof *c);
        if (!c) return -1;
        v->choices = c;
        v->cap_choices = n_choices;
    }
    return 0;
}

/* 64-bit FNV-1a over the counters whose change makes a new snapshot. */
static uint64_t signature(const kvlm_sched_stats *st, const kvlm_kv_stats *kv, int inbox) {
    const uint64_t x[] = {st->steps, (uint64_t)st->running, (uint64_t)st->waiting, st->finished, st->preemptions,
                          kv->blocks_used, kv->blocks_cached, kv->blocks_shared, kv->tokens_stored,
                          kv->prefix_queries, kv->seqs, (uint64_t)inbox};
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) h = (h ^ x[i]) * 1099511628211ull;
    return h;
}

static double build_p99_us(const engine_view *v) {
    uint64_t want = (uint64_t)ceil(0.99 * (double)v->builds), seen = 0;
    for (int i = 0; i <= BUILD_HIST_US; i++)
        if ((seen += v->build_hist[i]) >= want) return i;
    return BUILD_HIST_US;
}

/* A count or block id (>= 0, at most 10 digits) as decimal; returns the length. */
static size_t put_count(char *out, int x) {
    char tmp[12];
    size_t n = 0;
    unsigned u = x > 0 ? (unsigned)x : 0;
    do tmp[n++] = (char)('0' + u % 10); while (u /= 10);
    for (size_t i = 0; i < n; i++) out[i] = tmp[n - 1 - i];
    return n;
}

/* A block table's entries, comma-separated (-1: released by a sliding window). */
static void write_table(sbuf *o, const int *table, int nb) {
    for (int b = 0; b < nb; b++) {
        char num[16];
        size_t n = 0;
        if (b) num[n++] = ',';
        if (table[b] < 0) num[n++] = '-', num[n++] = '1';
        else n += put_count(num + n, table[b]);
        sbuf_add(o, num, n);
    }
}

static void write_choice(sbuf *o, srv *s, const kvlm_sched_choice_info *c, double now, int n_slices) {
    const prompt_run *pr = c->user;
    const job *j = pr->j;
    const int api_choice = pr->index * j->rq.n + c->choice;
    if (!c->running) {
        sbuf_printf(o, "{\"id\":\"%s\",\"choice\":%d,\"prompt_tokens\":%d,\"generated\":%d,\"queued_ms\":%.1f}", j->id,
                    api_choice, c->n_prompt, c->generated, (now - j->t_arrival) * 1e3);
        return;
    }
    const int decode = c->generated > 0 && c->n_tokens - c->n_computed <= 1;
    sbuf_printf(o,
                "{\"id\":\"%s\",\"choice\":%d,\"state\":\"%s\",\"prompt_tokens\":%d,\"generated\":%d,"
                "\"max_tokens\":%d,\"cached_prompt_tokens\":%d,\"kv_tokens\":%d,\"blocks\":[",
                j->id, api_choice, decode ? "decode" : "prefill", c->n_prompt, c->generated, c->max_tokens, pr->cached,
                kvlm_kv_seq_len(s->kv, c->seq, NULL));
    const int *table;
    const int nb = kvlm_kv_seq_blocks(s->kv, c->seq, &table, NULL);
    write_table(o, table, nb);
    sbuf_adds(o, "]");
    if (n_slices > 1) { /* every layer slice's own table, slice 0 first */
        sbuf_adds(o, ",\"slices\":[");
        for (int sl = 0; sl < n_slices; sl++) {
            const int ns = kvlm_kv_seq_slice_blocks(s->kv, c->seq, sl, &table, NULL);
            sbuf_adds(o, sl ? ",[" : "[");
            write_table(o, table, ns > 0 ? ns : 0);
            sbuf_adds(o, "]");
        }
        sbuf_adds(o, "]");
    }
    sbuf_adds(o, "}");
}

/* Lookups that restored from tier t (0: memory only, 1: disk). */
static uint64_t restores_in(const kvlm_kv_stats *kv, int t) {
    uint64_t n = 0;
    for (int b = 0; b < KVLM_KV_RESTORE_BUCKETS; b++) n += kv->tier_restore_buckets[t][b];
    return n;
}

static void build(srv *s, engine_view *v, const kvlm_sched_stats *st, const kvlm_kv_stats *kv) {
    const double t0 = thread_cpu_now();
    const size_t nb = kv->blocks_total;
    const int nc = kvlm_sched_list_choices(s->sched, NULL, 0);
    if (!v->model_json) {
        json_t *name = json_string(s->model_name);
        v->model_json = name ? json_dumps(name, JSON_ENCODE_ANY) : NULL;
        json_decref(name);
    }
    if (!v->model_json || grow_buffers(v, nb, nc)) return; /* out of memory: the last snapshot stays */
    if (kvlm_kv_block_states(s->kv, v->refs, v->cached, v->n_refs, NULL)) return;
    kvlm_sched_list_choices(s->sched, v->choices, nc);
    sbuf *o = &v->spare;
    o->len = 0;
    o->failed = 0;
    kvlm_kv_info info;
    kvlm_kv_get_info(s->kv, &info);
    const int bs = info.block_size;
    sbuf_printf(o,
                "{\"time\":%.3f,\"model\":%s,\"step\":%llu,\"kv\":{\"block_size\":%d,\"n_blocks\":%zu,"
                "\"dtype\":\"%s\",\"bytes_per_token\":%zu,\"bytes_per_block\":%zu,\"blocks\":\"",
                wall_now(), v->model_json, (unsigned long long)st->steps, bs, nb, kvlm_dtype_name(info.dtype),
                kv->bytes_per_token, kv->block_bytes);
    /* the per-block parts (about 10 us per thousand blocks): written by hand, added at once */
    for (size_t b = 0; b < nb; b++)
        v->text[b] = v->refs[b] > 1 ? 's' : v->refs[b] == 1 ? 'u' : v->cached[b] ? 'c' : '.';
    sbuf_add(o, v->text, nb);
    sbuf_adds(o, "\",\"refcounts\":[");
    size_t at = 0;
    for (size_t b = 0; b < nb; b++) {
        if (b) v->text[at++] = ',';
        at += put_count(v->text + at, v->refs[b]);
    }
    sbuf_add(o, v->text, at);
    const size_t reserved = kv->blocks_used * (size_t)bs;
    sbuf_printf(o,
                "],\"blocks_used\":%zu,\"blocks_shared\":%zu,\"blocks_cached\":%zu,\"blocks_free\":%zu,"
                "\"tokens_held\":%zu,\"tokens_reserved\":%zu,\"utilisation\":%.4f,"
                "\"prefix_cache\":{\"lookups\":%llu,\"hits\":%llu,\"hit_tokens\":%llu,\"cached_blocks\":%zu,"
                "\"evictions\":%llu},",
                kv->blocks_used, kv->blocks_shared, kv->blocks_cached, kv->blocks_free, kv->tokens_stored, reserved,
                reserved ? (double)kv->tokens_stored / (double)reserved : 0.0,
                (unsigned long long)kv->prefix_queries, (unsigned long long)kv->prefix_hits,
                (unsigned long long)kv->prefix_hit_tokens, kv->blocks_cached, (unsigned long long)kv->evictions);
    sbuf_printf(o,
                "\"tiers\":{\"ram_hits\":%llu,\"disk_hits\":%llu,\"ram_blocks\":%zu,\"ram_bytes\":%zu,"
                "\"disk_files\":%zu,\"disk_bytes\":%zu,\"bytes_read\":%llu,\"bytes_written\":%llu,"
                "\"writes_dropped\":%llu,\"write_errors\":%llu,\"bad_files\":%llu,\"restores\":%llu,"
                "\"restore_seconds\":%.6f,\"restore_by_tier\":{\"ram\":{\"restores\":%llu,\"seconds\":%.6f},"
                "\"disk\":{\"restores\":%llu,\"seconds\":%.6f}}}},\"running\":[",
                (unsigned long long)kv->tier_ram_hits, (unsigned long long)kv->tier_disk_hits, kv->tier_ram_blocks,
                kv->tier_ram_bytes, kv->tier_disk_files, kv->tier_disk_bytes,
                (unsigned long long)kv->tier_bytes_read, (unsigned long long)kv->tier_bytes_written,
                (unsigned long long)kv->tier_writes_dropped, (unsigned long long)kv->tier_write_errors,
                (unsigned long long)kv->tier_bad_files, (unsigned long long)kv->tier_restores,
                (double)kv->tier_restore_ns * 1e-9, (unsigned long long)restores_in(kv, 0),
                (double)kv->tier_restore_ns_by[0] * 1e-9, (unsigned long long)restores_in(kv, 1),
                (double)kv->tier_restore_ns_by[1] * 1e-9);
    const double now = kvlm_now();
    int first = 1;
    for (int pass = 1; pass >= 0; pass--) {
        if (!pass) sbuf_adds(o, "],\"waiting\":[");
        first = 1;
        for (int i = 0; i < nc; i++) {
            if (v->choices[i].running != pass) continue;
            if (!first) sbuf_add(o, ",", 1);
            first = 0;
            write_choice(o, s, &v->choices[i], now, info.n_slices);
        }
    }
    sbuf_printf(o,
                "],\"totals\":{\"requests\":%llu,\"tokens_generated\":%llu,\"prompt_tokens\":%llu,"
                "\"cached_prompt_tokens\":%llu,\"preemptions\":%llu,\"finished\":%llu},"
                "\"snapshot\":{\"builds\":%llu,\"build_us_mean\":%.2f,\"build_us_p99\":%.0f}}",
                (unsigned long long)v->requests, (unsigned long long)st->generated_tokens,
                (unsigned long long)st->prompt_tokens, (unsigned long long)st->cached_prompt_tokens,
                (unsigned long long)st->preemptions, (unsigned long long)st->finished, (unsigned long long)v->builds,
                v->builds ? v->build_us_sum / (double)v->builds : 0.0, v->builds ? build_p99_us(v) : 0.0);
    if (o->failed) return;
    pthread_mutex_lock(&s->mu);
    const sbuf old = v->snap;
    v->snap = *o;
    *o = old;
    pthread_mutex_unlock(&s->mu);
    const double us = (thread_cpu_now() - t0) * 1e6;
    v->builds++;
    v->build_us_sum += us;
    v->build_hist[us < BUILD_HIST_US ? (int)us : BUILD_HIST_US]++;
}

void view_update(srv *s, const kvlm_sched_stats *st, const kvlm_kv_stats *kv, int inbox) {
    engine_view *v = s->view;
    const double now = kvlm_now();
    roll_seconds(s, v, (long long)floor(wall_now()), st);
    /* the second's peaks */
    const int waiting = st->waiting + inbox;
    if (!v->cur.sampled || st->running > v->cur.running) v->cur.running = st->running;
    if (!v->cur.sampled || waiting > v->cur.waiting) v->cur.waiting = waiting;
    if (!v->cur.sampled || (int)kv->blocks_used > v->cur.blocks_used) v->cur.blocks_used = (int)kv->blocks_used;
    v->cur.sampled = 1;
    const uint64_t sig = signature(st, kv, inbox);
    const int busy = st->running + st->waiting > 0;
    if (v->built && (sig == v->last_sig || (busy && now - v->last_build < BUILD_INTERVAL))) return;
    build(s, v, st, kv);
    v->built = 1;
    v->last_sig = sig;
    v->last_build = now;
}

void view_append_snapshot_locked(srv *s, sbuf *out) { sbuf_add(out, s->view->snap.data, s->view->snap.len); }

char *view_snapshot(srv *s, size_t *len) {
    pthread_mutex_lock(&s->mu);
    const sbuf *b = &s->view->snap;
    char *out = malloc(b->len + 1);
    if (out) {
        memcpy(out, b->data ? b->data : "", b->len);
        out[b->len] = 0;
        *len = b->len;
    }
    pthread_mutex_unlock(&s->mu);
    return out;
}
