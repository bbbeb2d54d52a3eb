/*
 * `kvlm perplexity`: sliding-window perplexity of a text file, the standard
 * Hugging Face definition, so numbers compare with published ones.
 *
 * The file is tokenized without special tokens (N tokens). Windows of
 * `context` tokens start at 0, stride, 2 x stride, ... ; the last one is cut
 * at N and is the final window. The first window scores every token after
 * its first; each later window [s, e) scores only the tokens not scored
 * before, [previous e, e), each conditioned on the window's tokens before
 * it. With stride < context every token but the first is scored exactly
 * once (N - 1 in all), with at least context - stride tokens of left context
 * (fewer only at the start of the file); with stride == context the windows
 * do not overlap and each window's first token, having no context, is not
 * scored (as in Hugging Face's loop). perplexity = exp(mean NLL), NLL in
 * nats, accumulated in double.
 *
 * Each window runs on a fresh KV sequence with logits for every position;
 * a window longer than CHUNK tokens is fed in chunks so the logits buffer
 * stays at CHUNK x vocab floats. Does not sample or generate.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"

#define CHUNK 256

static const char *usage =
    "usage: kvlm perplexity -m MODEL -f FILE [options]\n"
    "  -m PATH            model directory (its tokenizer files are used)\n"
    "  -f FILE            text file to score (encoded without special tokens)\n"
    "  --context N        window length in tokens, 2..n_ctx (default: the model's n_ctx)\n"
    "  --stride S         window step in tokens, 1..context (default: context / 2)\n"
    "  --threads N        threads (default: all cores)\n"
    "  --kv-dtype T       KV cache dtype: f32 (default) or f16\n"
    "  --json             print one JSON object\n"
    "\n"
    "Sliding windows of N tokens start every S tokens. The first window scores\n"
    "every token after its first; each later window scores only the tokens no\n"
    "earlier window scored (its last positions), conditioned on the window's\n"
    "preceding tokens. With stride < context every token but the first of the\n"
    "file is scored once; with stride == context each window's first token is not.\n"
    "Reports the tokens scored, the mean negative log-likelihood in nats and\n"
    "perplexity = exp(mean NLL).\n";

typedef struct ppl_opts {
    const char *model, *file;
    int context, stride, threads, json;
    kvlm_dtype kv_dtype;
} ppl_opts;

static int parse(int argc, char **argv, ppl_opts *o) {
    *o = (ppl_opts){.kv_dtype = KVLM_F32};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
#define VAL() do { if (!(v = arg_value(argc, argv, &i))) return -1; } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(usage, stdout); exit(0); }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { VAL(); o->model = v; }
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) { VAL(); o->file = v; }
        else if (!strcmp(a, "--context")) { VAL(); if (arg_int(a, v, 2, 1 << 24, &o->context)) return -1; }
        else if (!strcmp(a, "--stride")) { VAL(); if (arg_int(a, v, 1, 1 << 24, &o->stride)) return -1; }
        else if (!strcmp(a, "--threads")) { VAL(); if (arg_int(a, v, 1, 1024, &o->threads)) return -1; }
        else if (!strcmp(a, "--kv-dtype")) {
            VAL();
            if (kvlm_dtype_parse(v, &o->kv_dtype) || o->kv_dtype == KVLM_BF16) {
                fprintf(stderr, "kvlm: --kv-dtype: '%s' is not one of f32, f16\n", v);
                return -1;
            }
        }
        else if (!strcmp(a, "--json")) o->json = 1;
        else { fprintf(stderr, "kvlm perplexity: unknown argument '%s' (see kvlm perplexity --help)\n", a); return -1; }
#undef VAL
    }
    if (!o->model || !o->file) {
        fprintf(stderr, "kvlm perplexity: give both -m MODEL and -f FILE (see kvlm perplexity --help)\n");
        return -1;
    }
    return 0;
}

/* Whole file, malloc'ed; NULL with a message naming the file. */
static char *read_text(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "kvlm perplexity: cannot open text file '%s'\n", path);
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *nb = cap > ((size_t)1 << 40) ? NULL : realloc(buf, cap *= 2);
        if (!nb) { free(buf); buf = NULL; }
        else buf = nb;
    }
    int bad = !buf || ferror(f);
    fclose(f);
    if (bad) {
        fprintf(stderr, "kvlm perplexity: cannot read text file '%s'\n", path);
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* -log softmax(logits)[target], in double. */
static double token_nll(const float *logits, int vocab, int32_t target) {
    float mx = logits[0];
    for (int v = 1; v < vocab; v++) mx = logits[v] > mx ? logits[v] : mx;
    double s = 0;
    for (int v = 0; v < vocab; v++) s += exp((double)logits[v] - mx);
    return log(s) + mx - logits[target];
}

typedef struct ppl_result {
    double nll_sum, seconds;
    long scored, evaluated;
    int windows;
} ppl_result;

/* Runs window [s, e) on a fresh sequence and adds the NLL of the tokens in
 * [score_from, e) (score_from > s). */
static int run_window(kvlm_engine *e, kvlm_kv *kv, int vocab, const int32_t *ids, long s, long end,
                      long score_from, float *logits, ppl_result *r, kvlm_error *err) {
    int seq = kvlm_kv_seq_new(kv, err);
    if (seq < 0) return -1;
    int rc = 0;
    for (long c0 = s; c0 < end && !rc; c0 += CHUNK) {
        int n = (int)(end - c0 < CHUNK ? end - c0 : CHUNK);
        kvlm_batch_item it = {.seq = seq, .tokens = ids + c0, .n_tokens = n, .logits_all = 1};
        if ((rc = kvlm_engine_step(e, &it, 1, logits, err))) break;
        /* position p predicts token p + 1 */
        for (int j = 0; j < n; j++) {
            long target = c0 + j + 1;
            if (target < score_from || target >= end) continue;
            r->nll_sum += token_nll(logits + (size_t)j * vocab, vocab, ids[target]);
            r->scored++;
        }
        r->evaluated += n;
    }
    kvlm_kv_seq_free(kv, seq);
    return rc;
}

static int score(kvlm_engine *e, kvlm_kv *kv, int vocab, const int32_t *ids, long n, int context, int stride,
                 ppl_result *r, kvlm_error *err) {
    float *logits = malloc((size_t)CHUNK * vocab * sizeof *logits);
    if (!logits) return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory for %d x %d logits", CHUNK, vocab);
    double t0 = kvlm_now();
    long prev_end = 0;
    int rc = 0;
    for (long s = 0; s < n && !rc; s += stride) {
        long end = s + context < n ? s + context : n;
        long from = prev_end > s + 1 ? prev_end : s + 1;
        rc = run_window(e, kv, vocab, ids, s, end, from, logits, r, err);
        r->windows++;
        prev_end = end;
        if (end == n) break;
    }
    r->seconds = kvlm_now() - t0;
    free(logits);
    return rc;
}

static void print_result(const ppl_opts *o, const ppl_result *r, long n_tokens, int context, int stride,
                         int threads) {
    double mean = r->nll_sum / (double)r->scored, ppl = exp(mean);
    double tps = r->seconds > 0 ? r->evaluated / r->seconds : 0;
    if (o->json) {
        json_t *j = json_pack("{s:s,s:s,s:i,s:i,s:I,s:I,s:i,s:I,s:f,s:f,s:f,s:f,s:s,s:i}", "model", o->model,
                              "file", o->file, "context", context, "stride", stride, "tokens", (json_int_t)r->scored,
                              "file_tokens", (json_int_t)n_tokens, "windows", r->windows, "evaluated_tokens",
                              (json_int_t)r->evaluated, "mean_nll", mean, "perplexity", ppl, "seconds", r->seconds,
                              "tokens_per_s", tps, "kv_dtype", kvlm_dtype_name(o->kv_dtype), "threads", threads);
        char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(12));
        puts(s);
        free(s);
        json_decref(j);
        return;
    }
    printf("file         %s (%ld tokens)\n"
           "windows      %d of %d tokens, stride %d\n"
           "tokens       %ld scored\n"
           "mean NLL     %.6f nats\n"
           "perplexity   %.4f\n"
           "speed        %.0f tokens/s (%ld tokens through the model in %.2f s, %d threads)\n",
           o->file, n_tokens, r->windows, context, stride, r->scored, mean, ppl, tps, r->evaluated, r->seconds,
           threads);
}

int cli_perplexity(int argc, char **argv) {
    ppl_opts o;
    if (parse(argc, argv, &o)) return EXIT_USAGE;
    size_t text_len = 0;
    char *text = read_text(o.file, &text_len);
    if (!text) return 1;
    kvlm_model *m = cli_load_model(o.model, NULL, KVLM_F32);
    kvlm_error err;
    kvlm_tokenizer *tok = NULL;
    kvlm_kv *kv = NULL;
    kvlm_engine *e = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    int rc = 1;
    if (!m) goto out;
    const kvlm_config *c = kvlm_model_config(m);
    int context = o.context ? o.context : c->n_ctx;
    if (context < 2 || context > c->n_ctx) {
        fprintf(stderr, "kvlm perplexity: --context %d is outside [2, %d] (the model's n_ctx)\n", context, c->n_ctx);
        rc = EXIT_USAGE;
        goto out;
    }
    int stride = o.stride ? o.stride : (context / 2 > 0 ? context / 2 : 1);
    if (stride > context) {
        fprintf(stderr, "kvlm perplexity: --stride %d is outside [1, %d] (the context)\n", stride, context);
        rc = EXIT_USAGE;
        goto out;
    }
    if (!(tok = kvlm_tokenizer_load(kvlm_model_tokenizer_path(m), &err))) {
        fprintf(stderr, "kvlm perplexity: the model needs tokenizer files: %s\n", err.msg);
        goto out;
    }
    if (kvlm_tokenizer_encode(tok, text, text_len, 0, &ids, &n_ids, &err)) {
        fprintf(stderr, "kvlm perplexity: %s: %s\n", o.file, err.msg);
        goto out;
    }
    if (n_ids < 2) {
        fprintf(stderr, "kvlm perplexity: '%s' has %zu tokens; at least 2 are needed\n", o.file, n_ids);
        goto out;
    }
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] >= c->vocab_size) {
            fprintf(stderr, "kvlm perplexity: token id %d of '%s' is outside the model's vocabulary [0, %d)\n",
                    ids[i], o.file, c->vocab_size);
            goto out;
        }
    kvlm_kv_options ko = {.dtype = o.kv_dtype, .max_seqs = 1};
    kvlm_engine_options eo = {.threads = o.threads};
    ppl_result r = {0};
    if (!(kv = kvlm_kv_create(m, &ko, &err)) || !(e = kvlm_engine_create(m, kv, &eo, &err)) ||
        score(e, kv, c->vocab_size, ids, (long)n_ids, context, stride, &r, &err)) {
        fprintf(stderr, "kvlm perplexity: %s\n", err.msg);
        goto out;
    }
    print_result(&o, &r, (long)n_ids, context, stride, kvlm_engine_threads(e));
    rc = 0;
out:
    free(ids);
    free(text);
    kvlm_engine_free(e);
    kvlm_kv_free(kv);
    kvlm_tokenizer_free(tok);
    kvlm_model_free(m);
    return rc;
}
