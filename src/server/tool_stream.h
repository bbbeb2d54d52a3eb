/*
 * A streaming chat choice's text on its way to server-sent events: through
 * the tool-call parser (tool_calls.h) when the request has tools, so that
 * calls go out as delta.tool_calls (an opening with id, type and name,
 * then pieces of arguments) and content that may begin a call is withheld
 * until it is known not to; straight through otherwise. A token's
 * log-probabilities ride on the first event its text causes, or on an
 * empty delta when its text was withheld. Engine thread only.
 */
#ifndef KVLM_SERVER_TOOL_STREAM_H
#define KVLM_SERVER_TOOL_STREAM_H

#include "server/srv.h"

/* The text of token ev for the tool-call parser: ev's own, or, when ev
 * is a special token that is a call marker (Mistral's [TOOL_CALLS],
 * Llama's <|python_tag|>), the marker's text, which the text stream
 * leaves out. */
const char *tool_token_text(const job *j, const kvlm_token_event *ev, size_t *len);
/* Text of one token of choice c (ev: the token, for its logprobs). */
void tool_stream_text(job *j, int c, const char *text, size_t n, const kvlm_token_event *ev, sbuf *out);
/* The choice's last text and its finish event (with "tool_calls" as the
 * reason when it called a tool and stopped of itself). */
void tool_stream_finish(job *j, int c, const char *text, size_t n, kvlm_finish why, sbuf *out);

#endif
