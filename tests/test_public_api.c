/*
 * The small public helpers an embedding program relies on: the version
 * (header macros agree with each other and with kvlm_version(), and
 * `kvlm --version` prints it with the ISA) and kvlm_error_set (formats,
 * returns the code, truncates at KVLM_ERROR_MAX - 1 bytes, accepts NULL).
 * Only kvlm.h is included: this is what an installed program sees.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kvlm.h"

#define STR_(x) #x
#define STR(x) STR_(x)

static void test_version(void **state) {
    (void)state;
    assert_string_equal(KVLM_VERSION,
                        STR(KVLM_VERSION_MAJOR) "." STR(KVLM_VERSION_MINOR) "." STR(KVLM_VERSION_PATCH));
    assert_string_equal(kvlm_version(), KVLM_VERSION);

    char want[128];
    snprintf(want, sizeof want, "kvlm %s (%s)\n", KVLM_VERSION, kvlm_isa_name(kvlm_isa_best()));
    char *out = NULL;
    assert_int_equal(th_run_kvlm(&out, "--version"), 0);
    assert_string_equal(out, want);
    free(out);
}

/* Exact bytes: well-formed sequences kept, each stray byte one U+FFFD. */
static void test_utf8_sanitize(void **state) {
    (void)state;
    const char in[] = "a\xC3\xA9\x80z\xE2\x82\xF0\x9F\x98\x80";
    const char want[] = "a\xC3\xA9\xEF\xBF\xBDz\xEF\xBF\xBD\xEF\xBF\xBD\xF0\x9F\x98\x80";
    char out[3 * sizeof in];
    size_t n = kvlm_utf8_sanitize(in, sizeof in - 1, out);
    assert_int_equal(n, sizeof want - 1);
    assert_memory_equal(out, want, n);
    assert_int_equal(kvlm_utf8_sanitize("", 0, out), 0);
}

static void test_error_set(void **state) {
    (void)state;
    kvlm_error err;
    memset(&err, 0x55, sizeof err);
    assert_int_equal(kvlm_error_set(&err, KVLM_ERR_ARG, "--n %d is outside [%d, %d]", 0, 1, 8), KVLM_ERR_ARG);
    assert_int_equal(err.code, KVLM_ERR_ARG);
    assert_string_equal(err.msg, "--n 0 is outside [1, 8]");

    /* NULL is allowed: only the code comes back. */
    assert_int_equal(kvlm_error_set(NULL, KVLM_ERR_SYSTEM, "cannot start %s", "a thread"), KVLM_ERR_SYSTEM);

    /* A message longer than the buffer is cut, still terminated. */
    char long_text[2 * KVLM_ERROR_MAX];
    memset(long_text, 'x', sizeof long_text - 1);
    long_text[sizeof long_text - 1] = 0;
    memset(&err, 0x55, sizeof err);
    assert_int_equal(kvlm_error_set(&err, KVLM_ERR_FORMAT, "%s", long_text), KVLM_ERR_FORMAT);
    assert_int_equal(strlen(err.msg), KVLM_ERROR_MAX - 1);
    assert_int_equal(err.msg[0], 'x');

    /* The codes stay distinct (KVLM_ERR_SYSTEM is the newest). */
    const int codes[] = {KVLM_OK,     KVLM_ERR_IO,          KVLM_ERR_FORMAT, KVLM_ERR_ARG,
                         KVLM_ERR_NOMEM, KVLM_ERR_UNSUPPORTED, KVLM_ERR_BUSY,   KVLM_ERR_SYSTEM};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) assert_int_equal(codes[i], -(int)i);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_error_set),
        cmocka_unit_test(test_utf8_sanitize),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
