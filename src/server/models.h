/*
 * Several models behind one server: a front srv (srv.h) holds the
 * models, each a srv of its own. How a route gets its model: models_route
 * reads the request's "model" (the `model` query argument for GET
 * endpoints, else the JSON body's "model"), finds the model by id or
 * alias, loads it when it is not loaded (unloading least recently used
 * idle models to stay within max_loaded_bytes) and returns its srv, the
 * per-model context every route then uses as before. A missing "model"
 * means the first model given. With one model (no front) it returns s.
 * HTTP thread only.
 */
#ifndef KVLM_SERVER_MODELS_H
#define KVLM_SERVER_MODELS_H

#include "server/routes.h"
#include "server/srv.h"

/* The model a request names, loaded; NULL with r->wait_load set when it
 * is loading (a load starts when it was not loaded: models_wait), or NULL
 * with r filled: 404
 * model_not_found (in the client API's shape, r->anthropic), 503
 * model_busy with Retry-After (no room: every model that would have to
 * unload has a request in flight or an open engine stream), 500
 * model_load_failed. */
srv *models_route(srv *s, const char *body, size_t len, const char *qmodel, reply *r);
/* When models_route set r->wait_load (the model is loading): suspends the
 * connection until the load ends (the loader resumes it; the request is
 * then routed again). 0 suspended; 1 the load already ended (route
 * again now); -1 out of memory. */
struct MHD_Connection;
int models_wait(srv *c, struct MHD_Connection *conn);
/* "unloaded", "loading" or "loaded". */
const char *models_state_name(srv *c);
/* The model with this id or alias; NULL when none. */
srv *models_find(srv *s, const char *id);
int models_is_loaded(srv *c);
/* Bytes of the loaded models (weights, repacked weights, KV pools). */
size_t models_loaded_bytes(srv *s);
/* GET /v1/models and /v1/models/{id}: every model, loaded or not
 * ("status": {"value": "loaded" | "unloaded"}, as llama-server's router). */
void models_list(srv *s, reply *r);
void models_card(srv *s, const char *id, reply *r);
/* Ends a model's engine and pool and gives its files back to the loader
 * (the caller checked it is idle). */
void models_unload(srv *c);
/* srv_stop and srv_free of a front: the models' engine threads, then the
 * models. */
void models_stop(srv *s);
void models_free(srv *s);

#endif
