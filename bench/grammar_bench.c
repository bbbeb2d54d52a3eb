/*
 * Cost of constrained decoding per token: for each vocabulary, a JSON
 * Schema and documents valid under it (ASCII and non-ASCII text), and a
 * schema of one length-bounded string (the slow case) with its own, the
 * documents are tokenized and replayed token by token: at every position
 * the mask of allowed tokens is computed (with the per-state cache, then
 * without it: every mask walked), applied to a logits row as the
 * scheduler does, and the matcher advanced by the token. Also the trie
 * build time (once per tokenizer per scheduler).
 *
 *   build/bench/grammar_bench [VOCAB ...]
 *   (default: models/gpt2-tokenizer and, when present,
 *    build/tests/vocab/ggml-vocab-{llama-bpe,qwen2}.gguf, which `make test` unpacks)
 *
 * Prints mean and worst figures per token in microseconds; asserts no
 * timings (see DESIGN.md, Testing).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grammar/grammar.h"
#include "kvlm.h"
#include "runtime/constrain.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *SCHEMA =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\"},"
    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":150},"
    "\"email\":{\"type\":\"string\",\"pattern\":\"^[a-z0-9.]+@[a-z0-9]+\\\\.[a-z]{2,4}$\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"admin\",\"user\",\"guest\"]},\"maxItems\":3},"
    "\"address\":{\"type\":\"object\",\"properties\":{\"street\":{\"type\":\"string\"},"
    "\"city\":{\"type\":\"string\"},\"zip\":{\"type\":\"string\",\"pattern\":\"^[0-9]{5}$\"}},"
    "\"required\":[\"street\",\"city\"]},"
    "\"score\":{\"type\":\"number\"},"
    "\"notes\":{\"type\":\"string\"}},"
    "\"required\":[\"name\",\"age\",\"tags\",\"address\",\"notes\"]}";

static const char *DOCS[] = {
    "{\"name\": \"Ada Lovelace\", \"age\": 36, \"email\": \"ada@example.org\", \"tags\": [\"admin\", \"user\"], "
    "\"address\": {\"street\": \"12 St James's Square\", \"city\": \"London\", \"zip\": \"12345\"}, "
    "\"score\": 98.25, \"notes\": \"Wrote the first published algorithm intended for a machine, with a \\\"note G\\\" "
    "that computes Bernoulli numbers; corresponded with Babbage at length.\"}",
    "{\"name\": \"\xe5\xbc\xa0\xe4\xbc\x9f\", \"age\": 41, \"tags\": [\"guest\"], \"address\": {\"street\": "
    "\"\xe4\xba\xba\xe6\xb0\x91\xe8\xb7\xaf 88\xe5\x8f\xb7\", \"city\": \"\xe4\xb8\x8a\xe6\xb5\xb7\"}, \"notes\": "
    "\"Caf\xc3\xa9 cr\xc3\xa8me br\xc3\xbbl\xc3\xa9" "e \xe2\x80\x94 na\xc3\xafve r\xc3\xa9sum\xc3\xa9 \xf0\x9f\x98\x80 "
    "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe3\x83\x86\xe3\x82\xad\xe3\x82\xb9\xe3\x83\x88\"}",
};

#define REPLAYS 3
#define MAX_POS 4096

/* A string of bounded length: every position is a state of its own, so
 * neither the self-loop shortcut nor the cache applies (the counted-run
 * shortcut does, for ASCII). */
static const char *COUNTED_SCHEMA =
    "{\"type\":\"object\",\"properties\":{\"summary\":{\"type\":\"string\",\"maxLength\":400}},"
    "\"required\":[\"summary\"]}";

static const char *COUNTED_DOCS[] = {
    "{\"summary\": \"Wrote the first published algorithm intended for a machine, with a note that computes "
    "Bernoulli numbers; corresponded with Babbage at length about the engine and its uses.\"}",
    "{\"summary\": \"Caf\xc3\xa9 cr\xc3\xa8me br\xc3\xbbl\xc3\xa9" "e \xe2\x80\x94 \xe4\xba\xba\xe6\xb0\x91\xe8\xb7\xaf\"}",
};

static const char *const *docs = DOCS;
static size_t n_docs = sizeof DOCS / sizeof DOCS[0];

typedef struct figures {
    int tokens;
    double mean_us, p95_us, max_us;
} figures;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Replays the documents once, each from a fresh matcher; cached: with the
 * mask cache. dt[i]: the time at the i-th token, kept when lower. */
static int replay_once(const kvlm_grammar *g, const kvlm_tokenizer *tok, const gr_trie *trie, int cached, int apply,
                       double *dt_min, int *n_out) {
    kvlm_error err;
    const int v = kvlm_tokenizer_vocab_size(tok);
    uint64_t *bits = malloc(((size_t)v + 63) / 64 * sizeof *bits);
    float *logits = malloc((size_t)v * sizeof *logits), *out = malloc((size_t)v * sizeof *out);
    for (int i = 0; i < v; i++) logits[i] = (float)((i * 2654435761u) % 1000) / 100.0f;
    int n_tok = 0;
    for (size_t d = 0; d < n_docs; d++) {
        int32_t *ids;
        size_t n;
        if (kvlm_tokenizer_encode(tok, docs[d], strlen(docs[d]), 0, &ids, &n, &err)) {
            fprintf(stderr, "encode: %s\n", err.msg);
            return -1;
        }
        gr_matcher *m = gr_matcher_new(g, &err);
        gr_matcher_mask_cache(m, cached);
        for (size_t i = 0; i < n; i++) {
            double t0 = now();
            int k = apply ? cst_mask_logits(m, trie, logits, out, bits, v, NULL, 0, GR_NO_CLOSE) : gr_token_mask(m, trie, bits);
            double dt = now() - t0;
            if (n_tok < MAX_POS && dt < dt_min[n_tok]) dt_min[n_tok] = dt;
            if (k <= 0 || !((bits[ids[i] >> 6] >> (ids[i] & 63)) & 1)) {
                fprintf(stderr, "doc %zu token %zu (id %d) not allowed (%d allowed)\n", d, i, ids[i], k);
                return -1;
            }
            size_t len;
            const char *p = kvlm_tokenizer_piece(tok, ids[i], &len);
            if (gr_matcher_advance(m, p, len)) {
                fprintf(stderr, "doc %zu token %zu refused\n", d, i);
                return -1;
            }
            n_tok++;
        }
        if (!gr_matcher_accepting(m)) {
            fprintf(stderr, "doc %zu: not complete\n", d);
            return -1;
        }
        gr_matcher_free(m);
        free(ids);
    }
    free(bits);
    free(logits);
    free(out);
    *n_out = n_tok < MAX_POS ? n_tok : MAX_POS;
    return 0;
}

/* Per token, the best of REPLAYS replays (the machine is shared: a token
 * that was preempted once is not charged for it); mean, 95th percentile
 * and worst over the tokens. */
static int replay(const kvlm_grammar *g, const kvlm_tokenizer *tok, const gr_trie *trie, int cached, int apply,
                  figures *f) {
    static double dt[MAX_POS];
    int n = 0;
    for (int i = 0; i < MAX_POS; i++) dt[i] = 1e9;
    for (int r = 0; r < REPLAYS; r++)
        if (replay_once(g, tok, trie, cached, apply, dt, &n)) return -1;
    double total = 0;
    for (int i = 0; i < n; i++) total += dt[i];
    qsort(dt, (size_t)n, sizeof *dt, cmp_double);
    f->tokens = n;
    f->mean_us = total / n * 1e6;
    f->p95_us = dt[(n * 95) / 100] * 1e6;
    f->max_us = dt[n - 1] * 1e6;
    return 0;
}

static int bench(const char *path, const kvlm_grammar *g, const kvlm_grammar *counted) {
    kvlm_error err;
    kvlm_tokenizer *tok = kvlm_tokenizer_load(path, &err);
    if (!tok) {
        fprintf(stderr, "%s: %s\n", path, err.msg);
        return -1;
    }
    double t0 = now();
    gr_trie *trie = gr_trie_build(tok, &err);
    double build_ms = (now() - t0) * 1e3;
    if (!trie) return -1;
    const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    for (int pass = 0; pass < 2; pass++) {
        docs = pass ? COUNTED_DOCS : DOCS;
        n_docs = pass ? sizeof COUNTED_DOCS / sizeof COUNTED_DOCS[0] : sizeof DOCS / sizeof DOCS[0];
        const kvlm_grammar *gg = pass ? counted : g;
        figures warm, cold, applied;
        if (replay(gg, tok, trie, 0, 0, &cold) || replay(gg, tok, trie, 1, 0, &warm) ||
            replay(gg, tok, trie, 1, 1, &applied))
            return -1;
        printf("%-26s %-7s %7d %7zu %7.1f %6d | %6.1f %6.1f %7.1f | %6.1f %6.1f %7.1f | %6.1f %6.1f\n", name,
               pass ? "bounded" : "schema", kvlm_tokenizer_vocab_size(tok), gr_trie_nodes(trie), build_ms, cold.tokens,
               cold.mean_us, cold.p95_us, cold.max_us, warm.mean_us, warm.p95_us, warm.max_us, applied.mean_us,
               applied.p95_us);
    }
    gr_trie_free(trie);
    kvlm_tokenizer_free(tok);
    return 0;
}

int main(int argc, char **argv) {
    kvlm_error err;
    kvlm_grammar *g = kvlm_grammar_from_json_schema(SCHEMA, strlen(SCHEMA), &err);
    kvlm_grammar *counted = g ? kvlm_grammar_from_json_schema(COUNTED_SCHEMA, strlen(COUNTED_SCHEMA), &err) : NULL;
    if (!g || !counted) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const char *defaults[] = {"models/gpt2-tokenizer", "build/tests/vocab/ggml-vocab-llama-bpe.gguf",
                              "build/tests/vocab/ggml-vocab-qwen2.gguf"};
    printf("mask cost per token, in microseconds (per token the best of %d replays). schema: a JSON Schema\n"
           "of free strings, numbers, enums and patterns; bounded: one string with maxLength 400.\n"
           "cold: every mask walked; warm: with the per-state cache; +apply: warm, and the mask written\n"
           "into a logits row as the scheduler does\n\n", REPLAYS);
    printf("%-26s %-7s %7s %7s %7s %6s | %-22s | %-22s | %-13s\n", "", "", "", "trie", "trie", "", "cold", "warm",
           "+apply");
    printf("%-26s %-7s %7s %7s %7s %6s | %6s %6s %7s | %6s %6s %7s | %6s %6s\n", "vocabulary", "grammar", "vocab",
           "nodes", "ms", "tokens", "mean", "p95", "max", "mean", "p95", "max", "mean", "p95");
    int rc = 0;
    if (argc > 1) {
        for (int i = 1; i < argc; i++) rc |= bench(argv[i], g, counted);
    } else {
        for (int i = 0; i < 3; i++) {
            FILE *f = fopen(defaults[i], "rb");
            if (!f && i > 0) continue;
            if (f) fclose(f);
            rc |= bench(defaults[i], g, counted);
        }
    }
    kvlm_grammar_free(g);
    kvlm_grammar_free(counted);
    return rc ? 1 : 0;
}
