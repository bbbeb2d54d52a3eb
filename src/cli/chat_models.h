/*
 * The models of `kvlm chat`: the one a turn uses (its session, chat
 * template, KV cache and engine), opened from the model flags, and the
 * switch /model makes between the models given (-m repeated,
 * --models-dir: cli/model_list.h). One model is loaded at a time: a switch
 * opens the new one first (a failure keeps the old one) and then frees
 * the old one with its KV; the conversation's messages stay and are
 * rendered with the new model's template, so the next reply prefills the
 * whole conversation again.
 */
#ifndef KVLM_CLI_CHAT_MODELS_H
#define KVLM_CLI_CHAT_MODELS_H

#include <stdint.h>

#include "app/chat_template.h"
#include "cli/chat_commands.h"
#include "cli/model_list.h"
#include "cli/options.h"
#include "cli/session.h"
#include "kvlm.h"

/* Everything a turn needs besides the conversation. */
typedef struct chat_engine {
    cli_session ss;
    const kvlm_config *c;
    const kvlm_tokenizer *tok;
    chat_template tpl;
    kvlm_kv *kv;
    kvlm_engine *e;
    int32_t ends[KVLM_MAX_EOS + 1 + CHAT_MAX_TURN_ENDS]; /* the model's eos ids and the template's ends of turn */
    int n_ends;
    int open;
} chat_engine;

/* The KV cache's tiers of every model of a chat (docs/kv-tiers.md): dir
 * NULL for no disk tier, 0 bytes for the defaults / no memory tier. Each
 * model's blocks carry its own fingerprint, so the models share dir. */
typedef struct chat_kv_tiers {
    const char *dir;
    size_t disk_bytes, ram_bytes;
} chat_kv_tiers;

/* Opens the model mf names with the chat template `tpl_name` (NULL: the
 * model's own) and the KV tiers `tiers` (NULL: none). Returns 0, or the exit status a failure calls for (1, or 2
 * for a usage error) after printing the reason as "kvlm chat: ...".
 * chat_engine_close is safe after a failed open. */
int chat_engine_open(chat_engine *ce, const model_flags *mf, const char *tpl_name, const chat_kv_tiers *tiers);
void chat_engine_close(chat_engine *ce);
/* The end ids of a reply: the model's eos ids and the template's
 * turn_ends[0 .. n_turn_ends). */
void chat_engine_set_ends(chat_engine *ce, const int32_t *turn_ends, int n_turn_ends);

/* The models /model switches between. */
typedef struct chat_models {
    const model_list *list;   /* the models given, in order */
    model_flags mf;           /* the flags every model shares (mf.model: the one in use) */
    const char *tpl_name;     /* --chat-template, for every model */
    chat_kv_tiers tiers;      /* --kv-cache-dir and its bounds, for every model */
    chat_engine slot[2];      /* the engine in use and room for the next */
    int cur;                  /* slot in use */
    int index;                /* the model in use in list */
} chat_models;

static inline chat_engine *chat_models_engine(chat_models *cm) { return &cm->slot[cm->cur]; }

/* /model NAME: switches st's conversation to the model named NAME (its
 * alias or file name, model_list_name); an unknown name lists the known
 * ones. Prints what it did on st->info. Returns 0 or -1 (the model in use
 * stays). */
int chat_models_switch(chat_models *cm, chat_state *st, const char *name);
/* /models: the models, the one in use marked. */
void chat_models_print(const chat_models *cm, FILE *f);

#endif
