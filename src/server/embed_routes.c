/*
 * The embeddings endpoint (see embed_routes.h): the job's checks on the
 * HTTP thread, the slices through kvlm_embed and the OpenAI-shaped answer
 * on the engine thread, under --timeout (counted from arrival, checked
 * before each slice) and counted in /metrics (metrics_observe_embedding).
 */
#include "server/embed_routes.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "app/embed_request.h"
#include "server/metrics.h"

struct embed_job {
    embed_request rq;
    float *out;         /* n_inputs x width, filled slice by slice */
    int next;           /* the first input not yet embedded */
};

void embed_job_free(embed_job *ej) {
    if (!ej) return;
    embed_request_free(&ej->rq);
    free(ej->out);
    free(ej);
}

void embed_route(srv *s, const char *body, size_t len, reply *r) {
    api_limits lim;
    api_error e;
    srv_limits(s, &lim);
    lim.body = r->parsed;
    const int width = s->c->n_embd;
    embed_job *ej = calloc(1, sizeof *ej);
    int rc = ej ? api_parse_embeddings(body, len, &lim, width, &ej->rq, &e) : api_fail(&e, 500, NULL, NULL, "out of memory");
    const char *src = NULL;
    if (!rc && !s->cfg.pooling && kvlm_model_pooling(s->m, &src) == KVLM_POOLING_UNSPECIFIED)
        rc = api_fail(&e, 400, "unsupported_pooling", NULL,
                      "this model's files name a pooling kvlm does not compute (%s); start the server with --pooling "
                      "mean, cls or last", src);
    for (int i = 0; !rc && i < ej->rq.n_inputs; i++) {
        const size_t blocks = ((size_t)ej->rq.n_ids[i] + (size_t)lim.block_size - 1) / (size_t)lim.block_size;
        if (blocks > lim.kv_blocks)
            rc = api_fail(&e, 400, "kv_cache_too_small", "input", "input %d needs %zu KV blocks; the server's pool has %zu",
                          i, blocks, lim.kv_blocks);
    }
    api_request rq = {.n_prompts = 1, .n = 1};
    if (!rc) {
        rq.prompts = calloc(1, sizeof *rq.prompts);
        rq.n_prompt = calloc(1, sizeof *rq.n_prompt);
        rq.max_new = calloc(1, sizeof *rq.max_new);
        ej->out = malloc((size_t)ej->rq.n_inputs * width * sizeof *ej->out);
        if (!rq.prompts || !rq.n_prompt || !rq.max_new || !ej->out) rc = api_fail(&e, 500, NULL, NULL, "out of memory");
    }
    kvlm_error err;
    if (!rc && !(r->j = job_new(s, &rq, &err))) rc = api_fail(&e, 500, NULL, NULL, "%s", err.msg);
    api_request_free(&rq);
    if (rc) {
        embed_job_free(ej);
        route_error(r, &e);
        return;
    }
    r->j->prompt_tokens = ej->rq.total_tokens;
    r->j->embed = ej;
}

/* ------------------------------------------------------------ engine side */

/* The first d values of v (width wide) scaled to norm 1, in place. */
static void cut(float *v, int d) {
    double ss = 0;
    for (int i = 0; i < d; i++) ss += (double)v[i] * v[i];
    if (!(ss > 0)) return;
    const double inv = 1.0 / sqrt(ss);
    for (int i = 0; i < d; i++) v[i] = (float)(v[i] * inv);
}

static char *answer_body(srv *s, embed_job *ej, int width) {
    const int d = ej->rq.dimensions ? ej->rq.dimensions : width;
    sbuf b = {0};
    sbuf_adds(&b, "{\"object\":\"list\",\"data\":[");
    for (int i = 0; i < ej->rq.n_inputs; i++) {
        float *v = ej->out + (size_t)i * width;
        if (d < width) cut(v, d);
        sbuf_printf(&b, "%s{\"object\":\"embedding\",\"index\":%d,\"embedding\":", i ? "," : "", i);
        if (ej->rq.base64) {
            char *t = embed_base64(v, (size_t)d);
            if (!t) {
                sbuf_free(&b);
                return NULL;
            }
            sbuf_printf(&b, "\"%s\"}", t);
            free(t);
            continue;
        }
        sbuf_adds(&b, "[");
        for (int k = 0; k < d; k++) sbuf_printf(&b, "%s%.9g", k ? "," : "", (double)v[k]);
        sbuf_adds(&b, "]}");
    }
    json_t *name = json_string(s->model_name);
    char *mn = name ? json_dumps(name, JSON_ENCODE_ANY) : NULL;
    json_decref(name);
    sbuf_printf(&b, "],\"model\":%s,\"usage\":{\"prompt_tokens\":%d,\"total_tokens\":%d}}", mn ? mn : "\"\"",
                ej->rq.total_tokens, ej->rq.total_tokens);
    free(mn);
    sbuf_add(&b, "", 1); /* NUL */
    if (b.failed) {
        sbuf_free(&b);
        return NULL;
    }
    return b.data;
}

int embed_run(srv *s, job *j, char **body, api_error *e) {
    embed_job *ej = j->embed;
    const int width = s->c->n_embd, n = ej->rq.n_inputs;
    const int budget = s->cfg.max_batch_tokens > 0 ? s->cfg.max_batch_tokens : 256;
    *body = NULL;
    if (s->cfg.timeout > 0 && kvlm_now() > j->t_arrival + s->cfg.timeout)
        return api_fail(e, 503, "timeout", NULL, "the embeddings did not finish within --timeout (%g s)",
                        (double)s->cfg.timeout), 0;
    int k = ej->next, tokens = 0;
    while (k < n && (k == ej->next || tokens + ej->rq.n_ids[k] <= budget)) tokens += ej->rq.n_ids[k++];
    kvlm_embed_params p = kvlm_embed_default_params();
    p.pooling = s->cfg.pooling ? s->cfg.pooling : KVLM_POOLING_UNSPECIFIED;
    p.max_batch_tokens = budget;
    kvlm_error err;
    const int rc = kvlm_embed(s->e, (const int32_t *const *)ej->rq.ids + ej->next, ej->rq.n_ids + ej->next,
                              k - ej->next, &p, ej->out + (size_t)ej->next * width, (size_t)(k - ej->next) * width,
                              &err);
    if (rc == KVLM_ERR_NOMEM) return 1;
    if (rc) return api_fail(e, rc == KVLM_ERR_ARG ? 400 : 500, "embedding_failed", "input", "%s", err.msg), 0;
    ej->next = k;
    if (k < n) return 2;
    if (!(*body = answer_body(s, ej, width))) api_fail(e, 500, NULL, NULL, "out of memory");
    else metrics_observe_embedding(s->metrics, n, ej->rq.total_tokens, kvlm_now() - j->t_arrival);
    return 0;
}
