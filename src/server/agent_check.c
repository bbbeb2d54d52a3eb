/*
 * The agent-check responder (see agent_check.h): one listening socket and
 * one thread that polls it together with a stop pipe, accepts, writes the
 * line for the load read at that moment and closes. HAProxy expects
 * nothing else: it reads up to the first '\n' and may send a line of its
 * own first (agent-send), which is not read.
 */
#include "server/agent_check.h"
#include "server/posix_fd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct agent_check {
    int fd, port;
    int stop[2];            /* a byte on stop[1] ends the thread */
    pthread_t thread;
    agent_load_fn load;
    void *ctx;
};

/* Free share of a resource in percent, 0..100 (a resource of size 0 is
 * free). */
static double free_pct(double used, double total) {
    if (total <= 0) return 100;
    const double f = 100.0 * (1.0 - used / total);
    return f < 0 ? 0 : f > 100 ? 100 : f;
}

int agent_weight(const agent_load *l) {
    if (l->max_waiting > 0 && l->waiting >= l->max_waiting) return 0;
    double h = free_pct((double)l->kv_used, (double)l->kv_total);
    const double q = free_pct(l->waiting, l->max_waiting);
    if (q < h) h = q;
    /* twice the headroom, up to the next step of 10 */
    const int w = ((int)(2 * h + 9.999) / 10) * 10;
    return w < 10 ? 10 : w > 100 ? 100 : w;
}

int agent_line(const agent_load *l, char *buf, size_t cap) {
    int n;
    if (l->loading) n = snprintf(buf, cap, "down#loading\n");
    else if (l->draining) n = snprintf(buf, cap, "drain\n");
    else n = snprintf(buf, cap, "ready up %d%%\n", agent_weight(l));
    return n < 0 ? 0 : (size_t)n >= cap ? (int)cap - 1 : n;
}

static void answer(agent_check *a, int c) {
    agent_load l;
    char line[AGENT_LINE_MAX];
    a->load(a->ctx, &l);
    const int n = agent_line(&l, line, sizeof line);
    /* A few bytes into a fresh socket's send buffer: one write suffices;
     * a peer that is already gone is no concern of ours. */
    ssize_t w = send(c, line, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)w;
    close(c);
}

static void *agent_main(void *arg) {
    agent_check *a = arg;
    for (;;) {
        struct pollfd p[2] = {{.fd = a->fd, .events = POLLIN}, {.fd = a->stop[0], .events = POLLIN}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (p[1].revents) break;
        if (!(p[0].revents & POLLIN)) continue;
        const int c = accept_cloexec(a->fd);
        if (c >= 0) answer(a, c);
    }
    return NULL;
}

agent_check *agent_check_start(const char *host, int port, agent_load_fn load, void *ctx, kvlm_error *err) {
    const char *h = host ? host : "127.0.0.1";
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t len;
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, h, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons((uint16_t)port);
        len = sizeof *v4;
    } else if (inet_pton(AF_INET6, h, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons((uint16_t)port);
        len = sizeof *v6;
    } else {
        kvlm_error_set(err, KVLM_ERR_ARG, "--agent-port: '%s' is not a numeric address", h);
        return NULL;
    }
    agent_check *a = calloc(1, sizeof *a);
    if (!a) {
        kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
        return NULL;
    }
    a->load = load;
    a->ctx = ctx;
    a->stop[0] = a->stop[1] = -1;
    const int one = 1;
    a->fd = socket_cloexec(ss.ss_family, SOCK_STREAM, 0);
    if (a->fd < 0 || setsockopt(a->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(a->fd, (struct sockaddr *)&ss, len) || listen(a->fd, 64)) {
        kvlm_error_set(err, KVLM_ERR_SYSTEM, "--agent-port: cannot listen on %s port %d: %s", h, port,
                       strerror(errno));
        goto fail;
    }
    struct sockaddr_storage bound;
    socklen_t bl = sizeof bound;
    if (getsockname(a->fd, (struct sockaddr *)&bound, &bl)) {
        kvlm_error_set(err, KVLM_ERR_SYSTEM, "--agent-port: getsockname: %s", strerror(errno));
        goto fail;
    }
    a->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
                                                : ((struct sockaddr_in *)&bound)->sin_port);
    if (pipe_cloexec(a->stop)) {
        kvlm_error_set(err, KVLM_ERR_SYSTEM, "--agent-port: pipe: %s", strerror(errno));
        goto fail;
    }
    const int rc = pthread_create(&a->thread, NULL, agent_main, a);
    if (rc) {
        kvlm_error_set(err, KVLM_ERR_SYSTEM, "--agent-port: cannot start its thread: %s", strerror(rc));
        goto fail;
    }
    return a;
fail:
    if (a->fd >= 0) close(a->fd);
    if (a->stop[0] >= 0) close(a->stop[0]);
    if (a->stop[1] >= 0) close(a->stop[1]);
    free(a);
    return NULL;
}

int agent_check_port(const agent_check *a) { return a->port; }

void agent_check_stop(agent_check *a) {
    if (!a) return;
    const char b = 1;
    ssize_t w = write(a->stop[1], &b, 1);
    (void)w;
    pthread_join(a->thread, NULL);
    close(a->fd);
    close(a->stop[0]);
    close(a->stop[1]);
    free(a);
}
