/*
 * HTTP over libmicrohttpd: one internal polling thread (epoll where
 * available) with suspend/resume, so a connection waiting for tokens costs
 * no thread. Request bodies are read up to the size limit (413 beyond it),
 * routed, and either answered at once or handed to the engine as a job;
 * the connection is then suspended until the engine has accepted the job
 * (streaming: the event stream starts), rejected it, or finished it.
 */
#ifndef KVLM_SERVER_HTTP_H
#define KVLM_SERVER_HTTP_H

#include "server/srv.h"

/* Binds cfg.host:cfg.port and starts the HTTP thread; sets s->port. */
int http_start(srv *s, kvlm_error *err);
void http_stop(srv *s);

#endif
