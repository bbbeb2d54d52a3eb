/*
 * Anthropic Messages bodies translated into chat bodies (see
 * anthropic_request.h). Every check names the field the way Anthropic's
 * request shape spells it (messages[1].content[0].tool_use_id, ...).
 */
#include "app/anthropic_request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every key of o in keys, else a 400 naming param.key. */
static int only_keys(json_t *o, const char *const *keys, const char *param, api_error *e) {
    return api_only_keys(o, keys, param, "%s: Extra inputs are not permitted", e);
}

static int valid_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 64) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* A block's text: "text" must be a string. */
static int text_block(json_t *b, const char *param, sbuf *out, api_error *e) {
    static const char *const keys[] = {"type", "text", "cache_control", "citations", NULL};
    json_t *t = json_object_get(b, "text");
    if (only_keys(b, keys, param, e)) return -1;
    if (!json_is_string(t)) return api_fail(e, 400, "invalid_type", param, "%s.text: Field required (a string)", param);
    sbuf_add(out, json_string_value(t), json_string_length(t));
    return 0;
}

/* "system": a string or a list of text blocks, joined by newlines. */
static int system_text(json_t *sys, sbuf *out, api_error *e) {
    if (json_is_string(sys)) {
        sbuf_add(out, json_string_value(sys), json_string_length(sys));
        return 0;
    }
    if (!json_is_array(sys)) return api_fail(e, 400, "invalid_type", "system", "system: must be a string or a list of text blocks");
    size_t i;
    json_t *b;
    json_array_foreach(sys, i, b) {
        char p[64];
        snprintf(p, sizeof p, "system[%zu]", i);
        const char *type = json_string_value(json_object_get(b, "type"));
        if (!json_is_object(b) || !type || strcmp(type, "text"))
            return api_fail(e, 400, "invalid_value", p, "%s: system blocks must be {\"type\": \"text\", \"text\": ...}", p);
        if (i) sbuf_adds(out, "\n");
        if (text_block(b, p, out, e)) return -1;
    }
    return 0;
}

/* A tool_result's content: a string or text blocks. */
static int result_text(json_t *c, const char *param, sbuf *out, api_error *e) {
    if (!c || json_is_null(c)) return 0;
    if (json_is_string(c)) {
        sbuf_add(out, json_string_value(c), json_string_length(c));
        return 0;
    }
    if (!json_is_array(c)) return api_fail(e, 400, "invalid_type", param, "%s: must be a string or a list of text blocks", param);
    size_t i;
    json_t *b;
    json_array_foreach(c, i, b) {
        char p[160];
        snprintf(p, sizeof p, "%s[%zu]", param, i);
        const char *type = json_string_value(json_object_get(b, "type"));
        if (!json_is_object(b) || !type || strcmp(type, "text"))
            return api_fail(e, 400, "unsupported_content", p, "%s: only text blocks are supported in a tool result", p);
        if (i) sbuf_adds(out, "\n");
        if (text_block(b, p, out, e)) return -1;
    }
    return 0;
}

static json_t *str_of(const sbuf *b) { return json_stringn(b->data ? b->data : "", b->len); }

/* One Anthropic message appended to msgs as chat turns. */
static int add_message(json_t *m, size_t i, json_t *msgs, api_error *e) {
    static const char *const keys[] = {"role", "content", NULL};
    char p[64];
    snprintf(p, sizeof p, "messages[%zu]", i);
    if (!json_is_object(m)) return api_fail(e, 400, "invalid_type", p, "%s: must be an object with role and content", p);
    if (only_keys(m, keys, p, e)) return -1;
    const char *role = json_string_value(json_object_get(m, "role"));
    json_t *c = json_object_get(m, "content");
    snprintf(p, sizeof p, "messages[%zu].role", i);
    if (!role || (strcmp(role, "user") && strcmp(role, "assistant")))
        return api_fail(e, 400, "invalid_value", p, "%s: must be \"user\" or \"assistant\"", p);
    const int user = !strcmp(role, "user");
    snprintf(p, sizeof p, "messages[%zu].content", i);
    if (json_is_string(c)) {
        json_array_append_new(msgs, json_pack("{s:s,s:O}", "role", role, "content", c));
        return 0;
    }
    if (!json_is_array(c)) return api_fail(e, 400, "invalid_type", p, "%s: must be a string or a list of content blocks", p);
    sbuf text = {0};
    json_t *calls = json_array();
    int rc = 0;
    size_t k;
    json_t *b;
    json_array_foreach(c, k, b) {
        char q[96];
        snprintf(q, sizeof q, "messages[%zu].content[%zu]", i, k);
        const char *type = json_string_value(json_object_get(b, "type"));
        if (!json_is_object(b) || !type) {
            rc = api_fail(e, 400, "invalid_type", q, "%s: must be a content block with a type", q);
            break;
        }
        if (!strcmp(type, "text")) {
            if (text.len) sbuf_adds(&text, "\n");
            if ((rc = text_block(b, q, &text, e))) break;
        } else if (!strcmp(type, "tool_use") && !user) {
            static const char *const tk[] = {"type", "id", "name", "input", "cache_control", NULL};
            json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name"), *in = json_object_get(b, "input");
            if ((rc = only_keys(b, tk, q, e))) break;
            if (!json_is_string(id) || !json_is_string(name) || !json_is_object(in)) {
                rc = api_fail(e, 400, "invalid_value", q, "%s: a tool_use block needs id and name (strings) and input (an object)", q);
                break;
            }
            char *args = json_dumps(in, JSON_COMPACT | JSON_PRESERVE_ORDER);
            json_array_append_new(calls, json_pack("{s:O,s:s,s:{s:O,s:s}}", "id", id, "type", "function", "function",
                                                   "name", name, "arguments", args ? args : "{}"));
            free(args);
        } else if (!strcmp(type, "tool_result") && user) {
            static const char *const rk[] = {"type", "tool_use_id", "content", "is_error", "cache_control", NULL};
            json_t *id = json_object_get(b, "tool_use_id"), *err = json_object_get(b, "is_error");
            char r[128];
            snprintf(r, sizeof r, "%s.content", q);
            sbuf out = {0};
            if (!(rc = only_keys(b, rk, q, e)) && !json_is_string(id))
                rc = api_fail(e, 400, "invalid_value", q, "%s.tool_use_id: Field required (a string)", q);
            if (!rc && err && !json_is_boolean(err))
                rc = api_fail(e, 400, "invalid_type", q, "%s.is_error: must be a boolean", q);
            if (!rc) rc = result_text(json_object_get(b, "content"), r, &out, e);
            if (!rc)
                json_array_append_new(msgs, json_pack("{s:s,s:O,s:o}", "role", "tool", "tool_call_id", id, "content",
                                                      str_of(&out)));
            sbuf_free(&out);
            if (rc) break;
        } else if ((!strcmp(type, "thinking") || !strcmp(type, "redacted_thinking")) && !user) {
            continue; /* earlier reasoning: not shown to the model again */
        } else {
            rc = api_fail(e, 400, "unsupported_content", q, "%s: content blocks of type '%.32s' are not supported in %s turns",
                          q, type, role);
            break;
        }
    }
    if (!rc && (text.len || json_array_size(calls) || !user)) {
        json_t *turn = json_pack("{s:s,s:o}", "role", role, "content", str_of(&text));
        if (json_array_size(calls)) json_object_set(turn, "tool_calls", calls);
        json_array_append_new(msgs, turn);
    }
    json_decref(calls);
    sbuf_free(&text);
    if (!rc && text.failed) rc = api_fail(e, 500, NULL, NULL, "out of memory");
    return rc;
}

static json_t *tools_of(json_t *tools, api_error *e) {
    static const char *const keys[] = {"name", "description", "input_schema", "cache_control", "type", NULL};
    if (!json_is_array(tools)) return api_fail(e, 400, "invalid_type", "tools", "tools: must be a list"), NULL;
    json_t *out = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        char p[64];
        snprintf(p, sizeof p, "tools[%zu]", i);
        const char *type = json_string_value(json_object_get(t, "type"));
        json_t *name = json_object_get(t, "name"), *desc = json_object_get(t, "description"),
               *schema = json_object_get(t, "input_schema");
        int bad = !json_is_object(t) ? api_fail(e, 400, "invalid_type", p, "%s: must be an object", p)
                  : only_keys(t, keys, p, e);
        if (!bad && type && strcmp(type, "custom"))
            bad = api_fail(e, 400, "unsupported_tool", p, "%s: server tools ('%.40s') are not supported; give custom tools "
                           "with name and input_schema", p, type);
        if (!bad && (!json_is_string(name) || !valid_name(json_string_value(name))))
            bad = api_fail(e, 400, "invalid_value", p, "%s.name: must be 1 to 64 letters, digits, '_' or '-'", p);
        if (!bad && desc && !json_is_string(desc))
            bad = api_fail(e, 400, "invalid_type", p, "%s.description: must be a string", p);
        if (!bad && !json_is_object(schema))
            bad = api_fail(e, 400, "invalid_value", p, "%s.input_schema: Field required (a JSON Schema object)", p);
        if (bad) {
            json_decref(out);
            return NULL;
        }
        /* the order OpenAI's clients write (templates render the keys in order) */
        json_t *fn = json_pack("{s:O}", "name", name);
        if (desc) json_object_set(fn, "description", desc);
        json_object_set(fn, "parameters", schema);
        json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", fn));
    }
    return out;
}

/* tool_choice into the chat body (tools already there). */
static int tool_choice_of(json_t *tc, json_t *chat, api_error *e) {
    static const char *const keys[] = {"type", "name", "disable_parallel_tool_use", NULL};
    if (!tc || json_is_null(tc)) return 0;
    const char *type = json_string_value(json_object_get(tc, "type"));
    json_t *name = json_object_get(tc, "name"), *dp = json_object_get(tc, "disable_parallel_tool_use");
    if (!json_is_object(tc) || !type)
        return api_fail(e, 400, "invalid_type", "tool_choice", "tool_choice: must be an object with a type");
    if (only_keys(tc, keys, "tool_choice", e)) return -1;
    if (dp && !json_is_boolean(dp))
        return api_fail(e, 400, "invalid_type", "tool_choice", "tool_choice.disable_parallel_tool_use: must be a boolean");
    json_t *v;
    if (!strcmp(type, "auto")) v = json_string("auto");
    else if (!strcmp(type, "any")) v = json_string("required");
    else if (!strcmp(type, "none")) v = json_string("none");
    else if (!strcmp(type, "tool")) {
        if (!json_is_string(name))
            return api_fail(e, 400, "invalid_value", "tool_choice", "tool_choice.name: Field required for type \"tool\"");
        v = json_pack("{s:s,s:{s:O}}", "type", "function", "function", "name", name);
    } else
        return api_fail(e, 400, "invalid_value", "tool_choice", "tool_choice.type: must be auto, any, tool or none");
    if (strcmp(type, "tool") && name)
        return json_decref(v), api_fail(e, 400, "invalid_value", "tool_choice", "tool_choice.name: only with type \"tool\"");
    if (!json_object_get(chat, "tools") && (!strcmp(type, "auto") || !strcmp(type, "none"))) {
        json_decref(v); /* nothing to choose from: as without tool_choice */
        return 0;
    }
    if (!strcmp(type, "none")) json_object_del(chat, "tools"); /* as the chat API leaves them out */
    json_object_set_new(chat, "tool_choice", v);
    return 0;
}

/* Checks metadata and thinking, which change nothing. */
static int check_inert(json_t *root, api_error *e) {
    static const char *const mkeys[] = {"user_id", NULL}, *const tkeys[] = {"type", "budget_tokens", NULL};
    json_t *m = json_object_get(root, "metadata"), *t = json_object_get(root, "thinking");
    if (m && !json_is_null(m)) {
        json_t *u = json_object_get(m, "user_id");
        if (!json_is_object(m)) return api_fail(e, 400, "invalid_type", "metadata", "metadata: must be an object");
        if (only_keys(m, mkeys, "metadata", e)) return -1;
        if (u && !json_is_null(u) && !json_is_string(u))
            return api_fail(e, 400, "invalid_type", "metadata", "metadata.user_id: must be a string");
    }
    if (t && !json_is_null(t)) {
        const char *type = json_string_value(json_object_get(t, "type"));
        json_t *bt = json_object_get(t, "budget_tokens");
        if (!json_is_object(t) || !type || (strcmp(type, "enabled") && strcmp(type, "disabled")))
            return api_fail(e, 400, "invalid_value", "thinking", "thinking.type: must be \"enabled\" or \"disabled\"");
        if (only_keys(t, tkeys, "thinking", e)) return -1;
        if (!strcmp(type, "enabled") && (!json_is_integer(bt) || json_integer_value(bt) < 1))
            return api_fail(e, 400, "invalid_value", "thinking", "thinking.budget_tokens: a positive integer is required");
    }
    return 0;
}

/* A number field in [lo, hi] copied to the chat body under `to`. */
static int copy_num(json_t *root, const char *key, double lo, double hi, json_t *chat, api_error *e) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v) || json_number_value(v) < lo || json_number_value(v) > hi)
        return api_fail(e, 400, "invalid_value", key, "%s: must be a number from %g to %g", key, lo, hi);
    json_object_set(chat, key, v);
    return 0;
}

json_t *anth_to_chat(json_t *root, int count_only, api_error *e) {
    static const char *const keys[] = {"model", "messages", "max_tokens", "system", "stop_sequences", "stream",
                                       "temperature", "top_p", "top_k", "metadata", "tools", "tool_choice",
                                       "thinking", "service_tier", NULL};
    static const char *const count_keys[] = {"model", "messages", "system", "tools", "tool_choice", "thinking", NULL};
    if (only_keys(root, count_only ? count_keys : keys, "", e) || check_inert(root, e)) return NULL;
    json_t *chat = json_object(), *msgs = json_array(), *v;
    json_object_set_new(chat, "messages", msgs);
    int rc = 0;
    if ((v = json_object_get(root, "model"))) json_object_set(chat, "model", v);
    json_t *sys = json_object_get(root, "system");
    if (sys && !json_is_null(sys)) {
        sbuf s = {0};
        if (!(rc = system_text(sys, &s, e))) json_array_append_new(msgs, json_pack("{s:s,s:o}", "role", "system", "content", str_of(&s)));
        sbuf_free(&s);
    }
    json_t *m = json_object_get(root, "messages");
    if (!rc && (!json_is_array(m) || !json_array_size(m)))
        rc = api_fail(e, 400, m ? "invalid_type" : "missing_parameter", "messages", "messages: Field required (a non-empty list)");
    for (size_t i = 0; !rc && i < json_array_size(m); i++) rc = add_message(json_array_get(m, i), i, msgs, e);
    json_t *tools = json_object_get(root, "tools");
    if (!rc && tools && !json_is_null(tools) && !(json_is_array(tools) && !json_array_size(tools))) {
        json_t *t = tools_of(tools, e);
        if (t) json_object_set_new(chat, "tools", t);
        else rc = -1;
    }
    if (!rc) rc = tool_choice_of(json_object_get(root, "tool_choice"), chat, e);
    if (!rc && !count_only) {
        json_t *mt = json_object_get(root, "max_tokens");
        if (!mt || json_is_null(mt)) rc = api_fail(e, 400, "missing_parameter", "max_tokens", "max_tokens: Field required");
        else if (!json_is_integer(mt) || json_integer_value(mt) < 1)
            rc = api_fail(e, 400, "invalid_value", "max_tokens", "max_tokens: must be an integer of at least 1");
        else json_object_set(chat, "max_tokens", mt);
    }
    if (!rc && !count_only) rc = copy_num(root, "temperature", 0, 1, chat, e);
    if (!rc && !count_only) rc = copy_num(root, "top_p", 0, 1, chat, e);
    if (!rc && !count_only && (v = json_object_get(root, "top_k")) && !json_is_null(v)) {
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            rc = api_fail(e, 400, "invalid_value", "top_k", "top_k: must be an integer of at least 0");
        else json_object_set(chat, "top_k", v);
    }
    if (!rc && !count_only && (v = json_object_get(root, "stream")) && !json_is_null(v)) {
        if (!json_is_boolean(v)) rc = api_fail(e, 400, "invalid_type", "stream", "stream: must be a boolean");
        else json_object_set(chat, "stream", v);
    }
    if (!rc && !count_only && (v = json_object_get(root, "stop_sequences")) && !json_is_null(v)) {
        size_t i;
        json_t *x;
        if (!json_is_array(v)) rc = api_fail(e, 400, "invalid_type", "stop_sequences", "stop_sequences: must be a list of strings");
        json_array_foreach(v, i, x) if (!rc && !json_is_string(x))
            rc = api_fail(e, 400, "invalid_type", "stop_sequences", "stop_sequences[%zu]: must be a string", i);
        if (!rc && json_array_size(v)) json_object_set(chat, "stop", v);
    }
    if (!rc && (v = json_object_get(root, "service_tier")) && !json_is_null(v) && !json_is_string(v))
        rc = api_fail(e, 400, "invalid_type", "service_tier", "service_tier: must be a string");
    if (rc) {
        json_decref(chat);
        return NULL;
    }
    return chat;
}

int anth_parse_messages(const char *body, size_t len, const api_limits *lim, api_request *rq, api_error *e) {
    memset(rq, 0, sizeof *rq);
    json_t *root = api_load_body(body, len, lim, e), *chat = root ? anth_to_chat(root, 0, e) : NULL;
    json_decref(root);
    if (!chat) return -1;
    int rc = api_parse_chat_root(chat, lim, rq, e);
    json_decref(chat);
    if (!rc) rq->shape = API_SHAPE_ANTHROPIC;
    return rc;
}

int anth_count_tokens(const char *body, size_t len, const api_limits *lim, int *n_tokens, api_error *e) {
    *n_tokens = 0;
    json_t *root = api_load_body(body, len, lim, e), *chat = root ? anth_to_chat(root, 1, e) : NULL;
    json_decref(root);
    if (!chat) return -1;
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = 0;
    json_t *m = json_object_get(chat, "model");
    if (m && (!json_is_string(m) || strcmp(json_string_value(m), lim->model_name)))
        rc = api_fail(e, 404, "model_not_found", "model", "model: '%.100s' does not exist; this server serves '%s'",
                      json_is_string(m) ? json_string_value(m) : "?", lim->model_name);
    if (!rc) {
        json_object_del(chat, "tool_choice");
        rc = api_prompt_ids(chat, lim, 1, 1, &ids, &n, e);
    }
    free(ids);
    json_decref(chat);
    if (!rc) *n_tokens = (int)n;
    return rc;
}
