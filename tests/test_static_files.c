/*
 * The web page `kvlm serve` embeds (src/server/static_files.c, docs/web.md):
 * every file of web/ is served byte for byte at /NAME (index.html also at
 * /) with its media type, "Cache-Control: no-cache", a strong ETag and 304
 * for a matching If-None-Match (plain, weak, in a list, "*"); HEAD gives
 * the headers alone; other methods 405; unknown paths the API's JSON 404;
 * with --api-key the files need no key while the API does; --no-web turns
 * the page off; the start-up lines give its address. Synthetic gpt2-tiny servers (the page needs no model).
 */
#include "server_harness.h"

#include <dirent.h>

static server open_srv, keyed, noweb;

static resp raw(int port, const char *req) {
    int fd = connect_to(port);
    if (write(fd, req, strlen(req)) != (ssize_t)strlen(req)) FAIL("write failed");
    return read_response(fd, req);
}

/* A bodiless request with extra header lines (each ending in \r\n). */
static resp req(int port, const char *method, const char *path, const char *headers) {
    char buf[1024];
    snprintf(buf, sizeof buf, "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%s\r\n", method, path,
             headers ? headers : "");
    return raw(port, buf);
}

static int setup(void **state) {
    (void)state;
    if (start_server_in_tempdir(&open_srv, "--synthetic gpt2-tiny --threads 1")) return -1;
    if (start_server_in_tempdir(&keyed, "--synthetic gpt2-tiny --threads 1 --api-key sesame")) return -1;
    return start_server_in_tempdir(&noweb, "--synthetic gpt2-tiny --threads 1 --no-web");
}

static int teardown(void **state) {
    (void)state;
    int rc = 0;
    server *all[] = {&open_srv, &keyed, &noweb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        rc |= stop_server(all[i]);
        if (all[i]->dir[0]) th_rmtree(all[i]->dir);
    }
    return rc;
}

static const char *expected_type(const char *name) {
    const char *dot = strrchr(name, '.');
    if (!strcmp(dot, ".html")) return "text/html; charset=utf-8";
    if (!strcmp(dot, ".css")) return "text/css; charset=utf-8";
    if (!strcmp(dot, ".js")) return "text/javascript; charset=utf-8";
    if (!strcmp(dot, ".svg")) return "image/svg+xml";
    if (!strcmp(dot, ".png")) return "image/png";
    return NULL;
}

/* GET path equals the file's bytes, with its type and caching headers;
 * returns its ETag (malloc'ed). */
static char *check_file(const char *path, const char *file, const char *type) {
    size_t n;
    char *want = th_read_file(file, &n);
    assert_non_null(want);
    resp r = req(open_srv.port, "GET", path, NULL);
    if (r.status != 200) fail_msg("GET %s: %d %s", path, r.status, r.body);
    if (r.len != n || memcmp(r.body, want, n)) fail_msg("GET %s: %zu bytes served, %s has %zu", path, r.len, file, n);
    assert_string_equal(resp_header(&r, "Content-Type"), type);
    assert_string_equal(resp_header(&r, "Cache-Control"), "no-cache");
    assert_string_equal(resp_header(&r, "X-Content-Type-Options"), "nosniff");
    assert_non_null(strstr(resp_header(&r, "Content-Security-Policy"), "default-src 'self'"));
    char *etag = strdup(resp_header(&r, "ETag"));
    assert_true(strlen(etag) == 18 && etag[0] == '"' && etag[17] == '"');
    resp_free(&r);
    free(want);
    return etag;
}

static void test_every_file(void **state) {
    (void)state;
    DIR *d = opendir("web");
    assert_non_null(d);
    int files = 0;
    char *etags[64] = {0};
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || !strrchr(e->d_name, '.') || !expected_type(e->d_name)) continue;
        char path[300], file[300];
        snprintf(path, sizeof path, "/%s", e->d_name);
        snprintf(file, sizeof file, "web/%s", e->d_name);
        assert_true(files < 64);
        etags[files++] = check_file(path, file, expected_type(e->d_name));
    }
    closedir(d);
    assert_true(files >= 5); /* index.html, style.css and the modules */
    /* Different files, different tags. */
    for (int i = 0; i < files; i++)
        for (int k = i + 1; k < files; k++) assert_string_not_equal(etags[i], etags[k]);
    for (int i = 0; i < files; i++) free(etags[i]);
    free(check_file("/", "web/index.html", "text/html; charset=utf-8"));
}

static void test_revalidation(void **state) {
    (void)state;
    resp r = req(open_srv.port, "GET", "/app.js", NULL);
    assert_int_equal(r.status, 200);
    char etag[300], h[400];
    snprintf(etag, sizeof etag, "%s", resp_header(&r, "ETag"));
    resp_free(&r);
    const char *match[] = {"%s", "W/%s", "\"0000000000000000\", %s", "*"};
    for (size_t i = 0; i < sizeof match / sizeof match[0]; i++) {
        char v[340];
        snprintf(v, sizeof v, match[i], etag);
        snprintf(h, sizeof h, "If-None-Match: %s\r\n", v);
        r = req(open_srv.port, "GET", "/app.js", h);
        if (r.status != 304) fail_msg("If-None-Match: %s gave %d", v, r.status);
        assert_int_equal(r.len, 0);
        assert_string_equal(resp_header(&r, "ETag"), etag);
        assert_string_equal(resp_header(&r, "Cache-Control"), "no-cache");
        resp_free(&r);
    }
    /* Another file's tag, or a changed one: the whole file again. */
    r = req(open_srv.port, "GET", "/", NULL);
    snprintf(h, sizeof h, "If-None-Match: %s\r\n", resp_header(&r, "ETag"));
    resp_free(&r);
    r = req(open_srv.port, "GET", "/app.js", h);
    assert_int_equal(r.status, 200);
    assert_true(r.len > 100);
    resp_free(&r);
    r = req(open_srv.port, "GET", "/app.js", "If-None-Match: \"0123456789abcdef\"\r\n");
    assert_int_equal(r.status, 200);
    resp_free(&r);
}

static void test_methods_and_unknown_paths(void **state) {
    (void)state;
    size_t n;
    char *js = th_read_file("web/app.js", &n);
    assert_non_null(js);
    free(js);
    resp r = req(open_srv.port, "HEAD", "/app.js", NULL);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.len, 0);
    assert_int_equal(strtoul(resp_header(&r, "Content-Length"), NULL, 10), n);
    assert_string_equal(resp_header(&r, "Content-Type"), "text/javascript; charset=utf-8");
    resp_free(&r);
    r = req(open_srv.port, "POST", "/", "Content-Length: 0\r\n");
    assert_int_equal(r.status, 405);
    assert_string_equal(resp_header(&r, "Allow"), "GET, HEAD");
    json_t *j = json_loads(r.body, 0, NULL);
    assert_string_equal(jstr(j, "error.code"), "method_not_allowed");
    json_decref(j);
    resp_free(&r);
    const char *unknown[] = {"/nope.js", "/web/index.html", "/index.htm", "/app.js/", "/%2e%2e/Makefile", "/v1"};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
        r = req(open_srv.port, "GET", unknown[i], NULL);
        if (r.status != 404) fail_msg("GET %s: %d", unknown[i], r.status);
        j = json_loads(r.body, 0, NULL);
        assert_non_null(j);
        assert_string_equal(jstr(j, "error.code"), "not_found");
        json_decref(j);
        resp_free(&r);
    }
}

static void test_api_key(void **state) {
    (void)state;
    resp r = req(keyed.port, "GET", "/", NULL);
    assert_int_equal(r.status, 200);
    assert_non_null(strstr(r.body, "<script type=\"module\" src=\"/app.js\">"));
    resp_free(&r);
    r = req(keyed.port, "GET", "/style.css", NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
    const char *api[] = {"/v1/models", "/kvlm/engine", "/nope.js"};
    for (size_t i = 0; i < sizeof api / sizeof api[0]; i++) {
        r = req(keyed.port, "GET", api[i], NULL);
        if (r.status != 401) fail_msg("GET %s without the key: %d", api[i], r.status);
        resp_free(&r);
    }
    r = req(keyed.port, "GET", "/v1/models", "Authorization: Bearer sesame\r\n");
    assert_int_equal(r.status, 200);
    resp_free(&r);
}

/* The start-up lines say where the page is, unless it is off. */
static void test_startup_line(void **state) {
    (void)state;
    char want[96];
    snprintf(want, sizeof want, "kvlm serve: web page at http://127.0.0.1:%d/ (docs/web.md)\n", open_srv.port);
    char *log = th_read_file(open_srv.log, NULL);
    assert_non_null(log);
    assert_non_null(strstr(log, want));
    free(log);
    log = th_read_file(noweb.log, NULL);
    assert_non_null(log);
    assert_null(strstr(log, "web page at"));
    free(log);
}

static void test_no_web(void **state) {
    (void)state;
    const char *paths[] = {"/", "/index.html", "/app.js"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        resp r = req(noweb.port, "GET", paths[i], NULL);
        if (r.status != 404) fail_msg("--no-web: GET %s: %d", paths[i], r.status);
        assert_null(resp_header(&r, "ETag"));
        resp_free(&r);
    }
    resp r = req(noweb.port, "GET", "/v1/models", NULL);
    assert_int_equal(r.status, 200);
    resp_free(&r);
}

int main(int argc, char **argv) {
    (void)argc;
    if (th_server_main_init(argv[0], "test_static_files")) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_file),
        cmocka_unit_test(test_revalidation),
        cmocka_unit_test(test_methods_and_unknown_paths),
        cmocka_unit_test(test_api_key),
        cmocka_unit_test(test_no_web),
        cmocka_unit_test(test_startup_line),
    };
    return cmocka_run_group_tests_name("web page", tests, setup, teardown) || dirty_exit;
}
