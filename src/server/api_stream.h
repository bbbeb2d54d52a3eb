/*
 * The response shapes of the APIs translated into chat requests
 * (Anthropic Messages, OpenAI Responses): how a job's events become that
 * API's server-sent events and its whole body. The engine loop and the
 * tool-call stream (tool_stream.h) call these instead of the chat
 * completion formatting when the job's request has such a shape; the
 * tool-call parser, stop strings and everything upstream are shared.
 * Engine thread only, but for the error bodies.
 */
#ifndef KVLM_SERVER_API_STREAM_H
#define KVLM_SERVER_API_STREAM_H

#include "server/srv.h"

typedef struct stream_ops {
    /* the stream opens (the job was accepted) */
    void (*start)(job *j, sbuf *out);
    /* content text of choice c (n > 0) */
    void (*text)(job *j, int c, const char *text, size_t n, sbuf *out);
    /* a tool call begins: its index and name */
    void (*call)(job *j, int c, int index, const char *name, size_t n, sbuf *out);
    /* a piece of call `index`'s arguments */
    void (*args)(job *j, int c, int index, const char *text, size_t n, sbuf *out);
    /* choice c ended (what is open closes) */
    void (*finish)(job *j, int c, kvlm_finish why, int n_calls, sbuf *out);
    /* every choice ended: the closing events */
    void (*end)(job *j, sbuf *out);
    /* the job failed after the stream opened */
    void (*error)(job *j, const api_error *e, sbuf *out);
    /* a finished non-streaming job's body (malloc'ed) */
    char *(*final_body)(job *j);
    /* the job finished (streaming or not, not failed): keep what must be kept */
    void (*done)(job *j);
    /* reasoning text of choice c (n > 0; the template reasons: reasoning.h) */
    void (*thinking)(job *j, int c, const char *text, size_t n, sbuf *out);
} stream_ops;

extern const stream_ops anthropic_stream_ops, responses_stream_ops;

/* The job's shape, or NULL for the OpenAI completion and chat shapes. */
static inline const stream_ops *stream_ops_of(const job *j) {
    return j->rq.shape == API_SHAPE_ANTHROPIC   ? &anthropic_stream_ops
           : j->rq.shape == API_SHAPE_RESPONSES ? &responses_stream_ops
                                                : NULL;
}

/* A Responses output item of reasoning text: {type "reasoning", id "rs_..."
 * (from the response id), summary [], content [{type "reasoning_text",
 * text}] (no part unless with_part), status}. The streamed reasoning is
 * responses_stream_ops.thinking. */
json_t *responses_reasoning_item(const job *j, const char *status, const char *text, size_t n, int with_part);
/* Anthropic's error body: {"type": "error", "error": {"type", "message"}}
 * with the error type Anthropic gives the status (malloc'ed). */
char *anthropic_error_body(const api_error *e);
/* The stop_sequence that ended choice c, or NULL (end of turn, length, a
 * call). */
const char *shape_stop_sequence(const job *j, int c);

#endif
