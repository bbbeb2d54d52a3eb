/*
 * Building a request's grammar (see structured.h). The call schema for a
 * forced tool call is made here as JSON text and compiled like any
 * response_format schema; when it fails, each tool is compiled alone so
 * the error can name the one at fault.
 */
#include "app/structured.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/harmony.h"
#include "app/tool_calls.h"

/* {"type":"object","properties":{"name":{"const":N},KEY:PARAMS},
 * "required":["name",KEY],"additionalProperties":false} for one tool. */
static json_t *call_schema(json_t *tool, const char *args_key) {
    json_t *f = json_object_get(tool, "function"), *params = json_object_get(f, "parameters");
    json_t *props = json_object(), *s = json_object();
    json_object_set_new(props, "name", json_pack("{sO}", "const", json_object_get(f, "name")));
    json_object_set_new(props, args_key, json_is_object(params) ? json_incref(params) : json_pack("{ss}", "type", "object"));
    json_object_set_new(s, "type", json_string("object"));
    json_object_set_new(s, "properties", props);
    json_object_set_new(s, "required", json_pack("[ss]", "name", args_key));
    json_object_set_new(s, "additionalProperties", json_false());
    return s;
}

static char *tools_schema(const api_request *rq, json_t *tools, const char *args_key) {
    json_t *one = NULL, *any = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        const char *name = json_string_value(json_object_get(json_object_get(t, "function"), "name"));
        if (rq->tool_choice == API_TOOLS_NAMED && strcmp(name, rq->tool_name)) continue;
        json_array_append_new(any, call_schema(t, args_key));
    }
    if (json_array_size(any) == 1) one = json_incref(json_array_get(any, 0));
    else one = json_pack("{sO}", "anyOf", any);
    json_decref(any);
    char *text = one ? json_dumps(one, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    json_decref(one);
    return text;
}

char *structured_call_schema(const api_request *rq) {
    if (!rq->tools_json) return NULL;
    json_t *tools = json_loads(rq->tools_json, 0, NULL);
    char *s = tools ? tools_schema(rq, tools, tc_family_syntax((tc_family)rq->tool_family).args_key) : NULL;
    json_decref(tools);
    return s;
}

static const char *format_param(const api_request *rq) {
    if (rq->tool_choice == API_TOOLS_REQUIRED || rq->tool_choice == API_TOOLS_NAMED) return "tool_choice";
    switch (rq->format) {
    case API_FORMAT_GRAMMAR: return "grammar";
    case API_FORMAT_REGEX: return "regex";
    case API_FORMAT_JSON_SCHEMA: return "response_format.json_schema.schema";
    default: return "response_format";
    }
}

/* Harmony writes the function's name in the message's header and only
 * the arguments in its body: a call of function fn (tools[at]) is the
 * header, fn's parameters schema, then <|call|>. */
static kvlm_grammar *harmony_call(json_t *fn, size_t at, api_error *e) {
    json_t *params = json_object_get(fn, "parameters");
    char *schema = json_is_object(params) ? json_dumps(params, JSON_COMPACT | JSON_PRESERVE_ORDER)
                                          : strdup("{\"type\":\"object\"}");
    char prefix[160], suffix[16], param[64];
    kvlm_error err = {0};
    kvlm_grammar *g = NULL, *w = NULL;
    if (!schema) api_fail(e, 500, NULL, NULL, "out of memory");
    else if (hm_call_wrapper(json_string_value(json_object_get(fn, "name")), prefix, sizeof prefix, suffix,
                             sizeof suffix)) {
        snprintf(param, sizeof param, "tools[%zu].function.name", at);
        api_fail(e, 400, "invalid_value", param, "'%s' is too long for a harmony call", param);
    } else if (!(g = kvlm_grammar_from_json_schema(schema, strlen(schema), &err))) {
        snprintf(param, sizeof param, "tools[%zu].function.parameters", at);
        api_fail(e, 400, "invalid_schema", param, "'%s' cannot be used as a constraint: %s", param, err.msg);
    } else if (!(w = kvlm_grammar_wrap(g, prefix, suffix, &err)))
        api_fail(e, 500, NULL, "tool_choice", "cannot build the tool-call grammar: %s", err.msg);
    kvlm_grammar_free(g);
    free(schema);
    return w;
}

/* The named function's call, or for "required" a call of any tool. */
static kvlm_grammar *forced_harmony_call(const api_request *rq, api_error *e) {
    json_t *tools = json_loads(rq->tools_json, 0, NULL);
    const size_t n = json_array_size(tools);
    kvlm_grammar **each = calloc(n ? n : 1, sizeof *each), *w = NULL;
    int k = 0, failed = !tools || !each;
    if (failed) api_fail(e, 500, NULL, NULL, "out of memory");
    for (size_t i = 0; !failed && i < n; i++) {
        json_t *fn = json_object_get(json_array_get(tools, i), "function");
        if (rq->tool_choice == API_TOOLS_NAMED && strcmp(json_string_value(json_object_get(fn, "name")), rq->tool_name))
            continue;
        if (!(each[k++] = harmony_call(fn, i, e))) failed = 1;
    }
    kvlm_error err = {0};
    if (!failed && k == 1) w = each[0], each[0] = NULL;
    else if (!failed && !(w = kvlm_grammar_any((const kvlm_grammar *const *)each, k, &err)))
        api_fail(e, 500, NULL, "tool_choice", "cannot build the tool-call grammar: %s", err.msg);
    for (int i = 0; each && i < k; i++) kvlm_grammar_free(each[i]);
    free(each);
    json_decref(tools);
    return w;
}

/* Compiles the call schema; on failure names the tool whose parameters
 * the engine refused. */
static kvlm_grammar *forced_call(const api_request *rq, api_error *e) {
    if (rq->tool_family == TC_FAMILY_HARMONY) return forced_harmony_call(rq, e);
    tc_syntax syn = tc_family_syntax((tc_family)rq->tool_family);
    json_t *tools = json_loads(rq->tools_json, 0, NULL);
    char *schema = tools ? tools_schema(rq, tools, syn.args_key) : NULL;
    kvlm_error err = {0};
    kvlm_grammar *g = schema ? kvlm_grammar_from_json_schema(schema, strlen(schema), &err) : NULL, *w = NULL;
    if (g) {
        w = kvlm_grammar_wrap(g, syn.prefix, syn.suffix, &err);
        kvlm_grammar_free(g);
        if (!w) api_fail(e, 500, NULL, "tool_choice", "cannot build the tool-call grammar: %s", err.msg);
    } else if (!schema) {
        api_fail(e, 500, NULL, NULL, "out of memory");
    } else {
        char param[64] = "tools";
        int found = 0;
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            json_t *alone = json_pack("[O]", t);
            char *s1 = alone ? tools_schema(&(api_request){.tool_choice = API_TOOLS_REQUIRED}, alone, syn.args_key)
                             : NULL;
            kvlm_error e1 = {0};
            kvlm_grammar *g1 = s1 ? kvlm_grammar_from_json_schema(s1, strlen(s1), &e1) : NULL;
            if (s1 && !g1) {
                snprintf(param, sizeof param, "tools[%zu].function.parameters", i);
                err = e1;
                found = 1;
            }
            kvlm_grammar_free(g1);
            free(s1);
            json_decref(alone);
            if (found) break;
        }
        api_fail(e, 400, "invalid_schema", param, "'%s' cannot be used as a constraint: %s", param, err.msg);
    }
    free(schema);
    json_decref(tools);
    return w;
}

int structured_build(const api_request *rq, struct kvlm_grammar **out, api_error *e) {
    *out = NULL;
    kvlm_error err = {0};
    kvlm_grammar *g = NULL;
    if (rq->tool_choice == API_TOOLS_REQUIRED || rq->tool_choice == API_TOOLS_NAMED) {
        if (!(g = forced_call(rq, e))) return -1;
    } else {
        switch (rq->format) {
        case API_FORMAT_TEXT: return 0;
        case API_FORMAT_JSON_OBJECT: g = kvlm_grammar_json_object(&err); break;
        case API_FORMAT_JSON_SCHEMA: g = kvlm_grammar_from_json_schema(rq->format_text, rq->format_len, &err); break;
        case API_FORMAT_GRAMMAR: g = kvlm_grammar_from_gbnf(rq->format_text, rq->format_len, &err); break;
        case API_FORMAT_REGEX: g = kvlm_grammar_from_regex(rq->format_text, rq->format_len, &err); break;
        }
    }
    if (!g) {
        const char *p = format_param(rq);
        if (err.code == KVLM_ERR_NOMEM) return api_fail(e, 500, NULL, NULL, "out of memory");
        return api_fail(e, 400, rq->format == API_FORMAT_JSON_SCHEMA ? "invalid_schema" : "invalid_value", p,
                        "'%s' cannot be used as a constraint: %s", p, err.msg);
    }
    /* the output must be able to close within max_tokens (one token per
     * byte of the shortest output), as the scheduler would refuse */
    const int need = kvlm_grammar_min_bytes(g, &err);
    for (int i = 0; i < rq->n_prompts; i++)
        if (need < 0 || rq->max_new[i] < need) {
            kvlm_grammar_free(g);
            if (need == KVLM_ERR_NOMEM) return api_fail(e, 500, NULL, NULL, "out of memory");
            if (need < 0) return api_fail(e, 400, "invalid_value", format_param(rq), "%s", err.msg);
            return api_fail(e, 400, "invalid_value", "max_tokens",
                            "max_tokens %d is below the shortest output '%s' accepts: %d bytes, so max_tokens must be "
                            "at least %d (one token per byte), to close the output within it",
                            rq->max_new[i], format_param(rq), need, need);
        }
    *out = g;
    return 0;
}

void structured_free(struct kvlm_grammar *g) { kvlm_grammar_free(g); }

void structured_attach(kvlm_request_params *p, const struct kvlm_grammar *g) { p->grammar = g; }
