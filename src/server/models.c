/*
 * Several models behind one server (see models.h): the front's list of
 * models, which model a request names, loading on first use (a thread per
 * load; the requests for the model wait, suspended, and run once it is
 * loaded) and unloading the least recently used idle model to stay within
 * --max-loaded-bytes, and /v1/models over them all.
 *
 * Invariants: only the HTTP thread adds models, starts loads and unloads
 * models, so a model it finds with no job and no engine stream cannot gain
 * one while it unloads it (jobs are created on the HTTP thread); a loading
 * model is neither served nor unloaded, and its loader thread alone
 * touches its fields until it clears `loading` under the model's mu. A model's size is its
 * weight files plus what the load repacked plus its KV pool, read at load;
 * before its first load the weight files stand for it. Scratch buffers of
 * the engine are not counted (the library does not report them).
 * Not here: the routes themselves (routes.c), the merged /metrics
 * (metrics_models.c).
 */
#include "server/models.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <microhttpd.h>

#include "server/responses_store.h"

int srv_add_model(srv *s, const char *id, const char *also, const char *path, kvlm_error *err) {
    if (!id || !*id || strlen(id) > 200) return kvlm_error_set(err, KVLM_ERR_ARG, "a model id of 1 to 200 characters");
    for (int i = 0; i < s->n_models; i++) {
        const srv *c = s->models[i];
        if (!strcmp(c->model_name, id) || (c->also && !strcmp(c->also, id)) || (also && !strcmp(c->model_name, also)))
            return kvlm_error_set(err, KVLM_ERR_ARG, "two models are named '%s' (give one of them --alias NAME)",
                                  also && !strcmp(c->model_name, also) ? also : id);
    }
    srv **grown = realloc(s->models, (size_t)(s->n_models + 1) * sizeof *grown);
    if (!grown) return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    s->models = grown;
    srv_config cfg = s->cfg;
    cfg.access_log = "off"; /* the front logs every request */
    cfg.served_name = id;
    cfg.draft = NULL;
    srv *c = srv_create(&cfg, err);
    if (!c) return -1;
    c->parent = s;
    snprintf(c->model_name, sizeof c->model_name, "%s", id);
    c->cfg.served_name = NULL; /* the caller's string may not outlive this call; the id is model_name */
    c->path = strdup(path);
    c->also = also && strcmp(also, id) ? strdup(also) : NULL;
    if (!c->path || (also && strcmp(also, id) && !c->also)) {
        srv_free(c);
        return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    }
    s->models[s->n_models++] = c;
    return 0;
}

void srv_set_loader(srv *s, srv_load_fn load, srv_unload_fn unload, void *ctx) {
    s->load = load;
    s->unload = unload;
    s->load_ctx = ctx;
}

int srv_attach_models(srv *s, kvlm_error *err) {
    if (!s->n_models || !s->load) return kvlm_error_set(err, KVLM_ERR_ARG, "no models to serve");
    pthread_mutex_lock(&s->mu);
    s->ready = 1;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

srv *models_find(srv *s, const char *id) {
    for (int i = 0; i < s->n_models; i++) {
        srv *c = s->models[i];
        if (!strcmp(c->model_name, id) || (c->also && !strcmp(c->also, id))) return c;
    }
    return NULL;
}

/* 0 unloaded, 1 loading, 2 loaded */
static int state(srv *c) {
    pthread_mutex_lock(&c->mu);
    const int st = c->loading ? 1 : c->ready ? 2 : 0;
    pthread_mutex_unlock(&c->mu);
    return st;
}

int models_is_loaded(srv *c) { return state(c) == 2; }

const char *models_state_name(srv *c) {
    static const char *const names[] = {"unloaded", "loading", "loaded"};
    return names[state(c)];
}

/* What a model costs while loaded; before its first load, its weight files. */
static size_t bytes_of(srv *c) {
    pthread_mutex_lock(&c->mu);
    const size_t n = c->loaded_bytes; /* the loader thread writes it */
    pthread_mutex_unlock(&c->mu);
    return n;
}

static size_t model_cost(srv *c) {
    const size_t known = bytes_of(c);
    if (known) return known;
    uint64_t w = 0;
    kvlm_error ignored;
    return kvlm_weight_bytes(c->path, &w, NULL, &ignored) ? 0 : (size_t)w;
}

size_t models_loaded_bytes(srv *s) {
    size_t n = 0;
    for (int i = 0; i < s->n_models; i++)
        if (models_is_loaded(s->models[i])) n += bytes_of(s->models[i]);
    return n;
}

static int idle(srv *c) {
    pthread_mutex_lock(&c->mu);
    const int r = c->ready && !c->loading && !c->n_jobs && !c->n_subs;
    pthread_mutex_unlock(&c->mu);
    return r;
}

void models_unload(srv *c) {
    if (state(c) != 2) return;
    srv *s = c->parent;
    engine_stop(c);
    kvlm_sched_free(c->sched);
    kvlm_engine_free(c->e);
    kvlm_kv_free(c->kv);
    c->sched = NULL;
    c->e = NULL;
    c->kv = NULL;
    chat_template_free(&c->tpl);
    memset(&c->tpl, 0, sizeof c->tpl);
    if (s->unload) s->unload(s->load_ctx, c->handle);
    c->handle = NULL;
    c->m = NULL;
    c->tok = NULL;
    c->c = NULL;
    pthread_mutex_lock(&c->mu);
    c->ready = 0;
    c->stopping = 0;
    pthread_mutex_unlock(&c->mu);
    /* the last counters stay (they restart when the model loads again, a
     * counter reset to Prometheus); the gauges read an empty model */
    kvlm_sched_stats st;
    kvlm_kv_stats kv;
    int inbox;
    metrics_snapshot(c->metrics, &st, &kv, &inbox);
    st.running = st.waiting = 0;
    kv.blocks_total = kv.blocks_used = kv.blocks_cached = 0;
    metrics_publish(c->metrics, &st, &kv, 0);
    c->unloads++;
}

/* Unloads idle models, least recently used first, until `need` more bytes
 * fit the budget beside what stays loaded (`keep` stays). 0 when they fit. */
static int make_room(srv *s, srv *keep, size_t need) {
    const size_t budget = s->cfg.max_loaded_bytes;
    if (!budget) return 0;
    int waited = 0;
    for (;;) {
        size_t used = 0;
        srv *lru = NULL;
        for (int i = 0; i < s->n_models; i++) {
            srv *c = s->models[i];
            const int st = c == keep ? 0 : state(c);
            if (st == 1) used += model_cost(c); /* loading: its estimate */
            if (st != 2) continue;
            used += bytes_of(c);
            if (idle(c) && (!lru || c->last_used < lru->last_used)) lru = c;
        }
        if (used + need <= budget || used == 0) return 0; /* alone over the budget: it loads anyway */
        if (!lru && waited < 50) {
            /* a request just answered may hold its model a moment longer
             * (the engine drops its reference after the last bytes) */
            usleep(1000);
            waited++;
            continue;
        }
        if (!lru) return -1;
        fprintf(stderr, "kvlm serve: unloading model '%s' (%.1f MB) to make room within --max-loaded-bytes\n",
                lru->model_name, (double)bytes_of(lru) / 1e6);
        models_unload(lru);
    }
}

static void fail_reply(reply *r, int status, const char *code, int retry, const char *msg) {
    api_error e;
    api_fail(&e, status, code, status == 404 ? "model" : NULL, "%s", msg);
    route_error(r, &e);
    r->retry_after = retry;
}

typedef struct load_waiter {
    struct MHD_Connection *conn;
    struct load_waiter *next;
} load_waiter;

/* The loader thread: the files, the pool, the engine; then it resumes the
 * connections that wait for it. */
static void *load_main(void *arg) {
    srv *c = arg, *s = c->parent;
    kvlm_error err;
    kvlm_model *m = NULL;
    const kvlm_tokenizer *tok = NULL;
    void *h = NULL;
    char msg[sizeof c->load_error] = "";
    size_t bytes = 0;
    if (s->load(s->load_ctx, c->path, &m, &tok, &h, &err)) {
        snprintf(msg, sizeof msg, "model '%.200s' did not load: %.150s", c->model_name, err.msg);
    } else {
        c->handle = h;
        if (srv_attach(c, m, tok, &err)) {
            snprintf(msg, sizeof msg, "model '%.200s' did not load: %.150s", c->model_name, err.msg);
            engine_stop(c);
            kvlm_sched_free(c->sched);
            kvlm_engine_free(c->e);
            kvlm_kv_free(c->kv);
            c->sched = NULL, c->e = NULL, c->kv = NULL;
            chat_template_free(&c->tpl);
            memset(&c->tpl, 0, sizeof c->tpl);
            s->unload(s->load_ctx, h);
            c->handle = NULL;
            c->m = NULL, c->tok = NULL, c->c = NULL;
        } else {
            uint64_t w = 0;
            kvlm_error ignored;
            if (kvlm_weight_bytes(c->path, &w, NULL, &ignored)) w = 0;
            bytes = (size_t)w + kvlm_model_repacked_bytes(m) + c->kv_pool_bytes;
            fprintf(stderr, "kvlm serve: loaded model '%s' (%.1f MB: weights and KV pool)\n", c->model_name,
                    (double)bytes / 1e6);
        }
    }
    if (msg[0]) fprintf(stderr, "kvlm serve: %s\n", msg);
    pthread_mutex_lock(&c->mu);
    if (msg[0]) {
        c->ready = 0;
        c->stopping = 0;
        c->failed_at = kvlm_now();
        snprintf(c->load_error, sizeof c->load_error, "%s", msg);
    } else {
        c->loaded_bytes = bytes;
        c->over_budget = 1;
        c->loads++;
    }
    c->loading = 0;
    while (c->waiters) {
        load_waiter *w = c->waiters;
        c->waiters = w->next;
        MHD_resume_connection(w->conn);
        free(w);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

/* Starts loading c on a thread of its own, after making room. 0, or -1
 * with r filled. */
static int start_load(srv *s, srv *c, reply *r) {
    if (make_room(s, c, model_cost(c))) {
        char msg[400];
        snprintf(msg, sizeof msg, "loading model '%.200s' needs the memory of models that are serving requests "
                 "(--max-loaded-bytes); retry shortly", c->model_name);
        fail_reply(r, 503, "model_busy", 1, msg);
        return -1;
    }
    if (c->loader_joinable) pthread_join(c->loader, NULL);
    c->loader_joinable = 0;
    pthread_mutex_lock(&c->mu);
    c->loading = 1;
    pthread_mutex_unlock(&c->mu);
    const int rc = pthread_create(&c->loader, NULL, load_main, c);
    if (rc) {
        pthread_mutex_lock(&c->mu);
        c->loading = 0;
        pthread_mutex_unlock(&c->mu);
        fail_reply(r, 500, "model_load_failed", 0, "cannot start a thread to load the model");
        return -1;
    }
    c->loader_joinable = 1;
    return 0;
}

int models_wait(srv *c, struct MHD_Connection *conn) {
    load_waiter *w = malloc(sizeof *w);
    if (!w) return -1;
    pthread_mutex_lock(&c->mu);
    if (!c->loading) {
        pthread_mutex_unlock(&c->mu);
        free(w);
        return 1;
    }
    w->conn = conn;
    w->next = c->waiters;
    c->waiters = w;
    MHD_suspend_connection(conn);
    pthread_mutex_unlock(&c->mu);
    return 0;
}

/* The "model" of a JSON body: NULL when absent, null or not JSON (the
 * request's own parser then says what is wrong). A body the request
 * parsers accept is parsed once, here, as they parse it (api_load_body),
 * and handed on in *parsed; another is read leniently for its "model"
 * only and left to the route's parser to refuse. */
static char *body_model(const char *body, size_t len, json_t **parsed) {
    *parsed = NULL;
    if (!body || !len) return NULL;
    api_error e;
    json_t *root = api_load_body(body, len, NULL, &e);
    if (root) *parsed = json_incref(root);
    else root = json_loadb(body, len, 0, NULL);
    const char *m = json_string_value(json_object_get(root, "model"));
    char *out = m ? strdup(m) : NULL;
    json_decref(root);
    return out;
}

srv *models_route(srv *s, const char *body, size_t len, const char *qmodel, reply *r) {
    if (!s->n_models) return s;
    json_t *parsed = NULL;
    char *named = qmodel && *qmodel ? strdup(qmodel) : body_model(body, len, &parsed);
    srv *c = named ? models_find(s, named) : s->models[0];
    if (!c) {
        json_decref(parsed);
        char msg[700];
        size_t n = (size_t)snprintf(msg, sizeof msg, "The model '%.200s' does not exist; this server serves", named);
        for (int i = 0; i < s->n_models && n + 1 < sizeof msg; i++)
            n += (size_t)snprintf(msg + n, sizeof msg - n, "%s '%s'", i ? "," : "", s->models[i]->model_name);
        fail_reply(r, 404, "model_not_found", 0, msg);
        free(named);
        return NULL;
    }
    c->asked = named && c->also && !strcmp(named, c->also) ? c->also : c->model_name;
    free(named);
    c->last_used = ++s->use_clock;
    pthread_mutex_lock(&c->mu);
    const int st = c->loading ? 1 : c->ready ? 2 : 0, over = c->over_budget;
    const int failed = c->failed_at > 0 && kvlm_now() - c->failed_at < 1.0;
    char why[sizeof c->load_error];
    snprintf(why, sizeof why, "%s", c->load_error);
    c->over_budget = 0;
    pthread_mutex_unlock(&c->mu);
    if (st == 2) {
        /* measured at load: it may need more room than its estimate */
        if (over) make_room(s, c, bytes_of(c));
        json_decref(r->parsed);
        r->parsed = parsed;
        return c;
    }
    json_decref(parsed); /* routed again when the load ends */
    if (st == 0 && failed) { /* the requests that waited for it, and for a second any other */
        fail_reply(r, 500, "model_load_failed", 0, why);
        return NULL;
    }
    if (st == 0 && start_load(s, c, r)) return NULL;
    r->wait_load = c;
    return NULL;
}

static json_t *card(srv *c) {
    const int loaded = models_is_loaded(c);
    json_t *j = json_pack("{s:s,s:s,s:I,s:s,s:{s:s}}", "id", c->model_name, "object", "model", "created",
                          (json_int_t)c->created, "owned_by", "kvlm", "status", "value", models_state_name(c));
    if (!j) return NULL;
    if (loaded) json_object_set_new(j, "max_model_len", json_integer(c->c->n_ctx));
    if (c->also) json_object_set_new(j, "aliases", json_pack("[s]", c->also));
    json_object_set_new(j, "kvlm_path", json_string(c->path));
    const size_t bytes = bytes_of(c);
    if (bytes) json_object_set_new(j, "kvlm_loaded_bytes", json_integer((json_int_t)bytes));
    return j;
}

static void reply_json(reply *r, int status, json_t *j) {
    r->status = status;
    r->content_type = "application/json";
    r->body = j ? json_dumps(j, JSON_COMPACT) : NULL;
    r->len = r->body ? strlen(r->body) : 0;
    if (!r->body) r->status = 500;
    json_decref(j);
}

void models_list(srv *s, reply *r) {
    json_t *data = json_array();
    for (int i = 0; i < s->n_models; i++) json_array_append_new(data, card(s->models[i]));
    reply_json(r, 200, json_pack("{s:s,s:o,s:I}", "object", "list", "data", data, "kvlm_max_loaded_bytes",
                                 (json_int_t)s->cfg.max_loaded_bytes));
}

void models_card(srv *s, const char *id, reply *r) {
    srv *c = models_find(s, id);
    if (c) reply_json(r, 200, card(c));
    else {
        char msg[300];
        snprintf(msg, sizeof msg, "The model '%.200s' does not exist", id);
        fail_reply(r, 404, "model_not_found", 0, msg);
    }
}

void models_stop(srv *s) {
    for (int i = 0; i < s->n_models; i++) {
        srv *c = s->models[i];
        if (c->loader_joinable) pthread_join(c->loader, NULL);
        c->loader_joinable = 0;
        engine_stop(c);
    }
}

void models_free(srv *s) {
    for (int i = 0; i < s->n_models; i++) {
        srv *c = s->models[i];
        if (c->loader_joinable) pthread_join(c->loader, NULL);
        c->loader_joinable = 0;
        models_unload(c);
        free(c->path);
        free(c->also);
        srv_free(c);
    }
    free(s->models);
    s->models = NULL;
    s->n_models = 0;
}
