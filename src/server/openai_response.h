/*
 * OpenAI-compatible response bodies: errors, whole completions and chat
 * completions, server-sent event chunks (`data: {...}\n\n`, then
 * `data: [DONE]\n\n`), usage and log-probabilities in the completions and
 * chat shapes. Pure formatting: no locks, no I/O.
 */
#ifndef KVLM_SERVER_OPENAI_RESPONSE_H
#define KVLM_SERVER_OPENAI_RESPONSE_H

#include <jansson.h>

#include "server/srv.h"

const char *resp_finish_name(kvlm_finish f);
/* {"error": {"message", "type", "param", "code"}} as malloc'ed JSON text. */
char *resp_error_body(const api_error *e);
/* The same as one server-sent event. */
void resp_sse_error(const api_error *e, sbuf *out);

/* One streaming event for choice c: a text delta (may be empty), the
 * token's log-probabilities (ev may be NULL), a finish reason (or NULL);
 * with role, the chat delta opens with the assistant role. */
void resp_chunk(const job *j, int c, int role, const char *delta, size_t n, const kvlm_token_event *ev,
                const char *finish, sbuf *out);
/* One streaming event of a tool call of choice c: its opening (id, type,
 * name and empty arguments) when name is not NULL, else a piece of its
 * arguments; logprobs as in resp_chunk (ev may be NULL). */
void resp_tool_chunk(const job *j, int c, int index, const char *name, size_t name_len, const char *args,
                     size_t args_len, const kvlm_token_event *ev, sbuf *out);
/* One streaming event of choice c's reasoning: delta.reasoning_content
 * (harmony's analysis channel); logprobs as in resp_chunk. */
void resp_reasoning_chunk(const job *j, int c, const char *text, size_t n, const kvlm_token_event *ev, sbuf *out);
/* The id of call `index` of choice c: "call_" and 24 hex digits, the same
 * in streaming and whole responses. */
void resp_tool_call_id(const job *j, int c, int index, char id[32]);
/* The finish reason of choice c: "tool_calls" when it called a tool and
 * ended of itself (n_calls > 0, STOP). */
const char *resp_finish_reason(const job *j, kvlm_finish f, int n_calls);

/* The closing usage event (stream_options.include_usage) and [DONE]. */
void resp_stream_end(const job *j, sbuf *out);

/* Keeps a token's log-probabilities for the final body. */
void resp_keep_logprobs(choice_state *cs, const kvlm_token_event *ev, int top_k);
/* The whole response of a finished non-streaming job (malloc'ed). */
char *resp_final_body(const job *j);

#endif
