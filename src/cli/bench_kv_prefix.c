/*
 * `kvlm bench-kv`, prefix-cache section: K requests, one after another,
 * share a long system prompt and differ in a short suffix. Each runs on a
 * rig with the prefix cache off (cold) and then on one with it on, so the
 * two timings interleave and drift on a shared machine reaches both. On
 * the cached rig the first request is a miss that fills the cache (and
 * first-touches the pool's pages); every later one reuses the prompt's
 * whole blocks. Time to first token is taken from submission to the first
 * on_token callback; hits and hit tokens are the KV cache's own counters.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench_kv.h"

typedef struct ttft_probe {
    double t0, first;
} ttft_probe;

static int on_first_token(void *user, const kvlm_token_event *ev) {
    ttft_probe *p = user;
    (void)ev;
    if (p->first == 0) p->first = kvlm_now() - p->t0;
    return 0;
}

typedef struct prefix_rig {
    kvlm_kv *kv;
    kvlm_engine *e;
    kvlm_sched *s;
} prefix_rig;

static int rig_open(prefix_rig *g, kvlm_model *m, const model_flags *mf, const bkv_prefix_params *o,
                    int prefix_cache, kvlm_error *err) {
    kvlm_kv_options ko = kvlm_kv_default_params();
    ko.dtype = mf->kv_dtype;
    ko.block_size = mf->block_size;
    ko.max_seqs = 2;
    ko.no_prefix_cache = !prefix_cache;
    kvlm_engine_options eo = session_engine_options(mf);
    kvlm_sched_options so = kvlm_sched_default_params();
    so.max_batch_tokens = o->batch_tokens;
    const kvlm_config *c = kvlm_model_config(m);
    memset(g, 0, sizeof *g);
    return (g->kv = kvlm_kv_create(m, &ko, err)) && (g->e = kvlm_engine_create(m, g->kv, &eo, err)) &&
                   (g->s = kvlm_sched_create(g->e, g->kv, c->vocab_size, &so, err))
               ? 0
               : -1;
}

static void rig_close(prefix_rig *g) {
    kvlm_sched_free(g->s);
    kvlm_engine_free(g->e);
    kvlm_kv_free(g->kv);
}

/* One request alone on a rig; returns its time to first token or < 0. */
static double timed_request(prefix_rig *g, const int32_t *prompt, int n, int max_tokens, kvlm_error *err) {
    ttft_probe probe = {0};
    kvlm_request_params p = kvlm_request_default_params();
    p.prompt = prompt;
    p.n_prompt = n;
    p.max_tokens = max_tokens;
    p.on_token = on_first_token;
    p.user = &probe;
    p.sampling.temperature = 0;
    probe.t0 = kvlm_now();
    if (kvlm_sched_submit(g->s, &p, err) < 0) return -1;
    while (kvlm_sched_has_work(g->s))
        if (kvlm_sched_step(g->s, err) < 0) return -1;
    return probe.first > 0 ? probe.first : -1;
}

/* The prefix benchmark's request shape: the system prompt is cut so that
 * prompt and output fit the context window. 2 after printing why not. */
int bkv_prefix_shape(const bkv_prefix_params *o, const kvlm_config *c, bkv_prefix_result *r) {
    memset(r, 0, sizeof *r);
    r->requests = o->requests;
    r->output_tokens = o->output_tokens;
    r->suffix_tokens = o->suffix_tokens ? o->suffix_tokens : c->n_ctx / 16 > 16 ? 16 : c->n_ctx / 16;
    if (r->suffix_tokens < 1) r->suffix_tokens = 1;
    r->prefix_tokens = o->prefix_tokens;
    if (r->prefix_tokens > c->n_ctx - r->suffix_tokens - r->output_tokens)
        r->prefix_tokens = c->n_ctx - r->suffix_tokens - r->output_tokens;
    if (r->prefix_tokens < 1) {
        fprintf(stderr, "kvlm bench-kv: --suffix-tokens %d + --prefix-output %d leave no room for a system prompt "
                "in the context window of %d\n", r->suffix_tokens, r->output_tokens, c->n_ctx);
        return 2;
    }
    return 0;
}

/* Requests one after another, each on a rig with the prefix cache off
 * (cold) and then on one with it on; their times interleave so drift on
 * the machine reaches both. */
int bkv_prefix_run(kvlm_model *m, const model_flags *mf, const bkv_prefix_params *o, bkv_prefix_result *r) {
    const kvlm_config *c = kvlm_model_config(m);
    const int K = r->requests, P = r->prefix_tokens, n = P + r->suffix_tokens;
    int32_t *prompt = malloc((size_t)n * sizeof(int32_t));
    double *cold = malloc((size_t)K * sizeof(double)), *hit = malloc((size_t)K * sizeof(double));
    prefix_rig g[2] = {{0}};
    kvlm_error err = {0};
    int rc = prompt && cold && hit ? 0 : -1;
    if (rc) kvlm_error_set(&err, KVLM_ERR_NOMEM, "out of memory");
    if (!rc) rc = rig_open(&g[0], m, mf, o, 0, &err) || rig_open(&g[1], m, mf, o, 1, &err);
    uint64_t s = o->seed ^ 0x9e3779b97f4a7c15ull;
    for (int j = 0; !rc && j < P; j++) prompt[j] = (int32_t)(bkv_splitmix(&s) % (uint64_t)c->vocab_size);
    if (o->progress && !rc) fprintf(stderr, "bench-kv: prefix cache, %d requests of %d + %d tokens...\n", K, P, n - P);
    for (int i = 0; !rc && i < K; i++) {
        for (int j = P; j < n; j++) prompt[j] = (int32_t)(bkv_splitmix(&s) % (uint64_t)c->vocab_size);
        double tc = timed_request(&g[0], prompt, n, r->output_tokens, &err);
        double th = tc < 0 ? -1 : timed_request(&g[1], prompt, n, r->output_tokens, &err);
        if (tc < 0 || th < 0) rc = -1;
        cold[i] = tc;
        if (i == 0) r->ttft_first_s = th;
        else hit[i - 1] = th;
    }
    if (!rc) {
        kvlm_kv_stats ks;
        kvlm_kv_get_stats(g[1].kv, &ks);
        r->queries = ks.prefix_queries;
        r->query_tokens = ks.prefix_query_tokens;
        r->hits = ks.prefix_hits;
        r->hit_tokens = ks.prefix_hit_tokens;
        r->ttft_cold_s = bkv_median(cold, K);
        r->ttft_hit_s = bkv_median(hit, K - 1);
    } else {
        fprintf(stderr, "kvlm bench-kv: prefix benchmark: %s\n", err.msg);
    }
    rig_close(&g[0]);
    rig_close(&g[1]);
    free(prompt);
    free(cold);
    free(hit);
    return rc ? 1 : 0;
}

json_t *bkv_prefix_json(const bkv_prefix_result *r) {
    return json_pack("{s:i,s:i,s:i,s:i,s:f,s:f,s:f,s:f,s:f,s:I,s:I,s:I,s:I}", "requests", r->requests,
                     "prefix_tokens", r->prefix_tokens, "suffix_tokens", r->suffix_tokens, "output_tokens",
                     r->output_tokens, "ttft_cold_ms", r->ttft_cold_s * 1e3, "ttft_first_ms", r->ttft_first_s * 1e3,
                     "ttft_hit_ms", r->ttft_hit_s * 1e3, "speedup", bkv_div(r->ttft_cold_s, r->ttft_hit_s),
                     "hit_rate", bkv_div((double)r->hit_tokens, (double)r->query_tokens), "hit_tokens",
                     (json_int_t)r->hit_tokens, "prompt_tokens", (json_int_t)r->query_tokens, "hits",
                     (json_int_t)r->hits, "queries", (json_int_t)r->queries);
}

void bkv_prefix_print(const bkv_prefix_result *r) {
    printf("prefix cache: %d requests, one after another: a shared %d-token system prompt + %d distinct tokens, "
           "%d generated\n", r->requests, r->prefix_tokens, r->suffix_tokens, r->output_tokens);
    printf("  %-44s %10.2f ms\n", "time to first token, cold (cache off, median)", r->ttft_cold_s * 1e3);
    printf("  %-44s %10.2f ms\n", "time to first token, first request (cache on)", r->ttft_first_s * 1e3);
    printf("  %-44s %10.2f ms\n", "time to first token on a hit (median)", r->ttft_hit_s * 1e3);
    printf("  %-44s %10.2fx\n", "speed-up cold / hit", bkv_div(r->ttft_cold_s, r->ttft_hit_s));
    printf("  %-44s %10.1f%%  (%llu of %llu prompt tokens; %llu of %llu prompts hit)\n\n",
           "hit rate (hit tokens / prompt tokens)", 100 * bkv_div((double)r->hit_tokens, (double)r->query_tokens),
           (unsigned long long)r->hit_tokens, (unsigned long long)r->query_tokens, (unsigned long long)r->hits,
           (unsigned long long)r->queries);
}
