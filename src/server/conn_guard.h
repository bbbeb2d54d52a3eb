/*
 * The connection limit and read deadlines. libmicrohttpd, at its own
 * connection limit, stops accepting: new connections then wait in the
 * kernel's backlog, unanswered. The guard instead counts connections as
 * libmicrohttpd reports them and shuts down at once any beyond max_open
 * (libmicrohttpd's limit is set a little higher, as a backstop), so a
 * client is refused quickly and a slot that frees is used at once.
 *
 * libmicrohttpd times a connection out only when it makes no progress at
 * all, so a client that trickles a header line every few seconds
 * (slowloris) would hold its connection for ever. The guard gives each connection a deadline by which the request
 * it is sending must be complete: read_timeout seconds from the
 * connection's start, and after each answered request idle + read seconds
 * for the next one (at most read seconds once its request line arrived).
 * A small thread, asleep until the earliest deadline, shuts down
 * (shutdown(2), never close) the sockets past their deadline;
 * libmicrohttpd then sees the end of the stream and closes the
 * connection as it closes any other. Entries are added and
 * removed from libmicrohttpd's connection notifications under one mutex,
 * so a socket is shut down only while libmicrohttpd still owns it.
 */
#ifndef KVLM_SERVER_CONN_GUARD_H
#define KVLM_SERVER_CONN_GUARD_H

#include "kvlm.h"

struct MHD_Connection;
typedef struct conn_guard conn_guard;

/* read_timeout <= 0: no deadlines (no thread; the limit still holds). */
conn_guard *guard_create(int max_open, double read_timeout, double idle_timeout, kvlm_error *err);
/* Stops the thread; call after the daemon stopped. */
void guard_free(conn_guard *g);

/* libmicrohttpd's MHD_OPTION_NOTIFY_CONNECTION callback (cls: the guard). */
void guard_notify(void *cls, struct MHD_Connection *c, void **socket_context, int code);
/* The request line of a request arrived. */
void guard_request_line(conn_guard *g, struct MHD_Connection *c);
/* The whole request arrived: no deadline while it is answered. */
void guard_request_read(conn_guard *g, struct MHD_Connection *c);
/* The request was answered; the connection may carry another. */
void guard_request_done(conn_guard *g, struct MHD_Connection *c);
/* Connections open now, refused over the limit and cut at their deadline so far. */
void guard_counts(conn_guard *g, int *open, unsigned long long *refused, unsigned long long *cut);

#endif
