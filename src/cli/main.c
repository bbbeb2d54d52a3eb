/*
 * The kvlm command-line tool: dispatches to one subcommand per concept;
 * `kvlm --version` prints the library's version and the kernels it would
 * use on this CPU. Exit status: 0 success, 1 runtime error, 2 usage error.
 */
#include <stdio.h>
#include <string.h>

#include "kvlm.h"

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/options.h"

typedef struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} command;

static const command commands[] = {
    {"run", cli_run, "generate text from a prompt; --stats for timings and KV figures"},
    {"chat", cli_chat, "interactive chat in the terminal with the model's chat template (docs/chat.md)"},
    {"bench", cli_bench, "prefill/decode throughput, decode roofline, cache on vs off"},
    {"tokenize", cli_tokenize, "print the token ids of a text"},
    {"detokenize", cli_detokenize, "print the text of token ids"},
    {"embed", cli_embed, "the embedding of a text or token ids (pooled hidden states, as /v1/embeddings)"},
    {"perplexity", cli_perplexity, "sliding-window perplexity of a text file"},
    {"kv", cli_kv, "KV cache bytes per token, per context and capacity planning"},
    {"bench-kv", cli_bench_kv, "paged vs contiguous KV: residency, utilisation, tokens/s; attention kernel; prefix cache"},
    {"sample-stats", cli_sample_stats, "entropy, top-1/top-5 mass, tokens for 90% of the next token per temperature"},
    {"gen-stats", cli_gen_stats, "distinct-token ratio and repeated 4-gram rate of generations per setting"},
    {"serve", cli_serve, "OpenAI-compatible HTTP server with continuous batching"},
    {"loadgen", cli_loadgen, "load generator for kvlm serve: throughput, TTFT, TPOT percentiles"},
    {"report", cli_report, "run every measurement and write DIR/report.md with SVG charts"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: kvlm COMMAND [options]   (kvlm COMMAND --help for its options; kvlm --version)\n\n"
               "commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].help);
    fprintf(f, "\nmodels:\n"
               "  -m PATH            a Hugging Face directory (config.json + safetensors), a .safetensors\n"
               "                     or model.safetensors.index.json file, a .gguf file (f32, f16, bf16,\n"
               "                     Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, Q2_K..Q6_K, IQ4_XS) or\n"
               "                     an llm.c .bin checkpoint\n"
               "  --synthetic NAME   random weights with exact shapes, no files:\n"
               "                     " CLI_SYNTHETIC_PRESETS "\n"
               "every command that loads a model takes the same model, engine and KV flags.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("kvlm %s (%s)\n", kvlm_version(), kvlm_isa_name(kvlm_isa_best()));
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 2, argv + 2);
    fprintf(stderr, "kvlm: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return EXIT_USAGE;
}
