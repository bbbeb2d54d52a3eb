/*
 * Prometheus metrics of the server: gauges the engine thread publishes
 * after every step (requests running and waiting, KV pool usage), counters
 * (prompt and generated tokens, prefix-cache queries and hits, preemptions,
 * HTTP responses by status, finished sequences by reason, connections
 * open, refused and timed out) and latency
 * histograms (time to first token, time per output token, end-to-end
 * latency, queue time), and the replica's id as an info gauge. One
 * mutex; writers are the engine and HTTP threads, the reader is GET
 * /metrics. Names are listed in docs/server.md.
 */
#ifndef KVLM_SERVER_METRICS_H
#define KVLM_SERVER_METRICS_H

#include "kvlm.h"
#include "app/sbuf.h"

typedef struct srv_metrics srv_metrics;

srv_metrics *metrics_create(void);
void metrics_free(srv_metrics *m);

void metrics_observe_queue(srv_metrics *m, double seconds);
void metrics_observe_ttft(srv_metrics *m, double seconds);
/* A scheduler request (one prompt) ended: its end-to-end latency and, when
 * it produced at least two tokens, its time per output token (< 0: none). */
void metrics_observe_request(srv_metrics *m, double e2e, double tpot);
void metrics_count_finish(srv_metrics *m, kvlm_finish reason);
/* An embeddings request answered: its inputs, their tokens, arrival to answer. */
void metrics_observe_embedding(srv_metrics *m, int inputs, int tokens, double seconds);
void metrics_count_status(srv_metrics *m, int http_status);
/* Engine-thread snapshot; `inbox` counts jobs not yet handed to the scheduler. */
void metrics_publish(srv_metrics *m, const kvlm_sched_stats *st, const kvlm_kv_stats *kv, int inbox);
/* Connection counts from the HTTP side (conn_guard.h). */
void metrics_set_connections(srv_metrics *m, int open, uint64_t refused, uint64_t cut);
/* The server's state: loading the model; ready (loaded, not draining). */
void metrics_set_state(srv_metrics *m, int loading, int ready);
/* The last engine snapshot (metrics_publish). */
void metrics_snapshot(srv_metrics *m, kvlm_sched_stats *st, kvlm_kv_stats *kv, int *inbox);
/* The replica id, rendered as kvlm_replica_info{replica="ID"} 1; at most
 * 63 characters of REPLICA_CHARS (server.h). */
void metrics_set_replica(srv_metrics *m, const char *id);
void metrics_render(srv_metrics *m, sbuf *out);

#endif
