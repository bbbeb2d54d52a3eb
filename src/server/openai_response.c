/*
 * Formatting OpenAI-compatible responses (see openai_response.h).
 *
 * Token strings in log-probabilities are the token's bytes when they are
 * well-formed UTF-8, otherwise "bytes:\xNN..." (OpenAI's convention for
 * pieces that split a character), or "token_id:N" when the request set
 * return_tokens_as_token_ids (vLLM's extension); chat entries also carry
 * the raw bytes.
 * Text that is not well-formed UTF-8 is sent with U+FFFD in its place.
 */
#include "server/openai_response.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/tool_calls.h"

const char *resp_finish_name(kvlm_finish f) {
    switch (f) {
    case KVLM_FINISH_STOP: return "stop";
    case KVLM_FINISH_LENGTH: return "length";
    case KVLM_FINISH_TIMEOUT: return "timeout";
    case KVLM_FINISH_CANCELLED: return "cancelled";
    case KVLM_FINISH_ERROR: return "error";
    default: return NULL;
    }
}

static json_t *error_json(const api_error *e) {
    json_t *o = json_object();
    json_object_set_new(o, "message", json_string(e->message));
    json_object_set_new(o, "type", json_string(e->type ? e->type : "server_error"));
    json_object_set_new(o, "param", e->param[0] ? json_string(e->param) : json_null());
    json_object_set_new(o, "code", e->code ? json_string(e->code) : json_null());
    json_t *root = json_object();
    json_object_set_new(root, "error", o);
    return root;
}

char *resp_error_body(const api_error *e) {
    json_t *j = error_json(e);
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    return s;
}

static void sse(json_t *j, sbuf *out) {
    char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(7));
    if (s) {
        sbuf_adds(out, "data: ");
        sbuf_adds(out, s);
        sbuf_adds(out, "\n\n");
        free(s);
    }
    json_decref(j);
}

void resp_sse_error(const api_error *e, sbuf *out) { sse(error_json(e), out); }

/* ------------------------------------------------------ log-probabilities */

/* With as_id (return_tokens_as_token_ids): "token_id:N", vLLM's form. */
static json_t *token_str(const kvlm_tokenizer *tok, int32_t id, int as_id) {
    size_t len = 0;
    const char *p = tok && !as_id ? kvlm_tokenizer_piece(tok, id, &len) : NULL;
    if (as_id) {
        char name[32];
        snprintf(name, sizeof name, "token_id:%d", id);
        return json_string(name);
    }
    if (!p) {
        char num[16];
        snprintf(num, sizeof num, "%d", id);
        return json_string(num);
    }
    if (ts_utf8_valid(p, len)) return json_stringn(p, len);
    sbuf b = {0};
    sbuf_adds(&b, "bytes:");
    for (size_t i = 0; i < len; i++) sbuf_printf(&b, "\\x%02x", (unsigned char)p[i]);
    json_t *s = json_stringn(b.data ? b.data : "", b.len);
    sbuf_free(&b);
    return s;
}

static json_t *token_bytes(const kvlm_tokenizer *tok, int32_t id) {
    json_t *a = json_array();
    size_t len = 0;
    const char *p = tok ? kvlm_tokenizer_piece(tok, id, &len) : NULL;
    for (size_t i = 0; p && i < len; i++) json_array_append_new(a, json_integer((unsigned char)p[i]));
    return a;
}

/* Tokens [0, n) with their alternatives (k per token). */
typedef struct lp_view {
    int n, k;
    const int32_t *ids, *top_ids;
    const float *vals, *top_vals;
    size_t offset;          /* text_offset of the first token */
    int as_id;              /* tokens named "token_id:N" */
    const double *entropy;  /* per token, nats (kvlm_entropy), or NULL */
} lp_view;

/* kvlm_entropy's value: bits, as JSON (null if the scheduler gave none). */
static json_t *entropy_bits(double nats) { return isnan(nats) ? json_null() : json_real(nats / M_LN2); }

static json_t *completion_logprobs(const kvlm_tokenizer *tok, const lp_view *v) {
    json_t *tokens = json_array(), *lps = json_array(), *tops = v->k ? json_array() : json_null(),
           *offs = json_array();
    size_t off = v->offset;
    for (int i = 0; i < v->n; i++) {
        json_array_append_new(tokens, token_str(tok, v->ids[i], v->as_id));
        json_array_append_new(lps, json_real(v->vals[i]));
        json_array_append_new(offs, json_integer((json_int_t)off));
        size_t len = 0;
        if (tok && kvlm_tokenizer_piece(tok, v->ids[i], &len)) off += len;
        if (!v->k) continue;
        json_t *t = json_object();
        for (int a = 0; a < v->k; a++) {
            json_t *s = token_str(tok, v->top_ids[i * v->k + a], v->as_id);
            if (!json_object_get(t, json_string_value(s)))
                json_object_set_new(t, json_string_value(s), json_real(v->top_vals[i * v->k + a]));
            json_decref(s);
        }
        json_array_append_new(tops, t);
    }
    json_t *o = json_object();
    json_object_set_new(o, "tokens", tokens);
    json_object_set_new(o, "token_logprobs", lps);
    json_object_set_new(o, "top_logprobs", tops);
    json_object_set_new(o, "text_offset", offs);
    if (v->entropy) {
        json_t *ent = json_array();
        for (int i = 0; i < v->n; i++) json_array_append_new(ent, entropy_bits(v->entropy[i]));
        json_object_set_new(o, "kvlm_entropy", ent);
    }
    return o;
}

static json_t *chat_entry(const kvlm_tokenizer *tok, int32_t id, float lp, int as_id) {
    json_t *e = json_object();
    json_object_set_new(e, "token", token_str(tok, id, as_id));
    json_object_set_new(e, "logprob", json_real(lp));
    json_object_set_new(e, "bytes", token_bytes(tok, id));
    return e;
}

static json_t *chat_logprobs(const kvlm_tokenizer *tok, const lp_view *v) {
    json_t *content = json_array();
    for (int i = 0; i < v->n; i++) {
        json_t *e = chat_entry(tok, v->ids[i], v->vals[i], v->as_id), *tops = json_array();
        for (int a = 0; a < v->k; a++)
            json_array_append_new(tops, chat_entry(tok, v->top_ids[i * v->k + a], v->top_vals[i * v->k + a], v->as_id));
        json_object_set_new(e, "top_logprobs", tops);
        if (v->entropy) json_object_set_new(e, "entropy_bits", entropy_bits(v->entropy[i]));
        json_array_append_new(content, e);
    }
    json_t *o = json_object();
    json_object_set_new(o, "content", content);
    return o;
}

static json_t *logprobs_json(const job *j, lp_view *v) {
    v->as_id = j->rq.token_ids;
    return j->rq.chat ? chat_logprobs(j->s->tok, v) : completion_logprobs(j->s->tok, v);
}

void resp_keep_logprobs(choice_state *cs, const kvlm_token_event *ev, int k) {
    if (cs->n_lp == cs->cap_lp) {
        int cap = cs->cap_lp ? 2 * cs->cap_lp : 32;
        int32_t *ids = realloc(cs->lp_ids, (size_t)cap * sizeof *ids);
        if (ids) cs->lp_ids = ids;
        float *vals = realloc(cs->lp_vals, (size_t)cap * sizeof *vals);
        if (vals) cs->lp_vals = vals;
        int32_t *tids = realloc(cs->lp_top_ids, (size_t)cap * (size_t)(k ? k : 1) * sizeof *tids);
        if (tids) cs->lp_top_ids = tids;
        float *tvals = realloc(cs->lp_top_vals, (size_t)cap * (size_t)(k ? k : 1) * sizeof *tvals);
        if (tvals) cs->lp_top_vals = tvals;
        double *ent = realloc(cs->lp_entropy, (size_t)cap * sizeof *ent);
        if (ent) cs->lp_entropy = ent;
        if (!ids || !vals || !tids || !tvals || !ent) return;
        cs->cap_lp = cap;
    }
    int i = cs->n_lp++;
    cs->lp_ids[i] = ev->id;
    cs->lp_vals[i] = ev->logprob;
    cs->lp_entropy[i] = ev->entropy;
    for (int a = 0; a < k; a++) {
        int have = a < ev->top_n;
        cs->lp_top_ids[i * k + a] = have ? ev->top_ids[a] : ev->id;
        cs->lp_top_vals[i * k + a] = have ? ev->top_logprobs[a] : ev->logprob;
    }
}

/* -------------------------------------------------------------- bodies */

static json_t *envelope(const job *j, const char *object) {
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(j->id));
    json_object_set_new(o, "object", json_string(object));
    json_object_set_new(o, "created", json_integer(j->created));
    json_object_set_new(o, "model", json_string(j->s->model_name));
    return o;
}

static json_t *usage_json(const job *j) {
    json_t *u = json_object(), *d = json_object();
    json_object_set_new(u, "prompt_tokens", json_integer(j->prompt_tokens));
    json_object_set_new(u, "completion_tokens", json_integer(j->completion_tokens));
    json_object_set_new(u, "total_tokens", json_integer(j->prompt_tokens + j->completion_tokens));
    json_object_set_new(d, "cached_tokens", json_integer(j->cached_tokens));
    json_object_set_new(u, "prompt_tokens_details", d);
    /* of completion_tokens, those the model spent reasoning (reasoning_count.h) */
    json_object_set_new(u, "completion_tokens_details", json_pack("{s:i}", "reasoning_tokens", j->reasoning_tokens));
    if (j->drafted_tokens > 0) /* speculative decoding: drafts computed and drafts kept */
        json_object_set_new(u, "kvlm_speculation", json_pack("{s:i,s:i}", "drafted_tokens", j->drafted_tokens,
                                                             "accepted_tokens", j->accepted_tokens));
    return u;
}

/* A chunk's logprobs, finish reason and envelope; sends it. */
static void chunk_end(const job *j, int c, json_t *root, json_t *ch, const kvlm_token_event *ev, const char *finish,
                      sbuf *out) {
    json_t *lp = json_null();
    if (ev && j->rq.logprobs) {
        const choice_state *cs = &j->choices[c];
        lp_view v = {1, ev->top_n, &ev->id, ev->top_ids, &ev->logprob, ev->top_logprobs, 0, 0,
                     j->rq.kvlm_entropy ? &ev->entropy : NULL};
        size_t len = 0;
        if (j->s->tok && kvlm_tokenizer_piece(j->s->tok, ev->id, &len)) v.offset = cs->piece_bytes - len;
        lp = logprobs_json(j, &v);
    }
    json_object_set_new(ch, "logprobs", lp);
    json_object_set_new(ch, "finish_reason", finish ? json_string(finish) : json_null());
    json_t *arr = json_array();
    json_array_append_new(arr, ch);
    json_object_set_new(root, "choices", arr);
    if (j->rq.include_usage) json_object_set_new(root, "usage", json_null());
    sse(root, out);
}

void resp_chunk(const job *j, int c, int role, const char *delta, size_t n, const kvlm_token_event *ev,
                const char *finish, sbuf *out) {
    const int chat = j->rq.chat;
    json_t *root = envelope(j, chat ? "chat.completion.chunk" : "text_completion"), *ch = json_object();
    json_object_set_new(ch, "index", json_integer(c));
    if (chat) {
        json_t *d = json_object();
        if (role) json_object_set_new(d, "role", json_string("assistant"));
        if (role || n) json_object_set_new(d, "content", ts_json_string(delta, n));
        json_object_set_new(ch, "delta", d);
    } else {
        json_object_set_new(ch, "text", ts_json_string(delta, n));
        if (j->rq.infill) { /* llama.cpp's /infill clients read content and stop */
            json_object_set_new(root, "content", ts_json_string(delta, n));
            json_object_set_new(root, "stop", json_boolean(finish != NULL));
        }
    }
    chunk_end(j, c, root, ch, ev, finish, out);
}

void resp_reasoning_chunk(const job *j, int c, const char *text, size_t n, const kvlm_token_event *ev, sbuf *out) {
    json_t *root = envelope(j, "chat.completion.chunk"), *ch = json_object(), *d = json_object();
    json_object_set_new(ch, "index", json_integer(c));
    json_object_set_new(d, "reasoning_content", ts_json_string(text, n));
    json_object_set_new(ch, "delta", d);
    chunk_end(j, c, root, ch, ev, NULL, out);
}

void resp_tool_call_id(const job *j, int c, int index, char id[32]) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a of the job id, choice and call index */
    for (const char *p = j->id; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h = (h ^ (uint64_t)c) * 1099511628211ull;
    h = (h ^ (uint64_t)index) * 1099511628211ull;
    snprintf(id, 32, "call_%016llx%08x", (unsigned long long)h, (unsigned)(h >> 17) ^ (unsigned)index);
}

static json_t *tool_call_json(const job *j, int c, int index, const char *name, size_t name_len, const char *args,
                              size_t args_len, int whole) {
    json_t *tc = json_object(), *fn = json_object();
    json_object_set_new(tc, "index", json_integer(index));
    if (name) {
        char id[32];
        resp_tool_call_id(j, c, index, id);
        json_object_set_new(tc, "id", json_string(id));
        json_object_set_new(tc, "type", json_string("function"));
        json_object_set_new(fn, "name", ts_json_string(name, name_len));
    }
    if (name || args) json_object_set_new(fn, "arguments", ts_json_string(args ? args : "", args ? args_len : 0));
    json_object_set_new(tc, "function", fn);
    if (whole) json_object_del(tc, "index");
    return tc;
}

void resp_tool_chunk(const job *j, int c, int index, const char *name, size_t name_len, const char *args,
                     size_t args_len, const kvlm_token_event *ev, sbuf *out) {
    json_t *root = envelope(j, "chat.completion.chunk"), *ch = json_object(), *d = json_object(), *arr = json_array();
    json_object_set_new(ch, "index", json_integer(c));
    json_array_append_new(arr, tool_call_json(j, c, index, name, name_len, args, args_len, 0));
    json_object_set_new(d, "tool_calls", arr);
    json_object_set_new(ch, "delta", d);
    chunk_end(j, c, root, ch, ev, NULL, out);
}

const char *resp_finish_reason(const job *j, kvlm_finish f, int n_calls) {
    (void)j;
    return n_calls > 0 && f == KVLM_FINISH_STOP ? "tool_calls" : resp_finish_name(f);
}

void resp_stream_end(const job *j, sbuf *out) {
    if (j->rq.include_usage) {
        json_t *root = envelope(j, j->rq.chat ? "chat.completion.chunk" : "text_completion");
        json_object_set_new(root, "choices", json_array());
        json_object_set_new(root, "usage", usage_json(j));
        sse(root, out);
    }
    sbuf_adds(out, "data: [DONE]\n\n");
}

char *resp_final_body(const job *j) {
    const int chat = j->rq.chat;
    json_t *root = envelope(j, chat ? "chat.completion" : "text_completion"), *arr = json_array();
    for (int c = 0; c < j->n_choices; c++) {
        const choice_state *cs = &j->choices[c];
        json_t *ch = json_object(), *text = ts_json_string(cs->text.data ? cs->text.data : "", cs->text.len);
        json_object_set_new(ch, "index", json_integer(c));
        int n_calls = 0;
        if (chat) {
            json_t *msg = json_object();
            json_object_set_new(msg, "role", json_string("assistant"));
            json_t *calls = NULL, *reasoning = NULL;
            tc_result r = {0};
            /* the text is split into content and calls as the stream splits it; harmony's
             * channels always (the analysis is reasoning_content) */
            const int harmony = j->rq.tool_family == TC_FAMILY_HARMONY;
            if (j->rq.parse_calls &&
                !tc_parse((tc_family)j->rq.tool_family, cs->text.data ? cs->text.data : "", cs->text.len, &r) &&
                (r.n_calls || harmony)) {
                json_decref(text);
                text = r.content.len || !r.n_calls ? ts_json_string(r.content.data ? r.content.data : "", r.content.len)
                                                   : json_null();
                if (r.reasoning.len) reasoning = ts_json_string(r.reasoning.data, r.reasoning.len);
            }
            if (r.n_calls) {
                calls = json_array();
                for (int k = 0; k < r.n_calls; k++)
                    json_array_append_new(calls, tool_call_json(j, c, k, r.calls[k].name, strlen(r.calls[k].name),
                                                                r.calls[k].args.data, r.calls[k].args.len, 1));
                n_calls = r.n_calls;
            }
            tc_result_free(&r);
            json_object_set_new(msg, "content", text);
            if (reasoning) json_object_set_new(msg, "reasoning_content", reasoning);
            if (calls) json_object_set_new(msg, "tool_calls", calls);
            json_object_set_new(ch, "message", msg);
        } else {
            json_object_set_new(ch, "text", text);
        }
        json_t *lp = json_null();
        if (j->rq.logprobs) {
            lp_view v = {cs->n_lp, j->rq.top_logprobs, cs->lp_ids, cs->lp_top_ids, cs->lp_vals, cs->lp_top_vals, 0, 0,
                         j->rq.kvlm_entropy ? cs->lp_entropy : NULL};
            lp = logprobs_json(j, &v);
        }
        json_object_set_new(ch, "logprobs", lp);
        const char *fin = resp_finish_reason(j, cs->finish, n_calls);
        json_object_set_new(ch, "finish_reason", fin ? json_string(fin) : json_null());
        json_array_append_new(arr, ch);
    }
    json_object_set_new(root, "choices", arr);
    json_object_set_new(root, "usage", usage_json(j));
    if (j->rq.infill && j->n_choices > 0) { /* llama.cpp's /infill clients read content and stop */
        const choice_state *cs = &j->choices[0];
        json_object_set_new(root, "content", ts_json_string(cs->text.data ? cs->text.data : "", cs->text.len));
        json_object_set_new(root, "stop", json_true());
    }
    char *s = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(7));
    json_decref(root);
    return s;
}
