/*
 * The slash commands of `kvlm chat` (/help, /reset, /system, /stats,
 * /save, /load, /model, /models, /reasoning, /quit) and the figures /stats shows of the last reply. A line
 * that starts with '/' is a command; anything else is a message.
 */
#ifndef KVLM_CLI_CHAT_COMMANDS_H
#define KVLM_CLI_CHAT_COMMANDS_H

#include <stddef.h>
#include <stdio.h>

#include "cli/chat_conversation.h"
#include "cli/generate.h"
#include "kvlm.h"

/* The last reply, as /stats prints it. */
typedef struct chat_reply_stats {
    int valid;                  /* a reply has run */
    int prompt_tokens, cached_tokens, generated;
    kvlm_finish finish;
    double ttft_ms, tpot_ms, tokens_per_s;
    kvlm_kv_stats kv;           /* the KV cache at the reply's last token */
} chat_reply_stats;

typedef struct chat_state {
    chat_conv conv;
    chat_reply_stats last;
    FILE *info;                 /* command output: the terminal, or stderr when scripted */
    int color;                  /* replies are tinted (the /help legend is shown) */
    int dim;                    /* the output is a colour terminal: reasoning is dimmed */
    int reasoning;              /* a reasoning model's reasoning is shown (/reasoning) */
    kvlm_dtype kv_dtype;
    int block_size;
    int quit;                   /* /quit was given */
    /* what /save and /load work with */
    kvlm_kv *kv;
    const kvlm_model *m;
    const char *template_origin;  /* the chat template in use (chat_template.origin) */
    int32_t *ids;               /* the last prompt and its reply (or the tokens /load restored), or NULL */
    int n_ids;
    struct chat_models *models; /* what /model and /models switch between (cli/chat_models.h) */
} chat_state;

/* Forgets st->ids (the conversation changed). */
void chat_state_forget_ids(chat_state *st);

/* Runs the command in line (which starts with '/'). Returns 0, or -1 when
 * it failed (the reason printed on info); unknown commands fail. */
int chat_command(chat_state *st, const char *line);
/* The /help text. */
void chat_help(const chat_state *st, FILE *f);
/* Fills the /stats figures from a finished reply. */
void chat_stats_record(chat_reply_stats *s, int prompt_tokens, const gen_result *g);

#endif
