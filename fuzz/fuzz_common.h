/*
 * Shared by the libFuzzer harnesses in fuzz/: most kvlm loaders take a
 * path, so an input is written to a file in a private directory (under
 * /dev/shm when it exists, else $TMPDIR or /tmp) made once per process and
 * removed at exit. fuzz_split cuts an input at the first occurrence of a
 * separator, for harnesses that need two files or two texts from one input.
 *
 * Invariants: a harness never keeps state between inputs except read-only
 * resources loaded once (a tokenizer); every allocation made for an input
 * is freed before the harness returns, so LeakSanitizer can report leaks.
 * This header holds no parser logic.
 */
#ifndef KVLM_FUZZ_COMMON_H
#define KVLM_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvlm.h"

static char fuzz_dir[256];

static inline void fuzz_cleanup(void) {
    char cmd[300];
    if (!fuzz_dir[0]) return;
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fuzz_dir);
    if (system(cmd) != 0) fprintf(stderr, "fuzz: could not remove %s\n", fuzz_dir);
}

/* The per-process directory; aborts (the harness, not the library) when it
 * cannot be made, since no input could then be tried. */
static inline const char *fuzz_workdir(void) {
    if (fuzz_dir[0]) return fuzz_dir;
    struct stat st;
    const char *base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : getenv("TMPDIR");
    snprintf(fuzz_dir, sizeof fuzz_dir, "%s/kvlm-fuzz-XXXXXX", base ? base : "/tmp");
    if (!mkdtemp(fuzz_dir)) {
        perror("fuzz: mkdtemp");
        abort();
    }
    atexit(fuzz_cleanup);
    return fuzz_dir;
}

/* Writes n bytes to <workdir>/name and returns the path (static storage,
 * one per name slot: slot 0 or 1). */
static inline const char *fuzz_write(int slot, const char *name, const uint8_t *data, size_t n) {
    static char paths[2][400];
    char *p = paths[slot & 1];
    snprintf(p, sizeof paths[0], "%s/%s", fuzz_workdir(), name);
    FILE *f = fopen(p, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        perror("fuzz: write");
        abort();
    }
    return p;
}

/* Splits data at the first sep (sep_len bytes): *a gets what is before, *b
 * what is after (or nothing when sep does not occur). */
static inline void fuzz_split(const uint8_t *data, size_t n, const char *sep, size_t sep_len, const uint8_t **a,
                       size_t *na, const uint8_t **b, size_t *nb) {
    *a = data;
    *na = n;
    *b = data + n;
    *nb = 0;
    for (size_t i = 0; i + sep_len <= n; i++)
        if (!memcmp(data + i, sep, sep_len)) {
            *na = i;
            *b = data + i + sep_len;
            *nb = n - i - sep_len;
            return;
        }
}

/* A NUL-terminated copy (malloc'ed; aborts on no memory, as libFuzzer's
 * -rss_limit would). */
static inline char *fuzz_strndup(const uint8_t *d, size_t n) {
    char *s = malloc(n + 1);
    if (!s) abort();
    if (n) memcpy(s, d, n);
    s[n] = 0;
    return s;
}

/* Uses a loaded tokenizer so the tables a file built are read, not only
 * built: a fixed text (special tokens, invalid UTF-8, digits, a euro sign,
 * newlines) encoded both ways and decoded again, and the first ids decoded
 * one by one. Results are not checked; the sanitizers are the oracle. */
static inline void fuzz_use_tokenizer(const kvlm_tokenizer *t) {
    static const char text[] = "Hello, world! <|endoftext|> ab\xff\xfe 12345 \xe2\x82\xac \n\n  x<s></s>";
    kvlm_error err;
    for (int pass = 0; pass < 2; pass++) {
        int32_t *ids = NULL;
        size_t n = 0;
        int rc = pass ? kvlm_tokenizer_encode_prompt(t, text, sizeof text - 1, 1, &ids, &n, &err)
                      : kvlm_tokenizer_encode(t, text, sizeof text - 1, 0, &ids, &n, &err);
        if (rc != 0) continue;
        char *back = NULL;
        size_t len = 0;
        if (kvlm_tokenizer_decode(t, ids, n, &back, &len, &err) == 0) free(back);
        free(ids);
    }
    int vocab = kvlm_tokenizer_vocab_size(t);
    for (int32_t id = 0; id < vocab && id < 300; id++) {
        size_t len;
        char *back = NULL;
        (void)kvlm_tokenizer_piece(t, id, &len);
        if (kvlm_tokenizer_decode(t, &id, 1, &back, &len, &err) == 0) free(back);
    }
}

#endif
