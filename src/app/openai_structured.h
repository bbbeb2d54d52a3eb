/*
 * The request fields that shape what the model may write: OpenAI's
 * `response_format` (text, json_object, json_schema), kvlm's extensions
 * `grammar` (GBNF text) and `regex`, and OpenAI's `tools` and
 * `tool_choice` (chat only). Checked here, with errors naming the field
 * (response_format.json_schema.name, tools[2].function.parameters, ...);
 * the constraint itself is compiled elsewhere (structured.h), and a
 * schema's keywords are judged by the grammar engine.
 *
 * Rules: at most one of a JSON response_format, grammar and regex;
 * tool_choice "required" or naming a function needs tools and cannot be
 * combined with them (it is itself a constraint). tool_choice defaults to
 * "auto" when tools are given; with "none" the tools are not shown to the
 * model (kvlm leaves them out of the prompt) and nothing is parsed. With
 * a response_format, grammar or regex, the tools are shown but the output
 * is content (it has the requested format), never parsed for calls.
 */
#ifndef KVLM_APP_OPENAI_STRUCTURED_H
#define KVLM_APP_OPENAI_STRUCTURED_H

#include <jansson.h>

#include "app/openai_request.h"

#define API_MAX_TOOLS 128
#define API_MAX_GRAMMAR_BYTES (64 * 1024)
#define API_MAX_REGEX_BYTES (4 * 1024)

/* Fills rq's format, format_text, tool_choice, tool_name, tools_json and
 * tool_family from the body. */
int api_parse_structured(json_t *root, int chat, const api_limits *lim, api_request *rq, api_error *e);

#endif
