/*
 * OpenAI's POST /v1/embeddings body: `input` (a string, a list of strings,
 * a list of token ids, or a list of token-id lists), `encoding_format`
 * ("float", the default, or "base64"), `dimensions`, `model`, `user`;
 * every other key is a 400. Strings are encoded as a completion prompt is
 * (special tokens matched, BOS when the model's files ask for it). The
 * checks: an empty string, an empty list or an empty id list is a 400
 * naming it (input[i]); ids outside the vocabulary, an input longer than
 * the context window (naming its index), more than EMBED_MAX_INPUTS
 * inputs or more than EMBED_MAX_TOKENS tokens in all are 400s; dimensions
 * must be a whole number from 1 to the model's width. Nothing here runs
 * the engine.
 */
#ifndef KVLM_APP_EMBED_REQUEST_H
#define KVLM_APP_EMBED_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "app/openai_request.h"

#define EMBED_MAX_INPUTS 2048     /* OpenAI's limit on inputs per request */
#define EMBED_MAX_TOKENS 65536    /* tokens per request, every input together */

typedef struct embed_request {
    int32_t **ids;          /* n_inputs lists of token ids */
    int *n_ids;
    int n_inputs;
    int total_tokens;
    int base64;             /* encoding_format "base64": little-endian float32 bytes */
    int dimensions;         /* 0: the model's width; else the vectors are cut to this
                               many leading values and renormalised */
} embed_request;

/* Fills rq (free it with embed_request_free, also after a failure), or
 * returns -1 with e filled (400 in OpenAI's shape, 500 out of memory).
 * width: the model's embedding width (n_embd), what dimensions may ask. */
int api_parse_embeddings(const char *body, size_t len, const api_limits *lim, int width, embed_request *rq,
                         api_error *e);
void embed_request_free(embed_request *rq);

/* The base64 text (RFC 4648, padded) of n floats as little-endian
 * float32 bytes, NUL-terminated, malloc'ed; NULL when memory ran out. */
char *embed_base64(const float *v, size_t n);

#endif
