/*
 * OpenAI Responses request bodies (POST /v1/responses), checked and
 * translated into the chat request the chat pipeline serves
 * (openai_request.h): the chat template, the tool and JSON Schema grammar,
 * stop strings and streaming are that code's.
 *
 * Translation: `input` a string (one user turn) or a list of items:
 * messages (role user, assistant, system or developer; content a string
 * or input_text / output_text parts), function_call items (an assistant
 * turn's tool calls; consecutive ones join one turn) and
 * function_call_output items (tool turns); reasoning items are dropped.
 * `instructions` becomes a first system turn and, as OpenAI does, is not
 * carried to a later response through previous_response_id, whose stored
 * turns (responses_store.h, through the lookup given) come before the
 * input. Function tools become chat tools, tool_choice none, auto,
 * required or {"type": "function", "name"} the chat's; text.format
 * (text, json_object, json_schema) the chat's response_format;
 * max_output_tokens its max_tokens. `store` (default true), metadata,
 * user, parallel_tool_calls, truncation, reasoning, service_tier,
 * prompt_cache_key are checked and change nothing else; images, files,
 * hosted tools, `background` and `include` values are refused.
 *
 * Pure: no I/O; the store is reached only through the lookup callback.
 */
#ifndef KVLM_APP_RESPONSES_REQUEST_H
#define KVLM_APP_RESPONSES_REQUEST_H

#include <jansson.h>

#include "app/openai_request.h"

/* The stored conversation (chat messages, a new reference) of response
 * `id`, or NULL when there is none (unknown, expired or not stored). */
typedef json_t *(*resp_lookup_fn)(void *user, const char *id);

/* The chat body (new reference) for a Responses body (borrowed); *conv
 * receives the conversation so far without the instructions (a new
 * reference), *echo the fields the response object repeats. NULL with e
 * filled. */
json_t *oresp_to_chat(json_t *root, resp_lookup_fn lookup, void *user, json_t **conv, json_t **echo, api_error *e);
/* POST /v1/responses: the request the engine runs (shape
 * API_SHAPE_RESPONSES, store, conversation and echo filled). */
int oresp_parse(const char *body, size_t len, const api_limits *lim, resp_lookup_fn lookup, void *user,
                api_request *rq, api_error *e);

#endif
