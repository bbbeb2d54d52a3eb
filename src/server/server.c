/*
 * Assembling the server (see server.h): first the metrics, the access log
 * and the HTTP thread (the server answers while the model loads); then,
 * given the model, the chat template, the KV pool (sized by blocks, by
 * MiB or by max_seqs x context), the engine and the scheduler over it and
 * the engine thread. Stopping runs the other way: the engine ends every request (503 for what
 * was still queued), connections get their last bytes, then the HTTP
 * thread stops.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "server/http.h"
#include "server/models.h"
#include "server/responses_store.h"
#include "server/cache_routes.h"
#include "server/srv.h"
#include "app/tool_calls.h"

static void model_name(srv *s) {
    if (s->cfg.served_name && *s->cfg.served_name) {
        snprintf(s->model_name, sizeof s->model_name, "%s", s->cfg.served_name);
        return;
    }
    char dir[256];
    snprintf(dir, sizeof dir, "%s", kvlm_model_dir(s->m));
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') dir[--n] = 0;
    const char *base = strrchr(dir, '/');
    snprintf(s->model_name, sizeof s->model_name, "%s", n ? (base ? base + 1 : dir) : "kvlm");
}

static size_t pool_blocks(const srv *s) {
    if (s->cfg.kv_blocks) return s->cfg.kv_blocks;
    if (s->cfg.kv_mib <= 0) return 0;
    /* A block holds one layer slice (all layers when they attend alike):
     * its size is the cache's, read from a one-block probe. */
    kvlm_kv_options ko = kvlm_kv_default_params();
    ko.dtype = s->cfg.kv_dtype;
    ko.block_size = s->cfg.block_size;
    ko.n_blocks = 1;
    kvlm_kv *probe = kvlm_kv_create(s->m, &ko, NULL);
    if (!probe) return 0; /* a dtype this model's head dim cannot take: kvlm_kv_create says why */
    kvlm_kv_info info;
    kvlm_kv_get_info(probe, &info);
    kvlm_kv_free(probe);
    const double block = (double)info.block_bytes;
    double n = s->cfg.kv_mib * 1048576.0 / block;
    return n < 1 ? 1 : (size_t)n;
}

srv *srv_create(const srv_config *cfg, kvlm_error *err) {
    srv *s = calloc(1, sizeof *s);
    if (!s) {
        kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
        return NULL;
    }
    s->cfg = *cfg;
    s->created = (long long)time(NULL);
    s->listen_fd = -1;
    atomic_init(&s->replica_set, 0);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->wake, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&s->mu, NULL);
    int rc = 0;
    if (!(cfg->access_log && !strcmp(cfg->access_log, "off")) &&
        !(s->log = access_log_open(cfg->access_log, cfg->log_json, err)))
        rc = -1;
    if (!rc && (!(s->metrics = metrics_create()) || !(s->view = view_create()) ||
                !(s->responses = rstore_create(RSTORE_MAX_ENTRIES, RSTORE_MAX_BYTES, RSTORE_TTL_SECONDS))))
        rc = kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    if (rc) {
        srv_free(s);
        return NULL;
    }
    return s;
}

/* The agent check's view of the load: the state flags, and the pool and
 * queue as the engine last published them. */
static void agent_load_of(void *ctx, agent_load *l) {
    srv *s = ctx;
    pthread_mutex_lock(&s->mu);
    *l = (agent_load){.loading = !s->ready, .draining = s->draining || s->stopping,
                      .max_waiting = s->cfg.max_waiting};
    pthread_mutex_unlock(&s->mu);
    kvlm_sched_stats st;
    kvlm_kv_stats kv;
    int inbox;
    metrics_snapshot(s->metrics, &st, &kv, &inbox);
    l->kv_total = kv.blocks_total;
    l->kv_used = kv.blocks_used;
    l->waiting = st.waiting + inbox;
    /* several models (fixed once started): their pools and queues together */
    for (int i = 0; i < s->n_models; i++) {
        metrics_snapshot(s->models[i]->metrics, &st, &kv, &inbox);
        l->kv_total += kv.blocks_total;
        l->kv_used += kv.blocks_used;
        l->waiting += st.waiting + inbox;
    }
}

/* The replica id: as given, else this host's name and the HTTP port (so
 * known only once the HTTP thread runs; it reads the id only after
 * replica_set).
 * Characters outside REPLICA_CHARS become '-' (it goes into a header
 * and a metric label). */
static void replica_id(srv *s) {
    char host[256] = "localhost";
    if (s->cfg.replica_id) snprintf(s->replica, sizeof s->replica, "%s", s->cfg.replica_id);
    else {
        if (gethostname(host, sizeof host)) snprintf(host, sizeof host, "localhost");
        host[sizeof host - 1] = 0;
        snprintf(s->replica, sizeof s->replica, "%.48s:%d", host, s->port);
    }
    for (char *p = s->replica; *p; p++)
        if (!strchr(REPLICA_CHARS, *p)) *p = '-';
    metrics_set_replica(s->metrics, s->replica);
    atomic_store_explicit(&s->replica_set, 1, memory_order_release);
}

int srv_start(srv *s, kvlm_error *err) {
    if (http_start(s, err)) return -1;
    replica_id(s);
    if (s->cfg.agent_port >= 0 &&
        !(s->agent = agent_check_start(s->address, s->cfg.agent_port, agent_load_of, s, err))) {
        http_stop(s);
        return -1;
    }
    return 0;
}

void srv_set_draft(srv *s, kvlm_model *draft) { s->cfg.draft = draft; }

int srv_attach(srv *s, kvlm_model *m, const kvlm_tokenizer *tok, kvlm_error *err) {
    const srv_config *cfg = &s->cfg;
    s->m = m;
    s->c = kvlm_model_config(m);
    s->tok = tok;
    if (!s->parent) model_name(s); /* a model of a front has its id (models.c) */
    kvlm_kv_options ko = kvlm_kv_default_params();
    ko.dtype = cfg->kv_dtype;
    ko.block_size = cfg->block_size;
    ko.n_blocks = pool_blocks(s);
    ko.max_seqs = cfg->max_seqs;
    ko.tier_ram_bytes = cfg->kv_ram_bytes;
    ko.tier_dir = cfg->kv_cache_dir;
    ko.tier_disk_bytes = cfg->kv_disk_bytes;
    kvlm_sched_options so = kvlm_sched_default_params();
    so.max_batch_tokens = cfg->max_batch_tokens;
    so.max_waiting = cfg->max_waiting;
    so.max_prefill_tokens = cfg->max_prefill_tokens;
    if (chat_template_load(&s->tpl, kvlm_model_dir(m), kvlm_model_tokenizer_path(m), cfg->chat_template, err) ||
        !(s->kv = kvlm_kv_create(m, &ko, err)) || !(s->e = kvlm_engine_create(m, s->kv, &cfg->engine, err)) ||
        !(s->sched = kvlm_sched_create(s->e, s->kv, s->c->vocab_size, &so, err)))
        return -1;
    if (cfg->draft) {
        kvlm_kv_options dko = kvlm_kv_default_params();
        dko.dtype = cfg->kv_dtype;
        dko.block_size = cfg->block_size;
        dko.max_seqs = cfg->max_seqs;
        if (!(s->draft_kv = kvlm_kv_create(cfg->draft, &dko, err)) ||
            !(s->draft_e = kvlm_engine_create(cfg->draft, s->draft_kv, &cfg->engine, err)) ||
            kvlm_sched_set_draft(s->sched, s->draft_e, s->draft_kv, kvlm_model_config(cfg->draft)->vocab_size, err))
            return -1;
    }
    kvlm_kv_stats st;
    kvlm_kv_get_stats(s->kv, &st);
    s->kv_blocks = st.blocks_total;
    s->kv_pool_bytes = st.bytes_pool;
    kvlm_sched_stats ss;
    kvlm_sched_get_stats(s->sched, &ss);
    metrics_publish(s->metrics, &ss, &st, 0); /* the pool's size in /metrics from the start */
    view_update(s, &ss, &st, 0);               /* and a snapshot before the first step */
    if (engine_start(s, err)) return -1;
    /* Publishes the fields above to the HTTP thread (it reads them only
     * after seeing ready under mu). */
    pthread_mutex_lock(&s->mu);
    s->ready = 1;
    pthread_mutex_unlock(&s->mu);
    cache_repin_recorded(s); /* the pins a server on this --kv-cache-dir made before */
    return 0;
}

int srv_ready(srv *s) {
    pthread_mutex_lock(&s->mu);
    const int r = s->ready;
    pthread_mutex_unlock(&s->mu);
    return r;
}

int srv_port(const srv *s) { return s->port; }

int srv_agent_port(const srv *s) { return s->agent ? agent_check_port(s->agent) : -1; }

const char *srv_replica(const srv *s) { return s->replica; }

const char *srv_address(const srv *s) { return s->address; }

/* Reads only what is fixed at creation: the engine thread may be serving. */
void srv_describe(const srv *s, FILE *f) {
    const kvlm_config *c = s->c;
    fprintf(f, "kvlm serve: model '%s' (%s, %d layers, context %d, vocabulary %d), %s\n", s->model_name, c->arch,
            c->n_layer, c->n_ctx, c->vocab_size,
            s->tok ? kvlm_tokenizer_source(s->tok) : "no tokenizer: token-id prompts only");
    fprintf(f, "kvlm serve: KV pool %zu blocks of %d tokens (%.1f MiB, %s), up to %d sequences, %d tokens per step, "
               "%d waiting\n",
            s->kv_blocks, s->cfg.block_size, (double)s->kv_pool_bytes / 1048576.0, kvlm_dtype_name(s->cfg.kv_dtype),
            s->cfg.max_seqs, s->cfg.max_batch_tokens, s->cfg.max_waiting);
    fprintf(f, "kvlm serve: chat template %s\n", s->tpl.origin);
    if (chat_renders_tools(&s->tpl))
        fprintf(f, "kvlm serve: tool calls read in the %s syntax (docs/tools.md)\n",
                tc_family_name((tc_family)s->tpl.tool_family));
    const char *when = s->cfg.speculation.fixed ? "at every step" : "where it pays (adaptive)";
    if (s->cfg.speculation.mode == KVLM_DRAFT_MODEL)
        fprintf(f, "kvlm serve: speculative decoding by default: draft model %s, %d tokens per step, %s\n",
                kvlm_model_source(s->cfg.draft), s->cfg.speculation.k, when);
    else if (s->cfg.speculation.mode == KVLM_DRAFT_NGRAM)
        fprintf(f, "kvlm serve: speculative decoding by default: prompt lookup of up to %d-grams, %d tokens per "
                "step, %s (--no-draft: none)\n", s->cfg.speculation.ngram, s->cfg.speculation.k, when);
    else
        fprintf(f, "kvlm serve: no speculative decoding by default\n");
    char why[160] = "--threads";
    if (!s->cfg.engine.threads) kvlm_default_threads(why, sizeof why);
    fprintf(f, "kvlm serve: %d engine threads (%s), %s kernels\n", kvlm_engine_threads(s->e), why,
            kvlm_isa_name(kvlm_engine_isa(s->e)));
    if (kvlm_model_repacked_bytes(s->m))
        fprintf(f, "kvlm serve: Q4_0 weights repacked for decode: %.1f MB in place of the file's layout "
                "(--no-repack: none)\n", (double)kvlm_model_repacked_bytes(s->m) / 1e6);
    const srv_config *g = &s->cfg;
    char per_ip[32] = "no per-address limit";
    if (g->max_per_ip > 0) snprintf(per_ip, sizeof per_ip, "%d per client address", g->max_per_ip);
    fprintf(f, "kvlm serve: up to %d connections (%s), %gs to send a request, %gs idle; API key %s%s%s\n",
            g->max_connections, per_ip, g->read_timeout, g->idle_timeout, g->api_key ? "required" : "not required",
            g->api_key && !g->protect_health ? " (/health open)" : "",
            g->api_key && !g->protect_metrics ? " (/metrics open)" : "");
}

int srv_drain(srv *s, double seconds) {
    pthread_mutex_lock(&s->mu);
    s->draining = 1;
    pthread_mutex_unlock(&s->mu);
    for (int m = 0; m < s->n_models; m++) {
        pthread_mutex_lock(&s->models[m]->mu);
        s->models[m]->draining = 1;
        pthread_mutex_unlock(&s->models[m]->mu);
    }
    http_quiesce(s);
    const double end = kvlm_now() + seconds;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        int left = s->n_jobs;
        pthread_mutex_unlock(&s->mu);
        for (int m = 0; m < s->n_models; m++) {
            pthread_mutex_lock(&s->models[m]->mu);
            left += s->models[m]->n_jobs;
            pthread_mutex_unlock(&s->models[m]->mu);
        }
        if (!left) return 0;
        if (kvlm_now() >= end) return -1;
        usleep(10000);
    }
}

void srv_reopen_log(srv *s) {
    if (access_log_reopen(s->log))
        fprintf(stderr, "kvlm serve: cannot reopen the access log '%s'\n", s->cfg.access_log);
}

void srv_stop(srv *s) {
    engine_stop(s);
    models_stop(s);
    /* Let resumed connections send their last bytes before the HTTP thread
     * goes (libmicrohttpd must not stop with suspended connections). */
    for (int i = 0; i < 200; i++) {
        pthread_mutex_lock(&s->mu);
        int left = s->n_jobs + s->n_subs;
        pthread_mutex_unlock(&s->mu);
        for (int m = 0; m < s->n_models; m++) {
            pthread_mutex_lock(&s->models[m]->mu);
            left += s->models[m]->n_jobs + s->models[m]->n_subs;
            pthread_mutex_unlock(&s->models[m]->mu);
        }
        if (!left) break;
        usleep(10000);
    }
    http_stop(s);
    agent_check_stop(s->agent);
    s->agent = NULL;
}

void srv_free(srv *s) {
    if (!s) return;
    models_free(s);
    kvlm_sched_free(s->sched);
    kvlm_engine_free(s->e);
    kvlm_kv_free(s->kv);
    kvlm_engine_free(s->draft_e);
    kvlm_kv_free(s->draft_kv);
    metrics_free(s->metrics);
    view_free(s->view);
    rstore_free(s->responses);
    access_log_close(s->log);
    chat_template_free(&s->tpl);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->wake);
    free(s);
}

void srv_limits(srv *s, api_limits *lim) {
    pthread_mutex_lock(&s->mu);
    uint64_t x = (uint64_t)s->created * 0x9e3779b97f4a7c15ull + ++s->counter * 0xbf58476d1ce4e5b9ull;
    pthread_mutex_unlock(&s->mu);
    x ^= x >> 31;
    *lim = (api_limits){.tok = s->tok, .tpl = &s->tpl, .model_name = s->asked ? s->asked : s->model_name, .n_ctx = s->c->n_ctx,
                        .vocab = s->c->vocab_size, .max_seqs = s->cfg.max_seqs, .block_size = s->cfg.block_size,
                        .max_prompts = s->cfg.max_waiting, .kv_blocks = s->kv_blocks, .random_seed = x,
                        .has_draft = s->cfg.draft != NULL};
}
