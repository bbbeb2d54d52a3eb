/*
 * OpenAI Responses responses (see api_stream.h): the response object
 * {id "resp_...", object "response", created_at, status, output items
 * (an assistant message with one output_text part, function_call items),
 * usage, the request fields it repeats} and its event stream, every event
 * with a sequence_number from 0: response.created, response.in_progress,
 * per item response.output_item.added, then for a message
 * response.content_part.added, response.output_text.delta...,
 * response.output_text.done, response.content_part.done, for a call
 * response.function_call_arguments.delta... and .done, then
 * response.output_item.done. Where the chat template reasons
 * (reasoning.h), the reasoning comes first as a reasoning item
 * {type "reasoning", id "rs_...", summary [], content [{type
 * "reasoning_text", text}]}, streamed as output_item.added,
 * content_part.added, response.reasoning_text.delta... and .done,
 * content_part.done, output_item.done; the answer follows as the message,
 * and the store keeps only the answer as the assistant's turn; finally response.completed (or
 * response.incomplete when max_output_tokens cut it short). Item ids are
 * derived from the response id, so the stream's and the final object's
 * agree. A finished response is kept in the store (responses_store.h)
 * unless the request said store: false.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/api_stream.h"
#include "server/openai_response.h"
#include "server/responses_store.h"
#include "app/reasoning.h"
#include "app/tool_calls.h"

/* "msg_" or "fc_" and hex digits of the response id and the call index. */
static void item_id(const job *j, const char *prefix, int index, char id[48]) {
    uint64_t h = 1469598103934665603ull;
    for (const char *p = j->id; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    for (const char *p = prefix; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h = (h ^ (uint64_t)index) * 1099511628211ull;
    snprintf(id, 48, "%s%016llx%08x", prefix, (unsigned long long)h, (unsigned)(h >> 21));
}

static json_t *message_item(const job *j, const char *status, const char *text, size_t n, int with_part) {
    char id[48];
    item_id(j, "msg_", 0, id);
    json_t *content = json_array();
    if (with_part)
        json_array_append_new(content, json_pack("{s:s,s:o,s:[]}", "type", "output_text", "text", ts_json_string(text, n),
                                                 "annotations"));
    return json_pack("{s:s,s:s,s:s,s:s,s:o}", "type", "message", "id", id, "status", status, "role", "assistant",
                     "content", content);
}

json_t *responses_reasoning_item(const job *j, const char *status, const char *text, size_t n, int with_part) {
    char id[48];
    item_id(j, "rs_", 0, id);
    json_t *content = json_array();
    if (with_part)
        json_array_append_new(content, json_pack("{s:s,s:o}", "type", "reasoning_text", "text", ts_json_string(text, n)));
    return json_pack("{s:s,s:s,s:[],s:o,s:s}", "type", "reasoning", "id", id, "summary", "content", content, "status",
                     status);
}

static json_t *call_item(const job *j, int index, const char *status, const char *name, size_t name_len,
                         const char *args, size_t args_len) {
    char id[48], call[32];
    item_id(j, "fc_", index, id);
    resp_tool_call_id(j, 0, index, call);
    return json_pack("{s:s,s:s,s:s,s:o,s:o,s:s}", "type", "function_call", "id", id, "call_id", call, "name",
                     ts_json_string(name, name_len), "arguments", ts_json_string(args, args_len), "status", status);
}

/* The response object; output NULL: an empty list. */
static json_t *response_json(const job *j, const char *status, json_t *output, int with_usage) {
    json_t *o = json_loads(j->rq.echo ? j->rq.echo : "{}", 0, NULL);
    if (!o) o = json_object();
    json_object_set_new(o, "id", json_string(j->id));
    json_object_set_new(o, "object", json_string("response"));
    json_object_set_new(o, "created_at", json_integer(j->created));
    json_object_set_new(o, "status", json_string(status));
    json_object_set_new(o, "error", json_null());
    json_object_set_new(o, "incomplete_details", !strcmp(status, "incomplete")
                                                     ? json_pack("{s:s}", "reason", "max_output_tokens")
                                                     : json_null());
    json_object_set_new(o, "model", json_string(j->s->model_name));
    json_object_set_new(o, "output", output ? output : json_array());
    json_object_set_new(o, "store", json_boolean(j->rq.store));
    json_object_set_new(o, "usage", with_usage ? json_pack("{s:i,s:{s:i},s:i,s:{s:i},s:i}", "input_tokens",
                                                           j->prompt_tokens, "input_tokens_details", "cached_tokens",
                                                           j->cached_tokens, "output_tokens", j->completion_tokens,
                                                           "output_tokens_details", "reasoning_tokens", j->reasoning_tokens,
                                                           "total_tokens", j->prompt_tokens + j->completion_tokens)
                                               : json_null());
    return o;
}

static const char *final_status(const job *j) {
    return j->choices[0].finish == KVLM_FINISH_LENGTH ? "incomplete" : "completed";
}

/* The output items of the finished choice, and its assistant turn as a
 * chat message (for the store) when turn is not NULL. */
static json_t *output_items(const job *j, json_t **turn) {
    const choice_state *cs = &j->choices[0];
    json_t *out = json_array();
    tc_result r = {0};
    const char *text = cs->text.data ? cs->text.data : "";
    size_t len = cs->text.len;
    int n_calls = 0;
    sbuf thinking = {0}, answer = {0};
    if (j->rq.reasoning) { /* the template reasons: a reasoning item first */
        rs_split_all(text, len, j->rq.reasoning == 2, &thinking, &answer);
        if (thinking.len)
            json_array_append_new(out, responses_reasoning_item(j, "completed", thinking.data, thinking.len, 1));
        text = answer.data ? answer.data : "";
        len = answer.len;
    }
    const int harmony = j->rq.tool_family == TC_FAMILY_HARMONY;
    if (j->rq.parse_calls && !tc_parse((tc_family)j->rq.tool_family, text, len, &r) && (r.n_calls || harmony)) {
        if (r.reasoning.len) { /* harmony's analysis channel: the reasoning item */
            sbuf_add(&thinking, r.reasoning.data, r.reasoning.len);
            json_array_append_new(out, responses_reasoning_item(j, "completed", r.reasoning.data, r.reasoning.len, 1));
        }
        text = r.content.data ? r.content.data : "";
        len = r.content.len;
        n_calls = r.n_calls;
    }
    if (len || (!n_calls && !thinking.len)) json_array_append_new(out, message_item(j, "completed", text, len, 1));
    json_t *calls = json_array();
    for (int k = 0; k < n_calls; k++) {
        const char *args = r.calls[k].args.data ? r.calls[k].args.data : "";
        json_t *it = call_item(j, k, "completed", r.calls[k].name, strlen(r.calls[k].name), args, r.calls[k].args.len);
        json_array_append_new(calls, json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", json_object_get(it, "call_id"), "type",
                                               "function", "function", "name", json_object_get(it, "name"),
                                               "arguments", json_object_get(it, "arguments")));
        json_array_append_new(out, it);
    }
    if (turn) {
        *turn = json_pack("{s:s,s:o}", "role", "assistant", "content", ts_json_string(text, len));
        if (n_calls) json_object_set(*turn, "tool_calls", calls);
    }
    json_decref(calls);
    tc_result_free(&r);
    sbuf_free(&thinking);
    sbuf_free(&answer);
    return out;
}

static void event(job *j, const char *name, json_t *data, sbuf *out) {
    json_object_set_new(data, "type", json_string(name));
    json_object_set_new(data, "sequence_number", json_integer(j->sh_seq++));
    char *s = json_dumps(data, JSON_COMPACT);
    if (s) sbuf_printf(out, "event: %s\ndata: %s\n\n", name, s);
    free(s);
    json_decref(data);
}

static void r_start(job *j, sbuf *out) {
    event(j, "response.created", json_pack("{s:o}", "response", response_json(j, "in_progress", NULL, 0)), out);
    event(j, "response.in_progress", json_pack("{s:o}", "response", response_json(j, "in_progress", NULL, 0)), out);
}

static void close_item(job *j, int c, sbuf *out) {
    choice_state *cs = &j->choices[c];
    const int index = cs->sh_next - 1;
    const char *t = cs->sh_item.data ? cs->sh_item.data : "";
    char id[48];
    if (cs->sh_open == 1) {
        item_id(j, "msg_", 0, id);
        event(j, "response.output_text.done", json_pack("{s:s,s:i,s:i,s:o,s:[]}", "item_id", id, "output_index", index,
                                                        "content_index", 0, "text", ts_json_string(t, cs->sh_item.len),
                                                        "logprobs"), out);
        event(j, "response.content_part.done",
              json_pack("{s:s,s:i,s:i,s:{s:s,s:o,s:[]}}", "item_id", id, "output_index", index, "content_index", 0,
                        "part", "type", "output_text", "text", ts_json_string(t, cs->sh_item.len), "annotations"), out);
        event(j, "response.output_item.done",
              json_pack("{s:i,s:o}", "output_index", index, "item", message_item(j, "completed", t, cs->sh_item.len, 1)),
              out);
    } else if (cs->sh_open == 3) {
        item_id(j, "rs_", 0, id);
        event(j, "response.reasoning_text.done", json_pack("{s:s,s:i,s:i,s:o}", "item_id", id, "output_index", index,
                                                           "content_index", 0, "text", ts_json_string(t, cs->sh_item.len)),
              out);
        event(j, "response.content_part.done",
              json_pack("{s:s,s:i,s:i,s:{s:s,s:o}}", "item_id", id, "output_index", index, "content_index", 0, "part",
                        "type", "reasoning_text", "text", ts_json_string(t, cs->sh_item.len)), out);
        event(j, "response.output_item.done",
              json_pack("{s:i,s:o}", "output_index", index, "item",
                        responses_reasoning_item(j, "completed", t, cs->sh_item.len, 1)), out);
    } else if (cs->sh_open == 2) {
        item_id(j, "fc_", cs->sh_call, id);
        event(j, "response.function_call_arguments.done",
              json_pack("{s:s,s:i,s:o}", "item_id", id, "output_index", index, "arguments",
                        ts_json_string(t, cs->sh_item.len)), out);
        event(j, "response.output_item.done",
              json_pack("{s:i,s:o}", "output_index", index, "item",
                        call_item(j, cs->sh_call, "completed", cs->sh_name, strlen(cs->sh_name), t, cs->sh_item.len)),
              out);
    }
    cs->sh_open = 0;
    cs->sh_item.len = 0;
}

/* Closes the open item and opens `item` (kind `open`: 1 message, 3
 * reasoning) with its one text part. */
static void open_text_item(job *j, int c, int open, json_t *item, const char *id, json_t *part, sbuf *out) {
    choice_state *cs = &j->choices[c];
    close_item(j, c, out);
    event(j, "response.output_item.added", json_pack("{s:i,s:o}", "output_index", cs->sh_next, "item", item), out);
    event(j, "response.content_part.added",
          json_pack("{s:s,s:i,s:i,s:o}", "item_id", id, "output_index", cs->sh_next, "content_index", 0, "part", part),
          out);
    cs->sh_next++;
    cs->sh_open = open;
}

static void r_text(job *j, int c, const char *text, size_t n, sbuf *out) {
    choice_state *cs = &j->choices[c];
    char id[48];
    item_id(j, "msg_", 0, id);
    if (cs->sh_open != 1)
        open_text_item(j, c, 1, message_item(j, "in_progress", "", 0, 0), id,
                       json_pack("{s:s,s:s,s:[]}", "type", "output_text", "text", "", "annotations"), out);
    sbuf_add(&cs->sh_item, text, n);
    event(j, "response.output_text.delta",
          json_pack("{s:s,s:i,s:i,s:o,s:[]}", "item_id", id, "output_index", cs->sh_next - 1, "content_index", 0,
                    "delta", ts_json_string(text, n), "logprobs"), out);
}

/* Reasoning text (the template reasons): the reasoning item, opened on its
 * first piece; it is the first item of the output. */
static void r_thinking(job *j, int c, const char *text, size_t n, sbuf *out) {
    choice_state *cs = &j->choices[c];
    char id[48];
    item_id(j, "rs_", 0, id);
    if (cs->sh_open != 3)
        open_text_item(j, c, 3, responses_reasoning_item(j, "in_progress", "", 0, 0), id,
                       json_pack("{s:s,s:s}", "type", "reasoning_text", "text", ""), out);
    sbuf_add(&cs->sh_item, text, n);
    event(j, "response.reasoning_text.delta",
          json_pack("{s:s,s:i,s:i,s:o}", "item_id", id, "output_index", cs->sh_next - 1, "content_index", 0, "delta",
                    ts_json_string(text, n)), out);
}

static void r_call(job *j, int c, int index, const char *name, size_t n, sbuf *out) {
    choice_state *cs = &j->choices[c];
    close_item(j, c, out);
    snprintf(cs->sh_name, sizeof cs->sh_name, "%.*s", (int)(n < 71 ? n : 71), name);
    event(j, "response.output_item.added",
          json_pack("{s:i,s:o}", "output_index", cs->sh_next,
                    "item", call_item(j, index, "in_progress", name, n, "", 0)), out);
    cs->sh_next++;
    cs->sh_open = 2;
    cs->sh_call = index;
}

static void r_args(job *j, int c, int index, const char *text, size_t n, sbuf *out) {
    choice_state *cs = &j->choices[c];
    char id[48];
    if (cs->sh_open != 2 || !n) return;
    item_id(j, "fc_", index, id);
    sbuf_add(&cs->sh_item, text, n);
    event(j, "response.function_call_arguments.delta",
          json_pack("{s:s,s:i,s:o}", "item_id", id, "output_index", cs->sh_next - 1, "delta", ts_json_string(text, n)),
          out);
}

static void r_finish(job *j, int c, kvlm_finish why, int n_calls, sbuf *out) {
    (void)why;
    (void)n_calls;
    close_item(j, c, out);
}

static void r_end(job *j, sbuf *out) {
    const char *status = final_status(j);
    event(j, !strcmp(status, "incomplete") ? "response.incomplete" : "response.completed",
          json_pack("{s:o}", "response", response_json(j, status, output_items(j, NULL), 1)), out);
}

static void r_error(job *j, const api_error *e, sbuf *out) {
    event(j, "error", json_pack("{s:s?,s:s,s:s?}", "code", e->code, "message", e->message, "param",
                                e->param[0] ? e->param : NULL), out);
}

static char *r_final_body(job *j) {
    json_t *o = response_json(j, final_status(j), output_items(j, NULL), 1);
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

/* Keeps the response for previous_response_id and GET. */
static void r_done(job *j) {
    if (!j->rq.store || !j->s->responses) return;
    json_t *turn = NULL, *out = output_items(j, &turn);
    json_t *conv = json_loads(j->rq.conversation ? j->rq.conversation : "[]", 0, NULL);
    json_t *o = response_json(j, final_status(j), out, 1);
    if (conv && turn) json_array_append(conv, turn);
    char *ctext = conv ? json_dumps(conv, JSON_COMPACT) : NULL, *body = json_dumps(o, JSON_COMPACT);
    if (ctext && body) rstore_put(j->s->responses, j->id, ctext, body, kvlm_now());
    free(ctext);
    free(body);
    json_decref(turn);
    json_decref(conv);
    json_decref(o);
}

const stream_ops responses_stream_ops = {r_start, r_text, r_call, r_args, r_finish, r_end, r_error, r_final_body,
                                         r_done, r_thinking};
