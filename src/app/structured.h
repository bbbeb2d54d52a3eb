/*
 * The constraint a request asks for, compiled into a grammar for the
 * sampler: response_format json_object / json_schema, kvlm's grammar and
 * regex, and for tool_choice "required" or naming a function, a JSON
 * Schema of the call ({"name": const, "arguments": the tool's parameters},
 * anyOf over the tools) wrapped in the chat template's call syntax
 * (tool_calls.h: tc_family_syntax), so that a model that knows nothing of
 * JSON still writes a call the parser reads.
 *
 * The grammar engine is the library's (kvlm_grammar_*, include/kvlm.h);
 * this file is the server's only caller. A grammar the engine refuses is
 * a 400 naming the field, and so is a max_tokens below the grammar's
 * shortest output (one token per byte, kvlm_grammar_min_bytes). A grammar is compiled per request on the HTTP
 * thread and freed with the job.
 */
#ifndef KVLM_APP_STRUCTURED_H
#define KVLM_APP_STRUCTURED_H

#include "kvlm.h"
#include "app/openai_request.h"

struct kvlm_grammar;

/* The JSON Schema text of the call a forced tool_choice asks for (the
 * named tool, or anyOf over the tools), with the family's arguments key;
 * malloc'ed, NULL without tools. */
char *structured_call_schema(const api_request *rq);
/* *out: the grammar rq needs, or NULL when it needs none. -1 with e set
 * (400 naming the field: a schema, GBNF or regex the engine refuses, a
 * max_tokens that cannot hold its shortest output). */
int structured_build(const api_request *rq, struct kvlm_grammar **out, api_error *e);
void structured_free(struct kvlm_grammar *g);
/* Gives the grammar (may be NULL) to a scheduler request. */
void structured_attach(kvlm_request_params *p, const struct kvlm_grammar *g);

#endif
