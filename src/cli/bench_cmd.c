/*
 * `kvlm bench`: prefill (pp) and decode (tg) throughput over repeats with
 * mean and standard deviation, the decode roofline against the measured
 * read bandwidth, and generation with the KV cache on vs off, all measured
 * side by side in one process so the ratios hold on a noisy machine.
 * With --draft or --draft-ngram it also compares speculative decoding with
 * plain decoding (cli/bench_spec.c), on -p/-f text when given, and with
 * --batch B decode steps of B sequences against steps of one
 * (cli/bench_batch.c).
 * measure_bench (measure.h) runs the tests and returns the JSON document;
 * the human report is printed from it.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/draft.h"
#include "cli/generate.h"
#include "cli/measure.h"
#include "cli/options.h"
#include "cli/session.h"
#include "kvlm_measure.h"

typedef struct bench_opts {
    model_flags mf;
    bench_params p;
    int json, pp_set, tg_set;
    int batch; /* --batch B (0: none) */
    draft_flags draft;
} bench_opts;

/* Per-repeat samples: mean and sd as requested, the median as the robust
 * figure the roofline uses (a shared machine produces outliers). */
#define MAX_REPEATS BENCH_MAX_REPEATS
typedef struct stat_acc {
    double v[MAX_REPEATS];
    int n;
} stat_acc;

static void acc_add(stat_acc *a, double v) { if (a->n < MAX_REPEATS) a->v[a->n++] = v; }
static double acc_mean(const stat_acc *a) {
    double s = 0;
    for (int i = 0; i < a->n; i++) s += a->v[i];
    return a->n ? s / a->n : 0;
}
static double acc_sd(const stat_acc *a) {
    if (a->n < 2) return 0;
    double m = acc_mean(a), q = 0;
    for (int i = 0; i < a->n; i++) q += (a->v[i] - m) * (a->v[i] - m);
    return sqrt(q / (a->n - 1));
}
static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}
static double acc_median(const stat_acc *a) {
    if (!a->n) return 0;
    double t[MAX_REPEATS];
    memcpy(t, a->v, (size_t)a->n * sizeof(double));
    qsort(t, (size_t)a->n, sizeof(double), cmp_double);
    return a->n % 2 ? t[a->n / 2] : 0.5 * (t[a->n / 2 - 1] + t[a->n / 2]);
}

static int parse(int argc, char **argv, bench_opts *o) {
    *o = (bench_opts){.p = {.pp = 120, .tg = 48, .repeats = 5, .bw_mib = 1024}};
    model_flags_init(&o->mf);
    draft_flags_init(&o->draft);
    o->draft.no_prefix_cache = 1;
    const cli_opt own[] = {
        {.names = "--pp", .metavar = "N", .help = "prompt tokens for the prefill test (default 120)", .kind = OPT_INT,
         .dst = &o->p.pp, .lo = 1, .hi = 1 << 20, .given = &o->pp_set},
        {.names = "--tg", .metavar = "N",
         .help = "tokens generated for the decode and cache tests (default 48)\n"
                 "(without --pp/--tg both shrink to fit a small context window)",
         .kind = OPT_INT, .dst = &o->p.tg, .lo = 2, .hi = 1 << 20, .given = &o->tg_set},
        CLI_INT("--depth", "N",
                "decode after a context of N tokens instead of the pp prompt, computed once and\n"
                "reused through the prefix cache (llama-bench -d N; skips the cache test)",
                &o->p.depth, 0, 1 << 20),
        CLI_INT("--repeats", "N", "repeats per test (default 5)", &o->p.repeats, 1, MAX_REPEATS),
        CLI_INT("--bw-mib", "N",
                "buffer for the bandwidth measurement in MiB, raised to twice the largest cache (default 1024)",
                &o->p.bw_mib, 16, 1 << 16),
        CLI_INT("--batch", "B",
                "also time decode steps of B sequences together against steps of one, alternated\n"
                "(tokens/s and ms per step of each, and their ratios)",
                &o->batch, 2, 256),
        CLI_SWITCH("--cache-test", "also time generation with the KV cache off (the default)", &o->p.skip_cache, 0),
        CLI_SWITCH("--no-cache-test, --skip-cache-test", "skip the cache on vs off comparison", &o->p.skip_cache, 1),
        CLI_HEADING("speculative decoding, fixed and adaptive, vs plain at temperature 0 and 0.8 (-p/-f: its prompt):"),
        DRAFT_OPTS(&o->draft),
        CLI_END,
    };
    cli_spec spec = {
        .cmd = "bench",
        .usage = "bench (-m MODEL | --synthetic PRESET) [options]",
        .about = "Prefill and decode throughput over repeats (mean, sd, median), the decode roofline\n"
                 "against the measured read bandwidth, generation with the KV cache on vs off.\n"
                 "The prompt is a fixed pseudo-random sequence of token ids.\n",
        .groups = CLI_LOADS_MODEL | CLI_JSON | CLI_TOKENIZER | CLI_PROMPT | CLI_FILE,
        .unused = "it times a fixed pseudo-random prompt with greedy decoding",
        .opts = own,
        .mf = &o->mf,
        .json = &o->json,
    };
    if (cli_parse(&spec, argc, argv)) return -1;
    if (draft_flags_check(&o->draft, "bench", 0)) return -1;
    if ((o->mf.prompt || o->mf.ids || o->mf.file) && !o->draft.model && !o->draft.ngram)
        return cli_usage_error(&spec, "-p, --ids and -f give the speculative test's prompt: they need --draft or "
                               "--draft-ngram");
    o->p.threads = o->mf.threads, o->p.isa = o->mf.isa;
    o->p.kv_dtype = o->mf.kv_dtype, o->p.block_size = o->mf.block_size;
    return 0;
}

int bench_fit_timing(const char *cmd, bench_params *p, int pp_set, int tg_set, int n_ctx) {
    if (p->depth > 0) {
        if (p->pp > n_ctx || p->depth + p->tg > n_ctx) {
            fprintf(stderr, "kvlm %s: --pp %d, or --depth %d + --tg %d, exceed the context window of %d\n", cmd, p->pp,
                    p->depth, p->tg, n_ctx);
            return -1;
        }
        return 0;
    }
    if (p->pp + p->tg > n_ctx) {
        if (!pp_set && !tg_set) { /* both shrink in proportion */
            long pp = (long)p->pp * n_ctx / (p->pp + p->tg);
            p->pp = pp < 1 ? 1 : (int)pp;
            p->tg = n_ctx - p->pp;
        } else if (!tg_set) {
            p->tg = n_ctx - p->pp;
        } else if (!pp_set) {
            p->pp = n_ctx - p->tg;
        }
    }
    if (p->pp + p->tg > n_ctx || p->pp < 1) {
        fprintf(stderr, "kvlm %s: --pp %d + --tg %d exceed the context window of %d\n", cmd, p->pp, p->tg, n_ctx);
        return -1;
    }
    if (p->tg < 2) {
        fprintf(stderr, "kvlm %s: --pp %d leaves %d of the context window of %d for --tg (at least 2 needed)\n", cmd,
                p->pp, p->tg, n_ctx);
        return -1;
    }
    return 0;
}

typedef struct bench_ctx {
    kvlm_model *m;
    kvlm_kv *kv;        /* no prefix cache: every repeat computes its prompt */
    kvlm_engine *e;
    int32_t *prompt;
    const kvlm_config *c;
} bench_ctx;

/* One greedy generation of tg tokens after a pp-token prompt, no eos, the
 * CLI's generation path (recompute: the KV cache off). */
static int one_gen(bench_ctx *b, int recompute, int pp, int tg, gen_result *g) {
    kvlm_error err;
    gen_request rq = {.prompt = b->prompt, .n_prompt = pp, .max_new = tg, .sampling = kvlm_sampler_default_params(),
                      .recompute = recompute};
    rq.sampling.temperature = 0;
    int rc = gen_run(b->e, b->kv, b->c->vocab_size, &rq, g, &err);
    if (rc) fprintf(stderr, "kvlm bench: %s\n", err.msg);
    return rc;
}

typedef struct bench_result {
    stat_acc pp_tok_s, tg_tok_s, tg_ms;
    stat_acc read_ms; /* one pass over the decode weights, between the decode repeats */
    double bw, bw_buffer, bw_weights, cache_on_s, cache_off_s; /* bw: the larger of the two probes */
} bench_result;

/* Passes over the weights after each decode repeat: the paired roofline
 * reads the weights a decode step reads, at its threads, in the same
 * seconds as the decode it is compared with, so a machine whose bandwidth
 * moves with other tenants' load moves both alike. */
#define PAIRED_READS 4

static int bench_open(bench_ctx *b, const bench_params *p, int prefix_cache);
static void bench_close(bench_ctx *b);

static int run_tests(bench_ctx *b, const bench_params *o, bench_result *r) {
    gen_result g;
    const double bytes = (double)kvlm_model_decode_bytes(b->m);
    /* warm-up: pages in the weights and the KV blocks */
    if (one_gen(b, 0, o->pp, 2, &g)) return -1;
    gen_result_free(&g);
    for (int i = 0; i < o->repeats; i++) {
        if (one_gen(b, 0, o->pp, 1, &g)) return -1;
        acc_add(&r->pp_tok_s, o->pp / g.prefill_s);
        gen_result_free(&g);
    }
    const int ctx = o->depth > 0 ? o->depth : o->pp;
    if (o->depth > 0) { /* a cache that keeps the depth's blocks: computed once (untimed), found by later repeats */
        bench_close(b);
        if (bench_open(b, o, 1) || one_gen(b, 0, ctx, 2, &g)) return -1;
        gen_result_free(&g);
    }
    for (int i = 0; i < o->repeats; i++) {
        if (one_gen(b, 0, ctx, o->tg, &g)) return -1;
        double ms = g.decode_s * 1e3 / g.decode_steps;
        acc_add(&r->tg_ms, ms);
        acc_add(&r->tg_tok_s, 1e3 / ms);
        if (i == 0) r->cache_on_s = g.ttft_s + g.decode_s;
        gen_result_free(&g);
        for (int k = 0; k < PAIRED_READS; k++) {
            const double bw = kvlm_measure_weight_read_bandwidth(b->m, 1, kvlm_engine_threads(b->e));
            if (bw > 0) acc_add(&r->read_ms, bytes / bw * 1e3);
        }
    }
    if (!o->skip_cache && o->depth <= 0) {
        if (one_gen(b, 1, o->pp, o->tg, &g)) return -1;
        r->cache_off_s = g.ttft_s + g.decode_s;
        gen_result_free(&g);
    }
    return 0;
}

static json_t *result_json(const bench_ctx *b, const bench_params *o, const bench_result *r) {
    const kvlm_config *c = b->c;
    double wb = (double)kvlm_model_decode_bytes(b->m), tpot = acc_median(&r->tg_ms) * 1e-3;
    json_t *root = json_pack(
        "{s:s,s:s,s:I,s:I,s:I,s:i,s:s,s:s,s:f,s:f,s:f,s:i,s:i,"
        "s:{s:i,s:f,s:f,s:f},s:{s:i,s:f,s:f,s:f,s:f},s:{s:f,s:f,s:f}}",
        "model", kvlm_model_source(b->m), "weight_dtype", kvlm_dtype_name(c->weight_dtype), "params",
        (json_int_t)kvlm_model_param_count(b->m), "decode_bytes_per_token", (json_int_t)wb,
        "repacked_bytes", (json_int_t)kvlm_model_repacked_bytes(b->m), "threads",
        kvlm_engine_threads(b->e), "isa", kvlm_isa_name(kvlm_engine_isa(b->e)), "kv_dtype",
        kvlm_dtype_name(o->kv_dtype), "bandwidth_gbs", r->bw / 1e9, "buffer_bandwidth_gbs", r->bw_buffer / 1e9,
        "weights_bandwidth_gbs", r->bw_weights / 1e9, "bandwidth_buffer_mib",
        (int)(kvlm_read_bandwidth_buffer_bytes((size_t)o->bw_mib << 20) >> 20), "repeats", o->repeats, "pp", "tokens",
        o->pp,
        "mean_tok_s", acc_mean(&r->pp_tok_s), "sd_tok_s", acc_sd(&r->pp_tok_s), "median_tok_s",
        acc_median(&r->pp_tok_s), "tg", "tokens", o->tg, "mean_tok_s", acc_mean(&r->tg_tok_s), "sd_tok_s",
        acc_sd(&r->tg_tok_s), "median_tok_s", acc_median(&r->tg_tok_s), "median_ms_per_token", tpot * 1e3, "roofline",
        "ms_per_token", wb / r->bw * 1e3, "ratio", wb / r->bw / tpot, "effective_gbs", wb / tpot / 1e9);
    char why[160] = "--threads";
    json_object_set_new(root, "active_params", json_integer((json_int_t)kvlm_model_active_param_count(b->m)));
    if (!o->threads) kvlm_default_threads(why, sizeof why);
    json_object_set_new(root, "threads_reason", json_string(why));
    const double read_ms = acc_mean(&r->read_ms), tg_mean_ms = acc_mean(&r->tg_ms);
    if (r->read_ms.n && tg_mean_ms > 0)
        json_object_set_new(json_object_get(root, "roofline"), "paired",
                            json_pack("{s:i,s:f,s:f,s:f,s:f}", "read_passes", r->read_ms.n, "read_ms_per_token", read_ms,
                                      "read_gbs", wb / read_ms / 1e6, "decode_mean_ms_per_token", tg_mean_ms, "ratio",
                                      read_ms / tg_mean_ms));
    kvlm_float_batch_choice fb[16];
    const int nfb = kvlm_model_float_batch(b->m, kvlm_engine_isa(b->e), fb, 16);
    if (nfb > 0) {
        json_t *arr = json_array();
        for (int i = 0; i < nfb && i < 16; i++)
            json_array_append_new(arr, json_pack("{s:s,s:i,s:s,s:b,s:f,s:f}", "dtype", kvlm_dtype_name(fb[i].dtype),
                                                 "cols", fb[i].cols, "kernel", fb[i].direct ? "direct" : "packed",
                                                 "forced", fb[i].forced, "packed_us", fb[i].packed_us, "direct_us",
                                                 fb[i].direct_us));
        json_object_set_new(root, "float_batch", arr);
    }
    if (o->depth > 0) json_object_set_new(json_object_get(root, "tg"), "depth", json_integer(o->depth));
    if (!o->skip_cache && o->depth <= 0)
        json_object_set_new(root, "cache", json_pack("{s:i,s:i,s:f,s:f,s:f}", "prompt_tokens", o->pp, "new_tokens",
                                                     o->tg, "on_s", r->cache_on_s, "off_s", r->cache_off_s,
                                                     "speedup", r->cache_off_s / r->cache_on_s));
    return root;
}

/* bench's fixed pseudo-random prompt of n ids. */
static void bench_prompt(int32_t *ids, int n, int vocab) {
    uint32_t x = 12345;
    for (int i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        ids[i] = (int32_t)((x >> 8) % (uint32_t)vocab);
    }
}

void bench_setup_options(const bench_params *p, kvlm_kv_options *ko, kvlm_engine_options *eo) {
    *ko = kvlm_kv_default_params();
    ko->dtype = p->kv_dtype;
    ko->block_size = p->block_size;
    ko->max_seqs = 1;
    ko->no_prefix_cache = 1;
    *eo = kvlm_engine_default_params();
    eo->threads = p->threads;
    eo->isa = p->isa;
}

/* b's cache and engine; prefix_cache 1 keeps full blocks for later
 * repeats (the depth test). */
static int bench_open(bench_ctx *b, const bench_params *p, int prefix_cache) {
    kvlm_kv_options ko;
    kvlm_engine_options eo;
    kvlm_error err;
    bench_setup_options(p, &ko, &eo);
    ko.no_prefix_cache = !prefix_cache;
    if (!(b->kv = kvlm_kv_create(b->m, &ko, &err)) || !(b->e = kvlm_engine_create(b->m, b->kv, &eo, &err))) {
        fprintf(stderr, "kvlm bench: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static void bench_close(bench_ctx *b) {
    kvlm_engine_free(b->e);
    kvlm_kv_free(b->kv);
    b->e = NULL, b->kv = NULL;
}

json_t *measure_bench(kvlm_model *m, const bench_params *p) {
    bench_ctx b = {.m = m, .c = kvlm_model_config(m)};
    json_t *doc = NULL;
    const int ctx = p->depth > 0 ? p->depth : p->pp, n = ctx > p->pp ? ctx : p->pp;
    if (p->pp < 1 || p->tg < 2 || p->depth < 0 || p->pp > b.c->n_ctx || ctx + p->tg > b.c->n_ctx) {
        fprintf(stderr, "kvlm bench: --pp %d (or --depth %d) + --tg %d exceed the context window of %d\n", p->pp,
                p->depth, p->tg, b.c->n_ctx);
        return NULL;
    }
    if (p->repeats < 1 || p->repeats > MAX_REPEATS || p->bw_mib < 1) {
        fprintf(stderr, "kvlm bench: --repeats %d or --bw-mib %d out of range\n", p->repeats, p->bw_mib);
        return NULL;
    }
    b.prompt = malloc((size_t)n * sizeof(int32_t));
    if (!b.prompt) {
        fprintf(stderr, "kvlm bench: out of memory\n");
        return NULL;
    }
    if (bench_open(&b, p, 0)) goto out;
    bench_prompt(b.prompt, n, b.c->vocab_size);
    bench_result *r = calloc(1, sizeof *r);
    if (!r) {
        fprintf(stderr, "kvlm bench: out of memory\n");
        goto out;
    }
    if (p->progress) fprintf(stderr, "measuring read bandwidth...\n");
    r->bw_buffer = kvlm_measure_read_bandwidth_threads((size_t)p->bw_mib << 20, 5, kvlm_engine_threads(b.e));
    r->bw_weights = kvlm_measure_weight_read_bandwidth(m, 5, kvlm_engine_threads(b.e));
    r->bw = r->bw_weights > r->bw_buffer ? r->bw_weights : r->bw_buffer;
    if (!run_tests(&b, p, r)) doc = result_json(&b, p, r);
    free(r);
out:
    free(b.prompt);
    bench_close(&b);
    return doc;
}

static double num(const json_t *o, const char *a, const char *b) {
    return json_number_value(json_object_get(b ? json_object_get(o, a) : o, b ? b : a));
}
static const char *str(const json_t *o, const char *key) { return json_string_value(json_object_get(o, key)); }

/* The human report, from the document and the model's shape. */
static void print_human(const kvlm_model *m, const json_t *d) {
    const kvlm_config *c = kvlm_model_config(m);
    int pp = (int)num(d, "pp", "tokens"), tg = (int)num(d, "tg", "tokens");
    double wb = num(d, "decode_bytes_per_token", NULL), bw_gbs = num(d, "bandwidth_gbs", NULL);
    double tpot_ms = num(d, "tg", "median_ms_per_token"), roof_ms = num(d, "roofline", "ms_per_token");
    double pp_median = num(d, "pp", "median_tok_s");
    printf("model        %s\n", str(d, "model"));
    printf("shape        %d layers, %d heads, %d embd, vocab %d, %.1fM params, %s weights\n", c->n_layer, c->n_head,
           c->n_embd, c->vocab_size, num(d, "params", NULL) / 1e6, str(d, "weight_dtype"));
    if (c->n_expert)
        printf("experts      %d of %d per token in each layer: %.1fM active params; the roofline counts the active\n"
               "             bytes (router, shared expert, %d experts per layer)\n",
               c->n_expert_used, c->n_expert, num(d, "active_params", NULL) / 1e6, c->n_expert_used);
    printf("engine       %d threads (%s), %s kernels, KV %s\n", (int)num(d, "threads", NULL),
           str(d, "threads_reason"), str(d, "isa"), str(d, "kv_dtype"));
    const double repacked = num(d, "repacked_bytes", NULL);
    if (repacked > 0)
        printf("repacked     %.1f MB: Q4_0 matrices packed for decode, in place of the file's layout (--no-repack: none)\n",
               repacked / 1e6);
    const json_t *fb = json_object_get(d, "float_batch");
    for (size_t i = 0; i < json_array_size(fb); i++) {
        const json_t *e = json_array_get(fb, i);
        printf("%s %s K=%d: %s", i ? "            " : "batches     ", str(e, "dtype"), (int)num(e, "cols", NULL),
               strcmp(str(e, "kernel"), "direct") ? "packed panels" : "tiles from the stored weights");
        if (json_is_true(json_object_get(e, "forced"))) printf(" (KVLM_FLOAT_BATCH)\n");
        else
            printf(" (a 48 x K x 48 batch: %.1f us packed, %.1f us direct)\n", num(e, "packed_us", NULL),
                   num(e, "direct_us", NULL));
    }
    printf("bandwidth    %.1f GB/s read (measured, %d threads, best of 5: %.1f from a %d MiB buffer, %.1f from the\n"
           "             weights themselves; the larger counts)\n\n",
           bw_gbs, (int)num(d, "threads", NULL), num(d, "buffer_bandwidth_gbs", NULL),
           (int)num(d, "bandwidth_buffer_mib", NULL), num(d, "weights_bandwidth_gbs", NULL));
    printf("%-10s %12s %10s %12s %12s   (%d repeats)\n", "test", "mean tok/s", "sd", "median tok/s", "ms/token",
           (int)num(d, "repeats", NULL));
    printf("pp%-8d %12.1f %10.1f %12.1f %12.3f\n", pp, num(d, "pp", "mean_tok_s"), num(d, "pp", "sd_tok_s"),
           pp_median, 1e3 / pp_median);
    char tg_label[40];
    const int depth = (int)num(d, "tg", "depth");
    if (depth > 0) snprintf(tg_label, sizeof tg_label, "tg%d@d%d", tg, depth);
    else snprintf(tg_label, sizeof tg_label, "tg%d", tg);
    printf("%-10s %12.2f %10.2f %12.2f %12.3f\n\n", tg_label, num(d, "tg", "mean_tok_s"), num(d, "tg", "sd_tok_s"),
           num(d, "tg", "median_tok_s"), tpot_ms);
    printf("decode roofline: %.1f MB of weights per token / %.1f GB/s = %.2f ms/token;\n", wb / 1e6, bw_gbs, roof_ms);
    printf("  median decode %.2f ms/token = %.1f%% of the roofline (%.1f GB/s effective)\n", tpot_ms,
           100.0 * roof_ms / tpot_ms, num(d, "roofline", "effective_gbs"));
    const json_t *paired = json_object_get(json_object_get(d, "roofline"), "paired");
    if (paired)
        printf("paired roofline: the same weights read in %.2f ms (%.1f GB/s, mean of %d passes between the decode\n"
               "  repeats); mean decode %.2f ms/token = %.1f%% of it\n",
               num(paired, "read_ms_per_token", NULL), num(paired, "read_gbs", NULL),
               (int)num(paired, "read_passes", NULL), num(paired, "decode_mean_ms_per_token", NULL),
               100.0 * num(paired, "ratio", NULL));
    const json_t *cache = json_object_get(d, "cache");
    if (cache)
        printf("\ncache on vs off (%d-token prompt, %d new tokens): on %.3f s, off %.3f s, speed-up %.2fx\n", pp, tg,
               num(cache, "on_s", NULL), num(cache, "off_s", NULL), num(cache, "speedup", NULL));
}

/* The speculative comparison's lines of the human report: per
 * temperature, plain decoding, fixed speculation and the adaptive policy. */
static void print_spec(const json_t *sp) {
    const char *model = str(sp, "draft_model");
    printf("\nspeculative decoding (%s%s%s, k %d), %d-token prompt, %d new tokens, median (min-max) of %d,\n"
           "rows alternated; speed-up: plain / row, per repeat:\n",
           model ? "draft model " : "prompt lookup", model ? model : "", model ? "" : " n-gram",
           (int)num(sp, "k", NULL), (int)num(sp, "prompt_tokens", NULL), (int)num(sp, "new_tokens", NULL),
           (int)num(sp, "repeats", NULL));
    printf("%-5s %-9s %10s %8s %10s %22s %19s\n", "temp", "row", "acceptance", "drafted", "tok/step", "seconds",
           "speed-up");
    const json_t *runs = json_object_get(sp, "runs");
    for (size_t i = 0; i < json_array_size(runs); i++) {
        const json_t *r = json_array_get(runs, i);
        const double t = num(r, "temperature", NULL);
        printf("%-5.1f %-9s %10s %8s %10s %8.3f (%.3f-%.3f)\n", t, "plain", "-", "-", "1.00", num(r, "plain_s", NULL),
               num(r, "plain_min_s", NULL), num(r, "plain_max_s", NULL));
        static const char *const rows[] = {"fixed", "adaptive"};
        for (int k = 0; k < 2; k++) {
            const json_t *x = json_object_get(r, rows[k]);
            printf("%-5.1f %-9s %9.1f%% %8d %10.2f %8.3f (%.3f-%.3f) %7.2fx (%.2f-%.2f)\n", t, rows[k],
                   100 * num(x, "acceptance", NULL), (int)num(x, "drafted", NULL),
                   num(x, "tokens_per_target_step", NULL), num(x, "median_s", NULL), num(x, "min_s", NULL),
                   num(x, "max_s", NULL), num(x, "speedup", NULL), num(x, "speedup_min", NULL),
                   num(x, "speedup_max", NULL));
        }
    }
}

/* The batched decode lines of the human report. */
static void print_batch(const json_t *bt) {
    printf("\nbatched decode: %d sequences decoding together vs 1, %d-token prompts, %d steps, median (min-max)\n"
           "of %d rounds, alternated:\n",
           (int)num(bt, "batch", NULL), (int)num(bt, "prompt_tokens", NULL), (int)num(bt, "steps", NULL),
           (int)num(bt, "repeats", NULL));
    printf("%-10s %26s %12s\n", "sequences", "ms per step", "tokens/s");
    static const char *const rows[] = {"one", "batched"};
    for (int k = 0; k < 2; k++) {
        const json_t *r = json_object_get(bt, rows[k]);
        printf("%-10d %9.2f (%6.2f-%7.2f) %12.1f\n", (int)num(r, "sequences", NULL), num(r, "median_ms_per_step", NULL),
               num(r, "min_ms_per_step", NULL), num(r, "max_ms_per_step", NULL), num(r, "tokens_per_s", NULL));
    }
    printf("a step of %d costs %.2fx a step of 1; tokens/s %.2fx (medians of the per-round ratios)\n",
           (int)num(bt, "batch", NULL), num(bt, "step_ratio", NULL), num(bt, "throughput_ratio", NULL));
}

int cli_bench(int argc, char **argv) {
    bench_opts o;
    if (parse(argc, argv, &o)) return EXIT_USAGE;
    const int spec = o.draft.model || o.draft.ngram;
    cli_session ss;
    int rc = session_open(&ss, &o.mf, spec && (o.mf.prompt || o.mf.ids || o.mf.file) ? SESSION_PROMPT : 0);
    if (rc) {
        session_close(&ss);
        return rc;
    }
    kvlm_model *m = ss.m;
    if (bench_fit_timing("bench", &o.p, o.pp_set, o.tg_set, kvlm_model_config(m)->n_ctx)) {
        session_close(&ss);
        return EXIT_USAGE;
    }
    o.p.progress = !o.json;
    cli_draft d = {0};
    if (spec && (rc = draft_open(&d, &o.draft, m, 1, &o.mf))) {
        draft_close(&d);
        session_close(&ss);
        return rc;
    }
    json_t *doc = measure_bench(m, &o.p);
    if (doc && o.batch) {
        json_t *bt = measure_batch(m, &o.p, o.batch);
        if (bt) json_object_set_new(doc, "batch", bt);
        else json_decref(doc), doc = NULL;
    }
    if (doc && spec) {
        /* the speculative test's prompt: -p/-f/--ids, else bench's own */
        int32_t *own = NULL;
        const int32_t *prompt = ss.prompt;
        int n = (int)ss.n_prompt;
        if (!prompt && (own = malloc((size_t)o.p.pp * sizeof *own))) {
            bench_prompt(own, o.p.pp, kvlm_model_config(m)->vocab_size);
            prompt = own;
            n = o.p.pp;
        }
        json_t *sp = prompt ? measure_spec(m, &o.p, &d, prompt, n) : NULL;
        free(own);
        if (sp) json_object_set_new(doc, "speculative", sp);
        else json_decref(doc), doc = NULL;
    }
    if (doc && o.json) {
        cli_print_json(doc);
    } else if (doc) {
        print_human(m, doc);
        const json_t *sp = json_object_get(doc, "speculative");
        if (sp) print_spec(sp);
        const json_t *bt = json_object_get(doc, "batch");
        if (bt) print_batch(bt);
    }
    rc = doc ? 0 : 1;
    json_decref(doc);
    draft_close(&d);
    session_close(&ss);
    return rc;
}
