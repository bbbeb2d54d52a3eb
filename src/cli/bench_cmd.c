/*
 * `kvlm bench`: prefill (pp) and decode (tg) throughput over repeats with
 * mean and standard deviation, the decode roofline against the measured
 * read bandwidth, and generation with the KV cache on vs off, all measured
 * side by side in one process so the ratios hold on a noisy machine.
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
#include "cli/generate.h"
#include "cli/measure.h"
#include "measure/recompute.h"

static const char *usage =
    "usage: kvlm bench (-m MODEL | --synthetic PRESET) [options]\n"
    "  -m PATH           model directory or file\n"
    "  --synthetic NAME  random weights with exact shapes (gpt2-124m, gpt2-355m, gpt2-tiny)\n"
    "  --dtype T         synthetic weight dtype: f32 (default), f16, bf16, q8_0, q4_0\n"
    "  --pp N            prompt tokens for the prefill test (default 120)\n"
    "  --tg N            tokens generated for the decode and cache tests (default 48)\n"
    "  --repeats N       repeats per test (default 5)\n"
    "  --threads N       threads (default: all cores)\n"
    "  --kv-dtype T      f32 (default) or f16\n"
    "  --no-cache-test   also time generation with the KV cache off (default on; --skip-cache-test to skip)\n"
    "  --skip-cache-test skip the cache on/off comparison\n"
    "  --bw-mib N        buffer for the bandwidth measurement in MiB (default 1024)\n"
    "  --json            one JSON object\n";

typedef struct bench_opts {
    const char *model, *synthetic;
    kvlm_dtype dtype;
    bench_params p;
    int json;
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
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
#define VAL() do { if (!(v = arg_value(argc, argv, &i))) return -1; } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(usage, stdout); exit(0); }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { VAL(); o->model = v; }
        else if (!strcmp(a, "--synthetic")) { VAL(); o->synthetic = v; }
        else if (!strcmp(a, "--dtype")) { VAL(); if (kvlm_dtype_parse(v, &o->dtype)) { fprintf(stderr, "kvlm: --dtype: '%s' is not f32, f16, bf16, q8_0 or q4_0\n", v); return -1; } }
        else if (!strcmp(a, "--kv-dtype")) { VAL(); if (kvlm_dtype_parse(v, &o->p.kv_dtype) || (o->p.kv_dtype != KVLM_F32 && o->p.kv_dtype != KVLM_F16)) { fprintf(stderr, "kvlm: --kv-dtype: '%s' is not f32 or f16\n", v); return -1; } }
        else if (!strcmp(a, "--pp")) { VAL(); if (arg_int(a, v, 1, 1 << 20, &o->p.pp)) return -1; }
        else if (!strcmp(a, "--tg")) { VAL(); if (arg_int(a, v, 2, 1 << 20, &o->p.tg)) return -1; }
        else if (!strcmp(a, "--repeats")) { VAL(); if (arg_int(a, v, 1, MAX_REPEATS, &o->p.repeats)) return -1; }
        else if (!strcmp(a, "--threads")) { VAL(); if (arg_int(a, v, 1, 1024, &o->p.threads)) return -1; }
        else if (!strcmp(a, "--bw-mib")) { VAL(); if (arg_int(a, v, 16, 1 << 16, &o->p.bw_mib)) return -1; }
        else if (!strcmp(a, "--skip-cache-test")) o->p.skip_cache = 1;
        else if (!strcmp(a, "--no-cache-test")) o->p.skip_cache = 0;
        else if (!strcmp(a, "--json")) o->json = 1;
        else { fprintf(stderr, "kvlm bench: unknown argument '%s' (see kvlm bench --help)\n", a); return -1; }
#undef VAL
    }
    if (!o->model == !o->synthetic) {
        fprintf(stderr, "kvlm bench: no model: give exactly one of -m PATH or --synthetic PRESET\n");
        return -1;
    }
    return 0;
}

typedef struct bench_ctx {
    kvlm_model *m;
    kvlm_kv *kv;
    kvlm_engine *e;
    kvlm_sampler *greedy;
    int32_t *prompt;
    const kvlm_config *c;
} bench_ctx;

/* One generation of tg tokens after a pp-token prompt on a fresh sequence. */
static int one_gen(bench_ctx *b, kvlm_engine *e, int pp, int tg, gen_result *g) {
    kvlm_error err;
    int seq = kvlm_kv_seq_new(b->kv, &err);
    gen_request rq = {.prompt = b->prompt, .n_prompt = pp, .max_new = tg};
    int rc = seq < 0 ? -1 : gen_run(e, seq, b->greedy, b->c->vocab_size, -1, &rq, g, &err);
    if (rc) fprintf(stderr, "kvlm bench: %s\n", err.msg);
    kvlm_kv_seq_free(b->kv, seq);
    return rc;
}

typedef struct bench_result {
    stat_acc pp_tok_s, tg_tok_s, tg_ms;
    double bw, cache_on_s, cache_off_s;
} bench_result;

static int run_tests(bench_ctx *b, const bench_params *o, bench_result *r) {
    gen_result g;
    /* warm-up: pages in the weights and the KV blocks */
    if (one_gen(b, b->e, o->pp, 2, &g)) return -1;
    gen_result_free(&g);
    for (int i = 0; i < o->repeats; i++) {
        if (one_gen(b, b->e, o->pp, 1, &g)) return -1;
        acc_add(&r->pp_tok_s, o->pp / g.prefill_s);
        gen_result_free(&g);
    }
    for (int i = 0; i < o->repeats; i++) {
        if (one_gen(b, b->e, o->pp, o->tg, &g)) return -1;
        double ms = g.decode_s * 1e3 / g.decode_steps;
        acc_add(&r->tg_ms, ms);
        acc_add(&r->tg_tok_s, 1e3 / ms);
        if (i == 0) r->cache_on_s = g.ttft_s + g.decode_s;
        gen_result_free(&g);
    }
    if (!o->skip_cache) { /* the same generation recomputing the whole context at every step */
        kvlm_error err;
        int32_t *ids = malloc((size_t)o->tg * sizeof(int32_t));
        int seq = ids ? kvlm_kv_seq_new(b->kv, &err) : -1;
        int rc = seq < 0 ? -1
                         : measure_recompute_generate(b->e, b->kv, seq, b->c->vocab_size, b->prompt, o->pp, o->tg, ids,
                                                      &r->cache_off_s, &err);
        if (rc) fprintf(stderr, "kvlm bench: %s\n", ids ? err.msg : "out of memory");
        kvlm_kv_seq_free(b->kv, seq);
        free(ids);
        if (rc) return -1;
    }
    return 0;
}

static json_t *result_json(const bench_ctx *b, const bench_params *o, const bench_result *r) {
    const kvlm_config *c = b->c;
    double wb = (double)kvlm_model_decode_bytes(b->m), tpot = acc_median(&r->tg_ms) * 1e-3;
    json_t *root = json_pack(
        "{s:s,s:s,s:I,s:I,s:i,s:s,s:s,s:f,s:i,"
        "s:{s:i,s:f,s:f,s:f},s:{s:i,s:f,s:f,s:f,s:f},s:{s:f,s:f,s:f}}",
        "model", kvlm_model_source(b->m), "weight_dtype", kvlm_dtype_name(c->weight_dtype), "params",
        (json_int_t)kvlm_model_param_count(b->m), "decode_bytes_per_token", (json_int_t)wb, "threads",
        kvlm_engine_threads(b->e), "isa", kvlm_isa_name(kvlm_engine_isa(b->e)), "kv_dtype",
        kvlm_dtype_name(o->kv_dtype), "bandwidth_gbs", r->bw / 1e9, "repeats", o->repeats, "pp", "tokens", o->pp,
        "mean_tok_s", acc_mean(&r->pp_tok_s), "sd_tok_s", acc_sd(&r->pp_tok_s), "median_tok_s",
        acc_median(&r->pp_tok_s), "tg", "tokens", o->tg, "mean_tok_s", acc_mean(&r->tg_tok_s), "sd_tok_s",
        acc_sd(&r->tg_tok_s), "median_tok_s", acc_median(&r->tg_tok_s), "median_ms_per_token", tpot * 1e3, "roofline",
        "ms_per_token", wb / r->bw * 1e3, "ratio", wb / r->bw / tpot, "effective_gbs", wb / tpot / 1e9);
    if (!o->skip_cache)
        json_object_set_new(root, "cache", json_pack("{s:i,s:i,s:f,s:f,s:f}", "prompt_tokens", o->pp, "new_tokens",
                                                     o->tg, "on_s", r->cache_on_s, "off_s", r->cache_off_s,
                                                     "speedup", r->cache_off_s / r->cache_on_s));
    return root;
}

json_t *measure_bench(kvlm_model *m, const bench_params *p) {
    bench_ctx b = {.m = m, .c = kvlm_model_config(m)};
    kvlm_error err;
    json_t *doc = NULL;
    if (p->pp < 1 || p->tg < 2 || p->pp + p->tg > b.c->n_ctx) {
        fprintf(stderr, "kvlm bench: --pp %d + --tg %d exceed the context window of %d\n", p->pp, p->tg, b.c->n_ctx);
        return NULL;
    }
    if (p->repeats < 1 || p->repeats > MAX_REPEATS || p->bw_mib < 1) {
        fprintf(stderr, "kvlm bench: --repeats %d or --bw-mib %d out of range\n", p->repeats, p->bw_mib);
        return NULL;
    }
    kvlm_kv_options ko = {.dtype = p->kv_dtype, .max_seqs = 1};
    kvlm_engine_options eo = {.threads = p->threads, .isa = p->isa};
    kvlm_sampler_options so = kvlm_sampler_options_default();
    so.temperature = 0;
    b.prompt = malloc((size_t)p->pp * sizeof(int32_t));
    if (!b.prompt || !(b.kv = kvlm_kv_create(m, &ko, &err)) || !(b.e = kvlm_engine_create(m, b.kv, &eo, &err)) ||
        !(b.greedy = kvlm_sampler_create(&so, b.c->vocab_size, &err))) {
        fprintf(stderr, "kvlm bench: %s\n", b.prompt ? err.msg : "out of memory");
        goto out;
    }
    uint32_t x = 12345; /* fixed pseudo-random prompt */
    for (int i = 0; i < p->pp; i++) {
        x = x * 1664525u + 1013904223u;
        b.prompt[i] = (int32_t)((x >> 8) % (uint32_t)b.c->vocab_size);
    }
    bench_result *r = calloc(1, sizeof *r);
    if (!r) {
        fprintf(stderr, "kvlm bench: out of memory\n");
        goto out;
    }
    if (p->progress) fprintf(stderr, "measuring read bandwidth...\n");
    r->bw = kvlm_measure_read_bandwidth((size_t)p->bw_mib << 20, 5);
    if (!run_tests(&b, p, r)) doc = result_json(&b, p, r);
    free(r);
out:
    free(b.prompt);
    kvlm_sampler_free(b.greedy);
    kvlm_engine_free(b.e);
    kvlm_kv_free(b.kv);
    return doc;
}

static double num(const json_t *o, const char *a, const char *b) {
    return json_number_value(json_object_get(b ? json_object_get(o, a) : o, b ? b : a));
}
static const char *str(const json_t *o, const char *key) { return json_string_value(json_object_get(o, key)); }

/* The human report, from the document and the model's shape. */
static void print_human(const kvlm_model *m, const json_t *d, int bw_mib) {
    const kvlm_config *c = kvlm_model_config(m);
    int pp = (int)num(d, "pp", "tokens"), tg = (int)num(d, "tg", "tokens");
    double wb = num(d, "decode_bytes_per_token", NULL), bw_gbs = num(d, "bandwidth_gbs", NULL);
    double tpot_ms = num(d, "tg", "median_ms_per_token"), roof_ms = num(d, "roofline", "ms_per_token");
    double pp_median = num(d, "pp", "median_tok_s");
    printf("model        %s\n", str(d, "model"));
    printf("shape        %d layers, %d heads, %d embd, vocab %d, %.1fM params, %s weights\n", c->n_layer, c->n_head,
           c->n_embd, c->vocab_size, num(d, "params", NULL) / 1e6, str(d, "weight_dtype"));
    printf("engine       %d threads, %s kernels, KV %s\n", (int)num(d, "threads", NULL), str(d, "isa"),
           str(d, "kv_dtype"));
    printf("bandwidth    %.1f GB/s read (measured, %d MiB, best of 5)\n\n", bw_gbs, bw_mib);
    printf("%-10s %12s %10s %12s %12s   (%d repeats)\n", "test", "mean tok/s", "sd", "median tok/s", "ms/token",
           (int)num(d, "repeats", NULL));
    printf("pp%-8d %12.1f %10.1f %12.1f %12.3f\n", pp, num(d, "pp", "mean_tok_s"), num(d, "pp", "sd_tok_s"),
           pp_median, 1e3 / pp_median);
    printf("tg%-8d %12.2f %10.2f %12.2f %12.3f\n\n", tg, num(d, "tg", "mean_tok_s"), num(d, "tg", "sd_tok_s"),
           num(d, "tg", "median_tok_s"), tpot_ms);
    printf("decode roofline: %.1f MB of weights per token / %.1f GB/s = %.2f ms/token;\n", wb / 1e6, bw_gbs, roof_ms);
    printf("  median decode %.2f ms/token = %.1f%% of the roofline (%.1f GB/s effective)\n", tpot_ms,
           100.0 * roof_ms / tpot_ms, num(d, "roofline", "effective_gbs"));
    const json_t *cache = json_object_get(d, "cache");
    if (cache)
        printf("\ncache on vs off (%d-token prompt, %d new tokens): on %.3f s, off %.3f s, speed-up %.2fx\n", pp, tg,
               num(cache, "on_s", NULL), num(cache, "off_s", NULL), num(cache, "speedup", NULL));
}

int cli_bench(int argc, char **argv) {
    bench_opts o;
    if (parse(argc, argv, &o)) return EXIT_USAGE;
    kvlm_model *m = cli_load_model(o.model, o.synthetic, o.dtype);
    if (!m) return 1;
    const kvlm_config *c = kvlm_model_config(m);
    if (o.p.pp + o.p.tg > c->n_ctx) {
        fprintf(stderr, "kvlm bench: --pp %d + --tg %d exceed the context window of %d\n", o.p.pp, o.p.tg, c->n_ctx);
        kvlm_model_free(m);
        return EXIT_USAGE;
    }
    o.p.progress = !o.json;
    json_t *doc = measure_bench(m, &o.p);
    if (doc && o.json) {
        cli_print_json(doc);
    } else if (doc) {
        print_human(m, doc, o.p.bw_mib);
    }
    int rc = doc ? 0 : 1;
    json_decref(doc);
    kvlm_model_free(m);
    return rc;
}
