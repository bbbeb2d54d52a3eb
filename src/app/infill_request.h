/*
 * Fill-in-the-middle requests: llama.cpp's POST /infill body (input_prefix,
 * input_suffix, input_extra, prompt, n_predict) and the `suffix` of a
 * /v1/completions body, turned into a completion request whose prompt is
 * the model's FIM prompt as token ids.
 *
 * The prompt is laid out as llama-server lays it out:
 *   [extra] [BOS] FIM_PRE prefix prompt FIM_SUF suffix FIM_MID
 * where [extra] is, when the vocabulary has a repository token,
 * FIM_REP "myproject\n", then per input_extra chunk FIM_SEP "filename\n"
 * text (or "\n\n--- snippet ---\n\n" text without a file separator), and
 * FIM_SEP "filename\n" at the end when there is a file separator. Prefix,
 * suffix and chunks are encoded as plain text (special tokens not
 * matched), the prompt with special tokens matched; BOS only when the
 * model's files ask for it. What does not fit the context window beside
 * the completion is cut: the prefix keeps its last tokens (at most 3/4 of
 * the room), the suffix its first ones (at most 1/4 of the room, less the
 * prompt), the extra context its last tokens (whatever room is left).
 *
 * A model whose files name no prefix, suffix or middle token is refused
 * with a 400 that names the missing ones. Nothing here runs the engine.
 */
#ifndef KVLM_APP_INFILL_REQUEST_H
#define KVLM_APP_INFILL_REQUEST_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "app/openai_request.h"

typedef struct fim_chunk {
    const char *filename;   /* NULL: "tmp" */
    size_t filename_len;
    const char *text;
    size_t text_len;
} fim_chunk;

typedef struct fim_input {
    const char *prefix, *suffix;
    size_t prefix_len, suffix_len;
    const fim_chunk *extra;
    int n_extra;
    const char *prompt;     /* text after the prefix, may be NULL */
    size_t prompt_len;
} fim_input;

/* 0 when the tokenizer has the prefix, suffix and middle tokens; else a
 * 400 (code "fim_not_supported", param) naming the missing ones. */
int fim_check(const kvlm_tokenizer *tok, const char *param, api_error *e);

/* The FIM prompt of in, at most room tokens (room >= 1); spm puts the
 * suffix block before the prefix block. *ids is malloc'ed. Fails with a
 * 400 when the FIM tokens are missing or even the markers and the prompt
 * do not fit. */
int fim_assemble(const kvlm_tokenizer *tok, const fim_input *in, int room, int spm, int32_t **ids, int *n,
                 api_error *e);

/* The room a FIM prompt of a completion body may fill: the context window
 * less the body's max_tokens (16 when not given). */
int fim_room(json_t *root, const api_limits *lim);

/* POST /infill: a completion request (rq->infill set) with the FIM prompt
 * as its one prompt. Fields besides input_prefix, input_suffix,
 * input_extra, prompt and n_predict (max_tokens by another name; -1 the
 * default) are those of /v1/completions; cache_prompt, t_max_prompt_ms,
 * t_max_predict_ms and response_fields are accepted and ignored. */
int api_parse_infill(const char *body, size_t len, const api_limits *lim, api_request *rq, api_error *e);

#endif
