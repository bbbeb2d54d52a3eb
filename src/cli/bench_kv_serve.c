/*
 * `kvlm bench-kv`'s serving runs: a drawn workload submitted at once to the
 * continuous-batching scheduler over a KV cache of a fixed block budget,
 * under one allocation policy (contiguous reservation, paged, or paged
 * with every layer kept whole), every step sampled for residency and
 * utilisation, timed in wall and process CPU time. Two policies run
 * alternately and the median timings are kept. Asserts no time; prints
 * only progress and errors (the tables are bench_kv_cmd.c's).
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "cli/bench_kv.h"
#include "kvlm_measure.h"

static void on_finish(void *user, const kvlm_finish_event *ev) {
    if (ev->reason == KVLM_FINISH_ERROR) ((bkv_serve_ctx *)user)->failed++;
}

typedef struct step_acc {
    double util_sum, resident_sum, live_sum, reserved_sum;
    size_t steps;
} step_acc;

/* After each step: residency and utilisation, and the step with the most
 * token states stored (the peak). */
static void sample_step(bkv_serve_result *r, step_acc *a, const kvlm_kv *kv, const kvlm_sched *s) {
    kvlm_kv_stats ks;
    kvlm_sched_stats ss;
    kvlm_kv_get_stats(kv, &ks);
    kvlm_sched_get_stats(s, &ss);
    if (ks.bytes_reserved == 0) return;
    a->steps++;
    a->util_sum += ks.utilisation;
    a->resident_sum += ss.running;
    a->live_sum += (double)ks.bytes_live;
    a->reserved_sum += (double)ks.bytes_reserved;
    if (ss.running > r->resident_peak) r->resident_peak = ss.running;
    if (ks.bytes_live > r->peak_bytes_live) {
        r->peak_bytes_live = ks.bytes_live;
        r->peak_bytes_reserved = ks.bytes_reserved;
        r->util_peak = ks.utilisation;
    }
}

static kvlm_request_params request(const bkv_workload *w, int i, bkv_serve_ctx *ctx) {
    kvlm_request_params p = kvlm_request_default_params();
    p.prompt = w->prompts[i];
    p.n_prompt = w->prompt_len[i];
    p.max_tokens = w->output_len[i];
    p.on_finish = on_finish;
    p.user = ctx;
    p.sampling.temperature = 0; /* greedy: the lengths, not the text, are the workload */
    return p;
}

/* CPU time of the whole process (every engine thread). */
static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Serves the first n requests of w under one policy; r may be NULL (warm-up). */
static int serve(bkv_serve_ctx *ctx, const bkv_workload *w, int n, bkv_policy policy, bkv_serve_result *r) {
    kvlm_error err;
    const int contiguous = policy == BKV_CONTIGUOUS;
    /* contiguous: every sequence reserves the whole context window at creation */
    kvlm_kv_options ko = kvlm_kv_default_params();
    ko.dtype = ctx->mf->kv_dtype;
    ko.block_size = ctx->mf->block_size;
    ko.n_blocks = ctx->kv_blocks;
    ko.max_seqs = ctx->max_seqs;
    ko.reserve_tokens = contiguous ? ctx->c->n_ctx : 0;
    ko.no_prefix_cache = contiguous || !ctx->prefix_cache;
    ko.keep_whole = policy == BKV_PAGED_WHOLE;
    kvlm_engine_options eo = session_engine_options(ctx->mf);
    kvlm_sched_options so = kvlm_sched_default_params();
    so.max_batch_tokens = ctx->batch_tokens;
    so.max_waiting = n;
    kvlm_kv *kv = kvlm_kv_create(ctx->m, &ko, &err);
    kvlm_engine *e = kv ? kvlm_engine_create(ctx->m, kv, &eo, &err) : NULL;
    kvlm_sched *s = e ? kvlm_sched_create(e, kv, ctx->c->vocab_size, &so, &err) : NULL;
    int rc = s ? 0 : -1;
    bkv_serve_result tmp = {0};
    if (!r) r = &tmp;
    memset(r, 0, sizeof *r);
    step_acc a = {0};
    ctx->failed = 0;
    double t0 = kvlm_now(), c0 = cpu_now();
    for (int i = 0; !rc && i < n; i++) {
        kvlm_request_params p = request(w, i, ctx);
        if (kvlm_sched_submit(s, &p, &err) < 0) rc = -1;
    }
    for (int idle = 0; !rc && kvlm_sched_has_work(s);) {
        int k = kvlm_sched_step(s, &err);
        idle = k == 0 ? idle + 1 : 0;
        if (k < 0) rc = -1;
        else if (idle > 1000) rc = kvlm_error_set(&err, KVLM_ERR_NOMEM, "the scheduler made no progress");
        else sample_step(r, &a, kv, s);
    }
    r->total_s = kvlm_now() - t0;
    r->cpu_s = cpu_now() - c0;
    if (!rc && ctx->failed) rc = kvlm_error_set(&err, KVLM_ERR_NOMEM, "a request never fit the KV pool");
    if (rc) fprintf(stderr, "kvlm bench-kv: %s\n", err.msg);
    if (!rc) {
        kvlm_sched_stats ss;
        kvlm_kv_stats ks;
        kvlm_sched_get_stats(s, &ss);
        kvlm_kv_get_stats(kv, &ks);
        r->generated = ss.generated_tokens;
        r->steps = ss.steps;
        r->preemptions = ss.preemptions;
        r->prefix_hit_tokens = ks.prefix_hit_tokens;
        r->tokens_per_s = bkv_div((double)ss.generated_tokens, r->total_s);
        r->tokens_per_cpu_s = bkv_div((double)ss.generated_tokens, r->cpu_s);
        r->util_mean = a.steps ? a.util_sum / a.steps : 0;
        r->util_aggregate = a.reserved_sum > 0 ? a.live_sum / a.reserved_sum : 0;
        r->resident_mean = a.steps ? a.resident_sum / a.steps : 0;
    }
    kvlm_sched_free(s);
    kvlm_engine_free(e);
    kvlm_kv_free(kv);
    return rc;
}

static const char *policy_name(bkv_policy p) {
    return p == BKV_CONTIGUOUS ? "contiguous" : p == BKV_PAGED ? "paged" : "paged, every layer whole";
}

int bkv_serve_pair(bkv_serve_ctx *ctx, const bkv_workload *w, const bkv_policy policy[2], bkv_serve_result res[2]) {
    const int R = ctx->repeats;
    double tps[2][50], tot[2][50], tpc[2][50], cpu[2][50];
    if (ctx->progress) fprintf(stderr, "bench-kv: warming up...\n");
    if (serve(ctx, w, w->n < 2 ? w->n : 2, policy[1], NULL)) return -1;
    for (int r = 0; r < R; r++)
        for (int k = 0; k < 2; k++) {
            const int p = (r + k) % 2;
            bkv_serve_result cur;
            if (ctx->progress)
                fprintf(stderr, "bench-kv: serving %d requests, %s (%d/%d)...\n", w->n, policy_name(policy[p]), r + 1, R);
            if (serve(ctx, w, w->n, policy[p], &cur)) return -1;
            if (r == 0) res[p] = cur;
            tps[p][r] = cur.tokens_per_s;
            tot[p][r] = cur.total_s;
            tpc[p][r] = cur.tokens_per_cpu_s;
            cpu[p][r] = cur.cpu_s;
        }
    for (int p = 0; p < 2; p++) {
        res[p].tokens_per_s = bkv_median(tps[p], R);
        res[p].total_s = bkv_median(tot[p], R);
        res[p].tokens_per_cpu_s = bkv_median(tpc[p], R);
        res[p].cpu_s = bkv_median(cpu[p], R);
    }
    return 0;
}
