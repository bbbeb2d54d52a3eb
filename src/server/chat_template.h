/*
 * Chat prompts: a list of messages rendered into the text the model
 * continues. kvlm does not run Jinja. A model's tokenizer_config.json
 * `chat_template` is inspected only to recognise two well-known formats,
 * ChatML and Llama 3, which are then rendered by hand; any other model
 * (GPT-2 has no template) uses the documented plain template:
 *
 *   plain    "{role}: {content}\n" per message, then "assistant:"
 *   chatml   "<|im_start|>{role}\n{content}<|im_end|>\n" per message,
 *            then "<|im_start|>assistant\n"
 *   llama3   "<|begin_of_text|>" then
 *            "<|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>"
 *            per message, then the assistant header
 *
 * The marked formats end an assistant turn with a special token
 * (<|im_end|>, <|eot_id|>), which then ends the choice like end-of-text.
 */
#ifndef KVLM_SERVER_CHAT_TEMPLATE_H
#define KVLM_SERVER_CHAT_TEMPLATE_H

#include "kvlm.h"
#include "server/sbuf.h"

typedef enum chat_format { CHAT_PLAIN = 0, CHAT_CHATML, CHAT_LLAMA3 } chat_format;

typedef struct chat_template {
    chat_format format;
    char origin[160];   /* where the choice came from, for the start-up line */
} chat_template;

typedef struct chat_message {
    const char *role;
    const char *content;
    size_t content_len;
} chat_message;

/* Chooses the template: `name` (plain, chatml, llama3, or NULL/"auto" to
 * inspect model_dir/tokenizer_config.json). Returns 0 or -1 with err set. */
int chat_template_load(chat_template *t, const char *model_dir, const char *name, kvlm_error *err);
const char *chat_format_name(chat_format f);
/* Appends the rendered conversation (with the assistant's opening when
 * add_generation_prompt) to out. */
void chat_render(const chat_template *t, const chat_message *msgs, int n, int add_generation_prompt, sbuf *out);
/* The special token text that ends an assistant turn, or NULL (plain). */
const char *chat_turn_end(const chat_template *t);
/* 1 if the rendered text must be tokenised with special tokens matched. */
int chat_uses_special(const chat_template *t);

#endif
