/*
 * `kvlm bench`: prefill (pp) and decode (tg) throughput over repeats with
 * mean and standard deviation, the decode roofline against the measured
 * read bandwidth, and generation with the KV cache on vs off, all measured
 * side by side in one process so the ratios hold on a noisy machine.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/generate.h"

static const char *usage =
    "usage: kvlm bench (-m MODEL | --synthetic PRESET) [options]\n"
    "  -m PATH           model directory or file\n"
    "  --synthetic NAME  random weights with exact shapes (gpt2-124m, gpt2-355m, gpt2-tiny)\n"
    "  --dtype T         synthetic weight dtype: f32 (default), f16, bf16\n"
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
    kvlm_dtype dtype, kv_dtype;
    int pp, tg, repeats, threads, skip_cache, json, bw_mib;
} bench_opts;

/* Per-repeat samples: mean and sd as requested, the median as the robust
 * figure the roofline uses (a shared machine produces outliers). */
#define MAX_REPEATS 1000
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
    *o = (bench_opts){.pp = 120, .tg = 48, .repeats = 5, .bw_mib = 1024};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
#define VAL() do { if (!(v = arg_value(argc, argv, &i))) return -1; } while (0)
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { fputs(usage, stdout); exit(0); }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) { VAL(); o->model = v; }
        else if (!strcmp(a, "--synthetic")) { VAL(); o->synthetic = v; }
        else if (!strcmp(a, "--dtype")) { VAL(); if (kvlm_dtype_parse(v, &o->dtype)) { fprintf(stderr, "kvlm: --dtype: '%s' is not f32, f16 or bf16\n", v); return -1; } }
        else if (!strcmp(a, "--kv-dtype")) { VAL(); if (kvlm_dtype_parse(v, &o->kv_dtype) || o->kv_dtype == KVLM_BF16) { fprintf(stderr, "kvlm: --kv-dtype: '%s' is not f32 or f16\n", v); return -1; } }
        else if (!strcmp(a, "--pp")) { VAL(); if (arg_int(a, v, 1, 1 << 20, &o->pp)) return -1; }
        else if (!strcmp(a, "--tg")) { VAL(); if (arg_int(a, v, 2, 1 << 20, &o->tg)) return -1; }
        else if (!strcmp(a, "--repeats")) { VAL(); if (arg_int(a, v, 1, MAX_REPEATS, &o->repeats)) return -1; }
        else if (!strcmp(a, "--threads")) { VAL(); if (arg_int(a, v, 1, 1024, &o->threads)) return -1; }
        else if (!strcmp(a, "--bw-mib")) { VAL(); if (arg_int(a, v, 16, 1 << 16, &o->bw_mib)) return -1; }
        else if (!strcmp(a, "--skip-cache-test")) o->skip_cache = 1;
        else if (!strcmp(a, "--no-cache-test")) o->skip_cache = 0;
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
    kvlm_engine *e, *e_nocache;
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

static int run_tests(bench_ctx *b, const bench_opts *o, bench_result *r) {
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
    if (!o->skip_cache) {
        if (one_gen(b, b->e_nocache, o->pp, o->tg, &g)) return -1;
        r->cache_off_s = g.ttft_s + g.decode_s;
        gen_result_free(&g);
    }
    return 0;
}

static void report_text(const bench_ctx *b, const bench_opts *o, const bench_result *r) {
    const kvlm_config *c = b->c;
    double wb = (double)kvlm_model_decode_bytes(b->m);
    double tpot = acc_median(&r->tg_ms) * 1e-3, roof_ms = wb / r->bw * 1e3;
    printf("model        %s\n", kvlm_model_source(b->m));
    printf("shape        %d layers, %d heads, %d embd, vocab %d, %.1fM params, %s weights\n", c->n_layer, c->n_head,
           c->n_embd, c->vocab_size, kvlm_model_param_count(b->m) / 1e6, kvlm_dtype_name(c->weight_dtype));
    printf("engine       %d threads, %s kernels, KV %s\n", kvlm_engine_threads(b->e),
           kvlm_isa_name(kvlm_engine_isa(b->e)), kvlm_dtype_name(o->kv_dtype));
    printf("bandwidth    %.1f GB/s read (measured, %d MiB, best of 5)\n\n", r->bw / 1e9, o->bw_mib);
    printf("%-10s %12s %10s %12s %12s   (%d repeats)\n", "test", "mean tok/s", "sd", "median tok/s", "ms/token",
           o->repeats);
    printf("pp%-8d %12.1f %10.1f %12.1f %12.3f\n", o->pp, acc_mean(&r->pp_tok_s), acc_sd(&r->pp_tok_s),
           acc_median(&r->pp_tok_s), 1e3 / acc_median(&r->pp_tok_s));
    printf("tg%-8d %12.2f %10.2f %12.2f %12.3f\n\n", o->tg, acc_mean(&r->tg_tok_s), acc_sd(&r->tg_tok_s),
           acc_median(&r->tg_tok_s), tpot * 1e3);
    printf("decode roofline: %.1f MB of weights per token / %.1f GB/s = %.2f ms/token;\n", wb / 1e6, r->bw / 1e9,
           roof_ms);
    printf("  median decode %.2f ms/token = %.1f%% of the roofline (%.1f GB/s effective)\n", tpot * 1e3,
           100.0 * roof_ms / (tpot * 1e3), wb / tpot / 1e9);
    if (!o->skip_cache)
        printf("\ncache on vs off (%d-token prompt, %d new tokens): on %.3f s, off %.3f s, speed-up %.2fx\n", o->pp,
               o->tg, r->cache_on_s, r->cache_off_s, r->cache_off_s / r->cache_on_s);
}

static void report_json(const bench_ctx *b, const bench_opts *o, const bench_result *r) {
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
    char *s = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
    puts(s);
    free(s);
    json_decref(root);
}

int cli_bench(int argc, char **argv) {
    bench_opts o;
    if (parse(argc, argv, &o)) return EXIT_USAGE;
    bench_ctx b = {0};
    if (!(b.m = cli_load_model(o.model, o.synthetic, o.dtype))) return 1;
    b.c = kvlm_model_config(b.m);
    int rc = 1;
    kvlm_error err;
    if (o.pp + o.tg > b.c->n_ctx) {
        fprintf(stderr, "kvlm bench: --pp %d + --tg %d exceed the context window of %d\n", o.pp, o.tg, b.c->n_ctx);
        kvlm_model_free(b.m);
        return EXIT_USAGE;
    }
    kvlm_kv_options ko = {.dtype = o.kv_dtype, .max_seqs = 1};
    kvlm_engine_options eo = {.threads = o.threads}, eo_nc = {.threads = o.threads, .no_cache = 1};
    kvlm_sampler_options so = kvlm_sampler_options_default();
    so.temperature = 0;
    b.prompt = malloc((size_t)o.pp * sizeof(int32_t));
    if (!b.prompt || !(b.kv = kvlm_kv_create(b.m, &ko, &err)) || !(b.e = kvlm_engine_create(b.m, b.kv, &eo, &err)) ||
        !(b.e_nocache = kvlm_engine_create(b.m, b.kv, &eo_nc, &err)) ||
        !(b.greedy = kvlm_sampler_create(&so, b.c->vocab_size, &err))) {
        fprintf(stderr, "kvlm bench: %s\n", b.prompt ? err.msg : "out of memory");
        goto out;
    }
    uint32_t x = 12345; /* fixed pseudo-random prompt */
    for (int i = 0; i < o.pp; i++) {
        x = x * 1664525u + 1013904223u;
        b.prompt[i] = (int32_t)((x >> 8) % (uint32_t)b.c->vocab_size);
    }
    bench_result r = {0};
    if (!o.json) fprintf(stderr, "measuring read bandwidth...\n");
    r.bw = kvlm_measure_read_bandwidth((size_t)o.bw_mib << 20, 5);
    if (run_tests(&b, &o, &r)) goto out;
    if (o.json) report_json(&b, &o, &r);
    else report_text(&b, &o, &r);
    rc = 0;
out:
    free(b.prompt);
    kvlm_sampler_free(b.greedy);
    kvlm_engine_free(b.e);
    kvlm_engine_free(b.e_nocache);
    kvlm_kv_free(b.kv);
    kvlm_model_free(b.m);
    return rc;
}
