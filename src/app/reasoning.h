/*
 * Reasoning in a model's output: templates of reasoning models (Qwen3,
 * DeepSeek-R1, ...) have the model think between <think> and </think>
 * before it answers. This splits generated text into reasoning and the
 * answer, incrementally (streaming) or whole: an output that opens with
 * <think> (after whitespace), or that starts inside it because the prompt
 * ended with <think>, is reasoning up to </think>; the whitespace after
 * </think> is dropped; everything else is the answer, byte for byte.
 * Text that may be the start of a marker is withheld until it is known
 * not to be. Only the markers above are known; nothing else is parsed.
 */
#ifndef KVLM_APP_REASONING_H
#define KVLM_APP_REASONING_H

#include <stddef.h>

#include "app/sbuf.h"

/* 1 when a chat template's source writes reasoning markers. */
int rs_template_reasons(const char *template_source);
/* 1 when a rendered prompt ends inside reasoning (its last non-space text
 * is <think>). */
int rs_prompt_opens(const char *prompt, size_t n);

typedef void (*rs_emit_fn)(void *user, int thinking, const char *text, size_t n);

typedef struct rs_split {
    int state;      /* rs.c's: at the start, thinking, after </think>, answering */
    sbuf hold;      /* withheld text */
    int opened;     /* 1 once the reasoning opened (<think>, or the prompt's) */
} rs_split;

/* Where a splitter stands after the text fed so far. */
enum {
    RS_PHASE_START = 0, /* nothing decided: the output may still open with <think> */
    RS_PHASE_THINKING,  /* inside the reasoning */
    RS_PHASE_DONE,      /* past </think>, or the output did not open with <think> */
};
int rs_phase(const rs_split *s);

/* inside: the prompt opened the reasoning (rs_prompt_opens). */
void rs_init(rs_split *s, int inside);
void rs_feed(rs_split *s, const char *text, size_t n, rs_emit_fn emit, void *user);
/* The text has ended: releases what was withheld. */
void rs_finish(rs_split *s, rs_emit_fn emit, void *user);
void rs_free(rs_split *s);

/* The whole output at once: reasoning and answer appended to the sbufs. */
void rs_split_all(const char *text, size_t n, int inside, sbuf *thinking, sbuf *answer);

#endif
