/*
 * Parsing and validating OpenAI-style request bodies (see openai_request.h).
 *
 * Order of checks: the body is well-formed UTF-8, then JSON, then an
 * object; every key is known; the model is ours; each field has its type
 * and range; prompts are tokenised and must leave room for the completion
 * in the context window and in the KV pool. The first failure wins.
 */
#include "app/openai_request.h"

#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/json_text.h"
#include "app/infill_request.h"
#include "app/openai_structured.h"
#include "app/reasoning.h"
#include "app/tool_calls.h"
#include "app/sbuf.h"

#define MAX_STOPS 16
#define MAX_STOP_BYTES 1024
#define MAX_TOP_LOGPROBS 20

int api_fail(api_error *e, int status, const char *code, const char *param, const char *fmt, ...) {
    e->status = status;
    e->type = status == 429 ? "rate_limit_error" : status >= 500 ? "server_error" : "invalid_request_error";
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

/* jansson's reason for a body it cannot load, in this API's words (its
 * own text may name its flags, e.g. JSON_ALLOW_NUL). */
static const char *json_reason(const json_error_t *je) {
    switch (json_error_code(je)) {
    case json_error_premature_end_of_input: return "it ends before the JSON value is complete";
    case json_error_end_of_input_expected: return "there is more text after the JSON value";
    case json_error_stack_overflow: return "it is nested too deeply";
    case json_error_null_character: return "a string contains a NUL character (\\u0000)";
    case json_error_null_byte_in_key: return "a key contains a NUL character (\\u0000)";
    case json_error_duplicate_key: return "an object has the same key twice";
    case json_error_numeric_overflow: return "a number is too large";
    case json_error_invalid_utf8: return "it is not valid UTF-8";
    default: return "invalid syntax";
    }
}

/* The first string value holding a NUL byte, its path written to path
 * (e.g. "messages[0].content"); 1 if found. */
static int find_nul(json_t *v, char *path, size_t cap, size_t at) {
    if (at >= cap) return 0;
    if (json_is_string(v)) return strlen(json_string_value(v)) != json_string_length(v);
    if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) {
            snprintf(path + at, cap - at, "[%zu]", i);
            if (find_nul(x, path, cap, strlen(path))) return 1;
        }
    } else if (json_is_object(v)) {
        const char *key;
        json_t *x;
        json_object_foreach(v, key, x) {
            snprintf(path + at, cap - at, "%s%.40s", at ? "." : "", key);
            if (find_nul(x, path, cap, strlen(path))) return 1;
        }
    }
    path[at] = 0;
    return 0;
}

static json_t *parse_body(const char *body, size_t len, const api_limits *lim, api_error *e) {
    if (lim && lim->body) return json_incref(lim->body);
    if (len == 0) {
        api_fail(e, 400, "invalid_json", NULL, "the request body is empty; expected a JSON object");
        return NULL;
    }
    if (!ts_utf8_valid(body, len)) {
        api_fail(e, 400, "invalid_utf8", NULL, "the request body is not valid UTF-8");
        return NULL;
    }
    json_error_t je;
    /* NUL is let through the loader so the message can name the field */
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (!root) {
        if (json_error_code(&je) == json_error_out_of_memory)
            api_fail(e, 500, NULL, NULL, "out of memory");
        else
            api_fail(e, 400, "invalid_json", NULL, "the request body is not valid JSON: %s (line %d, column %d)",
                     json_reason(&je), je.line, je.column);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        api_fail(e, 400, "invalid_json", NULL, "the request body must be a JSON object");
        return NULL;
    }
    char path[64] = "";
    if (find_nul(root, path, sizeof path, 0)) {
        json_decref(root);
        api_fail(e, 400, "invalid_value", path, "'%s' contains a NUL character (\\u0000), which is not accepted",
                 path);
        return NULL;
    }
    return root;
}

int api_in_list(const char *s, const char *const *list) {
    for (; *list; list++)
        if (!strcmp(s, *list)) return 1;
    return 0;
}

int api_only_keys(json_t *o, const char *const *keys, const char *param, const char *fmt, api_error *e) {
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) if (!api_in_list(key, keys)) {
        char p[224];
        snprintf(p, sizeof p, "%s%s%.40s", param, *param ? "." : "", key);
        return api_fail(e, 400, "unknown_parameter", p, fmt, p);
    }
    return 0;
}

/* Every key must be known; the model, when given, must be ours. */
static int check_keys(json_t *root, const char *const *known, const api_limits *lim, api_error *e) {
    const char *key;
    json_t *v;
    static const char *const unsupported[] = {"functions", "function_call", "audio", "web_search_options", NULL};
    json_object_foreach(root, key, v) {
        if (api_in_list(key, unsupported)) {
            if (json_is_null(v)) continue;
            return api_fail(e, 400, "unsupported_parameter", key, "'%s' is not supported by this server", key);
        }
        if (!api_in_list(key, known))
            return api_fail(e, 400, "unknown_parameter", key, "Unrecognized request argument supplied: %s", key);
    }
    json_t *m = json_object_get(root, "model");
    if (m && !json_is_null(m)) {
        if (!json_is_string(m)) return api_fail(e, 400, "invalid_type", "model", "'model' must be a string");
        if (strcmp(json_string_value(m), lim->model_name))
            return api_fail(e, 404, "model_not_found", "model",
                            "The model '%s' does not exist; this server serves '%s'", json_string_value(m),
                            lim->model_name);
    }
    return 0;
}

/* Number, integer and boolean fields: absent or null keeps the default. */
static int get_num(json_t *root, const char *key, double lo, double hi, float *out, api_error *e) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return api_fail(e, 400, "invalid_type", key, "'%s' must be a number", key);
    double x = json_number_value(v);
    if (x < lo || x > hi)
        return api_fail(e, 400, "invalid_value", key, "'%s' must be between %g and %g, got %g", key, lo, hi, x);
    *out = (float)x;
    return 0;
}

/* An integer, or a number written with a zero fraction (10.0), as some
 * clients serialise every number as a float. */
static int get_int(json_t *root, const char *key, long long lo, long long hi, long long *out, api_error *e) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return 0;
    long long x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_real(v)) {
        double d = json_real_value(v);
        if (d < -9.2e18 || d > 9.2e18 || d != (double)(long long)d)
            return api_fail(e, 400, "invalid_type", key, "'%s' must be an integer, got %.17g", key, d);
        x = (long long)d;
    } else {
        return api_fail(e, 400, "invalid_type", key, "'%s' must be an integer", key);
    }
    if (x < lo || x > hi)
        return api_fail(e, 400, "invalid_value", key, "'%s' must be between %lld and %lld, got %lld", key, lo, hi,
                        x);
    *out = x;
    return 0;
}

static int get_bool(json_t *root, const char *key, int *out, api_error *e) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return api_fail(e, 400, "invalid_type", key, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return 0;
}

/* ------------------------------------------------ fields accepted, ignored */

static int is_one_of(json_t *v, const char *const *list) {
    return json_is_string(v) && api_in_list(json_string_value(v), list);
}

/* Fields of OpenAI's API that do not change what kvlm generates are
 * accepted (type-checked) and ignored: user, prompt_cache_key (a load
 * balancer may route on it: docs/deploy.md), store, metadata,
 * service_tier, reasoning_effort, parallel_tool_calls, prediction (a
 * latency hint), modalities text. Values that would change the output and
 * that kvlm cannot honour are rejected, naming the field and why. */
static int check_ignored(json_t *root, int chat, api_error *e) {
    json_t *v;
    if ((v = json_object_get(root, "user")) && !json_is_null(v) && !json_is_string(v))
        return api_fail(e, 400, "invalid_type", "user", "'user' must be a string");
    if ((v = json_object_get(root, "prompt_cache_key")) && !json_is_null(v) && !json_is_string(v))
        return api_fail(e, 400, "invalid_type", "prompt_cache_key", "'prompt_cache_key' must be a string");
    if ((v = json_object_get(root, "store")) && !json_is_null(v) && !json_is_boolean(v))
        return api_fail(e, 400, "invalid_type", "store", "'store' must be a boolean");
    if ((v = json_object_get(root, "service_tier")) && !json_is_null(v) && !json_is_string(v))
        return api_fail(e, 400, "invalid_type", "service_tier", "'service_tier' must be a string");
    if ((v = json_object_get(root, "metadata")) && !json_is_null(v)) {
        const char *key;
        json_t *x;
        if (!json_is_object(v))
            return api_fail(e, 400, "invalid_type", "metadata", "'metadata' must be an object of strings");
        json_object_foreach(v, key, x) if (!json_is_string(x))
            return api_fail(e, 400, "invalid_type", "metadata", "'metadata' must be an object of strings; "
                            "'%.40s' is not a string", key);
    }
    if (!chat) return 0;
    static const char *const efforts[] = {"none", "minimal", "low", "medium", "high", "xhigh", NULL};
    if ((v = json_object_get(root, "reasoning_effort")) && !json_is_null(v) && !is_one_of(v, efforts))
        return api_fail(e, 400, "invalid_value", "reasoning_effort",
                        "'reasoning_effort' must be one of none, minimal, low, medium, high, xhigh");
    if ((v = json_object_get(root, "parallel_tool_calls")) && !json_is_null(v) && !json_is_boolean(v))
        return api_fail(e, 400, "invalid_type", "parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
    if ((v = json_object_get(root, "prediction")) && !json_is_null(v)) {
        json_t *c = json_object_get(v, "content");
        const char *type = json_string_value(json_object_get(v, "type"));
        if (!json_is_object(v) || !type || strcmp(type, "content") || !(json_is_string(c) || json_is_array(c)))
            return api_fail(e, 400, "invalid_type", "prediction",
                            "'prediction' must be {\"type\": \"content\", \"content\": a string or a list of text "
                            "parts}");
    }
    if ((v = json_object_get(root, "modalities")) && !json_is_null(v)) {
        if (!json_is_array(v))
            return api_fail(e, 400, "invalid_type", "modalities", "'modalities' must be a list of strings");
        static const char *const text[] = {"text", NULL};
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) if (!is_one_of(x, text))
            return api_fail(e, 400, "unsupported_parameter", "modalities",
                            "'modalities' may only list \"text\": this server generates text only");
    }
    return 0;
}

/* "tools": NULL when absent, null or an empty list (nothing to render). */
static json_t *request_tools(json_t *root) {
    json_t *t = json_object_get(root, "tools");
    return !t || json_is_null(t) || (json_is_array(t) && json_array_size(t) == 0) ? NULL : t;
}

/* ---------------------------------------------------------------- prompts */

static int encode(const api_limits *lim, const char *text, size_t len, int allow_special, const char *param,
                  int32_t **ids, int *n, api_error *e) {
    if (!lim->tok)
        return api_fail(e, 400, "no_tokenizer", param,
                        "this model has no tokenizer: send the prompt as an array of token ids");
    size_t n_ids = 0;
    kvlm_error err;
    /* BOS when the model's files ask for it, not doubled after a template's */
    if (kvlm_tokenizer_encode_prompt(lim->tok, text, len, allow_special, ids, &n_ids, &err))
        return api_fail(e, 400, "invalid_prompt", param, "%s", err.msg);
    if (n_ids == 0) { /* an empty prompt starts a new document, as OpenAI does */
        int32_t eos = kvlm_tokenizer_eos_id(lim->tok);
        free(*ids);
        if (eos < 0 || eos >= lim->vocab || !(*ids = malloc(sizeof **ids)))
            return api_fail(e, 400, "invalid_prompt", param, "the prompt is empty");
        (*ids)[0] = eos;
        n_ids = 1;
    }
    for (size_t i = 0; i < n_ids; i++)
        if ((*ids)[i] >= lim->vocab)
            return api_fail(e, 400, "invalid_token", param,
                            "the prompt's token %d is outside the model's vocabulary [0, %d)", (*ids)[i], lim->vocab);
    if (n_ids > (size_t)INT32_MAX) return api_fail(e, 400, "context_length_exceeded", param, "the prompt is too long");
    *n = (int)n_ids;
    return 0;
}

static int token_array(const api_limits *lim, json_t *arr, const char *param, int32_t **ids, int *n, api_error *e) {
    size_t k = json_array_size(arr);
    if (k == 0) return api_fail(e, 400, "invalid_prompt", param, "'%s' is an empty list of tokens", param);
    if (k >= (size_t)lim->n_ctx)
        return api_fail(e, 400, "context_length_exceeded", param,
                        "the prompt has %zu tokens; this model's context window is %d tokens, so a prompt may have "
                        "at most %d",
                        k, lim->n_ctx, lim->n_ctx - 1);
    *ids = malloc(k * sizeof **ids);
    if (!*ids) return api_fail(e, 500, NULL, NULL, "out of memory");
    for (size_t i = 0; i < k; i++) {
        json_t *t = json_array_get(arr, i);
        if (!json_is_integer(t))
            return api_fail(e, 400, "invalid_type", param, "'%s' must be a string, a list of strings, a list of "
                            "token ids or a list of lists of token ids", param);
        json_int_t id = json_integer_value(t);
        if (id < 0 || id >= lim->vocab)
            return api_fail(e, 400, "invalid_token", param, "token id %lld is outside the vocabulary [0, %d)",
                            (long long)id, lim->vocab);
        (*ids)[i] = (int32_t)id;
    }
    *n = (int)k;
    return 0;
}

static int alloc_prompts(api_request *rq, int n, api_error *e) {
    rq->prompts = calloc((size_t)n, sizeof *rq->prompts);
    rq->n_prompt = calloc((size_t)n, sizeof *rq->n_prompt);
    rq->max_new = calloc((size_t)n, sizeof *rq->max_new);
    if (!rq->prompts || !rq->n_prompt || !rq->max_new) return api_fail(e, 500, NULL, NULL, "out of memory");
    rq->n_prompts = n;
    return 0;
}

/* "prompt": a string, a list of strings, a list of ids, a list of lists of ids. */
static int parse_prompt(json_t *root, const api_limits *lim, api_request *rq, api_error *e) {
    json_t *p = json_object_get(root, "prompt");
    if (!p || json_is_null(p)) return api_fail(e, 400, "missing_parameter", "prompt", "'prompt' is required");
    json_t *suffix = json_object_get(root, "suffix");
    if (json_is_string(suffix) && json_string_length(suffix)) { /* fill in the middle */
        if (!json_is_string(p))
            return api_fail(e, 400, "invalid_type", "prompt", "with 'suffix', 'prompt' must be a string");
        fim_input in = {.prefix = json_string_value(p), .prefix_len = json_string_length(p),
                        .suffix = json_string_value(suffix), .suffix_len = json_string_length(suffix)};
        if (alloc_prompts(rq, 1, e)) return -1;
        return fim_assemble(lim->tok, &in, fim_room(root, lim), 0, &rq->prompts[0], &rq->n_prompt[0], e);
    }
    if (json_is_string(p)) {
        if (alloc_prompts(rq, 1, e)) return -1;
        return encode(lim, json_string_value(p), json_string_length(p), 1, "prompt", &rq->prompts[0],
                      &rq->n_prompt[0], e);
    }
    if (!json_is_array(p) || json_array_size(p) == 0)
        return api_fail(e, 400, json_is_array(p) ? "invalid_prompt" : "invalid_type", "prompt",
                        "'prompt' must be a string, a list of strings, a list of token ids or a list of lists of "
                        "token ids%s", json_is_array(p) ? " (not an empty list)" : "");
    json_t *first = json_array_get(p, 0);
    if (json_is_integer(first)) {
        if (alloc_prompts(rq, 1, e)) return -1;
        return token_array(lim, p, "prompt", &rq->prompts[0], &rq->n_prompt[0], e);
    }
    size_t k = json_array_size(p);
    if (k > (size_t)lim->max_prompts)
        return api_fail(e, 400, "invalid_prompt", "prompt", "%zu prompts in one request; at most %d", k,
                        lim->max_prompts);
    if (alloc_prompts(rq, (int)k, e)) return -1;
    for (size_t i = 0; i < k; i++) {
        json_t *x = json_array_get(p, i);
        int rc;
        if (json_is_string(x) && json_is_string(first))
            rc = encode(lim, json_string_value(x), json_string_length(x), 1, "prompt", &rq->prompts[i],
                        &rq->n_prompt[i], e);
        else if (json_is_array(x) && json_is_array(first))
            rc = token_array(lim, x, "prompt", &rq->prompts[i], &rq->n_prompt[i], e);
        else
            rc = api_fail(e, 400, "invalid_type", "prompt", "'prompt' must be a string, a list of strings, a list "
                          "of token ids or a list of lists of token ids (not a mixture)");
        if (rc) return rc;
    }
    return 0;
}

/* One message's content: a string, null (an assistant turn), or a list of
 * {"type": "text", "text": ...} parts, joined with newlines. */
static int message_content(json_t *c, const char *role, const char *param, sbuf *out, api_error *e) {
    if (json_is_string(c)) {
        sbuf_add(out, json_string_value(c), json_string_length(c));
        return 0;
    }
    if (json_is_null(c) && !strcmp(role, "assistant")) return 0;
    if (!json_is_array(c))
        return api_fail(e, 400, "invalid_type", param, "'%s' must be a string or a list of text parts", param);
    size_t i;
    json_t *part;
    json_array_foreach(c, i, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        json_t *text = json_object_get(part, "text");
        if (!type || strcmp(type, "text") || !json_is_string(text))
            return api_fail(e, 400, "unsupported_content", param,
                            "'%s[%zu]' must be {\"type\": \"text\", \"text\": string}; other parts are not supported",
                            param, i);
        if (i) sbuf_adds(out, "\n");
        sbuf_add(out, json_string_value(text), json_string_length(text));
    }
    return 0;
}

/* One assistant message's tool_calls: a list of {id, type: "function",
 * function: {name, arguments}}. arguments, a JSON string in OpenAI's API,
 * is given to the template as the object it encodes (as transformers'
 * templates expect) when it is one. Returns the copy or NULL (e set). */
static json_t *tool_calls(json_t *tc, const char *param, api_error *e) {
    if (!json_is_array(tc)) return api_fail(e, 400, "invalid_type", param, "'%s' must be a list", param), NULL;
    json_t *out = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(tc, i, c) {
        json_t *f = json_object_get(c, "function");
        json_t *name = json_object_get(f, "name"), *args = json_object_get(f, "arguments");
        if (!json_is_object(c) || !json_is_string(name) || (args && !json_is_string(args) && !json_is_object(args))) {
            api_fail(e, 400, "invalid_type", param,
                     "'%s[%zu]' must be {\"id\", \"type\": \"function\", \"function\": {\"name\": string, "
                     "\"arguments\": string}}", param, i);
            json_decref(out);
            return NULL;
        }
        json_t *fn = json_pack("{sO}", "name", name), *parsed = NULL;
        if (json_is_string(args)) parsed = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
        if (parsed && !json_is_object(parsed)) json_decref(parsed), parsed = NULL;
        json_object_set_new(fn, "arguments", parsed ? parsed : args ? json_incref(args) : json_object());
        json_t *copy = json_pack("{sssO}", "type", "function", "function", fn);
        json_decref(fn);
        json_t *id = json_object_get(c, "id");
        if (json_is_string(id)) json_object_set(copy, "id", id);
        json_array_append_new(out, copy);
    }
    return out;
}

/* "chat_template_kwargs": NULL when absent or null; an object of further
 * template variables (enable_thinking, ...) else a 400. */
static int template_kwargs(json_t *root, json_t **out, api_error *e) {
    json_t *v = json_object_get(root, "chat_template_kwargs");
    *out = NULL;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_object(v))
        return api_fail(e, 400, "invalid_type", "chat_template_kwargs",
                        "'chat_template_kwargs' must be an object of template variables");
    const char *key;
    json_t *x;
    json_object_foreach(v, key, x) if (chat_reserved_var(key))
        return api_fail(e, 400, "invalid_value", "chat_template_kwargs",
                        "'chat_template_kwargs' may not set '%.40s': the server sets it", key);
    *out = v;
    return 0;
}

/* An assistant message's reasoning_content (a string or null, as chat
 * responses return it): passed to the template as reasoning_content and,
 * for harmony templates, as thinking, which gpt-oss's template renders as
 * the analysis message before a tool call (its content then left out: the
 * template refuses both). */
static int reasoning_of(json_t *m, const char *role, size_t i, const chat_template *tpl, json_t *out,
                        api_error *e) {
    json_t *r = json_object_get(m, "reasoning_content");
    if (!r || json_is_null(r)) return 0;
    char param[64];
    snprintf(param, sizeof param, "messages[%zu].reasoning_content", i);
    if (strcmp(role, "assistant")) return api_fail(e, 400, "invalid_value", param, "only assistant messages have '%s'",
                                                   "reasoning_content");
    if (!json_is_string(r)) return api_fail(e, 400, "invalid_type", param, "'%s' must be a string", param);
    json_object_set(out, "reasoning_content", r);
    if (tpl->tool_family == TC_FAMILY_HARMONY) {
        json_object_set(out, "thinking", r);
        if (json_object_get(out, "tool_calls")) json_object_set_new(out, "content", json_string(""));
    }
    return 0;
}

/* Checks "messages" (and "tools" and "chat_template_kwargs" of root) and
 * renders them with the chat template into text. The template sees each
 * message's role (developer as system), content (a string; "" for an
 * assistant turn with none) and, where given, name, tool_calls,
 * tool_call_id and reasoning_content (reasoning_of). */
static int render_messages(json_t *root, json_t *msgs, json_t *tools, const api_limits *lim, int add_generation_prompt,
                           sbuf *text, api_error *e) {
    json_t *kwargs;
    if (template_kwargs(root, &kwargs, e)) return -1;
    if (!msgs || json_is_null(msgs)) return api_fail(e, 400, "missing_parameter", "messages", "'messages' is required");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0)
        return api_fail(e, 400, "invalid_type", "messages", "'messages' must be a non-empty list of messages");
    if (tools && (json_is_null(tools) || (json_is_array(tools) && json_array_size(tools) == 0))) tools = NULL;
    if (tools && !chat_renders_tools(lim->tpl))
        return api_fail(e, 400, "unsupported_parameter", "tools",
                        "'tools' is not supported: this model's chat template does not render tools");
    if (tools && !json_is_array(tools)) return api_fail(e, 400, "invalid_type", "tools", "'tools' must be a list");
    for (size_t i = 0; tools && i < json_array_size(tools); i++)
        if (!json_is_object(json_array_get(tools, i)))
            return api_fail(e, 400, "invalid_type", "tools", "'tools[%zu]' must be an object", i);
    size_t n = json_array_size(msgs);
    static const char *const roles[] = {"system", "user", "assistant", "developer", "tool", NULL};
    static const char *const keys[] = {"role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content", NULL};
    json_t *norm = json_array();
    int rc = norm ? 0 : api_fail(e, 500, NULL, NULL, "out of memory");
    for (size_t i = 0; !rc && i < n; i++) {
        char param[64];
        json_t *m = json_array_get(msgs, i);
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(m)) {
            rc = api_fail(e, 400, "invalid_type", param, "'%s' must be an object with 'role' and 'content'", param);
            break;
        }
        const char *key;
        json_t *v;
        json_object_foreach(m, key, v) if (!rc && !api_in_list(key, keys)) {
            snprintf(param, sizeof param, "messages[%zu].%.32s", i, key);
            rc = api_fail(e, 400, "unsupported_parameter", param, "'%s' is not supported", param);
        }
        if (rc) break;
        const char *role = json_string_value(json_object_get(m, "role"));
        snprintf(param, sizeof param, "messages[%zu].role", i);
        if (!role || !api_in_list(role, roles)) {
            rc = api_fail(e, 400, "invalid_value", param,
                          "'%s' must be one of system, user, assistant, developer, tool", param);
            break;
        }
        snprintf(param, sizeof param, "messages[%zu].content", i);
        json_t *c = json_object_get(m, "content");
        if (!c) {
            rc = api_fail(e, 400, "missing_parameter", param, "'%s' is required", param);
            break;
        }
        sbuf content = {0};
        if ((rc = message_content(c, role, param, &content, e))) {
            sbuf_free(&content); /* the parts before the bad one */
            break;
        }
        json_t *out = json_object();
        if (out) {
            json_object_set_new(out, "role", json_string(!strcmp(role, "developer") ? "system" : role));
            json_object_set_new(out, "content", json_stringn(content.data ? content.data : "", content.len));
        }
        sbuf_free(&content);
        if (!out || json_object_size(out) != 2) {
            json_decref(out);
            rc = api_fail(e, 500, NULL, NULL, "out of memory");
            break;
        }
        json_array_append_new(norm, out);
        static const char *const strs[] = {"name", "tool_call_id"};
        for (int k = 0; k < 2 && !rc; k++) {
            json_t *x = json_object_get(m, strs[k]);
            snprintf(param, sizeof param, "messages[%zu].%s", i, strs[k]);
            if (x && !json_is_null(x) && !json_is_string(x))
                rc = api_fail(e, 400, "invalid_type", param, "'%s' must be a string", param);
            else if (json_is_string(x)) json_object_set(out, strs[k], x);
        }
        json_t *tc = json_object_get(m, "tool_calls");
        if (!rc && tc && !json_is_null(tc)) {
            snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
            json_t *calls = strcmp(role, "assistant")
                                ? (api_fail(e, 400, "invalid_value", param, "only assistant messages have '%s'",
                                            "tool_calls"), NULL)
                                : tool_calls(tc, param, e);
            if (!calls) rc = -1;
            else json_object_set_new(out, "tool_calls", calls);
        }
        if (!rc) rc = reasoning_of(m, role, i, lim->tpl, out, e);
    }
    if (!rc) {
        char msg[500];
        int raised = 0;
        if (chat_render_vars(lim->tpl, norm, tools, kwargs, add_generation_prompt, text, msg, sizeof msg, &raised))
            rc = raised ? api_fail(e, 400, "chat_template_error", "messages", "%s", msg)
                        : api_fail(e, 400, "chat_template_error", "messages", "the chat template failed: %s", msg);
    }
    json_decref(norm);
    if (!rc && text->failed) rc = api_fail(e, 500, NULL, NULL, "out of memory");
    return rc;
}

static int parse_messages(json_t *root, const api_limits *lim, api_request *rq, api_error *e) {
    sbuf text = {0};
    /* tool_choice "none": the tools are left out of the prompt */
    json_t *tools = rq->tool_choice == API_TOOLS_OFF ? NULL : request_tools(root);
    int rc = render_messages(root, json_object_get(root, "messages"), tools, lim, 1, &text, e);
    if (!rc) rc = alloc_prompts(rq, 1, e);
    if (!rc)
        rc = encode(lim, text.data ? text.data : "", text.len, chat_uses_special(lim->tpl), "messages", &rq->prompts[0],
                    &rq->n_prompt[0], e);
    if (!rc && lim->tpl->main && lim->tpl->reasons)
        rq->reasoning = 1 + rs_prompt_opens(text.data ? text.data : "", text.len);
    sbuf_free(&text);
    const char *ends[CHAT_MAX_TURN_ENDS];
    const int n_ends = chat_turn_ends(lim->tpl, ends);
    rq->n_turn_ends = 0;
    for (int i = 0; lim->tok && i < n_ends; i++) {
        const int32_t id = kvlm_tokenizer_token_id(lim->tok, ends[i], strlen(ends[i]));
        if (id >= 0) rq->turn_ends[rq->n_turn_ends++] = id;
    }
    /* harmony's channels are parsed whatever the tools (the analysis is reasoning) */
    if (lim->tpl->main && lim->tpl->tool_family == TC_FAMILY_HARMONY && rq->format == API_FORMAT_TEXT) {
        rq->tool_family = TC_FAMILY_HARMONY;
        rq->parse_calls = 1;
    }
    return rc;
}

/* ------------------------------------------------------- other fields */

static int parse_stop(json_t *root, const api_limits *lim, api_request *rq, api_error *e) {
    json_t *s = json_object_get(root, "stop");
    if (!s || json_is_null(s)) return 0;
    size_t n = json_is_string(s) ? 1 : json_array_size(s);
    if (!json_is_string(s) && !json_is_array(s))
        return api_fail(e, 400, "invalid_type", "stop", "'stop' must be a string or a list of strings");
    if (n > MAX_STOPS) return api_fail(e, 400, "invalid_value", "stop", "'stop' has %zu strings; at most %d", n, MAX_STOPS);
    if (n && !lim->tok) return api_fail(e, 400, "no_tokenizer", "stop", "'stop' needs a model with a tokenizer");
    rq->stops = calloc(n + 1, sizeof *rq->stops);
    if (!rq->stops) return api_fail(e, 500, NULL, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_is_string(s) ? s : json_array_get(s, i);
        if (!json_is_string(x)) return api_fail(e, 400, "invalid_type", "stop", "'stop' must be a string or a list of strings");
        if (json_string_length(x) > MAX_STOP_BYTES || strlen(json_string_value(x)) != json_string_length(x))
            return api_fail(e, 400, "invalid_value", "stop", "a stop string must be at most %d bytes, without NUL",
                            MAX_STOP_BYTES);
        if (!(rq->stops[rq->n_stops++] = strdup(json_string_value(x))))
            return api_fail(e, 500, NULL, NULL, "out of memory");
    }
    return 0;
}

static int parse_logit_bias(json_t *root, const api_limits *lim, api_request *rq, api_error *e) {
    json_t *b = json_object_get(root, "logit_bias");
    if (!b || json_is_null(b)) return 0;
    if (!json_is_object(b))
        return api_fail(e, 400, "invalid_type", "logit_bias", "'logit_bias' must be an object of token id -> bias");
    rq->bias = calloc(json_object_size(b) + 1, sizeof *rq->bias);
    if (!rq->bias) return api_fail(e, 500, NULL, NULL, "out of memory");
    const char *key;
    json_t *v;
    int k = 0;
    json_object_foreach(b, key, v) {
        char *end;
        errno = 0;
        long id = strtol(key, &end, 10);
        if (!*key || *end || errno || id < 0 || id >= lim->vocab)
            return api_fail(e, 400, "invalid_value", "logit_bias",
                            "'logit_bias' key '%.40s' is not a token id in [0, %d)", key, lim->vocab);
        if (!json_is_number(v) || json_number_value(v) < -100 || json_number_value(v) > 100)
            return api_fail(e, 400, "invalid_value", "logit_bias", "'logit_bias' values must be numbers in [-100, 100]");
        rq->bias[k++] = (kvlm_logit_bias){(int32_t)id, (float)json_number_value(v)};
    }
    rq->sampling.logit_bias = rq->bias;
    rq->sampling.n_logit_bias = k;
    return 0;
}

static int parse_sampling(json_t *root, const api_limits *lim, api_request *rq, api_error *e) {
    kvlm_sampler_options *o = &rq->sampling;
    long long top_k = 0, seed = 0;
    int has_seed = json_object_get(root, "seed") && !json_is_null(json_object_get(root, "seed"));
    if (get_num(root, "temperature", 0, 2, &o->temperature, e) || get_num(root, "top_p", 0, 1, &o->top_p, e) ||
        get_int(root, "top_k", -1, 1 << 30, &top_k, e) || get_num(root, "min_p", 0, 1, &o->min_p, e) ||
        get_num(root, "repetition_penalty", 0, 10, &o->repetition_penalty, e) ||
        get_num(root, "presence_penalty", -2, 2, &o->presence_penalty, e) ||
        get_num(root, "frequency_penalty", -2, 2, &o->frequency_penalty, e) ||
        get_int(root, "seed", INT64_MIN, INT64_MAX, &seed, e) || parse_logit_bias(root, lim, rq, e))
        return -1;
    if (o->top_p <= 0) return api_fail(e, 400, "invalid_value", "top_p", "'top_p' must be in (0, 1], got 0");
    if (o->repetition_penalty <= 0)
        return api_fail(e, 400, "invalid_value", "repetition_penalty", "'repetition_penalty' must be above 0");
    o->top_k = top_k > 0 ? (int)top_k : 0;
    o->seed = has_seed ? (uint64_t)seed : lim->random_seed;
    return 0;
}

/* kvlm's "kvlm_speculation": null, or {"draft": "none" | "ngram" | "model",
 * "k": 1..16, "ngram": 1..8, "adaptive": true | false} (docs/speculative.md). */
static int parse_speculation(json_t *root, const api_limits *lim, api_request *rq, api_error *e) {
    static const char *const keys[] = {"draft", "k", "ngram", "adaptive", NULL};
    static const char *const modes[] = {"none", "ngram", "model", NULL};
    json_t *v = json_object_get(root, "kvlm_speculation");
    if (!v || json_is_null(v)) return 0;
    if (!json_is_object(v))
        return api_fail(e, 400, "invalid_type", "kvlm_speculation", "'kvlm_speculation' must be an object");
    const char *key;
    json_t *x;
    json_object_foreach(v, key, x) if (!api_in_list(key, keys))
        return api_fail(e, 400, "unknown_parameter", "kvlm_speculation",
                        "Unrecognized argument 'kvlm_speculation.%.64s' (draft, k, ngram, adaptive)", key);
    json_t *d = json_object_get(v, "draft");
    if (!is_one_of(d, modes))
        return api_fail(e, 400, "invalid_value", "kvlm_speculation.draft",
                        "'kvlm_speculation.draft' must be \"none\", \"ngram\" or \"model\"");
    long long k = 4, n = 3;
    static const struct {
        const char *key, *param;
        long long hi;
    } ints[] = {{"k", "kvlm_speculation.k", 16}, {"ngram", "kvlm_speculation.ngram", 8}};
    for (int i = 0; i < 2; i++) {
        json_t *f = json_object_get(v, ints[i].key);
        long long *out = i == 0 ? &k : &n;
        if (!f || json_is_null(f)) continue;
        if (!json_is_integer(f) || json_integer_value(f) < 1 || json_integer_value(f) > ints[i].hi)
            return api_fail(e, 400, "invalid_value", ints[i].param, "'%s' must be an integer from 1 to %lld",
                            ints[i].param, ints[i].hi);
        *out = json_integer_value(f);
    }
    json_t *a = json_object_get(v, "adaptive");
    if (a && !json_is_null(a) && !json_is_boolean(a))
        return api_fail(e, 400, "invalid_type", "kvlm_speculation.adaptive",
                        "'kvlm_speculation.adaptive' must be true or false");
    const char *mode = json_string_value(d);
    rq->speculation_given = 1;
    rq->speculation = kvlm_speculation_default_params();
    rq->speculation.mode = !strcmp(mode, "ngram") ? KVLM_DRAFT_NGRAM : !strcmp(mode, "model") ? KVLM_DRAFT_MODEL
                                                                                          : KVLM_DRAFT_NONE;
    rq->speculation.k = (int)k;
    rq->speculation.ngram = (int)n;
    rq->speculation.fixed = json_is_false(a);
    if (rq->speculation.mode == KVLM_DRAFT_MODEL && !lim->has_draft)
        return api_fail(e, 400, "invalid_value", "kvlm_speculation.draft",
                        "'kvlm_speculation.draft' \"model\": this server has no draft model (kvlm serve --draft)");
    return 0;
}

/* kvlm's "kvlm_entropy": a boolean; true needs logprobs, whose entries it extends. */
static int parse_entropy(json_t *root, api_request *rq, api_error *e) {
    if (get_bool(root, "kvlm_entropy", &rq->kvlm_entropy, e)) return -1;
    if (rq->kvlm_entropy && !rq->logprobs)
        return api_fail(e, 400, "invalid_value", "kvlm_entropy",
                        "'kvlm_entropy' extends the log-probabilities: it needs 'logprobs' too");
    return 0;
}

static int parse_logprobs(json_t *root, int chat, api_request *rq, api_error *e) {
    long long k = 0;
    if (!chat) {
        json_t *v = json_object_get(root, "logprobs");
        if (get_int(root, "logprobs", 0, MAX_TOP_LOGPROBS, &k, e)) return -1;
        rq->logprobs = v && !json_is_null(v);
        rq->top_logprobs = (int)k;
        return 0;
    }
    if (get_bool(root, "logprobs", &rq->logprobs, e) || get_int(root, "top_logprobs", 0, MAX_TOP_LOGPROBS, &k, e))
        return -1;
    json_t *t = json_object_get(root, "top_logprobs");
    if (t && !json_is_null(t) && !rq->logprobs)
        return api_fail(e, 400, "invalid_value", "top_logprobs", "'top_logprobs' needs 'logprobs' set to true");
    rq->top_logprobs = (int)k;
    return 0;
}

/* stream, stream_options, n, best_of, echo, suffix, ignore_eos. */
static int parse_flags(json_t *root, int chat, const api_limits *lim, api_request *rq, api_error *e) {
    long long n = 1, best_of = 0;
    if (get_bool(root, "stream", &rq->stream, e) || get_bool(root, "ignore_eos", &rq->ignore_eos, e) ||
        get_bool(root, "return_tokens_as_token_ids", &rq->token_ids, e) ||
        get_int(root, "n", 1, lim->max_seqs < 64 ? lim->max_seqs : 64, &n, e))
        return -1;
    rq->n = (int)n;
    json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so)) {
        if (!rq->stream)
            return api_fail(e, 400, "invalid_value", "stream_options", "'stream_options' is only allowed with 'stream': true");
        if (!json_is_object(so))
            return api_fail(e, 400, "invalid_type", "stream_options", "'stream_options' must be an object");
        const char *key;
        json_t *v;
        int obfuscate = 0; /* include_obfuscation: padding against side channels; nothing to pad here */
        json_object_foreach(so, key, v) if (strcmp(key, "include_usage") && strcmp(key, "include_obfuscation"))
            return api_fail(e, 400, "unknown_parameter", "stream_options", "unknown stream option '%.40s'", key);
        if (get_bool(so, "include_usage", &rq->include_usage, e) || get_bool(so, "include_obfuscation", &obfuscate, e))
            return -1;
    }
    if (chat) return 0;
    int echo = 0;
    if (get_bool(root, "echo", &echo, e) || get_int(root, "best_of", 1, 64, &best_of, e)) return -1;
    if (echo) return api_fail(e, 400, "unsupported_parameter", "echo", "'echo' is not supported by this server");
    if (best_of && best_of != n)
        return api_fail(e, 400, "unsupported_parameter", "best_of", "'best_of' other than 'n' is not supported");
    json_t *suffix = json_object_get(root, "suffix");
    if (suffix && !json_is_null(suffix) && !json_is_string(suffix))
        return api_fail(e, 400, "invalid_type", "suffix", "'suffix' must be a string");
    if (json_is_string(suffix) && json_string_length(suffix) && fim_check(lim->tok, "suffix", e)) return -1;
    return 0;
}

/* Each prompt must fit the context window with its completion, and one
 * sequence of it must fit the KV pool. */
static int check_lengths(json_t *root, int chat, const api_limits *lim, api_request *rq, api_error *e) {
    long long max_tokens = 0;
    const char *mt_key = "max_tokens";
    if (chat && json_object_get(root, "max_completion_tokens") && !json_is_null(json_object_get(root, "max_completion_tokens")))
        mt_key = "max_completion_tokens";
    if (get_int(root, mt_key, 1, INT32_MAX, &max_tokens, e)) return -1;
    const char *pkey = chat ? "messages" : "prompt";
    for (int i = 0; i < rq->n_prompts; i++) {
        int np = rq->n_prompt[i], room = lim->n_ctx - np;
        if (np >= lim->n_ctx)
            return api_fail(e, 400, "context_length_exceeded", pkey,
                            "the prompt has %d tokens; this model's context window is %d tokens, so a prompt may have "
                            "at most %d", np, lim->n_ctx, lim->n_ctx - 1);
        if (max_tokens > room)
            return api_fail(e, 400, "context_length_exceeded", mt_key,
                            "This model's maximum context length is %d tokens. However, you requested %lld tokens "
                            "(%d in the prompt, %lld for the completion). Please reduce the prompt or '%s'.",
                            lim->n_ctx, np + max_tokens, np, max_tokens, mt_key);
        rq->max_new[i] = max_tokens ? (int)max_tokens : chat ? room : room < 16 ? room : 16;
        size_t need = ((size_t)np + (size_t)rq->max_new[i] + (size_t)lim->block_size - 1) / (size_t)lim->block_size + 1;
        if (need > lim->kv_blocks)
            return api_fail(e, 400, "kv_cache_too_small", mt_key,
                            "the prompt and completion need %zu KV blocks; the server's pool has %zu", need,
                            lim->kv_blocks);
    }
    return 0;
}

static int parse_root(json_t *root, int chat, const api_limits *lim, api_request *rq, api_error *e) {
    static const char *const completion_keys[] = {
        "model", "prompt", "max_tokens", "temperature", "top_p", "n", "stream", "stream_options", "stop", "seed",
        "logprobs", "presence_penalty", "frequency_penalty", "logit_bias", "user", "prompt_cache_key", "top_k",
        "min_p", "repetition_penalty", "ignore_eos", "echo", "suffix", "best_of", "metadata", "store", "service_tier",
        "return_tokens_as_token_ids", "response_format", "grammar", "regex", "kvlm_entropy", "kvlm_speculation",
        NULL};
    static const char *const chat_keys[] = {
        "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "stream",
        "stream_options", "stop", "seed", "logprobs", "top_logprobs", "presence_penalty", "frequency_penalty",
        "logit_bias", "user", "prompt_cache_key", "top_k", "min_p", "repetition_penalty", "ignore_eos", "metadata",
        "store", "service_tier", "return_tokens_as_token_ids", "tools", "tool_choice", "parallel_tool_calls",
        "reasoning_effort", "response_format", "prediction", "modalities", "grammar", "regex", "kvlm_entropy",
        "kvlm_speculation", "chat_template_kwargs", NULL};
    memset(rq, 0, sizeof *rq);
    rq->chat = chat;
    rq->sampling = kvlm_sampler_default_params();
    int rc = check_keys(root, chat ? chat_keys : completion_keys, lim, e);
    if (!rc) rc = check_ignored(root, chat, e);
    if (!rc) rc = api_parse_structured(root, chat, lim, rq, e);
    if (!rc) rc = parse_flags(root, chat, lim, rq, e);
    if (!rc) rc = parse_sampling(root, lim, rq, e);
    if (!rc) rc = parse_logprobs(root, chat, rq, e);
    if (!rc) rc = parse_entropy(root, rq, e);
    if (!rc) rc = parse_speculation(root, lim, rq, e);
    if (!rc) rc = parse_stop(root, lim, rq, e);
    if (!rc) rc = chat ? parse_messages(root, lim, rq, e) : parse_prompt(root, lim, rq, e);
    if (!rc) rc = check_lengths(root, chat, lim, rq, e);
    if (rc) api_request_free(rq);
    return rc;
}

int api_parse_completion(const char *body, size_t len, int chat, const api_limits *lim, api_request *rq,
                         api_error *e) {
    memset(rq, 0, sizeof *rq);
    json_t *root = parse_body(body, len, lim, e);
    if (!root) return -1;
    int rc = parse_root(root, chat, lim, rq, e);
    json_decref(root);
    return rc;
}

int api_parse_chat_root(json_t *root, const api_limits *lim, api_request *rq, api_error *e) {
    return parse_root(root, 1, lim, rq, e);
}

int api_parse_completion_root(json_t *root, const api_limits *lim, api_request *rq, api_error *e) {
    return parse_root(root, 0, lim, rq, e);
}

json_t *api_load_body(const char *body, size_t len, const api_limits *lim, api_error *e) {
    return parse_body(body, len, lim, e);
}

void api_request_free(api_request *rq) {
    for (int i = 0; rq->prompts && i < rq->n_prompts; i++) free(rq->prompts[i]);
    free(rq->prompts);
    free(rq->n_prompt);
    free(rq->max_new);
    for (int i = 0; rq->stops && i < rq->n_stops; i++) free(rq->stops[i]);
    free(rq->stops);
    free(rq->bias);
    free(rq->format_text);
    free(rq->tool_name);
    free(rq->tools_json);
    free(rq->conversation);
    free(rq->echo);
    memset(rq, 0, sizeof *rq);
}

/* --------------------------------------------------- tokenize, detokenize */

json_t *api_parse_object(const char *body, size_t len, const char *const *keys, const api_limits *lim, api_error *e) {
    json_t *root = parse_body(body, len, lim, e);
    if (root && check_keys(root, keys, lim, e)) {
        json_decref(root);
        root = NULL;
    }
    return root;
}

int api_prompt_ids(json_t *root, const api_limits *lim, int special, int gen, int32_t **ids, size_t *n,
                   api_error *e) {
    json_t *prompt = json_object_get(root, "prompt"), *msgs = json_object_get(root, "messages");
    sbuf text = {0};
    int rc = 0;
    *ids = NULL;
    *n = 0;
    if (!prompt == !msgs)
        rc = api_fail(e, 400, "missing_parameter", "prompt", "give exactly one of 'prompt' (a string) or 'messages'");
    else if (prompt && !json_is_string(prompt))
        rc = api_fail(e, 400, "invalid_type", "prompt", "'prompt' must be a string");
    else if (!lim->tok)
        rc = api_fail(e, 400, "no_tokenizer", NULL, "this model has no tokenizer");
    else if (prompt)
        sbuf_add(&text, json_string_value(prompt), json_string_length(prompt));
    else
        rc = render_messages(root, msgs, json_object_get(root, "tools"), lim, gen, &text, e);
    kvlm_error err;
    /* add_special_tokens: as a completion prompt is encoded (special tokens
     * matched, BOS when the files ask); false: the text alone, as text. */
    if (!rc && (msgs || special ? kvlm_tokenizer_encode_prompt(lim->tok, text.data ? text.data : "", text.len,
                                                               msgs ? chat_uses_special(lim->tpl) : 1, ids, n, &err)
                                : kvlm_tokenizer_encode(lim->tok, text.data ? text.data : "", text.len, 0, ids, n,
                                                        &err)))
        rc = api_fail(e, 400, "invalid_prompt", "prompt", "%s", err.msg);
    sbuf_free(&text);
    return rc;
}

int api_parse_tokenize(const char *body, size_t len, const api_limits *lim, int32_t **ids, size_t *n,
                       api_error *e) {
    static const char *const keys[] = {"model", "prompt", "messages", "add_special_tokens",
                                       "add_generation_prompt", "tools", "chat_template_kwargs", NULL};
    *ids = NULL;
    *n = 0;
    json_t *root = api_parse_object(body, len, keys, lim, e);
    if (!root) return -1;
    int special = 1, gen = 1, rc = get_bool(root, "add_special_tokens", &special, e);
    if (!rc) rc = get_bool(root, "add_generation_prompt", &gen, e);
    if (!rc) rc = api_prompt_ids(root, lim, special, gen, ids, n, e);
    json_decref(root);
    return rc;
}

int api_parse_detokenize(const char *body, size_t len, const api_limits *lim, int32_t **ids, size_t *n,
                         api_error *e) {
    static const char *const keys[] = {"model", "tokens", NULL};
    *ids = NULL;
    *n = 0;
    json_t *root = parse_body(body, len, lim, e);
    if (!root) return -1;
    int rc = check_keys(root, keys, lim, e);
    json_t *t = json_object_get(root, "tokens");
    if (!rc && !json_is_array(t))
        rc = api_fail(e, 400, t ? "invalid_type" : "missing_parameter", "tokens", "'tokens' must be a list of token ids");
    else if (!rc && !lim->tok)
        rc = api_fail(e, 400, "no_tokenizer", NULL, "this model has no tokenizer");
    size_t k = rc ? 0 : json_array_size(t);
    if (!rc && !(*ids = malloc((k + 1) * sizeof **ids))) rc = api_fail(e, 500, NULL, NULL, "out of memory");
    int vocab = lim->tok ? kvlm_tokenizer_vocab_size(lim->tok) : 0;
    for (size_t i = 0; !rc && i < k; i++) {
        json_t *x = json_array_get(t, i);
        if (!json_is_integer(x) || json_integer_value(x) < 0 || json_integer_value(x) >= vocab)
            rc = api_fail(e, 400, "invalid_token", "tokens", "'tokens[%zu]' is not a token id in [0, %d)", i, vocab);
        else (*ids)[i] = (int32_t)json_integer_value(x);
    }
    *n = k;
    json_decref(root);
    if (rc) {
        free(*ids);
        *ids = NULL;
    }
    return rc;
}
