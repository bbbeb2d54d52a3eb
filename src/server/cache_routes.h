/*
 * Pinned prefixes over HTTP (docs/server.md "Pinned prefixes"):
 *   POST   /v1/cache/pin       {"prompt": text} or {"messages": [...]}: warms
 *                              the prompt's KV (prefills what the prefix
 *                              cache lacks) and pins its whole blocks
 *   GET    /v1/cache/pin       the pins
 *   DELETE /v1/cache/pin/ID    unpins one
 * The HTTP thread parses the request into a job; the engine thread, between
 * two scheduler steps (as the measurements, measure_routes.h), runs it on
 * the KV cache: a scratch sequence for the warm-up that restores what the
 * tiers hold of the prompt's whole blocks and prefills the rest in chunks
 * of the scheduler's prefill budget, one chunk between two scheduler steps (running
 * decodes go on), then kvlm_kv_pin under the bound cache_pin_bound
 * states. With a KV directory the pins are recorded there by kvlm_kv_pin,
 * and a server started on it pins them again (cache_repin_recorded).
 */
#ifndef KVLM_SERVER_CACHE_ROUTES_H
#define KVLM_SERVER_CACHE_ROUTES_H

#include <stddef.h>

#include "server/routes.h"

typedef enum pin_op { PIN_ADD, PIN_LIST, PIN_DELETE } pin_op;

typedef struct pin_req {
    pin_op op;
    int id;                 /* PIN_DELETE */
    /* PIN_ADD's warm-up, across engine iterations (cache_run) */
    int started, seq;       /* its scratch sequence, once started */
    int cached, pos, target; /* tokens found cached, computed so far, to compute */
    int chunks;             /* engine steps it took */
    int recorded;           /* a pin of the directory's record, re-made at start (no client) */
} pin_req;

/* 1 when url is a pin path (/v1/cache/pin or /v1/cache/pin/...). */
int cache_is_pin_path(const char *url);
/* HTTP thread: the job for the engine (r->j), or an error reply. */
void cache_route(srv *s, const char *method, const char *url, const char *body, size_t len, reply *r);
/* Engine thread: runs the job. Returns 0 with *body (the JSON answer and
 * *status) or e filled; 1 when no sequence slot or blocks are free for the
 * warm-up now (retry after a step); 2 when the warm-up ran one chunk of at
 * most the scheduler's prefill budget (max_prefill_tokens within
 * max_batch_tokens) and has more to run
 * (call again after the scheduler's next step, so decodes go on). */
int cache_run(srv *s, job *j, char **body, int *status, api_error *e);
/* Queues a pin job for each pin of the KV directory's record
 * (kvlm_kv_recorded_pin), as if POSTed; each logs one line when done.
 * Call once the engine runs. */
void cache_repin_recorded(srv *s);
/* The most blocks pins may hold: the pool less the blocks of one request
 * filling the context window, so such a request can always run. */
size_t cache_pin_bound(const kvlm_kv *kv);

#endif
