/*
 * Opening what the model flags (options.h) name: the model, its tokenizer
 * and the prompt as checked token ids (within the vocabulary and the
 * context window), and the engine options the flags ask for. Parsing the
 * flags is options.c's; this file loads and checks.
 */
#ifndef KVLM_CLI_SESSION_H
#define KVLM_CLI_SESSION_H

#include <stddef.h>
#include <stdint.h>

#include "cli/options.h"
#include "kvlm.h"

typedef struct cli_session {
    kvlm_model *m;
    const kvlm_config *c;
    kvlm_tokenizer *tok;   /* NULL when the model has none and none is needed */
    int32_t *prompt;
    size_t n_prompt;
} cli_session;

/* What session_open must provide besides the model (bits; 1 keeps the
 * meaning of the former need_prompt argument). */
#define SESSION_PROMPT 1    /* the prompt from -p, --ids, -f or the default */
#define SESSION_TOKENIZER 2 /* a tokenizer, even without -p */

/* Opens model, tokenizer and what `need` asks for. -p/-f text is encoded
 * as kvlm serve encodes a completion prompt (special tokens matched, BOS
 * when the model's files ask for it); --ids are taken as given. Returns 0 or the exit
 * status to use (1 runtime error, 2 usage error), after printing the
 * reason. session_close is safe after a failed open. */
int session_open(cli_session *s, const model_flags *f, int need);
void session_close(cli_session *s);
/* Engine options from the flags. */
kvlm_engine_options session_engine_options(const model_flags *f);
/* Why the engine runs the threads it does, for the set-up lines: "--threads"
 * when the flag was given, else kvlm_default_threads' reason ("2 physical
 * cores available to this process; no SMT siblings"). Returns buf. */
const char *session_threads_why(const model_flags *f, char *buf, size_t n);

/* Loads -m PATH, or a synthetic preset when path is NULL (exactly one is
 * set), with its weights repacked for the kernels of f->isa unless
 * --no-repack (kvlm_model_params); prints errors. */
kvlm_model *cli_load_model(const char *path, const char *synthetic, kvlm_dtype synth_dtype, const model_flags *f);
/* cli_load_model that also gives the exit status a failure calls for: 2
 * for a model file that is malformed or refused (KVLM_ERR_FORMAT,
 * KVLM_ERR_UNSUPPORTED), 1 otherwise. */
kvlm_model *cli_load_model_status(const char *path, const char *synthetic, kvlm_dtype synth_dtype,
                                  const model_flags *f, int *status);

#endif
