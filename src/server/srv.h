/*
 * The server's shared state and the job: one completion or chat request on
 * its way from the HTTP thread to the engine thread and back.
 *
 * Threads: the HTTP thread (libmicrohttpd's internal polling thread) parses
 * requests, queues jobs in the inbox and sends what the engine produced;
 * the engine thread alone touches the scheduler, KV cache and engine, and
 * runs every scheduler callback. They share `mu`, which guards the inbox,
 * the flags and each job's `shared` fields and outbox. The engine never
 * calls into libmicrohttpd while holding `mu`; the HTTP thread suspends a
 * connection while holding it, so a resume can never overtake the suspend
 * it answers.
 *
 * A job is reference counted (under mu): one reference for the HTTP side,
 * dropped when libmicrohttpd reports the request finished; one for the
 * engine while it is in the inbox or live; one for a streaming response
 * body while libmicrohttpd holds it.
 */
#ifndef KVLM_SERVER_SRV_H
#define KVLM_SERVER_SRV_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "kvlm.h"
#include "server/access_log.h"
#include "server/agent_check.h"
#include "app/chat_template.h"
#include "server/conn_guard.h"
#include "server/engine_view.h"
#include "server/metrics.h"
#include "app/openai_request.h"
#include "app/reasoning.h"
#include "app/reasoning_count.h"
#include "app/sbuf.h"
#include "server/server.h"
#include "app/json_text.h"

struct MHD_Connection;
struct MHD_Daemon;
typedef struct job job;
typedef struct view_sub view_sub;

/* One choice of one prompt: without streaming, what the final response
 * needs (its text comes from the scheduler's events). */
typedef struct choice_state {
    sbuf text;              /* non-streaming: the whole text */
    int n_tokens;           /* tokens seen by on_token */
    size_t piece_bytes;     /* bytes of their pieces (completions' text_offset) */
    int n_generated;        /* tokens generated, from on_finish */
    kvlm_finish finish;
    /* non-streaming log-probabilities: per token, the chosen id and its
     * log-probability, then top_k alternatives */
    int32_t *lp_ids, *lp_top_ids;
    float *lp_vals, *lp_top_vals;
    double *lp_entropy;     /* kvlm_entropy: per token, nats */
    int n_lp, cap_lp;
    /* streaming chat with tools: the tool-call parser of this choice */
    struct tc_parser *tools;
    int tools_failed;       /* out of memory in it: text passes straight through */
    /* Anthropic and Responses (api_stream.h) */
    sbuf raw;               /* the generated tokens' pieces, when the request has stop strings: which
                               one ended the choice */
    int sh_open;            /* the streamed block or item open: 0 none, 1 text, 2 tool call, 3 reasoning */
    int sh_next;            /* index of the next block (Anthropic) or output item (Responses) */
    int sh_call;            /* the open call's index */
    sbuf sh_item;           /* Responses: the open item's text or arguments so far */
    char sh_name[72];       /* Responses: the open call's name */
    rs_split reason;        /* Anthropic, Responses streaming with a reasoning template: thinking vs text */
    int reason_on;
    rc_counter reasoning;   /* chat with a reasoning or harmony template: its reasoning tokens */
} choice_state;

/* One prompt of a job, submitted to the scheduler as one request with n
 * choices. */
typedef struct prompt_run {
    job *j;
    int index;
    int64_t sched_id;       /* -1 until submitted */
    int n_done, max_gen, cached;
    double t_first;         /* 0 until its first token */
} prompt_run;

typedef enum job_state {
    JOB_QUEUED = 0,         /* in the inbox */
    JOB_ACCEPTED,           /* in the scheduler */
    JOB_DONE,               /* every choice ended, or rejected */
} job_state;

struct job {
    srv *s;
    api_request rq;
    struct kvlm_grammar *grammar;  /* the request's constraint (structured.h), or NULL */
    struct measure_req *measure;   /* a next-token measurement (measure_routes.h), not a completion */
    struct embed_job *embed;       /* an embeddings request (embed_routes.h), not a completion */
    struct pin_req *pin;           /* a pinned-prefix operation (cache_routes.h), not a completion */
    char id[48];
    long long created;      /* Unix seconds */
    double t_arrival;       /* kvlm_now() when the body was parsed */
    /* shared, under s->mu */
    int refs;
    struct MHD_Connection *conn;   /* NULL once the HTTP side is finished */
    int suspended;                 /* the connection waits for us */
    int cancel_requested;          /* the client is gone */
    job_state state;
    int status;                    /* HTTP status once DONE (non-streaming, rejected) */
    sbuf out;                      /* streaming: bytes not yet sent; else the body */
    int out_done;                  /* streaming: nothing more will be appended */
    unsigned long long bytes_sent; /* streaming: body bytes handed to libmicrohttpd */
    job *next;                     /* inbox */
    /* engine thread only */
    prompt_run *runs;
    choice_state *choices;         /* n_prompts x n */
    int n_choices, n_expected, n_finished, submitted, cancelled, failed;
    int prompt_tokens, completion_tokens, cached_tokens;
    int reasoning_tokens;          /* of completion_tokens, those in reasoning (reasoning_count.h) */
    int drafted_tokens, accepted_tokens; /* speculative decoding, over the choices */
    int sh_seq;                    /* Responses streaming: the next event's sequence_number */
    api_error fail;
    job *live_prev, *live_next;
};

struct srv {
    srv_config cfg;
    /* set by srv_attach, before `ready`; read elsewhere only once ready */
    kvlm_model *m;
    const kvlm_config *c;
    const kvlm_tokenizer *tok;
    kvlm_kv *kv;
    kvlm_engine *e;
    kvlm_sched *sched;
    kvlm_kv *draft_kv;              /* the draft model's cache and engine (cfg.draft) */
    kvlm_engine *draft_e;
    chat_template tpl;
    char model_name[256];
    long long created;
    size_t kv_blocks, kv_pool_bytes;   /* fixed at attach */
    srv_metrics *metrics;
    engine_view *view;              /* the live view (engine_view.h) */
    struct MHD_Daemon *mhd;
    int port;
    char address[64];               /* the numeric address bound */
    int listen_fd;                  /* after quiescing: the listening socket to close; else -1 */
    access_log *log;                /* NULL: off */
    conn_guard *guard;
    agent_check *agent;             /* NULL: no agent check */
    char replica[64];               /* the replica id (srv_replica), written once after the HTTP
                                       thread started, then published through replica_set */
    atomic_int replica_set;
    /* under mu */
    pthread_mutex_t mu;
    pthread_cond_t wake;
    job *inbox_head, *inbox_tail;
    int inbox_len, cancel_pending, stopping, n_jobs;
    int draining;                   /* SIGTERM: no new completions, /health 503 */
    int ready;                      /* srv_attach done: the model fields are set */
    uint64_t counter;
    view_sub *subs;                 /* engine event streams (engine_stream.h) */
    int n_subs;
    /* engine thread only */
    pthread_t engine;
    int engine_running;
    job *live;
    job *measures;                  /* measurements, embeddings and pin operations waiting for a
                                       sequence slot or blocks, or for their next slice */
    struct resp_store *responses;   /* /v1/responses kept for previous_response_id (responses_store.h) */
    /* Several models (models.c). A front (n_models > 0) has no model of its
     * own: it holds the HTTP thread, the access log and the server-wide
     * metrics, and each model is a srv of its own (parent set, no HTTP
     * thread) with its template, pool, engine thread, metrics and response
     * store. The HTTP thread alone adds, loads and unloads models. */
    srv *parent;                    /* a model of a front: the front */
    srv **models;
    int n_models;
    srv_load_fn load;               /* the front's: opens a model's files */
    srv_unload_fn unload;
    void *load_ctx;
    uint64_t use_clock;             /* the front's: ticks once per routed request */
    char *path;                     /* a model of a front: what `load` opens */
    char *also;                     /* a model of a front: a second id it answers to, or NULL */
    const char *asked;              /* a model of a front: model_name or also, as the request being
                                       routed named it (the parsers check "model" against it) */
    void *handle;                   /* the loader's, while loaded */
    size_t loaded_bytes;            /* weights + KV pool at the last load (0: never loaded); written
                                       by the loader thread before it clears `loading` */
    /* a model of a front, under its mu: */
    int loading;                    /* its loader thread runs (models.c) */
    int over_budget;                /* loaded; the HTTP thread still has to check the budget */
    double failed_at;               /* kvlm_now() of the last failed load; 0: none */
    char load_error[400];           /* that failure's message */
    struct load_waiter *waiters;    /* connections suspended until the load ends */
    pthread_t loader;
    int loader_joinable;            /* HTTP thread (and srv_stop) only */
    uint64_t last_used;             /* the front's use_clock at its last request */
    unsigned long long loads, unloads;
};

/* Jobs (job.c). job_new takes over rq. */
job *job_new(srv *s, api_request *rq, kvlm_error *err);
/* A job of one prompt that generates nothing (the measurements, the pin
 * warm-up): takes over ids (NULL when n is 0) also on failure; NULL with
 * a 500 in e when out of memory. */
job *job_for_ids(srv *s, int32_t *ids, size_t n, api_error *e);
void job_ref_locked(job *j);
/* Drops a reference (takes mu); frees the job at zero. */
void job_unref(job *j);
/* Resumes the job's connection if it waits for us (engine side; takes mu). */
void job_wake(job *j);
/* Appends bytes to a streaming job's outbox and wakes its connection. */
void job_send(job *j, const char *bytes, size_t n, int last);

/* Engine thread (engine_loop.c). */
int engine_start(srv *s, kvlm_error *err);
/* Asks the engine to end everything and waits for its thread. */
void engine_stop(srv *s);
/* HTTP side, mu held: queues the job; -1 when the server is stopping. */
int engine_enqueue_locked(srv *s, job *j);
/* HTTP side, mu held: the client is gone; the engine cancels the job. */
void engine_cancel_locked(srv *s, job *j);

/* Limits requests are validated against; random_seed drawn per call.
 * Only once ready. */
void srv_limits(srv *s, api_limits *lim);
/* 1 once srv_attach is done (takes mu): the model, tokenizer, template,
 * pool and engine may be used from then on. */
int srv_ready(srv *s);

#endif
