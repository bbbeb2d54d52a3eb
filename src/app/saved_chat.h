/*
 * The saved conversation file of `kvlm chat` (cli/chat_file.h), its part
 * that needs no model: the header and the text.
 *   header (32 bytes): magic "KVLMCHAT", u32 version 1, u32 1 when a KV
 *     record follows, u64 text bytes, u64 XXH3-64 of the text
 *   text: JSON {"messages": [{"role", "content"}...] (an assistant reply
 *     with reasoning also has "reasoning_content", and "thinking" when the
 *     template is harmony's), "chat_template": the
 *     template's origin, "kv_dtype"}
 *   then, when the header says so, a KV record (kvlm_kv_seq_save)
 * Every length is checked before it is used; the text is parsed only once
 * its checksum matches. Byte order: the host's (little-endian targets).
 */
#ifndef KVLM_APP_SAVED_CHAT_H
#define KVLM_APP_SAVED_CHAT_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>

#define SAVED_CHAT_MAX_TEXT ((size_t)64 << 20)

/* Reads the header and text from f (left at the KV record): *doc receives
 * the JSON, its "messages" checked (an array of objects with a "role" of
 * system (first only), user or assistant and a string "content", and
 * "reasoning_content" and "thinking", if any, strings of assistant
 * messages), *has_kv
 * whether a KV record follows. Returns 0, or -1 with msg saying what is
 * wrong (*doc NULL). */
int saved_chat_read_text(FILE *f, json_t **doc, int *has_kv, char *msg, size_t msg_size);
/* Writes the header and the n bytes of text. Returns 0, or -1 when a write
 * failed. */
int saved_chat_write_head(FILE *f, const char *text, size_t n, int has_kv);
/* Rewrites the header of the file f (written by saved_chat_write_head) to
 * say no KV record follows. Returns 0 or -1. */
int saved_chat_mark_no_kv(FILE *f);

#endif
