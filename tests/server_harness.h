/*
 * Test harness for `kvlm serve`, shared by the tests that start a server:
 * the server as a child process in a fresh directory, started at once or
 * held loading (KVLM_TEST_LOAD_GATE) (dies with the test through
 * PR_SET_PDEATHSIG; its log checked for sanitizer reports when it stops),
 * a blocking HTTP/1.1 client (chunked bodies undone), JSON path lookups,
 * server-sent event parsing and /metrics values. Everything is static (a
 * test binary links helpers.o alone), marked unused so a test may use a
 * part of it. th_server_main_init finds the binary ($KVLM, or build-san/
 * for a sanitised test binary) and ignores SIGPIPE.
 */
#ifndef KVLM_TEST_SERVER_HARNESS_H
#define KVLM_TEST_SERVER_HARNESS_H

#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "helpers.h"

#define TH_UNUSED __attribute__((unused))

TH_UNUSED static char kvlm_bin[512] = "build/kvlm";
TH_UNUSED static int dirty_exit; /* a server did not stop cleanly */

/* ------------------------------------------------------------- the child */

typedef struct server {
    pid_t pid;
    int port;
    char dir[512], log[600];
    char addr[64];   /* the address in its start-up line */
} server;

/* How many times longer than usual a test may wait: $KVLM_TEST_TIME_SCALE
 * (set by tests/run_tsan.sh, whose build runs several times slower), 1
 * by default. Scales waits and the --timeout a test relies on, never what
 * is measured. */
TH_UNUSED static int th_time_scale(void) {
    const char *s = getenv("KVLM_TEST_TIME_SCALE");
    int k = s ? atoi(s) : 1;
    return k < 1 ? 1 : k > 100 ? 100 : k;
}

/* Stops the server (SIGTERM, then SIGKILL after 5 s, scaled). Returns 0 when it
 * exited cleanly: status 0 and no sanitizer report in its log. */
TH_UNUSED static int stop_server(server *sv) {
    if (sv->pid <= 0) return 0;
    int st = -1, rc = -1;
    kill(sv->pid, SIGTERM);
    for (int i = 0; i < 500 * th_time_scale() && rc < 0; i++) {
        if (waitpid(sv->pid, &st, WNOHANG) == sv->pid) rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
        else usleep(10000);
    }
    if (rc < 0) {
        kill(sv->pid, SIGKILL);
        waitpid(sv->pid, NULL, 0);
    }
    sv->pid = 0;
    char *log = th_read_file(sv->log, NULL);
    if (rc != 0 || (log && (strstr(log, "Sanitizer") || strstr(log, "runtime error")))) {
        fprintf(stderr, "kvlm serve exited with %d:\n%s\n", rc, log ? log : "");
        rc = -1;
    }
    free(log);
    if (rc) dirty_exit = 1;
    return rc;
}

/* Starts `kvlm serve --port 0 ARGS` (ARGS split on spaces), reads the
 * address and port from its start-up line ("listening on http://ADDR:PORT"
 * or "http://[ADDR]:PORT") and, with `ready`, waits for its "ready" line
 * (the model loaded); without, returns while it may still be loading. */
TH_UNUSED static int start_server_as(server *sv, const char *args, int ready) {
    static const char listening[] = "listening on http://";
    snprintf(sv->log, sizeof sv->log, "%s/serve.log", sv->dir);
    char buf[1024], *argv[40];
    int argc = 0;
    snprintf(buf, sizeof buf, "serve --port 0 %s", args);
    argv[argc++] = kvlm_bin;
    for (char *t = strtok(buf, " "); t && argc < 38; t = strtok(NULL, " ")) argv[argc++] = t;
    argv[argc] = NULL;
    unlink(sv->log); /* a former server's log is not this one's */
    pid_t parent = getpid();
    sv->pid = fork();
    if (sv->pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(1);
        FILE *f = freopen(sv->log, "w", stderr);
        (void)f;
        execv(kvlm_bin, argv);
        _exit(127);
    }
    sv->port = 0;
    for (int i = 0; i < 12000; i++) { /* up to 120 s: a sanitised 124M build starts slowly */
        char *log = th_read_file(sv->log, NULL);
        const char *p = log ? strstr(log, listening) : NULL;
        if (p && !sv->port) {
            p += strlen(listening);
            const char *end = *p == '[' ? strstr(p, "]:") : strchr(p, ':');
            if (end) {
                size_t n = (size_t)(end - p) - (*p == '[');
                snprintf(sv->addr, sizeof sv->addr, "%.*s", (int)n, p + (*p == '['));
                sv->port = atoi(end + (*end == ']' ? 2 : 1));
            }
        }
        const int up = sv->port && (!ready || (log && strstr(log, "kvlm serve: ready")));
        free(log);
        if (up) return 0;
        if (waitpid(sv->pid, NULL, WNOHANG) == sv->pid) {
            sv->pid = 0;
            break;
        }
        usleep(10000);
    }
    char *log = th_read_file(sv->log, NULL);
    fprintf(stderr, "kvlm serve did not start:\n%s\n", log ? log : "(no output)");
    free(log);
    stop_server(sv);
    return -1;
}

/* Starts `kvlm serve --port 0 ARGS` and waits until it serves the model. */
TH_UNUSED static int start_server(server *sv, const char *args) { return start_server_as(sv, args, 1); }

/* ------------------------------------------------------- an HTTP client */

/* Failures in worker threads of the concurrency test must not unwind
 * through cmocka from another thread: they are recorded, the thread
 * exits, and the main thread reports them (so teardown still stops the
 * server and shows its log). */
TH_UNUSED static __thread int in_worker;
TH_UNUSED static __thread char worker_error[1024];
#define FAIL(...)                                                             \
    do {                                                                      \
        if (in_worker) {                                                      \
            snprintf(worker_error, sizeof worker_error, __VA_ARGS__);         \
            pthread_exit(strdup(worker_error));                               \
        }                                                                     \
        fail_msg(__VA_ARGS__);                                                \
    } while (0)

typedef struct resp {
    int status;
    char *head, *body;
    size_t len;
} resp;

TH_UNUSED static int connect_to(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a)) FAIL("connect: %s", strerror(errno));
    return fd;
}

TH_UNUSED static void send_request(int fd, const char *method, const char *path, const char *body, size_t len) {
    char head[512];
    int n = snprintf(head, sizeof head, "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
                     "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n", method, path, len);
    if (write(fd, head, (size_t)n) != n) FAIL("write failed");
    for (size_t off = 0; off < len;) {
        ssize_t w = write(fd, body + off, len - off);
        if (w <= 0) break; /* the server may answer early and close (413) */
        off += (size_t)w;
    }
}

/* Removes chunked transfer framing in place. */
TH_UNUSED static size_t dechunk(char *b, size_t len) {
    size_t in = 0, out = 0;
    while (in < len) {
        size_t size = strtoul(b + in, NULL, 16);
        char *crlf = strstr(b + in, "\r\n");
        if (!crlf || size == 0) break;
        in = (size_t)(crlf - b) + 2;
        memmove(b + out, b + in, size);
        out += size;
        in += size + 2;
    }
    b[out] = 0;
    return out;
}

/* Reads a whole answer from fd (closed afterwards): status, head, body
 * (dechunked); `what` names the request in a failure. */
TH_UNUSED static resp read_response(int fd, const char *what) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    ssize_t r;
    while ((r = read(fd, buf + n, cap - n - 1)) > 0) {
        n += (size_t)r;
        if (cap - n < 2) buf = realloc(buf, cap *= 2);
    }
    close(fd);
    buf[n] = 0;
    resp out = {0};
    char *eoh = strstr(buf, "\r\n\r\n");
    if (!eoh) FAIL("%.200s: no HTTP response (%zu bytes)", what, n);
    *eoh = 0;
    out.status = atoi(buf + 9);
    out.head = strdup(buf);
    out.len = n - (size_t)(eoh + 4 - buf);
    out.body = malloc(out.len + 1);
    memcpy(out.body, eoh + 4, out.len);
    out.body[out.len] = 0;
    if (strcasestr(out.head, "transfer-encoding: chunked")) out.len = dechunk(out.body, out.len);
    free(buf);
    return out;
}

/* The value of response header `name` (case-insensitive), or NULL; the
 * text is in a static buffer, valid until the next call. */
TH_UNUSED static const char *resp_header(const resp *r, const char *name) {
    static char val[256];
    char pat[128];
    snprintf(pat, sizeof pat, "\r\n%s: ", name);
    const char *p = strcasestr(r->head, pat);
    if (!p) return NULL;
    p += strlen(pat);
    snprintf(val, sizeof val, "%.*s", (int)strcspn(p, "\r\n"), p);
    return val;
}

TH_UNUSED static resp http_raw(int port, const char *method, const char *path, const char *body, size_t blen) {
    int fd = connect_to(port);
    send_request(fd, method, path, body, blen);
    char what[512];
    snprintf(what, sizeof what, "%s %s", method, path);
    return read_response(fd, what);
}

TH_UNUSED static resp http(int port, const char *method, const char *path, const char *body) {
    return http_raw(port, method, path, body ? body : "", body ? strlen(body) : 0);
}

/* A fresh temporary directory for a server (sv->dir, zeroed otherwise);
 * the caller removes it with th_rmtree. */
TH_UNUSED static void new_dir(server *sv) {
    char *d = th_tempdir();
    assert_non_null(d);
    memset(sv, 0, sizeof *sv);
    snprintf(sv->dir, sizeof sv->dir, "%s", d);
    free(d);
}

/* Starts a server that stays loading until `gate` exists (the test hook
 * KVLM_TEST_LOAD_GATE of kvlm serve). */
TH_UNUSED static void start_gated(server *sv, const char *gate, const char *args) {
    setenv("KVLM_TEST_LOAD_GATE", gate, 1);
    int rc = start_server_as(sv, args, 0);
    unsetenv("KVLM_TEST_LOAD_GATE");
    if (rc) fail_msg("kvlm serve %s did not start", args);
}

/* start_server in a fresh temporary directory (sv->dir; the caller
 * removes it with th_rmtree after stop_server). */
TH_UNUSED static int start_server_in_tempdir(server *sv, const char *args) {
    char *d = th_tempdir();
    if (!d) return -1;
    snprintf(sv->dir, sizeof sv->dir, "%s", d);
    free(d);
    return start_server(sv, args);
}

TH_UNUSED static void resp_free(resp *r) {
    free(r->head);
    free(r->body);
}

/* POSTs a JSON body; expects `status`; returns the parsed reply. */
TH_UNUSED static json_t *post(int port, const char *path, const char *body, int status) {
    resp r = http(port, "POST", path, body);
    if (r.status != status) FAIL("POST %s %s: status %d (want %d): %s", path, body, r.status, status, r.body);
    json_t *j = json_loads(r.body, 0, NULL);
    if (!j) FAIL("POST %s: not JSON: %s", path, r.body);
    resp_free(&r);
    return j;
}

/* The value at "a.b.0.c" (object keys and array indexes), or NULL. */
TH_UNUSED static json_t *jget(json_t *j, const char *path) {
    char buf[128];
    snprintf(buf, sizeof buf, "%s", path);
    char *save = NULL; /* strtok_r: worker threads call this concurrently */
    for (char *t = strtok_r(buf, ".", &save); t && j; t = strtok_r(NULL, ".", &save))
        j = (*t >= '0' && *t <= '9') ? json_array_get(j, (size_t)atoi(t)) : json_object_get(j, t);
    return j;
}

TH_UNUSED static const char *jstr(json_t *j, const char *path) {
    if (!json_is_string(jget(j, path))) FAIL("%s is not a string", path);
    return json_string_value(jget(j, path));
}

/* The tokens (of a logprobs.content array) up to and including the one
 * whose text completes `marker`; 0 when it never does. */
TH_UNUSED static int tokens_through(json_t *content, const char *marker) {
    size_t len = 0, cap = 0;
    char *text = NULL;
    int n = 0;
    for (size_t i = 0; i < json_array_size(content) && !n; i++) {
        const char *t = jstr(json_array_get(content, i), "token");
        const size_t tl = strlen(t);
        if (len + tl + 1 > cap) {
            cap = 2 * (len + tl + 1);
            if (!(text = realloc(text, cap))) FAIL("out of memory");
        }
        memcpy(text + len, t, tl + 1), len += tl;
        if (memmem(text, len, marker, strlen(marker))) n = (int)i + 1;
    }
    free(text);
    return n;
}

TH_UNUSED static json_int_t jint(json_t *j, const char *path) {
    if (!json_is_integer(jget(j, path))) {
        char *dump = json_dumps(j, JSON_COMPACT);
        const char *tail = dump && strlen(dump) > 600 ? dump + strlen(dump) - 600 : dump;
        FAIL("%s is not an integer in ...%s", path, tail ? tail : "(null)");
    }
    return json_integer_value(jget(j, path));
}

/* The prompt text the server renders for a chat body: its /tokenize
 * tokens, then /detokenize. Malloc'ed. */
TH_UNUSED static char *rendered_prompt(int port, const char *body) {
    json_t *t = post(port, "/tokenize", body, 200);
    json_t *d = json_pack("{sO}", "tokens", json_object_get(t, "tokens"));
    char *db = json_dumps(d, JSON_COMPACT);
    json_t *txt = post(port, "/detokenize", db, 200);
    char *out = strdup(jstr(txt, "prompt"));
    free(db);
    json_decref(d);
    json_decref(t);
    json_decref(txt);
    return out;
}

/* The events of a server-sent event body: the JSON of each data line but
 * [DONE], which must come last. */
TH_UNUSED static json_t *sse_events(const char *body) {
    json_t *arr = json_array();
    int done = 0;
    for (const char *p = body; (p = strstr(p, "data: ")); p += 6) {
        if (done) FAIL("event after [DONE]: %s", p);
        if (!strncmp(p + 6, "[DONE]\n\n", 8)) {
            done = 1;
            continue;
        }
        const char *end = strstr(p, "\n\n");
        if (!end) FAIL("unterminated event: %s", p);
        json_t *j = json_loadb(p + 6, (size_t)(end - p - 6), 0, NULL);
        if (!j) FAIL("event is not JSON: %.*s", (int)(end - p), p);
        json_array_append_new(arr, j);
    }
    if (!done) FAIL("no [DONE] in: %s", body);
    return arr;
}

/* One metric's value from /metrics (-1 if absent). */
TH_UNUSED static double metric(int port, const char *name) {
    resp r = http(port, "GET", "/metrics", NULL);
    double v = -1;
    size_t n = strlen(name);
    for (char *line = r.body; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        if (!strncmp(line, name, n) && line[n] == ' ') v = atof(line + n + 1);
    resp_free(&r);
    return v;
}

/* Adds one streamed chunk's `delta.tool_calls` to `calls` (an array of
 * {id, name, arguments}): an opening (id, type, name, "" arguments) appends
 * a call at its index, a continuation (no name) appends its arguments. */
TH_UNUSED static void th_tool_call_deltas(json_t *calls, json_t *tool_calls) {
    size_t k;
    json_t *t;
    json_array_foreach(tool_calls, k, t) {
        const json_int_t idx = jint(t, "index");
        if (json_is_string(jget(t, "id"))) {
            assert_int_equal(idx, (json_int_t)json_array_size(calls));
            assert_string_equal(jstr(t, "type"), "function");
            assert_string_equal(jstr(t, "function.arguments"), "");
            json_array_append_new(calls, json_pack("{ssssss}", "id", jstr(t, "id"), "name", jstr(t, "function.name"),
                                                   "arguments", ""));
        } else {
            json_t *call = json_array_get(calls, (size_t)idx);
            assert_non_null(call);
            assert_null(jget(t, "function.name"));
            char *joined = NULL;
            assert_true(asprintf(&joined, "%s%s", jstr(call, "arguments"), jstr(t, "function.arguments")) > 0);
            json_object_set_new(call, "arguments", json_string(joined));
            free(joined);
        }
    }
}

/* Sets kvlm_bin; returns 0, or 1 after saying the binary is missing. */
TH_UNUSED static int th_server_main_init(const char *argv0, const char *test) {
    const char *env = getenv("KVLM");
    if (env && *env) snprintf(kvlm_bin, sizeof kvlm_bin, "%s", env);
    else if (strstr(argv0, "build-san/")) snprintf(kvlm_bin, sizeof kvlm_bin, "build-san/kvlm");
    if (access(kvlm_bin, X_OK)) {
        fprintf(stderr, "%s: %s is not built (make %s)\n", test, kvlm_bin, kvlm_bin);
        return 1;
    }
    setenv("KVLM", kvlm_bin, 1);
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

#endif
