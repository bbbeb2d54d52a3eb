/*
 * `kvlm serve` from a load balancer's and an operator's side: the port
 * opens before the model loads and /health says "loading" (503) until it
 * has, then "ok" (200); meanwhile every model endpoint answers 503 in
 * OpenAI's error shape with Retry-After, /metrics answers (kvlm_loading,
 * kvlm_ready), and the API key and CORS apply as usual. SIGTERM while
 * loading exits 0; a model that does not load exits 1 with the reason; a
 * port in use exits 1 before any load. IPv6: --host ::1 and --host ::
 * (which takes IPv4 clients too), skipped with a reason on a machine with
 * no IPv6 loopback.
 *
 * The loading window is held open by the test hook KVLM_TEST_LOAD_GATE
 * (kvlm serve waits for that file to exist before it loads), so every
 * check runs while the server is certainly loading, with no timing.
 */
#include "server_harness.h"

#include <netdb.h>

#define ORIGIN "http://app.example"
#define KEY "Authorization: Bearer k-789\r\n"

/* A request with extra header lines (each ending in \r\n), sent to
 * addr:port (IPv4 or IPv6, numeric) on a new connection. */
static resp req_at(const char *addr, int port, const char *method, const char *path, const char *headers,
                   const char *body) {
    char buf[2048], service[16];
    snprintf(buf, sizeof buf, "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%sContent-Length: %zu\r\n\r\n%s",
             method, path, headers ? headers : "", body ? strlen(body) : 0, body ? body : "");
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST}, *ai = NULL;
    if (getaddrinfo(addr, service, &hints, &ai)) fail_msg("%s is not a numeric address", addr);
    int fd = socket(ai->ai_family, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen)) fail_msg("connect %s: %s", addr, strerror(errno));
    freeaddrinfo(ai);
    if (write(fd, buf, strlen(buf)) != (ssize_t)strlen(buf)) fail_msg("write failed");
    return read_response(fd, buf);
}

static resp req(int port, const char *method, const char *path, const char *headers, const char *body) {
    return req_at("127.0.0.1", port, method, path, headers, body);
}

/* 503 "model_loading" in OpenAI's error shape, with Retry-After: 1. */
static void expect_loading(int port, const char *method, const char *path, const char *body) {
    resp r = req(port, method, path, KEY "Origin: " ORIGIN "\r\n", body);
    if (r.status != 503) fail_msg("%s %s while loading: %d %s", method, path, r.status, r.body);
    assert_string_equal(resp_header(&r, "Retry-After"), "1");
    assert_string_equal(resp_header(&r, "Access-Control-Allow-Origin"), ORIGIN);
    json_t *j = json_loads(r.body, 0, NULL);
    assert_non_null(j);
    assert_string_equal(jstr(j, "error.code"), "model_loading");
    assert_string_equal(jstr(j, "error.type"), "server_error");
    assert_true(json_is_null(jget(j, "error.param")));
    assert_string_equal(jstr(j, "error.message"), "the model is still loading; retry shortly");
    json_decref(j);
    resp_free(&r);
}

static void expect_health(int port, int status, const char *body) {
    resp r = req(port, "GET", "/health", NULL, NULL);
    assert_int_equal(r.status, status);
    assert_string_equal(r.body, body);
    resp_free(&r);
}

/* Waits (bounded) for the process to exit; returns its exit status. */
static int wait_exit(server *sv) {
    int st = 0, rc = -1;
    for (int i = 0; i < 6000 * th_time_scale() && rc < 0; i++) {
        if (waitpid(sv->pid, &st, WNOHANG) == sv->pid) rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128;
        else usleep(10000);
    }
    if (rc < 0) stop_server(sv);
    sv->pid = 0;
    return rc;
}

static char *read_log(const server *sv, const char *name) {
    char path[700];
    snprintf(path, sizeof path, "%s/%s", sv->dir, name);
    char *log = th_read_file(path, NULL);
    assert_non_null(log);
    return log;
}

static void test_loading_then_ready(void **state) {
    (void)state;
    server sv;
    new_dir(&sv);
    char gate[600], args[256];
    snprintf(gate, sizeof gate, "%s/gate", sv.dir);
    snprintf(args, sizeof args, "--synthetic gpt2-tiny --threads 1 --api-key k-789 --cors-origin %s --access-log off",
             ORIGIN);
    start_gated(&sv, gate, args);
    /* loading */
    expect_health(sv.port, 503, "{\"status\":\"loading\"}");
    resp r = req(sv.port, "HEAD", "/health", NULL, NULL);
    assert_int_equal(r.status, 503);
    assert_int_equal(r.len, 0);
    resp_free(&r);
    /* ignore_eos: sampled at temperature 1, a random 200-token model ends early now and then */
    const char *body = "{\"prompt\":[1,2,3],\"max_tokens\":4,\"ignore_eos\":true}";
    expect_loading(sv.port, "POST", "/v1/completions", body);
    expect_loading(sv.port, "POST", "/v1/chat/completions", "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}");
    expect_loading(sv.port, "GET", "/v1/models", NULL);
    expect_loading(sv.port, "GET", "/v1/models/gpt2-tiny", NULL);
    expect_loading(sv.port, "POST", "/tokenize", "{\"prompt\":\"x\"}");
    expect_loading(sv.port, "POST", "/detokenize", "{\"tokens\":[1]}");
    r = req(sv.port, "POST", "/v1/completions", NULL, body); /* the key is checked first */
    assert_int_equal(r.status, 401);
    resp_free(&r);
    r = req(sv.port, "GET", "/no-such-path", KEY, NULL);
    assert_int_equal(r.status, 404);
    resp_free(&r);
    assert_true(metric(sv.port, "kvlm_loading") == 1);
    assert_true(metric(sv.port, "kvlm_ready") == 0);
    assert_true(metric(sv.port, "kvlm_kv_blocks_total") == 0);
    /* let it load: /health turns from 503 "loading" to 200 "ok", nothing else */
    FILE *f = fopen(gate, "w");
    assert_non_null(f);
    fclose(f);
    int status = 503;
    for (int i = 0; i < 3000 * th_time_scale() && status == 503; i++) {
        r = req(sv.port, "GET", "/health", NULL, NULL);
        status = r.status;
        if (status == 503) assert_string_equal(r.body, "{\"status\":\"loading\"}");
        else assert_string_equal(r.body, "{\"status\":\"ok\"}");
        resp_free(&r);
        if (status == 503) usleep(10000);
    }
    assert_int_equal(status, 200);
    assert_true(metric(sv.port, "kvlm_loading") == 0);
    assert_true(metric(sv.port, "kvlm_ready") == 1);
    assert_true(metric(sv.port, "kvlm_kv_blocks_total") == 32);
    r = req(sv.port, "POST", "/v1/completions", KEY, body);
    assert_int_equal(r.status, 200);
    json_t *j = json_loads(r.body, 0, NULL);
    assert_int_equal(jint(j, "usage.completion_tokens"), 4);
    json_decref(j);
    resp_free(&r);
    char *log = read_log(&sv, "serve.log");
    assert_non_null(strstr(log, "kvlm serve: ready (the model loaded in "));
    free(log);
    assert_int_equal(stop_server(&sv), 0);
    th_rmtree(sv.dir);
}

/* SIGTERM while loading: the port closes and the process exits 0. */
static void test_term_while_loading(void **state) {
    (void)state;
    server sv;
    new_dir(&sv);
    char gate[600];
    snprintf(gate, sizeof gate, "%s/never", sv.dir);
    start_gated(&sv, gate, "--synthetic gpt2-tiny --threads 1");
    expect_health(sv.port, 503, "{\"status\":\"loading\"}");
    assert_int_equal(kill(sv.pid, SIGTERM), 0);
    assert_int_equal(wait_exit(&sv), 0);
    char *log = read_log(&sv, "serve.log");
    assert_non_null(strstr(log, "kvlm serve: terminated while loading the model, exiting"));
    assert_null(strstr(log, "Sanitizer"));
    free(log);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)sv.port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), -1);
    assert_int_equal(errno, ECONNREFUSED);
    close(fd);
    th_rmtree(sv.dir);
}

/* A model that does not load: the port was open (the start-up line came
 * first), the loader's reason is printed, exit status 1. */
static void test_load_failure(void **state) {
    (void)state;
    server sv;
    new_dir(&sv);
    char cmd[2000];
    snprintf(cmd, sizeof cmd, "timeout 120 %s serve -m %s/no-such-model --port 0 2>%s/fail.log", kvlm_bin, sv.dir,
             sv.dir);
    int st = system(cmd);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 1);
    char *log = read_log(&sv, "fail.log");
    const char *listen = strstr(log, "kvlm serve: listening on http://127.0.0.1:");
    const char *reason = strstr(log, "no-such-model");
    const char *end = strstr(log, "kvlm serve: the model did not load, exiting");
    if (!listen || !reason || !end || !(listen < reason && reason < end)) fail_msg("log: %s", log);
    free(log);
    th_rmtree(sv.dir);
}

/* A port in use: exit 1 with the reason before loading anything (the
 * gate is never opened, so a server that loaded first would hang until
 * `timeout` ends it with 124). */
static void test_port_in_use(void **state) {
    (void)state;
    server sv;
    new_dir(&sv);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, 4), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    const int port = ntohs(a.sin_port);
    char cmd[2000];
    snprintf(cmd, sizeof cmd,
             "KVLM_TEST_LOAD_GATE=%s/never timeout 120 %s serve --synthetic gpt2-tiny --port %d 2>%s/busy.log",
             sv.dir, kvlm_bin, port, sv.dir);
    int st = system(cmd);
    close(fd);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 1);
    char *log = read_log(&sv, "busy.log");
    char want[160];
    snprintf(want, sizeof want,
             "kvlm serve: cannot listen on 127.0.0.1 (127.0.0.1) port %d (in use, or not an address of this host)\n",
             port);
    if (strcmp(log, want)) fail_msg("log: %s", log);
    free(log);
    th_rmtree(sv.dir);
}

/* 1 when the loopback interface has ::1 (/proc/net/if_inet6). */
static int has_ipv6_loopback(void) {
    FILE *f = fopen("/proc/net/if_inet6", "r");
    char line[256];
    int yes = 0;
    while (f && !yes && fgets(line, sizeof line, f)) yes = !strncmp(line, "00000000000000000000000000000001 ", 33);
    if (f) fclose(f);
    return yes;
}

static void test_ipv6(void **state) {
    (void)state;
    if (!has_ipv6_loopback()) {
        printf("test_ipv6: skipped: this machine has no IPv6 loopback (no ::1 in /proc/net/if_inet6)\n");
        skip();
    }
    server sv;
    new_dir(&sv);
    if (start_server(&sv, "--synthetic gpt2-tiny --threads 1 --host ::1 --access-log off"))
        fail_msg("kvlm serve --host ::1 did not start");
    assert_string_equal(sv.addr, "::1");
    resp r = req_at("::1", sv.port, "GET", "/health", NULL, NULL);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.body, "{\"status\":\"ok\"}");
    resp_free(&r);
    assert_int_equal(stop_server(&sv), 0);
    /* "::" takes IPv6 and IPv4 clients */
    if (start_server(&sv, "--synthetic gpt2-tiny --threads 1 --host :: --access-log off"))
        fail_msg("kvlm serve --host :: did not start");
    assert_string_equal(sv.addr, "::");
    r = req_at("::1", sv.port, "GET", "/health", NULL, NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    r = req_at("127.0.0.1", sv.port, "POST", "/v1/completions", NULL, "{\"prompt\":[1,2,3],\"max_tokens\":3}");
    assert_int_equal(r.status, 200);
    resp_free(&r);
    assert_int_equal(stop_server(&sv), 0);
    th_rmtree(sv.dir);
}

int main(int argc, char **argv) {
    (void)argc;
    if (th_server_main_init(argv[0], "test_server_ops")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_loading_then_ready), cmocka_unit_test(test_term_while_loading),
        cmocka_unit_test(test_load_failure),       cmocka_unit_test(test_port_in_use),
        cmocka_unit_test(test_ipv6),
    };
    return cmocka_run_group_tests_name("server operations", tests, NULL, NULL) || dirty_exit;
}
