/*
 * The kvlm subcommands. Each takes the arguments after its name and returns
 * the process exit status: 0 success, 1 runtime error, 2 usage error.
 */
#ifndef KVLM_CLI_COMMANDS_H
#define KVLM_CLI_COMMANDS_H

int cli_run(int argc, char **argv);
int cli_chat(int argc, char **argv);
int cli_bench(int argc, char **argv);
int cli_tokenize(int argc, char **argv);
int cli_embed(int argc, char **argv);
int cli_detokenize(int argc, char **argv);
int cli_perplexity(int argc, char **argv);
int cli_kv(int argc, char **argv);
int cli_bench_kv(int argc, char **argv);
int cli_sample_stats(int argc, char **argv);
int cli_gen_stats(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_loadgen(int argc, char **argv);
int cli_report(int argc, char **argv);

#endif
