/*
 * The agent-check responder (src/server/agent_check.c): the line for each
 * load (loading, draining, the weight: 100% while half the KV pool and
 * queue are free, below twice the smaller free share in steps of 10%, 0%
 * with a full queue), and the responder itself on a real
 * socket: each connection gets the line for the load at that moment, and
 * after agent_check_stop the port is closed.
 */
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "server/agent_check.h"

static const char *line_of(agent_load l) {
    static char buf[AGENT_LINE_MAX];
    int n = agent_line(&l, buf, sizeof buf);
    assert_int_equal(n, (int)strlen(buf));
    return buf;
}

static void test_lines(void **state) {
    (void)state;
    assert_string_equal(line_of((agent_load){.loading = 1, .kv_total = 100}), "down#loading\n");
    /* loading wins over draining: SIGTERM while loading */
    assert_string_equal(line_of((agent_load){.loading = 1, .draining = 1}), "down#loading\n");
    assert_string_equal(line_of((agent_load){.draining = 1, .kv_total = 100, .max_waiting = 64}), "drain\n");
    /* idle */
    assert_string_equal(line_of((agent_load){.kv_total = 128, .max_waiting = 64}), "ready up 100%\n");
    /* half the pool free or more: full weight */
    assert_string_equal(line_of((agent_load){.kv_total = 100, .kv_used = 50, .max_waiting = 64}), "ready up 100%\n");
    /* 63 of 100 blocks held: 37% free, twice that rounded up to 80% */
    assert_string_equal(line_of((agent_load){.kv_total = 100, .kv_used = 63, .max_waiting = 64}), "ready up 80%\n");
    /* exactly on a step stays there: 30% free */
    assert_string_equal(line_of((agent_load){.kv_total = 100, .kv_used = 70, .max_waiting = 64}), "ready up 60%\n");
    /* the queue is the scarcer: 56 of 64 waiting, 12.5% free */
    assert_string_equal(line_of((agent_load){.kv_total = 100, .kv_used = 10, .waiting = 56, .max_waiting = 64}),
                        "ready up 30%\n");
    /* a full pool with room in the queue keeps a floor of 10% */
    assert_string_equal(line_of((agent_load){.kv_total = 100, .kv_used = 100, .waiting = 1, .max_waiting = 64}),
                        "ready up 10%\n");
    /* a full queue: out of the farm, still up and ready */
    assert_string_equal(line_of((agent_load){.kv_total = 100, .kv_used = 5, .waiting = 64, .max_waiting = 64}),
                        "ready up 0%\n");
    assert_string_equal(line_of((agent_load){.kv_total = 100, .waiting = 70, .max_waiting = 64}), "ready up 0%\n");
    /* nothing published yet (pool of 0 blocks): fully free */
    assert_string_equal(line_of((agent_load){.max_waiting = 64}), "ready up 100%\n");
}

static void test_line_truncated(void **state) {
    (void)state;
    char buf[8];
    agent_load l = {.kv_total = 10, .max_waiting = 4};
    assert_int_equal(agent_line(&l, buf, sizeof buf), 7);
    assert_string_equal(buf, "ready u");
}

static agent_load fake;

static void fake_load(void *ctx, agent_load *out) {
    (*(int *)ctx)++;
    *out = fake;
}

/* Connects to the port and reads until the peer closes. */
static int ask(int port, char *buf, size_t cap) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) {
        const int e = errno;
        close(fd);
        return -e;
    }
    size_t n = 0;
    ssize_t r;
    while (n + 1 < cap && (r = read(fd, buf + n, cap - 1 - n)) > 0) n += (size_t)r;
    buf[n] = 0;
    close(fd);
    return (int)n;
}

static void test_responder(void **state) {
    (void)state;
    kvlm_error err;
    int calls = 0;
    fake = (agent_load){.kv_total = 64, .kv_used = 48, .max_waiting = 8, .waiting = 1};
    agent_check *a = agent_check_start("127.0.0.1", 0, fake_load, &calls, &err);
    assert_non_null(a);
    const int port = agent_check_port(a);
    assert_true(port > 0);
    char buf[128];
    /* 25% of the pool and 87.5% of the queue free: 50% */
    assert_int_equal(ask(port, buf, sizeof buf), 13);
    assert_string_equal(buf, "ready up 50%\n");
    fake.draining = 1;
    assert_int_equal(ask(port, buf, sizeof buf), 6);
    assert_string_equal(buf, "drain\n");
    assert_int_equal(calls, 2);
    agent_check_stop(a);
    assert_int_equal(ask(port, buf, sizeof buf), -ECONNREFUSED);
    agent_check_stop(NULL);
}

static void test_bad_address(void **state) {
    (void)state;
    kvlm_error err;
    int calls = 0;
    assert_null(agent_check_start("not-an-address", 0, fake_load, &calls, &err));
    assert_non_null(strstr(err.msg, "--agent-port: 'not-an-address' is not a numeric address"));
    /* a port already taken */
    agent_check *a = agent_check_start("127.0.0.1", 0, fake_load, &calls, &err);
    assert_non_null(a);
    assert_null(agent_check_start("127.0.0.1", agent_check_port(a), fake_load, &calls, &err));
    assert_non_null(strstr(err.msg, "--agent-port: cannot listen on 127.0.0.1 port"));
    agent_check_stop(a);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lines),
        cmocka_unit_test(test_line_truncated),
        cmocka_unit_test(test_responder),
        cmocka_unit_test(test_bad_address),
    };
    return cmocka_run_group_tests_name("agent check", tests, NULL, NULL);
}
