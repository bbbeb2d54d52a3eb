/*
 * Counting the generated tokens that are reasoning, as OpenAI's
 * reasoning_tokens counts them (part of the completion's tokens): one
 * token at a time, each as the bytes it prints (kvlm_tokenizer_piece, the
 * marker's text for a special token), through a splitter of its own, so
 * the count does not depend on streaming or on how text was held back.
 *
 * Think tags (reasoning.h): the tokens from the start of the output (or
 * of the reasoning the prompt opened) up to the one that completes
 * </think>, when the output opened the reasoning; the whitespace after
 * </think> and the answer are not reasoning. An output that does not
 * open with <think> has none.
 *
 * Harmony (harmony.h): the tokens of each analysis message, its header
 * (<|channel|>analysis<|message|>) and the marker that ends its body
 * included; final, commentary and call messages are not reasoning.
 *
 * A token is counted once its place is known: tokens that may still
 * begin the reasoning (leading whitespace, part of <think>, a header not
 * yet closed) wait, and count only if the reasoning does open. Nothing
 * here emits text.
 */
#ifndef KVLM_APP_REASONING_COUNT_H
#define KVLM_APP_REASONING_COUNT_H

#include <stddef.h>

#include "app/chat_template.h"
#include "app/harmony.h"
#include "app/reasoning.h"

typedef enum rc_format {
    RC_NONE = 0,    /* no reasoning: the count stays 0 */
    RC_THINK,       /* <think> ... </think> (Qwen3, DeepSeek-R1) */
    RC_HARMONY,     /* gpt-oss's analysis channel */
} rc_format;

/* The format of the replies to prompts rendered with tpl: harmony for a
 * template of that family, think tags when `think` (the template writes
 * <think>, or a server request's reasoning setting), none otherwise. The
 * one decision kvlm serve's counters and kvlm chat's splitter share. */
rc_format rc_format_of(const chat_template *tpl, int think);

typedef struct rc_counter {
    rc_format format;
    rs_split think;
    hm_parser *hm;
    int waiting;    /* tokens whose place is not known yet */
    int tokens;     /* reasoning tokens so far */
} rc_counter;

/* inside: the prompt opened the reasoning (think tags: rs_prompt_opens).
 * Returns 0, or -1 when out of memory (the counter then counts nothing). */
int rc_init(rc_counter *c, rc_format format, int inside);
/* One generated token's bytes (n may be 0). */
void rc_token(rc_counter *c, const char *piece, size_t n);
/* The reasoning tokens counted so far. */
int rc_tokens(const rc_counter *c);
void rc_free(rc_counter *c);

#endif
