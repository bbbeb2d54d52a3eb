/*
 * Pinned prefixes over HTTP (docs/server.md "Pinned prefixes"):
 *   POST   /v1/cache/pin       {"prompt": text} or {"messages": [...]}: warms
 *                              the prompt's KV (prefills what the prefix
 *                              cache lacks) and pins its whole blocks
 *   GET    /v1/cache/pin       the pins
 *   DELETE /v1/cache/pin/ID    unpins one
 * The HTTP thread parses the request into a job; the engine thread, between
 * two scheduler steps (as the measurements, measure_routes.h), runs it on
 * the KV cache: a scratch sequence for the warm-up, freed at once, then
 * kvlm_kv_pin under the bound cache_pin_bound states.
 */
#ifndef KVLM_SERVER_CACHE_ROUTES_H
#define KVLM_SERVER_CACHE_ROUTES_H

#include <stddef.h>

#include "server/routes.h"

typedef enum pin_op { PIN_ADD, PIN_LIST, PIN_DELETE } pin_op;

typedef struct pin_req {
    pin_op op;
    int id;                 /* PIN_DELETE */
} pin_req;

/* 1 when url is a pin path (/v1/cache/pin or /v1/cache/pin/...). */
int cache_is_pin_path(const char *url);
/* HTTP thread: the job for the engine (r->j), or an error reply. */
void cache_route(srv *s, const char *method, const char *url, const char *body, size_t len, reply *r);
/* Engine thread: runs the job. Returns 0 with *body (the JSON answer and
 * *status) or e filled; 1 when no sequence slot or blocks are free for the
 * warm-up now (retry after a step). */
int cache_run(srv *s, job *j, char **body, int *status, api_error *e);
/* The most blocks pins may hold: the pool less the blocks of one request
 * filling the context window, so such a request can always run. */
size_t cache_pin_bound(const kvlm_kv *kv);

#endif
