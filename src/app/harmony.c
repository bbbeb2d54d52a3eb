/*
 * The harmony output parser (see harmony.h): two states, a message's
 * header (collected whole until <|message|>) and its body (run out as
 * events, with at most a marker's prefix withheld; a call's body kept
 * until the message ends, then checked as JSON).
 */
#include "app/harmony.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/sbuf.h"

#define MAX_HEADER 1024 /* a header with markers that is not closed by then is content */
#define MAX_PLAIN 256   /* ... without markers */
#define MAX_NAME 64

static const char CHANNEL[] = "<|channel|>", MESSAGE[] = "<|message|>";
static const char *const MARKERS[] = {"<|start|>", "<|channel|>", "<|message|>", "<|constrain|>",
                                      "<|end|>",   "<|call|>",    "<|return|>",  NULL};
/* What ends a body: the first three close the message; the last two also
 * open the next one's header. */
static const char *const BOUNDS[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>", "<|channel|>", NULL};

enum { HEADER, BODY };
enum { B_CONTENT, B_REASONING, B_CALL };

struct hm_parser {
    int state, kind;
    sbuf header, hold, args;
    char name[MAX_NAME + 1];
    int n_calls;
    int oom;
};

int hm_template_is_harmony(const char *src) {
    return src && strstr(src, CHANNEL) && strstr(src, MESSAGE);
}

int hm_is_marker(const char *s, size_t n) {
    for (int i = 0; MARKERS[i]; i++)
        if (n == strlen(MARKERS[i]) && !memcmp(s, MARKERS[i], n)) return 1;
    return 0;
}

int hm_call_wrapper(const char *name, char *prefix, size_t prefix_size, char *suffix, size_t suffix_size) {
    int a = snprintf(prefix, prefix_size, "<|channel|>commentary to=functions.%s <|constrain|>json<|message|>", name);
    int b = snprintf(suffix, suffix_size, "<|call|>");
    return a < 0 || (size_t)a >= prefix_size || b < 0 || (size_t)b >= suffix_size ? -1 : 0;
}

hm_parser *hm_parser_new(void) { return calloc(1, sizeof(hm_parser)); }

void hm_parser_free(hm_parser *p) {
    if (!p) return;
    sbuf_free(&p->header);
    sbuf_free(&p->hold);
    sbuf_free(&p->args);
    free(p);
}

int hm_parser_calls(const hm_parser *p) { return p->n_calls; }

int hm_parser_phase(const hm_parser *p) {
    if (p->state == BODY) return p->kind == B_REASONING ? HM_PHASE_ANALYSIS : HM_PHASE_BODY;
    return p->header.len ? HM_PHASE_HEADER : HM_PHASE_BETWEEN;
}

typedef struct sink {
    tc_emit_fn emit;
    void *user;
} sink;

static void send(const sink *k, tc_event_kind kind, int index, const char *text, size_t n) {
    if (!n && kind != TC_EV_CALL) return;
    const tc_event ev = {kind, index, text, n};
    k->emit(k->user, &ev);
}

static int ends_with(const sbuf *b, const char *m) {
    const size_t k = strlen(m);
    return b->len >= k && !memcmp(b->data + b->len - k, m, k);
}

/* Length of the longest suffix of b that is a proper prefix of a marker. */
static size_t partial(const sbuf *b) {
    for (size_t l = b->len < 12 ? b->len : 12; l > 0; l--) {
        const char *s = b->data + b->len - l;
        if (*s != '<') continue;
        for (int i = 0; MARKERS[i]; i++)
            if (l < strlen(MARKERS[i]) && !memcmp(s, MARKERS[i], l)) return l;
    }
    return 0;
}

/* 1 when b holds one of the markers. */
static int has_marker(const sbuf *b) {
    for (int i = 0; b->len && MARKERS[i]; i++)
        if (memmem(b->data, b->len, MARKERS[i], strlen(MARKERS[i]))) return 1;
    return 0;
}

static int name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.';
}

/* The body's kind from header h (without <|message|>): a recipient
 * functions.NAME makes a call, the analysis channel reasoning, anything
 * else content. */
static void open_body(hm_parser *p, const char *h, size_t n) {
    p->state = BODY;
    p->kind = B_CONTENT;
    p->args.len = 0;
    char channel[16] = "";
    const char *c = memmem(h, n, CHANNEL, sizeof CHANNEL - 1);
    if (c) {
        c += sizeof CHANNEL - 1;
        size_t k = 0;
        while (c + k < h + n && k + 1 < sizeof channel && name_char(c[k])) channel[k] = c[k], k++;
        channel[k] = 0;
    }
    for (const char *t = h; (t = memmem(t, (size_t)(h + n - t), "to=", 3)); t += 3) {
        const char *r = t + 3, *e = r;
        while (e < h + n && name_char(*e)) e++;
        if ((size_t)(e - r) > 10 && !memcmp(r, "functions.", 10) && (size_t)(e - r - 10) <= MAX_NAME) {
            memcpy(p->name, r + 10, (size_t)(e - r - 10));
            p->name[e - r - 10] = 0;
            p->kind = B_CALL;
            return;
        }
    }
    if (!strcmp(channel, "analysis")) p->kind = B_REASONING;
}

static void body_text(hm_parser *p, const sink *k, const char *s, size_t n) {
    if (p->kind == B_CALL) sbuf_add(&p->args, s, n);
    else send(k, p->kind == B_REASONING ? TC_EV_REASONING : TC_EV_CONTENT, 0, s, n);
}

static void close_body(hm_parser *p, const sink *k) {
    if (p->kind == B_CALL) {
        json_error_t je;
        json_t *v = p->args.len ? json_loadb(p->args.data, p->args.len, JSON_DECODE_ANY, &je) : NULL;
        if (v) {
            send(k, TC_EV_CALL, p->n_calls, p->name, strlen(p->name));
            send(k, TC_EV_ARGS, p->n_calls, p->args.data, p->args.len);
            p->n_calls++;
            json_decref(v);
        } else {
            send(k, TC_EV_CONTENT, 0, p->args.data, p->args.len);
        }
        p->args.len = 0;
    }
    p->state = HEADER;
    p->header.len = 0;
}

static void header_byte(hm_parser *p, const sink *k, char c) {
    sbuf *h = &p->header;
    sbuf_add(h, &c, 1);
    if (ends_with(h, MESSAGE)) {
        open_body(p, h->data, h->len - (sizeof MESSAGE - 1));
        h->len = 0;
        return;
    }
    for (int i = 0; i < 3; i++)
        if (ends_with(h, BOUNDS[i])) { /* a message with no body */
            h->len = 0;
            return;
        }
    const int marked = has_marker(h);
    if ((!marked && (c == '\n' || h->len >= MAX_PLAIN)) || h->len >= MAX_HEADER) { /* not a header */
        p->state = BODY;
        p->kind = B_CONTENT;
        sbuf_add(&p->hold, h->data, h->len);
        h->len = 0;
    }
    (void)k;
}

static void body_byte(hm_parser *p, const sink *k, char c) {
    sbuf *b = &p->hold;
    sbuf_add(b, &c, 1);
    for (int i = 0; BOUNDS[i]; i++) {
        if (!ends_with(b, BOUNDS[i])) continue;
        const size_t m = strlen(BOUNDS[i]);
        body_text(p, k, b->data, b->len - m);
        b->len = 0;
        close_body(p, k);
        if (i >= 3) sbuf_add(&p->header, BOUNDS[i], m);
        return;
    }
    const size_t keep = partial(b);
    if (b->len > keep) {
        body_text(p, k, b->data, b->len - keep);
        sbuf_consume(b, b->len - keep);
    }
}

int hm_parser_feed(hm_parser *p, const char *text, size_t n, tc_emit_fn emit, void *user) {
    const sink k = {emit, user};
    for (size_t i = 0; i < n; i++) {
        if (p->state == HEADER) {
            header_byte(p, &k, text[i]);
            /* a header given up as content: its bytes are the body's now */
            if (p->state == BODY && p->hold.len && !p->header.len) {
                const size_t keep = partial(&p->hold);
                body_text(p, &k, p->hold.data, p->hold.len - keep);
                sbuf_consume(&p->hold, p->hold.len - keep);
            }
        } else {
            body_byte(p, &k, text[i]);
        }
    }
    p->oom |= p->header.failed | p->hold.failed | p->args.failed;
    return p->oom ? -1 : 0;
}

int hm_parser_finish(hm_parser *p, tc_emit_fn emit, void *user) {
    const sink k = {emit, user};
    if (p->state == BODY) {
        body_text(p, &k, p->hold.data, p->hold.len);
        p->hold.len = 0;
        close_body(p, &k);
    } else if (p->header.len && !has_marker(&p->header)) {
        send(&k, TC_EV_CONTENT, 0, p->header.data, p->header.len); /* plain text, not a header */
    }
    p->header.len = 0;
    p->oom |= p->header.failed | p->hold.failed | p->args.failed;
    return p->oom ? -1 : 0;
}
