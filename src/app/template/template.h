/*
 * A Jinja interpreter for chat templates: the subset of jinja2 that the
 * templates models ship use, configured as Hugging Face transformers'
 * apply_chat_template configures jinja2 (trim_blocks, lstrip_blocks, loop
 * controls, an immutable sandbox, raise_exception, strftime_now and a tojson
 * filter that is json.dumps with ensure_ascii=False). docs/chat-templates.md
 * lists what is supported and how it was checked against jinja2.
 *
 * Parsing is all-or-nothing: a template the interpreter cannot parse is an
 * error naming its line and column. Rendering takes the variables as a JSON
 * object (messages, add_generation_prompt, bos_token, tools...) and is
 * bounded by tpl_limits: output bytes, memory, loop iterations and call or
 * nesting depth, each failing with a clear message, never an abort.
 *
 * Depends on the base layer (kvlm_error) and jansson only.
 */
#ifndef KVLM_TEMPLATE_TEMPLATE_H
#define KVLM_TEMPLATE_TEMPLATE_H

#include <jansson.h>
#include <stddef.h>

#include "kvlm.h"

typedef struct tpl_template tpl_template;

typedef struct tpl_limits {
    size_t max_output;    /* bytes of rendered text (0: 4 MiB) */
    size_t max_memory;    /* bytes of values made while rendering (0: 64 MiB) */
    long max_iterations;  /* for-loop iterations in one render, all loops (0: 1000000) */
    int max_depth;        /* macro calls nested plus expression nesting (0: 200) */
} tpl_limits;

/* Parses a template (UTF-8, n bytes). NULL with err naming
 * "line L, column C" when it cannot be parsed. */
tpl_template *tpl_parse(const char *src, size_t n, kvlm_error *err);
void tpl_free(tpl_template *t);

typedef struct tpl_render_opts {
    const tpl_limits *limits; /* NULL: the defaults above */
    long long now;            /* seconds since the epoch (UTC) strftime_now formats; <0: the clock */
} tpl_render_opts;

typedef struct tpl_result {
    char *text; /* malloc'ed, NUL-terminated; NULL on error */
    size_t len;
    int raised; /* the error came from the template's raise_exception(msg):
                   err.msg is exactly msg */
    kvlm_error err;
} tpl_result;

/* Renders t with vars (a JSON object: each key a variable). Returns 0 with
 * r->text set, or -1 with r->err (and r->raised) set. */
int tpl_render(const tpl_template *t, const json_t *vars, const tpl_render_opts *o, tpl_result *r);
void tpl_result_free(tpl_result *r);

#endif
