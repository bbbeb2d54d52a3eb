/*
 * The saved conversation of `kvlm chat` (/save FILE, /load FILE): one file
 * holding the conversation's text and, when the KV cache still holds it,
 * the KV of its tokens, so that a loaded conversation answers without
 * prefilling again. Layout:
 *   header (32 bytes): magic "KVLMCHAT", u32 version 1, u32 1 when a KV
 *     record follows, u64 text bytes, u64 XXH3-64 of the text
 *   text: JSON {"messages": [{"role", "content"}...] (an assistant reply
 *     with reasoning also has "reasoning_content", and "thinking" when the
 *     template is harmony's), "chat_template": the
 *     template's origin, "kv_dtype"}
 *   KV record (kvlm_kv_seq_save: fingerprinted, checksummed), optional
 * Written to FILE.tmp.PID, synced, then renamed over FILE. A file whose
 * header or text does not verify is refused whole (the conversation stays
 * as it was); a KV record that is corrupted, truncated, or from another
 * model or setting is skipped with its reason and the conversation is
 * recomputed at the next reply. The KV is restored into the prefix cache
 * (blocks found by their tokens), so it is only used where the next
 * prompt's tokens equal the saved ones.
 */
#ifndef KVLM_CLI_CHAT_FILE_H
#define KVLM_CLI_CHAT_FILE_H

#include <jansson.h>
#include <stdio.h>

#include "cli/chat_conversation.h"
#include "kvlm.h"

/* What /save and /load did with the KV. */
typedef struct chat_file_kv {
    int tokens;           /* tokens whose KV was written or restored */
    double ms;            /* time the KV took to write or restore */
    char why[600];        /* when tokens is 0: why no KV was written or restored */
    char template_origin[400]; /* /load: the chat template the file was saved with */
} chat_file_kv;

/* Saves the conversation to path with the KV the prefix cache holds for
 * ids (the tokens of the last prompt and its reply, NULL when none).
 * Returns 0, or -1 with msg naming the path and the reason. */
int chat_file_save(const char *path, const chat_conv *cv, const char *template_origin, kvlm_kv *kv,
                   const kvlm_model *m, const int32_t *ids, int n_ids, chat_file_kv *out, char *msg,
                   size_t msg_size);
/* Loads path into cv (its messages replace cv's) and its KV into kv's
 * prefix cache; *ids (malloc'ed, NULL when none) and *n_ids receive the
 * restored tokens. Returns 0, or -1 with msg when the text cannot be read
 * (cv unchanged). */
int chat_file_load(const char *path, chat_conv *cv, kvlm_kv *kv, const kvlm_model *m, int32_t **ids, int *n_ids,
                   chat_file_kv *out, char *msg, size_t msg_size);

#endif
