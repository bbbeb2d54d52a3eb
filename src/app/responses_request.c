/*
 * OpenAI Responses bodies translated into chat bodies (see
 * responses_request.h). Errors name the field as the Responses API spells
 * it (input[2].call_id, text.format.schema, ...).
 */
#include "app/responses_request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every key of o in keys, else a 400 naming param.key. */
static int only_keys(json_t *o, const char *const *keys, const char *param, api_error *e) {
    return api_only_keys(o, keys, param, "Unknown parameter: '%s'.", e);
}

/* A message's content: a string or a list of input_text / output_text parts. */
static int content_text(json_t *c, const char *param, sbuf *out, api_error *e) {
    if (json_is_string(c)) {
        sbuf_add(out, json_string_value(c), json_string_length(c));
        return 0;
    }
    if (!json_is_array(c)) return api_fail(e, 400, "invalid_type", param, "'%s' must be a string or a list of content parts", param);
    size_t i;
    json_t *p;
    json_array_foreach(c, i, p) {
        char q[160];
        snprintf(q, sizeof q, "%s[%zu]", param, i);
        const char *type = json_string_value(json_object_get(p, "type"));
        json_t *t = json_object_get(p, "text");
        if (!json_is_object(p) || !type || (strcmp(type, "input_text") && strcmp(type, "output_text")))
            return api_fail(e, 400, "unsupported_content", q,
                            "'%s' must be an input_text or output_text part: this server reads text only", q);
        if (!json_is_string(t)) return api_fail(e, 400, "invalid_type", q, "'%s.text' must be a string", q);
        sbuf_add(out, json_string_value(t), json_string_length(t));
    }
    return 0;
}

/* One input item appended to msgs as chat turns. */
static int add_item(json_t *it, size_t i, json_t *msgs, api_error *e) {
    char p[64];
    snprintf(p, sizeof p, "input[%zu]", i);
    if (!json_is_object(it)) return api_fail(e, 400, "invalid_type", p, "'%s' must be an object", p);
    const char *type = json_string_value(json_object_get(it, "type"));
    if (!type || !strcmp(type, "message")) {
        static const char *const keys[] = {"type", "role", "content", "id", "status", NULL};
        static const char *const roles[] = {"user", "assistant", "system", "developer", NULL};
        const char *role = json_string_value(json_object_get(it, "role"));
        if (only_keys(it, keys, p, e)) return -1;
        if (!role || !api_in_list(role, roles))
            return api_fail(e, 400, "invalid_value", p, "'%s.role' must be user, assistant, system or developer", p);
        char q[96];
        snprintf(q, sizeof q, "%s.content", p);
        sbuf text = {0};
        int rc = content_text(json_object_get(it, "content"), q, &text, e);
        if (!rc)
            json_array_append_new(msgs, json_pack("{s:s,s:s%}", "role", !strcmp(role, "developer") ? "system" : role,
                                                  "content", text.data ? text.data : "", text.len));
        sbuf_free(&text);
        return rc;
    }
    if (!strcmp(type, "function_call")) {
        static const char *const keys[] = {"type", "call_id", "name", "arguments", "id", "status", NULL};
        json_t *id = json_object_get(it, "call_id"), *name = json_object_get(it, "name"),
               *args = json_object_get(it, "arguments");
        if (only_keys(it, keys, p, e)) return -1;
        if (!json_is_string(id) || !json_is_string(name) || !json_is_string(args))
            return api_fail(e, 400, "invalid_value", p, "'%s' needs call_id, name and arguments (strings)", p);
        json_t *call = json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", id, "type", "function", "function", "name", name,
                                 "arguments", args);
        json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
        json_t *calls = last ? json_object_get(last, "tool_calls") : NULL;
        if (calls) json_array_append_new(calls, call); /* consecutive calls: one assistant turn */
        else json_array_append_new(msgs, json_pack("{s:s,s:s,s:[o]}", "role", "assistant", "content", "", "tool_calls", call));
        return 0;
    }
    if (!strcmp(type, "function_call_output")) {
        static const char *const keys[] = {"type", "call_id", "output", "id", "status", NULL};
        json_t *id = json_object_get(it, "call_id");
        if (only_keys(it, keys, p, e)) return -1;
        if (!json_is_string(id)) return api_fail(e, 400, "invalid_value", p, "'%s.call_id' must be a string", p);
        char q[96];
        snprintf(q, sizeof q, "%s.output", p);
        sbuf text = {0};
        int rc = content_text(json_object_get(it, "output"), q, &text, e);
        if (!rc)
            json_array_append_new(msgs, json_pack("{s:s,s:O,s:s%}", "role", "tool", "tool_call_id", id, "content",
                                                  text.data ? text.data : "", text.len));
        sbuf_free(&text);
        return rc;
    }
    if (!strcmp(type, "reasoning")) return 0;
    return api_fail(e, 400, "unsupported_content", p, "'%s': items of type '%.40s' are not supported", p, type);
}

static json_t *tools_of(json_t *tools, api_error *e) {
    static const char *const keys[] = {"type", "name", "description", "parameters", "strict", NULL};
    if (!json_is_array(tools)) return api_fail(e, 400, "invalid_type", "tools", "'tools' must be a list"), NULL;
    json_t *out = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        char p[64];
        snprintf(p, sizeof p, "tools[%zu]", i);
        const char *type = json_string_value(json_object_get(t, "type"));
        int bad = 0;
        if (!json_is_object(t) || !type) bad = api_fail(e, 400, "invalid_type", p, "'%s' must be an object with a type", p);
        else if (strcmp(type, "function"))
            bad = api_fail(e, 400, "unsupported_tool", p, "'%s': tools of type '%.40s' are not supported (function only)", p, type);
        else bad = only_keys(t, keys, p, e);
        if (bad) {
            json_decref(out);
            return NULL;
        }
        json_t *fn = json_object();
        static const char *const copy[] = {"name", "description", "parameters", "strict"};
        for (int k = 0; k < 4; k++) {
            json_t *v = json_object_get(t, copy[k]);
            if (v && !json_is_null(v)) json_object_set(fn, copy[k], v);
        }
        json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", fn));
    }
    return out;
}

static int tool_choice_of(json_t *tc, json_t *chat, api_error *e) {
    static const char *const keys[] = {"type", "name", NULL};
    if (!tc || json_is_null(tc)) return 0;
    if (json_is_string(tc)) {
        json_object_set(chat, "tool_choice", tc); /* none, auto, required: the chat parser checks */
        return 0;
    }
    const char *type = json_string_value(json_object_get(tc, "type"));
    json_t *name = json_object_get(tc, "name");
    if (!json_is_object(tc) || !type || strcmp(type, "function") || !json_is_string(name))
        return api_fail(e, 400, "invalid_value", "tool_choice",
                        "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"name\": ...}");
    if (only_keys(tc, keys, "tool_choice", e)) return -1;
    json_object_set_new(chat, "tool_choice", json_pack("{s:s,s:{s:O}}", "type", "function", "function", "name", name));
    return 0;
}

/* text.format into the chat's response_format. */
static int text_format(json_t *text, json_t *chat, api_error *e) {
    static const char *const keys[] = {"format", "verbosity", NULL};
    static const char *const fkeys[] = {"type", "name", "schema", "strict", "description", NULL};
    if (!text || json_is_null(text)) return 0;
    if (!json_is_object(text)) return api_fail(e, 400, "invalid_type", "text", "'text' must be an object");
    if (only_keys(text, keys, "text", e)) return -1;
    json_t *f = json_object_get(text, "format");
    if (!f || json_is_null(f)) return 0;
    const char *type = json_string_value(json_object_get(f, "type"));
    if (!json_is_object(f) || !type) return api_fail(e, 400, "invalid_type", "text.format", "'text.format' must be an object with a type");
    if (only_keys(f, fkeys, "text.format", e)) return -1;
    if (!strcmp(type, "text")) return 0;
    if (!strcmp(type, "json_object")) {
        json_object_set_new(chat, "response_format", json_pack("{s:s}", "type", "json_object"));
        return 0;
    }
    if (strcmp(type, "json_schema"))
        return api_fail(e, 400, "invalid_value", "text.format.type", "'text.format.type' must be text, json_object or json_schema");
    json_t *js = json_object();
    static const char *const copy[] = {"name", "schema", "strict", "description"};
    for (int k = 0; k < 4; k++) {
        json_t *v = json_object_get(f, copy[k]);
        if (v) json_object_set(js, copy[k], v);
    }
    json_object_set_new(chat, "response_format", json_pack("{s:s,s:o}", "type", "json_schema", "json_schema", js));
    return 0;
}

/* Fields that change nothing here, type-checked; the refused ones refused. */
static int check_inert(json_t *root, api_error *e) {
    static const struct {
        const char *key;
        int type; /* JSON type expected */
    } f[] = {{"user", JSON_STRING}, {"store", JSON_TRUE}, {"parallel_tool_calls", JSON_TRUE},
             {"service_tier", JSON_STRING}, {"prompt_cache_key", JSON_STRING}, {"reasoning", JSON_OBJECT},
             {"metadata", JSON_OBJECT}, {"background", JSON_TRUE}, {"include", JSON_ARRAY}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        json_t *v = json_object_get(root, f[i].key);
        if (!v || json_is_null(v)) continue;
        int ok = f[i].type == JSON_TRUE ? json_is_boolean(v) : (int)json_typeof(v) == f[i].type;
        if (!ok) return api_fail(e, 400, "invalid_type", f[i].key, "'%s' has the wrong type", f[i].key);
    }
    json_t *v;
    if (json_is_true(json_object_get(root, "background")))
        return api_fail(e, 400, "unsupported_parameter", "background", "'background' is not supported by this server");
    if ((v = json_object_get(root, "include")) && json_is_array(v) && json_array_size(v))
        return api_fail(e, 400, "unsupported_parameter", "include", "'include' is not supported by this server");
    if ((v = json_object_get(root, "truncation")) && !json_is_null(v) &&
        !(json_is_string(v) && (!strcmp(json_string_value(v), "disabled") || !strcmp(json_string_value(v), "auto"))))
        return api_fail(e, 400, "invalid_value", "truncation", "'truncation' must be \"auto\" or \"disabled\"");
    if ((v = json_object_get(root, "metadata")) && json_is_object(v)) {
        const char *key;
        json_t *x;
        json_object_foreach(v, key, x) if (!json_is_string(x))
            return api_fail(e, 400, "invalid_type", "metadata", "'metadata' must be an object of strings");
    }
    return 0;
}

json_t *oresp_to_chat(json_t *root, resp_lookup_fn lookup, void *user, json_t **conv, json_t **echo, api_error *e) {
    static const char *const keys[] = {
        "model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "tools", "tool_choice", "text",
        "previous_response_id", "store", "stream", "metadata", "parallel_tool_calls", "user", "truncation",
        "reasoning", "include", "service_tier", "prompt_cache_key", "background", NULL};
    *conv = *echo = NULL;
    if (only_keys(root, keys, "", e) || check_inert(root, e)) return NULL;
    json_t *chat = json_object(), *msgs = json_array(), *v;
    int rc = 0;
    json_t *prev = json_object_get(root, "previous_response_id"), *instr = json_object_get(root, "instructions");
    if (prev && !json_is_null(prev)) {
        json_t *old = json_is_string(prev) && lookup ? lookup(user, json_string_value(prev)) : NULL;
        if (!json_is_string(prev))
            rc = api_fail(e, 400, "invalid_type", "previous_response_id", "'previous_response_id' must be a string");
        else if (!old)
            rc = api_fail(e, 404, "previous_response_not_found", "previous_response_id",
                          "Previous response with id '%.60s' not found (never stored, expired or evicted).",
                          json_string_value(prev));
        else json_array_extend(msgs, old);
        json_decref(old);
    }
    if (!rc && instr && !json_is_null(instr) && !json_is_string(instr))
        rc = api_fail(e, 400, "invalid_type", "instructions", "'instructions' must be a string");
    json_t *in = json_object_get(root, "input");
    if (!rc && json_is_string(in))
        json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", "user", "content", in));
    else if (!rc && json_is_array(in))
        for (size_t i = 0; !rc && i < json_array_size(in); i++) rc = add_item(json_array_get(in, i), i, msgs, e);
    else if (!rc)
        rc = api_fail(e, 400, in ? "invalid_type" : "missing_parameter", "input", "'input' must be a string or a list of items");
    if (!rc && !json_array_size(msgs)) rc = api_fail(e, 400, "invalid_value", "input", "'input' has no message");
    json_t *all = json_array();
    if (json_is_string(instr)) json_array_append_new(all, json_pack("{s:s,s:O}", "role", "system", "content", instr));
    json_array_extend(all, msgs);
    json_object_set_new(chat, "messages", all);
    json_t *tools = json_object_get(root, "tools");
    if (!rc && tools && !json_is_null(tools) && !(json_is_array(tools) && !json_array_size(tools))) {
        json_t *t = tools_of(tools, e);
        if (t) json_object_set_new(chat, "tools", t);
        else rc = -1;
    }
    if (!rc) rc = tool_choice_of(json_object_get(root, "tool_choice"), chat, e);
    if (!rc) rc = text_format(json_object_get(root, "text"), chat, e);
    static const struct {
        const char *from, *to;
    } same[] = {{"model", "model"}, {"temperature", "temperature"}, {"top_p", "top_p"}, {"stream", "stream"},
                {"max_output_tokens", "max_tokens"}, {"parallel_tool_calls", "parallel_tool_calls"}};
    for (size_t i = 0; !rc && i < sizeof same / sizeof same[0]; i++)
        if ((v = json_object_get(root, same[i].from)) && !json_is_null(v)) json_object_set(chat, same[i].to, v);
    if (rc) {
        json_decref(msgs);
        json_decref(chat);
        return NULL;
    }
    *conv = msgs;
    *echo = json_object();
    static const char *const echoed[] = {"instructions", "max_output_tokens", "metadata", "previous_response_id",
                                         "temperature", "top_p", "tool_choice", "tools", "text", "parallel_tool_calls"};
    for (size_t i = 0; i < sizeof echoed / sizeof echoed[0]; i++) {
        v = json_object_get(root, echoed[i]);
        json_object_set(*echo, echoed[i], v ? v : json_null());
    }
    return chat;
}

int oresp_parse(const char *body, size_t len, const api_limits *lim, resp_lookup_fn lookup, void *user,
                api_request *rq, api_error *e) {
    memset(rq, 0, sizeof *rq);
    json_t *conv = NULL, *echo = NULL;
    json_t *root = api_load_body(body, len, lim, e), *chat = root ? oresp_to_chat(root, lookup, user, &conv, &echo, e) : NULL;
    int store = !json_is_false(json_object_get(root, "store"));
    json_decref(root);
    if (!chat) return -1;
    int rc = api_parse_chat_root(chat, lim, rq, e);
    json_decref(chat);
    if (!rc) {
        rq->shape = API_SHAPE_RESPONSES;
        rq->store = store;
        rq->conversation = json_dumps(conv, JSON_COMPACT);
        rq->echo = json_dumps(echo, JSON_COMPACT);
        if (!rq->conversation || !rq->echo) {
            api_request_free(rq);
            rc = api_fail(e, 500, NULL, NULL, "out of memory");
        }
    }
    json_decref(conv);
    json_decref(echo);
    return rc;
}
