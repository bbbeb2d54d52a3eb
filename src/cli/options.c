/* The shared flag table, the argument walk and the help printer (see options.h). */
#include "cli/options.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cli/args.h"

void model_flags_init(model_flags *f) {
    memset(f, 0, sizeof *f);
    f->kv_dtype = KVLM_F16;
    f->block_size = 16;
}

void sampling_flags_init(sampling_flags *f) {
    memset(f, 0, sizeof *f);
    f->o = kvlm_sampler_default_params();
    f->o.temperature = 0.7f;
    f->o.top_p = 0.9f;
    f->o.seed = 1;
}

/* ------------------------------------------------- shared flag setters */

typedef int (*setter)(const cli_spec *s, const char *flag, const char *v);

static int set_model(const cli_spec *s, const char *f, const char *v) { (void)f; s->mf->model = v; return 0; }
static int set_synthetic(const cli_spec *s, const char *f, const char *v) { (void)f; s->mf->synthetic = v; return 0; }
static int set_tokenizer(const cli_spec *s, const char *f, const char *v) { (void)f; s->mf->tokenizer = v; return 0; }
static int set_prompt(const cli_spec *s, const char *f, const char *v) { (void)f; s->mf->prompt = v; return 0; }
static int set_ids(const cli_spec *s, const char *f, const char *v) { (void)f; s->mf->ids = v; return 0; }
static int set_file(const cli_spec *s, const char *f, const char *v) { (void)f; s->mf->file = v; return 0; }
static int set_json(const cli_spec *s, const char *f, const char *v) { (void)f, (void)v; *s->json = 1; return 0; }

/* --kv-dtype follows the library's one rule, with its message (kvlm kv
 * gives the same). */
static int parse_dtype(const char *flag, const char *s, int kv, kvlm_dtype *out) {
    kvlm_error err;
    if (kv && kvlm_kv_dtype_parse(s, out, &err)) {
        fprintf(stderr, "kvlm: %s: %s\n", flag, err.msg);
        return -1;
    }
    if (!kv && kvlm_dtype_parse(s, out, NULL)) {
        fprintf(stderr, "kvlm: %s: '%s' is not one of f32, f16, bf16, q8_0, q4_0\n", flag, s);
        return -1;
    }
    return 0;
}
static int set_dtype(const cli_spec *s, const char *f, const char *v) { return parse_dtype(f, v, 0, &s->mf->synth_dtype); }
static int set_kv_dtype(const cli_spec *s, const char *f, const char *v) { return parse_dtype(f, v, 1, &s->mf->kv_dtype); }

static int set_isa(const cli_spec *s, const char *f, const char *v) {
    static const char *names[] = {"auto",        "scalar",      "avx2", "avx512",      "avx512-vnni",
                                  "avx2-vnni",   "avx512-bf16", "neon", "neon-dotprod", "neon-i8mm",
                                  "neon-bf16"};
    for (int i = 0; i < (int)(sizeof names / sizeof *names); i++)
        if (!strcmp(v, names[i])) {
            s->mf->isa = (kvlm_isa)i;
            return 0;
        }
    fprintf(stderr, "kvlm: %s: '%s' is not one of auto, scalar, avx2, avx512, avx512-vnni, avx2-vnni, avx512-bf16, neon,\n"
            "neon-dotprod, neon-i8mm, neon-bf16\n", f, v);
    return -1;
}

static int set_no_repack(const cli_spec *s, const char *f, const char *v) { (void)f, (void)v; s->mf->no_repack = 1; return 0; }
static int set_threads(const cli_spec *s, const char *f, const char *v) { return arg_int(f, v, 1, 1024, &s->mf->threads); }
static int set_block_size(const cli_spec *s, const char *f, const char *v) { return arg_int(f, v, 1, 4096, &s->mf->block_size); }
static int set_kv_blocks(const cli_spec *s, const char *f, const char *v) { return arg_int(f, v, 1, 1 << 30, &s->mf->kv_blocks); }
static int set_kv_mib(const cli_spec *s, const char *f, const char *v) { return arg_float(f, v, 1e-3, 1 << 24, &s->mf->kv_mib); }

/* sampling */
static int set_temp(const cli_spec *s, const char *f, const char *v) { return arg_float(f, v, 0, 100, &s->smp->o.temperature); }
static int set_top_k(const cli_spec *s, const char *f, const char *v) { return arg_int(f, v, 0, 1 << 22, &s->smp->o.top_k); }
static int set_top_p(const cli_spec *s, const char *f, const char *v) { return arg_float(f, v, 1e-6, 1, &s->smp->o.top_p); }
static int set_min_p(const cli_spec *s, const char *f, const char *v) { return arg_float(f, v, 0, 1, &s->smp->o.min_p); }
static int set_repeat(const cli_spec *s, const char *f, const char *v) {
    return arg_float(f, v, 1e-3, 100, &s->smp->o.repetition_penalty);
}
static int set_freq(const cli_spec *s, const char *f, const char *v) {
    return arg_float(f, v, -2, 2, &s->smp->o.frequency_penalty);
}
static int set_presence(const cli_spec *s, const char *f, const char *v) {
    return arg_float(f, v, -2, 2, &s->smp->o.presence_penalty);
}
static int set_window(const cli_spec *s, const char *f, const char *v) {
    return arg_int(f, v, 0, 1 << 24, &s->smp->o.penalty_window);
}
static int set_order(const cli_spec *s, const char *f, const char *v) { (void)f; s->smp->o.order = v; return 0; }
static int set_seed(const cli_spec *s, const char *f, const char *v) { return arg_u64(f, v, &s->smp->o.seed); }

static int set_bias(const cli_spec *s, const char *flag, const char *v) {
    sampling_flags *f = s->smp;
    const char *p = v;
    int n = 0;
    while (*p) {
        char *end;
        errno = 0;
        long id = strtol(p, &end, 10);
        if (end == p || *end != ':' || id < 0 || id > INT32_MAX || errno) goto bad;
        p = end + 1;
        float b = strtof(p, &end);
        if (end == p || (*end && *end != ',') || n == MAX_BIAS) goto bad;
        f->bias[n++] = (kvlm_logit_bias){(int32_t)id, b};
        p = *end ? end + 1 : end;
    }
    f->o.logit_bias = f->bias;
    f->o.n_logit_bias = n;
    return 0;
bad:
    fprintf(stderr, "kvlm: %s: '%s' is not a list of ID:BIAS pairs (at most %d)\n", flag, v, MAX_BIAS);
    return -1;
}

static int set_stop(const cli_spec *s, const char *flag, const char *v) {
    if (s->smp->n_stops == MAX_STOPS || !*v) {
        fprintf(stderr, "kvlm: %s: at most %d non-empty stop strings\n", flag, MAX_STOPS);
        return -1;
    }
    s->smp->stops[s->smp->n_stops++] = v;
    return 0;
}

/* ------------------------------------------------------- the one table */

typedef struct shared_opt {
    unsigned group;
    const char *names, *metavar, *help;
    setter set;
} shared_opt;

static const shared_opt shared[] = {
    {CLI_MODEL, "-m, --model", "PATH", "the model: a Hugging Face directory, a .safetensors or\n"
     "model.safetensors.index.json file, a .gguf file or an llm.c .bin checkpoint", set_model},
    {CLI_MODEL, "--synthetic", "NAME", "random weights with exact shapes, no files:\n" CLI_SYNTHETIC_PRESETS,
     set_synthetic},
    {CLI_MODEL, "--dtype", "T", "weight dtype of a synthetic model: f32 (default), f16, bf16, q8_0, q4_0", set_dtype},
    {CLI_TOKENIZER, "--tokenizer", "PATH", "tokenizer directory or file (default: the model's directory)",
     set_tokenizer},
    {CLI_ENGINE, "--threads", "N", "engine threads (default: one per physical core this process may run\n"
     "on, SMT siblings not counted; the engine runs fewer while other programs\n"
     "keep a core busy)", set_threads},
    {CLI_ENGINE, "--isa", "NAME", "kernels: auto (default: the best this CPU has), scalar, avx2,\n"
     "avx512, avx512-vnni, avx2-vnni (-vnni: int8 activations for Q8_0, Q4_0,\n"
     "Q4_K, Q5_K and Q6_K weights; avx512-vnni also MXFP4, IQ4_XS), avx512-bf16 (avx512-vnni with bf16\n"
     "activations for bf16 weights); on aarch64: neon, neon-dotprod (int8\n"
     "activations for Q8_0, Q4_0, Q4_K, Q5_K and Q6_K weights), neon-i8mm\n"
     "(neon-dotprod with SMMLA for Q8_0 / Q4_0 prefill), neon-bf16 (neon-i8mm\n"
     "with bf16 activations for bf16 weights)", set_isa},
    {CLI_ENGINE, "--no-repack", NULL, "keep only the file's weight layout: do not repack the Q4_0\n"
     "matrices for avx512-vnni / avx512-bf16 decode (the packed layout replaces the file's pages\n"
     "in memory; decode reads it faster)", set_no_repack},
    {CLI_KV, "--kv-dtype", "T", "KV cache dtype: f16 (default: half the bytes of f32), f32 or q8_0\n"
     "(int8 with an f16 scale per 32 numbers: 34 bytes per 32, head dim a\n"
     "multiple of 32)", set_kv_dtype},
    {CLI_KV, "--block-size", "N", "tokens per KV block (default 16)", set_block_size},
    {CLI_KV_POOL, "--kv-blocks", "N", "KV pool size in blocks (default: see below)", set_kv_blocks},
    {CLI_KV_POOL, "--kv-mib", "X", "KV pool size in MiB, rounded down to whole blocks (instead of --kv-blocks)",
     set_kv_mib},
    {CLI_PROMPT, "-p, --prompt", "TEXT", "prompt text (needs a tokenizer)", set_prompt},
    {CLI_PROMPT, "--ids", "LIST", "prompt as token ids, separated by spaces or commas", set_ids},
    {CLI_FILE, "-f, --file", "PATH", "read the text from PATH ('-': standard input)", set_file},
    {CLI_SAMPLING, "--temp", "T", "temperature, 0 = greedy (default 0.7)", set_temp},
    {CLI_SAMPLING, "--top-k", "K", "keep the K most likely tokens, 0 = off (default 0)", set_top_k},
    {CLI_SAMPLING, "--top-p", "P", "keep the smallest set with mass >= P, 1 = off (default 0.9)", set_top_p},
    {CLI_SAMPLING, "--min-p", "P", "drop tokens below P x the top probability, 0 = off (default 0)", set_min_p},
    {CLI_SAMPLING, "--repeat-penalty", "R",
     "divide positive / multiply negative logits of seen tokens (default 1 = off)", set_repeat},
    {CLI_SAMPLING, "--frequency-penalty", "F", "logit -= F x count of the token in the window (default 0)", set_freq},
    {CLI_SAMPLING, "--presence-penalty", "P", "logit -= P if the token is in the window (default 0)", set_presence},
    {CLI_SAMPLING, "--penalty-window", "N", "last N tokens of prompt + output the penalties see, 0 = all (default 0)",
     set_window},
    {CLI_SAMPLING, "--logit-bias", "LIST", "ID:BIAS,... added to logits; -100 bans a token", set_bias},
    {CLI_SAMPLING, "--sampler-order", "LIST", "processor order (default penalties,bias,temperature,top_k,top_p,min_p)",
     set_order},
    {CLI_SAMPLING, "--seed", "S", "random seed (default 1)", set_seed},
    {CLI_SAMPLING, "--stop", "TEXT", "stop when the output contains TEXT (repeatable, up to 16)", set_stop},
    {CLI_JSON, "--json", NULL, "print one JSON document instead of the human-readable output", set_json},
};
#define N_SHARED (sizeof shared / sizeof shared[0])

/* Help sections of the shared flags, in order. */
static const struct {
    unsigned groups;
    const char *title;
} sections[] = {
    {CLI_MODEL | CLI_TOKENIZER, "model"},
    {CLI_ENGINE, "engine"},
    {CLI_KV | CLI_KV_POOL, "KV cache"},
    {CLI_PROMPT | CLI_FILE, "input"},
    {CLI_SAMPLING, "sampling (processors applied in --sampler-order; see docs/sampling.md)"},
};

/* ----------------------------------------------------------------- help */

#define HELP_COL 22

static void help_line(FILE *f, const char *names, const char *metavar, const char *help) {
    char left[128];
    snprintf(left, sizeof left, "%s%s%s", names, metavar ? " " : "", metavar ? metavar : "");
    if (strlen(left) > HELP_COL) fprintf(f, "  %s\n%*s", left, HELP_COL + 3, "");
    else fprintf(f, "  %-*s ", HELP_COL, left);
    for (const char *p = help; *p;) {
        size_t n = strcspn(p, "\n");
        fprintf(f, "%.*s\n", (int)n, p);
        p += n;
        if (*p == '\n' && *++p) fprintf(f, "%*s", HELP_COL + 3, "");
    }
}

void cli_help(const cli_spec *spec, FILE *f) {
    fprintf(f, "usage: kvlm %s\n", spec->usage);
    if (spec->about) fputs(spec->about, f);
    if (spec->opts && spec->opts[0].names) fprintf(f, "options:\n"); /* else it opens with its own heading */
    for (const cli_opt *o = spec->opts; o && (o->names || o->help); o++) {
        if (!o->names) fprintf(f, "%s\n", o->help); /* a sub-heading */
        else help_line(f, o->names, o->metavar, o->help);
    }
    for (size_t k = 0; k < sizeof sections / sizeof sections[0]; k++) {
        if (!(spec->groups & sections[k].groups)) continue;
        fprintf(f, "%s:\n", sections[k].title);
        for (size_t i = 0; i < N_SHARED; i++)
            if (shared[i].group & sections[k].groups & spec->groups)
                help_line(f, shared[i].names, shared[i].metavar, shared[i].help);
    }
    fprintf(f, "general:\n");
    for (size_t i = 0; i < N_SHARED; i++)
        if (shared[i].group & spec->groups & CLI_JSON) help_line(f, shared[i].names, NULL, shared[i].help);
    help_line(f, "-h, --help", NULL, "this help");
    if (spec->notes) fprintf(f, "\n%s", spec->notes);
}

static void usage_line(const cli_spec *spec) {
    fprintf(stderr, "usage: kvlm %s\n       (kvlm %s --help lists every option)\n", spec->usage, spec->cmd);
}

int cli_usage_error(const cli_spec *spec, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "kvlm %s: ", spec->cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    usage_line(spec);
    return -1;
}

/* -------------------------------------------------------------- parsing */

/* 1 if name is one of the ", "-separated spellings in names. */
static int has_name(const char *names, const char *name, size_t len) {
    for (const char *p = names; *p;) {
        size_t n = strcspn(p, ",");
        if (n == len && !strncmp(p, name, len)) return 1;
        p += n;
        while (*p == ',' || *p == ' ') p++;
    }
    return 0;
}

static int set_own(const cli_opt *o, const char *flag, const char *v) {
    if (o->given) *o->given = 1;
    switch (o->kind) {
    case OPT_SWITCH: *(int *)o->dst = (int)o->lo; return 0;
    case OPT_INT: return arg_int(flag, v, (long)o->lo, (long)o->hi, (int *)o->dst);
    case OPT_U64: return arg_u64(flag, v, (uint64_t *)o->dst);
    case OPT_FLOAT: return arg_float(flag, v, o->lo, o->hi, (float *)o->dst);
    case OPT_STR: *(const char **)o->dst = v; return 0;
    case OPT_FN: return o->fn(flag, v, o->dst);
    }
    return -1;
}

/* The flag spelled argv[*i] (or its part before '='): 0 done, -1 error. */
static int one_flag(cli_spec *spec, int argc, char **argv, int *i) {
    const char *a = argv[*i], *eq = a[1] == '-' ? strchr(a, '=') : NULL;
    size_t len = eq ? (size_t)(eq - a) : strlen(a);
    char flag[64];
    snprintf(flag, sizeof flag, "%.*s", (int)(len < sizeof flag ? len : sizeof flag - 1), a);
    const cli_opt *own = NULL;
    const shared_opt *sh = NULL;
    for (const cli_opt *o = spec->opts; o && (o->names || o->help) && !own; o++)
        if (o->names && has_name(o->names, a, len)) own = o;
    for (size_t k = 0; k < N_SHARED && !own && !sh; k++)
        if (has_name(shared[k].names, a, len)) sh = &shared[k];
    if (!own && !sh) return cli_usage_error(spec, "unknown argument '%s'", a);
    if (sh && !(spec->groups & sh->group))
        return cli_usage_error(spec, "%s is not used by this command%s%s%s", flag, spec->unused ? " (" : "",
                               spec->unused ? spec->unused : "", spec->unused ? ")" : "");
    int takes_value = own ? own->kind != OPT_SWITCH : sh->metavar != NULL;
    const char *v = NULL;
    if (!takes_value && eq) return cli_usage_error(spec, "%s takes no value", flag);
    if (takes_value) {
        if (eq) v = eq + 1;
        else if (*i + 1 < argc) v = argv[++*i];
        else return cli_usage_error(spec, "%s needs a value", flag);
    }
    int rc = own ? set_own(own, flag, v) : sh->set(spec, flag, v);
    if (rc) usage_line(spec);
    return rc ? -1 : 0;
}

/* Not a flag: after "--", "-" alone, a negative number, or no leading '-'. */
static int is_operand(const char *a) {
    return a[0] != '-' || !a[1] || isdigit((unsigned char)a[1]) || (a[1] == '.' && isdigit((unsigned char)a[2]));
}

static int walk(cli_spec *spec, int argc, char **argv) {
    int only_operands = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!only_operands && !strcmp(a, "--")) {
            only_operands = 1;
            continue;
        }
        if (only_operands || is_operand(a)) {
            if (!spec->operands) return cli_usage_error(spec, "unexpected argument '%s'", a);
            spec->operand[spec->n_operands++] = argv[i];
            continue;
        }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            cli_help(spec, stdout);
            free(spec->operand);
            exit(fflush(stdout) ? 1 : 0);
        }
        if (one_flag(spec, argc, argv, &i)) return -1;
    }
    if (spec->groups & CLI_MODEL) {
        if (!spec->mf->model && !spec->mf->synthetic)
            return cli_usage_error(spec, "no model: give -m MODEL or --synthetic PRESET");
        if (spec->mf->model && spec->mf->synthetic)
            return cli_usage_error(spec, "-m and --synthetic: give exactly one");
    }
    if ((spec->groups & CLI_KV_POOL) && spec->mf->kv_blocks && spec->mf->kv_mib > 0)
        return cli_usage_error(spec, "--kv-blocks and --kv-mib: give at most one");
    return 0;
}

int cli_parse(cli_spec *spec, int argc, char **argv) {
    spec->n_operands = 0;
    spec->operand = calloc((size_t)argc + 1, sizeof *spec->operand);
    if (!spec->operand) {
        fprintf(stderr, "kvlm %s: out of memory\n", spec->cmd);
        return -1;
    }
    int rc = walk(spec, argc, argv);
    if (rc || !spec->operands) {
        free(spec->operand);
        spec->operand = NULL;
    }
    return rc;
}
