/*
 * `kvlm serve` as one replica behind a load balancer (docs/deploy.md):
 * --replica-id names it in every response's X-Kvlm-Replica header and in
 * /metrics (kvlm_replica_info), defaulting to the host name and port; a
 * malformed id is a usage error; --agent-port answers HAProxy's agent
 * check with "down#loading" while the model loads (held open by the test
 * hook KVLM_TEST_LOAD_GATE), "ready up 100%" once idle and serving.
 */
#include "server_harness.h"

#include "server/server.h"

/* The agent port from the start-up line "agent check on ADDR:PORT". */
static int agent_port_of(const server *sv) {
    char *log = th_read_file(sv->log, NULL);
    const char *p = log ? strstr(log, "agent check on 127.0.0.1:") : NULL;
    const int port = p ? atoi(p + strlen("agent check on 127.0.0.1:")) : -1;
    free(log);
    return port;
}

/* The agent's whole answer (it closes after one line). */
static void agent_says(int port, const char *want) {
    int fd = connect_to(port);
    char buf[128];
    size_t n = 0;
    ssize_t r;
    while (n + 1 < sizeof buf && (r = read(fd, buf + n, sizeof buf - 1 - n)) > 0) n += (size_t)r;
    buf[n] = 0;
    close(fd);
    assert_string_equal(buf, want);
}

static void test_replica_id_and_agent(void **state) {
    (void)state;
    server sv;
    new_dir(&sv);
    char gate[600];
    snprintf(gate, sizeof gate, "%s/gate", sv.dir);
    start_gated(&sv, gate, "--synthetic gpt2-tiny --threads 1 --access-log off --replica-id eu-1.b:7 --agent-port 0");
    const int agent = agent_port_of(&sv);
    assert_true(agent > 0);
    agent_says(agent, "down#loading\n");
    resp r = http(sv.port, "GET", "/health", NULL);
    assert_int_equal(r.status, 503);
    assert_non_null(resp_header(&r, "X-Kvlm-Replica"));
    assert_string_equal(resp_header(&r, "X-Kvlm-Replica"), "eu-1.b:7");
    resp_free(&r);
    /* let it load */
    assert_int_equal(th_write_file(gate, "", 0), 0);
    for (int i = 0; i < 1000 * th_time_scale(); i++) {
        r = http(sv.port, "GET", "/health", NULL);
        const int st = r.status;
        resp_free(&r);
        if (st == 200) break;
        usleep(10000);
    }
    agent_says(agent, "ready up 100%\n");
    r = http(sv.port, "POST", "/v1/completions", "{\"prompt\":[1,2,3],\"max_tokens\":2}");
    assert_int_equal(r.status, 200);
    assert_string_equal(resp_header(&r, "X-Kvlm-Replica"), "eu-1.b:7");
    resp_free(&r);
    /* a streamed response carries it too */
    r = http(sv.port, "POST", "/v1/completions", "{\"prompt\":[1,2,3],\"max_tokens\":2,\"stream\":true}");
    assert_int_equal(r.status, 200);
    assert_string_equal(resp_header(&r, "X-Kvlm-Replica"), "eu-1.b:7");
    resp_free(&r);
    r = http(sv.port, "GET", "/metrics", NULL);
    assert_non_null(strstr(r.body, "\nkvlm_replica_info{replica=\"eu-1.b:7\"} 1\n"));
    resp_free(&r);
    assert_int_equal(stop_server(&sv), 0);
    th_rmtree(sv.dir);
}

/* Without --replica-id: host name:port; without --agent-port: no agent. */
static void test_default_replica_id(void **state) {
    (void)state;
    server sv;
    new_dir(&sv);
    if (start_server(&sv, "--synthetic gpt2-tiny --threads 1 --access-log off"))
        fail_msg("kvlm serve did not start");
    assert_int_equal(agent_port_of(&sv), -1);
    char host[256] = "", want[320];
    assert_int_equal(gethostname(host, sizeof host), 0);
    for (char *p = host; *p; p++)
        if (!strchr(REPLICA_CHARS, *p)) *p = '-';
    snprintf(want, sizeof want, "%.48s:%d", host, sv.port);
    resp r = http(sv.port, "GET", "/health", NULL);
    assert_string_equal(resp_header(&r, "X-Kvlm-Replica"), want);
    resp_free(&r);
    assert_int_equal(stop_server(&sv), 0);
    th_rmtree(sv.dir);
}

static void test_bad_flags(void **state) {
    (void)state;
    const th_cli_case cases[] = {
        {"serve --synthetic gpt2-tiny --replica-id 'a b'", 2, "--replica-id 'a b': give 1 to 63 letters"},
        {"serve --synthetic gpt2-tiny --replica-id 'x\"y'", 2, "--replica-id 'x\"y'"},
        {"serve --synthetic gpt2-tiny --replica-id ''", 2, "--replica-id '': give 1 to 63"},
        {"serve --synthetic gpt2-tiny --replica-id "
         "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
         2, "give 1 to 63 letters"},
        {"serve --synthetic gpt2-tiny --agent-port 70000", 2, "--agent-port"},
        {"serve --synthetic gpt2-tiny --agent-port -1", 2, "--agent-port"},
    };
    th_expect_cli(cases, sizeof cases / sizeof cases[0]);
}

int main(int argc, char **argv) {
    (void)argc;
    if (th_server_main_init(argv[0], "test_server_replica")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replica_id_and_agent),
        cmocka_unit_test(test_default_replica_id),
        cmocka_unit_test(test_bad_flags),
    };
    return cmocka_run_group_tests_name("server replica", tests, NULL, NULL) || dirty_exit;
}
