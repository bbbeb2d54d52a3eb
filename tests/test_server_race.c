/*
 * `kvlm serve` under concurrent mixed load, the test ThreadSanitizer runs
 * in CI (make test-tsan-ci; docs/server.md, "Races"): 6 client threads
 * send 10 requests each, all at once, to a server with 2 engine threads
 * (so every step uses the thread pool), 4 running sequences and 4
 * waiting (so some requests get 429): non-streaming n = 2 with logprobs,
 * streams read to the end, streams dropped after their first event, and
 * requests whose client leaves before the answer, interleaved with
 * /metrics, /health and /tokenize, while another thread sends SIGHUP
 * (access log reopened) every 20 ms. This touches every place two threads
 * meet: the inbox, cancels, suspend and resume, the outbox, the metrics,
 * the access log, the thread pool's barriers.
 *
 * Exact checks: each answer is 200 or 429 (/tokenize 400: the synthetic
 * model has no tokenizer), a 200 carries exactly the tokens asked for and
 * a stream read to the end has them all and [DONE]; afterwards nothing is
 * running or waiting and no KV block is held; the server exits 0 with no
 * sanitizer report (tests/run_tsan.sh also fails on any report file).
 */
#include "server_harness.h"

#define WORKERS 6
#define ROUNDS 10

static server sv;
static volatile int hup_stop;

/* Reads fd until `want` appears (1) or EOF (0); the bytes stay in buf. */
static int read_until(int fd, char *buf, size_t cap, size_t *n, const char *want) {
    for (;;) {
        buf[*n] = 0;
        if (want && strstr(buf, want)) return 1;
        if (*n + 1 >= cap) return 0;
        ssize_t r = read(fd, buf + *n, cap - *n - 1);
        if (r <= 0) return 0;
        *n += (size_t)r;
    }
}

static int count(const char *hay, const char *needle) {
    int k = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle)) k++;
    return k;
}

static void one_request(int kind, int seed) {
    char body[256];
    switch (kind) {
    case 0: { /* non-streaming, n = 2, logprobs */
        snprintf(body, sizeof body,
                 "{\"prompt\":[1,2,3],\"max_tokens\":8,\"n\":2,\"logprobs\":2,\"temperature\":1,\"seed\":%d,"
                 "\"ignore_eos\":true}",
                 seed);
        resp r = http(sv.port, "POST", "/v1/completions", body);
        if (r.status == 200) {
            json_t *j = json_loads(r.body, 0, NULL);
            if (!j || jint(j, "usage.completion_tokens") != 16) FAIL("n=2 answer: %s", r.body);
            json_decref(j);
        } else if (r.status != 429) {
            FAIL("n=2: status %d: %s", r.status, r.body);
        }
        resp_free(&r);
        break;
    }
    case 1:   /* a stream read to its end */
    case 2: { /* a stream dropped after its first event */
        snprintf(body, sizeof body,
                 "{\"prompt\":[4,5,6],\"max_tokens\":%d,\"stream\":true,\"temperature\":1,\"seed\":%d,"
                 "\"ignore_eos\":true}",
                 kind == 1 ? 8 : 24, seed);
        int fd = connect_to(sv.port);
        send_request(fd, "POST", "/v1/completions", body, strlen(body));
        static __thread char buf[1 << 16];
        size_t n = 0;
        if (kind == 2) {
            read_until(fd, buf, sizeof buf, &n, "data: {");
            close(fd);
            if (strncmp(buf, "HTTP/1.1 200", 12) && strncmp(buf, "HTTP/1.1 429", 12)) FAIL("dropped stream: %.200s", buf);
            break;
        }
        read_until(fd, buf, sizeof buf, &n, NULL);
        close(fd);
        if (!strncmp(buf, "HTTP/1.1 429", 12)) break;
        char *events = strstr(buf, "\r\n\r\n");
        if (strncmp(buf, "HTTP/1.1 200", 12) || !events) FAIL("stream: %.300s", buf);
        dechunk(events + 4, strlen(events + 4));
        if (!strstr(events, "data: [DONE]") || count(events, "\"finish_reason\":null") != 8)
            FAIL("stream: %d token events: %.400s", count(events, "\"finish_reason\":null"), events);
        break;
    }
    case 3: { /* the client leaves before the answer */
        snprintf(body, sizeof body, "{\"prompt\":[7,8],\"max_tokens\":20,\"seed\":%d,\"ignore_eos\":true}", seed);
        int fd = connect_to(sv.port);
        send_request(fd, "POST", "/v1/completions", body, strlen(body));
        close(fd);
        break;
    }
    default: {
        resp r = http(sv.port, "GET", seed % 2 ? "/metrics" : "/health", NULL);
        if (r.status != 200) FAIL("GET: status %d", r.status);
        resp_free(&r);
        r = http(sv.port, "POST", "/tokenize", "{\"prompt\":\"x\"}");
        if (r.status != 400) FAIL("/tokenize: status %d: %s", r.status, r.body);
        resp_free(&r);
    }
    }
}

static void *worker(void *arg) {
    in_worker = 1;
    const int w = (int)(intptr_t)arg;
    for (int r = 0; r < ROUNDS; r++) one_request((w + r) % 5, 100 * w + r);
    return NULL;
}

static void *hupper(void *arg) {
    (void)arg;
    while (!__atomic_load_n(&hup_stop, __ATOMIC_RELAXED)) {
        kill(sv.pid, SIGHUP);
        usleep(20000);
    }
    return NULL;
}

static void test_mixed_load(void **state) {
    (void)state;
    pthread_t th[WORKERS], hup;
    pthread_create(&hup, NULL, hupper, NULL);
    for (int w = 0; w < WORKERS; w++) pthread_create(&th[w], NULL, worker, (void *)(intptr_t)w);
    char *failure = NULL;
    for (int w = 0; w < WORKERS; w++) {
        void *ret = NULL;
        pthread_join(th[w], &ret);
        if (ret && !failure) failure = ret;
        else free(ret);
    }
    __atomic_store_n(&hup_stop, 1, __ATOMIC_RELAXED);
    pthread_join(hup, NULL);
    if (failure) fail_msg("%s", failure);
    /* every request ends: dropped ones within a watchdog turn or a step */
    int idle = 0;
    for (int i = 0; i < 1000 * th_time_scale() && !idle; i++) {
        idle = metric(sv.port, "kvlm_requests_running") == 0 && metric(sv.port, "kvlm_requests_waiting") == 0 &&
               metric(sv.port, "kvlm_kv_blocks_used") == 0;
        if (!idle) usleep(10000);
    }
    assert_true(idle);
    assert_true(metric(sv.port, "kvlm_http_responses_total{code=\"200\"}") > 0);
    printf("server_race: responses 200: %.0f, 429: %.0f; sequences cancelled: %.0f, finished by length: %.0f\n",
           metric(sv.port, "kvlm_http_responses_total{code=\"200\"}"),
           metric(sv.port, "kvlm_http_responses_total{code=\"429\"}"),
           metric(sv.port, "kvlm_sequences_finished_total{reason=\"cancelled\"}"),
           metric(sv.port, "kvlm_sequences_finished_total{reason=\"length\"}"));
    /* and it still serves */
    json_t *j = post(sv.port, "/v1/completions", "{\"prompt\":[1],\"max_tokens\":5,\"ignore_eos\":true}", 200);
    assert_int_equal(jint(j, "usage.completion_tokens"), 5);
    json_decref(j);
}

static int setup(void **state) {
    (void)state;
    char *d = th_tempdir(), args[800];
    if (!d) return -1;
    snprintf(sv.dir, sizeof sv.dir, "%s", d);
    free(d);
    snprintf(args, sizeof args,
             "--synthetic gpt2-tiny --threads 2 --max-seqs 4 --max-waiting 4 --max-batch-tokens 16 "
             "--access-log %s/access.log",
             sv.dir);
    return start_server(&sv, args);
}

static int teardown(void **state) {
    (void)state;
    int rc = stop_server(&sv);
    th_rmtree(sv.dir);
    return rc;
}

int main(int argc, char **argv) {
    (void)argc;
    if (th_server_main_init(argv[0], "test_server_race")) return 1;
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_mixed_load)};
    return cmocka_run_group_tests_name("server under mixed load", tests, setup, teardown) || dirty_exit;
}
