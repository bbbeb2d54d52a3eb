/*
 * `kvlm gen-stats`: what decoding settings do to repetition. Generates the
 * same number of tokens from the same prompt and seed under each setting
 * (greedy, temperatures 0.2 to 1.5, top-p, top-k) and reports the
 * distinct-token ratio and the repeated 4-gram rate of each output.
 * measure_gen_stats (measure.h) computes the JSON document; the human
 * table is printed from it.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/generate.h"
#include "cli/measure.h"
#include "cli/options.h"
#include "cli/session.h"
#include "app/json_text.h"
#include "kvlm_measure.h"

typedef struct setting {
    const char *name;
    float temperature, top_p;
    int top_k;
} setting;

static const setting settings[] = {
    {"greedy", 0, 1, 0},
    {"temperature 0.2", 0.2f, 1, 0},
    {"temperature 0.7", 0.7f, 1, 0},
    {"temperature 1.0", 1.0f, 1, 0},
    {"temperature 1.5", 1.5f, 1, 0},
    {"temperature 0.7, top-p 0.9", 0.7f, 0.9f, 0},
    {"temperature 0.7, top-k 5", 0.7f, 1, 5},
};
#define N_SETTINGS (int)(sizeof settings / sizeof settings[0])

typedef struct gs_opts {
    model_flags mf;
    int n, stop_at_eos, json;
    uint64_t seed;
} gs_opts;

static int parse(int argc, char **argv, gs_opts *o) {
    *o = (gs_opts){.n = 60, .seed = 1};
    model_flags_init(&o->mf);
    const cli_opt own[] = {
        CLI_INT("-n", "N", "tokens per setting (default 60)", &o->n, 1, 1 << 20),
        CLI_U64("--seed", "S", "seed shared by every setting (default 1)", &o->seed),
        CLI_SWITCH("--stop-at-eos", "end a generation at the end-of-sequence token", &o->stop_at_eos, 1),
        CLI_END,
    };
    cli_spec spec = {
        .cmd = "gen-stats",
        .usage = "gen-stats (-m MODEL | --synthetic PRESET) (-p TEXT | --ids LIST | -f FILE) [options]",
        .about =
            "Generates -n tokens under each setting from the same prompt and seed and reports:\n"
            "  distinct-token ratio = distinct generated ids / generated ids;\n"
            "  repeated 4-gram rate = share of the generated 4-grams (runs of 4 consecutive\n"
            "  generated ids) that already occurred earlier in the same generation.\n"
            "Settings: greedy; temperature 0.2, 0.7, 1.0, 1.5; temperature 0.7 with top-p 0.9;\n"
            "temperature 0.7 with top-k 5. Generation does not stop at end-of-sequence unless\n"
            "--stop-at-eos is given, so every setting is measured over the same length.\n"
            "--json prints the full texts too.\n",
        .groups = CLI_LOADS_MODEL | CLI_TOKENIZER | CLI_PROMPT | CLI_FILE | CLI_JSON,
        .unused = "its decoding settings are fixed; --seed and -n apply",
        .opts = own,
        .mf = &o->mf,
        .json = &o->json,
    };
    return cli_parse(&spec, argc, argv);
}

/* One setting: one request with the shared seed (the same generation path
 * as kvlm run). */
static json_t *run_setting(const cli_session *ss, kvlm_engine *e, kvlm_kv *kv, const gen_stats_params *p,
                           const setting *st, int max_new) {
    kvlm_error err;
    gen_request rq = {.prompt = ss->prompt, .n_prompt = (int)ss->n_prompt, .max_new = max_new,
                      .sampling = kvlm_sampler_default_params(), .text = 1, .tok = ss->tok};
    rq.sampling.temperature = st->temperature, rq.sampling.top_p = st->top_p, rq.sampling.top_k = st->top_k;
    rq.sampling.seed = p->seed;
    int32_t eos[KVLM_MAX_EOS + 1];
    if (p->stop_at_eos) {
        rq.eos_ids = eos;
        rq.n_eos = kvlm_eos_ids(ss->m, ss->tok, eos, KVLM_MAX_EOS + 1);
        if (rq.n_eos > KVLM_MAX_EOS + 1) rq.n_eos = KVLM_MAX_EOS + 1;
    }
    gen_result g = {0};
    json_t *row = NULL;
    if (gen_run(e, kv, ss->c->vocab_size, &rq, &g, &err)) {
        fprintf(stderr, "kvlm: %s\n", err.msg);
    } else {
        double distinct = kvlm_distinct_ratio(g.ids, g.n_ids), rep4 = kvlm_repeated_ngram_rate(g.ids, g.n_ids, 4);
        json_t *ids = json_array();
        for (int i = 0; i < g.n_ids; i++) json_array_append_new(ids, json_integer(g.ids[i]));
        row = json_pack("{s:s,s:f,s:f,s:i,s:f,s:f,s:i,s:o,s:o}", "setting", st->name, "temperature",
                        (double)st->temperature, "top_p", (double)st->top_p, "top_k", st->top_k, "distinct_ratio",
                        distinct, "repeated_4gram_rate", rep4, "tokens", g.n_ids, "text",
                        ts_json_string(g.text, g.text_len), "ids", ids);
        fprintf(stderr, "gen-stats: %s done\n", st->name);
    }
    gen_result_free(&g);
    return row;
}

json_t *measure_gen_stats(const cli_session *ss, const model_flags *mf, const gen_stats_params *p) {
    kvlm_error err;
    int max_new = p->n;
    if ((long)ss->n_prompt >= ss->c->n_ctx) {
        fprintf(stderr, "kvlm gen-stats: the prompt has %zu tokens; the context window of %d leaves no room to "
                "generate\n", ss->n_prompt, ss->c->n_ctx);
        return NULL;
    }
    if ((long)ss->n_prompt + p->n > ss->c->n_ctx) {
        max_new = ss->c->n_ctx - (int)ss->n_prompt;
        fprintf(stderr, "kvlm gen-stats: -n %d would pass the context window of %d; generating %d\n", p->n,
                ss->c->n_ctx, max_new);
    }
    kvlm_kv_options ko = kvlm_kv_default_params();
    ko.dtype = mf->kv_dtype;
    ko.block_size = mf->block_size;
    ko.max_seqs = 1;
    kvlm_engine_options eo = session_engine_options(mf);
    kvlm_kv *kv = kvlm_kv_create(ss->m, &ko, &err);
    kvlm_engine *e = kv ? kvlm_engine_create(ss->m, kv, &eo, &err) : NULL;
    json_t *rows = json_array(), *root = NULL;
    if (!e) fprintf(stderr, "kvlm: %s\n", err.msg);
    for (int i = 0; e && i < N_SETTINGS; i++) {
        json_t *row = run_setting(ss, e, kv, p, &settings[i], max_new);
        if (!row) break;
        json_array_append_new(rows, row);
    }
    if (e && json_array_size(rows) == N_SETTINGS)
        root = json_pack("{s:I,s:I,s:i,s:O}", "seed", (json_int_t)p->seed, "prompt_tokens", (json_int_t)ss->n_prompt,
                         "max_tokens", max_new, "settings", rows);
    json_decref(rows);
    kvlm_engine_free(e);
    kvlm_kv_free(kv);
    return root;
}

static double num(const json_t *o, const char *key) { return json_number_value(json_object_get(o, key)); }

/* The human table, from the document. The text column is made again from
 * the ids by kvlm_text_stream, so it shows the generated bytes exactly. */
static void print_human(const cli_session *ss, const json_t *doc) {
    printf("%d tokens per setting, seed %llu, prompt of %lld tokens\n\n%-28s %9s %11s %7s  %s\n",
           (int)json_integer_value(json_object_get(doc, "max_tokens")),
           (unsigned long long)json_integer_value(json_object_get(doc, "seed")),
           (long long)json_integer_value(json_object_get(doc, "prompt_tokens")), "setting", "distinct", "repeated-4g",
           "tokens", "text");
    size_t i, j;
    const json_t *row, *id;
    json_array_foreach(json_object_get(doc, "settings"), i, row) {
        kvlm_error err;
        kvlm_text_stream *ts = kvlm_text_stream_create(ss->tok, NULL, 0, &err);
        char shown[90];
        size_t k = 0, total = 0;
        json_array_foreach(json_object_get(row, "ids"), j, id) {
            const char *t = "";
            size_t n = 0;
            if (ts) kvlm_text_stream_push(ts, (int32_t)json_integer_value(id), &t, &n, NULL);
            for (size_t b = 0; b < n; b++, total++)
                if (k < sizeof shown - 4) shown[k++] = t[b] == '\n' ? '|' : t[b];
        }
        const char *t = "";
        size_t n = 0;
        if (ts) kvlm_text_stream_finish(ts, &t, &n, NULL);
        for (size_t b = 0; b < n; b++, total++)
            if (k < sizeof shown - 4) shown[k++] = t[b] == '\n' ? '|' : t[b];
        shown[k] = 0;
        kvlm_text_stream_free(ts);
        printf("%-28s %9.2f %11.2f %7d  %s%s\n", json_string_value(json_object_get(row, "setting")),
               num(row, "distinct_ratio"), num(row, "repeated_4gram_rate"),
               (int)json_integer_value(json_object_get(row, "tokens")), shown, k < total ? "..." : "");
    }
}

int cli_gen_stats(int argc, char **argv) {
    gs_opts o;
    if (parse(argc, argv, &o)) return EXIT_USAGE;
    cli_session ss;
    int rc = session_open(&ss, &o.mf, 1);
    if (rc) {
        session_close(&ss);
        return rc;
    }
    gen_stats_params p = {.n = o.n, .seed = o.seed, .stop_at_eos = o.stop_at_eos};
    json_t *doc = measure_gen_stats(&ss, &o.mf, &p);
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
