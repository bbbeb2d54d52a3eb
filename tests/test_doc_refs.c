/*
 * The documentation names only what exists: every repository path that
 * README.md, the pages of docs/ and the public headers in include/ mention
 * (src/..., tests/..., bench/..., docs/..., and src-relative ones such as
 * `runtime/engine.c`) is a file or directory of the tree (globs and {a,b}
 * lists expanded), and
 * every `make TARGET` is a target of the Makefile. Run from the repository
 * root, as make test does. Paths named as another project's (within a few
 * characters of "llama.cpp") are not checked. It does not check what a
 * sentence says about a file, only that the file is there.
 */
#include <ctype.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "helpers.h"

static const char *const top[] = {"src/",      "tests/",   "bench/",   "tools/",  "docs/",
                                  "include/",  "examples/", "scripts/", "deploy/", "fuzz/"};
static const char *const rel[] = {"cli/",     "runtime/", "model/",   "kernels/", "measure/", "formats/",
                                  "server/",  "grammar/", "template/", "tokenizer/", "app/"};

static int path_char(char c) {
    return isalnum((unsigned char)c) || (c && strchr("_./*{},@-", c));
}

static int exists(const char *p) {
    const char *lb = strchr(p, '{'), *rb = lb ? strchr(lb, '}') : NULL;
    if (lb && rb) { /* every alternative of the first {a,b} must exist */
        const char *a = lb + 1;
        for (;;) {
            const char *e = a;
            while (e < rb && *e != ',') e++;
            char buf[512];
            snprintf(buf, sizeof buf, "%.*s%.*s%s", (int)(lb - p), p, (int)(e - a), a, rb + 1);
            if (!exists(buf)) return 0;
            if (e == rb) return 1;
            a = e + 1;
        }
    }
    if (strchr(p, '*')) {
        glob_t g;
        const int ok = glob(p, 0, NULL, &g) == 0 && g.gl_pathc > 0;
        globfree(&g);
        return ok;
    }
    struct stat st;
    return stat(p, &st) == 0;
}

static int near(const char *text, const char *s, const char *e, const char *word) {
    const char *a = s - text < 24 ? text : s - 24;
    for (const char *q = a; q < e + 24 && *q; q++)
        if (!strncmp(q, word, strlen(word))) return 1;
    return 0;
}

/* Counts (and prints) the paths of one file that do not exist. */
static int check_paths(const char *file, const char *text) {
    int bad = 0;
    for (const char *s = text; *s; s++) {
        if (s > text && (path_char(s[-1]) || s[-1] == '/' || s[-1] == '$')) continue;
        int kind = 0; /* 1: from the root, 2: under src/ */
        for (size_t i = 0; i < sizeof top / sizeof top[0] && !kind; i++)
            if (!strncmp(s, top[i], strlen(top[i]))) kind = 1;
        for (size_t i = 0; i < sizeof rel / sizeof rel[0] && !kind; i++)
            if (!strncmp(s, rel[i], strlen(rel[i]))) kind = 2;
        if (!kind) continue;
        const char *e = s;
        while (path_char(*e)) e++;
        const int prefix = e - s > 3 && !strncmp(e - 3, "...", 3); /* "fuzz/found/x/26a2..." */
        while (e > s && (e[-1] == '.' || e[-1] == ',' || e[-1] == '-')) e--;
        char p[512];
        snprintf(p, sizeof p, "%s%.*s%s", kind == 2 ? "src/" : "", (int)(e - s), s, prefix ? "*" : "");
        const char *base = strrchr(p, '/');
        /* src-relative names count only when they name a file (runtime/engine.c) */
        if (kind == 2 && !(base && strchr(base, '.'))) continue;
        if (near(text, s, e, "llama.cpp")) continue;
        char src[520];
        snprintf(src, sizeof src, "%s.c", p); /* a program built from src */
        if (!exists(p) && !exists(src)) {
            printf("  %s: %.*s does not exist\n", file, (int)(e - s), s);
            bad++;
        }
        s = e - 1;
    }
    return bad;
}

static int check_make(const char *file, const char *text, const char *makefile) {
    int bad = 0;
    for (const char *s = strstr(text, "`make "); s; s = strstr(s + 1, "`make ")) {
        const char *t = s + 6;
        while (*t && isupper((unsigned char)*t)) { /* VAR=value before the target */
            const char *eq = t;
            while (isupper((unsigned char)*eq) || *eq == '_') eq++;
            if (*eq != '=') break;
            while (*t && *t != ' ' && *t != '`') t++;
            while (*t == ' ') t++;
        }
        const char *e = t;
        while (isalnum((unsigned char)*e) || (e > t && (*e == '-' || *e == '_'))) e++;
        if (e == t || *e == '/') continue; /* `make`, `make -j2`, or a file target */
        char want[128];
        snprintf(want, sizeof want, "\n%.*s:", (int)(e - t), t);
        char phony[128];
        snprintf(phony, sizeof phony, " %.*s", (int)(e - t), t);
        int found = strstr(makefile, want) != NULL;
        for (const char *ph = strstr(makefile, "\n.PHONY:"); ph && !found; ph = strstr(ph + 1, "\n.PHONY:")) {
            const char *end = strchr(ph + 1, '\n');
            for (const char *q = strstr(ph, phony); q && q < end && !found; q = strstr(q + 1, phony))
                if (!isalnum((unsigned char)q[strlen(phony)]) && q[strlen(phony)] != '-') found = 1;
        }
        if (!found) {
            printf("  %s: `make %.*s` is not a Makefile target\n", file, (int)(e - t), t);
            bad++;
        }
    }
    return bad;
}

static void test_doc_refs(void **state) {
    (void)state;
    char *makefile = th_read_file("Makefile", NULL);
    assert_non_null(makefile);
    glob_t g;
    assert_int_equal(glob("docs/*.md", 0, NULL, &g), 0);
    assert_int_equal(glob("include/*.h", GLOB_APPEND, NULL, &g), 0);
    assert_int_equal(glob("README.md", GLOB_APPEND, NULL, &g), 0);
    assert_true(g.gl_pathc >= 20);
    int bad = 0;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        char *text = th_read_file(g.gl_pathv[i], NULL);
        assert_non_null(text);
        bad += check_paths(g.gl_pathv[i], text);
        bad += check_make(g.gl_pathv[i], text, makefile);
        free(text);
    }
    globfree(&g);
    free(makefile);
    assert_int_equal(bad, 0);
}

/* The checks themselves: a missing path, a missing target and a glob that
 * matches nothing are reported; existing ones, llama.cpp's and file
 * targets are not. */
static void test_checker(void **state) {
    (void)state;
    const char *mk = "all: x\n.PHONY: test run\nbench-quant: y\n";
    assert_int_equal(check_paths("t", "see src/runtime/engine.c and `runtime/attention.c`, docs/"), 0);
    assert_int_equal(check_paths("t", "src/kernels/{team,dispatch}.c and src/kernels/vec_softmax*.c"), 0);
    assert_int_equal(check_paths("t", "src/no_such_file.c, `runtime/gone.c` and tests/test_*.zz"), 3);
    assert_int_equal(check_paths("t", "src/kernels/{team,nothing}.c"), 1);
    assert_int_equal(check_paths("t", "(`tests/test-tokenizer-0.cpp` of llama.cpp)"), 0);
    assert_int_equal(check_paths("t", "`src/kernels/te...`, examples/generate, src/kernels/zz..."), 1);
    assert_int_equal(check_make("t", "`make test`, `make bench-quant`, `make build-san/tests/x SANITIZE=1`", mk), 0);
    assert_int_equal(check_make("t", "`make SANITIZE=1 test` and `make bench-nothing`", mk), 1);
    assert_int_equal(check_make("t", "`make -j2` and `make -C examples`", mk), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_checker), cmocka_unit_test(test_doc_refs)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
