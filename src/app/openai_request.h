/*
 * OpenAI-compatible request bodies, parsed and validated before anything
 * reaches the engine: /v1/completions, /v1/chat/completions, /tokenize and
 * /detokenize. Prompts come out as checked token ids (within the
 * vocabulary, leaving room in the context window for what was asked),
 * sampling fields as kvlm sampler options.
 *
 * Every rejection fills an api_error the way OpenAI reports one: HTTP
 * status, type, code, the parameter at fault and a message that names the
 * field, what it must be and what was given (never a JSON library's
 * words; a NUL in a string names the field). Unknown fields are rejected
 * (as OpenAI does). Fields of OpenAI's API that do not change what kvlm
 * generates are type-checked and ignored (user, store, metadata,
 * service_tier, reasoning_effort, parallel_tool_calls, prediction,
 * response_format text, modalities text, an empty tools list); integers
 * may be written with a zero fraction (10.0). A completion's `suffix`
 * makes its prompt a fill-in-the-middle prompt (infill_request.h), or a
 * 400 for a model without FIM tokens. Values kvlm cannot honour
 * (echo, best_of > n, tools when the chat template does not render
 * them) are rejected rather than ignored. response_format, grammar, regex,
 * tools and tool_choice are read by openai_structured.h. Chat messages are rendered
 * by the model's chat template (chat_template.h); a template's
 * raise_exception is a 400 with its message.
 */
#ifndef KVLM_APP_OPENAI_REQUEST_H
#define KVLM_APP_OPENAI_REQUEST_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "kvlm.h"
#include "app/chat_template.h"

typedef struct api_error {
    int status;           /* HTTP status */
    const char *type;     /* "invalid_request_error", "rate_limit_error", "server_error" */
    const char *code;     /* NULL or a short machine-readable code */
    char param[64];       /* the request field at fault, "" for none */
    char message[600];
} api_error;

/* 1 when s is one of the NULL-terminated list. */
int api_in_list(const char *s, const char *const *list);

/* Every key of object o in keys (NULL-terminated), else a 400
 * "unknown_parameter" naming param.key (param "" for the top level), its
 * message fmt with that name for its one %s. Returns 0 or -1. */
int api_only_keys(json_t *o, const char *const *keys, const char *param, const char *fmt, api_error *e);

/* Fills e; the type follows from the status. Returns -1. */
int api_fail(api_error *e, int status, const char *code, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* What requests are checked against. */
typedef struct api_limits {
    const kvlm_tokenizer *tok;  /* NULL: token-id prompts only */
    const chat_template *tpl;
    const char *model_name;
    int n_ctx, vocab, max_seqs, block_size, max_prompts;
    int has_draft;              /* a draft model is loaded ("kvlm_speculation" draft "model") */
    size_t kv_blocks;           /* blocks in the KV pool */
    uint64_t random_seed;       /* used when the request gives none */
    json_t *body;               /* the body already parsed and checked by api_load_body (the router of
                                   several models did it), or NULL: the parsers parse it */
} api_limits;

/* What the output must look like (openai_structured.h). */
typedef enum api_format {
    API_FORMAT_TEXT = 0,
    API_FORMAT_JSON_OBJECT,     /* response_format json_object */
    API_FORMAT_JSON_SCHEMA,     /* response_format json_schema: format_text is the schema */
    API_FORMAT_GRAMMAR,         /* kvlm's "grammar": GBNF text */
    API_FORMAT_REGEX,           /* kvlm's "regex" */
} api_format;

typedef enum api_shape {
    API_SHAPE_OPENAI = 0,       /* /v1/completions, /v1/chat/completions */
    API_SHAPE_ANTHROPIC,        /* /v1/messages */
    API_SHAPE_RESPONSES,        /* /v1/responses */
} api_shape;

typedef enum api_tool_choice {
    API_TOOLS_OFF = 0,          /* no tools, or tool_choice "none": nothing parsed */
    API_TOOLS_AUTO,             /* the model may call; its output is parsed */
    API_TOOLS_REQUIRED,         /* a call is forced (any of the tools) */
    API_TOOLS_NAMED,            /* a call of tool_name is forced */
} api_tool_choice;

typedef struct api_request {
    int chat, stream, include_usage;
    int n_prompts;              /* >= 1; completions may batch prompts */
    int32_t **prompts;
    int *n_prompt;
    int *max_new;               /* tokens to generate at most, per prompt */
    int n;                      /* choices per prompt */
    int ignore_eos;
    int token_ids;              /* return_tokens_as_token_ids: logprobs name tokens "token_id:N" */
    int logprobs;               /* 1: log-probabilities of the chosen tokens */
    int top_logprobs;           /* alternatives per token (0..20) */
    int kvlm_entropy;           /* each logprobs entry also gives the entropy of its distribution */
    int speculation_given;      /* "kvlm_speculation" was in the request (else the server's default) */
    kvlm_speculation speculation;
    char **stops;
    int n_stops;
    kvlm_sampler_options sampling;  /* logit_bias points into `bias` */
    kvlm_logit_bias *bias;
    int32_t turn_ends[CHAT_MAX_TURN_ENDS]; /* tokens ending an assistant turn */
    int n_turn_ends;
    api_format format;
    char *format_text;          /* NUL-terminated: schema JSON, GBNF or regex; NULL for text/json_object */
    size_t format_len;
    api_tool_choice tool_choice;
    char *tool_name;            /* API_TOOLS_NAMED: the function */
    char *tools_json;           /* the request's tools as compact JSON, when tool_choice is not OFF */
    int tool_family;            /* tc_family of the chat template (tool_calls.h) */
    int parse_calls;            /* the output is split into content and tool calls: tools
                                   with a tool_choice other than "none", and no
                                   response_format, grammar or regex (whose output is
                                   content by construction) */
    /* The API the request came in (Anthropic Messages and OpenAI Responses
     * are translated to a chat request: anthropic_request.h,
     * responses_request.h) and what their responses need. */
    api_shape shape;
    int reasoning;              /* the template reasons (reasoning.h): 1, 2 when the prompt opened it */
    int store;                  /* Responses: keep the response for previous_response_id */
    char *conversation;         /* Responses: the input turns as chat messages (compact JSON), without
                                   the instructions; the stored conversation continues from it */
    char *echo;                 /* Responses: request fields the response object repeats (JSON object) */
    int infill;                 /* POST /infill (infill_request.h): the response also carries llama.cpp's
                                   "content" */
} api_request;

int api_parse_completion(const char *body, size_t len, int chat, const api_limits *lim, api_request *rq,
                         api_error *e);
/* The same for a chat body already loaded (an object; the caller keeps
 * its reference): what the Anthropic and Responses translations call. */
int api_parse_chat_root(json_t *root, const api_limits *lim, api_request *rq, api_error *e);
/* The same for a /v1/completions body (what /infill's translation calls). */
int api_parse_completion_root(json_t *root, const api_limits *lim, api_request *rq, api_error *e);
/* A body loaded and checked as api_parse_completion checks it first
 * (non-empty, UTF-8, JSON, an object, no NUL in a string); NULL with e
 * filled. */
json_t *api_load_body(const char *body, size_t len, const api_limits *lim, api_error *e);
void api_request_free(api_request *rq);

/* /tokenize: {"prompt": text} or {"messages": [...]}, optional
 * "add_special_tokens" (default true: encoded as a completion prompt,
 * special tokens matched and BOS added when the model's files ask; false:
 * the text alone) and "add_generation_prompt" (default true). *ids is
 * malloc'ed. */
int api_parse_tokenize(const char *body, size_t len, const api_limits *lim, int32_t **ids, size_t *n,
                       api_error *e);
/* A JSON object body with the checks every endpoint makes: well-formed,
 * an object, no key outside `keys` (NULL-terminated), "model" (if given)
 * this server's. NULL with e filled. */
json_t *api_parse_object(const char *body, size_t len, const char *const *keys, const api_limits *lim, api_error *e);
/* The token ids of root's "prompt" (text) or "messages" (rendered by the
 * chat template, with the generation prompt when gen), encoded as
 * /tokenize encodes them (special: add_special_tokens). *ids is malloc'ed. */
int api_prompt_ids(json_t *root, const api_limits *lim, int special, int gen, int32_t **ids, size_t *n,
                   api_error *e);
/* /detokenize: {"tokens": [ids]}. *ids is malloc'ed. */
int api_parse_detokenize(const char *body, size_t len, const api_limits *lim, int32_t **ids, size_t *n,
                         api_error *e);

#endif
