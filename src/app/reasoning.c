/*
 * The reasoning splitter (see reasoning.h): a four-state machine with a
 * small withheld buffer (at most a marker's length, or the leading
 * whitespace before a possible <think>); reasoning and answer go out in
 * runs, not byte by byte.
 */
#include "app/reasoning.h"

#include <stdlib.h>
#include <string.h>

static const char OPEN[] = "<think>", CLOSE[] = "</think>";

enum { AT_START, THINKING, AFTER_CLOSE, ANSWERING };

int rs_template_reasons(const char *src) { return src && strstr(src, CLOSE) != NULL; }

static int is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

int rs_prompt_opens(const char *p, size_t n) {
    while (n && is_space(p[n - 1])) n--;
    return n >= sizeof OPEN - 1 && !memcmp(p + n - (sizeof OPEN - 1), OPEN, sizeof OPEN - 1);
}

void rs_init(rs_split *s, int inside) {
    memset(s, 0, sizeof *s);
    s->state = inside ? THINKING : AT_START;
    s->opened = inside;
}

int rs_phase(const rs_split *s) {
    return s->state == AT_START ? RS_PHASE_START : s->state == THINKING ? RS_PHASE_THINKING : RS_PHASE_DONE;
}

void rs_free(rs_split *s) { sbuf_free(&s->hold); }

/* Length of the longest suffix of b that is a proper prefix of m. */
static size_t partial(const char *b, size_t n, const char *m) {
    const size_t k = strlen(m);
    for (size_t l = n < k - 1 ? n : k - 1; l > 0; l--)
        if (!memcmp(b + n - l, m, l)) return l;
    return 0;
}

static void feed_byte(rs_split *s, char c, rs_emit_fn emit, void *user) {
    switch (s->state) {
    case AT_START: {
        sbuf_add(&s->hold, &c, 1);
        size_t lead = 0;
        while (lead < s->hold.len && is_space(s->hold.data[lead])) lead++;
        const size_t rest = s->hold.len - lead;
        if (rest <= sizeof OPEN - 1 && !memcmp(s->hold.data + lead, OPEN, rest)) {
            if (rest == sizeof OPEN - 1) {
                s->state = THINKING;
                s->opened = 1;
                s->hold.len = 0;
            }
            return; /* may still be <think> */
        }
        s->state = ANSWERING;
        emit(user, 0, s->hold.data, s->hold.len);
        s->hold.len = 0;
        return;
    }
    case THINKING: return; /* think_run's */
    case AFTER_CLOSE:
        if (is_space(c)) return;
        s->state = ANSWERING;
        /* fall through */
    default: emit(user, 0, &c, 1);
    }
}

/* The reasoning from text on: up to </think> (found: the bytes of text
 * used; else all of them, the tail that may begin the marker withheld). */
static size_t think_run(rs_split *s, const char *text, size_t n, rs_emit_fn emit, void *user) {
    const size_t k = sizeof CLOSE - 1, before = s->hold.len;
    sbuf_add(&s->hold, text, n);
    const char *at = memmem(s->hold.data, s->hold.len, CLOSE, k);
    if (at) {
        const size_t pos = (size_t)(at - s->hold.data);
        if (pos) emit(user, 1, s->hold.data, pos);
        s->hold.len = 0;
        s->state = AFTER_CLOSE;
        return pos + k - before;
    }
    const size_t keep = partial(s->hold.data, s->hold.len, CLOSE);
    if (s->hold.len > keep) {
        emit(user, 1, s->hold.data, s->hold.len - keep);
        sbuf_consume(&s->hold, s->hold.len - keep);
    }
    return n;
}

void rs_feed(rs_split *s, const char *text, size_t n, rs_emit_fn emit, void *user) {
    size_t i = 0;
    while (i < n) {
        if (s->state == ANSWERING) { /* the rest at once */
            emit(user, 0, text + i, n - i);
            return;
        }
        if (s->state == THINKING) {
            i += think_run(s, text + i, n - i, emit, user);
            continue;
        }
        feed_byte(s, text[i++], emit, user);
    }
}

void rs_finish(rs_split *s, rs_emit_fn emit, void *user) {
    if (s->hold.len) emit(user, s->state == THINKING, s->hold.data, s->hold.len);
    s->hold.len = 0;
}

typedef struct both {
    sbuf *thinking, *answer;
} both;

static void add(void *user, int thinking, const char *text, size_t n) {
    both *b = user;
    sbuf_add(thinking ? b->thinking : b->answer, text, n);
}

void rs_split_all(const char *text, size_t n, int inside, sbuf *thinking, sbuf *answer) {
    rs_split s;
    both b = {thinking, answer};
    rs_init(&s, inside);
    rs_feed(&s, text, n, add, &b);
    rs_finish(&s, add, &b);
    rs_free(&s);
}
