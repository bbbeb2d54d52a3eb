/*
 * Text in JSON documents, for the server's bodies and the CLI's --json
 * output alike. Generated text arrives as raw bytes (the scheduler's
 * kvlm_text_stream has already applied stop strings and UTF-8 assembly, the
 * same pipeline kvlm run prints from); a JSON string must be well-formed
 * UTF-8, so ts_json_string replaces what is not with U+FFFD, here and only
 * here. ts_utf8_valid checks request bodies and token pieces.
 */
#ifndef KVLM_APP_JSON_TEXT_H
#define KVLM_APP_JSON_TEXT_H

#include <jansson.h>
#include <stddef.h>

/* A JSON string of the n bytes at s (s may be NULL when n is 0; invalid
 * UTF-8 becomes U+FFFD). JSON null only when memory runs out, so the
 * result can go straight into json_pack's "o" or json_object_set_new. */
json_t *ts_json_string(const char *s, size_t n);
/* 1 if all n bytes are well-formed UTF-8. */
int ts_utf8_valid(const char *s, size_t n);

#endif
