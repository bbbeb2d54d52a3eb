/*
 * libmicrohttpd glue (see http.h). The access handler is called several
 * times per request: once with the headers (CORS preflight, the API key
 * and a declared length over the limit are answered then, before any body
 * is read), once per piece of body, once with the whole body (routing),
 * and again after every resume while a job is pending. Every response
 * names the replica (X-Kvlm-Replica, docs/deploy.md). Streaming bodies
 * come from a content reader that hands out what the engine has queued
 * and suspends the connection when there is nothing; the engine resumes
 * it when it appends more. Every response carries the CORS header when
 * the request's origin is allowed; every finished request gets an access
 * log line.
 *
 * Threading model, from measurements on libmicrohttpd 0.9.75: its epoll
 * mode loses the end of stream of a connection that sent part of its
 * headers and closed (the socket stays in CLOSE-WAIT until the idle
 * timeout; 47 to 50 of 50 such connections in a row), its poll mode sees
 * every one; so one internal thread with poll(2), which has no descriptor
 * ceiling, and a bounded number of connections (poll's cost per turn is
 * linear in them). Re-measured against epoll and thread-per-connection
 * (whose suspended connections are never resumed) for storms and
 * throughput: docs/server.md, "Connections and limits".
 */
#include "server/http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server/auth.h"
#include "server/engine_stream.h"
#include "server/models.h"
#include "server/routes.h"

/* Descriptors kept free of connections: model files, logs, the daemon's
 * own pipes, the listening socket; and libmicrohttpd's own limit, over the
 * guard's (conn_guard.h). */
#define FD_HEADROOM 64
#define MHD_MARGIN 16

typedef struct http_req {
    sbuf body;
    int too_large;
    job *j;             /* the job this request waits for */
    double t_start;     /* headers received */
    int status;         /* what was queued */
    unsigned long long bytes;   /* body bytes of a buffered reply */
    const char *origin; /* Access-Control-Allow-Origin to send, or NULL */
    int head;           /* a HEAD request: no body goes out */
    char method[16], path[256];
} http_req;

static void common_headers(srv *s, http_req *hr, struct MHD_Response *resp) {
    if (atomic_load_explicit(&s->replica_set, memory_order_acquire))
        MHD_add_response_header(resp, "X-Kvlm-Replica", s->replica);
    if (!hr || !hr->origin) return;
    MHD_add_response_header(resp, "Access-Control-Allow-Origin", hr->origin);
    if (strcmp(hr->origin, "*")) MHD_add_response_header(resp, "Vary", "Origin");
}

/* The web page talks to its own origin only and loads nothing else. */
#define WEB_CSP                                                                                                        \
    "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; connect-src 'self'; "               \
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

static void web_headers(struct MHD_Response *resp, const reply *r) {
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ETAG, r->etag);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(resp, "Content-Security-Policy", WEB_CSP);
}

static enum MHD_Result send_reply(srv *s, struct MHD_Connection *conn, http_req *hr, reply *r) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        r->len, r->body ? r->body : (char *)"", r->web_file ? MHD_RESPMEM_PERSISTENT : MHD_RESPMEM_MUST_COPY);
    if (!r->web_file) free(r->body);
    r->body = NULL;
    if (!resp) return MHD_NO;
    if (r->web_file) web_headers(resp, r);
    if (r->status != 204 && r->status != 304)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, r->content_type ? r->content_type : "application/json");
    if (r->status == 429 || r->retry_after) MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (r->allow) MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->allow);
    if (r->www_auth) MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, r->www_auth);
    common_headers(s, hr, resp);
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    metrics_count_status(s->metrics, r->status);
    if (hr) {
        hr->status = r->status;
        hr->bytes = hr->head ? 0 : r->len;
    }
    return ret;
}

static enum MHD_Result send_error(srv *s, struct MHD_Connection *conn, http_req *hr, int status, const char *code,
                                  const char *msg) {
    api_error e;
    reply r = {.anthropic = hr && route_is_anthropic(hr->path)};
    api_fail(&e, status, code, NULL, "%s", msg);
    route_error(&r, &e);
    return send_reply(s, conn, hr, &r);
}

static enum MHD_Result too_large(srv *s, struct MHD_Connection *conn, http_req *hr) {
    char msg[128];
    snprintf(msg, sizeof msg, "the request body is over the limit of %zu bytes", s->cfg.max_body);
    return send_error(s, conn, hr, 413, "request_too_large", msg);
}

static enum MHD_Result unauthorized(srv *s, struct MHD_Connection *conn, http_req *hr, int given) {
    api_error e;
    reply r = {.anthropic = route_is_anthropic(hr->path)};
    api_fail(&e, 401, "invalid_api_key", NULL, "%s",
             given ? "Incorrect API key provided"
                   : "Missing API key: send the header 'Authorization: Bearer KEY' (or 'x-api-key: KEY')");
    route_error(&r, &e);
    r.www_auth = "Bearer";
    return send_reply(s, conn, hr, &r);
}

/* A CORS preflight (or any OPTIONS): 204 with what may be sent. */
static enum MHD_Result preflight(srv *s, struct MHD_Connection *conn, http_req *hr) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (char *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD, POST, OPTIONS");
    if (hr->origin) {
        MHD_add_response_header(resp, "Access-Control-Allow-Methods", "GET, HEAD, POST, OPTIONS");
        MHD_add_response_header(resp, "Access-Control-Allow-Headers", "Authorization, Content-Type, x-api-key, anthropic-version, anthropic-beta");
        MHD_add_response_header(resp, "Access-Control-Max-Age", "600");
    }
    common_headers(s, hr, resp);
    enum MHD_Result ret = MHD_queue_response(conn, 204, resp);
    MHD_destroy_response(resp);
    metrics_count_status(s->metrics, 204);
    hr->status = 204;
    return ret;
}

/* The Access-Control-Allow-Origin value for this request's Origin, or NULL. */
static const char *allowed_origin(const srv *s, struct MHD_Connection *conn) {
    if (!s->cfg.n_cors) return NULL;
    const char *o = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Origin");
    for (int i = 0; i < s->cfg.n_cors; i++) {
        if (!strcmp(s->cfg.cors[i], "*")) return "*";
        if (o && !strcmp(o, s->cfg.cors[i])) return s->cfg.cors[i];
    }
    return NULL;
}

/* ------------------------------------------------------------ streaming */

static ssize_t sse_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    job *j = cls;
    (void)pos;
    ssize_t r;
    pthread_mutex_lock(&j->s->mu);
    if (j->cancel_requested) {
        r = MHD_CONTENT_READER_END_WITH_ERROR;
    } else if (j->out.len) {
        size_t n = j->out.len < max ? j->out.len : max;
        memcpy(buf, j->out.data, n);
        sbuf_consume(&j->out, n);
        j->bytes_sent += n;
        r = (ssize_t)n;
    } else if (j->out_done) {
        r = MHD_CONTENT_READER_END_OF_STREAM;
    } else {
        /* Under mu: the engine cannot resume before this suspend. */
        j->suspended = 1;
        MHD_suspend_connection(j->conn);
        r = 0;
    }
    pthread_mutex_unlock(&j->s->mu);
    return r;
}

static void sse_free(void *cls) { job_unref(cls); }

/* Sends a server-sent event body (a callback response). */
static enum MHD_Result queue_event_stream(srv *s, struct MHD_Connection *conn, http_req *hr,
                                          struct MHD_Response *resp) {
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    common_headers(s, hr, resp);
    enum MHD_Result ret = MHD_queue_response(conn, 200, resp);
    MHD_destroy_response(resp);
    metrics_count_status(s->metrics, 200);
    hr->status = 200;
    return ret;
}

/* GET /kvlm/engine/stream. */
/* m: the model whose engine the stream follows (s itself with one model). */
static enum MHD_Result engine_stream(srv *s, srv *m, struct MHD_Connection *conn, http_req *hr) {
    api_error e;
    const int ms = stream_interval_ms(MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "interval_ms"), &e);
    if (ms < 0) {
        reply r = {0};
        route_error(&r, &e);
        return send_reply(s, conn, hr, &r);
    }
    int status;
    struct MHD_Response *resp = stream_response(m, conn, ms, &status);
    if (!resp)
        return status == 503 ? send_error(s, conn, hr, 503, "shutting_down", "the server is shutting down")
                             : send_error(s, conn, hr, 500, NULL, "out of memory");
    return queue_event_stream(s, conn, hr, resp);
}

static enum MHD_Result start_stream(srv *s, struct MHD_Connection *conn, http_req *hr, job *j) {
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sse_reader, j, sse_free);
    if (!resp) return MHD_NO;
    pthread_mutex_lock(&j->s->mu);
    job_ref_locked(j); /* released by sse_free */
    pthread_mutex_unlock(&j->s->mu);
    return queue_event_stream(s, conn, hr, resp);
}

/* Called again after the engine resumed the connection. */
static enum MHD_Result job_progress(srv *s, struct MHD_Connection *conn, http_req *hr, job *j) {
    reply r = {0};
    pthread_mutex_t *mu = &j->s->mu; /* the job's model's (models.h) */
    pthread_mutex_lock(mu);
    if (j->cancel_requested) {
        pthread_mutex_unlock(mu);
        return MHD_NO;
    }
    if (j->state == JOB_DONE && j->status) {
        r.status = j->status;
        r.body = malloc(j->out.len + 1);
        if (r.body) memcpy(r.body, j->out.data ? j->out.data : "", j->out.len);
        r.len = r.body ? j->out.len : 0;
        pthread_mutex_unlock(mu);
        return send_reply(s, conn, hr, &r);
    }
    if (j->state != JOB_QUEUED && j->rq.stream) {
        pthread_mutex_unlock(mu);
        return start_stream(s, conn, hr, j);
    }
    j->suspended = 1;
    MHD_suspend_connection(conn);
    pthread_mutex_unlock(mu);
    return MHD_YES;
}

static enum MHD_Result queue_job(srv *s, struct MHD_Connection *conn, http_req *hr, job *j) {
    srv *t = j->s; /* the job's model (models.h); s itself with one model */
    pthread_mutex_lock(&s->mu);
    const int draining = s->draining;
    pthread_mutex_unlock(&s->mu);
    pthread_mutex_lock(&t->mu);
    if (draining || t->draining || engine_enqueue_locked(t, j)) {
        pthread_mutex_unlock(&t->mu);
        job_unref(j);
        return send_error(s, conn, hr, 503, "shutting_down", "the server is shutting down");
    }
    hr->j = j;
    j->conn = conn;
    j->suspended = 1;
    MHD_suspend_connection(conn);
    pthread_mutex_unlock(&t->mu);
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    srv *s = cls;
    http_req *hr = *con_cls;
    (void)version;
    if (!hr) {
        if (!(hr = calloc(1, sizeof *hr))) return MHD_NO;
        *con_cls = hr;
        hr->t_start = kvlm_now();
        hr->head = !strcmp(method, "HEAD");
        snprintf(hr->method, sizeof hr->method, "%s", method);
        snprintf(hr->path, sizeof hr->path, "%s", url);
        hr->origin = allowed_origin(s, conn);
        if (!strcmp(method, "OPTIONS")) return preflight(s, conn, hr);
        if (auth_required(&s->cfg, url) && !route_is_web(s, url)) {
            const char *a = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
            const char *x = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "x-api-key");
            if (!auth_ok(&s->cfg, a) && !auth_key_ok(&s->cfg, x)) return unauthorized(s, conn, hr, a || x);
        }
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > s->cfg.max_body) return too_large(s, conn, hr);
        return MHD_YES;
    }
    if (hr->j) return job_progress(s, conn, hr, hr->j);
    if (*upload_size) {
        if (!hr->too_large && hr->body.len + *upload_size <= s->cfg.max_body) sbuf_add(&hr->body, upload, *upload_size);
        else hr->too_large = 1;
        *upload_size = 0;
        return MHD_YES;
    }
    guard_request_read(s->guard, conn);
    if (hr->too_large) return too_large(s, conn, hr);
    if (hr->body.failed) return send_error(s, conn, hr, 500, NULL, "out of memory");
    reply r;
    if (route_web(s, method, url, MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH),
                  &r)) {
        sbuf_free(&hr->body);
        return send_reply(s, conn, hr, &r);
    }
    for (;;) {
        route(s, method, url, hr->body.data ? hr->body.data : "", hr->body.len,
              MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "model"), &r);
        if (!r.wait_load) break;
        /* the model loads: the connection waits (its body kept) and is
         * routed again when the loader resumes it (models.h) */
        const int w = models_wait(r.wait_load, conn);
        if (w == 0) return MHD_YES;
        if (w < 0) return send_error(s, conn, hr, 500, NULL, "out of memory");
    }
    sbuf_free(&hr->body);
    if (r.engine_stream) return engine_stream(s, r.target ? r.target : s, conn, hr);
    return r.j ? queue_job(s, conn, hr, r.j) : send_reply(s, conn, hr, &r);
}

static void log_request(srv *s, struct MHD_Connection *conn, http_req *hr) {
    if (!s->log) return;
    char client[INET6_ADDRSTRLEN] = "-";
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    const struct sockaddr *sa = ci ? ci->client_addr : NULL;
    if (sa && sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, client, sizeof client);
    else if (sa && sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, client, sizeof client);
    access_entry e = {.client = client, .method = hr->method, .path = hr->path, .status = hr->status,
                      .prompt_tokens = -1, .completion_tokens = -1, .ttft_ms = -1,
                      .total_ms = (kvlm_now() - hr->t_start) * 1e3, .bytes = hr->bytes};
    job *j = hr->j;
    if (j) {
        /* The engine's fields are final once the job is DONE (set under mu
         * after its last write); before that only the prompt is known. */
        pthread_mutex_lock(&j->s->mu);
        const int done = j->state == JOB_DONE;
        if (j->rq.stream) e.bytes = j->bytes_sent;
        pthread_mutex_unlock(&j->s->mu);
        e.prompt_tokens = j->prompt_tokens;
        if (done) {
            e.completion_tokens = j->completion_tokens;
            double first = 0;
            for (int p = 0; p < j->rq.n_prompts; p++)
                if (j->runs[p].t_first > 0 && (first == 0 || j->runs[p].t_first < first)) first = j->runs[p].t_first;
            if (first > 0) e.ttft_ms = (first - j->t_arrival) * 1e3;
        }
    }
    access_log_write(s->log, &e);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
    srv *s = cls;
    http_req *hr = *con_cls;
    if (!hr) return;
    if (!hr->status && toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) hr->status = 499; /* client gone, no answer */
    log_request(s, conn, hr);
    if (toe == MHD_REQUEST_TERMINATED_COMPLETED_OK) guard_request_done(s->guard, conn);
    if (hr->j) {
        srv *t = hr->j->s; /* the job's model (models.h) */
        pthread_mutex_lock(&t->mu);
        hr->j->conn = NULL;
        hr->j->suspended = 0;
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && hr->j->state != JOB_DONE) engine_cancel_locked(t, hr->j);
        pthread_mutex_unlock(&t->mu);
        job_unref(hr->j);
    }
    sbuf_free(&hr->body);
    free(hr);
    *con_cls = NULL;
}

static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn) {
    srv *s = cls;
    (void)uri;
    guard_request_line(s->guard, conn);
    return NULL;
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    srv *s = cls;
    guard_notify(s->guard, conn, socket_context, (int)code);
}

/* ------------------------------------------------------------ the daemon */

/* The address to bind: a numeric address or a host name (getaddrinfo;
 * its first IPv4 address, else its first IPv6 one). */
static int resolve(const char *host, int port, struct sockaddr_storage *ss, int *v6, kvlm_error *err) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc) return kvlm_error_set(err, KVLM_ERR_ARG, "--host: cannot resolve '%s': %s", host, gai_strerror(rc));
    const struct addrinfo *pick = NULL;
    for (const struct addrinfo *a = res; a && !pick; a = a->ai_next)
        if (a->ai_family == AF_INET) pick = a;
    for (const struct addrinfo *a = res; a && !pick; a = a->ai_next)
        if (a->ai_family == AF_INET6) pick = a;
    if (!pick) {
        freeaddrinfo(res);
        return kvlm_error_set(err, KVLM_ERR_ARG, "--host: '%s' has no IPv4 or IPv6 address", host);
    }
    memset(ss, 0, sizeof *ss);
    memcpy(ss, pick->ai_addr, pick->ai_addrlen);
    *v6 = pick->ai_family == AF_INET6;
    if (*v6) ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
    else ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
    freeaddrinfo(res);
    return 0;
}

int http_start(srv *s, kvlm_error *err) {
    const char *host = s->cfg.host ? s->cfg.host : "127.0.0.1";
    struct sockaddr_storage ss;
    int v6 = 0;
    if (resolve(host, s->cfg.port, &ss, &v6, err)) return -1;
    if (v6) inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, s->address, sizeof s->address);
    else inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, s->address, sizeof s->address);
    /* Connections stay under the descriptor limit, with room to spare. */
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur != RLIM_INFINITY) {
        long room = (long)rl.rlim_cur - FD_HEADROOM - MHD_MARGIN;
        if (room < 1) room = 1;
        if (s->cfg.max_connections <= 0 || s->cfg.max_connections > room) s->cfg.max_connections = (int)room;
    }
    if (s->cfg.max_connections <= 0) s->cfg.max_connections = 512;
    if (!(s->guard = guard_create(s->cfg.max_connections, s->cfg.read_timeout, s->cfg.idle_timeout, err))) return -1;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ITC | MHD_ALLOW_SUSPEND_RESUME;
    /* "::" (any IPv6 address) takes IPv4 clients too, as "0.0.0.0" and
     * "::" together would; any other IPv6 address only its own. */
    if (v6) flags |= IN6_IS_ADDR_UNSPECIFIED(&((struct sockaddr_in6 *)&ss)->sin6_addr) ? MHD_USE_DUAL_STACK : MHD_USE_IPv6;
    const unsigned idle = s->cfg.idle_timeout > 0 ? (unsigned)(s->cfg.idle_timeout + 0.999) : 0;
    s->listen_fd = -1;
    s->mhd = MHD_start_daemon(flags, (uint16_t)s->cfg.port, NULL, NULL, on_request, s, MHD_OPTION_NOTIFY_COMPLETED,
                              on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                              MHD_OPTION_URI_LOG_CALLBACK, on_uri, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                              MHD_OPTION_CONNECTION_TIMEOUT, idle, MHD_OPTION_CONNECTION_LIMIT,
                              (unsigned)(s->cfg.max_connections + MHD_MARGIN), MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                              (unsigned)(s->cfg.max_per_ip > 0 ? s->cfg.max_per_ip : 0), MHD_OPTION_END);
    if (!s->mhd) {
        guard_free(s->guard);
        s->guard = NULL;
        return kvlm_error_set(err, KVLM_ERR_SYSTEM,
                              "cannot listen on %s (%s) port %d (in use, or not an address of this host)", host,
                              s->address, s->cfg.port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : s->cfg.port;
    return 0;
}

void http_quiesce(srv *s) {
    if (!s->mhd || s->listen_fd >= 0) return;
    MHD_socket fd = MHD_quiesce_daemon(s->mhd);
    if (fd != MHD_INVALID_SOCKET) {
        /* Linux stops listening on shutdown(2): new connections are
         * refused from here on. The descriptor itself is closed only after
         * the daemon stopped (its thread may still hold it). */
        s->listen_fd = fd;
        shutdown(fd, SHUT_RDWR);
    }
}

void http_stop(srv *s) {
    if (s->mhd) MHD_stop_daemon(s->mhd);
    s->mhd = NULL;
    if (s->listen_fd >= 0) close(s->listen_fd);
    s->listen_fd = -1;
    guard_free(s->guard);
    s->guard = NULL;
}
