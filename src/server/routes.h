/*
 * The endpoints: which path and method does what, and the replies of the
 * ones answered at once (health, models, metrics, tokenize, detokenize,
 * every error). Completions and chat completions come back as a job for
 * the engine. Knows nothing about sockets or libmicrohttpd.
 */
#ifndef KVLM_SERVER_ROUTES_H
#define KVLM_SERVER_ROUTES_H

#include <stddef.h>

#include "server/srv.h"

typedef struct reply {
    int status;
    const char *content_type;
    char *body;             /* malloc'ed, unless web_file */
    size_t len;
    const char *allow;      /* 405: the method the path takes */
    const char *www_auth;   /* 401: the WWW-Authenticate value */
    int retry_after;        /* send Retry-After: 1 (always with 429) */
    job *j;                 /* a job to hand to the engine instead of a body */
    int engine_stream;      /* GET /kvlm/engine/stream: the caller starts the event stream */
    const char *etag;       /* ETag header */
    int web_file;           /* a file of the web page: the body is the embedded bytes (neither
                               copied nor freed); Cache-Control: no-cache, nosniff, the page's
                               Content-Security-Policy */
    int anthropic;          /* errors in Anthropic's shape (a /v1/messages path) */
    srv *target;            /* engine_stream: the model whose engine it follows (models.h) */
    srv *wait_load;         /* the request's model is loading: the caller waits for it (models_wait) */
    json_t *parsed;         /* the body as the router of several models parsed it (models_route), handed
                               to the route's parser (api_limits.body); released after the route */
} reply;

/* HEAD is answered as GET (the caller sends no body); /health answers
 * 503 "loading" until the model is attached and 503 "draining" once the
 * server drains; while loading, every endpoint but /health and /metrics
 * answers 503 (code "model_loading", Retry-After). */
/* qmodel: the request's `model` query argument, or NULL; with several
 * models it picks the model of a GET endpoint (models.h). */
void route(srv *s, const char *method, const char *url, const char *body, size_t len, const char *qmodel,
           reply *r);
/* An error reply, in Anthropic's shape when r->anthropic. */
void route_error(reply *r, const api_error *e);
/* 1 when url is one of Anthropic's paths (/v1/messages...), whose errors
 * take Anthropic's shape. */
int route_is_anthropic(const char *url);
/* The web page (static_files.h), unless the server runs with --no-web:
 * fills r and returns 1 when url names one of its files (GET and HEAD; 304
 * when if_none_match matches; 405 for other methods), else returns 0. */
int route_web(srv *s, const char *method, const char *url, const char *if_none_match, reply *r);
/* Whether url is a file of the web page, which needs no API key. */
int route_is_web(const srv *s, const char *url);

#endif
