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
 * --chunks is llama.cpp's llama-perplexity protocol instead, so the two
 * engines' numbers compare on the same file: the text is encoded with the
 * tokens the vocabulary adds (BOS first when it says so), cut into
 * floor(N / context) non-overlapping chunks of `context` tokens (the rest
 * is dropped; at least 2 x context tokens are required); each chunk runs
 * on a fresh sequence with its first token replaced by BOS (when the
 * vocabulary adds BOS) and scores only its second half: the tokens at
 * positions context/2 + 1 .. context - 1, context - context/2 - 1 per chunk.
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
#include "cli/options.h"
#include "cli/session.h"

#define CHUNK 256

typedef struct ppl_opts {
    model_flags mf;
    int context, stride, json, chunks;
} ppl_opts;

static int parse(int argc, char **argv, ppl_opts *o) {
    *o = (ppl_opts){0};
    model_flags_init(&o->mf);
    const cli_opt own[] = {
        CLI_INT("--context", "N", "window length in tokens, 2..n_ctx (default: the model's n_ctx)", &o->context, 2,
                1 << 24),
        CLI_INT("--stride", "S", "window step in tokens, 1..context (default: context / 2)", &o->stride, 1, 1 << 24),
        CLI_SWITCH("--chunks", "llama.cpp's llama-perplexity protocol: BOS-led chunks of N tokens, second halves scored",
                   &o->chunks, 1),
        CLI_END,
    };
    cli_spec spec = {
        .cmd = "perplexity",
        .usage = "perplexity (-m MODEL | --synthetic PRESET) -f FILE [options]",
        .about = "Sliding-window perplexity of the text in FILE (encoded without special tokens).\n",
        .groups = CLI_LOADS_MODEL | CLI_TOKENIZER | CLI_FILE | CLI_JSON,
        .unused = "it scores the text of -f FILE",
        .opts = own,
        .notes = "Sliding windows of N tokens start every S tokens. The first window scores\n"
                 "every token after its first; each later window scores only the tokens no\n"
                 "earlier window scored (its last positions), conditioned on the window's\n"
                 "preceding tokens. With stride < context every token but the first of the\n"
                 "file is scored once; with stride == context each window's first token is not.\n"
                 "--chunks follows llama.cpp's llama-perplexity -c N instead: the text encoded\n"
                 "with BOS when the vocabulary adds it, floor(tokens / N) chunks of N tokens\n"
                 "(at least 2 x N tokens needed), each with BOS as its first token when the\n"
                 "vocabulary adds it, scoring positions N/2 + 1 .. N - 1 of every chunk.\n"
                 "Reports the tokens scored, the mean negative log-likelihood in nats and\n"
                 "perplexity = exp(mean NLL).\n",
        .mf = &o->mf,
        .json = &o->json,
    };
    if (cli_parse(&spec, argc, argv)) return -1;
    if (!o->mf.file) return cli_usage_error(&spec, "no text: give -f FILE");
    return 0;
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

/* llama.cpp's protocol (see the header): chunk c is ids[c x context ..
 * (c + 1) x context) with its first token replaced by bos (when bos >= 0),
 * scoring targets context/2 + 1 .. context - 1. */
static int score_chunks(kvlm_engine *e, kvlm_kv *kv, int vocab, const int32_t *ids, long n, int context,
                        int32_t bos, ppl_result *r, kvlm_error *err) {
    float *logits = malloc((size_t)CHUNK * vocab * sizeof *logits);
    int32_t *buf = malloc((size_t)context * sizeof *buf);
    if (!logits || !buf) {
        free(logits);
        free(buf);
        return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory for %d x %d logits", CHUNK, vocab);
    }
    double t0 = kvlm_now();
    int rc = 0;
    for (long c = 0; c < n / context && !rc; c++) {
        memcpy(buf, ids + c * context, (size_t)context * sizeof *buf);
        if (bos >= 0) buf[0] = bos;
        rc = run_window(e, kv, vocab, buf, 0, context, context / 2 + 1, logits, r, err);
        r->windows++;
    }
    r->seconds = kvlm_now() - t0;
    free(buf);
    free(logits);
    return rc;
}

static void print_result(const ppl_opts *o, const ppl_result *r, long n_tokens, int context, int stride,
                         int threads) {
    double mean = r->nll_sum / (double)r->scored, ppl = exp(mean);
    double tps = r->seconds > 0 ? r->evaluated / r->seconds : 0;
    if (o->json) {
        json_t *j = json_pack("{s:s,s:s,s:s,s:i,s:i,s:I,s:I,s:i,s:I,s:f,s:f,s:f,s:f,s:s,s:i}", "protocol",
                              o->chunks ? "chunks" : "sliding", "model",
                              o->mf.model ? o->mf.model : o->mf.synthetic, "file", o->mf.file, "context", context, "stride", stride, "tokens", (json_int_t)r->scored,
                              "file_tokens", (json_int_t)n_tokens, "windows", r->windows, "evaluated_tokens",
                              (json_int_t)r->evaluated, "mean_nll", mean, "perplexity", ppl, "seconds", r->seconds,
                              "tokens_per_s", tps, "kv_dtype", kvlm_dtype_name(o->mf.kv_dtype), "threads", threads);
        char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(12));
        puts(s);
        free(s);
        json_decref(j);
        return;
    }
    if (o->chunks)
        printf("protocol     llama.cpp chunks: %d of %d tokens, second halves scored\n", r->windows, context);
    printf("file         %s (%ld tokens)\n"
           "windows      %d of %d tokens, stride %d\n"
           "tokens       %ld scored\n"
           "mean NLL     %.6f nats\n"
           "perplexity   %.4f\n"
           "speed        %.0f tokens/s (%ld tokens through the model in %.2f s, %d threads)\n",
           o->mf.file, n_tokens, r->windows, context, stride, r->scored, mean, ppl, tps, r->evaluated, r->seconds,
           threads);
}

int cli_perplexity(int argc, char **argv) {
    ppl_opts o;
    if (parse(argc, argv, &o)) return EXIT_USAGE;
    size_t text_len = 0;
    char *text = arg_read_file("-f", o.mf.file, &text_len);
    if (!text) return 1;
    cli_session ss;
    kvlm_error err;
    kvlm_kv *kv = NULL;
    kvlm_engine *e = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    o.mf.no_repack = 1; /* windows of many tokens: their matmuls would unpack packed rows on every call */
    int rc = session_open(&ss, &o.mf, SESSION_TOKENIZER);
    if (rc) goto out;
    rc = 1;
    const kvlm_config *c = ss.c;
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
    if (o.chunks && o.stride) {
        fprintf(stderr, "kvlm perplexity: --stride does not apply to --chunks (chunks do not overlap)\n");
        rc = EXIT_USAGE;
        goto out;
    }
    if (o.chunks) stride = context;
    if (kvlm_tokenizer_encode_ex(ss.tok, text, text_len, o.chunks ? KVLM_ENCODE_ADD_SPECIAL : 0, &ids, &n_ids,
                                 &err)) {
        fprintf(stderr, "kvlm perplexity: %s: %s\n", o.mf.file, err.msg);
        goto out;
    }
    if (n_ids < 2) {
        fprintf(stderr, "kvlm perplexity: '%s' has %zu tokens; at least 2 are needed\n", o.mf.file, n_ids);
        goto out;
    }
    if (o.chunks && n_ids < (size_t)2 * context) {
        fprintf(stderr, "kvlm perplexity: '%s' has %zu tokens; --chunks with --context %d needs at least %d\n",
                o.mf.file, n_ids, context, 2 * context);
        goto out;
    }
    for (size_t i = 0; i < n_ids; i++)
        if (ids[i] >= c->vocab_size) {
            fprintf(stderr, "kvlm perplexity: token id %d of '%s' is outside the model's vocabulary [0, %d)\n",
                    ids[i], o.mf.file, c->vocab_size);
            goto out;
        }
    kvlm_kv_options ko = kvlm_kv_default_params();
    ko.dtype = o.mf.kv_dtype;
    ko.block_size = o.mf.block_size;
    ko.max_seqs = 1;
    kvlm_engine_options eo = session_engine_options(&o.mf);
    ppl_result r = {0};
    if (!(kv = kvlm_kv_create(ss.m, &ko, &err)) || !(e = kvlm_engine_create(ss.m, kv, &eo, &err)) ||
        (o.chunks ? score_chunks(e, kv, c->vocab_size, ids, (long)n_ids, context,
                                 kvlm_tokenizer_add_bos(ss.tok) ? kvlm_tokenizer_bos_id(ss.tok) : KVLM_NO_TOKEN, &r, &err)
                  : score(e, kv, c->vocab_size, ids, (long)n_ids, context, stride, &r, &err))) {
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
    session_close(&ss);
    return rc;
}
