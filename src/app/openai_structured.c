/*
 * Checking response_format, grammar, regex, tools and tool_choice (see
 * openai_structured.h). What is kept is text: the schema, GBNF or regex,
 * and the tools as JSON, for the constraint built later; nothing here
 * compiles anything.
 */
#include "app/openai_structured.h"

#include <stdlib.h>
#include <string.h>

#include "app/tool_calls.h"

/* OpenAI's rule for function and schema names: 1-64 of [A-Za-z0-9_-]. */
static int valid_name(const char *s, size_t n) {
    if (n == 0 || n > 64) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* Every key of o must be in keys; param names the object. */
static int only_keys(json_t *o, const char *const *keys, const char *param, api_error *e) {
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        int known = 0;
        for (const char *const *k = keys; *k; k++) known |= !strcmp(key, *k);
        if (!known) {
            char p[64];
            snprintf(p, sizeof p, "%s.%.32s", param, key);
            return api_fail(e, 400, "unknown_parameter", p, "Unrecognized argument '%s'", p);
        }
    }
    return 0;
}

static int set_text(api_request *rq, api_format f, const char *s, size_t n, api_error *e) {
    rq->format = f;
    if (!(rq->format_text = malloc(n + 1))) return api_fail(e, 500, NULL, NULL, "out of memory");
    memcpy(rq->format_text, s, n);
    rq->format_text[n] = 0;
    rq->format_len = n;
    return 0;
}

static int parse_json_schema(json_t *js, api_request *rq, api_error *e) {
    static const char *const keys[] = {"name", "description", "schema", "strict", NULL};
    const char *P = "response_format.json_schema";
    if (!json_is_object(js))
        return api_fail(e, 400, js ? "invalid_type" : "missing_parameter", P,
                        "'%s' must be an object with 'name' and 'schema'", P);
    if (only_keys(js, keys, P, e)) return -1;
    json_t *name = json_object_get(js, "name"), *desc = json_object_get(js, "description"),
           *schema = json_object_get(js, "schema"), *strict = json_object_get(js, "strict");
    if (!json_is_string(name) || !valid_name(json_string_value(name), json_string_length(name)))
        return api_fail(e, 400, name ? "invalid_value" : "missing_parameter", "response_format.json_schema.name",
                        "'response_format.json_schema.name' must be 1 to 64 letters, digits, '_' or '-'");
    if (desc && !json_is_null(desc) && !json_is_string(desc))
        return api_fail(e, 400, "invalid_type", "response_format.json_schema.description",
                        "'response_format.json_schema.description' must be a string");
    if (strict && !json_is_null(strict) && !json_is_boolean(strict))
        return api_fail(e, 400, "invalid_type", "response_format.json_schema.strict",
                        "'response_format.json_schema.strict' must be a boolean");
    if (!schema || json_is_null(schema)) { /* OpenAI's schema is optional: any JSON object then */
        rq->format = API_FORMAT_JSON_OBJECT;
        return 0;
    }
    if (!json_is_object(schema))
        return api_fail(e, 400, "invalid_type", "response_format.json_schema.schema",
                        "'response_format.json_schema.schema' must be a JSON Schema object");
    char *text = json_dumps(schema, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
    if (!text) return api_fail(e, 500, NULL, NULL, "out of memory");
    int rc = set_text(rq, API_FORMAT_JSON_SCHEMA, text, strlen(text), e);
    free(text);
    return rc;
}

static int parse_response_format(json_t *root, api_request *rq, api_error *e) {
    json_t *v = json_object_get(root, "response_format");
    if (!v || json_is_null(v)) return 0;
    const char *type = json_string_value(json_object_get(v, "type"));
    if (!json_is_object(v) || !type)
        return api_fail(e, 400, "invalid_type", "response_format", "'response_format' must be an object with a 'type'");
    if (!strcmp(type, "text")) {
        static const char *const keys[] = {"type", NULL};
        return only_keys(v, keys, "response_format", e);
    }
    if (!strcmp(type, "json_object")) {
        static const char *const keys[] = {"type", NULL};
        if (only_keys(v, keys, "response_format", e)) return -1;
        rq->format = API_FORMAT_JSON_OBJECT;
        return 0;
    }
    if (!strcmp(type, "json_schema")) {
        static const char *const keys[] = {"type", "json_schema", NULL};
        if (only_keys(v, keys, "response_format", e)) return -1;
        return parse_json_schema(json_object_get(v, "json_schema"), rq, e);
    }
    return api_fail(e, 400, "invalid_value", "response_format.type",
                    "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", got '%.40s'", type);
}

/* kvlm's extensions: "grammar" (GBNF) and "regex", each a non-empty string. */
static int parse_extension(json_t *root, const char *key, api_format f, size_t max, api_request *rq, api_error *e) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > max)
        return api_fail(e, 400, json_is_string(v) ? "invalid_value" : "invalid_type", key,
                        "'%s' must be a non-empty string of at most %zu bytes", key, max);
    if (rq->format != API_FORMAT_TEXT)
        return api_fail(e, 400, "invalid_value", key,
                        "give at most one of 'response_format' (json_object or json_schema), 'grammar' and 'regex'");
    return set_text(rq, f, json_string_value(v), json_string_length(v), e);
}

/* One entry of "tools": {"type": "function", "function": {"name",
 * "description", "parameters", "strict"}}. */
static int check_tool(json_t *t, size_t i, api_error *e) {
    static const char *const keys[] = {"type", "function", NULL};
    static const char *const fkeys[] = {"name", "description", "parameters", "strict", NULL};
    char p[64];
    snprintf(p, sizeof p, "tools[%zu]", i);
    const char *type = json_string_value(json_object_get(t, "type"));
    if (!json_is_object(t) || !type || strcmp(type, "function"))
        return api_fail(e, 400, "invalid_value", p,
                        "'%s' must be {\"type\": \"function\", \"function\": {\"name\": ...}}", p);
    if (only_keys(t, keys, p, e)) return -1;
    json_t *f = json_object_get(t, "function");
    snprintf(p, sizeof p, "tools[%zu].function", i);
    if (!json_is_object(f)) return api_fail(e, 400, f ? "invalid_type" : "missing_parameter", p, "'%s' must be an object", p);
    if (only_keys(f, fkeys, p, e)) return -1;
    json_t *name = json_object_get(f, "name"), *d = json_object_get(f, "description"),
           *params = json_object_get(f, "parameters"), *strict = json_object_get(f, "strict");
    snprintf(p, sizeof p, "tools[%zu].function.name", i);
    if (!json_is_string(name) || !valid_name(json_string_value(name), json_string_length(name)))
        return api_fail(e, 400, name ? "invalid_value" : "missing_parameter", p,
                        "'%s' must be 1 to 64 letters, digits, '_' or '-'", p);
    snprintf(p, sizeof p, "tools[%zu].function.description", i);
    if (d && !json_is_null(d) && !json_is_string(d)) return api_fail(e, 400, "invalid_type", p, "'%s' must be a string", p);
    snprintf(p, sizeof p, "tools[%zu].function.parameters", i);
    if (params && !json_is_null(params) && !json_is_object(params))
        return api_fail(e, 400, "invalid_type", p, "'%s' must be a JSON Schema object", p);
    snprintf(p, sizeof p, "tools[%zu].function.strict", i);
    if (strict && !json_is_null(strict) && !json_is_boolean(strict))
        return api_fail(e, 400, "invalid_type", p, "'%s' must be a boolean", p);
    return 0;
}

static const char *tool_name(json_t *t) { return json_string_value(json_object_get(json_object_get(t, "function"), "name")); }

static int parse_tool_choice(json_t *root, json_t *tools, api_request *rq, api_error *e) {
    json_t *v = json_object_get(root, "tool_choice");
    size_t n = json_array_size(tools);
    rq->tool_choice = n ? API_TOOLS_AUTO : API_TOOLS_OFF;
    if (!v || json_is_null(v)) return 0;
    const char *s = json_string_value(v);
    if (s && !strcmp(s, "none")) rq->tool_choice = API_TOOLS_OFF;
    else if (s && !strcmp(s, "auto")) ;
    else if (s && !strcmp(s, "required")) rq->tool_choice = API_TOOLS_REQUIRED;
    else if (json_is_object(v)) {
        static const char *const keys[] = {"type", "function", NULL}, *const fkeys[] = {"name", NULL};
        const char *type = json_string_value(json_object_get(v, "type"));
        json_t *f = json_object_get(v, "function");
        const char *name = json_string_value(json_object_get(f, "name"));
        if (!type || strcmp(type, "function") || !json_is_object(f) || !name)
            return api_fail(e, 400, "invalid_value", "tool_choice",
                            "'tool_choice' naming a function must be {\"type\": \"function\", \"function\": "
                            "{\"name\": string}}");
        if (only_keys(v, keys, "tool_choice", e) || only_keys(f, fkeys, "tool_choice.function", e)) return -1;
        size_t i;
        json_t *t;
        int found = 0;
        json_array_foreach(tools, i, t) found |= !strcmp(tool_name(t), name);
        if (n && !found)
            return api_fail(e, 400, "invalid_value", "tool_choice.function.name",
                            "'tool_choice' names the function '%.64s', which is not in 'tools'", name);
        rq->tool_choice = API_TOOLS_NAMED;
        if (!(rq->tool_name = strdup(name))) return api_fail(e, 500, NULL, NULL, "out of memory");
    } else
        return api_fail(e, 400, "invalid_value", "tool_choice",
                        "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                        "\"function\": {\"name\": string}}");
    if ((rq->tool_choice == API_TOOLS_REQUIRED || rq->tool_choice == API_TOOLS_NAMED) && !n)
        return api_fail(e, 400, "invalid_value", "tool_choice",
                        "'tool_choice' %s needs 'tools' (a non-empty list)",
                        rq->tool_choice == API_TOOLS_NAMED ? "naming a function" : "\"required\"");
    if ((rq->tool_choice == API_TOOLS_REQUIRED || rq->tool_choice == API_TOOLS_NAMED) && rq->format != API_FORMAT_TEXT)
        return api_fail(e, 400, "invalid_value", "tool_choice",
                        "'tool_choice' %s cannot be combined with 'response_format', 'grammar' or 'regex': a forced "
                        "call has its own format",
                        rq->tool_choice == API_TOOLS_NAMED ? "naming a function" : "\"required\"");
    return 0;
}

static int parse_tools(json_t *root, const api_limits *lim, api_request *rq, api_error *e) {
    json_t *tools = json_object_get(root, "tools");
    if (tools && !json_is_null(tools) && !json_is_array(tools))
        return api_fail(e, 400, "invalid_type", "tools", "'tools' must be a list of functions");
    size_t n = json_array_size(tools);
    if (n > API_MAX_TOOLS)
        return api_fail(e, 400, "invalid_value", "tools", "'tools' has %zu functions; at most %d", n, API_MAX_TOOLS);
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(tools, i);
        if (check_tool(t, i, e)) return -1;
        for (size_t k = 0; k < i; k++)
            if (!strcmp(tool_name(json_array_get(tools, k)), tool_name(t))) {
                char p[64];
                snprintf(p, sizeof p, "tools[%zu].function.name", i);
                return api_fail(e, 400, "invalid_value", p, "'%s' repeats the name '%s' of tools[%zu]", p,
                                tool_name(t), k);
            }
    }
    if (parse_tool_choice(root, n ? tools : NULL, rq, e)) return -1;
    if (rq->tool_choice == API_TOOLS_OFF) return 0;
    rq->parse_calls = rq->format == API_FORMAT_TEXT;
    if (!(rq->tools_json = json_dumps(tools, JSON_COMPACT | JSON_PRESERVE_ORDER)))
        return api_fail(e, 500, NULL, NULL, "out of memory");
    rq->tool_family = lim->tpl ? lim->tpl->tool_family : TC_FAMILY_GENERIC;
    return 0;
}

int api_parse_structured(json_t *root, int chat, const api_limits *lim, api_request *rq, api_error *e) {
    if (parse_response_format(root, rq, e) ||
        parse_extension(root, "grammar", API_FORMAT_GRAMMAR, API_MAX_GRAMMAR_BYTES, rq, e) ||
        parse_extension(root, "regex", API_FORMAT_REGEX, API_MAX_REGEX_BYTES, rq, e))
        return -1;
    return chat ? parse_tools(root, lim, rq, e) : 0;
}
