/*
 * Shared pieces of the tokenizer tests (test_tokenizer.c and
 * test_tokenizer_files.c): loading with a failing assertion, a seeded
 * generator, the fixture of ids from tools/tokenizer_reference.py and the
 * loop that checks a tokenizer against it, scratch-file helpers.
 * Everything is static inline so each test binary takes what it uses.
 */
#ifndef KVLM_TOKENIZER_TESTLIB_H
#define KVLM_TOKENIZER_TESTLIB_H

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kvlm.h"

#define MODEL "models/gpt2-tokenizer"
#define FIXTURE "tests/fixtures/tokenizer/gpt2_cases.json"


static inline kvlm_tokenizer *load_ok(const char *path) {
    kvlm_error err = {0};
    kvlm_tokenizer *t = kvlm_tokenizer_load(path, &err);
    if (!t) print_error("load %s: %s\n", path, err.msg);
    assert_non_null(t);
    return t;
}

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static inline uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static inline void encode_ok(const kvlm_tokenizer *t, const void *s, size_t n, int special, int32_t **ids,
                      size_t *n_ids) {
    kvlm_error err = {0};
    int rc = kvlm_tokenizer_encode(t, s, n, special, ids, n_ids, &err);
    if (rc) print_error("encode: %s\n", err.msg);
    assert_int_equal(rc, 0);
}

static inline void expect_ids(const kvlm_tokenizer *t, const char *s, int special, const int32_t *want,
                       size_t n_want) {
    int32_t *ids;
    size_t n;
    encode_ok(t, s, strlen(s), special, &ids, &n);
    assert_int_equal(n, n_want);
    for (size_t i = 0; i < n; i++) assert_int_equal(ids[i], want[i]);
    free(ids);
}

/* ---------------------------------------------------------------- fixture */

typedef struct fixture_case {
    const char *name;
    unsigned char *bytes;
    size_t len;
    int special;
    int32_t *ids;
    size_t n_ids;
} fixture_case;

static fixture_case *fixture_cases;
static size_t n_fixture_cases;

static inline int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static json_t *fixture_root;

static inline int load_fixture(void **state) {
    (void)state;
    json_error_t je;
    fixture_root = json_load_file(FIXTURE, JSON_ALLOW_NUL, &je);
    if (!fixture_root) {
        fprintf(stderr, "%s: %s\n", FIXTURE, je.text);
        return -1;
    }
    json_t *cases = json_object_get(fixture_root, "cases");
    n_fixture_cases = json_array_size(cases);
    fixture_cases = calloc(n_fixture_cases, sizeof *fixture_cases);
    for (size_t i = 0; i < n_fixture_cases; i++) {
        json_t *c = json_array_get(cases, i);
        fixture_case *f = &fixture_cases[i];
        f->name = json_string_value(json_object_get(c, "name"));
        const char *hex = json_string_value(json_object_get(c, "hex"));
        f->len = strlen(hex) / 2;
        f->bytes = malloc(f->len + 1);
        for (size_t k = 0; k < f->len; k++)
            f->bytes[k] = (unsigned char)(hexval(hex[2 * k]) * 16 + hexval(hex[2 * k + 1]));
        f->special = json_is_true(json_object_get(c, "special"));
        json_t *ids = json_object_get(c, "ids");
        f->n_ids = json_array_size(ids);
        f->ids = malloc((f->n_ids + 1) * sizeof *f->ids);
        for (size_t k = 0; k < f->n_ids; k++)
            f->ids[k] = (int32_t)json_integer_value(json_array_get(ids, k));
    }
    return 0;
}

static inline int free_fixture(void **state) {
    (void)state;
    for (size_t i = 0; i < n_fixture_cases; i++) {
        free(fixture_cases[i].bytes);
        free(fixture_cases[i].ids);
    }
    free(fixture_cases);
    json_decref(fixture_root);
    return 0;
}

/* Checks every fixture case id by id, and that decoding gives the bytes
 * back. Returns the number of failing cases (each one printed). */
static inline int run_fixture(const kvlm_tokenizer *t, const char *label) {
    int failures = 0;
    for (size_t i = 0; i < n_fixture_cases; i++) {
        const fixture_case *f = &fixture_cases[i];
        int32_t *ids;
        size_t n;
        encode_ok(t, f->bytes, f->len, f->special, &ids, &n);
        size_t k = 0;
        while (k < n && k < f->n_ids && ids[k] == f->ids[k]) k++;
        if (k != n || k != f->n_ids) {
            print_error("%s: case %s: ids differ at index %zu (got %d, want %d; %zu vs %zu ids)\n",
                        label, f->name, k, k < n ? ids[k] : -1, k < f->n_ids ? f->ids[k] : -1, n,
                        f->n_ids);
            failures++;
        }
        char *text;
        size_t tlen;
        kvlm_error err;
        assert_int_equal(kvlm_tokenizer_decode(t, ids, n, &text, &tlen, &err), 0);
        if (tlen != f->len || memcmp(text, f->bytes, f->len) != 0) {
            print_error("%s: case %s: decode does not give the bytes back\n", label, f->name);
            failures++;
        }
        free(text);
        free(ids);
    }
    return failures;
}


static inline char *path_in(const char *dir, const char *name) {
    char *p = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(p, "%s/%s", dir, name);
    return p;
}

static inline void copy_file(const char *from, const char *dir, const char *name) {
    size_t len;
    char *buf = th_read_file(from, &len);
    assert_non_null(buf);
    char *to = path_in(dir, name);
    assert_int_equal(th_write_file(to, buf, len), 0);
    free(to);
    free(buf);
}

/* Writes a tokenizer.json made of GPT-2's files: merges as "a b" strings
 * (pairs = 0) or ["a", "b"] arrays (pairs = 1); extra_added adds a
 * non-special and a special added token; extra_vocab adds one model token
 * and turns on ignore_merges. */

#endif
