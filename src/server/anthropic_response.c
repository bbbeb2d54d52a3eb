/*
 * Anthropic Messages responses (see api_stream.h): the whole message
 * {id, type "message", role, model, content blocks, stop_reason,
 * stop_sequence, usage} and its event stream: message_start, ping, per
 * block content_block_start / content_block_delta (text_delta or
 * input_json_delta) / content_block_stop, then message_delta (stop_reason,
 * stop_sequence, the whole usage) and message_stop. Usage as Anthropic
 * counts it: input_tokens excludes the prompt tokens read from the prefix
 * cache (cache_read_input_tokens). A tool call's
 * input is its arguments as the model wrote them (the grammar makes a
 * forced call's arguments valid JSON). Where the chat template reasons
 * (reasoning.h), the reasoning comes first as a thinking block (with an
 * empty signature). Pure formatting over the job's
 * fields; the store and the locks are elsewhere.
 */
#include <stdlib.h>
#include <string.h>

#include "server/api_stream.h"
#include "server/openai_response.h"
#include "app/tool_calls.h"

static const char *error_type(int status) {
    switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return status >= 500 ? "api_error" : "invalid_request_error";
    }
}

static json_t *error_json(const api_error *e) {
    return json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type", error_type(e->status), "message",
                     e->message);
}

char *anthropic_error_body(const api_error *e) {
    json_t *j = error_json(e);
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return s;
}

static void event(const char *name, json_t *data, sbuf *out) {
    char *s = json_dumps(data, JSON_COMPACT);
    if (s) sbuf_printf(out, "event: %s\ndata: %s\n\n", name, s);
    free(s);
    json_decref(data);
}

/* "toolu_" and the call's hex digits (the chat API's call id's). */
static void tool_id(const job *j, int c, int index, char id[40]) {
    char call[32];
    resp_tool_call_id(j, c, index, call);
    snprintf(id, 40, "toolu_%s", call + 5);
}

const char *shape_stop_sequence(const job *j, int c) {
    const choice_state *cs = &j->choices[c];
    if (cs->finish != KVLM_FINISH_STOP || !j->rq.n_stops || !cs->raw.len) return NULL;
    const char *best = NULL;
    size_t best_end = (size_t)-1;
    for (int i = 0; i < j->rq.n_stops; i++) {
        const size_t n = strlen(j->rq.stops[i]);
        const char *at = n ? memmem(cs->raw.data, cs->raw.len, j->rq.stops[i], n) : NULL;
        if (at && (size_t)(at - cs->raw.data) + n < best_end) {
            best_end = (size_t)(at - cs->raw.data) + n;
            best = j->rq.stops[i];
        }
    }
    return best;
}

static json_t *stop_reason(const job *j, int c, int n_calls) {
    const kvlm_finish f = j->choices[c].finish;
    if (f == KVLM_FINISH_LENGTH) return json_string("max_tokens");
    if (n_calls > 0) return json_string("tool_use");
    return json_string(shape_stop_sequence(j, c) ? "stop_sequence" : "end_turn");
}

static json_t *stop_sequence(const job *j, int c) {
    const char *s = shape_stop_sequence(j, c);
    return s ? json_string(s) : json_null();
}

/* Anthropic's usage: input_tokens are the prompt tokens not read from the
 * prefix cache, cache_read_input_tokens those that were. */
static json_t *usage_json(const job *j) {
    return json_pack("{s:i,s:i,s:i,s:i}", "input_tokens", j->prompt_tokens - j->cached_tokens,
                     "cache_creation_input_tokens", 0, "cache_read_input_tokens", j->cached_tokens, "output_tokens",
                     j->completion_tokens);
}

static json_t *message_json(const job *j) {
    return json_pack("{s:s,s:s,s:s,s:s,s:[],s:n,s:n,s:o}", "id", j->id, "type", "message", "role", "assistant",
                     "model", j->s->model_name, "content", "stop_reason", "stop_sequence", "usage", usage_json(j));
}

static void a_start(job *j, sbuf *out) {
    json_t *m = message_json(j);
    event("message_start", json_pack("{s:s,s:o}", "type", "message_start", "message", m), out);
    event("ping", json_pack("{s:s}", "type", "ping"), out);
}

static void close_block(job *j, int c, sbuf *out) {
    choice_state *cs = &j->choices[c];
    if (!cs->sh_open) return;
    event("content_block_stop", json_pack("{s:s,s:i}", "type", "content_block_stop", "index", cs->sh_next - 1), out);
    cs->sh_open = 0;
}

static void a_text(job *j, int c, const char *text, size_t n, sbuf *out) {
    choice_state *cs = &j->choices[c];
    if (cs->sh_open != 1) {
        close_block(j, c, out);
        event("content_block_start", json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_start", "index",
                                               cs->sh_next++, "content_block", "type", "text", "text", ""), out);
        cs->sh_open = 1;
    }
    event("content_block_delta", json_pack("{s:s,s:i,s:{s:s,s:o}}", "type", "content_block_delta", "index",
                                           cs->sh_next - 1, "delta", "type", "text_delta", "text",
                                           ts_json_string(text, n)), out);
}

/* Reasoning: a thinking block (its signature empty: kvlm signs nothing). */
static void a_thinking(job *j, int c, const char *text, size_t n, sbuf *out) {
    choice_state *cs = &j->choices[c];
    if (cs->sh_open != 3) {
        close_block(j, c, out);
        event("content_block_start", json_pack("{s:s,s:i,s:{s:s,s:s,s:s}}", "type", "content_block_start", "index",
                                               cs->sh_next++, "content_block", "type", "thinking", "thinking", "",
                                               "signature", ""), out);
        cs->sh_open = 3;
    }
    event("content_block_delta", json_pack("{s:s,s:i,s:{s:s,s:o}}", "type", "content_block_delta", "index",
                                           cs->sh_next - 1, "delta", "type", "thinking_delta", "thinking",
                                           ts_json_string(text, n)), out);
}

static void a_call(job *j, int c, int index, const char *name, size_t n, sbuf *out) {
    choice_state *cs = &j->choices[c];
    char id[40];
    close_block(j, c, out);
    tool_id(j, c, index, id);
    event("content_block_start", json_pack("{s:s,s:i,s:{s:s,s:s,s:o,s:{}}}", "type", "content_block_start", "index",
                                           cs->sh_next++, "content_block", "type", "tool_use", "id", id, "name",
                                           ts_json_string(name, n), "input"), out);
    cs->sh_open = 2;
    cs->sh_call = index;
}

static void a_args(job *j, int c, int index, const char *text, size_t n, sbuf *out) {
    choice_state *cs = &j->choices[c];
    (void)index;
    if (cs->sh_open != 2 || !n) return;
    event("content_block_delta", json_pack("{s:s,s:i,s:{s:s,s:o}}", "type", "content_block_delta", "index",
                                           cs->sh_next - 1, "delta", "type", "input_json_delta", "partial_json",
                                           ts_json_string(text, n)), out);
}

static void a_finish(job *j, int c, kvlm_finish why, int n_calls, sbuf *out) {
    (void)why;
    j->choices[c].sh_call = n_calls; /* kept for the message_delta */
    close_block(j, c, out);
}

static void a_end(job *j, sbuf *out) {
    /* the whole usage: the prefix cache's share is known only once admitted */
    event("message_delta", json_pack("{s:s,s:{s:o,s:o},s:o}", "type", "message_delta", "delta", "stop_reason",
                                     stop_reason(j, 0, j->choices[0].sh_call), "stop_sequence", stop_sequence(j, 0),
                                     "usage", usage_json(j)), out);
    event("message_stop", json_pack("{s:s}", "type", "message_stop"), out);
}

static void a_error(job *j, const api_error *e, sbuf *out) {
    (void)j;
    event("error", error_json(e), out);
}

/* The arguments as the input object (a call cut short: {}). */
static json_t *input_of(const tc_call *call) {
    json_t *v = call->args.len ? json_loadb(call->args.data, call->args.len, 0, NULL) : NULL;
    if (!json_is_object(v)) {
        json_decref(v);
        v = json_object();
    }
    return v;
}

static char *a_final_body(job *j) {
    const choice_state *cs = &j->choices[0];
    json_t *m = message_json(j), *content = json_object_get(m, "content");
    tc_result r = {0};
    sbuf thinking = {0}, answer = {0};
    const char *text = cs->text.data ? cs->text.data : "";
    size_t len = cs->text.len;
    int n_calls = 0;
    if (j->rq.reasoning) { /* the template reasons: a thinking block first */
        rs_split_all(text, len, j->rq.reasoning == 2, &thinking, &answer);
        if (thinking.len)
            json_array_append_new(content, json_pack("{s:s,s:o,s:s}", "type", "thinking", "thinking",
                                                     ts_json_string(thinking.data, thinking.len), "signature", ""));
        text = answer.data ? answer.data : "";
        len = answer.len;
    }
    const int harmony = j->rq.tool_family == TC_FAMILY_HARMONY;
    if (j->rq.parse_calls && !tc_parse((tc_family)j->rq.tool_family, text, len, &r) && (r.n_calls || harmony)) {
        if (r.reasoning.len) { /* harmony's analysis channel */
            sbuf_add(&thinking, r.reasoning.data, r.reasoning.len);
            json_array_append_new(content, json_pack("{s:s,s:o,s:s}", "type", "thinking", "thinking",
                                                     ts_json_string(r.reasoning.data, r.reasoning.len), "signature",
                                                     ""));
        }
        text = r.content.data ? r.content.data : "";
        len = r.content.len;
        n_calls = r.n_calls;
    }
    if (len || (!n_calls && !thinking.len))
        json_array_append_new(content, json_pack("{s:s,s:o}", "type", "text", "text", ts_json_string(text, len)));
    for (int k = 0; k < n_calls; k++) {
        char id[40];
        tool_id(j, 0, k, id);
        json_array_append_new(content, json_pack("{s:s,s:s,s:s,s:o}", "type", "tool_use", "id", id, "name",
                                                 r.calls[k].name, "input", input_of(&r.calls[k])));
    }
    tc_result_free(&r);
    sbuf_free(&thinking);
    sbuf_free(&answer);
    json_object_set_new(m, "stop_reason", stop_reason(j, 0, n_calls));
    json_object_set_new(m, "stop_sequence", stop_sequence(j, 0));
    char *s = json_dumps(m, JSON_COMPACT);
    json_decref(m);
    return s;
}

static void a_done(job *j) { (void)j; }

const stream_ops anthropic_stream_ops = {a_start, a_text, a_call, a_args, a_finish, a_end, a_error, a_final_body,
                                         a_done, a_thinking};
