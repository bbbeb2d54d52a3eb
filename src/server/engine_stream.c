/*
 * The engine view's event stream (see engine_stream.h).
 */
#include "server/engine_stream.h"

#include <microhttpd.h>
#include <stdlib.h>
#include <string.h>

#include "server/engine_view.h"

#define MIN_MS 100
#define MAX_MS 5000
#define DEFAULT_MS 500

struct view_sub {
    srv *s;
    struct MHD_Connection *conn;
    double interval, next_due;   /* kvlm_now() seconds */
    /* under s->mu */
    int suspended;               /* libmicrohttpd holds the connection for us */
    int ended;                   /* the server drains or stops: end of stream */
    int listed;                  /* in s->subs */
    sbuf pending;                /* the event being sent */
    view_sub *prev, *next;       /* s->subs */
};

int stream_interval_ms(const char *value, api_error *e) {
    if (!value) return DEFAULT_MS;
    char *end;
    const long long v = *value >= '0' && *value <= '9' ? strtoll(value, &end, 10) : -1;
    if (v < 0 || *end)
        return api_fail(e, 400, "invalid_value", "interval_ms",
                        "'interval_ms' must be a whole number of milliseconds (%d to %d), got '%.40s'", MIN_MS, MAX_MS,
                        value);
    return v < MIN_MS ? MIN_MS : v > MAX_MS ? MAX_MS : (int)v;
}

static ssize_t sub_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    view_sub *v = cls;
    srv *s = v->s;
    (void)pos;
    ssize_t r;
    pthread_mutex_lock(&s->mu);
    if (!v->pending.len && !v->ended) {
        const double now = kvlm_now();
        if (now >= v->next_due) {
            sbuf_adds(&v->pending, "data: ");
            view_append_snapshot_locked(s, &v->pending);
            sbuf_adds(&v->pending, "\n\n");
            v->next_due = now + v->interval;
        }
    }
    if (v->pending.failed) {
        r = MHD_CONTENT_READER_END_WITH_ERROR;
    } else if (v->pending.len) {
        const size_t n = v->pending.len < max ? v->pending.len : max;
        memcpy(buf, v->pending.data, n);
        sbuf_consume(&v->pending, n);
        r = (ssize_t)n;
    } else if (v->ended) {
        r = MHD_CONTENT_READER_END_OF_STREAM;
    } else {
        /* Under mu: the engine cannot resume before this suspend. */
        v->suspended = 1;
        MHD_suspend_connection(v->conn);
        r = 0;
    }
    pthread_mutex_unlock(&s->mu);
    return r;
}

static void sub_free(void *cls) {
    view_sub *v = cls;
    srv *s = v->s;
    pthread_mutex_lock(&s->mu);
    if (v->listed) {
        if (v->prev) v->prev->next = v->next;
        else s->subs = v->next;
        if (v->next) v->next->prev = v->prev;
        s->n_subs--;
    }
    pthread_mutex_unlock(&s->mu);
    sbuf_free(&v->pending);
    free(v);
}

struct MHD_Response *stream_response(srv *s, struct MHD_Connection *conn, int ms, int *status) {
    view_sub *v = calloc(1, sizeof *v);
    *status = 500;
    if (!v) return NULL;
    v->s = s;
    v->conn = conn;
    v->interval = ms * 1e-3;
    v->next_due = kvlm_now();
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sub_reader, v, sub_free);
    if (!resp) {
        free(v);
        return NULL;
    }
    pthread_mutex_lock(&s->mu);
    const int refuse = s->draining || s->stopping;
    if (!refuse) {
        v->next = s->subs;
        if (s->subs) s->subs->prev = v;
        s->subs = v;
        s->n_subs++;
        v->listed = 1;
    }
    pthread_mutex_unlock(&s->mu);
    if (refuse) {
        MHD_destroy_response(resp); /* calls sub_free */
        *status = 503;
        return NULL;
    }
    return resp;
}

/* Resumes the suspended subscribers that are due (all of them with
 * `end`, which also marks them ended). */
static void resume_due(srv *s, int end) {
    enum { BATCH = 64 };
    for (;;) {
        struct MHD_Connection *conns[BATCH];
        int n = 0;
        const double now = kvlm_now();
        pthread_mutex_lock(&s->mu);
        if (s->draining || s->stopping) end = 1;
        for (view_sub *v = s->subs; v && n < BATCH; v = v->next) {
            if (end) v->ended = 1;
            if (v->suspended && (v->ended || now >= v->next_due)) {
                v->suspended = 0;
                conns[n++] = v->conn;
            }
        }
        pthread_mutex_unlock(&s->mu);
        /* Still suspended in libmicrohttpd (only this thread resumes), so
         * the connections cannot have been freed. */
        for (int i = 0; i < n; i++) MHD_resume_connection(conns[i]);
        if (n < BATCH) return;
    }
}

void stream_tick(srv *s) { resume_due(s, 0); }

void stream_end_all(srv *s) { resume_due(s, 1); }
