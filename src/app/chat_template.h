/*
 * Chat prompts: a list of messages rendered into the text the model
 * continues, with the model's own Jinja chat template run by kvlm's
 * interpreter (src/app/template/, docs/chat-templates.md).
 *
 * Where the template comes from, first found wins:
 *   --chat-template FILE   a Jinja file (or a tokenizer_config.json whose
 *                          chat_template is taken)
 *   --chat-template plain  the plain template below, whatever the files say
 *   a GGUF model           its tokenizer.chat_template metadata (and
 *                          tokenizer.chat_template.tool_use)
 *   a model directory      chat_template.jinja, else tokenizer_config.json's
 *                          chat_template: a string, or a list of
 *                          {name, template} of which "default" is used, and
 *                          "tool_use" for requests with tools
 *   nothing                plain: "{role}: {content}\n" per message, then
 *                          "assistant:" (GPT-2 and other models with no
 *                          template); the start-up line says so
 * bos_token and eos_token given to the template are tokenizer_config.json's
 * (a string or an object with "content"), or the GGUF vocabulary's tokens
 * at tokenizer.ggml.bos/eos_token_id. A template that does not parse is an
 * error at load time naming the file, line and column.
 */
#ifndef KVLM_APP_CHAT_TEMPLATE_H
#define KVLM_APP_CHAT_TEMPLATE_H

#include <jansson.h>

#include "kvlm.h"
#include "app/sbuf.h"
#include "app/template/template.h"

#define CHAT_MAX_TURN_ENDS 4

typedef struct chat_template {
    tpl_template *main;     /* NULL: the plain template */
    tpl_template *tool_use; /* the "tool_use" template, or NULL */
    int renders_tools;      /* a template's source mentions `tools` */
    int tool_family;        /* tc_family of the tool-rendering template (tool_calls.h) */
    char bos[64], eos[64];  /* token strings given to the template */
    const char *turn_ends[CHAT_MAX_TURN_ENDS]; /* special tokens ending an assistant turn */
    int n_turn_ends;
    int reasons;            /* a template's source writes </think> (reasoning.h) */
    char origin[400];       /* which template, from where: for the start-up line */
} chat_template;

/* Chooses and parses the template: `name` is NULL or "auto" (the model's
 * files), "plain", or a file. model_dir: the model's directory;
 * tokenizer_path: kvlm_model_tokenizer_path (a .gguf file for GGUF
 * models). Returns 0 or -1 with err set (KVLM_ERR_ARG for a bad
 * --chat-template, KVLM_ERR_FORMAT for a template that does not parse). */
int chat_template_load(chat_template *t, const char *model_dir, const char *tokenizer_path, const char *name,
                       kvlm_error *err);
void chat_template_free(chat_template *t);

/* Renders messages (a JSON array of objects with role, content and, where
 * present, name, tool_calls, tool_call_id) and tools (NULL or a JSON array)
 * with the assistant's opening when add_generation_prompt, appending to
 * out. Returns 0, or -1 with msg filled; *raised is 1 when the template
 * itself refused the conversation (raise_exception): msg is then its
 * message, word for word. */
int chat_render(const chat_template *t, json_t *messages, json_t *tools, int add_generation_prompt, sbuf *out,
                char *msg, size_t msg_size, int *raised);
/* chat_render with further template variables (NULL: none), as
 * transformers passes apply_chat_template's keyword arguments (e.g.
 * enable_thinking): a JSON object whose names must not be one of
 * chat_reserved_var's. */
int chat_render_vars(const chat_template *t, json_t *messages, json_t *tools, json_t *extra, int add_generation_prompt,
                     sbuf *out, char *msg, size_t msg_size, int *raised);
/* 1 if name is a variable the renderer itself sets (messages, tools,
 * add_generation_prompt, bos_token, eos_token, documents). */
int chat_reserved_var(const char *name);
/* The special tokens' texts that end an assistant turn: the count, the
 * texts in ends[0 .. count) (at most CHAT_MAX_TURN_ENDS). Harmony ends it
 * at <|return|> (an answer) and at <|call|> (a tool call). */
int chat_turn_ends(const chat_template *t, const char *ends[CHAT_MAX_TURN_ENDS]);
/* 1 if the rendered text must be tokenised with special tokens matched
 * (a Jinja template writes them; the plain template never does). */
int chat_uses_special(const chat_template *t);
/* 1 if a request's `tools` can be rendered. */
int chat_renders_tools(const chat_template *t);

#endif
