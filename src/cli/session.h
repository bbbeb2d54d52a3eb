/*
 * What every model-running command shares: the model flags (-m or
 * --synthetic, --tokenizer, -p or --ids, threads, kernels, KV dtype and
 * block size) and opening them: the model, its tokenizer, the prompt as
 * checked token ids.
 */
#ifndef KVLM_CLI_SESSION_H
#define KVLM_CLI_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include "kvlm.h"

typedef struct model_flags {
    const char *model, *synthetic, *tokenizer, *prompt, *ids;
    kvlm_dtype synth_dtype, kv_dtype;
    int threads, block_size;
    kvlm_isa isa;
} model_flags;

void model_flags_init(model_flags *f);
/* If argv[*i] is a model flag, consumes it and returns 1; 0 if it is not
 * one; -1 after printing an error. */
int model_flags_parse(model_flags *f, int argc, char **argv, int *i);
extern const char *model_flags_help;

typedef struct cli_session {
    kvlm_model *m;
    const kvlm_config *c;
    kvlm_tokenizer *tok;   /* NULL when the model has none and none is needed */
    int32_t *prompt;
    size_t n_prompt;
} cli_session;

/* Opens model, tokenizer and (when need_prompt) the prompt: -p text is
 * encoded as kvlm serve encodes a completion prompt (special tokens
 * matched, BOS when the model's files ask for it); --ids are taken as
 * given. Returns 0 or
 * the exit status to use (1 runtime error, 2 usage error), after printing
 * the reason. */
int session_open(cli_session *s, const model_flags *f, int need_prompt);
void session_close(cli_session *s);
/* Engine options from the flags. */
kvlm_engine_options session_engine_options(const model_flags *f, int no_cache);

#endif
