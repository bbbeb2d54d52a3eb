/*
 * The load balancer's agent check: a small TCP responder, apart from the
 * HTTP port, that answers every connection with one line telling HAProxy
 * (its "agent-check", docs/deploy.md) how much new work this replica
 * should get, then closes. The line is made of HAProxy's agent words:
 *
 *   loading                  "down#loading"
 *   draining (SIGTERM)       "drain"
 *   waiting queue full       "ready up 0%"       (out of the farm, still up)
 *   otherwise                "ready up W%"
 *
 * W is 100 while at least half of the KV pool and of the waiting queue is
 * free; below, twice the smaller free share (blocks held by no sequence,
 * cached prefix blocks included: they are evictable), rounded up to a
 * multiple of 10, at least 10. Above that, balancing is left to HAProxy's
 * bounded load, which counts requests in flight without touching the hash
 * ring; every weight change moves some keys on the ring, so the weight
 * falls only when a replica runs short, and in coarse steps.
 * "ready" is always sent with "up": only the agent can undo a
 * DRAIN it set, and a replica restarted after a drain must rejoin.
 */
#ifndef KVLM_SERVER_AGENT_CHECK_H
#define KVLM_SERVER_AGENT_CHECK_H

#include <stddef.h>

#include "kvlm.h"

typedef struct agent_load {
    int loading, draining;
    size_t kv_total, kv_used;   /* blocks in the pool; held by a sequence */
    int waiting, max_waiting;   /* requests waiting for admission; the bound beyond which 429 */
} agent_load;

/* The line for this load, '\n' included, into buf (NUL-terminated);
 * returns its length. cap must be at least AGENT_LINE_MAX. */
#define AGENT_LINE_MAX 64
int agent_line(const agent_load *l, char *buf, size_t cap);
/* The weight in percent the line announces for a serving replica (0..100). */
int agent_weight(const agent_load *l);

/* Reads the current load; called on the responder's thread. */
typedef void (*agent_load_fn)(void *ctx, agent_load *out);

typedef struct agent_check agent_check;

/* Listens on host (numeric address; NULL: 127.0.0.1) and port (0: any
 * free port) and answers on a thread of its own. */
agent_check *agent_check_start(const char *host, int port, agent_load_fn load, void *ctx, kvlm_error *err);
int agent_check_port(const agent_check *a);
/* Stops answering, joins the thread, frees. NULL is fine. */
void agent_check_stop(agent_check *a);

#endif
