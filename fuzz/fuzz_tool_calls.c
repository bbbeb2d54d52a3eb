/*
 * libFuzzer target: the tool-call parser (src/app/tool_calls.c) on
 * arbitrary model output.
 *
 * Input: the first byte picks the family (generic, hermes, llama3,
 * mistral) and the second seeds the piece sizes; the rest is the output.
 * It is parsed whole (tc_parse) and streamed in pieces of 1-8 bytes, and
 * the two must agree exactly: content, the number of calls, each name and
 * each call's arguments; a streamed call's name comes before its
 * arguments. Without a call, the content is the output byte for byte;
 * every name is 1-256 bytes and every arguments text begins with '{'.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "app/tool_calls.h"

typedef struct sum {
    tc_result r;
    int bad_order;
} sum;

static void on_event(void *user, const tc_event *ev) {
    sum *s = user;
    if (ev->kind == TC_EV_CONTENT) {
        sbuf_add(&s->r.content, ev->text, ev->len);
    } else if (ev->kind == TC_EV_CALL) {
        if (ev->index != s->r.n_calls) s->bad_order = 1;
        tc_call *c = realloc(s->r.calls, (size_t)(s->r.n_calls + 1) * sizeof *c);
        if (!c) abort();
        s->r.calls = c;
        memset(&c[s->r.n_calls], 0, sizeof *c);
        c[s->r.n_calls].name = strndup(ev->text, ev->len);
        s->r.n_calls++;
    } else if (ev->index < 0 || ev->index >= s->r.n_calls) {
        s->bad_order = 1;
    } else {
        sbuf_add(&s->r.calls[ev->index].args, ev->text, ev->len);
    }
}

static int same(const char *a, size_t na, const char *b, size_t nb) { return na == nb && (!na || !memcmp(a, b, na)); }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    tc_family f = (tc_family)(data[0] % 4);
    unsigned seed = data[1];
    const char *text = (const char *)data + 2;
    size_t n = size - 2;
    tc_result whole;
    if (tc_parse(f, text, n, &whole)) abort();
    sum s;
    memset(&s, 0, sizeof s);
    tc_parser *p = tc_parser_new(f);
    if (!p) abort();
    for (size_t at = 0; at < n;) {
        seed = seed * 1103515245u + 12345u;
        size_t k = 1 + (seed >> 16) % 8;
        if (k > n - at) k = n - at;
        if (tc_parser_feed(p, text + at, k, on_event, &s)) abort();
        at += k;
    }
    if (tc_parser_finish(p, on_event, &s)) abort();
    if (tc_parser_calls(p) != whole.n_calls) abort();
    tc_parser_free(p);
    if (s.bad_order || s.r.n_calls != whole.n_calls) abort();
    if (!same(s.r.content.data, s.r.content.len, whole.content.data, whole.content.len)) abort();
    if (!whole.n_calls && !same(whole.content.data, whole.content.len, text, n)) abort();
    for (int i = 0; i < whole.n_calls; i++) {
        const tc_call *a = &whole.calls[i], *b = &s.r.calls[i];
        size_t nl = strlen(a->name);
        if (!nl || nl > 256 || strcmp(a->name, b->name)) abort();
        if (!same(a->args.data, a->args.len, b->args.data, b->args.len)) abort();
        if (!a->args.len || a->args.data[0] != '{') abort();
    }
    tc_result_free(&whole);
    tc_result_free(&s.r);
    return 0;
}
