/*
 * The engine's live view (GET /kvlm/engine and /kvlm/engine/history, see
 * docs/engine-view.md): what the KV pool and the scheduler are doing, as
 * one JSON snapshot, and per-second series of the last five minutes.
 *
 * The engine thread, the only one that may read the scheduler and the KV
 * cache, builds the snapshot after a step (at most every 100 ms while
 * requests run, at once when the engine falls idle, and otherwise only
 * when something changed) into a serialized buffer it swaps in under the
 * server mutex; the HTTP thread only copies that buffer. The history is a
 * ring of one-second buckets, closed by the engine thread (which wakes at
 * least every 100 ms) and read under the same mutex.
 */
#ifndef KVLM_SERVER_ENGINE_VIEW_H
#define KVLM_SERVER_ENGINE_VIEW_H

#include <stddef.h>
#include <stdint.h>

#include "kvlm.h"
#include "app/sbuf.h"

typedef struct srv srv;
typedef struct engine_view engine_view;

engine_view *view_create(void);
void view_free(engine_view *v);

/* Engine thread (or srv_attach before it starts). After each turn of the
 * loop: builds a new snapshot when due, closes the history's second. */
void view_update(srv *s, const kvlm_sched_stats *st, const kvlm_kv_stats *kv, int inbox);
/* Engine thread: latency samples for the history's medians, and a
 * scheduler request (one prompt) submitted. */
void view_observe_ttft(engine_view *v, double seconds);
void view_observe_tpot(engine_view *v, double seconds);
void view_count_request(engine_view *v);

/* HTTP thread (take the server mutex): a malloc'ed copy of the latest
 * snapshot, and the history as JSON. NULL when memory runs out. */
char *view_snapshot(srv *s, size_t *len);
/* Appends the latest snapshot to out; the caller holds the server mutex. */
void view_append_snapshot_locked(srv *s, sbuf *out);
char *view_history(srv *s, size_t *len);

#endif
