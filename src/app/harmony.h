/*
 * gpt-oss's harmony output format: the model writes a sequence of
 * messages, each a header then a body,
 *
 *   <|channel|>analysis<|message|>reasoning...<|end|>
 *   <|start|>assistant<|channel|>final<|message|>the answer...<|return|>
 *   <|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>
 *
 * (the recipient may also precede the channel: "<|start|>assistant
 * to=functions.NAME<|channel|>commentary json<|message|>"). This splits
 * generated text into reasoning (analysis), content (final, and
 * commentary addressed to no function) and tool calls (a message to
 * functions.NAME: name NAME, arguments its body), incrementally or whole,
 * with the events of tool_calls.h (TC_EV_REASONING for the analysis).
 *
 * The text is read byte by byte, so where it is split between feeds
 * changes only how events are grouped. Text that may be the start of a
 * marker is withheld until it is known not to be. A message's body ends at
 * <|end|>, <|call|>, <|return|>, at a <|start|> or <|channel|> that begins
 * the next message, or with the text. A call's body is withheld until it
 * ends and becomes a call only when it is valid JSON (its arguments then
 * go out in one piece); otherwise it is content. The output normally
 * begins with a header (the prompt ends with "<|start|>assistant"); a
 * header that holds no marker and is not closed by <|message|> within a
 * line (or 256 bytes) is content, so text written without the format
 * stays content byte for byte. Headers, and the markers that open or end
 * messages, are never content (a <|message|> or <|constrain|> inside a
 * body is the body's text).
 */
#ifndef KVLM_APP_HARMONY_H
#define KVLM_APP_HARMONY_H

#include <stddef.h>

#include "app/tool_calls.h"

/* 1 when a chat template's source writes the harmony format. */
int hm_template_is_harmony(const char *template_source);
/* 1 if a special token's text is one of the format's markers
 * (<|start|>, <|channel|>, <|message|>, <|constrain|>, <|end|>, <|call|>,
 * <|return|>): the server feeds their text to the parser. */
int hm_is_marker(const char *s, size_t n);

typedef struct hm_parser hm_parser;

hm_parser *hm_parser_new(void);
void hm_parser_free(hm_parser *p);
/* -1 when out of memory. */
int hm_parser_feed(hm_parser *p, const char *text, size_t n, tc_emit_fn emit, void *user);
/* The text has ended: the open message is closed. */
int hm_parser_finish(hm_parser *p, tc_emit_fn emit, void *user);
int hm_parser_calls(const hm_parser *p);

/* Where a parser stands after the text fed so far. */
enum {
    HM_PHASE_BETWEEN = 0, /* no message open and no header begun */
    HM_PHASE_HEADER,      /* inside a header: the message's channel is not known yet */
    HM_PHASE_BODY,        /* in the body of a final or commentary message, or of a call */
    HM_PHASE_ANALYSIS,    /* in the body of an analysis message (reasoning) */
};
int hm_parser_phase(const hm_parser *p);

/* The forced call's wrapper for function `name`: the header before the
 * arguments' JSON and the marker after them, written to prefix / suffix
 * (NUL-terminated). -1 when name does not fit. */
int hm_call_wrapper(const char *name, char *prefix, size_t prefix_size, char *suffix, size_t suffix_size);

#endif
