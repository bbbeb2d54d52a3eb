/*
 * Connection limit and read deadlines (see conn_guard.h). The thread
 * sleeps until the earliest deadline, so it costs nothing while no
 * request is being received.
 */
#include "server/conn_guard.h"

#include <microhttpd.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

typedef struct entry {
    int fd;
    double deadline;          /* kvlm_now() seconds; 0: none */
    struct entry *prev, *next;
} entry;

struct conn_guard {
    double read, idle;
    int max_open, n_open;
    unsigned long long refused;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    entry *head;
    int stop, running;
    double next_wake;         /* when the thread wakes next; 0: when signalled */
    unsigned long long cuts;
    pthread_t thread;
};

/* Sleeps until the earliest deadline (without one: until woken), so an
 * idle server's guard never runs. */
static void *guard_main(void *arg) {
    conn_guard *g = arg;
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        double next = 0;
        const double now = kvlm_now();
        for (entry *e = g->head; e; e = e->next) {
            if (e->deadline > 0 && now > e->deadline) {
                shutdown(e->fd, SHUT_RDWR);
                e->deadline = 0;
                g->cuts++;
            } else if (e->deadline > 0 && (next == 0 || e->deadline < next)) {
                next = e->deadline;
            }
        }
        g->next_wake = next;
        if (next == 0) {
            pthread_cond_wait(&g->cv, &g->mu);
        } else {
            const double in = next - now + 0.01;
            struct timespec ts;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            long long ns = ts.tv_nsec + (long long)(in * 1e9);
            ts.tv_sec += (time_t)(ns / 1000000000LL);
            ts.tv_nsec = (long)(ns % 1000000000LL);
            pthread_cond_timedwait(&g->cv, &g->mu, &ts);
        }
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

/* mu held: a deadline was set; wake the thread if it sleeps past it. */
static void deadline_set_locked(conn_guard *g, double d) {
    if (d > 0 && g->running && (g->next_wake == 0 || d < g->next_wake)) {
        g->next_wake = d;
        pthread_cond_signal(&g->cv);
    }
}

conn_guard *guard_create(int max_open, double read_timeout, double idle_timeout, kvlm_error *err) {
    conn_guard *g = calloc(1, sizeof *g);
    if (!g) {
        kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
        return NULL;
    }
    g->max_open = max_open;
    g->read = read_timeout;
    g->idle = idle_timeout;
    pthread_mutex_init(&g->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (read_timeout > 0) {
        int rc = pthread_create(&g->thread, NULL, guard_main, g);
        if (rc) {
            kvlm_error_set(err, KVLM_ERR_SYSTEM, "cannot start the connection guard thread: %s", strerror(rc));
            guard_free(g);
            return NULL;
        }
        g->running = 1;
    }
    return g;
}

void guard_free(conn_guard *g) {
    if (!g) return;
    if (g->running) {
        pthread_mutex_lock(&g->mu);
        g->stop = 1;
        pthread_cond_signal(&g->cv);
        pthread_mutex_unlock(&g->mu);
        pthread_join(g->thread, NULL);
    }
    while (g->head) {
        entry *e = g->head;
        g->head = e->next;
        free(e);
    }
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->cv);
    free(g);
}

void guard_notify(void *cls, struct MHD_Connection *c, void **socket_context, int code) {
    conn_guard *g = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        entry *e = ci ? calloc(1, sizeof *e) : NULL;
        if (!e) {
            /* Refused rather than unguarded. */
            if (ci) shutdown(ci->connect_fd, SHUT_RDWR);
            return;
        }
        e->fd = ci->connect_fd;
        pthread_mutex_lock(&g->mu);
        if (++g->n_open > g->max_open) {
            /* Over the limit: closed at once, unanswered. */
            shutdown(e->fd, SHUT_RDWR);
            g->refused++;
        }
        e->deadline = g->read > 0 ? kvlm_now() + g->read : 0;
        deadline_set_locked(g, e->deadline);
        e->next = g->head;
        if (g->head) g->head->prev = e;
        g->head = e;
        pthread_mutex_unlock(&g->mu);
        *socket_context = e;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED && *socket_context) {
        /* Called before libmicrohttpd closes the socket. */
        entry *e = *socket_context;
        pthread_mutex_lock(&g->mu);
        g->n_open--;
        if (e->prev) e->prev->next = e->next;
        else g->head = e->next;
        if (e->next) e->next->prev = e->prev;
        pthread_mutex_unlock(&g->mu);
        free(e);
        *socket_context = NULL;
    }
}

static entry *entry_of(conn_guard *g, struct MHD_Connection *c) {
    if (!g || !g->running) return NULL; /* no deadlines */
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

static void set_deadline(conn_guard *g, struct MHD_Connection *c, double in, int tighten_only) {
    entry *e = entry_of(g, c);
    if (!e) return;
    pthread_mutex_lock(&g->mu);
    const double d = in > 0 ? kvlm_now() + in : 0;
    if (!tighten_only || (d > 0 && (e->deadline == 0 || d < e->deadline))) {
        e->deadline = d;
        deadline_set_locked(g, d);
    }
    pthread_mutex_unlock(&g->mu);
}

void guard_request_line(conn_guard *g, struct MHD_Connection *c) { if (g) set_deadline(g, c, g->read, 1); }
void guard_request_read(conn_guard *g, struct MHD_Connection *c) { set_deadline(g, c, 0, 0); }
void guard_request_done(conn_guard *g, struct MHD_Connection *c) {
    if (g) set_deadline(g, c, g->idle > 0 ? g->idle + g->read : g->read, 0);
}

void guard_counts(conn_guard *g, int *open, unsigned long long *refused, unsigned long long *cut) {
    *open = 0;
    *refused = *cut = 0;
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    *open = g->n_open;
    *refused = g->refused;
    *cut = g->cuts;
    pthread_mutex_unlock(&g->mu);
}
