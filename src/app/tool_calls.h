/*
 * Tool calls in a model's output: the syntax each chat-template family
 * writes a call in, and an incremental parser that splits generated text
 * into content and calls (name, arguments as the model's JSON text).
 *
 * Families, told apart by the template's source (tc_family_detect):
 *   hermes   <tool_call>{"name": N, "arguments": {...}}</tool_call>, one
 *            block per call (Hermes 2/3, Qwen2.5, Qwen3, Granite 4)
 *   llama3   {"name": N, "parameters": {...}} as the whole answer, or
 *            after <|python_tag|>; several separated by ';' (Llama 3.1-3.3)
 *   mistral  [TOOL_CALLS][{"name": N, "arguments": {...}}, ...] (Nemo), or
 *            [TOOL_CALLS]N[ARGS]{...} per call (Mistral Small 3.2,
 *            Devstral, Ministral 3); both are read
 *   harmony  gpt-oss's channels: a message to=functions.N whose body is the
 *            arguments, ended by <|call|>; the analysis channel is
 *            reasoning (TC_EV_REASONING). Parsed by harmony.h's parser.
 *   generic  any of the above but harmony (templates whose syntax kvlm
 *            does not know)
 * "arguments" and "parameters" are read in every family.
 *
 * The parser reads bytes one at a time, so where the text is split between
 * feeds changes only how the events are grouped, never what they add up
 * to. Content that may be the start of a call (a prefix of a marker, a
 * '{' at the very start in the llama3 family) is withheld until it is
 * known not to be. A call becomes an event as soon as its name is known;
 * its arguments follow in pieces as they are generated. Whitespace next
 * to calls is not content; with no call, the content is the text, byte
 * for byte. A call region that turns out not to be a call (invalid JSON,
 * no name) is given back as content. The arguments are not validated
 * against the tool's schema (the grammar constraint does that when the
 * request forces a call); a call cut off by max_tokens keeps what came.
 */
#ifndef KVLM_APP_TOOL_CALLS_H
#define KVLM_APP_TOOL_CALLS_H

#include <stddef.h>

#include "app/sbuf.h"

typedef enum tc_family {
    TC_FAMILY_GENERIC = 0,
    TC_FAMILY_HERMES,
    TC_FAMILY_LLAMA3,
    TC_FAMILY_MISTRAL,
    TC_FAMILY_HARMONY,
} tc_family;

/* The family of a chat template, from its source text. */
tc_family tc_family_detect(const char *template_source);
const char *tc_family_name(tc_family f);

/* 1 if a special token's text is one of the call markers above (<tool_call>,
 * </tool_call>, <|python_tag|>, [TOOL_CALLS], [ARGS], [CALL_ID]): models
 * whose vocabularies make them control tokens write no text for them, so
 * the server feeds their text to the parser itself. */
int tc_is_marker(const char *s, size_t n);

/* How a forced call is written in a family: the text before and after one
 * call object, and the key of its arguments ("arguments" or
 * "parameters"). */
typedef struct tc_syntax {
    const char *prefix, *suffix, *args_key;
} tc_syntax;
tc_syntax tc_family_syntax(tc_family f);

typedef enum tc_event_kind {
    TC_EV_CONTENT,      /* text: content released */
    TC_EV_CALL,         /* a call begins: index, text = its name */
    TC_EV_ARGS,         /* a piece of call `index`'s arguments */
    TC_EV_REASONING,    /* text: reasoning released (harmony's analysis channel) */
} tc_event_kind;

typedef struct tc_event {
    tc_event_kind kind;
    int index;          /* the call's, from 0 */
    const char *text;
    size_t len;
} tc_event;

typedef void (*tc_emit_fn)(void *user, const tc_event *ev);

typedef struct tc_parser tc_parser;

tc_parser *tc_parser_new(tc_family f);
void tc_parser_free(tc_parser *p);
/* Feeds generated text; events go to emit. -1 when out of memory. */
int tc_parser_feed(tc_parser *p, const char *text, size_t n, tc_emit_fn emit, void *user);
/* The text has ended: releases what was withheld. */
int tc_parser_finish(tc_parser *p, tc_emit_fn emit, void *user);
/* Calls begun so far. */
int tc_parser_calls(const tc_parser *p);

/* The whole output at once (non-streaming responses). */
typedef struct tc_call {
    char *name;
    sbuf args;
} tc_call;

typedef struct tc_result {
    sbuf content;
    sbuf reasoning;     /* harmony: the analysis channel's text */
    tc_call *calls;
    int n_calls, cap_calls;
    int failed;         /* out of memory */
} tc_result;

int tc_parse(tc_family f, const char *text, size_t n, tc_result *r);
void tc_result_free(tc_result *r);

#endif
