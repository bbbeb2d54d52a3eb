/*
 * Reasoning token counting (see reasoning_count.h): each token goes
 * through the splitter on its own and is placed by the splitter's phase
 * before and after it.
 */
#include "app/reasoning_count.h"

#include <string.h>

rc_format rc_format_of(const chat_template *tpl, int think) {
    if (tpl->main && tpl->tool_family == TC_FAMILY_HARMONY) return RC_HARMONY;
    return think ? RC_THINK : RC_NONE;
}

int rc_init(rc_counter *c, rc_format format, int inside) {
    memset(c, 0, sizeof *c);
    c->format = format;
    if (format == RC_THINK) rs_init(&c->think, inside);
    if (format == RC_HARMONY && !(c->hm = hm_parser_new())) {
        c->format = RC_NONE;
        return -1;
    }
    return 0;
}

static void drop_text(void *user, int thinking, const char *text, size_t n) {
    (void)user, (void)thinking, (void)text, (void)n;
}

static void drop_event(void *user, const tc_event *e) { (void)user, (void)e; }

static void think_token(rc_counter *c, const char *piece, size_t n) {
    const int before = rs_phase(&c->think);
    rs_feed(&c->think, piece, n, drop_text, NULL);
    if (before == RS_PHASE_THINKING) c->tokens++;
    else if (before == RS_PHASE_START) c->waiting++;
    if (c->think.opened) c->tokens += c->waiting, c->waiting = 0; /* the waiting tokens began the reasoning */
    else if (rs_phase(&c->think) == RS_PHASE_DONE) c->waiting = 0; /* the output is an answer */
}

static void harmony_token(rc_counter *c, const char *piece, size_t n) {
    const int before = hm_parser_phase(c->hm);
    if (hm_parser_feed(c->hm, piece, n, drop_event, NULL)) {
        hm_parser_free(c->hm);
        c->hm = NULL;
        c->format = RC_NONE;
        return;
    }
    const int after = hm_parser_phase(c->hm);
    if (before == HM_PHASE_ANALYSIS) c->tokens++;
    else if (before != HM_PHASE_BODY) c->waiting++; /* a header, or what may begin one */
    if (after == HM_PHASE_ANALYSIS) c->tokens += c->waiting, c->waiting = 0; /* an analysis header closed */
    else if (after == HM_PHASE_BODY || after == HM_PHASE_BETWEEN) c->waiting = 0;
}

void rc_token(rc_counter *c, const char *piece, size_t n) {
    if (c->format == RC_THINK) think_token(c, piece, n);
    else if (c->format == RC_HARMONY) harmony_token(c, piece, n);
}

int rc_tokens(const rc_counter *c) { return c->tokens; }

void rc_free(rc_counter *c) {
    if (c->format == RC_THINK) rs_free(&c->think);
    hm_parser_free(c->hm);
    memset(c, 0, sizeof *c);
}
