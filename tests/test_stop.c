/*
 * Stop strings over streamed text: a match across pieces, a match inside a
 * piece, the earliest of several stops, held-back text given out at the
 * end, nothing after a stop, and a flush before any text.
 */
#include <string.h>

#include "helpers.h"
#include "kvlm.h"

/* Pushes pieces; returns the concatenated output and whether it stopped. */
static int feed(kvlm_stop *st, const char *const *pieces, int n, char *out) {
    size_t o = 0;
    int stopped = 0;
    for (int i = 0; i < n && !stopped; i++) {
        const char *b;
        size_t len;
        stopped = kvlm_stop_push(st, pieces[i], strlen(pieces[i]), &b, &len, NULL);
        memcpy(out + o, b, len);
        o += len;
    }
    if (!stopped) {
        const char *b;
        size_t len;
        kvlm_stop_flush(st, &b, &len, NULL);
        memcpy(out + o, b, len);
        o += len;
    }
    out[o] = 0;
    return stopped;
}

static void test_stops(void **state) {
    (void)state;
    kvlm_error err;
    char out[256];
    const char *stops[] = {"\n\n", "END", ""};
    kvlm_stop *st = kvlm_stop_create(stops, 3, &err);
    assert_true(feed(st, (const char *[]){"Hello", " wor", "ld\n", "\nmore"}, 4, out));
    assert_string_equal(out, "Hello world");
    kvlm_stop_free(st);

    st = kvlm_stop_create(stops, 3, &err);
    assert_true(feed(st, (const char *[]){"abcENDxyz"}, 1, out)); /* inside one piece */
    assert_string_equal(out, "abc");
    kvlm_stop_free(st);

    st = kvlm_stop_create(stops, 3, &err);
    assert_false(feed(st, (const char *[]){"no stop ", "here E", "N"}, 3, out));
    assert_string_equal(out, "no stop here EN"); /* held-back "EN" given out by flush */
    kvlm_stop_free(st);

    const char *two[] = {"cd", "b"};
    st = kvlm_stop_create(two, 2, &err);
    assert_true(feed(st, (const char *[]){"abcd"}, 1, out)); /* earliest match wins */
    assert_string_equal(out, "a");
    const char *b;
    size_t len;
    assert_int_equal(kvlm_stop_push(st, "zzz", 3, &b, &len, NULL), 1); /* stays stopped */
    assert_int_equal(len, 0);
    kvlm_stop_free(st);

    st = kvlm_stop_create(NULL, 0, &err); /* no stop strings: everything passes */
    assert_false(feed(st, (const char *[]){"a", "b"}, 2, out));
    assert_string_equal(out, "ab");
    kvlm_stop_free(st);

    /* a generation that ends before any text (found by fuzz/fuzz_stream.c:
     * the flush copied from the empty buffer's NULL) */
    st = kvlm_stop_create((const char *[]){"x"}, 1, &err);
    const char *rest = NULL;
    size_t n = 99;
    assert_int_equal(kvlm_stop_flush(st, &rest, &n, NULL), 0);
    assert_non_null(rest);
    assert_int_equal(n, 0);
    kvlm_stop_free(st);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_stops)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
