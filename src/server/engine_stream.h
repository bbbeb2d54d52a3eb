/*
 * GET /kvlm/engine/stream: the engine view's snapshot (engine_view.h) as
 * server-sent events, one `data: <snapshot>` every interval_ms (query
 * parameter, default 500, 100 to 5000).
 *
 * A subscriber is a libmicrohttpd callback response. Its reader (HTTP
 * thread) hands out the latest snapshot when the subscriber's next event
 * is due, and otherwise suspends the connection under the server mutex;
 * the engine thread, which wakes at least every 100 ms, resumes the
 * subscribers that are due (never holding the mutex while it calls
 * libmicrohttpd), as it resumes streaming completions. A client that
 * leaves is noticed at its next event, when the write fails; the stream
 * ends when the server drains or stops.
 */
#ifndef KVLM_SERVER_ENGINE_STREAM_H
#define KVLM_SERVER_ENGINE_STREAM_H

#include "server/srv.h"

struct MHD_Connection;
struct MHD_Response;

/* interval_ms's value (NULL: absent) in milliseconds, clamped to 100..5000;
 * -1 with e filled (400) when it is not a whole number. */
int stream_interval_ms(const char *value, api_error *e);
/* A response streaming the snapshot every ms milliseconds to conn, or
 * NULL (out of memory, or the server is draining or stopping: *status
 * receives 500 or 503). */
struct MHD_Response *stream_response(srv *s, struct MHD_Connection *conn, int ms, int *status);
/* Engine thread, each turn: resumes the subscribers whose event is due
 * (every one, to end its stream, once the server drains). */
void stream_tick(srv *s);
/* Engine thread, as it stops: ends every stream. */
void stream_end_all(srv *s);

#endif
