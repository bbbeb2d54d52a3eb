/*
 * `kvlm serve` for clients beyond this machine: the API key (401 in
 * OpenAI's error shape without it or with a wrong one, in Anthropic's on
 * /v1/messages, 200 with it, as a bearer token or as x-api-key;
 * /health and /metrics open unless protected; key from --api-key-file and
 * from $KVLM_API_KEY), CORS (preflight, the header on answers, errors and
 * event streams; other origins get none), HEAD, host names for --host,
 * the access log (text and JSON lines with exact fields, no request text,
 * reopened on SIGHUP) and the SIGTERM drain (a stream in flight completes,
 * /health says "draining", new connections are refused, exit 0; past
 * --drain-timeout the stream is ended, exit 0 still).
 * Synthetic models: gpt2-tiny, and gpt2-124m where a stream must still be
 * running when the signal comes.
 */
#include "server_harness.h"

#include <poll.h>

#define ORIGIN "http://app.example"

static server a, b; /* a: key file, CORS, text log, --host localhost; b: env key, protected, JSON log */

/* Sends `req` verbatim on a new connection and reads the whole answer. */
static resp raw(int port, const char *req) {
    int fd = connect_to(port);
    if (write(fd, req, strlen(req)) != (ssize_t)strlen(req)) FAIL("write failed");
    return read_response(fd, req);
}

/* A request with extra header lines (each ending in \r\n) and a body. */
static resp req(int port, const char *method, const char *path, const char *headers, const char *body) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%sContent-Length: %zu\r\n\r\n%s",
             method, path, headers ? headers : "", body ? strlen(body) : 0, body ? body : "");
    return raw(port, buf);
}

static void expect_401(const resp *r, const char *what) {
    if (r->status != 401) fail_msg("%s: status %d: %s", what, r->status, r->body);
    assert_string_equal(resp_header(r, "WWW-Authenticate"), "Bearer");
    json_t *j = json_loads(r->body, 0, NULL);
    assert_non_null(j);
    assert_string_equal(jstr(j, "error.code"), "invalid_api_key");
    assert_string_equal(jstr(j, "error.type"), "invalid_request_error");
    assert_true(strlen(jstr(j, "error.message")) > 0);
    json_decref(j);
}

static int setup(void **state) {
    (void)state;
    char *d = th_tempdir(), args[1400], path[700];
    if (!d) return -1;
    snprintf(a.dir, sizeof a.dir, "%s", d);
    free(d);
    snprintf(path, sizeof path, "%s/key", a.dir);
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs("filekey-123\n", f);
    fclose(f);
    snprintf(args, sizeof args,
             "--synthetic gpt2-tiny --threads 1 --host localhost --api-key-file %s --cors-origin " ORIGIN
             " --access-log %s/access.log",
             path, a.dir);
    if (start_server(&a, args)) return -1;
    d = th_tempdir();
    if (!d) return -1;
    snprintf(b.dir, sizeof b.dir, "%s", d);
    free(d);
    setenv("KVLM_API_KEY", "envkey-456", 1);
    snprintf(args, sizeof args,
             "--synthetic gpt2-tiny --threads 1 --protect-metrics --protect-health --log-format json "
             "--access-log %s/access.log",
             b.dir);
    int rc = start_server(&b, args);
    unsetenv("KVLM_API_KEY");
    return rc;
}

static int teardown(void **state) {
    (void)state;
    int rc = stop_server(&a) | stop_server(&b);
    th_rmtree(a.dir);
    th_rmtree(b.dir);
    return rc;
}

#define KEY_A "Authorization: Bearer filekey-123\r\n"
#define KEY_B "Authorization: Bearer envkey-456\r\n"
/* ignore_eos: sampled with no seed, the tiny model may draw its end-of-text
 * token before the fourth, and the counts below are exact */
#define BODY "{\"prompt\":[1,2,3],\"max_tokens\":4,\"ignore_eos\":true,\"user\":\"MARKER-7f3a\"}"

static void test_api_key(void **state) {
    (void)state;
    resp r = req(a.port, "GET", "/v1/models", NULL, NULL);
    expect_401(&r, "no key");
    resp_free(&r);
    r = req(a.port, "GET", "/v1/models", "Authorization: Bearer filekey-12\r\n", NULL);
    expect_401(&r, "a key one byte short");
    resp_free(&r);
    r = req(a.port, "POST", "/v1/completions", "Authorization: Bearer nope\r\n", BODY);
    expect_401(&r, "a wrong key");
    resp_free(&r);
    r = req(a.port, "POST", "/tokenize", NULL, "{\"prompt\":\"x\"}");
    expect_401(&r, "/tokenize without a key");
    resp_free(&r);
    r = req(a.port, "GET", "/v1/models", KEY_A, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    r = req(a.port, "POST", "/v1/completions", "authorization: bearer filekey-123\r\n", BODY);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    /* x-api-key, the header Anthropic's clients send, on any path */
    r = req(a.port, "GET", "/v1/models", "x-api-key: filekey-123\r\n", NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    r = req(a.port, "GET", "/v1/models", "x-api-key: filekey-12\r\n", NULL);
    expect_401(&r, "an x-api-key one byte short");
    resp_free(&r);
    /* on Anthropic's paths the 401 is in Anthropic's shape */
    r = req(a.port, "POST", "/v1/messages", "x-api-key: nope\r\n", "{}");
    assert_int_equal(r.status, 401);
    assert_string_equal(r.body, "{\"type\":\"error\",\"error\":{\"type\":\"authentication_error\",\"message\":"
                                "\"Incorrect API key provided\"}}");
    resp_free(&r);
    /* open by default */
    r = req(a.port, "GET", "/health", NULL, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    r = req(a.port, "GET", "/metrics", NULL, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    /* b: the key from the environment; /health and /metrics protected */
    r = req(b.port, "GET", "/metrics", NULL, NULL);
    expect_401(&r, "protected /metrics");
    resp_free(&r);
    r = req(b.port, "GET", "/health", NULL, NULL);
    expect_401(&r, "protected /health");
    resp_free(&r);
    r = req(b.port, "GET", "/metrics", KEY_B, NULL);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "kvlm_http_responses_total{code=\"401\"} 2"));
    resp_free(&r);
    r = req(b.port, "GET", "/health", KEY_B, NULL);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "{\"status\":\"ok\"}");
    resp_free(&r);
}

static void test_cors(void **state) {
    (void)state;
    resp r = req(a.port, "OPTIONS", "/v1/chat/completions",
                 "Origin: " ORIGIN "\r\nAccess-Control-Request-Method: POST\r\n"
                 "Access-Control-Request-Headers: authorization, content-type\r\n",
                 NULL);
    assert_int_equal(r.status, 204);
    assert_string_equal(resp_header(&r, "Access-Control-Allow-Origin"), ORIGIN);
    assert_string_equal(resp_header(&r, "Access-Control-Allow-Methods"), "GET, HEAD, POST, OPTIONS");
    assert_string_equal(resp_header(&r, "Access-Control-Allow-Headers"),
                        "Authorization, Content-Type, x-api-key, anthropic-version, anthropic-beta");
    assert_int_equal(r.len, 0);
    resp_free(&r);
    const char *cases[][4] = {
        /* method, path, body, status */
        {"GET", "/health", NULL, "200"},
        {"GET", "/v1/models", NULL, "200"},
        {"GET", "/no/such/path", NULL, "404"},
        {"POST", "/v1/completions", "{\"prompt\":[1], \"max_tokens\":0}", "400"},
        {"POST", "/v1/completions", BODY, "200"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        r = req(a.port, cases[i][0], cases[i][1], "Origin: " ORIGIN "\r\n" KEY_A, cases[i][2]);
        if (r.status != atoi(cases[i][3])) fail_msg("%s %s: %d: %s", cases[i][0], cases[i][1], r.status, r.body);
        const char *h = resp_header(&r, "Access-Control-Allow-Origin");
        if (!h || strcmp(h, ORIGIN)) fail_msg("%s %s: no CORS header in %s", cases[i][0], cases[i][1], r.head);
        resp_free(&r);
    }
    /* a 401 carries it too, so a page can read why */
    r = req(a.port, "GET", "/v1/models", "Origin: " ORIGIN "\r\n", NULL);
    assert_int_equal(r.status, 401);
    assert_string_equal(resp_header(&r, "Access-Control-Allow-Origin"), ORIGIN);
    resp_free(&r);
    /* an event stream */
    r = req(a.port, "POST", "/v1/completions", "Origin: " ORIGIN "\r\n" KEY_A,
            "{\"prompt\":[1,2,3],\"max_tokens\":4,\"ignore_eos\":true,\"stream\":true}");
    assert_int_equal(r.status, 200);
    assert_string_equal(resp_header(&r, "Content-Type"), "text/event-stream");
    assert_string_equal(resp_header(&r, "Access-Control-Allow-Origin"), ORIGIN);
    json_t *ev = sse_events(r.body);
    assert_int_equal(json_array_size(ev), 5); /* 4 tokens, then finish_reason */
    json_decref(ev);
    resp_free(&r);
    /* another origin, or none: no header */
    r = req(a.port, "GET", "/health", "Origin: http://evil.example\r\n", NULL);
    assert_int_equal(r.status, 200);
    assert_null(resp_header(&r, "Access-Control-Allow-Origin"));
    resp_free(&r);
    r = req(b.port, "GET", "/health", "Origin: " ORIGIN "\r\n" KEY_B, NULL);
    assert_null(resp_header(&r, "Access-Control-Allow-Origin"));
    resp_free(&r);
}

static void test_head(void **state) {
    (void)state;
    resp r = req(a.port, "HEAD", "/health", NULL, NULL);
    assert_int_equal(r.status, 200);
    assert_string_equal(resp_header(&r, "Content-Length"), "15");
    assert_int_equal(r.len, 0);
    resp_free(&r);
    r = req(a.port, "HEAD", "/v1/models", KEY_A, NULL);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.len, 0);
    resp_free(&r);
    r = req(a.port, "HEAD", "/v1/completions", KEY_A, NULL);
    assert_int_equal(r.status, 405);
    assert_string_equal(resp_header(&r, "Allow"), "POST");
    resp_free(&r);
    r = req(a.port, "POST", "/health", NULL, NULL);
    assert_int_equal(r.status, 405);
    assert_string_equal(resp_header(&r, "Allow"), "GET, HEAD");
    resp_free(&r);
}

/* `a` was started with --host localhost: it listens on 127.0.0.1 (the
 * harness found that address in its start-up line). A name that does not
 * resolve is refused, named. */
static void test_host_names(void **state) {
    (void)state;
    assert_string_equal(a.addr, "127.0.0.1");
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "%s serve --synthetic gpt2-tiny --port 0 --host no-such-host.invalid 2>%s/bad.log",
             kvlm_bin, a.dir);
    int st = system(cmd);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 2);
    snprintf(cmd, sizeof cmd, "%s/bad.log", a.dir);
    char *log = th_read_file(cmd, NULL);
    assert_non_null(log);
    if (!strstr(log, "--host: cannot resolve 'no-such-host.invalid'")) fail_msg("message: %s", log);
    free(log);
}

/* The log lines for POST /v1/completions with BODY: exact fields. */
static void test_access_log(void **state) {
    (void)state;
    resp r = req(a.port, "POST", "/v1/completions", KEY_A, BODY);
    assert_int_equal(r.status, 200);
    const size_t bytes_a = r.len;
    resp_free(&r);
    r = req(b.port, "POST", "/v1/completions?x=1", KEY_B, BODY);
    assert_int_equal(r.status, 200);
    const size_t bytes_b = r.len;
    resp_free(&r);
    usleep(200000); /* the line is written when libmicrohttpd reports the request done */
    char path[700];
    snprintf(path, sizeof path, "%s/access.log", a.dir);
    char *log = th_read_file(path, NULL);
    assert_non_null(log);
    assert_null(strstr(log, "MARKER"));
    /* the last line */
    size_t n = strlen(log);
    while (n && log[n - 1] == '\n') log[--n] = 0;
    const char *last = strrchr(log, '\n') ? strrchr(log, '\n') + 1 : log;
    char when[64], client[64], method[16], pathbuf[64], ttft[32];
    int status, pt, ct;
    double total;
    unsigned long long bytes;
    int k = sscanf(last, "%63s %63s \"%15s %63[^\"]\" %d tokens=%d+%d ttft_ms=%31s total_ms=%lf bytes=%llu", when, client,
                   method, pathbuf, &status, &pt, &ct, ttft, &total, &bytes);
    if (k != 10) fail_msg("text line (%d fields): %s", k, last);
    assert_int_equal(strlen(when), 24);
    assert_int_equal(when[23], 'Z');
    assert_string_equal(client, "127.0.0.1");
    assert_string_equal(method, "POST");
    assert_string_equal(pathbuf, "/v1/completions");
    assert_int_equal(status, 200);
    assert_int_equal(pt, 3);
    assert_int_equal(ct, 4);
    assert_true(atof(ttft) >= 0 && atof(ttft) <= total);
    assert_int_equal(bytes, bytes_a);
    free(log);
    /* b: JSON, the query string left out */
    snprintf(path, sizeof path, "%s/access.log", b.dir);
    log = th_read_file(path, NULL);
    assert_non_null(log);
    assert_null(strstr(log, "MARKER"));
    n = strlen(log);
    while (n && log[n - 1] == '\n') log[--n] = 0;
    last = strrchr(log, '\n') ? strrchr(log, '\n') + 1 : log;
    json_t *j = json_loads(last, 0, NULL);
    if (!j) fail_msg("not JSON: %s", last);
    const char *keys[] = {"time", "client", "method", "path", "status", "prompt_tokens", "completion_tokens",
                          "ttft_ms", "total_ms", "bytes"};
    assert_int_equal(json_object_size(j), 10);
    for (int i = 0; i < 10; i++) assert_non_null(json_object_get(j, keys[i]));
    assert_string_equal(jstr(j, "client"), "127.0.0.1");
    assert_string_equal(jstr(j, "method"), "POST");
    assert_string_equal(jstr(j, "path"), "/v1/completions");
    assert_int_equal(jint(j, "status"), 200);
    assert_int_equal(jint(j, "prompt_tokens"), 3);
    assert_int_equal(jint(j, "completion_tokens"), 4);
    assert_int_equal(jint(j, "bytes"), (json_int_t)bytes_b);
    assert_true(json_real_value(json_object_get(j, "ttft_ms")) >= 0);
    json_decref(j);
    free(log);
    /* a request without tokens: nulls */
    r = req(b.port, "GET", "/health", KEY_B, NULL);
    resp_free(&r);
    usleep(200000);
    log = th_read_file(path, NULL);
    n = strlen(log);
    while (n && log[n - 1] == '\n') log[--n] = 0;
    last = strrchr(log, '\n') + 1;
    j = json_loads(last, 0, NULL);
    assert_non_null(j);
    assert_true(json_is_null(json_object_get(j, "prompt_tokens")));
    assert_true(json_is_null(json_object_get(j, "ttft_ms")));
    assert_int_equal(jint(j, "bytes"), 15);
    json_decref(j);
    free(log);
}

/* SIGHUP: after the file was moved away, lines go to a new file of the name. */
static void test_log_reopen(void **state) {
    (void)state;
    char path[700], moved[720];
    snprintf(path, sizeof path, "%s/access.log", a.dir);
    snprintf(moved, sizeof moved, "%s/access.log.1", a.dir);
    assert_int_equal(rename(path, moved), 0);
    kill(a.pid, SIGHUP);
    char *log = NULL;
    for (int i = 0; i < 500 && !log; i++) { /* the file appears when the signal was handled */
        log = th_read_file(path, NULL);
        if (!log) usleep(10000);
    }
    assert_non_null(log);
    free(log);
    resp r = req(a.port, "GET", "/v1/models/gpt2-tiny", KEY_A, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    usleep(200000);
    log = th_read_file(path, NULL);
    assert_non_null(strstr(log, "\"GET /v1/models/gpt2-tiny\" 200"));
    free(log);
    log = th_read_file(moved, NULL);
    assert_null(strstr(log, "/v1/models/gpt2-tiny"));
    free(log);
}

/* Waits up to 300 s for the drained server to exit by itself, asserts
 * status 0, and returns its log (the caller frees it). */
static char *exit_status_zero_log(server *sv) {
    int st = -1, rc = -1;
    for (int i = 0; i < 30000 && rc < 0; i++) {
        if (waitpid(sv->pid, &st, WNOHANG) == sv->pid) rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
        else usleep(10000);
    }
    if (rc < 0) stop_server(sv);
    else sv->pid = 0;
    assert_int_equal(rc, 0);
    char path[700];
    snprintf(path, sizeof path, "%s/serve.log", sv->dir);
    return th_read_file(path, NULL);
}

/* Reads from fd into buf (NUL-terminated, grows) until `want` appears or EOF. */
static int read_until(int fd, char **buf, size_t *n, size_t *cap, const char *want) {
    for (;;) {
        if (want && strstr(*buf, want)) return 1;
        if (*cap - *n < 4096) *buf = realloc(*buf, *cap *= 2);
        ssize_t r = read(fd, *buf + *n, *cap - *n - 1);
        if (r <= 0) return 0;
        *n += (size_t)r;
        (*buf)[*n] = 0;
    }
}

static void test_drain(void **state) {
    (void)state;
    server sv = {0};
    char *d = th_tempdir();
    assert_non_null(d);
    snprintf(sv.dir, sizeof sv.dir, "%s", d);
    free(d);
    if (start_server(&sv, "--synthetic gpt2-124m --threads 2 --max-batch-tokens 16 --drain-timeout 300"))
        fail_msg("kvlm serve did not start");
    /* a keep-alive connection, used before and after the signal */
    int ka = connect_to(sv.port);
    const char *hreq = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
    size_t cap = 1 << 14, n = 0;
    char *hb = calloc(1, cap);
    assert_int_equal(write(ka, hreq, strlen(hreq)), (ssize_t)strlen(hreq));
    assert_true(read_until(ka, &hb, &n, &cap, "{\"status\":\"ok\"}"));
    /* a stream of 64 tokens; the signal comes after its first event */
    int fd = connect_to(sv.port);
    const char *body = "{\"prompt\":[1,2,3],\"max_tokens\":64,\"ignore_eos\":true,\"stream\":true}";
    send_request(fd, "POST", "/v1/completions", body, strlen(body));
    size_t sn = 0, scap = 1 << 16;
    char *sb = calloc(1, scap);
    assert_true(read_until(fd, &sb, &sn, &scap, "data: {"));
    assert_int_equal(kill(sv.pid, SIGTERM), 0);
    /* /health on the open connection says draining (503) once the signal
     * was handled */
    int draining = 0;
    for (int i = 0; i < 1000 && !draining; i++) {
        n = 0;
        hb[0] = 0;
        assert_int_equal(write(ka, hreq, strlen(hreq)), (ssize_t)strlen(hreq));
        assert_true(read_until(ka, &hb, &n, &cap, "\"}"));
        draining = strstr(hb, "{\"status\":\"draining\"}") != NULL;
        if (draining) assert_non_null(strstr(hb, "HTTP/1.1 503"));
        else usleep(10000);
    }
    assert_true(draining);
    /* new connections are refused once the listening socket is closed */
    int refused = 0;
    for (int i = 0; i < 500 && !refused; i++) {
        int c = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in ad = {.sin_family = AF_INET, .sin_port = htons((uint16_t)sv.port)};
        ad.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        refused = connect(c, (struct sockaddr *)&ad, sizeof ad) != 0 && errno == ECONNREFUSED;
        close(c);
        if (!refused) usleep(10000);
    }
    assert_true(refused);
    /* the stream completes */
    read_until(fd, &sb, &sn, &scap, NULL);
    close(fd);
    close(ka);
    char *b0 = strstr(sb, "\r\n\r\n");
    assert_non_null(b0);
    dechunk(b0 + 4, strlen(b0 + 4));
    json_t *ev = sse_events(b0 + 4);
    size_t ne = json_array_size(ev);
    assert_true(ne >= 2);
    assert_string_equal(jstr(json_array_get(ev, ne - 1), "choices.0.finish_reason"), "length");
    int texts = 0;
    for (size_t i = 0; i + 1 < ne; i++) texts += json_string_length(jget(json_array_get(ev, i), "choices.0.text")) > 0;
    assert_int_equal(texts, 64); /* one event per token: each is a number and a space */
    json_decref(ev);
    free(sb);
    free(hb);
    /* and the process exits 0 by itself */
    char *log = exit_status_zero_log(&sv);
    assert_non_null(strstr(log, "terminated, draining"));
    assert_null(strstr(log, "are ended"));
    assert_null(strstr(log, "Sanitizer"));
    assert_null(strstr(log, "runtime error"));
    free(log);
    th_rmtree(sv.dir);
}

/* --drain-timeout 1 with a stream far from its end: the stream is ended
 * (an error event, then [DONE]) and the process still exits 0. */
static void test_drain_deadline(void **state) {
    (void)state;
    server sv = {0};
    char *d = th_tempdir();
    assert_non_null(d);
    snprintf(sv.dir, sizeof sv.dir, "%s", d);
    free(d);
    if (start_server(&sv, "--synthetic gpt2-124m --threads 2 --drain-timeout 1"))
        fail_msg("kvlm serve did not start");
    int fd = connect_to(sv.port);
    const char *body = "{\"prompt\":[1,2,3],\"max_tokens\":1000,\"ignore_eos\":true,\"stream\":true}";
    send_request(fd, "POST", "/v1/completions", body, strlen(body));
    size_t sn = 0, scap = 1 << 16;
    char *sb = calloc(1, scap);
    assert_true(read_until(fd, &sb, &sn, &scap, "data: {"));
    assert_int_equal(kill(sv.pid, SIGTERM), 0);
    read_until(fd, &sb, &sn, &scap, NULL);
    close(fd);
    char *b0 = strstr(sb, "\r\n\r\n");
    assert_non_null(b0);
    dechunk(b0 + 4, strlen(b0 + 4));
    json_t *ev = sse_events(b0 + 4);
    size_t ne = json_array_size(ev);
    assert_true(ne >= 2 && ne < 1000);
    assert_string_equal(jstr(json_array_get(ev, ne - 1), "error.code"), "shutting_down");
    json_decref(ev);
    free(sb);
    char *log = exit_status_zero_log(&sv);
    assert_non_null(strstr(log, "requests still running after 1s are ended"));
    assert_null(strstr(log, "Sanitizer"));
    assert_null(strstr(log, "runtime error"));
    free(log);
    th_rmtree(sv.dir);
}

int main(int argc, char **argv) {
    (void)argc;
    if (th_server_main_init(argv[0], "test_server_security")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_api_key),
        cmocka_unit_test(test_cors),
        cmocka_unit_test(test_head),
        cmocka_unit_test(test_host_names),
        cmocka_unit_test(test_access_log),
        cmocka_unit_test(test_log_reopen),
    };
    const struct CMUnitTest drain[] = {cmocka_unit_test(test_drain), cmocka_unit_test(test_drain_deadline)};
    int rc = cmocka_run_group_tests_name("server security", tests, setup, teardown);
    rc |= cmocka_run_group_tests_name("server drain", drain, NULL, NULL);
    return rc || dirty_exit;
}
