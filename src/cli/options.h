/*
 * The option layer every kvlm subcommand parses its arguments with.
 *
 * Shared flags live in one table (options.c), in groups: the model (-m,
 * --synthetic, --dtype), its tokenizer, the engine (--threads, --isa), the
 * KV cache (--kv-dtype, --block-size), a KV pool (--kv-blocks, --kv-mib),
 * the prompt (-p, --ids), a text file (-f), sampling and --json. A command
 * names the groups it accepts and lists its own flags in a cli_opt table;
 * cli_parse walks argv once, and --help is printed from the same tables,
 * so every command shows a shared flag with the same words. A shared flag
 * outside the command's groups is rejected as not used by that command.
 *
 * Argument rules: `--` ends the flags (everything after it is an operand);
 * `-` alone and negative numbers (`-5`) are operands, never flags;
 * `--flag=value` equals `--flag value`. Numbers are parsed strictly (the
 * whole string, within the flag's range), and every error names the flag.
 * This layer parses and validates; it opens nothing (session.h does).
 */
#ifndef KVLM_CLI_OPTIONS_H
#define KVLM_CLI_OPTIONS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "kvlm.h"

/* The synthetic presets of src/model/synthetic.c, as the help texts name
 * them (tests/test_cli.c checks the list against the loader's). */
#define CLI_SYNTHETIC_PRESETS                                                                              \
    "gpt2-124m, gpt2-355m, gpt2-tiny, llama-1b, llama-tiny, gemma3-1b-shape, gemma3-tiny, qwen3-30b-a3b[:LAYERS], " \
    "qwen3moe-tiny[:LAYERS]"

/* ------------------------------------------------------ shared values */

/* The model, tokenizer, engine, KV and prompt flags. */
typedef struct model_flags {
    const char *model, *synthetic, *tokenizer, *prompt, *ids, *file;
    const char *default_prompt; /* used when none of prompt, ids, file is given */
    kvlm_dtype synth_dtype, kv_dtype;
    int threads, block_size;
    kvlm_isa isa;
    int no_repack;  /* --no-repack: keep the file's weight layout only */
    int kv_blocks;  /* KV pool in blocks; 0: the command's default */
    float kv_mib;   /* KV pool in MiB; 0: not given */
} model_flags;

#define MAX_STOPS 16
#define MAX_BIAS 1024

/* The sampling flags, as kvlm_sampler_options plus stop strings. */
typedef struct sampling_flags {
    kvlm_sampler_options o;
    const char *stops[MAX_STOPS];
    int n_stops;
    kvlm_logit_bias bias[MAX_BIAS];
} sampling_flags;

/* Block size 16, f16 KV (llama.cpp's and vLLM's default), everything else unset. */
void model_flags_init(model_flags *f);
/* Defaults of the CLI: temperature 0.7, top-p 0.9, seed 1 (docs/sampling.md). */
void sampling_flags_init(sampling_flags *f);

/* -------------------------------------------------- the command's spec */

enum cli_group {
    CLI_MODEL = 1 << 0,     /* -m, --synthetic, --dtype */
    CLI_TOKENIZER = 1 << 1, /* --tokenizer */
    CLI_ENGINE = 1 << 2,    /* --threads, --isa, --no-repack */
    CLI_KV = 1 << 3,        /* --kv-dtype, --block-size */
    CLI_KV_POOL = 1 << 4,   /* --kv-blocks, --kv-mib */
    CLI_PROMPT = 1 << 5,    /* -p, --ids */
    CLI_FILE = 1 << 6,      /* -f, --file */
    CLI_SAMPLING = 1 << 7,  /* --temp ... --stop */
    CLI_JSON = 1 << 8,      /* --json */
};
/* What every command that loads a model accepts. */
#define CLI_LOADS_MODEL (CLI_MODEL | CLI_ENGINE | CLI_KV)

typedef enum cli_kind {
    OPT_SWITCH, /* no value: stores (int)lo into an int */
    OPT_INT,    /* int in [lo, hi] */
    OPT_U64,    /* non-negative integer */
    OPT_FLOAT,  /* float in [lo, hi] */
    OPT_STR,    /* the value itself (const char *) */
    OPT_FN,     /* fn(flag, value, dst) parses it; 0 ok, -1 after a message */
} cli_kind;

/* One flag of a command. */
typedef struct cli_opt {
    const char *names;   /* every spelling, ", "-separated: "-n, --requests" */
    const char *metavar; /* the value's name in help; NULL for OPT_SWITCH */
    const char *help;    /* '\n' starts an indented continuation line */
    cli_kind kind;
    void *dst;
    double lo, hi;
    int (*fn)(const char *flag, const char *value, void *dst);
    int *given;          /* set to 1 when the flag appears (may be NULL) */
} cli_opt;

/* Table rows; each checks that dst has the pointer type its kind writes. */
#define CLI_SWITCH(names, help, dst, value) \
    {names, NULL, help, OPT_SWITCH, (void *)(1 ? (dst) : (int *)0), value, value, NULL, NULL}
#define CLI_INT(names, metavar, help, dst, lo, hi) \
    {names, metavar, help, OPT_INT, (void *)(1 ? (dst) : (int *)0), lo, hi, NULL, NULL}
#define CLI_U64(names, metavar, help, dst) \
    {names, metavar, help, OPT_U64, (void *)(1 ? (dst) : (uint64_t *)0), 0, 0, NULL, NULL}
#define CLI_FLOAT(names, metavar, help, dst, lo, hi) \
    {names, metavar, help, OPT_FLOAT, (void *)(1 ? (dst) : (float *)0), lo, hi, NULL, NULL}
#define CLI_STR(names, metavar, help, dst) \
    {names, metavar, help, OPT_STR, (void *)(1 ? (dst) : (const char **)0), 0, 0, NULL, NULL}
#define CLI_FN(names, metavar, help, fn, dst) {names, metavar, help, OPT_FN, dst, 0, 0, fn, NULL}
/* A sub-heading line in the help. */
#define CLI_HEADING(text) {NULL, NULL, text, OPT_SWITCH, NULL, 0, 0, NULL, NULL}
#define CLI_END {NULL, NULL, NULL, OPT_SWITCH, NULL, 0, 0, NULL, NULL}

typedef struct cli_spec {
    const char *cmd;      /* "run": messages say "kvlm run: ..." */
    const char *usage;    /* after "usage: kvlm ": the synopsis line(s) */
    const char *about;    /* help text between the synopsis and the flags, or NULL */
    unsigned groups;      /* enum cli_group bits the command accepts */
    const char *unused;   /* why the other shared flags do not apply (NULL: generic) */
    const cli_opt *opts;  /* the command's own flags, ending with CLI_END; NULL: none.
                             Shown under "options:" unless the first row is a heading */
    const char *notes;    /* help text after the flags, or NULL */
    const char *operands; /* name of the operands ("TEXT..."), NULL if none are taken */
    /* where the shared flags go; each needed by the groups above */
    model_flags *mf;
    sampling_flags *smp;
    int *json;
    /* operands, in order (malloc'ed array into argv; free it) */
    char **operand;
    int n_operands;
} cli_spec;

/* Parses argv[0..argc) into the spec's destinations. Returns 0, or -1
 * after printing the error and the usage line on stderr (exit status 2).
 * -h/--help prints the help on stdout and exits 0. After the flags: a
 * command with CLI_MODEL needs exactly one of -m and --synthetic, and
 * --kv-blocks and --kv-mib exclude each other. */
int cli_parse(cli_spec *spec, int argc, char **argv);
/* The whole help text of the command. */
void cli_help(const cli_spec *spec, FILE *f);
/* "kvlm CMD: MESSAGE" and the usage line on stderr; returns -1. */
int cli_usage_error(const cli_spec *spec, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
