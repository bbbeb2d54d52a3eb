/*
 * `kvlm report`: every measurement on one model, written up. Runs the KV
 * accounting (kvlm kv: the presets and the model), the prefill/decode
 * timing with the KV cache on and off (kvlm bench), the next-token
 * statistics per temperature (kvlm sample-stats) and the repetition per
 * decoding setting (kvlm gen-stats) through the measure_* functions the
 * single commands use, so every figure is the one those commands print.
 * Writes DIR/report.json (the raw documents), the SVG charts and
 * DIR/report.md (report_md.c). The directory is created and checked
 * before anything is measured; nothing is written until every measurement
 * has succeeded. Progress goes to stderr.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/measure.h"
#include "cli/options.h"
#include "cli/report.h"
#include "cli/session.h"

/* The prompt when none is given: the one `make report` uses (REPORT_PROMPT). */
#define REPORT_DEFAULT_PROMPT "JULIET: O Romeo, Romeo! wherefore art thou"

typedef struct report_opts {
    model_flags mf;
    const char *out;
    float temps[REPORT_MAX_TEMPS];
    int n_temps, n, pp, tg, repeats, bw_mib, json, pp_set, tg_set;
    uint64_t seed;
} report_opts;

static int parse_temps(const char *flag, const char *v, void *dst) {
    report_opts *o = dst;
    return arg_floats(flag, v, 1e-3, 100, o->temps, REPORT_MAX_TEMPS, &o->n_temps);
}

static int parse(int argc, char **argv, report_opts *o) {
    *o = (report_opts){.n = 60, .seed = 1, .pp = 64, .tg = 32, .repeats = 3, .bw_mib = 256};
    model_flags_init(&o->mf);
    o->mf.default_prompt = REPORT_DEFAULT_PROMPT;
    parse_temps("--temps", "0.2,0.3,0.5,0.7,1.0,1.2,1.5,2.0", o);
    const cli_opt own[] = {
        CLI_STR("-o, --out", "DIR", "output directory (created if missing)", &o->out),
        CLI_FN("--temps", "LIST", "temperatures for the next-token statistics\n(default 0.2,0.3,0.5,0.7,1.0,1.2,1.5,2.0)",
               parse_temps, o),
        CLI_INT("-n", "N", "tokens generated per decoding setting (default 60)", &o->n, 1, 1 << 20),
        CLI_U64("--seed", "S", "seed of the sampled generations (default 1)", &o->seed),
        {.names = "--pp", .metavar = "N", .help = "prompt tokens of the timing runs (default 64)", .kind = OPT_INT,
         .dst = &o->pp, .lo = 1, .hi = 1 << 20, .given = &o->pp_set},
        {.names = "--tg", .metavar = "N",
         .help = "tokens generated per timing run (default 32)\n(without --pp/--tg both shrink to fit a small context window)",
         .kind = OPT_INT, .dst = &o->tg, .lo = 2, .hi = 1 << 20, .given = &o->tg_set},
        CLI_INT("--repeats", "N", "repeats per timing test (default 3)", &o->repeats, 1, BENCH_MAX_REPEATS),
        CLI_INT("--bw-mib", "N", "least buffer for the bandwidth measurement in MiB (default 256;\n"
                "raised to twice the largest cache)", &o->bw_mib, 16, 1 << 16),
        CLI_END,
    };
    cli_spec spec = {
        .cmd = "report",
        .usage = "report (-m MODEL | --synthetic PRESET) [-p TEXT | --ids LIST | -f FILE] -o DIR [options]",
        .about =
            "Runs every measurement on the model and writes DIR/report.md with SVG charts beside it:\n"
            "  KV cache bytes per token and per context, for the model and the presets (kvlm kv);\n"
            "  prefill and decode time per token, the decode roofline, KV cache on vs off (kvlm bench);\n"
            "  entropy, top-1 and top-5 mass of the next token per temperature (kvlm sample-stats);\n"
            "  distinct-token ratio and repeated 4-gram rate per decoding setting (kvlm gen-stats).\n"
            "The prompt of the statistics defaults to \"" REPORT_DEFAULT_PROMPT "\".\n"
            "DIR/report.json holds every raw JSON document (--json also prints it).\n"
            "Progress is printed on stderr.\n",
        .groups = CLI_LOADS_MODEL | CLI_TOKENIZER | CLI_PROMPT | CLI_FILE | CLI_JSON,
        .unused = "the decoding settings of the report are fixed",
        .opts = own,
        .mf = &o->mf,
        .json = &o->json,
    };
    if (cli_parse(&spec, argc, argv)) return -1;
    if (!o->out || !*o->out) return cli_usage_error(&spec, "no output directory: give -o DIR");
    return 0;
}

/* ----------------------------------------------------------- the files */

/* Creates dir and its missing parents; checks that it is a writable
 * directory. Returns 0, or -1 after a message naming the path. */
static int prepare_dir(const char *dir) {
    char *p = strdup(dir);
    int rc = p ? 0 : -1;
    for (char *s = p ? p + 1 : NULL; s && *s && !rc; s++)
        if (*s == '/') {
            *s = 0;
            if (mkdir(p, 0777) && errno != EEXIST) rc = -1;
            *s = '/';
        }
    if (!rc && mkdir(dir, 0777) && errno != EEXIST) rc = -1;
    free(p);
    struct stat st;
    if (!rc && stat(dir, &st)) rc = -1;
    if (!rc && !S_ISDIR(st.st_mode)) rc = -1, errno = ENOTDIR;
    if (!rc && access(dir, W_OK)) rc = -1;
    if (rc) fprintf(stderr, "kvlm report: cannot write to %s: %s\n", dir, strerror(errno));
    return rc;
}

static char *path_join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s%s%s", dir, dir[strlen(dir) - 1] == '/' ? "" : "/", name);
    return p;
}

int report_write_file(const char *dir, const char *name, const char *text) {
    char *path = path_join(dir, name);
    FILE *f = path ? fopen(path, "w") : NULL;
    int ok = f && text && fputs(text, f) >= 0;
    if (f && fclose(f)) ok = 0;
    if (!ok)
        fprintf(stderr, "kvlm report: cannot write %s: %s\n", path ? path : name,
                text ? strerror(errno) : "out of memory");
    free(path);
    return ok ? 0 : -1;
}

/* ----------------------------------------------------- the run's facts */

/* The arguments as one shell-quoted line. */
static char *command_line(int argc, char **argv) {
    size_t cap = 32;
    for (int i = 0; i < argc; i++) cap += 4 * strlen(argv[i]) + 3;
    char *s = malloc(cap), *o = s;
    if (!s) return NULL;
    o += sprintf(o, "kvlm report");
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int plain = *a != 0;
        for (const char *c = a; *c; c++)
            if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./,:=+@%", *c)) plain = 0;
        *o++ = ' ';
        if (plain) {
            o += sprintf(o, "%s", a);
            continue;
        }
        *o++ = '\'';
        for (const char *c = a; *c; c++) o += *c == '\'' ? sprintf(o, "'\\''") : sprintf(o, "%c", *c);
        *o++ = '\'';
    }
    *o = 0;
    return s;
}

/* The CPU's model name from /proc/cpuinfo ("unknown" elsewhere). */
static json_t *cpu_name(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) || !colon) continue;
        fclose(f);
        colon += 1 + (colon[1] == ' ');
        colon[strcspn(colon, "\n")] = 0;
        json_t *j = json_string(colon);
        return j ? j : json_string("unknown");
    }
    if (f) fclose(f);
    return json_string("unknown");
}

static json_t *machine_json(const json_t *bench) {
    char date[64];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
    return json_pack("{s:s,s:o,s:I,s:O,s:O,s:O,s:O}", "date", date, "cpu", cpu_name(), "logical_cpus",
                     (json_int_t)sysconf(_SC_NPROCESSORS_ONLN), "threads", json_object_get(bench, "threads"), "isa",
                     json_object_get(bench, "isa"), "bandwidth_gbs", json_object_get(bench, "bandwidth_gbs"),
                     "bandwidth_buffer_mib", json_object_get(bench, "bandwidth_buffer_mib"));
}

static json_t *model_json(const cli_session *ss, const model_flags *mf) {
    const kvlm_config *c = ss->c;
    json_t *prompt = json_array();
    for (size_t i = 0; i < ss->n_prompt; i++) json_array_append_new(prompt, json_integer(ss->prompt[i]));
    json_t *j = json_pack("{s:s,s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:I,s:s,s:o}", "source", kvlm_model_source(ss->m),
                          "arch", c->arch, "layers", c->n_layer, "heads", c->n_head, "kv_heads", c->n_kv_head, "embd",
                          c->n_embd, "head_dim", c->head_dim, "context", c->n_ctx, "vocab", c->vocab_size, "params",
                          (json_int_t)kvlm_model_param_count(ss->m), "weight_dtype", kvlm_dtype_name(c->weight_dtype),
                          "prompt_ids", prompt);
    const char *text = mf->prompt ? mf->prompt : !mf->ids && !mf->file ? mf->default_prompt : NULL;
    if (j && text) json_object_set_new(j, "prompt_text", json_string(text));
    return j;
}

/* ------------------------------------------------------ the measurements */

static double elapsed(double t0) { return kvlm_now() - t0; }

/* KV accounting: the presets and the model at f16 over the chart's
 * contexts (16 to 131,072 tokens, every power of two), and the model at
 * the KV dtype the timing runs use. */
static int run_kv(const cli_session *ss, const model_flags *mf, json_t *root) {
    kv_request rq = kv_request_default();
    rq.n_ctx = 0;
    for (uint64_t t = 16; t <= 131072; t *= 2) rq.ctx[rq.n_ctx++] = t;
    int status;
    json_t *presets = measure_kv(&rq, &status);
    if (!presets) return status;
    json_object_set_new(root, "kv_presets", presets);
    /* the model's directory or file name (kv labels hold 63 bytes) */
    const char *name = mf->model ? mf->model : mf->synthetic, *slash;
    char trimmed[512], label[64];
    snprintf(trimmed, sizeof trimmed, "%s", name);
    for (size_t n = strlen(trimmed); n > 1 && trimmed[n - 1] == '/'; n--) trimmed[n - 1] = 0;
    slash = strrchr(trimmed, '/');
    snprintf(label, sizeof label, "%.40s (this model)", slash && slash[1] ? slash + 1 : trimmed);
    rq.config = ss->c, rq.label = label;
    json_t *model = measure_kv(&rq, &status);
    if (!model) return status;
    json_object_set_new(root, "kv_model", model);
    rq.kv_dtype = mf->kv_dtype;
    rq.ctx[0] = (uint64_t)ss->c->n_ctx, rq.n_ctx = 1;
    json_t *engine = measure_kv(&rq, &status);
    if (!engine) return status;
    json_object_set_new(root, "kv_model_engine", engine);
    return 0;
}

static int run_all(const report_opts *o, const cli_session *ss, json_t *root) {
    double t0 = kvlm_now();
    int rc = run_kv(ss, &o->mf, root);
    if (rc) return rc;
    fprintf(stderr, "report: kv done\n");

    bench_params bp = {.pp = o->pp, .tg = o->tg, .repeats = o->repeats, .threads = o->mf.threads, .isa = o->mf.isa,
                       .kv_dtype = o->mf.kv_dtype, .block_size = o->mf.block_size, .bw_mib = o->bw_mib};
    fprintf(stderr, "report: bench (read bandwidth, pp%d and tg%d x %d repeats, cache on vs off)...\n", o->pp, o->tg,
            o->repeats);
    json_t *bench = measure_bench(ss->m, &bp);
    if (!bench) return 1;
    json_object_set_new(root, "bench", bench);
    fprintf(stderr, "report: bench done (%.1f s)\n", elapsed(t0));

    sample_stats_params sp = {.temps = o->temps, .n_temps = o->n_temps, .top_p = 1, .top_n = 10};
    json_t *ssd = measure_sample_stats(ss, &o->mf, &sp);
    if (!ssd) return 1;
    json_object_set_new(root, "sample_stats", ssd);
    fprintf(stderr, "report: sample-stats done (%.1f s)\n", elapsed(t0));

    gen_stats_params gp = {.n = o->n, .seed = o->seed};
    json_t *gsd = measure_gen_stats(ss, &o->mf, &gp);
    if (!gsd) return 1;
    json_object_set_new(root, "gen_stats", gsd);
    fprintf(stderr, "report: gen-stats done (%.1f s)\n", elapsed(t0));
    return 0;
}

int cli_report(int argc, char **argv) {
    report_opts o;
    if (parse(argc, argv, &o)) return EXIT_USAGE;
    cli_session ss;
    int rc = session_open(&ss, &o.mf, 1);
    bench_params fit = {.pp = o.pp, .tg = o.tg};
    if (!rc && bench_fit_timing("report", &fit, o.pp_set, o.tg_set, ss.c->n_ctx)) rc = EXIT_USAGE;
    o.pp = fit.pp, o.tg = fit.tg;
    if (!rc && prepare_dir(o.out)) rc = 1;
    char *cmd = rc ? NULL : command_line(argc, argv);
    json_t *root = json_object();
    if (!rc && (!cmd || !root)) {
        fprintf(stderr, "kvlm report: out of memory\n");
        rc = 1;
    }
    if (!rc) {
        json_object_set_new(root, "command", json_string(cmd));
        json_object_set_new(root, "model", model_json(&ss, &o.mf));
        json_object_set_new(root, "settings",
                            json_pack("{s:i,s:i,s:i,s:i,s:i,s:I,s:s,s:i}", "pp", o.pp, "tg", o.tg, "repeats",
                                      o.repeats, "bw_mib", o.bw_mib, "gen_tokens", o.n, "seed", (json_int_t)o.seed,
                                      "kv_dtype", kvlm_dtype_name(o.mf.kv_dtype), "block_size", o.mf.block_size));
        rc = run_all(&o, &ss, root);
    }
    if (!rc) {
        json_object_set_new(root, "machine", machine_json(json_object_get(root, "bench")));
        rc = report_write(o.out, root) ? 1 : 0;
    }
    if (!rc) {
        char *s = json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(10));
        rc = report_write_file(o.out, "report.json", s) ? 1 : 0;
        if (!rc && o.json) puts(s);
        free(s);
    }
    if (!rc) {
        fprintf(stderr, "report: wrote %s/report.md, %s/report.json and the charts\n", o.out, o.out);
        if (!o.json) printf("%s/report.md\n", o.out);
    }
    json_decref(root);
    free(cmd);
    session_close(&ss);
    return rc;
}
