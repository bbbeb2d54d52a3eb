/*
 * Tokenizer encode throughput on one thread (the encoder never starts
 * threads): pre-tokenisation alone, then full encoding with the word cache
 * off, cold (emptied before the pass) and warm (after a pass over the same
 * text). Best of R passes each, in MB/s of input text (1 MB = 10^6 bytes).
 * The three encodings are checked to give identical ids.
 *
 *   build/bench/tokenizer_bench [-m MODEL] [-f TEXT] [-r REPEATS]
 *   (defaults: models/gpt2-tokenizer, data/tinyshakespeare.txt, 5)
 *
 * Prints figures only; it asserts no timings (see DESIGN.md, Testing).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvlm.h"
#include "tokenizer/pretok.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
    fclose(f);
    if (buf) *len = (size_t)n;
    return buf;
}

/* One timed encode; returns seconds, keeps the ids in *ids (caller frees). */
static double timed_encode(const kvlm_tokenizer *t, const char *text, size_t len, int32_t **ids,
                           size_t *n) {
    kvlm_error err;
    double t0 = now();
    if (kvlm_tokenizer_encode(t, text, len, 0, ids, n, &err) != 0) {
        fprintf(stderr, "tokenizer_bench: %s\n", err.msg);
        exit(1);
    }
    return now() - t0;
}

static void check_same(const int32_t *a, size_t na, const int32_t *b, size_t nb, const char *what) {
    if (na != nb || memcmp(a, b, na * sizeof *a) != 0) {
        fprintf(stderr, "tokenizer_bench: %s gave different ids\n", what);
        exit(1);
    }
}

int main(int argc, char **argv) {
    const char *model = "models/gpt2-tokenizer", *file = "data/tinyshakespeare.txt";
    int repeats = 5;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "-f") && i + 1 < argc) file = argv[++i];
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) repeats = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: tokenizer_bench [-m MODEL] [-f TEXT] [-r REPEATS]\n");
            return 2;
        }
    }
    if (repeats < 1) repeats = 1;
    size_t len;
    char *text = slurp(file, &len);
    if (!text) { fprintf(stderr, "tokenizer_bench: cannot read %s\n", file); return 1; }
    kvlm_error err;
    double t0 = now();
    kvlm_tokenizer *t = kvlm_tokenizer_load(model, &err);
    if (!t) { fprintf(stderr, "tokenizer_bench: %s\n", err.msg); return 1; }
    double load_s = now() - t0;

    double best_pre = 1e30;
    size_t pieces = 0;
    for (int r = 0; r < repeats; r++) {
        t0 = now();
        pieces = 0;
        const unsigned char *s = (const unsigned char *)text;
        for (size_t i = 0; i < len; i = tok_pretok_next(s, len, i)) pieces++;
        double dt = now() - t0;
        if (dt < best_pre) best_pre = dt;
    }

    int32_t *ref = NULL, *ids;
    size_t nref = 0, n;
    double best_off = 1e30, best_cold = 1e30, best_warm = 1e30;
    kvlm_tokenizer_set_cache(t, 0, NULL);
    for (int r = 0; r < repeats; r++) {
        double dt = timed_encode(t, text, len, &ids, &n);
        if (dt < best_off) best_off = dt;
        if (!ref) { ref = ids; nref = n; } else free(ids);
    }
    for (int r = 0; r < repeats; r++) {
        kvlm_tokenizer_set_cache(t, 65536, NULL);   /* empty: a cold pass */
        double dt = timed_encode(t, text, len, &ids, &n);
        if (dt < best_cold) best_cold = dt;
        check_same(ids, n, ref, nref, "cold cache");
        free(ids);
        dt = timed_encode(t, text, len, &ids, &n);   /* same text again: warm */
        if (dt < best_warm) best_warm = dt;
        check_same(ids, n, ref, nref, "warm cache");
        free(ids);
    }
    double mb = (double)len / 1e6;
    printf("tokenizer: %s (%d tokens, %zu merges), loaded in %.1f ms\n", kvlm_tokenizer_source(t),
           kvlm_tokenizer_vocab_size(t), kvlm_tokenizer_n_merges(t), load_s * 1e3);
    printf("text: %s, %zu bytes, %zu pre-tokens, %zu tokens (%.2f bytes/token)\n", file, len, pieces,
           nref, (double)len / (double)nref);
    printf("one thread, best of %d:\n", repeats);
    printf("  pre-tokenise only   %8.1f MB/s  (%6.1f ms)\n", mb / best_pre, best_pre * 1e3);
    printf("  encode, no cache    %8.1f MB/s  (%6.1f ms)\n", mb / best_off, best_off * 1e3);
    printf("  encode, cold cache  %8.1f MB/s  (%6.1f ms)\n", mb / best_cold, best_cold * 1e3);
    printf("  encode, warm cache  %8.1f MB/s  (%6.1f ms)\n", mb / best_warm, best_warm * 1e3);
    free(ref);
    free(text);
    kvlm_tokenizer_free(t);
    return 0;
}
