/*
 * Prometheus text exposition (version 0.0.4) of the server's metrics (see
 * metrics.h). Histograms keep per-bucket counts and are rendered
 * cumulatively with a +Inf bucket, _sum and _count, as the format asks.
 */
#include "server/metrics.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BUCKETS 24

typedef struct hist {
    const char *name, *help;
    const double *bounds;
    int n;
    uint64_t counts[MAX_BUCKETS + 1];
    double sum;
    uint64_t count;
} hist;

static const double ttft_b[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
static const double tpot_b[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15,
                                0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5};
static const double long_b[] = {0.01, 0.05, 0.1, 0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5,
                                5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 300.0};
#define NB(a) ((int)(sizeof a / sizeof a[0]))

static const int status_codes[] = {200, 204, 400, 401, 404, 405, 413, 429, 500, 503};
#define N_STATUS ((int)(sizeof status_codes / sizeof status_codes[0]))
static const char *const finish_names[] = {"none", "stop", "length", "cancelled", "timeout", "error"};

struct srv_metrics {
    pthread_mutex_t mu;
    hist ttft, tpot, e2e, queue, embed;
    uint64_t embed_requests, embed_inputs, embed_tokens;
    kvlm_sched_stats st;
    kvlm_kv_stats kv;
    int inbox;
    uint64_t status[N_STATUS + 1]; /* last: any other status */
    uint64_t finish[6];
    int conn_open;
    uint64_t conn_refused, conn_cut;
    int loading, ready;     /* set when /metrics is read (metrics_set_state) */
    char replica[64];       /* empty: no replica info line */
};

srv_metrics *metrics_create(void) {
    srv_metrics *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    pthread_mutex_init(&m->mu, NULL);
    m->ttft = (hist){"kvlm_time_to_first_token_seconds", "Time from request arrival to its first generated token.",
                     ttft_b, NB(ttft_b), {0}, 0, 0};
    m->tpot = (hist){"kvlm_time_per_output_token_seconds",
                     "(end-to-end latency - time to first token) / (output tokens - 1), per request.", tpot_b,
                     NB(tpot_b), {0}, 0, 0};
    m->e2e = (hist){"kvlm_e2e_request_latency_seconds", "Time from request arrival to its last token.", long_b,
                    NB(long_b), {0}, 0, 0};
    m->queue = (hist){"kvlm_request_queue_time_seconds", "Time from request arrival to its admission to the batch.",
                      long_b, NB(long_b), {0}, 0, 0};
    m->embed = (hist){"kvlm_embedding_request_seconds", "Time from an embeddings request's arrival to its answer.",
                      long_b, NB(long_b), {0}, 0, 0};
    return m;
}

void metrics_free(srv_metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static void observe(srv_metrics *m, hist *h, double v) {
    pthread_mutex_lock(&m->mu);
    int b = 0;
    while (b < h->n && v > h->bounds[b]) b++;
    h->counts[b]++;
    h->sum += v;
    h->count++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_observe_queue(srv_metrics *m, double s) { observe(m, &m->queue, s); }
void metrics_observe_ttft(srv_metrics *m, double s) { observe(m, &m->ttft, s); }

void metrics_observe_request(srv_metrics *m, double e2e, double tpot) {
    observe(m, &m->e2e, e2e);
    if (tpot >= 0) observe(m, &m->tpot, tpot);
}

void metrics_observe_embedding(srv_metrics *m, int inputs, int tokens, double seconds) {
    pthread_mutex_lock(&m->mu);
    m->embed_requests++;
    m->embed_inputs += (uint64_t)inputs;
    m->embed_tokens += (uint64_t)tokens;
    pthread_mutex_unlock(&m->mu);
    observe(m, &m->embed, seconds);
}

void metrics_count_finish(srv_metrics *m, kvlm_finish reason) {
    pthread_mutex_lock(&m->mu);
    if ((int)reason >= 0 && (int)reason < 6) m->finish[reason]++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_count_status(srv_metrics *m, int code) {
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < N_STATUS && status_codes[i] != code) i++;
    m->status[i]++;
    pthread_mutex_unlock(&m->mu);
}

void metrics_publish(srv_metrics *m, const kvlm_sched_stats *st, const kvlm_kv_stats *kv, int inbox) {
    pthread_mutex_lock(&m->mu);
    m->st = *st;
    m->kv = *kv;
    m->inbox = inbox;
    pthread_mutex_unlock(&m->mu);
}

void metrics_snapshot(srv_metrics *m, kvlm_sched_stats *st, kvlm_kv_stats *kv, int *inbox) {
    pthread_mutex_lock(&m->mu);
    *st = m->st;
    *kv = m->kv;
    *inbox = m->inbox;
    pthread_mutex_unlock(&m->mu);
}

void metrics_set_replica(srv_metrics *m, const char *id) {
    pthread_mutex_lock(&m->mu);
    snprintf(m->replica, sizeof m->replica, "%s", id);
    pthread_mutex_unlock(&m->mu);
}

static void head(sbuf *o, const char *name, const char *type, const char *help) {
    sbuf_printf(o, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void gauge(sbuf *o, const char *name, const char *help, double v) {
    head(o, name, "gauge", help);
    sbuf_printf(o, "%s %.17g\n", name, v);
}

static void counter(sbuf *o, const char *name, const char *help, uint64_t v) {
    head(o, name, "counter", help);
    sbuf_printf(o, "%s %llu\n", name, (unsigned long long)v);
}

/* The restore latency per tier (kvlm_kv_stats.tier_restore_buckets). */
static void restore_hist(sbuf *o, const kvlm_kv_stats *kv) {
    static const char name[] = "kvlm_kv_tier_restore_latency_seconds";
    head(o, name, "histogram", "Time a lookup took to restore KV blocks from the tiers, by the lowest tier it read "
         "(ram: memory only; disk).");
    for (int t = 0; t < 2; t++) {
        const char *tier = t ? "disk" : "ram";
        uint64_t cum = 0;
        for (int b = 0; b < KVLM_KV_RESTORE_BUCKETS; b++) {
            cum += kv->tier_restore_buckets[t][b];
            if (b < KVLM_KV_RESTORE_BUCKETS - 1)
                sbuf_printf(o, "%s_bucket{tier=\"%s\",le=\"%g\"} %llu\n", name, tier, kvlm_kv_restore_bucket_bound(b),
                            (unsigned long long)cum);
            else sbuf_printf(o, "%s_bucket{tier=\"%s\",le=\"+Inf\"} %llu\n", name, tier, (unsigned long long)cum);
        }
        sbuf_printf(o, "%s_sum{tier=\"%s\"} %.9f\n%s_count{tier=\"%s\"} %llu\n", name, tier,
                    (double)kv->tier_restore_ns_by[t] * 1e-9, name, tier, (unsigned long long)cum);
    }
}

static void render_hist(sbuf *o, const hist *h) {
    head(o, h->name, "histogram", h->help);
    uint64_t cum = 0;
    for (int b = 0; b < h->n; b++) {
        cum += h->counts[b];
        sbuf_printf(o, "%s_bucket{le=\"%g\"} %llu\n", h->name, h->bounds[b], (unsigned long long)cum);
    }
    cum += h->counts[h->n];
    sbuf_printf(o, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.17g\n%s_count %llu\n", h->name, (unsigned long long)cum,
                h->name, h->sum, h->name, (unsigned long long)h->count);
}

void metrics_set_connections(srv_metrics *m, int open, uint64_t refused, uint64_t cut) {
    pthread_mutex_lock(&m->mu);
    m->conn_open = open;
    m->conn_refused = refused;
    m->conn_cut = cut;
    pthread_mutex_unlock(&m->mu);
}

void metrics_set_state(srv_metrics *m, int loading, int ready) {
    pthread_mutex_lock(&m->mu);
    m->loading = loading;
    m->ready = ready;
    pthread_mutex_unlock(&m->mu);
}

void metrics_render(srv_metrics *m, sbuf *o) {
    pthread_mutex_lock(&m->mu);
    const kvlm_sched_stats *st = &m->st;
    const kvlm_kv_stats *kv = &m->kv;
    if (m->replica[0]) {
        head(o, "kvlm_replica_info", "gauge", "Always 1; its label names this replica (--replica-id).");
        sbuf_printf(o, "kvlm_replica_info{replica=\"%s\"} 1\n", m->replica);
    }
    gauge(o, "kvlm_loading", "1 while the model loads (every endpoint but /health and /metrics answers 503).",
          m->loading);
    gauge(o, "kvlm_ready", "1 when /health answers 200: the model is loaded and the server is not draining.",
          m->ready);
    gauge(o, "kvlm_requests_running", "Sequences (choices) in the running batch.", st->running);
    gauge(o, "kvlm_requests_waiting", "Sequences waiting for admission, including requests not yet scheduled.",
          st->waiting + m->inbox);
    gauge(o, "kvlm_kv_usage_ratio", "KV pool blocks held by sequences / blocks in the pool.",
          kv->blocks_total ? (double)kv->blocks_used / (double)kv->blocks_total : 0.0);
    gauge(o, "kvlm_kv_blocks_total", "Blocks in the KV pool.", (double)kv->blocks_total);
    gauge(o, "kvlm_kv_blocks_used", "KV blocks held by at least one sequence or pin.", (double)kv->blocks_used);
    gauge(o, "kvlm_kv_blocks_cached", "KV blocks held by no sequence, kept for prefix reuse.", (double)kv->blocks_cached);
    gauge(o, "kvlm_kv_blocks_pinned", "KV blocks held by a pinned prefix (/v1/cache/pin; counted in blocks_used).",
          (double)kv->blocks_pinned);
    counter(o, "kvlm_kv_evictions_total", "Cached KV blocks reclaimed for new data.", kv->evictions);
    counter(o, "kvlm_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", kv->prefix_query_tokens);
    counter(o, "kvlm_prefix_cache_hits_total", "Prompt tokens whose KV came from the prefix cache.", kv->prefix_hit_tokens);
    counter(o, "kvlm_prefix_cache_query_requests_total", "Prompts looked up in the prefix cache.", kv->prefix_queries);
    counter(o, "kvlm_prefix_cache_hit_requests_total", "Prompts with at least one block reused.", kv->prefix_hits);
    counter(o, "kvlm_kv_tier_ram_hits_total", "KV block positions restored from the memory tier.", kv->tier_ram_hits);
    counter(o, "kvlm_kv_tier_disk_hits_total", "KV block positions restored from the disk tier.", kv->tier_disk_hits);
    counter(o, "kvlm_kv_tier_spills_total", "Evicted KV block positions kept in the memory tier.", kv->tier_spills);
    counter(o, "kvlm_kv_tier_spill_refused_total", "Evicted KV block positions not kept (a window layer had "
            "released its block).", kv->tier_spill_refused);
    gauge(o, "kvlm_kv_tier_ram_bytes", "Bytes held by the KV memory tier.", (double)kv->tier_ram_bytes);
    gauge(o, "kvlm_kv_tier_ram_blocks", "Block positions held by the KV memory tier.", (double)kv->tier_ram_blocks);
    gauge(o, "kvlm_kv_tier_disk_bytes", "Bytes of this model's KV block files on disk.", (double)kv->tier_disk_bytes);
    gauge(o, "kvlm_kv_tier_disk_files", "This model's KV block files on disk.", (double)kv->tier_disk_files);
    counter(o, "kvlm_kv_tier_read_bytes_total", "KV block file bytes read by disk hits.", kv->tier_bytes_read);
    counter(o, "kvlm_kv_tier_written_bytes_total", "KV block file bytes written.", kv->tier_bytes_written);
    counter(o, "kvlm_kv_tier_writes_dropped_total", "KV block writes dropped (queue full or writes off).",
            kv->tier_writes_dropped);
    counter(o, "kvlm_kv_tier_write_errors_total", "KV block writes that failed (the disk tier then stops writing).",
            kv->tier_write_errors);
    counter(o, "kvlm_kv_tier_bad_files_total", "Corrupt, truncated or foreign KV block files removed.",
            kv->tier_bad_files);
    gauge(o, "kvlm_kv_tier_restore_seconds_sum", "Time spent restoring KV blocks from the tiers.",
          (double)kv->tier_restore_ns * 1e-9);
    counter(o, "kvlm_kv_tier_restores_total", "Lookups that restored at least one KV block from a tier.",
            kv->tier_restores);
    counter(o, "kvlm_kv_tier_prefetched_total", "KV block files read ahead of their lookup.", kv->tier_prefetched);
    restore_hist(o, kv);
    counter(o, "kvlm_prompt_tokens_total", "Prompt tokens admitted.", st->prompt_tokens);
    counter(o, "kvlm_prompt_tokens_cached_total", "Prompt tokens served from the prefix cache.", st->cached_prompt_tokens);
    counter(o, "kvlm_generation_tokens_total", "Tokens generated.", st->generated_tokens);
    counter(o, "kvlm_preemptions_total", "Sequences preempted (blocks released, recomputed later).", st->preemptions);
    counter(o, "kvlm_engine_steps_total", "Batched engine steps.", st->steps);
    counter(o, "kvlm_speculative_drafted_tokens_total", "Tokens drafted for speculative decoding.",
            st->drafted_tokens);
    counter(o, "kvlm_speculative_accepted_tokens_total", "Drafted tokens the target model kept.",
            st->accepted_tokens);
    counter(o, "kvlm_embedding_requests_total", "Embeddings requests answered (200).", m->embed_requests);
    counter(o, "kvlm_embedding_inputs_total", "Inputs embedded (one vector each).", m->embed_inputs);
    counter(o, "kvlm_embedding_input_tokens_total", "Tokens of the inputs embedded.", m->embed_tokens);
    head(o, "kvlm_sequences_finished_total", "counter", "Sequences (choices) ended, by reason.");
    for (int r = 1; r < 6; r++)
        sbuf_printf(o, "kvlm_sequences_finished_total{reason=\"%s\"} %llu\n", finish_names[r],
                    (unsigned long long)m->finish[r]);
    head(o, "kvlm_http_responses_total", "counter", "HTTP responses by status code.");
    for (int i = 0; i <= N_STATUS; i++)
        if (i < N_STATUS) sbuf_printf(o, "kvlm_http_responses_total{code=\"%d\"} %llu\n", status_codes[i],
                                      (unsigned long long)m->status[i]);
        else sbuf_printf(o, "kvlm_http_responses_total{code=\"other\"} %llu\n", (unsigned long long)m->status[i]);
    gauge(o, "kvlm_http_connections_open", "HTTP connections open.", m->conn_open);
    counter(o, "kvlm_http_connections_refused_total", "Connections closed unanswered: over --max-connections.",
            m->conn_refused);
    counter(o, "kvlm_http_connections_timed_out_total",
            "Connections closed because their request did not arrive within --read-timeout.", m->conn_cut);
    render_hist(o, &m->ttft);
    render_hist(o, &m->tpot);
    render_hist(o, &m->e2e);
    render_hist(o, &m->queue);
    render_hist(o, &m->embed);
    pthread_mutex_unlock(&m->mu);
}
