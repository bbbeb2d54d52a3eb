/*
 * Text in JSON bodies. Generated text arrives as raw bytes (the
 * scheduler's kvlm_text_stream has already applied stop strings and UTF-8
 * assembly, the same pipeline kvlm run prints from); a JSON string must be
 * well-formed UTF-8, so ts_json_string replaces what is not with U+FFFD.
 * ts_utf8_valid checks request bodies and token pieces.
 */
#ifndef KVLM_SERVER_JSON_TEXT_H
#define KVLM_SERVER_JSON_TEXT_H

#include <jansson.h>
#include <stddef.h>

/* A JSON string of n bytes (invalid UTF-8 becomes U+FFFD). Never NULL
 * unless memory runs out. */
json_t *ts_json_string(const char *s, size_t n);
/* 1 if all n bytes are well-formed UTF-8. */
int ts_utf8_valid(const char *s, size_t n);

#endif
