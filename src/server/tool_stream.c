/*
 * Streaming a chat choice through the tool-call parser (see tool_stream.h).
 */
#include "server/tool_stream.h"

#include "server/api_stream.h"
#include "server/openai_response.h"
#include "app/harmony.h"
#include "app/tool_calls.h"

typedef struct emit_ctx {
    job *j;
    int c;
    sbuf *out;
    const kvlm_token_event *ev; /* logprobs not yet sent */
} emit_ctx;

static void on_event(void *user, const tc_event *e) {
    emit_ctx *x = user;
    const stream_ops *ops = stream_ops_of(x->j);
    if (ops) {
        if (e->kind == TC_EV_REASONING) { /* harmony's analysis: thinking blocks, reasoning items */
            if (ops->thinking) ops->thinking(x->j, x->c, e->text, e->len, x->out);
        } else if (e->kind == TC_EV_CONTENT) {
            if (e->len) ops->text(x->j, x->c, e->text, e->len, x->out);
        } else if (e->kind == TC_EV_CALL) ops->call(x->j, x->c, e->index, e->text, e->len, x->out);
        else ops->args(x->j, x->c, e->index, e->text, e->len, x->out);
        return;
    }
    if (e->kind == TC_EV_REASONING) resp_reasoning_chunk(x->j, x->c, e->text, e->len, x->ev, x->out);
    else if (e->kind == TC_EV_CONTENT) resp_chunk(x->j, x->c, 0, e->text, e->len, x->ev, NULL, x->out);
    else if (e->kind == TC_EV_CALL) resp_tool_chunk(x->j, x->c, e->index, e->text, e->len, NULL, 0, x->ev, x->out);
    else resp_tool_chunk(x->j, x->c, e->index, NULL, 0, e->text, e->len, x->ev, x->out);
    x->ev = NULL;
}

const char *tool_token_text(const job *j, const kvlm_token_event *ev, size_t *len) {
    *len = ev->text_len;
    if (!j->rq.parse_calls || ev->text_len || !j->s->tok || !kvlm_tokenizer_is_special(j->s->tok, ev->id))
        return ev->text;
    size_t n = 0;
    const char *p = kvlm_tokenizer_piece(j->s->tok, ev->id, &n);
    if (!tc_is_marker(p, n) && !(j->rq.tool_family == TC_FAMILY_HARMONY && hm_is_marker(p, n))) return ev->text;
    *len = n;
    return p;
}

static void answer_text(job *j, int c, const char *text, size_t n, const kvlm_token_event *ev, sbuf *out) {
    choice_state *cs = &j->choices[c];
    const kvlm_token_event *lp = ev && j->rq.logprobs ? ev : NULL;
    const stream_ops *ops = stream_ops_of(j);
    if (ops && (!cs->tools || cs->tools_failed)) {
        if (n) ops->text(j, c, text, n, out);
        return;
    }
    if (!cs->tools || cs->tools_failed) {
        if (n || lp) resp_chunk(j, c, 0, text, n, lp, NULL, out);
        return;
    }
    emit_ctx x = {j, c, out, lp};
    if (tc_parser_feed(cs->tools, text, n, on_event, &x)) cs->tools_failed = 1;
    if (x.ev) resp_chunk(j, c, 0, "", 0, x.ev, NULL, out);
}

/* Reasoning split off first (Anthropic's thinking blocks), the answer on. */
typedef struct reason_ctx {
    job *j;
    int c;
    sbuf *out;
} reason_ctx;

static void on_reason(void *user, int thinking, const char *text, size_t n) {
    reason_ctx *x = user;
    const stream_ops *ops = stream_ops_of(x->j);
    if (!n) return;
    if (thinking && ops && ops->thinking) ops->thinking(x->j, x->c, text, n, x->out);
    else answer_text(x->j, x->c, text, n, NULL, x->out);
}

void tool_stream_text(job *j, int c, const char *text, size_t n, const kvlm_token_event *ev, sbuf *out) {
    choice_state *cs = &j->choices[c];
    if (!cs->reason_on) {
        answer_text(j, c, text, n, ev, out);
        return;
    }
    reason_ctx x = {j, c, out};
    rs_feed(&cs->reason, text, n, on_reason, &x);
}

void tool_stream_finish(job *j, int c, const char *text, size_t n, kvlm_finish why, sbuf *out) {
    choice_state *cs = &j->choices[c];
    const stream_ops *ops = stream_ops_of(j);
    if (cs->reason_on) {
        reason_ctx x = {j, c, out};
        rs_feed(&cs->reason, text, n, on_reason, &x);
        rs_finish(&cs->reason, on_reason, &x);
        text = "";
        n = 0;
    }
    if (ops) {
        emit_ctx x = {j, c, out, NULL};
        if (!cs->tools || cs->tools_failed) {
            if (n) ops->text(j, c, text, n, out);
        } else if (tc_parser_feed(cs->tools, text, n, on_event, &x) || tc_parser_finish(cs->tools, on_event, &x)) {
            cs->tools_failed = 1;
        }
        ops->finish(j, c, why, cs->tools ? tc_parser_calls(cs->tools) : 0, out);
        return;
    }
    if (!cs->tools || cs->tools_failed) {
        resp_chunk(j, c, 0, text, n, NULL, resp_finish_name(why), out);
        return;
    }
    emit_ctx x = {j, c, out, NULL};
    if (tc_parser_feed(cs->tools, text, n, on_event, &x) || tc_parser_finish(cs->tools, on_event, &x))
        cs->tools_failed = 1;
    resp_chunk(j, c, 0, "", 0, NULL, resp_finish_reason(j, why, tc_parser_calls(cs->tools)), out);
}
