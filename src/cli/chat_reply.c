/* A reply of kvlm chat split into reasoning and answer as it streams (see chat_reply.h). */
#include "cli/chat_reply.h"

#include <math.h>
#include <string.h>

#include "app/tool_calls.h"
#include "cli/chat_color.h"

#define DIM "\x1b[2m"
#define RESET "\x1b[0m"

enum { SHOWN_NOTHING, SHOWN_REASONING, SHOWN_CALL, SHOWN_ANSWER };

rc_format chat_reply_split(const chat_template *tpl) { return rc_format_of(tpl, tpl->main && tpl->reasons); }

chat_special_fn chat_reply_special_text(rc_format split) { return split == RC_HARMONY ? hm_is_marker : NULL; }

int chat_reply_begin(chat_reply *r, rc_format split, const char *prompt, size_t prompt_len, FILE *out, int show,
                     int dim, int tint) {
    *r = (chat_reply){.split = split, .out = out, .show = show, .dim = dim, .tint = tint, .logprob = NAN};
    if (split == RC_THINK) rs_init(&r->rs, rs_prompt_opens(prompt ? prompt : "", prompt_len));
    if (split == RC_HARMONY && !(r->hm = hm_parser_new())) return -1;
    return 0;
}

/* Ends the dimmed text (a section of reasoning or a call). */
static void undim(chat_reply *r) {
    if (r->dimmed) fputs(RESET, r->out);
    r->dimmed = 0;
}

/* Reasoning (section SHOWN_REASONING) or a call (SHOWN_CALL) on the
 * output, after its label when it starts; dimmed from the label to the
 * end of the section. */
static void show_reasoning(chat_reply *r, int section, const char *label, size_t label_len, const char *text,
                           size_t n) {
    if (!r->out || !r->show) return;
    if (label) {
        undim(r);
        if (r->section != SHOWN_NOTHING) fputc('\n', r->out);
        if (r->dim) fputs(DIM, r->out);
        r->dimmed = r->dim;
        fwrite(label, 1, label_len, r->out);
    }
    r->section = section;
    fwrite(text, 1, n, r->out);
    fflush(r->out);
}

static void reasoning_text(chat_reply *r, const char *text, size_t n) {
    sbuf_add(&r->reasoning, text, n);
    static const char label[] = "[reasoning] ";
    const int first = r->section != SHOWN_REASONING;
    show_reasoning(r, SHOWN_REASONING, first ? label : NULL, sizeof label - 1, text, n);
}

static void answer_text(chat_reply *r, const char *text, size_t n) {
    sbuf_add(&r->answer, text, n);
    if (!r->out || !n) return;
    undim(r);
    if (r->section == SHOWN_REASONING || r->section == SHOWN_CALL) fputs(r->dim ? "\n" : "\n[answer] ", r->out);
    r->section = SHOWN_ANSWER;
    if (r->tint) chat_color_write(r->out, text, n, r->logprob);
    else fwrite(text, 1, n, r->out);
    fflush(r->out);
}

static void on_think(void *user, int thinking, const char *text, size_t n) {
    if (thinking) reasoning_text(user, text, n);
    else answer_text(user, text, n);
}

static void on_harmony(void *user, const tc_event *ev) {
    chat_reply *r = user;
    char label[96];
    switch (ev->kind) {
    case TC_EV_REASONING: reasoning_text(r, ev->text, ev->len); break;
    case TC_EV_CONTENT: answer_text(r, ev->text, ev->len); break;
    case TC_EV_CALL: {
        r->n_calls++;
        const int k = snprintf(label, sizeof label, "[tool call %.*s] ", (int)(ev->len < 64 ? ev->len : 64), ev->text);
        show_reasoning(r, SHOWN_CALL, label, (size_t)k, "", 0);
        break;
    }
    case TC_EV_ARGS: show_reasoning(r, SHOWN_CALL, NULL, 0, ev->text, ev->len); break;
    }
}

void chat_reply_feed(chat_reply *r, const char *text, size_t n, float logprob) {
    r->logprob = logprob;
    if (r->split == RC_THINK) rs_feed(&r->rs, text, n, on_think, r);
    else if (r->split == RC_HARMONY) r->failed |= hm_parser_feed(r->hm, text, n, on_harmony, r) != 0;
    else answer_text(r, text, n);
    r->logprob = NAN;
}

void chat_reply_end(chat_reply *r) {
    r->logprob = NAN;
    if (r->split == RC_THINK) rs_finish(&r->rs, on_think, r);
    else if (r->split == RC_HARMONY) r->failed |= hm_parser_finish(r->hm, on_harmony, r) != 0;
    if (r->out) {
        undim(r);
        fflush(r->out);
    }
    r->failed |= r->answer.failed | r->reasoning.failed;
}

void chat_reply_free(chat_reply *r) {
    if (r->split == RC_THINK) rs_free(&r->rs);
    hm_parser_free(r->hm);
    r->hm = NULL;
    sbuf_free(&r->answer);
    sbuf_free(&r->reasoning);
}
