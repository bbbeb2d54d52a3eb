/*
 * One choice's generated tokens turned into the text a client sees: token
 * bytes pass the stop-string matcher (text that may begin a stop string is
 * held back; a completed stop string and everything after it are never
 * shown), then the UTF-8 assembler (never half a character in a delta).
 * Special tokens (<|endoftext|>, chat markers) count as output tokens but
 * add no text. Without a tokenizer each token shows as its id and a space.
 *
 * Deltas are raw bytes; ts_json_string turns any bytes into a JSON string,
 * replacing what is not well-formed UTF-8 with U+FFFD.
 */
#ifndef KVLM_SERVER_TEXT_STREAM_H
#define KVLM_SERVER_TEXT_STREAM_H

#include <jansson.h>

#include "kvlm.h"
#include "server/sbuf.h"

typedef struct text_stream {
    const kvlm_tokenizer *tok;  /* NULL: ids as text */
    kvlm_stop *stop;            /* NULL: no stop strings */
    kvlm_utf8_stream utf8;
    int stopped;
} text_stream;

int ts_init(text_stream *ts, const kvlm_tokenizer *tok, char *const *stops, int n_stops, kvlm_error *err);
/* Appends the printable text of token id to delta; returns 1 once a stop
 * string has completed (the choice must end). */
int ts_push(text_stream *ts, int32_t id, sbuf *delta);
/* Appends what was held back, at the end of a choice that did not stop on
 * a stop string. */
void ts_finish(text_stream *ts, sbuf *delta);
void ts_free(text_stream *ts);

/* A JSON string of n bytes (invalid UTF-8 becomes U+FFFD). Never NULL
 * unless memory runs out. */
json_t *ts_json_string(const char *s, size_t n);
/* 1 if all n bytes are well-formed UTF-8. */
int ts_utf8_valid(const char *s, size_t n);

#endif
