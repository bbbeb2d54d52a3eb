/*
 * `kvlm kv`: KV cache bytes per token and per context for the built-in
 * presets or one model (-m, read with kvlm_config_load, so models kvlm
 * cannot run yet are sized too), the grouped-query saving against a
 * multi-head twin, and capacity planning: how many requests fit in a
 * memory budget with contiguous max-length reservation vs paged blocks.
 * All arithmetic is in app/kv_sizing.c; this file parses flags and prints.
 * measure_kv (measure.h) returns the --json document for `kvlm report`.
 * Exit status: 0 ok, 1 model not readable, 2 bad flag or impossible plan.
 */
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/measure.h"
#include "cli/options.h"
#include "app/kv_sizing.h"

#define MAX_CTX KV_MAX_CTX
#define MAX_ROWS 8

/* The request (measure.h) is what the flags describe. */
typedef kv_request kv_opts;

kv_request kv_request_default(void) {
    return (kv_request){.kv_dtype = KVLM_F16, .weight_dtype = KVLM_F16, .ctx = {4096, 131072}, .n_ctx = 2};
}

typedef struct kv_row {
    kvs_model m;
    uint64_t bpt, mha_bpt, totals[MAX_CTX], mha_first, max_ctx_bytes;
    uint64_t bpt_global, bpt_window; /* bpt split by layer type (bpt_window 0 without a window) */
    int have_weights;
    uint64_t weights;
    char weights_from[32];    /* "params x f16", "weight files", "--weights-bytes" */
    int have_plan;
    kvs_plan_in in;
    kvs_plan plan;
} kv_row;

/* A positive integer, digits only, at most hi. */
static int parse_count(const char *flag, const char *s, uint64_t hi, uint64_t *out) {
    uint64_t v = 0;
    const char *p = s;
    for (; *p >= '0' && *p <= '9'; p++)
        if (kvs_mul(v, 10, &v) || __builtin_add_overflow(v, (uint64_t)(*p - '0'), &v)) break;
    if (p == s || *p || v == 0 || v > hi) {
        fprintf(stderr, "kvlm kv: %s: '%s' must be an integer in [1, %llu]\n", flag, s, (unsigned long long)hi);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_ctx_list(const char *flag, const char *s, void *dst) {
    (void)flag;
    kv_opts *o = dst;
    char buf[512];
    if (strlen(s) >= sizeof buf) {
        fprintf(stderr, "kvlm kv: --ctx: list too long\n");
        return -1;
    }
    strcpy(buf, s);
    o->n_ctx = 0;
    char *save = NULL;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (o->n_ctx == MAX_CTX) {
            fprintf(stderr, "kvlm kv: --ctx: at most %d lengths\n", MAX_CTX);
            return -1;
        }
        if (parse_count("--ctx", t, 1ull << 40, &o->ctx[o->n_ctx++])) return -1;
    }
    if (!o->n_ctx || s[strlen(s) - 1] == ',' || s[0] == ',' || strstr(s, ",,")) {
        fprintf(stderr, "kvlm kv: --ctx: '%s' is not a comma-separated list of positive integers\n", s);
        return -1;
    }
    return 0;
}

/* The KV cache takes what the library's one rule accepts, with its message
 * (kvlm run --kv-dtype gives the same). */
static int parse_kv_dtype(const char *flag, const char *s, void *out) {
    kvlm_error err;
    if (!kvlm_kv_dtype_parse(s, out, &err)) return 0;
    fprintf(stderr, "kvlm kv: %s: %s\n", flag, err.msg);
    return -1;
}

static int parse_weight_dtype(const char *flag, const char *s, void *out) {
    if (!kvlm_dtype_parse(s, out, NULL)) return 0;
    fprintf(stderr, "kvlm kv: %s: '%s' is not a dtype (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, "
                    "q4_k, q5_k, q6_k, iq4_nl)\n", flag, s);
    return -1;
}

static int parse_size(const char *flag, const char *s, void *out) {
    if (!kvs_parse_size(s, out)) return 0;
    fprintf(stderr, "kvlm kv: %s: '%s' is not a size (a non-negative number of bytes, optionally with a unit "
                    "B, KB, KiB, MB, MiB, GB, GiB, TB or TiB, e.g. 24GiB)\n", flag, s);
    return -1;
}

static int parse_length(const char *flag, const char *s, void *out) { return parse_count(flag, s, 1ull << 40, out); }
static int parse_block(const char *flag, const char *s, void *out) { return parse_count(flag, s, 1u << 20, out); }

static int parse(int argc, char **argv, kv_opts *o, int *json) {
    *o = kv_request_default();
    *json = 0;
    int ctx_len_given = 0, mean_len_given = 0, block_given = 0;
    const cli_opt own[] = {
        CLI_STR("-m, --model", "PATH",
                "model directory, config.json, .safetensors, .gguf or llm.c .bin\n(only the configuration is read)",
                &o->model),
        CLI_STR("--preset", "NAME", "gpt2-124m, llama-3.1-8b, mistral-7b, qwen2.5-7b,\nllama-2-70b, llama-2-7b",
                &o->preset),
        CLI_FN("--kv-dtype", "T",
               "f32, f16 (default), q8_0 (kvlm's 8-bit KV: per 32 numbers\n"
               "32 int8 and an f16 scale, 34 bytes; head dim a multiple of 32)",
               parse_kv_dtype, &o->kv_dtype),
        CLI_FN("--ctx", "N[,N...]", "context lengths to total (default 4096,131072)", parse_ctx_list, o),
        CLI_HEADING("capacity planning (needs --memory):"),
        {.names = "--memory", .metavar = "SIZE",
         .help = "memory for weights + KV: bytes or with a unit, e.g. 24GiB,\n"
                 "80GB (B, KB, MB, GB, TB = powers of 1000; KiB, MiB, GiB,\nTiB = powers of 1024)",
         .kind = OPT_FN, .fn = parse_size, .dst = &o->memory, .given = &o->have_memory},
        {.names = "--weights-bytes", .metavar = "SIZE",
         .help = "weights' bytes (default: params x --weight-dtype for a\n"
                 "preset; for -m, the tensors in the model's weight files)",
         .kind = OPT_FN, .fn = parse_size, .dst = &o->weights, .given = &o->have_weights},
        {.names = "--weight-dtype", .metavar = "T",
         .help = "f32, f16 (default for presets), bf16, q8_0 or another GGUF\n"
                 "type (q4_0, q4_k, ...); with -m, counts the model's parameters\n"
                 "at this dtype instead of as stored",
         .kind = OPT_FN, .fn = parse_weight_dtype, .dst = &o->weight_dtype, .given = &o->have_weight_dtype},
        {.names = "--ctx-len", .metavar = "L", .help = "tokens reserved per request (default: the model's max context)",
         .kind = OPT_FN, .fn = parse_length, .dst = &o->ctx_len, .given = &ctx_len_given},
        {.names = "--mean-len", .metavar = "M", .help = "mean tokens per request (default L/4)", .kind = OPT_FN,
         .fn = parse_length, .dst = &o->mean_len, .given = &mean_len_given},
        {.names = "--block-size", .metavar = "B", .help = "tokens per paged block (default 16)", .kind = OPT_FN,
         .fn = parse_block, .dst = &o->block_size, .given = &block_given},
        CLI_HEADING("  contiguous requests = floor((memory - weights) / (L x bytes per token))\n"
                    "  paged requests      = floor((memory - weights) / (ceil(M / B) x B x bytes per token))\n"
                    "  utilisation         = tokens held / tokens reserved: M / L contiguous,\n"
                    "                        M / (ceil(M / B) x B) paged"),
        CLI_END,
    };
    cli_spec spec = {
        .cmd = "kv",
        .usage = "kv [-m MODEL | --preset NAME] [options]",
        .about = "KV cache size: bytes per token = 2 x layers x KV heads x head dim x bytes per number\n"
                 "(q8_0: 2 x layers x KV heads x (head dim + 2 x head dim / 32), the scales included).\n"
                 "With no model, prints every preset. Nothing is loaded but the configuration.\n",
        .groups = CLI_JSON,
        .unused = "it reads only the model's configuration",
        .opts = own,
        .json = json,
    };
    if (cli_parse(&spec, argc, argv)) return -1;
    const char *plan_name = o->have_weights        ? "--weights-bytes"
                            : o->have_weight_dtype ? "--weight-dtype"
                            : ctx_len_given        ? "--ctx-len"
                            : mean_len_given       ? "--mean-len"
                            : block_given          ? "--block-size"
                                                   : NULL;
    if (o->model && o->preset) return cli_usage_error(&spec, "-m and --preset: give at most one");
    if (o->preset && !kvs_preset_find(o->preset))
        return cli_usage_error(&spec, "--preset: unknown preset '%s' (known: %s)", o->preset, kvs_preset_names());
    if (plan_name && !o->have_memory)
        return cli_usage_error(&spec, "%s: capacity planning flags need --memory", plan_name);
    if (o->have_weights && !o->model && !o->preset)
        return cli_usage_error(&spec, "--weights-bytes: applies to one model; give -m or --preset");
    if (o->mean_len && o->ctx_len && o->mean_len > o->ctx_len)
        return cli_usage_error(&spec, "--mean-len %llu exceeds --ctx-len %llu", (unsigned long long)o->mean_len,
                               (unsigned long long)o->ctx_len);
    return 0;
}

/* Weights for capacity planning: the flag, the preset's params, or the
 * model's weight files. Returns 0, or 2 when planning needs them and no
 * source works. */
static int row_weights(kv_row *r, const kv_opts *o, int is_preset) {
    if (o->have_weights) {
        r->have_weights = 1;
        r->weights = o->weights;
        snprintf(r->weights_from, sizeof r->weights_from, "--weights-bytes");
        return 0;
    }
    if (is_preset) {
        if (kvs_numbers_bytes(o->weight_dtype, r->m.params, &r->weights)) return 2;
        snprintf(r->weights_from, sizeof r->weights_from, "params x %s", kvlm_dtype_name(o->weight_dtype));
        r->have_weights = 1;
        return 0;
    }
    kvlm_error err;
    if (!o->model) { /* a configuration without its files: weights only from the flag */
        if (!o->have_memory) return 0;
        fprintf(stderr, "kvlm kv: --weights-bytes is required: the weights of %s are not known\n", r->m.label);
        return 2;
    }
    if (!kvlm_weight_bytes(o->model, &r->weights, &r->m.params, &err)) {
        r->have_weights = 1;
        snprintf(r->weights_from, sizeof r->weights_from, "weight files");
        /* --weight-dtype: the same parameters stored another way */
        if (o->have_weight_dtype) {
            if (kvs_numbers_bytes(o->weight_dtype, r->m.params, &r->weights)) return 2;
            snprintf(r->weights_from, sizeof r->weights_from, "params x %s", kvlm_dtype_name(o->weight_dtype));
        }
        return 0;
    }
    if (!o->have_memory) return 0;
    fprintf(stderr, "kvlm kv: --weights-bytes is required: the weights of %s cannot be measured (%s)\n", o->model,
            err.msg);
    return 2;
}

static int row_plan(kv_row *r, const kv_opts *o, int single) {
    char a[32], b[32];
    uint64_t L = o->ctx_len ? o->ctx_len : (uint64_t)r->m.max_ctx;
    uint64_t M = o->mean_len ? o->mean_len : (L / 4 ? L / 4 : 1);
    if (M > L) {
        fprintf(stderr, "kvlm kv: --mean-len %llu exceeds the context length %llu of %s (give --ctx-len)\n",
                (unsigned long long)M, (unsigned long long)L, r->m.label);
        return 2;
    }
    r->in = (kvs_plan_in){.memory = o->memory, .weights = r->weights, .bytes_per_token = r->bpt, .ctx_len = L,
                          .mean_len = M, .block_size = o->block_size ? o->block_size : 16,
                          .window = r->bpt_window ? (uint64_t)r->m.window : 0,
                          .window_bytes_per_token = r->bpt_window};
    kvlm_error err;
    if (kvs_plan_compute(&r->in, &r->plan, &err)) {
        fprintf(stderr, "kvlm kv: %s: %s\n", r->m.label, err.msg);
        return 2;
    }
    r->have_plan = 1;
    if (single && !r->plan.weights_fit) {
        fprintf(stderr, "kvlm kv: --memory %s is smaller than the weights of %s (%s, %s)\n",
                kvs_human_bytes(o->memory, a, sizeof a), r->m.label, kvs_human_bytes(r->weights, b, sizeof b),
                r->weights_from);
        return 2;
    }
    return 0;
}

static int build_row(kv_row *r, const kv_opts *o, int is_preset, int single) {
    int block = 0;
    kvlm_dtype_block(o->kv_dtype, &block);
    if (block > 1 && (r->m.head_dim <= 0 || r->m.head_dim % block)) {
        fprintf(stderr, "kvlm kv: %s: --kv-dtype %s needs a head dim that is a multiple of %d (it has %d)\n",
                r->m.label, kvlm_dtype_name(o->kv_dtype), block, r->m.head_dim);
        return 2;
    }
    if (kvs_bytes_per_token(&r->m, o->kv_dtype, &r->bpt) || kvs_mha_bytes_per_token(&r->m, o->kv_dtype, &r->mha_bpt) ||
        kvs_split_bytes_per_token(&r->m, o->kv_dtype, &r->bpt_global, &r->bpt_window) ||
        kvs_mul(r->mha_bpt, o->ctx[0], &r->mha_first) ||
        kvs_context_bytes(&r->m, o->kv_dtype, (uint64_t)r->m.max_ctx, &r->max_ctx_bytes)) {
        fprintf(stderr, "kvlm kv: %s: KV bytes do not fit in 64 bits\n", r->m.label);
        return 2;
    }
    for (int i = 0; i < o->n_ctx; i++)
        if (kvs_context_bytes(&r->m, o->kv_dtype, o->ctx[i], &r->totals[i])) {
            fprintf(stderr, "kvlm kv: --ctx %llu: KV bytes of %s do not fit in 64 bits\n",
                    (unsigned long long)o->ctx[i], r->m.label);
            return 2;
        }
    int rc = row_weights(r, o, is_preset);
    if (rc) return rc;
    return o->have_memory ? row_plan(r, o, single) : 0;
}

/* ------------------------------------------------------------ human text */

typedef struct table {
    int rows, cols;
    char cell[MAX_ROWS + 1][12][48];
} table;

static void t_set(table *t, int r, int c, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void t_set(table *t, int r, int c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->cell[r][c], sizeof t->cell[r][c], fmt, ap);
    va_end(ap);
    if (r >= t->rows) t->rows = r + 1;
    if (c >= t->cols) t->cols = c + 1;
}

/* First column left-aligned, the others right-aligned, two spaces apart. */
static void t_print(const table *t) {
    int w[12] = {0};
    for (int r = 0; r < t->rows; r++)
        for (int c = 0; c < t->cols; c++) {
            int n = (int)strlen(t->cell[r][c]);
            if (n > w[c]) w[c] = n;
        }
    for (int r = 0; r < t->rows; r++) {
        for (int c = 0; c < t->cols; c++)
            printf(c ? "  %*s" : "%-*s", w[c], t->cell[r][c]);
        putchar('\n');
    }
}

/* Formatted numbers from a ring of buffers, so that one printf can show
 * several (each call is a separate, sequenced function call). */
static char *ring_buf(void) {
    static char ring[16][48];
    static int next;
    return ring[next++ % 16];
}
static const char *HB(uint64_t v) { return kvs_human_bytes(v, ring_buf(), 48); }
static const char *TH(uint64_t v) { return kvs_thousands(v, ring_buf(), 48); }

static const char *pct(double x, char *buf, size_t cap) {
    snprintf(buf, cap, "%.1f", 100 * x);
    size_t n = strlen(buf);
    if (n > 2 && !strcmp(buf + n - 2, ".0")) buf[n - 2] = 0;
    strncat(buf, "%", cap - strlen(buf) - 1);
    return buf;
}

static void print_kv_tables(const kv_row *rows, int n, const kv_opts *o) {
    if (o->kv_dtype == KVLM_Q8_0) {
        printf("KV cache in q8_0 (per 32 numbers: 32 int8 and one f16 scale, 34 bytes)\n");
        printf("  bytes per token = 2 (K and V) x layers x KV heads x (head dim + 2 x head dim / 32)\n");
    } else {
        unsigned nbytes = (unsigned)kvlm_dtype_size(o->kv_dtype);
        printf("KV cache in %s (%u byte%s per number)\n", kvlm_dtype_name(o->kv_dtype), nbytes, nbytes > 1 ? "s" : "");
        printf("  bytes per token = 2 (K and V) x layers x KV heads x head dim x %u\n", nbytes);
    }
    printf("  total           = bytes per token x tokens\n");
    putchar('\n');
    table t = {0};
    const char *head[] = {"model", "layers", "KV heads", "head dim", "bytes/token"};
    for (int c = 0; c < 5; c++) t_set(&t, 0, c, "%s", head[c]);
    for (int i = 0; i < o->n_ctx; i++) t_set(&t, 0, 5 + i, "%s token%s", TH(o->ctx[i]), o->ctx[i] == 1 ? "" : "s");
    for (int r = 0; r < n; r++) {
        const kv_row *w = &rows[r];
        t_set(&t, r + 1, 0, "%s", w->m.label);
        t_set(&t, r + 1, 1, "%d", w->m.n_layer);
        t_set(&t, r + 1, 2, "%d", w->m.n_kv_head);
        t_set(&t, r + 1, 3, "%d", w->m.head_dim);
        t_set(&t, r + 1, 4, "%s", HB(w->bpt));
        for (int i = 0; i < o->n_ctx; i++)
            t_set(&t, r + 1, 5 + i, "%s%s", HB(w->totals[i]), o->ctx[i] > (uint64_t)w->m.max_ctx ? " *" : "");
    }
    t_print(&t);
    int past = 0;
    for (int r = 0; r < n; r++)
        for (int i = 0; i < o->n_ctx; i++) past |= o->ctx[i] > (uint64_t)rows[r].m.max_ctx;
    if (past) printf("* more tokens than the model's context (\"max context\" below): what it would take, not what it runs\n");
    int windowed = 0;
    for (int r = 0; r < n; r++) windowed |= rows[r].bpt_window != 0;
    if (windowed) {
        printf("\nlayer types: a window layer keeps only its last `window` tokens, so the total is\n"
               "  global bytes per token x tokens + window bytes per token x min(tokens, window)\n\n");
        table lt = {0};
        const char *lhead[] = {"model", "global layers", "bytes/token", "window layers", "window", "bytes/token"};
        for (int c = 0; c < 6; c++) t_set(&lt, 0, c, "%s", lhead[c]);
        int k = 0;
        for (int r = 0; r < n; r++) {
            const kv_row *w = &rows[r];
            if (!w->bpt_window) continue;
            k++;
            t_set(&lt, k, 0, "%s", w->m.label);
            t_set(&lt, k, 1, "%d", w->m.n_layer - w->m.window_layers);
            t_set(&lt, k, 2, "%s", HB(w->bpt_global));
            t_set(&lt, k, 3, "%d", w->m.window_layers);
            t_set(&lt, k, 4, "%s", TH((uint64_t)w->m.window));
            t_set(&lt, k, 5, "%s", HB(w->bpt_window));
        }
        t_print(&lt);
    }

    printf("\ngrouped-query saving: query heads / KV heads, against a multi-head (MHA) twin with\n"
           "one KV head per query head\n\n");
    table g = {0};
    const char *ghead[] = {"model", "query heads", "KV heads", "saving", "MHA twin/token", ""};
    for (int c = 0; c < 6; c++) t_set(&g, 0, c, "%s", ghead[c]);
    t_set(&g, 0, 5, "MHA twin at %s", TH(o->ctx[0]));
    for (int r = 0; r < n; r++) {
        const kv_row *w = &rows[r];
        t_set(&g, r + 1, 0, "%s", w->m.label);
        t_set(&g, r + 1, 1, "%d", w->m.n_head);
        t_set(&g, r + 1, 2, "%d", w->m.n_kv_head);
        t_set(&g, r + 1, 3, "%gx%s", (double)w->m.n_head / w->m.n_kv_head,
              w->m.n_head == w->m.n_kv_head ? " (MHA)" : "");
        t_set(&g, r + 1, 4, "%s", HB(w->mha_bpt));
        t_set(&g, r + 1, 5, "%s", HB(w->mha_first));
    }
    t_print(&g);

    printf("\ncapacity planning inputs\n\n");
    table c = {0};
    const char *chead[] = {"model", "params", "weights", "weights from", "max context", "KV at max context"};
    for (int k = 0; k < 6; k++) t_set(&c, 0, k, "%s", chead[k]);
    for (int r = 0; r < n; r++) {
        const kv_row *w = &rows[r];
        t_set(&c, r + 1, 0, "%s", w->m.label);
        if (w->m.params && w->m.idle_expert_params && w->m.idle_expert_params < w->m.params) {
            char tot[32];
            snprintf(tot, sizeof tot, "%s", TH(w->m.params));
            t_set(&c, r + 1, 1, "%s (%s active)", tot, TH(w->m.params - w->m.idle_expert_params));
        } else {
            t_set(&c, r + 1, 1, "%s", w->m.params ? TH(w->m.params) : "-");
        }
        t_set(&c, r + 1, 2, "%s", w->have_weights ? HB(w->weights) : "-");
        t_set(&c, r + 1, 3, "%s", w->have_weights ? w->weights_from : "-");
        t_set(&c, r + 1, 4, "%s", TH((uint64_t)w->m.max_ctx));
        t_set(&c, r + 1, 5, "%s", HB(w->max_ctx_bytes));
    }
    t_print(&c);
}

static void print_plan_worked(const kv_row *w) {
    char p1[16];
    const kvs_plan_in *in = &w->in;
    const kvs_plan *p = &w->plan;
    printf("\n%s:\n", w->m.label);
    printf("  KV memory  = %s - %s = %s (%s B)\n", HB(in->memory), HB(in->weights), HB(p->kv_memory),
           TH(p->kv_memory));
    printf("  contiguous = floor(%s / (%s x %s = %s)) = %llu requests", HB(p->kv_memory), TH(in->ctx_len),
           HB(in->bytes_per_token), HB(p->contig_bytes), (unsigned long long)p->contig_requests);
    printf(", utilisation %s / %s = %s\n", TH(in->mean_len), TH(in->ctx_len), pct(p->contig_util, p1, sizeof p1));
    if (in->window_bytes_per_token)
        printf("  paged      = floor(%s / %s (%s blocks of the global layers' %s per token, the window\n"
               "               layers' %s per token only in the blocks of their last %llu tokens)) = %llu requests",
               HB(p->kv_memory), HB(p->paged_bytes), TH(p->paged_blocks), HB(in->bytes_per_token - in->window_bytes_per_token),
               HB(in->window_bytes_per_token), (unsigned long long)in->window, (unsigned long long)p->paged_requests);
    else
        printf("  paged      = floor(%s / (%s block%s x %llu x %s = %s)) = %llu requests", HB(p->kv_memory),
               TH(p->paged_blocks), p->paged_blocks == 1 ? "" : "s", (unsigned long long)in->block_size,
               HB(in->bytes_per_token), HB(p->paged_bytes), (unsigned long long)p->paged_requests);
    printf(", utilisation %s / %s = %s\n", TH(in->mean_len), TH(p->paged_blocks * in->block_size),
           pct(p->paged_util, p1, sizeof p1));
}

static void print_plan(const kv_row *rows, int n, const kv_opts *o) {
    char p1[16], p2[16];
    printf("\ncapacity plan: %s (%s B) of memory, KV %s, block size %llu\n", HB(o->memory), TH(o->memory),
           kvlm_dtype_name(o->kv_dtype), (unsigned long long)(o->block_size ? o->block_size : 16));
    printf("  KV memory   = memory - weights\n");
    printf("  contiguous  = floor(KV memory / (ctx-len x bytes per token)): each request reserves its\n"
           "                maximum length up front\n");
    printf("  paged       = floor(KV memory / (ceil(mean-len / block) x block x bytes per token)):\n"
           "                blocks on demand, only the last block of a request is partly empty\n");
    printf("  utilisation = tokens held / tokens reserved: mean-len / ctx-len (contiguous),\n"
           "                mean-len / (ceil(mean-len / block) x block) (paged)\n\n");
    table t = {0};
    const char *head[] = {"model", "weights", "KV memory", "ctx-len", "mean-len", "contiguous", "util", "paged", "util"};
    for (int c = 0; c < 9; c++) t_set(&t, 0, c, "%s", head[c]);
    for (int r = 0; r < n; r++) {
        const kv_row *w = &rows[r];
        t_set(&t, r + 1, 0, "%s", w->m.label);
        t_set(&t, r + 1, 1, "%s", HB(w->weights));
        t_set(&t, r + 1, 3, "%s", TH(w->in.ctx_len));
        t_set(&t, r + 1, 4, "%s", TH(w->in.mean_len));
        t_set(&t, r + 1, 6, "%s", pct(w->plan.contig_util, p1, sizeof p1));
        t_set(&t, r + 1, 8, "%s", pct(w->plan.paged_util, p2, sizeof p2));
        if (!w->plan.weights_fit) {
            t_set(&t, r + 1, 2, "weights > memory");
            t_set(&t, r + 1, 5, "0");
            t_set(&t, r + 1, 7, "0");
            continue;
        }
        t_set(&t, r + 1, 2, "%s", HB(w->plan.kv_memory));
        t_set(&t, r + 1, 5, "%llu", (unsigned long long)w->plan.contig_requests);
        t_set(&t, r + 1, 7, "%llu", (unsigned long long)w->plan.paged_requests);
    }
    t_print(&t);
    for (int r = 0; r < n; r++)
        if (rows[r].plan.weights_fit && n == 1) print_plan_worked(&rows[r]);
}

/* ------------------------------------------------------------------ JSON */

static json_t *j_u64(uint64_t v) { return json_integer((json_int_t)v); }

static json_t *j_bytes(uint64_t v) {
    char b[48];
    return json_pack("{s:o,s:s}", "bytes", j_u64(v), "human", kvs_human_bytes(v, b, sizeof b));
}

static json_t *plan_json(const kv_row *w) {
    const kvs_plan *p = &w->plan;
    json_t *j = json_pack("{s:o,s:o,s:b,s:o,s:o,s:o}", "memory_bytes", j_u64(w->in.memory), "weight_bytes",
                          j_u64(w->in.weights), "weights_fit", p->weights_fit, "ctx_len", j_u64(w->in.ctx_len),
                          "mean_len", j_u64(w->in.mean_len), "block_size", j_u64(w->in.block_size));
    json_object_set_new(j, "kv_memory_bytes", p->weights_fit ? j_u64(p->kv_memory) : json_null());
    json_object_set_new(j, "contiguous",
                        json_pack("{s:o,s:o,s:f}", "bytes_per_request", j_u64(p->contig_bytes), "requests",
                                  j_u64(p->contig_requests), "utilization", p->contig_util));
    json_object_set_new(j, "paged",
                        json_pack("{s:o,s:o,s:o,s:f}", "blocks_per_request", j_u64(p->paged_blocks),
                                  "bytes_per_request", j_u64(p->paged_bytes), "requests", j_u64(p->paged_requests),
                                  "utilization", p->paged_util));
    return j;
}

static json_t *rows_json(const kv_row *rows, int n, const kv_opts *o, int from_model) {
    json_t *ctx = json_array(), *models = json_array();
    for (int i = 0; i < o->n_ctx; i++) json_array_append_new(ctx, j_u64(o->ctx[i]));
    for (int r = 0; r < n; r++) {
        const kv_row *w = &rows[r];
        char b[48];
        json_t *totals = json_array();
        for (int i = 0; i < o->n_ctx; i++) {
            json_t *t = j_bytes(w->totals[i]);
            json_object_set_new(t, "tokens", j_u64(o->ctx[i]));
            json_object_set_new(t, "beyond_max_context", json_boolean(o->ctx[i] > (uint64_t)w->m.max_ctx));
            json_array_append_new(totals, t);
        }
        json_t *m = json_pack(
            "{s:s,s:s,s:s,s:s,s:i,s:i,s:i,s:i,s:o,s:s,s:o,s:f,s:o,s:i,s:o}", "name", w->m.name, "label", w->m.label,
            "source", from_model ? "model" : "preset", "arch", w->m.arch, "layers", w->m.n_layer, "query_heads",
            w->m.n_head, "kv_heads", w->m.n_kv_head, "head_dim", w->m.head_dim, "bytes_per_token", j_u64(w->bpt),
            "bytes_per_token_human", kvs_human_bytes(w->bpt, b, sizeof b), "totals", totals, "gqa_ratio",
            (double)w->m.n_head / w->m.n_kv_head, "mha_bytes_per_token", j_u64(w->mha_bpt), "max_context",
            w->m.max_ctx, "max_context_bytes", j_u64(w->max_ctx_bytes));
        json_object_set_new(m, "window", json_integer(w->bpt_window ? w->m.window : 0));
        json_object_set_new(m, "window_layers", json_integer(w->bpt_window ? w->m.window_layers : 0));
        json_object_set_new(m, "bytes_per_token_global", j_u64(w->bpt_global));
        json_object_set_new(m, "bytes_per_token_window", j_u64(w->bpt_window));
        json_object_set_new(m, "params", w->m.params ? j_u64(w->m.params) : json_null());
        json_object_set_new(m, "active_params", w->m.params && w->m.idle_expert_params < w->m.params
                                                    ? j_u64(w->m.params - w->m.idle_expert_params) : json_null());
        json_object_set_new(m, "weight_bytes", w->have_weights ? j_u64(w->weights) : json_null());
        json_object_set_new(m, "weight_bytes_from", w->have_weights ? json_string(w->weights_from) : json_null());
        if (w->have_plan) json_object_set_new(m, "plan", plan_json(w));
        json_array_append_new(models, m);
    }
    const int q8 = o->kv_dtype == KVLM_Q8_0;
    json_t *root = json_pack("{s:s,s:o,s:s,s:o,s:o}", "kv_dtype", kvlm_dtype_name(o->kv_dtype), "bytes_per_number",
                             q8 ? json_real(kvs_dtype_bytes(o->kv_dtype))
                                : json_integer((json_int_t)kvlm_dtype_size(o->kv_dtype)),
                             "formula",
                             q8 ? "bytes per token = 2 x layers x KV heads x (head dim + 2 x head dim / 32)"
                                : "bytes per token = 2 x layers x KV heads x head dim x bytes per number",
                             "contexts", ctx, "models", models);
    return root;
}

/* The rows the request names; returns 0 or the exit status after a message. */
static int build_rows(const kv_opts *o, kv_row *rows, int *n) {
    memset(rows, 0, MAX_ROWS * sizeof *rows);
    *n = 0;
    if (o->model || o->config) {
        kvlm_config cfg;
        kvlm_error err;
        int *windows = NULL;
        if (o->model && kvlm_config_load(o->model, &cfg, &err)) {
            fprintf(stderr, "kvlm kv: %s\n", err.msg);
            return 1;
        }
        if (o->model) { /* the file's per-layer windows (Gemma's window and global layers) */
            windows = malloc((size_t)(cfg.n_layer > 0 ? cfg.n_layer : 1) * sizeof *windows);
            if (!windows || kvlm_config_layer_windows(o->model, windows, cfg.n_layer, &err) != cfg.n_layer) {
                fprintf(stderr, "kvlm kv: %s\n", windows ? err.msg : "out of memory");
                free(windows);
                return 1;
            }
        }
        kvs_model_from_config(&rows[0].m, o->model ? &cfg : o->config, windows,
                              o->model ? o->model : o->label ? o->label : "model");
        free(windows);
        *n = 1;
        return build_row(&rows[0], o, 0, 1);
    }
    if (o->preset) {
        const kvs_model *p = kvs_preset_find(o->preset);
        if (!p) {
            fprintf(stderr, "kvlm kv: --preset: unknown preset '%s' (known: %s)\n", o->preset, kvs_preset_names());
            return 2;
        }
        rows[0].m = *p;
        *n = 1;
        return build_row(&rows[0], o, 1, 1);
    }
    size_t np;
    const kvs_model *p = kvs_presets(&np);
    int rc = 0;
    for (size_t i = 0; i < np && i < MAX_ROWS && !rc; i++, (*n)++) {
        rows[i].m = p[i];
        rc = build_row(&rows[i], o, 1, 0);
    }
    return rc;
}

json_t *measure_kv(const kv_request *rq, int *status) {
    kv_row rows[MAX_ROWS];
    int n;
    if (rq->n_ctx < 1 || rq->n_ctx > MAX_CTX) {
        fprintf(stderr, "kvlm kv: between 1 and %d context lengths, not %d\n", MAX_CTX, rq->n_ctx);
        *status = 2;
        return NULL;
    }
    if ((*status = build_rows(rq, rows, &n))) return NULL;
    json_t *doc = rows_json(rows, n, rq, rq->model || rq->config);
    if (!doc) {
        fprintf(stderr, "kvlm kv: out of memory\n");
        *status = 1;
    }
    return doc;
}

int cli_kv(int argc, char **argv) {
    kv_opts o;
    int json;
    if (parse(argc, argv, &o, &json)) return EXIT_USAGE;
    kv_row rows[MAX_ROWS];
    int n, rc = build_rows(&o, rows, &n);
    if (rc) return rc;
    if (json) {
        json_t *doc = rows_json(rows, n, &o, o.model != NULL);
        char *s = json_dumps(doc, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
        puts(s);
        free(s);
        json_decref(doc);
        return 0;
    }
    print_kv_tables(rows, n, &o);
    if (o.have_memory) print_plan(rows, n, &o);
    return 0;
}
