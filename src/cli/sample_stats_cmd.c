/*
 * `kvlm sample-stats`: what temperature (and optionally top-k / top-p /
 * min-p) does to the next-token distribution after a prompt. One prefill,
 * then for each temperature: entropy in nats, top-1 probability, top-5
 * mass and the number of tokens needed to cover 90% of the mass.
 * measure_sample_stats (measure.h) computes the JSON document; the human
 * table is printed from it, so both outputs (and `kvlm report`) agree.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/measure.h"
#include "cli/options.h"
#include "cli/session.h"
#include "app/json_text.h"
#include "kvlm_measure.h"

#define MAX_TEMPS 32

typedef struct ss_opts {
    model_flags mf;
    float temps[MAX_TEMPS];
    int n_temps, top_k, top_n, json;
    float top_p, min_p;
} ss_opts;

static int parse_temps(const char *flag, const char *v, void *dst) {
    ss_opts *o = dst;
    return arg_floats(flag, v, 1e-3, 100, o->temps, MAX_TEMPS, &o->n_temps);
}

static int parse(int argc, char **argv, ss_opts *o) {
    *o = (ss_opts){.top_p = 1, .top_n = 5};
    model_flags_init(&o->mf);
    parse_temps("--temps", "0.2,0.7,1.0,1.5", o);
    const cli_opt own[] = {
        CLI_FN("--temps", "LIST", "temperatures (default 0.2,0.7,1.0,1.5; each > 0)", parse_temps, o),
        CLI_INT("--top-k", "K", "also report the distribution top-k K keeps (default 0 = off)", &o->top_k, 0, 1 << 22),
        CLI_FLOAT("--top-p", "P", "also report the distribution top-p P keeps (default 1 = off)", &o->top_p, 1e-6, 1),
        CLI_FLOAT("--min-p", "P", "also report the distribution min-p P keeps (default 0 = off)", &o->min_p, 0, 1),
        CLI_INT("--top", "N", "list the N most likely tokens at temperature 1 (default 5)", &o->top_n, 0, 100),
        CLI_END,
    };
    cli_spec spec = {
        .cmd = "sample-stats",
        .usage = "sample-stats (-m MODEL | --synthetic PRESET) (-p TEXT | --ids LIST | -f FILE) [options]",
        .about = "Statistics of the next-token distribution after the prompt, per temperature:\n"
                 "  entropy (nats) = -sum p ln p; top-1 = largest p; top-5 = mass of the 5 largest;\n"
                 "  tokens for 90% = size of the smallest set of most likely tokens with mass >= 0.9.\n",
        .groups = CLI_LOADS_MODEL | CLI_TOKENIZER | CLI_PROMPT | CLI_FILE | CLI_JSON,
        .unused = "it samples nothing; --temps and the filters --top-k, --top-p, --min-p apply",
        .opts = own,
        .mf = &o->mf,
        .json = &o->json,
    };
    return cli_parse(&spec, argc, argv);
}

/* Next-token logits after the prompt (one prefill on a fresh sequence). */
static float *next_logits(const cli_session *ss, const model_flags *mf) {
    kvlm_error err;
    kvlm_kv_options ko = kvlm_kv_default_params();
    ko.dtype = mf->kv_dtype;
    ko.block_size = mf->block_size;
    ko.max_seqs = 1;
    kvlm_engine_options eo = session_engine_options(mf);
    kvlm_kv *kv = kvlm_kv_create(ss->m, &ko, &err);
    kvlm_engine *e = kv ? kvlm_engine_create(ss->m, kv, &eo, &err) : NULL;
    float *lg = malloc((size_t)ss->c->vocab_size * sizeof(float));
    int seq = e ? kvlm_kv_seq_new(kv, &err) : -1;
    kvlm_batch_item it = {.seq = seq, .tokens = ss->prompt, .n_tokens = (int)ss->n_prompt};
    if (!lg || seq < 0 || kvlm_engine_step(e, &it, 1, lg, &err)) {
        fprintf(stderr, "kvlm: %s\n", lg ? err.msg : "out of memory");
        free(lg);
        lg = NULL;
    }
    kvlm_engine_free(e);
    kvlm_kv_free(kv);
    return lg;
}

static json_t *stats_json(const kvlm_dist_stats *s) {
    return json_pack("{s:f,s:f,s:f,s:i,s:i}", "entropy", s->entropy, "top1", s->top1, "top5", s->top5, "n90", s->n90,
                     "support", s->support);
}

/* A token's bytes for display: newlines and control bytes escaped. */
static void piece_text(const cli_session *ss, int32_t id, char *out, size_t cap) {
    size_t len = 0, o = 0;
    const char *p = ss->tok ? kvlm_tokenizer_piece(ss->tok, id, &len) : NULL;
    if (!p) { snprintf(out, cap, "#%d", id); return; }
    for (size_t i = 0; i < len && o + 5 < cap; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch == '\n') o += (size_t)snprintf(out + o, cap - o, "\\n");
        else if (ch < 0x20) o += (size_t)snprintf(out + o, cap - o, "\\x%02x", ch);
        else out[o++] = (char)ch;
    }
    out[o] = 0;
}

/* One temperature's row: the plain distribution and, with filters, the kept one. */
static json_t *temp_row(const float *lg, int V, float temp, const sample_stats_params *p, int filtered,
                        kvlm_error *err) {
    kvlm_dist_stats st, sf = {0};
    if (kvlm_dist_stats_compute(lg, V, temp, NULL, &st, err)) return NULL;
    if (filtered) {
        kvlm_sampler_options so = kvlm_sampler_default_params();
        so.temperature = temp, so.top_k = p->top_k, so.top_p = p->top_p, so.min_p = p->min_p;
        kvlm_sampler *smp = kvlm_sampler_create(&so, V, err);
        int rc = smp ? kvlm_dist_stats_compute(lg, V, temp, smp, &sf, err) : -1;
        kvlm_sampler_free(smp);
        if (rc) return NULL;
    }
    json_t *row = json_pack("{s:f,s:o}", "temperature", (double)temp, "stats", stats_json(&st));
    if (filtered) json_object_set_new(row, "filtered", stats_json(&sf));
    return row;
}

static json_t *top_tokens(const cli_session *ss, const float *lg, int V, int top_n) {
    int32_t ids[100];
    float lp[100];
    int k = kvlm_top_logprobs(lg, V, top_n < 100 ? top_n : 100, ids, lp);
    json_t *top = json_array();
    for (int i = 0; i < k; i++) {
        char piece[128];
        piece_text(ss, ids[i], piece, sizeof piece);
        /* a token may hold part of a UTF-8 character: U+FFFD in JSON */
        json_array_append_new(top, json_pack("{s:i,s:o,s:f}", "id", ids[i], "piece",
                                             ts_json_string(piece, strlen(piece)), "p", exp(lp[i])));
    }
    return top;
}

json_t *measure_sample_stats(const cli_session *ss, const model_flags *mf, const sample_stats_params *p) {
    float *lg = next_logits(ss, mf);
    if (!lg) return NULL;
    const int V = ss->c->vocab_size;
    const int filtered = p->top_k > 0 || p->top_p < 1 || p->min_p > 0;
    json_t *rows = json_array();
    kvlm_error err;
    for (int t = 0; t < p->n_temps; t++) {
        json_t *row = temp_row(lg, V, p->temps[t], p, filtered, &err);
        if (!row) {
            fprintf(stderr, "kvlm: %s\n", err.msg);
            json_decref(rows);
            free(lg);
            return NULL;
        }
        json_array_append_new(rows, row);
    }
    json_t *root = json_pack("{s:I,s:i,s:o,s:o}", "prompt_tokens", (json_int_t)ss->n_prompt, "vocab", V,
                             "temperatures", rows, "top_tokens", top_tokens(ss, lg, V, p->top_n));
    if (filtered)
        json_object_set_new(root, "filters", json_pack("{s:i,s:f,s:f}", "top_k", p->top_k, "top_p", (double)p->top_p,
                                                       "min_p", (double)p->min_p));
    free(lg);
    return root;
}

static double num(const json_t *o, const char *key) { return json_number_value(json_object_get(o, key)); }
static int inum(const json_t *o, const char *key) { return (int)json_integer_value(json_object_get(o, key)); }

/* The human table, from the document (pieces re-read from the tokenizer so
 * that their raw bytes are shown). */
static void print_human(const cli_session *ss, const json_t *doc) {
    const json_t *filters = json_object_get(doc, "filters"), *rows = json_object_get(doc, "temperatures"),
                 *top = json_object_get(doc, "top_tokens");
    printf("next-token distribution after %d prompt tokens (vocabulary %d)\n\n", inum(doc, "prompt_tokens"),
           inum(doc, "vocab"));
    printf("%-12s %14s %10s %10s %15s", "temperature", "entropy (nats)", "top-1", "top-5", "tokens for 90%");
    if (filters)
        printf("   | after top-k %d, top-p %g, min-p %g: %s %s %s", inum(filters, "top_k"), num(filters, "top_p"),
               num(filters, "min_p"), "kept", "entropy", "top-1");
    printf("\n");
    size_t i;
    const json_t *row;
    json_array_foreach(rows, i, row) {
        const json_t *st = json_object_get(row, "stats"), *sf = json_object_get(row, "filtered");
        printf("%-12.2f %14.2f %9.1f%% %9.1f%% %15d", num(row, "temperature"), num(st, "entropy"),
               100 * num(st, "top1"), 100 * num(st, "top5"), inum(st, "n90"));
        if (sf) printf("   | %d %.2f %.1f%%", inum(sf, "support"), num(sf, "entropy"), 100 * num(sf, "top1"));
        printf("\n");
    }
    if (json_array_size(top)) printf("\nmost likely next tokens at temperature 1:\n");
    json_array_foreach(top, i, row) {
        char piece[128];
        piece_text(ss, inum(row, "id"), piece, sizeof piece);
        printf("  %6d  %6.2f%%  '%s'\n", inum(row, "id"), 100 * num(row, "p"), piece);
    }
}

int cli_sample_stats(int argc, char **argv) {
    ss_opts o;
    if (parse(argc, argv, &o)) return EXIT_USAGE;
    cli_session ss;
    int rc = session_open(&ss, &o.mf, 1);
    if (rc) {
        session_close(&ss);
        return rc;
    }
    sample_stats_params p = {.temps = o.temps, .n_temps = o.n_temps, .top_k = o.top_k, .top_p = o.top_p,
                             .min_p = o.min_p, .top_n = o.top_n};
    json_t *doc = measure_sample_stats(&ss, &o.mf, &p);
    if (doc && o.json) {
        cli_print_json(doc);
    } else if (doc) {
        print_human(&ss, doc);
    }
    rc = doc ? 0 : 1;
    json_decref(doc);
    session_close(&ss);
    return rc;
}
