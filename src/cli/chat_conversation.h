/*
 * The conversation of `kvlm chat`: its messages in the OpenAI shape
 * ({"role", "content"}, an optional system message first), rendered with
 * the model's chat template exactly as kvlm serve renders the messages of
 * /v1/chat/completions (app/chat_template.h: the same template search,
 * the same rendering, special tokens matched only when a Jinja template
 * wrote the text, BOS when the model's files ask for it), and saved as a
 * request body. Replies stopped with Ctrl-C stay in the conversation as
 * they were cut; they are marked as stopped for the display only.
 */
#ifndef KVLM_CLI_CHAT_CONVERSATION_H
#define KVLM_CLI_CHAT_CONVERSATION_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "kvlm.h"
#include "kvlm_tokenizer.h"
#include "app/chat_template.h"
#include "app/sbuf.h"

typedef struct chat_conv {
    json_t *messages;             /* array of {"role", "content"} (assistant replies with
                                     reasoning: also "reasoning_content", "thinking") */
    const chat_template *tpl;
    const kvlm_tokenizer *tok;
    int32_t turn_ends[CHAT_MAX_TURN_ENDS]; /* the template's end-of-turn token ids */
    int n_turn_ends;
} chat_conv;

/* An empty conversation (with a system message when system is not NULL or
 * empty). Returns 0, -1 when memory runs out. */
int chat_conv_init(chat_conv *cv, const chat_template *tpl, const kvlm_tokenizer *tok, const char *system);
void chat_conv_free(chat_conv *cv);
/* Renders and tokenises the same messages with another model's template
 * and tokenizer from now on (kvlm chat's /model). */
void chat_conv_retarget(chat_conv *cv, const chat_template *tpl, const kvlm_tokenizer *tok);
/* Forgets every message but the system message. */
void chat_conv_reset(chat_conv *cv);
/* Sets the system message (first in the list); NULL or "" removes it. */
int chat_conv_set_system(chat_conv *cv, const char *text);
/* Appends a message; content is raw bytes (invalid UTF-8 becomes U+FFFD). */
int chat_conv_add(chat_conv *cv, const char *role, const char *content, size_t n);
/* Appends the model's reply: content the answer, and when there is
 * reasoning (rn > 0), reasoning_content (and thinking for a harmony
 * template, the field gpt-oss's template reads), as kvlm serve passes an
 * assistant message's reasoning_content to the template. Each template
 * renders it where it reads it (Qwen3: for turns after the last user
 * message only; gpt-oss: before a tool call only) and drops it elsewhere.
 * Returns 0 or -1. */
int chat_conv_add_reply(chat_conv *cv, const char *answer, size_t n, const char *reasoning, size_t rn);
/* Removes the last message (a user message whose reply could not run). */
void chat_conv_pop(chat_conv *cv);
/* Messages in the conversation. */
size_t chat_conv_len(const chat_conv *cv);

/* The prompt of the next reply: the messages rendered with the assistant's
 * opening (text, appended to *rendered) and tokenised (*ids, malloc'ed).
 * Returns 0, or -1 with msg filled (the template refused the messages or
 * memory ran out). */
int chat_conv_prompt(const chat_conv *cv, sbuf *rendered, int32_t **ids, size_t *n, char *msg, size_t msg_size);
/* Writes {"messages": [...]} to path, indented. Returns 0 or -1 with msg
 * naming the path and the reason. */
int chat_conv_save(const chat_conv *cv, const char *path, char *msg, size_t msg_size);

#endif
