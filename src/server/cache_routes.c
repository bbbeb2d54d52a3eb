/*
 * Pinned prefixes over HTTP (see cache_routes.h): the request's checks on
 * the HTTP thread, the warm-up and the pin table on the engine thread.
 */
#include "server/cache_routes.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PIN_PATH "/v1/cache/pin"

int cache_is_pin_path(const char *url) {
    return !strcmp(url, PIN_PATH) || !strncmp(url, PIN_PATH "/", sizeof PIN_PATH);
}

size_t cache_pin_bound(const kvlm_kv *kv) {
    kvlm_kv_info in;
    kvlm_kv_get_info(kv, &in);
    const size_t one = (size_t)((in.n_ctx + in.block_size - 1) / in.block_size) * (size_t)in.n_slices;
    return in.n_blocks > one ? in.n_blocks - one : 0;
}

/* The job of one pin operation; prompt ids (PIN_ADD) or none. */
static void make_job(srv *s, pin_req *p, int32_t *ids, size_t n, reply *r) {
    api_error e;
    if (!(r->j = job_for_ids(s, ids, n, &e))) {
        free(p);
        route_error(r, &e);
        return;
    }
    r->j->pin = p;
}

/* POST: the prompt's ids, checked against the context and the bound. */
static void pin_add(srv *s, const char *body, size_t len, pin_req *p, reply *r) {
    static const char *const keys[] = {"model", "prompt", "messages", "tools", NULL};
    api_limits lim;
    api_error e;
    srv_limits(s, &lim);
    lim.body = r->parsed;
    json_t *root = api_parse_object(body, len, keys, &lim, &e);
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = root ? 0 : -1;
    /* messages without the assistant's opening: the prefix later requests start with */
    if (!rc) rc = api_prompt_ids(root, &lim, 1, 0, &ids, &n, &e);
    const char *pkey = root && json_object_get(root, "messages") ? "messages" : "prompt";
    json_decref(root);
    if (!rc && n < (size_t)lim.block_size)
        rc = api_fail(&e, 400, "invalid_prompt", pkey,
                      "the prompt has %zu tokens; a pin holds whole KV blocks of %d tokens, so at least %d", n,
                      lim.block_size, lim.block_size);
    if (!rc && n >= (size_t)lim.n_ctx)
        rc = api_fail(&e, 400, "context_length_exceeded", pkey,
                      "the prompt has %zu tokens; this model's context window is %d tokens, so at most %d", n,
                      lim.n_ctx, lim.n_ctx - 1);
    if (rc) {
        free(ids);
        free(p);
        route_error(r, &e);
        return;
    }
    make_job(s, p, ids, n, r);
}

void cache_route(srv *s, const char *method, const char *url, const char *body, size_t len, reply *r) {
    api_error e;
    const int root = !strcmp(url, PIN_PATH);
    const char *allow = root ? "GET, HEAD, POST" : "DELETE";
    const int get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    if (root ? !(get || !strcmp(method, "POST")) : strcmp(method, "DELETE")) {
        api_fail(&e, 405, "method_not_allowed", NULL, "%s takes %s, not %s", url, allow, method);
        route_error(r, &e);
        r->allow = allow;
        return;
    }
    pin_req *p = calloc(1, sizeof *p);
    if (!p) {
        api_fail(&e, 500, NULL, NULL, "out of memory");
        route_error(r, &e);
        return;
    }
    if (!root) {
        const char *id = url + sizeof PIN_PATH;
        char *end;
        const long v = strtol(id, &end, 10);
        if (!*id || *end || v < 1 || v > 1000000000) {
            free(p);
            api_fail(&e, 404, "not_found", "id", "no pin '%.40s' (pins are numbered from 1)", id);
            route_error(r, &e);
            return;
        }
        p->op = PIN_DELETE;
        p->id = (int)v;
        make_job(s, p, NULL, 0, r);
    } else if (get) {
        p->op = PIN_LIST;
        make_job(s, p, NULL, 0, r);
    } else {
        p->op = PIN_ADD;
        pin_add(s, body, len, p, r);
    }
}

/* ------------------------------------------------------------ engine side */

/* The warm-up's next part: the first call looks the prompt's whole blocks
 * up (the pool, then the tiers: the lookup is given one token past them so
 * that a whole last block is restored too) on a scratch sequence; each
 * call then computes at most one prefill chunk (the scheduler's budget)
 * of what the lookup lacked.
 * 0: done, the scratch sequence freed, the whole blocks in the prefix
 * index; 1: no room now (retry after a step); 2: more to compute. */
static int warm(srv *s, const int32_t *ids, int n, pin_req *p, api_error *e) {
    kvlm_error err;
    kvlm_kv_info in;
    kvlm_kv_get_info(s->kv, &in);
    const int bs = in.block_size;
    if (!p->started) {
        p->target = n / bs * bs;
        int32_t *look = malloc(((size_t)p->target + 1) * sizeof *look);
        if (!look) return api_fail(e, 500, NULL, NULL, "out of memory");
        memcpy(look, ids, (size_t)p->target * sizeof *look);
        look[p->target] = ids[0]; /* past the whole blocks: never looked up */
        const int seq = kvlm_kv_seq_new_prefixed(s->kv, look, p->target + 1, &p->cached, &err);
        free(look);
        if (seq < 0) return err.code == KVLM_ERR_NOMEM ? 1 : api_fail(e, 500, NULL, NULL, "%s", err.msg);
        if (kvlm_kv_blocks_needed(s->kv, seq, p->target) > kvlm_kv_available_blocks(s->kv)) {
            kvlm_kv_seq_free(s->kv, seq);
            return 1;
        }
        p->started = 1, p->seq = seq, p->pos = p->cached;
    }
    if (p->pos < p->target) {
        /* the scheduler's prefill chunk: max_prefill_tokens within max_batch_tokens */
        const int batch = s->cfg.max_batch_tokens > 0 ? s->cfg.max_batch_tokens : 256;
        const int budget = s->cfg.max_prefill_tokens > 0 && s->cfg.max_prefill_tokens < batch ? s->cfg.max_prefill_tokens
                                                                                               : batch;
        const int len = p->target - p->pos < budget ? p->target - p->pos : budget;
        if (kvlm_kv_blocks_needed(s->kv, p->seq, p->pos + len) > kvlm_kv_available_blocks(s->kv)) return 1;
        const kvlm_batch_item it = {.seq = p->seq, .tokens = ids + p->pos, .n_tokens = len, .logits_all = -1};
        if (kvlm_engine_step(s->e, &it, 1, NULL, &err)) {
            kvlm_kv_seq_free(s->kv, p->seq);
            p->started = 0;
            return api_fail(e, 500, "engine_error", NULL, "%s", err.msg);
        }
        p->pos += len;
        p->chunks++;
        if (p->pos < p->target) return 2;
    }
    kvlm_kv_seq_free(s->kv, p->seq);
    p->started = 0;
    return 0;
}

static json_t *pin_json(const kvlm_kv_pin_info *p, size_t block_bytes) {
    return json_pack("{s:i,s:s,s:i,s:I,s:I}", "id", p->id, "object", "cache.pin", "tokens", p->tokens, "blocks",
                     (json_int_t)p->blocks, "bytes", (json_int_t)(p->blocks * block_bytes));
}

int cache_run(srv *s, job *j, char **body, int *status, api_error *e) {
    const pin_req *p = j->pin;
    *body = NULL;
    *status = 200;
    kvlm_kv_stats st;
    kvlm_kv_get_stats(s->kv, &st);
    kvlm_error err;
    json_t *doc = NULL;
    if (p->op == PIN_ADD) {
        const int32_t *ids = j->rq.prompts[0];
        const int n = j->rq.n_prompt[0];
        int tokens = 0;
        const int rc = warm(s, ids, n, j->pin, e);
        if (rc == 1 && !kvlm_sched_has_work(s->sched)) { /* answered 503 now (engine_loop.c): no scratch left */
            if (p->started) kvlm_kv_seq_free(s->kv, p->seq);
            j->pin->started = 0;
            if (p->recorded)
                fprintf(stderr, "kvlm serve: a recorded pin of %d tokens: no room in the KV pool; not pinned\n", n);
        }
        if (rc) return rc;
        const int id = kvlm_kv_pin(s->kv, ids, n, cache_pin_bound(s->kv), &tokens, &err);
        if (p->recorded)
            fprintf(stderr, "kvlm serve: a recorded pin of %d tokens: %s%s (%d tokens from the KV cache and its tiers, "
                    "%d prefilled)\n", n, id < 0 ? "not pinned: " : "pinned again", id < 0 ? err.msg : "", p->cached,
                    p->pos - p->cached);
        if (id < 0) {
            if (err.code == KVLM_ERR_NOMEM)
                api_fail(e, 409, "pin_limit", NULL, "%s: pins may hold at most %zu of the pool's %zu blocks, leaving "
                         "room for one request filling the context window", err.msg, cache_pin_bound(s->kv),
                         st.blocks_total);
            else api_fail(e, 400, "invalid_prompt", NULL, "%s", err.msg);
            return 0;
        }
        kvlm_kv_pin_info info[1] = {{0}};
        kvlm_kv_pin_info *all = NULL;
        const int np = kvlm_kv_pins(s->kv, NULL, 0);
        if (np > 0 && (all = malloc((size_t)np * sizeof *all))) {
            kvlm_kv_pins(s->kv, all, np);
            info[0] = all[np - 1];
        }
        free(all);
        doc = pin_json(info, st.block_bytes);
        if (doc) {
            json_object_set_new(doc, "prompt_tokens", json_integer(n));
            json_object_set_new(doc, "cached_tokens", json_integer(p->cached));
            json_object_set_new(doc, "prefilled_tokens", json_integer(p->pos - p->cached));
            json_object_set_new(doc, "prefill_steps", json_integer(p->chunks));
        }
        *status = 201;
    } else if (p->op == PIN_DELETE) {
        if (kvlm_kv_unpin(s->kv, p->id, &err)) {
            api_fail(e, 404, "not_found", "id", "no pin %d", p->id);
            return 0;
        }
        doc = json_pack("{s:i,s:s,s:b}", "id", p->id, "object", "cache.pin", "deleted", 1);
    } else {
        const int np = kvlm_kv_pins(s->kv, NULL, 0);
        kvlm_kv_pin_info *all = np > 0 ? malloc((size_t)np * sizeof *all) : NULL;
        json_t *data = json_array();
        if (all) kvlm_kv_pins(s->kv, all, np);
        for (int i = 0; all && data && i < np; i++) json_array_append_new(data, pin_json(&all[i], st.block_bytes));
        free(all);
        doc = json_pack("{s:s,s:o,s:I,s:I,s:I}", "object", "list", "data", data ? data : json_array(),
                        "pinned_blocks", (json_int_t)st.blocks_pinned, "max_pinned_blocks",
                        (json_int_t)cache_pin_bound(s->kv), "blocks_total", (json_int_t)st.blocks_total);
    }
    if (doc) json_object_set_new(doc, "model", json_string(s->model_name)); /* whose pool the pins are in */
    *body = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    if (!*body) api_fail(e, 500, NULL, NULL, "out of memory");
    return 0;
}

void cache_repin_recorded(srv *s) {
    const int n = kvlm_kv_recorded_pins(s->kv);
    for (int i = 0; i < n; i++) {
        int len;
        const int32_t *ids = kvlm_kv_recorded_pin(s->kv, i, &len);
        int32_t *copy = malloc((size_t)len * sizeof *copy);
        pin_req *p = calloc(1, sizeof *p);
        api_error e;
        job *j = NULL;
        if (copy && p) {
            memcpy(copy, ids, (size_t)len * sizeof *copy);
            p->op = PIN_ADD;
            p->recorded = 1;
            j = job_for_ids(s, copy, (size_t)len, &e); /* takes copy */
            copy = NULL;
        }
        free(copy);
        if (!j) {
            free(p);
            fprintf(stderr, "kvlm serve: a recorded pin of %d tokens: out of memory; not pinned\n", len);
            continue;
        }
        j->pin = p;
        pthread_mutex_lock(&s->mu);
        engine_enqueue_locked(s, j); /* holds its own reference */
        pthread_mutex_unlock(&s->mu);
        job_unref(j);
    }
    if (n) fprintf(stderr, "kvlm serve: %d recorded pin%s of %s queued\n", n, n == 1 ? "" : "s", s->cfg.kv_cache_dir);
}
