/*
 * HTTP over libmicrohttpd: one internal polling thread (poll(2); see
 * http.c for why not epoll) with suspend/resume, so a connection waiting
 * for tokens costs no thread. Connections are bounded in number (overall,
 * under the descriptor limit, and per client address), in idle time and
 * in the time a request may take to arrive (conn_guard.h). Request bodies are read up to the size limit (413 beyond it),
 * routed, and either answered at once or handed to the engine as a job;
 * the connection is then suspended until the engine has accepted the job
 * (streaming: the event stream starts), rejected it, or finished it.
 */
#ifndef KVLM_SERVER_HTTP_H
#define KVLM_SERVER_HTTP_H

#include "server/srv.h"

/* Binds cfg.host:cfg.port and starts the HTTP thread; sets s->port,
 * s->address and the effective cfg.max_connections. */
int http_start(srv *s, kvlm_error *err);
/* Stops accepting: the listening socket is closed, connections open stay. */
void http_quiesce(srv *s);
void http_stop(srv *s);

#endif
