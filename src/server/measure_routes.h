/*
 * POST /kvlm/measure/next-token (docs/engine-view.md): the distribution of
 * the next token after a prompt, per temperature - entropy in bits, top-1
 * probability, top-5 mass, tokens covering 90% of the mass and the most
 * likely tokens - computed by the library's measurement code
 * (kvlm_dist_stats_compute, kvlm_top_logprobs), as `kvlm sample-stats`.
 *
 * The HTTP thread parses the body into a job; the engine thread, between
 * two scheduler steps, runs the prompt through the model on a scratch KV
 * sequence of its own and frees it at once, so running requests keep their
 * blocks (only evictable prefix-cache blocks may be reclaimed). When every
 * sequence slot or block is taken, the job waits for the next step.
 */
#ifndef KVLM_SERVER_MEASURE_ROUTES_H
#define KVLM_SERVER_MEASURE_ROUTES_H

#include <stddef.h>

#include "server/routes.h"

#define MEASURE_MAX_TEMPS 8

typedef struct measure_req {
    float temps[MEASURE_MAX_TEMPS];
    int n_temps;
    int top;                /* most likely tokens listed per temperature */
} measure_req;

/* HTTP thread: the job for the engine (r->j), or an error reply. */
void measure_route(srv *s, const char *body, size_t len, reply *r);
/* Engine thread: runs the job's measurement. Returns 0 with *body (the
 * JSON answer) or e filled; 1 when no sequence slot or blocks are free
 * now (retry after a step). */
int measure_run(srv *s, job *j, char **body, api_error *e);

#endif
