/*
 * Where generated tokens go as text: token bytes pass through the stop
 * string matcher, then the UTF-8 assembler (never half a character), then
 * to a stream (printing as they arrive) and into a buffer (the whole text,
 * for JSON output and statistics). Without a tokenizer, ids are printed.
 */
#ifndef KVLM_CLI_TEXT_SINK_H
#define KVLM_CLI_TEXT_SINK_H

#include <jansson.h>
#include <stdio.h>

#include "kvlm.h"

typedef struct text_sink {
    const kvlm_tokenizer *tok;
    kvlm_stop *stop;        /* may be NULL */
    FILE *stream;           /* may be NULL */
    kvlm_utf8_stream utf8;
    char *text;             /* NUL-terminated; raw bytes, invalid UTF-8 kept */
    size_t len, cap;
    int stopped;            /* a stop string completed */
} text_sink;

void sink_init(text_sink *s, const kvlm_tokenizer *tok, kvlm_stop *stop, FILE *stream);
/* The gen_request callback: returns 1 once a stop string has completed. */
int sink_token(int32_t id, void *ctx);
/* Writes out whatever is held back at the end of a generation. */
void sink_finish(text_sink *s);
void sink_free(text_sink *s);
/* The text as a JSON string; bytes that are not valid UTF-8 become U+FFFD. */
json_t *sink_json_text(const text_sink *s);

#endif
