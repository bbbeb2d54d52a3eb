/*
 * `kvlm serve`: an OpenAI-compatible HTTP server over one model. This is
 * the interface the CLI sees: build a server from a loaded model and its
 * tokenizer, start it (an HTTP thread and one engine thread), read the
 * port it bound, stop it. See docs/server.md for the endpoints.
 */
#ifndef KVLM_SERVER_SERVER_H
#define KVLM_SERVER_SERVER_H

#include <stddef.h>
#include <stdio.h>

#include "kvlm.h"

typedef struct srv_config {
    const char *host;          /* numeric IPv4 address to bind; NULL: 127.0.0.1 */
    int port;                  /* 0: any free port */
    int max_seqs;              /* sequences in the running batch */
    size_t kv_blocks;          /* KV pool size in blocks; 0: from kv_mib or max_seqs x context */
    double kv_mib;             /* KV pool size in MiB when kv_blocks is 0; 0: unset */
    int block_size;            /* tokens per KV block */
    kvlm_dtype kv_dtype;
    int max_batch_tokens;      /* tokens per engine step (prefill chunks included) */
    int max_prefill_tokens;    /* prompt tokens per step, decodes not counted; 0: no own limit */
    int max_waiting;           /* waiting queue bound; beyond it 429 */
    double timeout;            /* seconds per request; 0: none */
    size_t max_body;           /* request body limit in bytes; beyond it 413 */
    const char *served_name;   /* the model id clients send; NULL: from the path */
    const char *chat_template; /* auto, plain or a template file; NULL: auto */
    kvlm_engine_options engine;
} srv_config;

typedef struct srv srv;

/* Takes ownership of neither the model nor the tokenizer (tok may be NULL). */
srv *srv_create(kvlm_model *m, const kvlm_tokenizer *tok, const srv_config *cfg, kvlm_error *err);
/* Binds the socket and starts serving. */
int srv_start(srv *s, kvlm_error *err);
int srv_port(const srv *s);
/* One line per setting worth knowing at start-up (model, pool, template). */
void srv_describe(const srv *s, FILE *f);
/* Stops accepting, ends every request, joins the threads. */
void srv_stop(srv *s);
void srv_free(srv *s);

#endif
