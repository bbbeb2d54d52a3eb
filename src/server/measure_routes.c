/*
 * The next-token measurement (see measure_routes.h): the body's checks on
 * the HTTP thread, the forward pass and the statistics on the engine
 * thread.
 */
#include "server/measure_routes.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvlm_measure.h"
#include "app/json_text.h"

#define MAX_TOP 50
#define MAX_TEMPERATURE 10.0

static int parse_temps(json_t *root, measure_req *m, api_error *e) {
    static const float defaults[] = {0.5f, 1.0f, 1.5f};
    json_t *t = json_object_get(root, "temperatures");
    if (!t || json_is_null(t)) {
        m->n_temps = 3;
        memcpy(m->temps, defaults, sizeof defaults);
        return 0;
    }
    const size_t n = json_is_array(t) ? json_array_size(t) : 0;
    if (n < 1 || n > MEASURE_MAX_TEMPS)
        return api_fail(e, 400, "invalid_value", "temperatures", "'temperatures' must be a list of 1 to %d numbers",
                        MEASURE_MAX_TEMPS);
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(t, i);
        const double v = json_is_number(x) ? json_number_value(x) : NAN;
        if (!(v > 0 && v <= MAX_TEMPERATURE))
            return api_fail(e, 400, "invalid_value", "temperatures",
                            "'temperatures[%zu]' must be a number above 0 and at most %g", i, MAX_TEMPERATURE);
        m->temps[i] = (float)v;
    }
    m->n_temps = (int)n;
    return 0;
}

static int parse_top(json_t *root, measure_req *m, api_error *e) {
    json_t *t = json_object_get(root, "top");
    m->top = 10;
    if (!t || json_is_null(t)) return 0;
    const double v = json_is_number(t) ? json_number_value(t) : NAN;
    if (!(v >= 1 && v <= MAX_TOP && v == floor(v)))
        return api_fail(e, 400, "invalid_value", "top", "'top' must be a whole number from 1 to %d", MAX_TOP);
    m->top = (int)v;
    return 0;
}

void measure_route(srv *s, const char *body, size_t len, reply *r) {
    static const char *const keys[] = {"model", "prompt", "messages", "tools", "temperatures", "top", NULL};
    api_limits lim;
    api_error e;
    srv_limits(s, &lim);
    lim.body = r->parsed;
    measure_req *m = calloc(1, sizeof *m);
    json_t *root = m ? api_parse_object(body, len, keys, &lim, &e) : NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = !m ? api_fail(&e, 500, NULL, NULL, "out of memory") : !root ? -1 : 0;
    if (!rc) rc = parse_temps(root, m, &e);
    if (!rc) rc = parse_top(root, m, &e);
    if (!rc) rc = api_prompt_ids(root, &lim, 1, 1, &ids, &n, &e);
    const char *pkey = root && json_object_get(root, "messages") ? "messages" : "prompt";
    json_decref(root);
    if (!rc && n < 1) rc = api_fail(&e, 400, "invalid_prompt", pkey, "the prompt is empty: it must have a token");
    if (!rc && n >= (size_t)lim.n_ctx)
        rc = api_fail(&e, 400, "context_length_exceeded", pkey,
                      "the prompt has %zu tokens; this model's context window is %d tokens, so at most %d", n,
                      lim.n_ctx, lim.n_ctx - 1);
    if (!rc && (n + (size_t)lim.block_size - 1) / (size_t)lim.block_size > lim.kv_blocks)
        rc = api_fail(&e, 400, "kv_cache_too_small", pkey, "the prompt needs %zu KV blocks; the server's pool has %zu",
                      (n + (size_t)lim.block_size - 1) / (size_t)lim.block_size, lim.kv_blocks);
    if (rc) free(ids);
    else if (!(r->j = job_for_ids(s, ids, n, &e))) rc = -1;
    if (rc) {
        free(m);
        route_error(r, &e);
        return;
    }
    r->j->measure = m;
}

/* ------------------------------------------------------------ engine side */

/* The next-token logits after the prompt, on a scratch sequence freed
 * before returning. 1: no room now. */
static int next_logits(srv *s, const int32_t *ids, int n, float *logits, api_error *e) {
    kvlm_error err;
    const int seq = kvlm_kv_seq_new(s->kv, &err);
    if (seq < 0) return err.code == KVLM_ERR_NOMEM ? 1 : api_fail(e, 500, NULL, NULL, "%s", err.msg);
    if (kvlm_kv_blocks_needed(s->kv, seq, n) > kvlm_kv_available_blocks(s->kv)) {
        kvlm_kv_seq_free(s->kv, seq);
        return 1;
    }
    const kvlm_batch_item it = {.seq = seq, .tokens = ids, .n_tokens = n, .logits_all = 0};
    const int rc = kvlm_engine_step(s->e, &it, 1, logits, &err);
    kvlm_kv_seq_free(s->kv, seq);
    return rc ? api_fail(e, 500, "engine_error", NULL, "%s", err.msg) : 0;
}

/* One temperature's statistics and most likely tokens. */
static json_t *temperature_row(srv *s, const float *logits, float *scaled, int V, float t, int top, api_error *e) {
    kvlm_dist_stats st;
    kvlm_error err;
    if (kvlm_dist_stats_compute(logits, V, t, NULL, &st, &err)) {
        api_fail(e, 500, NULL, NULL, "%s", err.msg);
        return NULL;
    }
    /* softmax(logits / t): the top tokens' log-probabilities at t */
    for (int i = 0; i < V; i++) scaled[i] = logits[i] / t;
    int32_t ids[MAX_TOP];
    float lps[MAX_TOP];
    const int k = kvlm_top_logprobs(scaled, V, top, ids, lps);
    json_t *tops = json_array();
    for (int i = 0; i < k; i++) {
        size_t len = 0;
        const char *piece = s->tok ? kvlm_tokenizer_piece(s->tok, ids[i], &len) : NULL;
        json_array_append_new(tops, json_pack("{s:i,s:o,s:f}", "id", ids[i], "text",
                                              piece ? ts_json_string(piece, len) : json_null(), "p", exp(lps[i])));
    }
    return json_pack("{s:f,s:f,s:f,s:f,s:f,s:i,s:i,s:o}", "temperature", (double)t, "entropy_bits",
                     st.entropy / M_LN2, "entropy_nats", st.entropy, "top1", st.top1, "top5", st.top5, "n90", st.n90,
                     "support", st.support, "top", tops);
}

int measure_run(srv *s, job *j, char **body, api_error *e) {
    const measure_req *m = j->measure;
    const int V = s->c->vocab_size;
    *body = NULL;
    float *logits = malloc(2 * (size_t)V * sizeof *logits);
    if (!logits) return api_fail(e, 500, NULL, NULL, "out of memory");
    int rc = next_logits(s, j->rq.prompts[0], j->rq.n_prompt[0], logits, e);
    json_t *rows = rc ? NULL : json_array();
    for (int i = 0; rows && i < m->n_temps; i++) {
        json_t *row = temperature_row(s, logits, logits + V, V, m->temps[i], m->top, e);
        if (!row) {
            json_decref(rows);
            rows = NULL;
            rc = -1;
        } else {
            json_array_append_new(rows, row);
        }
    }
    free(logits);
    if (rc) return rc > 0 ? 1 : 0;
    json_t *doc = json_pack("{s:s,s:i,s:i,s:o}", "model", s->model_name, "prompt_tokens", j->rq.n_prompt[0], "vocab",
                            V, "temperatures", rows);
    *body = doc ? json_dumps(doc, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(doc);
    if (!*body) api_fail(e, 500, NULL, NULL, "out of memory");
    return 0;
}
