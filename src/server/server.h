/*
 * `kvlm serve`: an OpenAI-compatible HTTP server over one model. This is
 * the interface the CLI sees: create a server, start its HTTP thread
 * (it answers at once: /health 503 "loading", /metrics, 503 elsewhere),
 * read the port it bound, attach the model once loaded (the engine thread
 * starts; /health turns 200 "ok"), drain, stop. See docs/server.md for the
 * endpoints.
 */
#ifndef KVLM_SERVER_SERVER_H
#define KVLM_SERVER_SERVER_H

#include <stddef.h>
#include <stdio.h>

#include "kvlm.h"

typedef struct srv_config {
    const char *host;          /* address or host name to bind (IPv4 preferred); NULL: 127.0.0.1 */
    int port;                  /* 0: any free port */
    int max_seqs;              /* sequences in the running batch */
    size_t kv_blocks;          /* KV pool size in blocks; 0: from kv_mib or max_seqs x context */
    double kv_mib;             /* KV pool size in MiB when kv_blocks is 0; 0: unset */
    int block_size;            /* tokens per KV block */
    kvlm_dtype kv_dtype;
    size_t kv_ram_bytes;       /* memory tier below the pool (kvlm_kv_options.tier_ram_bytes); 0: none */
    const char *kv_cache_dir;  /* disk tier directory; NULL: none */
    size_t kv_disk_bytes;      /* disk tier bound; 0: 1 GiB */
    int max_batch_tokens;      /* tokens per engine step (prefill chunks included) */
    int max_prefill_tokens;    /* prompt tokens per step, decodes not counted; 0: no own limit */
    int max_waiting;           /* waiting queue bound; beyond it 429 */
    double timeout;            /* seconds per request; 0: none */
    size_t max_body;           /* request body limit in bytes; beyond it 413 */
    const char *served_name;   /* the model id clients send; NULL: from the path */
    const char *chat_template; /* auto, plain or a template file; NULL: auto */
    kvlm_engine_options engine;
    /* connections (http.c) */
    int max_connections;       /* open at once; beyond it new ones are closed at once */
    int max_per_ip;            /* per client address; 0: no such limit */
    double read_timeout;       /* seconds to send a request's headers and body; 0: none */
    double idle_timeout;       /* seconds a connection may make no progress (idle keep-alive,
                                  a client that stops reading); suspended connections exempt */
    /* security (auth.c) and browsers */
    const char *api_key;       /* NULL: no authentication */
    int protect_metrics, protect_health;   /* require the key there too */
#define SRV_MAX_CORS 16
    const char *cors[SRV_MAX_CORS];        /* allowed origins; "*": any */
    int n_cors;
    int no_web;                /* --no-web: no page at / (static_files.h) */
    /* access log (access_log.c) */
    const char *access_log;    /* a file; NULL: stderr; "off": none */
    int log_json;              /* one JSON object per line instead of text */
    /* behind a load balancer (docs/deploy.md) */
    const char *replica_id;    /* X-Kvlm-Replica and kvlm_replica_info; NULL: host name:port */
    int agent_port;            /* HAProxy agent check (agent_check.h); -1: none, 0: any free port */
    /* speculative decoding (docs/speculative.md) */
    kvlm_model *draft;         /* draft model (the caller's, same vocabulary; srv_set_draft); NULL: none */
    kvlm_speculation speculation; /* for requests without "kvlm_speculation" (mode NONE: none) */
    /* /v1/embeddings: mean, cls or last; KVLM_POOLING_NONE (0): the model's
     * files' (kvlm_model_pooling) */
    kvlm_pooling pooling;
    /* several models (srv_add_model) */
    size_t max_loaded_bytes;   /* weights + KV pools of the loaded models; 0: no limit */
} srv_config;

typedef struct srv srv;

/* Several models behind one server (docs/server.md): the caller's loader
 * opens a model's files (model and tokenizer, tok may be NULL) and keeps
 * them until unload gets its handle back. Both run on the HTTP thread. */
typedef int (*srv_load_fn)(void *ctx, const char *path, kvlm_model **m, const kvlm_tokenizer **tok, void **handle,
                           kvlm_error *err);
typedef void (*srv_unload_fn)(void *ctx, void *handle);

/* A server with no model yet: the metrics and the access log. */
srv *srv_create(const srv_config *cfg, kvlm_error *err);
/* Binds the socket and starts the HTTP thread; until srv_attach succeeds
 * the server is loading: /health answers 503 "loading", /metrics answers,
 * every other endpoint 503 with Retry-After. */
int srv_start(srv *s, kvlm_error *err);
/* Serves the loaded model: builds the chat template, the KV pool, the
 * engine and the scheduler, starts the engine thread and turns /health
 * 200 "ok". Takes ownership of neither the model nor the tokenizer (tok
 * may be NULL); both must outlive srv_stop. On failure the server stays
 * loading. */
int srv_attach(srv *s, kvlm_model *m, const kvlm_tokenizer *tok, kvlm_error *err);
/* The draft model for speculative decoding (the caller's; outlives s),
 * when it loads after srv_create; call before srv_attach. */
void srv_set_draft(srv *s, kvlm_model *draft);
/* Several models: the first call makes s a front that serves no model of
 * its own; each model loads on its first request (and unloads, least
 * recently used and idle first, to stay within cfg.max_loaded_bytes).
 * id is what clients send as "model"; also, when not NULL, a second name
 * it answers to. Call before srv_start, then srv_attach_models instead of
 * srv_attach. Ids are unique (KVLM_ERR_ARG). */
int srv_add_model(srv *s, const char *id, const char *also, const char *path, kvlm_error *err);
void srv_set_loader(srv *s, srv_load_fn load, srv_unload_fn unload, void *ctx);
/* A front is ready at once (models load on first use). */
int srv_attach_models(srv *s, kvlm_error *err);
int srv_port(const srv *s);
/* The agent check's port; -1 when there is none. */
int srv_agent_port(const srv *s);
/* The replica id responses and /metrics carry. */
const char *srv_replica(const srv *s);
/* The characters a replica id may hold. */
#define REPLICA_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:-"
/* The numeric address bound (host names resolved). */
const char *srv_address(const srv *s);
/* One line per setting worth knowing at start-up (model, pool, template);
 * after srv_attach. */
void srv_describe(const srv *s, FILE *f);
/* Stops accepting new connections, answers /health 503 "draining" and new
 * completions 503, and waits up to `seconds` for the requests in flight to
 * end (0 when they all did, -1 at the deadline). srv_stop ends the rest. */
int srv_drain(srv *s, double seconds);
/* Reopens the access log file (after a rotation: SIGHUP). */
void srv_reopen_log(srv *s);
/* Stops accepting, ends every request, joins the threads. */
void srv_stop(srv *s);
void srv_free(srv *s);

#endif
