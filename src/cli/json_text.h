/*
 * Generated text in the CLI's JSON documents. Text is kept as the raw bytes
 * the tokens produced (the scheduler's text events, see cli/generate.h);
 * a JSON string must be well-formed UTF-8, so bytes that are not become
 * U+FFFD here, and only here. Turning tokens into text is not done in the
 * CLI: kvlm_text_stream does it for every command and the server.
 */
#ifndef KVLM_CLI_JSON_TEXT_H
#define KVLM_CLI_JSON_TEXT_H

#include <jansson.h>
#include <stddef.h>

/* n bytes as a JSON string (invalid UTF-8 becomes U+FFFD); JSON null only
 * when memory runs out. */
json_t *cli_json_text(const char *bytes, size_t n);

#endif
