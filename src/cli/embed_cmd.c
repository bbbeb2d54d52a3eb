/*
 * `kvlm embed`: the embedding of a text or of token ids (kvlm_embed), as
 * /v1/embeddings computes it: the final-normed hidden states pooled as the
 * model's files say (or --pooling), L2-normalised unless --raw. One input
 * from -p, --ids or -f, or with --lines one input per non-empty line of
 * the text (all in one batched call). Prints one line of values per
 * vector (9 significant digits, each reads back as the exact float32), or
 * with --json one document with the pooling and where it came from.
 * Exit status: 0 ok, 1 runtime error, 2 usage error.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/session.h"
#include "kvlm.h"

typedef struct embed_opts {
    model_flags mf;
    const char *pooling;
    int raw, lines, json;
} embed_opts;

static int parse(int argc, char **argv, embed_opts *o) {
    memset(o, 0, sizeof *o);
    model_flags_init(&o->mf);
    const cli_opt own[] = {
        CLI_STR("--pooling", "P",
                "mean, cls, last or none (one vector per token); default: the model's files'\n"
                "(GGUF pooling_type, 1_Pooling/config.json), else last",
                &o->pooling),
        CLI_SWITCH("--raw", "the pooled vectors as they are (default: scaled to length 1)", &o->raw, 1),
        CLI_SWITCH("--lines", "one input per non-empty line of the text (-p or -f)", &o->lines, 1),
        CLI_END,
    };
    cli_spec spec = {
        .cmd = "embed",
        .usage = "embed (-m MODEL | --synthetic PRESET) (-p TEXT | --ids LIST | -f FILE) [--lines] [options]",
        .about = "The embedding of the input, as kvlm serve's /v1/embeddings computes it, one line of\n"
                 "values per vector (docs/server.md, \"Embeddings\").\n",
        .groups = CLI_LOADS_MODEL | CLI_TOKENIZER | CLI_PROMPT | CLI_FILE | CLI_JSON,
        .unused = "it samples nothing",
        .opts = own,
        .mf = &o->mf,
        .json = &o->json,
    };
    int rc = cli_parse(&spec, argc, argv);
    if (rc) return rc;
    if (o->lines && o->mf.ids) return cli_usage_error(&spec, "--lines splits a text: give -p or -f, not --ids");
    return 0;
}

/* The text of -p or -f (malloc'ed), for --lines. */
static char *input_text(const model_flags *mf) {
    if (mf->prompt) return strdup(mf->prompt);
    FILE *f = mf->file ? fopen(mf->file, "rb") : NULL;
    if (!f) return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0, got;
    do {
        if (n + 4096 + 1 > cap) {
            char *b = realloc(buf, cap = 2 * cap + 4096 + 1);
            if (!b) break;
            buf = b;
        }
        got = fread(buf + n, 1, 4096, f);
        n += got;
    } while (got > 0);
    fclose(f);
    if (buf) buf[n] = 0;
    return buf;
}

/* Encodes each non-empty line of text into (*ids)[k], (*n)[k]; returns the
 * count, or -(k + 1) on failure with k lines encoded. */
static int encode_each(const cli_session *ss, char *text, int32_t ***ids, int **n) {
    int k = 0, cap = 0;
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        size_t len = strlen(line);
        if (len && line[len - 1] == '\r') line[--len] = 0;
        if (!len) continue;
        if (k == cap) {
            cap = cap ? 2 * cap : 16;
            int32_t **a = realloc(*ids, (size_t)cap * sizeof *a);
            if (a) *ids = a;
            int *b = a ? realloc(*n, (size_t)cap * sizeof *b) : NULL;
            if (!a || !b) return -k - 1;
            *n = b;
        }
        size_t m = 0;
        kvlm_error err;
        if (kvlm_tokenizer_encode_prompt(ss->tok, line, len, 1, &(*ids)[k], &m, &err)) {
            fprintf(stderr, "kvlm embed: line %d: %s\n", k + 1, err.msg);
            return -k - 1;
        }
        (*n)[k++] = (int)m;
    }
    return k;
}

/* The inputs of --lines: returns their count (*ids[0..count) malloc'ed),
 * or -1 with nothing left allocated. */
static int encode_lines(const cli_session *ss, char *text, int32_t ***ids, int **n) {
    *ids = NULL;
    *n = NULL;
    const int k = encode_each(ss, text, ids, n);
    if (k >= 0) return k;
    for (int i = 0; *ids && i < -k - 1; i++) free((*ids)[i]);
    free(*ids);
    free(*n);
    *ids = NULL;
    *n = NULL;
    return -1;
}

static void print_vectors(const float *v, const int *n, int n_in, int C, int per_token, int json,
                          const cli_session *ss, const char *pool, const char *src, int raw) {
    if (!json) {
        size_t rows = 0;
        for (int i = 0; i < n_in; i++) rows += per_token ? (size_t)n[i] : 1;
        for (size_t r = 0; r < rows; r++)
            for (int c = 0; c < C; c++) printf(c + 1 < C ? "%.9g " : "%.9g\n", (double)v[r * C + c]);
        return;
    }
    printf("{\"arch\":\"%s\",\"pooling\":\"%s\",\"pooling_source\":\"%s\",\"normalized\":%s,\"n_embd\":%d,\"data\":[",
           ss->c->arch, pool, src, raw ? "false" : "true", C);
    size_t r = 0;
    for (int i = 0; i < n_in; i++) {
        printf("%s{\"index\":%d,\"tokens\":%d,\"embedding\":", i ? "," : "", i, n[i]);
        const int rows = per_token ? n[i] : 1;
        printf(per_token ? "[" : "");
        for (int t = 0; t < rows; t++, r++) {
            printf("%s[", t ? "," : "");
            for (int c = 0; c < C; c++) printf(c ? ",%.9g" : "%.9g", (double)v[r * C + c]);
            printf("]");
        }
        printf(per_token ? "]}" : "}");
    }
    printf("]}\n");
}

int cli_embed(int argc, char **argv) {
    embed_opts o;
    if (parse(argc, argv, &o)) return EXIT_USAGE;
    int rc;
    kvlm_embed_params p = kvlm_embed_default_params();
    p.raw = o.raw;
    kvlm_error err;
    if (o.pooling && kvlm_pooling_parse(o.pooling, &p.pooling, &err)) {
        fprintf(stderr, "kvlm embed: --pooling: %s\n", err.msg);
        return EXIT_USAGE;
    }
    cli_session ss;
    if ((rc = session_open(&ss, &o.mf, o.lines ? SESSION_TOKENIZER : SESSION_PROMPT))) {
        session_close(&ss);
        return rc;
    }
    int32_t **ids = NULL;
    int *n = NULL, n_in = 1, one = (int)ss.n_prompt;
    char *text = NULL;
    if (o.lines) {
        text = input_text(&o.mf);
        n_in = text ? encode_lines(&ss, text, &ids, &n) : -1;
        if (n_in == 0) fprintf(stderr, "kvlm embed: --lines: the text has no non-empty line\n");
    } else {
        ids = &ss.prompt;
        n = &one;
    }
    const char *src = "the flag";
    const kvlm_pooling pool = p.pooling == KVLM_POOLING_UNSPECIFIED ? kvlm_model_pooling(ss.m, &src) : p.pooling;
    kvlm_kv *kv = NULL;
    kvlm_engine *e = NULL;
    float *out = NULL;
    rc = n_in > 0 ? 0 : 1;
    if (!rc) {
        kvlm_kv_options ko = kvlm_kv_default_params();
        ko.dtype = o.mf.kv_dtype;
        ko.block_size = o.mf.block_size;
        ko.max_seqs = n_in < 64 ? n_in : 64;
        ko.no_prefix_cache = 1;
        kvlm_engine_options eo = session_engine_options(&o.mf);
        kv = kvlm_kv_create(ss.m, &ko, &err);
        e = kv ? kvlm_engine_create(ss.m, kv, &eo, &err) : NULL;
        const size_t need = e ? kvlm_embed_size(e, n, n_in, &p) : 0;
        out = need ? malloc(need * sizeof *out) : NULL;
        if (!e || kvlm_embed(e, (const int32_t *const *)ids, n, n_in, &p, out, out ? need : 0, &err)) {
            fprintf(stderr, "kvlm embed: %s\n", err.msg);
            rc = 1;
        }
    }
    if (!rc)
        print_vectors(out, n, n_in, ss.c->n_embd, pool == KVLM_POOLING_NONE, o.json, &ss, kvlm_pooling_name(pool),
                      src, o.raw);
    free(out);
    kvlm_engine_free(e);
    kvlm_kv_free(kv);
    if (o.lines) {
        for (int i = 0; ids && i < n_in; i++) free(ids[i]);
        free(ids);
        free(n);
    }
    free(text);
    session_close(&ss);
    return rc;
}
