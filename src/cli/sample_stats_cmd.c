/*
 * `kvlm sample-stats`: what temperature (and optionally top-k / top-p /
 * min-p) does to the next-token distribution after a prompt. One prefill,
 * then for each temperature: entropy in nats, top-1 probability, top-5
 * mass and the number of tokens needed to cover 90% of the mass.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/session.h"

static const char *usage =
    "usage: kvlm sample-stats (-m MODEL | --synthetic PRESET) (-p TEXT | --ids LIST) [options]\n"
    "Statistics of the next-token distribution after the prompt, per temperature:\n"
    "  entropy (nats) = -sum p ln p; top-1 = largest p; top-5 = mass of the 5 largest;\n"
    "  tokens for 90% = size of the smallest set of most likely tokens with mass >= 0.9.\n";
static const char *usage_own =
    "  --temps LIST       temperatures (default 0.2,0.7,1.0,1.5; each > 0)\n"
    "  --top-k K, --top-p P, --min-p P\n"
    "                     also report the distribution the sampler keeps after these filters\n"
    "  --top N            list the N most likely tokens at temperature 1 (default 5)\n"
    "  --json             one JSON document\n";

#define MAX_TEMPS 32

typedef struct ss_opts {
    model_flags mf;
    float temps[MAX_TEMPS];
    int n_temps, top_k, top_n, json;
    float top_p, min_p;
} ss_opts;

static int parse_temps(const char *s, ss_opts *o) {
    o->n_temps = 0;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (o->n_temps == MAX_TEMPS || arg_float("--temps", t, 1e-3, 100, &o->temps[o->n_temps])) return -1;
        o->n_temps++;
    }
    if (!o->n_temps) {
        fprintf(stderr, "kvlm: --temps: no temperatures given\n");
        return -1;
    }
    return 0;
}

static int parse(int argc, char **argv, ss_opts *o) {
    *o = (ss_opts){.top_p = 1, .top_n = 5};
    model_flags_init(&o->mf);
    parse_temps("0.2,0.7,1.0,1.5", o);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int r = model_flags_parse(&o->mf, argc, argv, &i);
        if (r < 0) return -1;
        if (r > 0) continue;
#define VAL() do { if (!(v = arg_value(argc, argv, &i))) return -1; } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { printf("%s%s%s", usage, model_flags_help, usage_own); exit(0); }
        else if (!strcmp(a, "--temps")) { VAL(); if (parse_temps(v, o)) return -1; }
        else if (!strcmp(a, "--top-k")) { VAL(); if (arg_int(a, v, 0, 1 << 22, &o->top_k)) return -1; }
        else if (!strcmp(a, "--top-p")) { VAL(); if (arg_float(a, v, 1e-6, 1, &o->top_p)) return -1; }
        else if (!strcmp(a, "--min-p")) { VAL(); if (arg_float(a, v, 0, 1, &o->min_p)) return -1; }
        else if (!strcmp(a, "--top")) { VAL(); if (arg_int(a, v, 0, 100, &o->top_n)) return -1; }
        else if (!strcmp(a, "--json")) o->json = 1;
        else { fprintf(stderr, "kvlm sample-stats: unknown argument '%s' (see --help)\n", a); return -1; }
#undef VAL
    }
    return 0;
}

/* Next-token logits after the prompt (one prefill on a fresh sequence). */
static float *next_logits(const cli_session *ss, const model_flags *mf) {
    kvlm_error err;
    kvlm_kv_options ko = {.dtype = mf->kv_dtype, .block_size = mf->block_size, .max_seqs = 1};
    kvlm_engine_options eo = session_engine_options(mf, 0);
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

int cli_sample_stats(int argc, char **argv) {
    ss_opts o;
    if (parse(argc, argv, &o)) return EXIT_USAGE;
    cli_session ss;
    int rc = session_open(&ss, &o.mf, 1);
    float *lg = rc ? NULL : next_logits(&ss, &o.mf);
    if (rc || !lg) {
        session_close(&ss);
        return rc ? rc : 1;
    }
    const int V = ss.c->vocab_size;
    const int filtered = o.top_k > 0 || o.top_p < 1 || o.min_p > 0;
    json_t *rows = json_array();
    kvlm_error err;
    rc = 0;
    if (!o.json) {
        printf("next-token distribution after %zu prompt tokens (vocabulary %d)\n\n", ss.n_prompt, V);
        printf("%-12s %14s %10s %10s %15s", "temperature", "entropy (nats)", "top-1", "top-5", "tokens for 90%");
        if (filtered) printf("   | after top-k %d, top-p %g, min-p %g: %s %s %s", o.top_k, o.top_p, o.min_p, "kept",
                             "entropy", "top-1");
        printf("\n");
    }
    for (int t = 0; t < o.n_temps && !rc; t++) {
        kvlm_dist_stats st, sf = {0};
        rc = kvlm_dist_stats_compute(lg, V, o.temps[t], NULL, &st, &err);
        if (!rc && filtered) {
            kvlm_sampler_options so = kvlm_sampler_options_default();
            so.temperature = o.temps[t], so.top_k = o.top_k, so.top_p = o.top_p, so.min_p = o.min_p;
            kvlm_sampler *smp = kvlm_sampler_create(&so, V, &err);
            rc = smp ? kvlm_dist_stats_compute(lg, V, o.temps[t], smp, &sf, &err) : err.code;
            kvlm_sampler_free(smp);
        }
        if (rc) break;
        json_t *row = json_pack("{s:f,s:o}", "temperature", (double)o.temps[t], "stats", stats_json(&st));
        if (filtered) json_object_set_new(row, "filtered", stats_json(&sf));
        json_array_append_new(rows, row);
        if (!o.json) {
            printf("%-12.2f %14.2f %9.1f%% %9.1f%% %15d", o.temps[t], st.entropy, 100 * st.top1, 100 * st.top5, st.n90);
            if (filtered) printf("   | %d %.2f %.1f%%", sf.support, sf.entropy, 100 * sf.top1);
            printf("\n");
        }
    }
    if (rc) {
        fprintf(stderr, "kvlm: %s\n", err.msg);
        rc = 1;
    } else {
        int32_t ids[100];
        float lp[100];
        int k = kvlm_top_logprobs(lg, V, o.top_n, ids, lp);
        json_t *top = json_array();
        if (!o.json && k) printf("\nmost likely next tokens at temperature 1:\n");
        for (int i = 0; i < k; i++) {
            char piece[128];
            piece_text(&ss, ids[i], piece, sizeof piece);
            json_array_append_new(top, json_pack("{s:i,s:s,s:f}", "id", ids[i], "piece", piece, "p", exp(lp[i])));
            if (!o.json) printf("  %6d  %6.2f%%  '%s'\n", ids[i], 100 * exp(lp[i]), piece);
        }
        if (o.json) {
            json_t *root = json_pack("{s:I,s:i,s:o,s:o}", "prompt_tokens", (json_int_t)ss.n_prompt, "vocab", V,
                                     "temperatures", rows, "top_tokens", top);
            if (filtered)
                json_object_set_new(root, "filters", json_pack("{s:i,s:f,s:f}", "top_k", o.top_k, "top_p",
                                                               (double)o.top_p, "min_p", (double)o.min_p));
            char *s = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
            puts(s);
            free(s);
            json_decref(root);
            rows = NULL;
        } else {
            json_decref(top);
        }
    }
    json_decref(rows);
    free(lg);
    session_close(&ss);
    return rc;
}
