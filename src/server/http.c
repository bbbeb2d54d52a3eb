/*
 * libmicrohttpd glue (see http.h). The access handler is called several
 * times per request: once with the headers (413 at once when the declared
 * length is over the limit), once per piece of body, once with the whole
 * body (routing), and again after every resume while a job is pending.
 * Streaming bodies come from a content reader that hands out what the
 * engine has queued and suspends the connection when there is nothing;
 * the engine resumes it when it appends more.
 */
#include "server/http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/routes.h"

typedef struct http_req {
    sbuf body;
    int too_large;
    job *j;             /* the job this request waits for */
} http_req;

static enum MHD_Result send_reply(srv *s, struct MHD_Connection *conn, reply *r) {
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(r->len, r->body ? r->body : (char *)"", MHD_RESPMEM_MUST_COPY);
    free(r->body);
    r->body = NULL;
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, r->content_type ? r->content_type : "application/json");
    if (r->status == 429) MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, "1");
    if (r->allow) MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->allow);
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    metrics_count_status(s->metrics, r->status);
    return ret;
}

static enum MHD_Result send_error(srv *s, struct MHD_Connection *conn, int status, const char *code, const char *msg) {
    api_error e;
    reply r = {0};
    api_fail(&e, status, code, NULL, "%s", msg);
    route_error(&r, &e);
    return send_reply(s, conn, &r);
}

static enum MHD_Result too_large(srv *s, struct MHD_Connection *conn) {
    char msg[128];
    snprintf(msg, sizeof msg, "the request body is over the limit of %zu bytes", s->cfg.max_body);
    return send_error(s, conn, 413, "request_too_large", msg);
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

static enum MHD_Result start_stream(srv *s, struct MHD_Connection *conn, job *j) {
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sse_reader, j, sse_free);
    if (!resp) return MHD_NO;
    pthread_mutex_lock(&s->mu);
    job_ref_locked(j); /* released by sse_free */
    pthread_mutex_unlock(&s->mu);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result ret = MHD_queue_response(conn, 200, resp);
    MHD_destroy_response(resp);
    metrics_count_status(s->metrics, 200);
    return ret;
}

/* Called again after the engine resumed the connection. */
static enum MHD_Result job_progress(srv *s, struct MHD_Connection *conn, job *j) {
    reply r = {0};
    pthread_mutex_lock(&s->mu);
    if (j->cancel_requested) {
        pthread_mutex_unlock(&s->mu);
        return MHD_NO;
    }
    if (j->state == JOB_DONE && j->status) {
        r.status = j->status;
        r.body = malloc(j->out.len + 1);
        if (r.body) memcpy(r.body, j->out.data ? j->out.data : "", j->out.len);
        r.len = r.body ? j->out.len : 0;
        pthread_mutex_unlock(&s->mu);
        return send_reply(s, conn, &r);
    }
    if (j->state != JOB_QUEUED && j->rq.stream) {
        pthread_mutex_unlock(&s->mu);
        return start_stream(s, conn, j);
    }
    j->suspended = 1;
    MHD_suspend_connection(conn);
    pthread_mutex_unlock(&s->mu);
    return MHD_YES;
}

static enum MHD_Result queue_job(srv *s, struct MHD_Connection *conn, http_req *hr, job *j) {
    pthread_mutex_lock(&s->mu);
    if (engine_enqueue_locked(s, j)) {
        pthread_mutex_unlock(&s->mu);
        job_unref(j);
        return send_error(s, conn, 503, "shutting_down", "the server is shutting down");
    }
    hr->j = j;
    j->conn = conn;
    j->suspended = 1;
    MHD_suspend_connection(conn);
    pthread_mutex_unlock(&s->mu);
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
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > s->cfg.max_body) return too_large(s, conn);
        return MHD_YES;
    }
    if (hr->j) return job_progress(s, conn, hr->j);
    if (*upload_size) {
        if (!hr->too_large && hr->body.len + *upload_size <= s->cfg.max_body) sbuf_add(&hr->body, upload, *upload_size);
        else hr->too_large = 1;
        *upload_size = 0;
        return MHD_YES;
    }
    if (hr->too_large) return too_large(s, conn);
    if (hr->body.failed) return send_error(s, conn, 500, NULL, "out of memory");
    reply r;
    route(s, method, url, hr->body.data ? hr->body.data : "", hr->body.len, &r);
    sbuf_free(&hr->body);
    return r.j ? queue_job(s, conn, hr, r.j) : send_reply(s, conn, &r);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
    srv *s = cls;
    http_req *hr = *con_cls;
    (void)conn;
    if (!hr) return;
    if (hr->j) {
        pthread_mutex_lock(&s->mu);
        hr->j->conn = NULL;
        hr->j->suspended = 0;
        if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK && hr->j->state != JOB_DONE) engine_cancel_locked(s, hr->j);
        pthread_mutex_unlock(&s->mu);
        job_unref(hr->j);
    }
    sbuf_free(&hr->body);
    free(hr);
    *con_cls = NULL;
}

/* ------------------------------------------------------------ the daemon */

int http_start(srv *s, kvlm_error *err) {
    const char *host = s->cfg.host ? s->cfg.host : "127.0.0.1";
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)s->cfg.port)};
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)s->cfg.port)};
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_ALLOW_SUSPEND_RESUME;
    const struct sockaddr *sa;
    if (inet_pton(AF_INET, host, &a4.sin_addr) == 1) {
        sa = (const struct sockaddr *)&a4;
    } else if (inet_pton(AF_INET6, host, &a6.sin6_addr) == 1) {
        sa = (const struct sockaddr *)&a6;
        flags |= MHD_USE_IPv6;
    } else {
        return kvlm_error_set(err, KVLM_ERR_ARG, "--host: '%s' is not a numeric IPv4 or IPv6 address", host);
    }
    s->mhd = MHD_start_daemon(flags, (uint16_t)s->cfg.port, NULL, NULL, on_request, s, MHD_OPTION_NOTIFY_COMPLETED,
                              on_completed, s, MHD_OPTION_SOCK_ADDR, sa, MHD_OPTION_CONNECTION_TIMEOUT,
                              (unsigned)600, MHD_OPTION_END);
    if (!s->mhd) {
        return kvlm_error_set(err, KVLM_ERR_SYSTEM,
                              "cannot listen on %s port %d (in use, or not an address of this host)", host,
                              s->cfg.port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : s->cfg.port;
    return 0;
}

void http_stop(srv *s) {
    if (s->mhd) MHD_stop_daemon(s->mhd);
    s->mhd = NULL;
}
