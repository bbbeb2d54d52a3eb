/*
 * `kvlm bench-kv`: what paging the KV cache buys, measured side by side in
 * one process on one model with one set of kernels.
 *
 *   serve      N requests with log-normal prompt and output lengths (fixed
 *              seed, clipped to the context window) served by the
 *              continuous-batching scheduler in a fixed KV budget, once with
 *              contiguous max-length reservation and once paged. Every step
 *              is sampled: requests resident, bytes holding tokens over bytes
 *              reserved, then tokens/s of the batched generation.
 *   attention  the engine's attention kernels over L cached tokens read
 *              through a table of scattered blocks vs one contiguous block
 *              (kvlm_measure_attention).
 *   prefix     K requests sharing a long system prompt with short distinct
 *              suffixes: time to first token on a prefix-cache hit against a
 *              cold run, and the hit rate from the KV counters
 *              (bench_kv_prefix.c).
 *   windows    on a model with sliding-window layers, the serve workload
 *              paged twice: window layers giving back the blocks their
 *              window left vs every layer kept whole (the serving runs are
 *              bench_kv_serve.c's).
 *
 * Nothing here asserts a time; the tables print ratios measured in the same
 * run, next to the PagedAttention paper's figures.
 * Exit status: 0 ok, 1 runtime error, 2 bad flag.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli/args.h"
#include "cli/bench_kv.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/session.h"
#include "kvlm_measure.h"

enum { SEC_SERVE = 1, SEC_ATTN = 2, SEC_PREFIX = 4, SEC_WIN = 8 };
#define MAX_ATTN_LENS 8

typedef struct bkv_opts {
    model_flags mf;
    int requests, max_seqs, batch_tokens, prefix_cache, repeats, json, sections;
    uint64_t seed;
    int prompt_median, output_median;  /* 0: from n_ctx */
    float prompt_sigma, output_sigma;
    int kv_blocks;                     /* 0: default or from kv_mib (copied from mf) */
    float kv_mib;
    int attn_lens[MAX_ATTN_LENS], n_attn_lens, attn_rounds;
    int prefix_requests, prefix_tokens, suffix_tokens, prefix_output; /* suffix 0: from n_ctx */
} bkv_opts;

static int parse_lengths(const char *flag, const char *s, void *dst) {
    bkv_opts *o = dst;
    int *out = o->attn_lens, *n = &o->n_attn_lens;
    char buf[256];
    if (strlen(s) >= sizeof buf) {
        fprintf(stderr, "kvlm: %s: list too long\n", flag);
        return -1;
    }
    strcpy(buf, s);
    *n = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (*n == MAX_ATTN_LENS) {
            fprintf(stderr, "kvlm: %s: at most %d lengths\n", flag, MAX_ATTN_LENS);
            return -1;
        }
        if (arg_int(flag, t, 1, 1 << 20, &out[(*n)++])) return -1;
    }
    if (*n == 0) {
        fprintf(stderr, "kvlm: %s: no lengths given\n", flag);
        return -1;
    }
    return 0;
}

static int parse_sections(const char *flag, const char *s, void *dst) {
    int *out = dst;
    char buf[128];
    *out = 0;
    if (strlen(s) >= sizeof buf) {
        fprintf(stderr, "kvlm: %s: list too long\n", flag);
        return -1;
    }
    strcpy(buf, s);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (!strcmp(t, "serve")) *out |= SEC_SERVE;
        else if (!strcmp(t, "attention")) *out |= SEC_ATTN;
        else if (!strcmp(t, "prefix")) *out |= SEC_PREFIX;
        else if (!strcmp(t, "windows")) *out |= SEC_WIN;
        else {
            fprintf(stderr, "kvlm: %s: '%s' is not one of serve, attention, prefix, windows\n", flag, t);
            return -1;
        }
    }
    if (!*out) fprintf(stderr, "kvlm: %s: no section given\n", flag);
    return *out ? 0 : -1;
}

static int parse(int argc, char **argv, bkv_opts *o) {
    memset(o, 0, sizeof *o);
    model_flags_init(&o->mf);
    o->requests = 64;
    o->seed = 1;
    o->prompt_sigma = o->output_sigma = 1.0f;
    o->batch_tokens = 256;
    o->repeats = 1;
    o->attn_rounds = 9;
    o->prefix_requests = 8;
    o->prefix_tokens = 1000;
    o->prefix_output = 4;
    o->sections = SEC_SERVE | SEC_ATTN | SEC_PREFIX | SEC_WIN;
    const int defaults[3] = {128, 512, 1024};
    memcpy(o->attn_lens, defaults, sizeof defaults);
    o->n_attn_lens = 3;
    const cli_opt own[] = {
        CLI_HEADING("serve (a workload through the scheduler, contiguous then paged):"),
        CLI_INT("-n, --requests", "N", "requests (default 64)", &o->requests, 1, 4096),
        CLI_U64("--seed", "N", "seed of the drawn lengths and prompt ids (default 1)", &o->seed),
        CLI_INT("--prompt-median", "N", "median prompt length (default n_ctx / 16)", &o->prompt_median, 1, 1 << 20),
        CLI_FLOAT("--prompt-sigma", "S", "sigma of log(prompt length) (default 1.0)", &o->prompt_sigma, 0, 4),
        CLI_INT("--output-median", "N", "median output length (default n_ctx / 8: output-heavy, as chat is)",
                &o->output_median, 1, 1 << 20),
        CLI_FLOAT("--output-sigma", "S",
                  "sigma of log(output length) (default 1.0)\n"
                  "lengths ~ round(median x exp(sigma x Z)), Z standard normal;\n"
                  "prompt clipped to [1, n_ctx - 1], output to [1, n_ctx - prompt]",
                  &o->output_sigma, 0, 4),
        CLI_INT("--max-seqs", "N", "sequence slots (default: min(requests, 256))", &o->max_seqs, 1, 4096),
        CLI_INT("--batch-tokens", "N", "tokens per engine step, prefill chunks included (default 256)",
                &o->batch_tokens, 1, 1 << 16),
        CLI_SWITCH("--prefix-cache", "paged run with automatic prefix caching (default off: like for like)",
                   &o->prefix_cache, 1),
        CLI_INT("--repeats", "N", "serve each policy N times, alternating; median timings (default 1)", &o->repeats,
                1, 50),
        CLI_HEADING("attention:"),
        CLI_FN("--attn-lengths", "LIST", "context lengths, comma-separated (default 128,512,1024, clipped to n_ctx)",
               parse_lengths, o),
        CLI_INT("--attn-rounds", "N", "timed rounds per layout (default 9)", &o->attn_rounds, 1, 1000),
        CLI_HEADING("prefix:"),
        CLI_INT("--prefix-requests", "K", "requests sharing the system prompt (default 8, at least 2)",
                &o->prefix_requests, 2, 1000),
        CLI_INT("--prefix-tokens", "N", "system prompt length (default 1000, clipped to n_ctx - suffix - output)",
                &o->prefix_tokens, 1, 1 << 20),
        CLI_INT("--suffix-tokens", "N", "distinct suffix per request (default min(16, n_ctx / 16), at least 1)",
                &o->suffix_tokens, 1, 1 << 20),
        CLI_INT("--prefix-output", "N", "tokens generated per request (default 4)", &o->prefix_output, 1, 1 << 20),
        CLI_HEADING("sections:"),
        CLI_FN("--sections", "LIST", "serve,attention,prefix,windows (default all four; windows only\n"
                "runs on a model with window layers)", parse_sections, &o->sections),
        CLI_END,
    };
    cli_spec spec = {
        .cmd = "bench-kv",
        .usage = "bench-kv (-m MODEL | --synthetic PRESET) [options]",
        .about = "Paged vs contiguous KV cache on one model: residency, KV utilisation and\n"
                 "tokens/s of batched serving, the paged attention kernel's cost, prefix caching.\n",
        .groups = CLI_LOADS_MODEL | CLI_KV_POOL | CLI_JSON,
        .unused = "prompts are drawn from --seed",
        .opts = own,
        .notes = "The KV pool of the serve section defaults to 4 requests' contiguous reservation.\n",
        .mf = &o->mf,
        .json = &o->json,
    };
    if (cli_parse(&spec, argc, argv)) return -1;
    o->kv_blocks = o->mf.kv_blocks;
    o->kv_mib = o->mf.kv_mib;
    return 0;
}

/* ------------------------------------------------------------ workload */

static double uniform01(uint64_t *s) { return ((bkv_splitmix(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

/* Box-Muller: one standard normal draw. */
static double normal(uint64_t *s) {
    double u = uniform01(s), v = uniform01(s);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static int clip(double x, int lo, int hi) { return x < lo ? lo : x > hi ? hi : (int)lround(x); }

static int cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentiles of the drawn lengths. */
static bkv_lengths summarise(const int *v, int n) {
    int *t = malloc((size_t)n * sizeof(int));
    bkv_lengths st = {0};
    if (!t) return st;
    memcpy(t, v, (size_t)n * sizeof(int));
    qsort(t, (size_t)n, sizeof(int), cmp_int);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += t[i];
    st.mean = sum / n;
    st.p50 = t[(int)ceil(0.50 * n) - 1];
    st.p99 = t[(int)ceil(0.99 * n) - 1];
    st.min = t[0];
    st.max = t[n - 1];
    free(t);
    return st;
}

static void workload_free(bkv_workload *w) {
    for (int i = 0; w->prompts && i < w->n; i++) free(w->prompts[i]);
    free(w->prompts);
    free(w->prompt_len);
    free(w->output_len);
    memset(w, 0, sizeof *w);
}

static int workload_make(bkv_workload *w, const bkv_opts *o, const kvlm_config *c) {
    memset(w, 0, sizeof *w);
    w->n = o->requests;
    w->n_ctx = c->n_ctx;
    w->prompt_median = o->prompt_median ? o->prompt_median : fmax(1, c->n_ctx / 16);
    w->output_median = o->output_median ? o->output_median : fmax(1, c->n_ctx / 8);
    w->prompt_sigma = o->prompt_sigma;
    w->output_sigma = o->output_sigma;
    w->prompt_len = malloc((size_t)w->n * sizeof(int));
    w->output_len = malloc((size_t)w->n * sizeof(int));
    w->prompts = calloc((size_t)w->n, sizeof *w->prompts);
    if (!w->prompt_len || !w->output_len || !w->prompts) return -1;
    uint64_t s = o->seed;
    for (int i = 0; i < w->n; i++) {
        int p = clip(w->prompt_median * exp(w->prompt_sigma * normal(&s)), 1, c->n_ctx - 1);
        int g = clip(w->output_median * exp(w->output_sigma * normal(&s)), 1, c->n_ctx - p);
        w->prompt_len[i] = p;
        w->output_len[i] = g;
        if (!(w->prompts[i] = malloc((size_t)p * sizeof(int32_t)))) return -1;
        for (int j = 0; j < p; j++) w->prompts[i][j] = (int32_t)(bkv_splitmix(&s) % (uint64_t)c->vocab_size);
    }
    w->ps = summarise(w->prompt_len, w->n);
    w->os = summarise(w->output_len, w->n);
    return 0;
}

/* ----------------------------------------------------------- attention */

typedef struct attn_row {
    int len;
    kvlm_attn_bench_result r[2]; /* 0: every layer and head (from memory), 1: one head (hot, in cache) */
} attn_row;

static int attention_rows(const bkv_opts *o, kvlm_model *m, attn_row *rows, int *n_rows) {
    const kvlm_config *c = kvlm_model_config(m);
    *n_rows = 0;
    for (int i = 0; i < o->n_attn_lens; i++) {
        int L = o->attn_lens[i] < c->n_ctx ? o->attn_lens[i] : c->n_ctx, dup = 0;
        for (int j = 0; j < *n_rows; j++) dup |= rows[j].len == L;
        if (dup) continue;
        if (!o->json) fprintf(stderr, "bench-kv: attention over %d tokens...\n", L);
        attn_row *row = &rows[(*n_rows)++];
        row->len = L;
        for (int hot = 0; hot < 2; hot++) {
            kvlm_attn_bench_options ao = kvlm_attn_bench_default_params();
            ao.ctx_len = L;
            ao.block_size = o->mf.block_size;
            ao.scatter = 1;
            ao.rounds = o->attn_rounds;
            ao.hot = hot;
            ao.isa = o->mf.isa;
            ao.kv_dtype = o->mf.kv_dtype;
            ao.seed = o->seed;
            kvlm_error err;
            if (kvlm_measure_attention(m, &ao, &row->r[hot], &err)) {
                fprintf(stderr, "kvlm bench-kv: %s\n", err.msg);
                return -1;
            }
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- JSON */

/* The PagedAttention paper (Kwon et al., SOSP 2023), as the article cites it. */
#define REF_UTIL_LO 0.204
#define REF_UTIL_HI 0.382
#define REF_UTIL_PAGED 0.963
#define REF_KERNEL_LO 0.20
#define REF_KERNEL_HI 0.26

static json_t *lengths_json(const bkv_lengths *st, double median, double sigma, int hi) {
    return json_pack("{s:s,s:f,s:f,s:i,s:s,s:f,s:i,s:i,s:i,s:i}", "distribution", "lognormal", "median", median,
                     "sigma", sigma, "clip_min", 1, "clip_max", hi ? "n_ctx - 1" : "n_ctx - prompt", "mean", st->mean,
                     "p50", st->p50, "p99", st->p99, "min", st->min, "max", st->max);
}

static json_t *serve_json(const bkv_serve_result *r, const char *policy) {
    return json_pack("{s:s,s:f,s:f,s:f,s:f,s:i,s:f,s:f,s:f,s:f,s:I,s:I,s:I,s:I,s:I,s:I}", "policy", policy,
                     "utilisation_mean", r->util_mean, "utilisation_peak", r->util_peak, "utilisation_aggregate",
                     r->util_aggregate, "resident_mean", r->resident_mean, "resident_peak", r->resident_peak,
                     "tokens_per_s", r->tokens_per_s, "total_s", r->total_s, "tokens_per_cpu_s",
                     r->tokens_per_cpu_s, "cpu_s", r->cpu_s, "generated_tokens",
                     (json_int_t)r->generated, "steps", (json_int_t)r->steps, "preemptions",
                     (json_int_t)r->preemptions, "prefix_hit_tokens", (json_int_t)r->prefix_hit_tokens,
                     "peak_bytes_live", (json_int_t)r->peak_bytes_live, "peak_bytes_reserved",
                     (json_int_t)r->peak_bytes_reserved);
}

static json_t *workload_json(const bkv_workload *w, const bkv_opts *o, size_t blocks, size_t block_bytes, int max_seqs,
                             int n_slices) {
    const int bs = o->mf.block_size, per_req = (w->n_ctx + bs - 1) / bs * n_slices;
    return json_pack("{s:i,s:I,s:o,s:o,s:I,s:i,s:I,s:I,s:I,s:i,s:i,s:b,s:i}", "requests", w->n, "seed",
                     (json_int_t)o->seed, "prompt", lengths_json(&w->ps, w->prompt_median, w->prompt_sigma, 1),
                     "output", lengths_json(&w->os, w->output_median, w->output_sigma, 0), "kv_blocks",
                     (json_int_t)blocks, "block_size", bs, "kv_tokens", (json_int_t)(blocks * bs / n_slices), "kv_bytes",
                     (json_int_t)(blocks * block_bytes), "contiguous_capacity", (json_int_t)(blocks / per_req),
                     "max_seqs", max_seqs, "batch_tokens", o->batch_tokens, "prefix_cache", o->prefix_cache,
                     "repeats", o->repeats);
}

/* Median round, in ns per cached token per query head. */
static double ns_tok(const kvlm_attn_bench_result *r, int paged, int len) {
    return (paged ? r->paged_median_s : r->contiguous_median_s) * 1e9 / len;
}

static json_t *attention_json(const attn_row *rows, int n, const bkv_opts *o) {
    json_t *arr = json_array();
    double worst[2] = {0, 0};
    for (int i = 0; i < n; i++) {
        const kvlm_attn_bench_result *r = rows[i].r;
        double ratio[2];
        for (int k = 0; k < 2; k++) {
            ratio[k] = r[k].paired_ratio;
            worst[k] = fmax(worst[k], ratio[k]);
        }
        json_array_append_new(
            arr, json_pack("{s:i,s:f,s:f,s:f,s:f,s:f,s:f,s:f,s:f}", "ctx_len", rows[i].len,
                           "contiguous_ns_per_token_head", ns_tok(&r[0], 0, rows[i].len), "paged_ns_per_token_head",
                           ns_tok(&r[0], 1, rows[i].len), "ratio", ratio[0], "ratio_of_best",
                           bkv_div(r[0].paged_s, r[0].contiguous_s), "hot_contiguous_ns_per_token_head",
                           ns_tok(&r[1], 0, rows[i].len), "hot_paged_ns_per_token_head", ns_tok(&r[1], 1, rows[i].len),
                           "hot_ratio", ratio[1], "max_abs_diff", fmax(r[0].max_abs_diff, r[1].max_abs_diff)));
    }
    return json_pack("{s:i,s:i,s:b,s:i,s:s,s:o,s:f,s:f}", "threads", 1, "block_size", o->mf.block_size, "scatter", 1,
                     "rounds", o->attn_rounds, "timing",
                     "ns: median round; ratio: median over rounds of paged / contiguous timed back to back; "
                     "hot: one head repeated, context in cache", "lengths",
                     arr, "worst_ratio", worst[0], "hot_worst_ratio", worst[1]);
}

static json_t *reference_json(void) {
    return json_pack("{s:s,s:[f,f],s:f,s:[f,f],s:[f,f]}", "source",
                     "Kwon et al., Efficient Memory Management for LLM Serving with PagedAttention, SOSP 2023",
                     "utilisation_before_paging", REF_UTIL_LO, REF_UTIL_HI, "utilisation_paged", REF_UTIL_PAGED,
                     "throughput_ratio", 2.0, 4.0, "paged_kernel_slowdown", REF_KERNEL_LO, REF_KERNEL_HI);
}

/* --------------------------------------------------------------- human */

static void print_workload(const bkv_workload *w, size_t blocks, size_t block_bytes, int bs, int max_seqs,
                           int n_slices) {
    const int per_req = (w->n_ctx + bs - 1) / bs * n_slices;
    printf("workload   %d requests, lengths ~ round(median x exp(sigma x Z)), Z ~ N(0,1)\n", w->n);
    printf("  %-8s %-30s %8s %6s %6s %6s %6s\n", "", "distribution", "mean", "p50", "p99", "min", "max");
    printf("  %-8s log-normal(median %4.0f, s %.2f)  %8.1f %6d %6d %6d %6d  clip [1, n_ctx-1]\n", "prompt",
           w->prompt_median, w->prompt_sigma, w->ps.mean, w->ps.p50, w->ps.p99, w->ps.min, w->ps.max);
    printf("  %-8s log-normal(median %4.0f, s %.2f)  %8.1f %6d %6d %6d %6d  clip [1, n_ctx-prompt]\n", "output",
           w->output_median, w->output_sigma, w->os.mean, w->os.p50, w->os.p99, w->os.min, w->os.max);
    printf("KV budget  %zu blocks x %d tokens%s = %zu tokens, %.1f MiB; contiguous reservation (%d tokens) fits "
           "%zu requests; %d slots\n\n",
           blocks, bs, n_slices > 1 ? " / layer slices" : "", blocks * (size_t)bs / (size_t)n_slices,
           blocks * (double)block_bytes / 1048576.0, per_req / n_slices * bs, blocks / (size_t)per_req, max_seqs);
}

/* The two runs side by side: a and b name the columns (b / a the ratio). */
static void print_serve(const bkv_serve_result r[2], int repeats, const char *a, const char *b, const char *ratio) {
    printf("%-24s %12s %12s %12s\n", "serving", a, b, ratio);
    printf("%-24s %12.2f %12.2f %11.2fx\n", "resident, mean", r[0].resident_mean, r[1].resident_mean,
           bkv_div(r[1].resident_mean, r[0].resident_mean));
    printf("%-24s %12d %12d %11.2fx\n", "resident, peak", r[0].resident_peak, r[1].resident_peak,
           bkv_div(r[1].resident_peak, r[0].resident_peak));
    printf("%-24s %11.1f%% %11.1f%%\n", "KV utilisation, mean", 100 * r[0].util_mean, 100 * r[1].util_mean);
    printf("%-24s %11.1f%% %11.1f%%\n", "KV utilisation, at peak", 100 * r[0].util_peak, 100 * r[1].util_peak);
    printf("%-24s %12.1f %12.1f %11.2fx\n", "tokens/s", r[0].tokens_per_s, r[1].tokens_per_s,
           bkv_div(r[1].tokens_per_s, r[0].tokens_per_s));
    printf("%-24s %12.3f %12.3f\n", "total s", r[0].total_s, r[1].total_s);
    printf("%-24s %12.1f %12.1f %11.2fx\n", "tokens per CPU s", r[0].tokens_per_cpu_s, r[1].tokens_per_cpu_s,
           bkv_div(r[1].tokens_per_cpu_s, r[0].tokens_per_cpu_s));
    printf("%-24s %12.3f %12.3f\n", "CPU s (all threads)", r[0].cpu_s, r[1].cpu_s);
    printf("%-24s %12llu %12llu\n", "generated tokens", (unsigned long long)r[0].generated,
           (unsigned long long)r[1].generated);
    printf("%-24s %12llu %12llu\n", "engine steps", (unsigned long long)r[0].steps, (unsigned long long)r[1].steps);
    printf("%-24s %12llu %12llu\n", "preemptions", (unsigned long long)r[0].preemptions,
           (unsigned long long)r[1].preemptions);
    printf("(utilisation = bytes holding token states / bytes reserved, sampled after every step; \"at peak\" is\n"
           " the step storing the most token states; timings are the median of %d run%s per policy; CPU time\n"
           " leaves out what other processes take on a shared machine)\n\n", repeats, repeats > 1 ? "s" : "");
}

static void print_attention(const attn_row *rows, int n, const bkv_opts *o) {
    printf("attention kernel, 1 thread: ns per cached token per query head (median of %d rounds); ratio = median\n"
           "of paged / contiguous timed back to back; paged = %d-token blocks scattered in the pool, contiguous =\n"
           "one L-token block; mem = every layer and head in turn (as a decode step), cache = one head repeated\n",
           o->attn_rounds, o->mf.block_size);
    printf("%8s %12s %12s %8s   %12s %12s %8s\n", "L", "contig mem", "paged mem", "ratio", "contig cache",
           "paged cache", "ratio");
    for (int i = 0; i < n; i++) {
        const kvlm_attn_bench_result *r = rows[i].r;
        const int L = rows[i].len;
        printf("%8d %12.3f %12.3f %7.3fx   %12.3f %12.3f %7.3fx\n", L, ns_tok(&r[0], 0, L), ns_tok(&r[0], 1, L),
               r[0].paired_ratio, ns_tok(&r[1], 0, L), ns_tok(&r[1], 1, L), r[1].paired_ratio);
    }
    printf("\n");
}

/* The paper's figures with this run's beside them. */
static void print_footnote(const json_t *d) {
    const json_t *c = json_object_get(d, "contiguous"), *p = json_object_get(d, "paged");
    const json_t *a = json_object_get(d, "attention");
    if (!(c && p) && !a) return;
    printf("reference: PagedAttention (Kwon et al., SOSP 2023)    | kvlm, this run\n");
    if (c && p) {
        double tc = json_real_value(json_object_get(c, "tokens_per_s"));
        double tp = json_real_value(json_object_get(p, "tokens_per_s"));
        printf("  KV holding tokens, pre-paging systems 20.4-38.2%%    | contiguous %.1f%% (mean), %.1f%% (at peak)\n",
               100 * json_real_value(json_object_get(c, "utilisation_mean")),
               100 * json_real_value(json_object_get(c, "utilisation_peak")));
        printf("  KV holding tokens, paged              96.3%%         | paged %.1f%% (mean), %.1f%% (at peak)\n",
               100 * json_real_value(json_object_get(p, "utilisation_mean")),
               100 * json_real_value(json_object_get(p, "utilisation_peak")));
        const json_t *r = json_object_get(d, "ratio");
        printf("  throughput, paged vs pre-paging       2-4x          | %.2fx tokens/s (%.2fx per CPU s), %.2fx "
               "requests resident\n", bkv_div(tp, tc), json_real_value(json_object_get(r, "tokens_per_cpu_s")),
               json_real_value(json_object_get(r, "resident_mean")));
    }
    if (a)
        printf("  paged attention kernel                20-26%% slower | %+.1f%% from memory, %+.1f%% in cache "
               "(worst length)\n", 100 * (json_real_value(json_object_get(a, "worst_ratio")) - 1),
               100 * (json_real_value(json_object_get(a, "hot_worst_ratio")) - 1));
}

/* ----------------------------------------------------------------- run */

/* Blocks of the serving budget: --kv-blocks, --kv-mib, or four requests'
 * contiguous reservation. 0 after printing why the budget is unusable. */
static size_t budget_blocks(const bkv_opts *o, kvlm_model *m, size_t *block_bytes, int *n_slices) {
    const kvlm_config *c = kvlm_model_config(m);
    kvlm_kv_options ko = kvlm_kv_default_params();
    ko.dtype = o->mf.kv_dtype;
    ko.block_size = o->mf.block_size;
    ko.n_blocks = 1;
    kvlm_error err;
    kvlm_kv *probe = kvlm_kv_create(m, &ko, &err);
    if (!probe) {
        fprintf(stderr, "kvlm bench-kv: %s\n", err.msg);
        return 0;
    }
    kvlm_kv_stats st;
    kvlm_kv_info info;
    kvlm_kv_get_stats(probe, &st);
    kvlm_kv_get_info(probe, &info);
    kvlm_kv_free(probe);
    *block_bytes = st.block_bytes;
    *n_slices = info.n_slices;
    /* a request's reservation: the whole context in every layer slice */
    const size_t per_req = (size_t)(c->n_ctx + o->mf.block_size - 1) / o->mf.block_size * (size_t)info.n_slices;
    size_t blocks = o->kv_blocks ? (size_t)o->kv_blocks
                    : o->kv_mib > 0 ? (size_t)(o->kv_mib * 1048576.0 / st.block_bytes)
                                    : 4 * per_req;
    if (blocks < per_req && (o->sections & SEC_SERVE)) { /* the contiguous run needs one whole reservation */
        fprintf(stderr, "kvlm bench-kv: %s: %zu blocks is less than one request's contiguous reservation "
                "(%zu blocks of %d tokens for n_ctx %d)\n", o->kv_mib > 0 ? "--kv-mib" : "--kv-blocks", blocks,
                per_req, o->mf.block_size, c->n_ctx);
        return 0;
    }
    return blocks;
}

/* The serving context of the budget: blocks and slots. */
static bkv_serve_ctx serve_ctx_of(const bkv_opts *o, kvlm_model *m, size_t blocks) {
    return (bkv_serve_ctx){.m = m, .c = kvlm_model_config(m), .mf = &o->mf, .kv_blocks = blocks,
                           .max_seqs = o->max_seqs ? o->max_seqs : (o->requests < 256 ? o->requests : 256),
                           .prefix_cache = o->prefix_cache, .batch_tokens = o->batch_tokens, .repeats = o->repeats,
                           .progress = !o->json};
}

/* The budget and the drawn workload (made once, for the sections that serve). */
static int workload_setup(const bkv_opts *o, kvlm_model *m, json_t *doc, bkv_workload *w, size_t *blocks) {
    size_t block_bytes = 0;
    int n_slices = 1;
    if (!(*blocks = budget_blocks(o, m, &block_bytes, &n_slices))) return 2;
    if (w->n) return 0; /* made and shown by an earlier section */
    if (workload_make(w, o, kvlm_model_config(m))) {
        fprintf(stderr, "kvlm bench-kv: out of memory\n");
        return 1;
    }
    const bkv_serve_ctx ctx = serve_ctx_of(o, m, *blocks);
    if (!o->json) print_workload(w, *blocks, block_bytes, o->mf.block_size, ctx.max_seqs, n_slices);
    json_object_set_new(doc, "workload", workload_json(w, o, *blocks, block_bytes, ctx.max_seqs, n_slices));
    return 0;
}

static int run_serve(const bkv_opts *o, kvlm_model *m, json_t *doc, bkv_workload *w, bkv_serve_result res[2]) {
    size_t blocks = 0;
    int rc = workload_setup(o, m, doc, w, &blocks);
    if (rc) return rc;
    bkv_serve_ctx ctx = serve_ctx_of(o, m, blocks);
    const bkv_policy pol[2] = {BKV_CONTIGUOUS, BKV_PAGED};
    if (bkv_serve_pair(&ctx, w, pol, res)) return 1;
    json_object_set_new(doc, "contiguous", serve_json(&res[0], "reserve_max"));
    json_object_set_new(doc, "paged", serve_json(&res[1], "paged"));
    json_object_set_new(doc, "ratio", json_pack("{s:f,s:f,s:f,s:f}", "tokens_per_s",
                                                bkv_div(res[1].tokens_per_s, res[0].tokens_per_s), "tokens_per_cpu_s",
                                                bkv_div(res[1].tokens_per_cpu_s, res[0].tokens_per_cpu_s),
                                                "resident_mean",
                                                bkv_div(res[1].resident_mean, res[0].resident_mean), "resident_peak",
                                                bkv_div(res[1].resident_peak, res[0].resident_peak)));
    if (!o->json) print_serve(res, o->repeats, "contiguous", "paged", "paged/contig");
    return 0;
}

/* Paged with window layers giving blocks back vs paged keeping every layer
 * whole, same workload and budget: what the per-layer windows buy. */
static int run_windows(const bkv_opts *o, kvlm_model *m, json_t *doc, bkv_workload *w) {
    kvlm_kv_layer_type t[8];
    kvlm_kv_options ko = kvlm_kv_default_params();
    ko.dtype = o->mf.kv_dtype;
    ko.block_size = o->mf.block_size;
    ko.n_blocks = 1;
    kvlm_error err;
    kvlm_kv *probe = kvlm_kv_create(m, &ko, &err);
    if (!probe) {
        fprintf(stderr, "kvlm bench-kv: %s\n", err.msg);
        return 1;
    }
    const int nt = kvlm_kv_layer_types(probe, t, 8);
    kvlm_kv_free(probe);
    size_t wbpt = 0, gbpt = 0;
    for (int i = 0; i < nt && i < 8; i++) *(t[i].window ? &wbpt : &gbpt) += t[i].bytes_per_token;
    if (!wbpt) {
        if (!o->json) printf("windows    skipped: no layer of this model has a sliding window\n\n");
        return 0;
    }
    size_t blocks = 0;
    int rc = workload_setup(o, m, doc, w, &blocks);
    if (rc) return rc;
    bkv_serve_ctx ctx = serve_ctx_of(o, m, blocks);
    const bkv_policy pol[2] = {BKV_PAGED_WHOLE, BKV_PAGED};
    bkv_serve_result res[2];
    if (bkv_serve_pair(&ctx, w, pol, res)) return 1;
    json_t *j = json_pack("{s:o,s:o,s:I,s:I}", "whole", serve_json(&res[0], "paged_whole"), "windowed",
                          serve_json(&res[1], "paged_windows"), "bytes_per_token_global", (json_int_t)gbpt,
                          "bytes_per_token_window", (json_int_t)wbpt);
    json_object_set_new(j, "ratio", json_pack("{s:f,s:f,s:f,s:f}", "tokens_per_s",
                                              bkv_div(res[1].tokens_per_s, res[0].tokens_per_s), "tokens_per_cpu_s",
                                              bkv_div(res[1].tokens_per_cpu_s, res[0].tokens_per_cpu_s),
                                              "resident_mean", bkv_div(res[1].resident_mean, res[0].resident_mean),
                                              "resident_peak", bkv_div(res[1].resident_peak, res[0].resident_peak)));
    json_object_set_new(doc, "windows", j);
    if (!o->json) {
        printf("windows    the same workload and budget, paged: window layers give back the blocks their window\n"
               "           left (windowed) or keep every block (whole); KV per token %zu B global + %zu B window\n",
               gbpt, wbpt);
        print_serve(res, o->repeats, "whole", "windowed", "windowed/whole");
    }
    return 0;
}

static bkv_prefix_params prefix_params(const bkv_opts *o) {
    return (bkv_prefix_params){.requests = o->prefix_requests, .prefix_tokens = o->prefix_tokens,
                               .suffix_tokens = o->suffix_tokens, .output_tokens = o->prefix_output,
                               .batch_tokens = o->batch_tokens, .progress = !o->json, .seed = o->seed};
}

static int run_sections(const bkv_opts *o, kvlm_model *m, json_t *doc) {
    bkv_workload w = {0};
    bkv_serve_result res[2];
    int rc = 0;
    if (o->sections & SEC_SERVE) rc = run_serve(o, m, doc, &w, res);
    if (!rc && (o->sections & SEC_WIN)) rc = run_windows(o, m, doc, &w);
    workload_free(&w);
    if (!rc && (o->sections & SEC_ATTN)) {
        attn_row rows[MAX_ATTN_LENS];
        int n = 0;
        rc = attention_rows(o, m, rows, &n) ? 1 : 0;
        if (!rc) json_object_set_new(doc, "attention", attention_json(rows, n, o));
        if (!rc && !o->json) print_attention(rows, n, o);
    }
    if (!rc && (o->sections & SEC_PREFIX)) {
        bkv_prefix_params pp = prefix_params(o);
        bkv_prefix_result pr;
        rc = bkv_prefix_shape(&pp, kvlm_model_config(m), &pr) || bkv_prefix_run(m, &o->mf, &pp, &pr) ? 1 : 0;
        if (!rc) json_object_set_new(doc, "prefix", bkv_prefix_json(&pr));
        if (!rc && !o->json) bkv_prefix_print(&pr);
    }
    return rc;
}

int cli_bench_kv(int argc, char **argv) {
    bkv_opts o;
    if (parse(argc, argv, &o)) return EXIT_USAGE;
    kvlm_model *m = cli_load_model(o.mf.model, o.mf.synthetic, o.mf.synth_dtype, &o.mf);
    if (!m) return 1;
    const kvlm_config *c = kvlm_model_config(m);
    size_t block_bytes;
    int n_slices;
    bkv_prefix_params pp = prefix_params(&o);
    bkv_prefix_result shape;
    if (((o.sections & (SEC_SERVE | SEC_WIN)) && !budget_blocks(&o, m, &block_bytes, &n_slices)) ||
        ((o.sections & SEC_PREFIX) && bkv_prefix_shape(&pp, c, &shape))) {
        kvlm_model_free(m);
        return EXIT_USAGE;
    }
    kvlm_error err;
    kvlm_engine_options eo = session_engine_options(&o.mf);
    kvlm_kv_options ko = kvlm_kv_default_params();
    ko.dtype = o.mf.kv_dtype;
    ko.block_size = o.mf.block_size;
    kvlm_kv *kv = kvlm_kv_create(m, &ko, &err);
    kvlm_engine *e = kv ? kvlm_engine_create(m, kv, &eo, &err) : NULL;
    if (!e) {
        fprintf(stderr, "kvlm bench-kv: %s\n", err.msg);
        kvlm_kv_free(kv);
        kvlm_model_free(m);
        return 1;
    }
    json_t *doc = json_pack("{s:s,s:i,s:i,s:s,s:s,s:i,s:o}", "model", kvlm_model_source(m), "n_ctx", c->n_ctx,
                            "threads", kvlm_engine_threads(e), "isa", kvlm_isa_name(kvlm_engine_isa(e)), "kv_dtype",
                            kvlm_dtype_name(o.mf.kv_dtype), "block_size", o.mf.block_size, "reference",
                            reference_json());
    if (!o.json)
        printf("model      %s (%d layers, %d heads, n_ctx %d)\nengine     %d threads, %s kernels, KV %s, %d-token "
               "blocks\n", kvlm_model_source(m), c->n_layer, c->n_head, c->n_ctx, kvlm_engine_threads(e),
               kvlm_isa_name(kvlm_engine_isa(e)), kvlm_dtype_name(o.mf.kv_dtype), o.mf.block_size);
    kvlm_engine_free(e);
    kvlm_kv_free(kv);
    int rc = run_sections(&o, m, doc);
    if (!rc && o.json) {
        cli_print_json(doc);
    } else if (!rc) {
        print_footnote(doc);
    }
    json_decref(doc);
    kvlm_model_free(m);
    return rc;
}
