/*
 * Anthropic Messages request bodies (POST /v1/messages and
 * /v1/messages/count_tokens), checked and translated into the chat request
 * the OpenAI pipeline already serves (openai_request.h), so the chat
 * template, the tool and schema grammar, stop strings and streaming are
 * the same code for both APIs.
 *
 * Translation: `system` (a string or text blocks) becomes a system turn;
 * a user turn's text blocks its content and each tool_result block a tool
 * turn (before the text); an assistant turn's text blocks its content and
 * its tool_use blocks its tool calls (input as the arguments' JSON);
 * thinking blocks are dropped. `tools` (name, description, input_schema)
 * become function tools; tool_choice auto, any, tool and none become auto,
 * required, the named function and none; stop_sequences the stop strings;
 * max_tokens (required), temperature (0 to 1), top_p and top_k are the
 * sampler's. `metadata` (user_id) and `thinking` are checked and change
 * nothing: where the template reasons, the reasoning becomes a thinking
 * block whatever `thinking` says (reasoning.h, anthropic_response.c). cache_control on blocks and tools is accepted
 * and ignored (kvlm caches prefixes by itself). Images, documents and
 * server tools are refused. Unknown fields are refused, as Anthropic does.
 *
 * Errors are api_errors; their Anthropic shape is the server's
 * (anthropic_response.h). Pure: no I/O, no server state.
 */
#ifndef KVLM_APP_ANTHROPIC_REQUEST_H
#define KVLM_APP_ANTHROPIC_REQUEST_H

#include <jansson.h>

#include "app/openai_request.h"

/* The chat body (new reference) for an Anthropic body (borrowed); with
 * count_only, the count_tokens body (no max_tokens, sampling or stream).
 * NULL with e filled. */
json_t *anth_to_chat(json_t *root, int count_only, api_error *e);
/* POST /v1/messages: the request the engine runs (shape
 * API_SHAPE_ANTHROPIC). */
int anth_parse_messages(const char *body, size_t len, const api_limits *lim, api_request *rq, api_error *e);
/* POST /v1/messages/count_tokens: the prompt's length in tokens as
 * /v1/messages would run it (the template, the tools). */
int anth_count_tokens(const char *body, size_t len, const api_limits *lim, int *n_tokens, api_error *e);

#endif
