/*
 * A reply of `kvlm chat` as it streams: split into reasoning and the
 * answer with the splitters kvlm serve uses (app/reasoning.h for
 * templates that write <think>...</think>, app/harmony.h for gpt-oss's
 * channels; any other template's reply is all answer, byte for byte), shown
 * as it arrives and collected for the conversation.
 *
 * Shown: the answer as it is (tinted per token with --color); the
 * reasoning, when shown, after a "[reasoning] " label, dimmed on a colour
 * terminal, and the answer after it on a new line ("[answer] " before it
 * when the output is not dimmed, so plain output says where it starts). A
 * harmony tool call (a message to functions.NAME) is never answer text: it
 * is shown with the reasoning as "[tool call NAME] ARGUMENTS" and
 * counted; kvlm chat runs no tools. Hidden reasoning and calls print
 * nothing. Nothing here writes the reply's closing newline.
 */
#ifndef KVLM_CLI_CHAT_REPLY_H
#define KVLM_CLI_CHAT_REPLY_H

#include <stddef.h>
#include <stdio.h>

#include "app/chat_template.h"
#include "app/harmony.h"
#include "app/reasoning.h"
#include "app/reasoning_count.h"
#include "app/sbuf.h"

typedef struct chat_reply {
    rc_format split;            /* how the reply is split (rc_format_of) */
    rs_split rs;                /* RC_THINK */
    hm_parser *hm;              /* RC_HARMONY */
    FILE *out;                  /* where it is shown; NULL: nowhere (--json) */
    int show;                   /* reasoning and calls are shown */
    int dim;                    /* the reasoning is dimmed (a colour terminal) */
    int tint;                   /* the answer is tinted per token (--color) */
    int section;                /* chat_reply.c's: what the output shows last */
    int dimmed;                 /* the output is dimmed now (ended by chat_reply_end at the latest) */
    float logprob;              /* the token being fed */
    sbuf answer, reasoning;     /* the whole reply, split */
    int n_calls;                /* harmony tool calls the model wrote */
    int failed;                 /* out of memory */
} chat_reply;

/* How replies to prompts rendered with tpl are split. */
rc_format chat_reply_split(const chat_template *tpl);
/* The generate.h special_text filter the split needs (NULL: none). */
typedef int (*chat_special_fn)(const char *piece, size_t n);
chat_special_fn chat_reply_special_text(rc_format split);
/* Starts a reply to the rendered prompt (its last text tells whether the
 * reasoning is open already). Returns 0 or -1 when memory runs out. */
int chat_reply_begin(chat_reply *r, rc_format split, const char *prompt, size_t prompt_len, FILE *out, int show,
                     int dim, int tint);
/* Text the model released, with its token's log-probability (NaN: none). */
void chat_reply_feed(chat_reply *r, const char *text, size_t n, float logprob);
/* The reply has ended (or was stopped): releases what was withheld. */
void chat_reply_end(chat_reply *r);
void chat_reply_free(chat_reply *r);

#endif
