/*
 * Endpoint dispatch and the replies that need no engine step (see
 * routes.h). Nothing here reads the model's fields before srv_ready. /tokenize and /detokenize follow vLLM's shapes:
 * {"count", "max_model_len", "tokens"} and {"prompt"}.
 */
#include "server/routes.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "app/anthropic_request.h"
#include "app/infill_request.h"
#include "app/kv_sizing.h"
#include "app/responses_request.h"
#include "server/api_stream.h"
#include "server/engine_view.h"
#include "server/embed_routes.h"
#include "server/cache_routes.h"
#include "server/measure_routes.h"
#include "server/metrics_models.h"
#include "server/models.h"
#include "server/openai_response.h"
#include "server/responses_store.h"
#include "server/static_files.h"
#include "app/structured.h"
#include "kvlm_measure.h"

static const char *const json_ctype = "application/json";

static void reply_json(reply *r, int status, json_t *j) {
    r->status = status;
    r->content_type = json_ctype;
    r->body = json_dumps(j, JSON_COMPACT);
    r->len = r->body ? strlen(r->body) : 0;
    json_decref(j);
}

void route_error(reply *r, const api_error *e) {
    r->status = e->status;
    r->content_type = json_ctype;
    r->body = r->anthropic ? anthropic_error_body(e) : resp_error_body(e);
    r->len = r->body ? strlen(r->body) : 0;
}

int route_is_anthropic(const char *url) { return !strncmp(url, "/v1/messages", 12); }

static json_t *model_card(srv *s) {
    return json_pack("{s:s,s:s,s:I,s:s,s:i}", "id", s->model_name, "object", "model", "created",
                     (json_int_t)s->created, "owned_by", "kvlm", "max_model_len", s->c->n_ctx);
}

static void models(srv *s, reply *r) {
    json_t *data = json_array();
    json_array_append_new(data, model_card(s));
    reply_json(r, 200, json_pack("{s:s,s:o}", "object", "list", "data", data));
}

static void one_model(srv *s, const char *id, reply *r) {
    api_error e;
    if (!strcmp(id, s->model_name)) reply_json(r, 200, model_card(s));
    else {
        api_fail(&e, 404, "model_not_found", "model", "The model '%s' does not exist; this server serves '%s'", id,
                 s->model_name);
        route_error(r, &e);
    }
}

/* 200 "ok" while serving; 503 "loading" before, 503 "draining" once a
 * drain began (load balancers send only to 200). */
static void health(srv *s, reply *r) {
    pthread_mutex_lock(&s->mu);
    const int draining = s->draining || s->stopping, ready = s->ready;
    pthread_mutex_unlock(&s->mu);
    const char *st = draining ? "draining" : !ready ? "loading" : "ok";
    reply_json(r, draining || !ready ? 503 : 200, json_pack("{s:s}", "status", st));
}

/* Any endpoint that needs the model, while it loads. */
static void loading(reply *r) {
    api_error e;
    api_fail(&e, 503, "model_loading", NULL, "%s", "the model is still loading; retry shortly");
    route_error(r, &e);
    r->retry_after = 1;
}

static void metrics(srv *s, reply *r) {
    sbuf o = {0};
    int open;
    unsigned long long refused, cut;
    guard_counts(s->guard, &open, &refused, &cut);
    metrics_set_connections(s->metrics, open, refused, cut);
    pthread_mutex_lock(&s->mu);
    const int ready = s->ready, draining = s->draining || s->stopping;
    pthread_mutex_unlock(&s->mu);
    metrics_set_state(s->metrics, !ready, ready && !draining);
    if (s->n_models) metrics_models_render(s, s->metrics, &o);
    else metrics_render(s->metrics, &o);
    r->status = 200;
    r->content_type = "text/plain; version=0.0.4; charset=utf-8";
    r->body = o.data;
    r->len = o.len;
}

/* A body the engine view serialized (NULL: out of memory). */
static void reply_text(reply *r, char *body, size_t len) {
    if (!body) {
        api_error e;
        api_fail(&e, 500, NULL, NULL, "%s", "out of memory");
        route_error(r, &e);
        return;
    }
    r->status = 200;
    r->content_type = json_ctype;
    r->body = body;
    r->len = len;
}

/* The cache's layers grouped by window (kvlm_kv_layer_types) as
 * "layers": {"global", "window", "types": [...]}, and kvlm kv's figures of
 * them (app/kv_sizing.c) into kv: bytes per token of the global and the
 * window layers, and one sequence at the model's context with the window
 * layers keeping only their window. *window receives the window of the
 * window layers (the largest when they differ; 0: none). NULL: no memory. */
static json_t *layer_types(srv *s, kvlm_dtype kvt, json_t *kv, int *window) {
    const kvlm_config *c = s->c;
    kvlm_kv_layer_type t[16];
    const int nt = kvlm_kv_layer_types(s->kv, t, 16);
    int *windows = calloc((size_t)(c->n_layer > 0 ? c->n_layer : 1), sizeof *windows);
    json_t *types = json_array(), *j = NULL;
    int global = 0, windowed = 0, l = 0;
    *window = 0;
    for (int i = 0; windows && types && i < nt && i < 16; i++) {
        if (t[i].window) windowed += t[i].n_layers;
        else global += t[i].n_layers;
        if (t[i].window > *window) *window = t[i].window;
        for (int k = 0; k < t[i].n_layers && l < c->n_layer; k++) windows[l++] = t[i].window;
        json_array_append_new(types, json_pack("{s:i,s:i,s:I,s:b}", "window", t[i].window, "n_layers", t[i].n_layers,
                                               "kv_bytes_per_token", (json_int_t)t[i].bytes_per_token, "releases",
                                               t[i].releases));
    }
    kvs_model m;
    uint64_t g = 0, w = 0, at_ctx = 0;
    if (windows && types) {
        kvs_model_from_config(&m, c, windows, s->model_name);
        if (!kvs_split_bytes_per_token(&m, kvt, &g, &w) && !kvs_context_bytes(&m, kvt, (uint64_t)c->n_ctx, &at_ctx)) {
            json_object_set_new(kv, "bytes_per_token_global", json_integer((json_int_t)g));
            json_object_set_new(kv, "bytes_per_token_window", json_integer((json_int_t)w));
            json_object_set_new(kv, "max_context_bytes", json_integer((json_int_t)at_ctx));
            json_object_set_new(kv, "max_context_pool_bytes",
                                json_integer((json_int_t)kvlm_kv_seq_bytes(s->kv, c->n_ctx)));
        }
        j = json_pack("{s:i,s:i,s:o}", "global", global, "window", windowed, "types", types);
        types = NULL;
    }
    json_decref(types);
    free(windows);
    return j;
}

/* What a capacity planner needs: the shapes, the layers by window, the
 * weights, the KV cost per token in each cache dtype and the pool this
 * server runs. */
static void model_info(srv *s, reply *r) {
    const kvlm_config *c = s->c;
    kvlm_kv_info info;
    kvlm_kv_get_info(s->kv, &info);
    const kvlm_dtype kvt = info.dtype;
    const int bs = info.block_size;
    uint64_t wbytes = 0;
    kvlm_error err;
    const char *path = kvlm_model_tokenizer_path(s->m);
    json_t *weights = json_pack("{s:s,s:I,s:I}", "dtype", kvlm_dtype_name(c->weight_dtype), "params",
                                (json_int_t)kvlm_model_param_count(s->m), "decode_bytes",
                                (json_int_t)kvlm_model_decode_bytes(s->m));
    json_object_set_new(weights, "bytes",
                        path && *path && !kvlm_weight_bytes(path, &wbytes, NULL, &err) ? json_integer((json_int_t)wbytes)
                                                                                   : json_null());
    json_t *j = json_pack(
        "{s:s,s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:o,"
        "s:{s:s,s:I,s:{s:I,s:I},s:i,s:I,s:I,s:I,s:i}}",
        "model", s->model_name, "architecture", c->arch, "n_layers", c->n_layer, "n_heads", c->n_head, "n_kv_heads",
        c->n_kv_head, "head_dim", c->head_dim, "n_embd", c->n_embd, "n_ff", c->n_ff, "vocab", c->vocab_size, "n_ctx",
        c->n_ctx, "sliding_window", 0, "weights", weights, "kv", "dtype",
        kvlm_dtype_name(kvt), "bytes_per_token", (json_int_t)kvlm_kv_bytes_per_token(c, kvt),
        "bytes_per_token_by_dtype", "f32", (json_int_t)kvlm_kv_bytes_per_token(c, KVLM_F32), "f16",
        (json_int_t)kvlm_kv_bytes_per_token(c, KVLM_F16), "block_size", bs, "pool_blocks", (json_int_t)s->kv_blocks,
        "pool_tokens", (json_int_t)(s->kv_blocks * (size_t)bs), "pool_bytes", (json_int_t)s->kv_pool_bytes,
        "max_seqs", info.max_seqs);
    /* q8_0 only where the head dim is whole blocks of 32 (the cache refuses it otherwise) */
    const size_t q8 = kvlm_kv_bytes_per_token(c, KVLM_Q8_0);
    if (j && q8)
        json_object_set_new(json_object_get(json_object_get(j, "kv"), "bytes_per_token_by_dtype"), "q8_0",
                            json_integer((json_int_t)q8));
    int window = 0;
    json_t *layers = j ? layer_types(s, kvt, json_object_get(j, "kv"), &window) : NULL;
    if (!j || !layers) {
        json_decref(j);
        json_decref(layers);
        api_error e;
        api_fail(&e, 500, NULL, NULL, "%s", "out of memory");
        route_error(r, &e);
        return;
    }
    /* the window of the window layers, whether all or some layers have it */
    json_object_set_new(j, "sliding_window", json_integer(window));
    json_object_set_new(j, "layers", layers);
    reply_json(r, 200, j);
}

static void tokenize(srv *s, const char *body, size_t len, reply *r) {
    api_limits lim;
    api_error e;
    int32_t *ids;
    size_t n;
    srv_limits(s, &lim);
    lim.body = r->parsed;
    if (api_parse_tokenize(body, len, &lim, &ids, &n, &e)) {
        route_error(r, &e);
        return;
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(arr, json_integer(ids[i]));
    free(ids);
    reply_json(r, 200, json_pack("{s:I,s:i,s:o}", "count", (json_int_t)n, "max_model_len", s->c->n_ctx, "tokens", arr));
}

static void detokenize(srv *s, const char *body, size_t len, reply *r) {
    api_limits lim;
    api_error e;
    int32_t *ids;
    size_t n;
    srv_limits(s, &lim);
    lim.body = r->parsed;
    if (api_parse_detokenize(body, len, &lim, &ids, &n, &e)) {
        route_error(r, &e);
        return;
    }
    char *text = NULL;
    size_t tlen = 0;
    kvlm_error err;
    if (kvlm_tokenizer_decode(s->tok, ids, n, &text, &tlen, &err)) {
        api_fail(&e, 400, "invalid_token", "tokens", "%s", err.msg);
        route_error(r, &e);
    } else {
        reply_json(r, 200, json_pack("{s:o}", "prompt", ts_json_string(text, tlen)));
    }
    free(text);
    free(ids);
}

static json_t *stored_conversation(void *user, const char *id) {
    srv *s = user;
    return rstore_conversation(s->responses, id, kvlm_now());
}

/* shape: API_SHAPE_OPENAI (chat or not), ANTHROPIC or RESPONSES; chat -1:
 * /infill (a completion in OpenAI's shape). */
static void completion(srv *s, int chat, api_shape shape, const char *body, size_t len, reply *r) {
    api_limits lim;
    api_error e;
    api_request rq;
    srv_limits(s, &lim);
    lim.body = r->parsed;
    const int rc = shape == API_SHAPE_ANTHROPIC   ? anth_parse_messages(body, len, &lim, &rq, &e)
                   : shape == API_SHAPE_RESPONSES ? oresp_parse(body, len, &lim, stored_conversation, s, &rq, &e)
                   : chat < 0                     ? api_parse_infill(body, len, &lim, &rq, &e)
                                                  : api_parse_completion(body, len, chat, &lim, &rq, &e);
    if (rc) {
        route_error(r, &e);
        return;
    }
    struct kvlm_grammar *g;
    if (structured_build(&rq, &g, &e)) {
        api_request_free(&rq);
        route_error(r, &e);
        return;
    }
    kvlm_error err;
    if (!(r->j = job_new(s, &rq, &err))) {
        api_request_free(&rq);
        structured_free(g);
        api_fail(&e, 500, NULL, NULL, "%s", err.msg);
        route_error(r, &e);
        return;
    }
    r->j->grammar = g;
    if (shape != API_SHAPE_OPENAI) { /* the HTTP thread still owns the job */
        char *dash = strchr(r->j->id, '-');
        char tail[sizeof r->j->id];
        memcpy(tail, dash ? dash + 1 : r->j->id, sizeof tail - (size_t)(dash ? dash + 1 - r->j->id : 0));
        tail[32] = 0;
        snprintf(r->j->id, sizeof r->j->id, "%s%.32s", shape == API_SHAPE_ANTHROPIC ? "msg_" : "resp_", tail);
    }
}

static void count_tokens(srv *s, const char *body, size_t len, reply *r) {
    api_limits lim;
    api_error e;
    int n;
    srv_limits(s, &lim);
    lim.body = r->parsed;
    if (anth_count_tokens(body, len, &lim, &n, &e)) route_error(r, &e);
    else reply_json(r, 200, json_pack("{s:i}", "input_tokens", n));
}

/* GET /v1/responses/{id}: a stored response. */
static void stored_response(srv *s, const char *id, reply *r) {
    char *body = rstore_body(s->responses, id, kvlm_now());
    if (!body) {
        api_error e;
        api_fail(&e, 404, "not_found", "response_id", "Response with id '%.60s' not found (never stored, expired or "
                 "evicted).", id);
        route_error(r, &e);
        return;
    }
    reply_text(r, body, strlen(body));
}

int route_is_web(const srv *s, const char *url) { return !s->cfg.no_web && static_find(url); }

int route_web(srv *s, const char *method, const char *url, const char *if_none_match, reply *r) {
    const static_file *f = s->cfg.no_web ? NULL : static_find(url);
    if (!f) return 0;
    memset(r, 0, sizeof *r);
    if (strcmp(method, "GET") && strcmp(method, "HEAD")) {
        api_error e;
        api_fail(&e, 405, "method_not_allowed", NULL, "%s takes GET, not %s", url, method);
        route_error(r, &e);
        r->allow = "GET, HEAD";
        return 1;
    }
    r->web_file = 1;
    r->etag = f->etag;
    if (static_etag_matches(if_none_match, f->etag)) {
        r->status = 304;
        return 1;
    }
    r->status = 200;
    r->content_type = static_content_type(f->path);
    r->body = (char *)f->data;
    r->len = f->len;
    return 1;
}

typedef struct endpoint {
    const char *path, *method;
    int id;
} endpoint;

enum { EP_HEALTH, EP_MODELS, EP_METRICS, EP_TOKENIZE, EP_DETOKENIZE, EP_COMPLETIONS, EP_CHAT, EP_ENGINE,
       EP_ENGINE_HISTORY, EP_ENGINE_STREAM, EP_MODEL_INFO, EP_MEASURE_NEXT, EP_MESSAGES, EP_COUNT_TOKENS,
       EP_RESPONSES, EP_INFILL, EP_EMBEDDINGS };

static const endpoint endpoints[] = {
    {"/health", "GET", EP_HEALTH},
    {"/v1/models", "GET", EP_MODELS},
    {"/metrics", "GET", EP_METRICS},
    {"/tokenize", "POST", EP_TOKENIZE},
    {"/detokenize", "POST", EP_DETOKENIZE},
    {"/v1/completions", "POST", EP_COMPLETIONS},
    {"/v1/chat/completions", "POST", EP_CHAT},
    {"/v1/messages", "POST", EP_MESSAGES},
    {"/v1/messages/count_tokens", "POST", EP_COUNT_TOKENS},
    {"/v1/responses", "POST", EP_RESPONSES},
    {"/infill", "POST", EP_INFILL},
    {"/v1/embeddings", "POST", EP_EMBEDDINGS},
    {"/kvlm/engine", "GET", EP_ENGINE},
    {"/kvlm/engine/history", "GET", EP_ENGINE_HISTORY},
    {"/kvlm/engine/stream", "GET", EP_ENGINE_STREAM},
    {"/kvlm/model", "GET", EP_MODEL_INFO},
    {"/kvlm/measure/next-token", "POST", EP_MEASURE_NEXT},
};
#define N_ENDPOINTS (sizeof endpoints / sizeof endpoints[0])

static const endpoint *find(const char *url) {
    for (size_t i = 0; i < N_ENDPOINTS; i++)
        if (!strcmp(url, endpoints[i].path)) return &endpoints[i];
    return NULL;
}

void route(srv *s, const char *method, const char *url, const char *body, size_t len, const char *qmodel,
           reply *r) {
    memset(r, 0, sizeof *r);
    r->anthropic = route_is_anthropic(url);
    api_error e;
    const endpoint *ep = find(url);
    if (!ep && !strncmp(url, "/v1/responses/", 14) && (!strcmp(method, "GET") || !strcmp(method, "HEAD"))) {
        srv *t = s;
        if (!srv_ready(s)) loading(r);
        else if ((t = models_route(s, NULL, 0, qmodel, r))) stored_response(t, url + 14, r);
        return;
    }
    if (!ep && cache_is_pin_path(url)) { /* pins are per model: the one the request names (models.h) */
        srv *t = s;
        if (!srv_ready(s)) loading(r);
        else if ((t = models_route(s, body, len, qmodel, r))) cache_route(t, method, url, body, len, r);
        json_decref(r->parsed);
        r->parsed = NULL;
        return;
    }
    if (!ep && !strncmp(url, "/v1/models/", 11) && (!strcmp(method, "GET") || !strcmp(method, "HEAD"))) {
        if (!srv_ready(s)) loading(r);
        else if (s->n_models) models_card(s, url + 11, r);
        else one_model(s, url + 11, r);
        return;
    }
    if (!ep) {
        api_fail(&e, 404, "not_found", NULL, "no endpoint %s %s", method, url);
        route_error(r, &e);
        return;
    }
    /* HEAD is GET without the body (libmicrohttpd leaves the body out). */
    if (strcmp(method, ep->method) && !(!strcmp(method, "HEAD") && !strcmp(ep->method, "GET"))) {
        api_fail(&e, 405, "method_not_allowed", NULL, "%s takes %s, not %s", url, ep->method, method);
        route_error(r, &e);
        r->allow = strcmp(ep->method, "GET") ? ep->method : "GET, HEAD";
        return;
    }
    if (ep->id != EP_HEALTH && ep->id != EP_METRICS && !srv_ready(s)) {
        loading(r);
        return;
    }
    if (ep->id == EP_MODELS && s->n_models) {
        models_list(s, r);
        return;
    }
    /* Several models: the model the request names (models.h) serves it. */
    if (ep->id != EP_HEALTH && ep->id != EP_METRICS && !(s = models_route(s, body, len, qmodel, r))) return;
    switch (ep->id) {
    case EP_HEALTH: health(s, r); break;
    case EP_MODELS: models(s, r); break;
    case EP_METRICS: metrics(s, r); break;
    case EP_TOKENIZE: tokenize(s, body, len, r); break;
    case EP_DETOKENIZE: detokenize(s, body, len, r); break;
    case EP_COMPLETIONS: completion(s, 0, API_SHAPE_OPENAI, body, len, r); break;
    case EP_CHAT: completion(s, 1, API_SHAPE_OPENAI, body, len, r); break;
    case EP_MESSAGES: completion(s, 1, API_SHAPE_ANTHROPIC, body, len, r); break;
    case EP_COUNT_TOKENS: count_tokens(s, body, len, r); break;
    case EP_RESPONSES: completion(s, 1, API_SHAPE_RESPONSES, body, len, r); break;
    case EP_INFILL: completion(s, -1, API_SHAPE_OPENAI, body, len, r); break;
    case EP_ENGINE: {
        size_t n = 0;
        char *b = view_snapshot(s, &n);
        reply_text(r, b, n);
        break;
    }
    case EP_ENGINE_HISTORY: {
        size_t n = 0;
        char *b = view_history(s, &n);
        reply_text(r, b, n);
        break;
    }
    case EP_ENGINE_STREAM:
        r->engine_stream = 1;
        r->target = s;
        break;
    case EP_MODEL_INFO: model_info(s, r); break;
    case EP_MEASURE_NEXT: measure_route(s, body, len, r); break;
    case EP_EMBEDDINGS: embed_route(s, body, len, r); break;
    }
    json_decref(r->parsed);
    r->parsed = NULL;
}
