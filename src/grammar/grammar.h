/*
 * Grammar engine internals: a context-free grammar over bytes, its builder,
 * the recogniser (matcher) that advances over bytes, the vocabulary trie and
 * the token mask.
 *
 * A compiled grammar (struct kvlm_grammar) is a flat array of elements:
 * every alternative of every rule is a run of GR_BYTES (one byte out of a
 * 256-bit set) and GR_RULE (a reference to a rule) elements closed by
 * GR_END. Unicode character classes of the source syntaxes are compiled to
 * alternatives of UTF-8 byte sequences, so the matcher only ever sees
 * bytes and a token may end or begin inside a character. A compiled
 * grammar is immutable once built: it is shared by any number of matchers
 * on any threads. Left recursion is refused when the grammar is built, so
 * expanding a rule always terminates.
 *
 * The matcher is a pushdown recogniser: its state is a set of stacks of
 * element positions (the top is the GR_BYTES element the next byte must
 * match, the rest are return positions), deduplicated. Stacks are nodes of
 * a persistent, hash-consed tree owned by the matcher, so a stack is one
 * int32 and equal stacks are equal ints; the expansion that follows
 * consuming a stack's top byte is memoised per node. The empty stack (node
 * 0) in a state means the grammar has accepted.
 *
 * The trie holds a vocabulary's token byte strings (what decode prints) in
 * preorder, so every subtree's tokens are one contiguous run; per node it
 * keeps the union of the ASCII bytes below it, which lets the mask accept
 * a whole subtree at once when the state loops on all of those bytes
 * (the body of a JSON string, the digits of a number).
 */
#ifndef KVLM_GRAMMAR_INTERNAL_H
#define KVLM_GRAMMAR_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kvlm.h"

enum { GR_END = 0, GR_BYTES = 1, GR_RULE = 2 };

typedef struct gr_elem {
    int32_t type;  /* GR_* */
    int32_t arg;   /* GR_BYTES: index into sets; GR_RULE: rule id */
} gr_elem;

typedef struct gr_set {
    uint64_t w[4];
} gr_set;

static inline int gr_set_has(const gr_set *s, unsigned b) { return (int)((s->w[b >> 6] >> (b & 63)) & 1); }
static inline void gr_set_add(gr_set *s, unsigned b) { s->w[b >> 6] |= 1ull << (b & 63); }

struct kvlm_grammar {
    gr_elem *elems;
    int32_t n_elems;
    gr_set *sets;
    int32_t n_sets;
    int32_t *alts;      /* start position of each alternative, rule after rule */
    int32_t *rule_alt;  /* rule r's alternatives: alts[rule_alt[r] .. rule_alt[r + 1]) */
    int32_t n_rules;
    int32_t root;
};

/* ------------------------------------------------------------- builder */

typedef struct gr_seq {
    gr_elem *e;
    int n, cap;
} gr_seq;

typedef struct gr_brule {
    char *name;         /* NULL for rules made for groups, classes, repetitions */
    int defined;        /* a definition was read (named rules) */
    int line;           /* where it was first referenced or defined */
    gr_seq *alts;
    int n_alts, cap_alts;
} gr_brule;

typedef struct gr_builder {
    gr_brule *rules;
    int n_rules, cap_rules;
    gr_set *sets;
    int n_sets, cap_sets;
    int32_t *set_slots; /* open addressing over sets, -1 empty */
    size_t set_mask;
    int oom;            /* an allocation failed: every later call is a no-op */
} gr_builder;

void gr_builder_init(gr_builder *b);
void gr_builder_free(gr_builder *b);
/* The id of the named rule, created (undefined) on first use. */
int gr_rule_named(gr_builder *b, const char *name, size_t len, int line);
int gr_rule_new(gr_builder *b);
/* A new, empty alternative of rule r (valid until the next builder call
 * that adds an alternative). */
gr_seq *gr_alt_new(gr_builder *b, int r);
void gr_seq_push(gr_builder *b, gr_seq *s, int type, int arg);
int gr_set_id(gr_builder *b, const gr_set *set);
/* Appends to alternative (r, alt) the elements matching one code point of
 * the set given as sorted, disjoint [lo, hi] ranges (surrogates are never
 * matched): one GR_BYTES when all are ASCII, else a reference to a new
 * rule of UTF-8 byte sequences. */
void gr_push_codepoints(gr_builder *b, int r, int alt, const uint32_t (*ranges)[2], int n);
/* Appends the bytes of s as GR_BYTES elements. */
void gr_push_literal(gr_builder *b, int r, int alt, const char *s, size_t n);
/* Flattens into a grammar with `root` as its start rule: refuses undefined
 * rules and left recursion (err names the rule). */
kvlm_grammar *gr_builder_finish(gr_builder *b, int root, const char *what, kvlm_error *err);

/* gbnf.c: parses GBNF text into a grammar ("root" is the start rule). */
kvlm_grammar *gr_parse_gbnf(const char *text, size_t len, const char *what, kvlm_error *err);

/* A growable text buffer for the compilers that emit GBNF. */
typedef struct gr_text {
    char *s;
    size_t n, cap;
    int oom;
} gr_text;
void gr_text_add(gr_text *t, const char *s, size_t n);
void gr_text_printf(gr_text *t, const char *fmt, ...) KVLM_PRINTF(2, 3);
/* s (UTF-8) as a GBNF string literal: "..." with control characters, the
 * quote and the backslash written \xHH, other characters as they are. */
void gr_text_literal(gr_text *t, const char *s, size_t n);

/* regex.c: a regular expression as a GBNF expression (no rule around it).
 * json_string: the expression will sit inside a JSON string: characters
 * JSON must escape are left out of classes and '.', and refused as
 * literals. Returns 0 or a kvlm_status with err naming the position. */
int gr_regex_to_gbnf(const char *re, size_t len, int json_string, gr_text *out, kvlm_error *err);

/* ------------------------------------------------------------- matcher */

typedef struct gr_matcher gr_matcher;

gr_matcher *gr_matcher_new(const kvlm_grammar *g, kvlm_error *err);
void gr_matcher_free(gr_matcher *m);
/* Consumes bytes; returns 0, or -1 (state unchanged) when they cannot
 * continue the grammar, KVLM_ERR_NOMEM when memory ran out. */
int gr_matcher_advance(gr_matcher *m, const void *bytes, size_t n);
/* 1 when the bytes consumed so far form a complete sentence. */
int gr_matcher_accepting(const gr_matcher *m);

/* Closing distances. Every rule has a minimum length (the fewest bytes of
 * a sentence it derives, found by a fixed point over the rules when the
 * matcher is made); a stack's distance is the sum of the rest of each
 * alternative on it, so it is known when the stack is made, and a state's
 * is the least over its stacks: the fewest bytes that take it to an
 * accepting state. One byte on a shortest path lowers it by exactly one.
 * GR_NO_CLOSE: the grammar derives no finite sentence from there. */
#define GR_NO_CLOSE (1 << 30)
int gr_matcher_min_close(const gr_matcher *m);
/* The state as stacks (internal, for token_mask.c): sorted node ids. */
typedef struct gr_state {
    const int32_t *ids;
    int n;
} gr_state;
gr_state gr_matcher_state(const gr_matcher *m);
/* The closing distance of a state (the least over its stacks). */
int gr_state_min_close(const gr_matcher *m, gr_state st);
/* Writes the state reached from st by byte b to out (capacity cap ids);
 * returns its size (0: b is impossible), -1 when cap is too small (the
 * size is in *need), KVLM_ERR_NOMEM on a failed allocation. */
int gr_state_step(gr_matcher *m, gr_state st, unsigned b, int32_t *out, int cap, int *need);
/* Node counts, for tests and the benchmark. */
size_t gr_matcher_nodes(const gr_matcher *m);

/* --------------------------------------------------------- token mask */

typedef struct gr_trie gr_trie;

/* The vocabulary of tok as a trie of the bytes decode prints for each
 * token; special tokens and tokens that print nothing are left out (never
 * allowed by a mask). */
gr_trie *gr_trie_build(const kvlm_tokenizer *tok, kvlm_error *err);
/* The same from explicit byte strings (tests, hand-made vocabularies):
 * pieces[i] of lens[i] bytes is token i; NULL or length 0: never allowed. */
gr_trie *gr_trie_from_pieces(const char *const *pieces, const size_t *lens, int n_vocab, kvlm_error *err);
void gr_trie_free(gr_trie *t);
int gr_trie_vocab(const gr_trie *t);
size_t gr_trie_nodes(const gr_trie *t);

/* The tokens whose whole byte string can be consumed from m's state, as a
 * bitset of (vocab + 63) / 64 words. Returns the number of allowed tokens,
 * or KVLM_ERR_NOMEM. Recently seen states are answered from a cache kept
 * in the matcher. */
int gr_token_mask(gr_matcher *m, const gr_trie *t, uint64_t *bits);
/* The same, keeping only the tokens after which the state's closing
 * distance is at most max_close bytes (GR_NO_CLOSE or more: no limit).
 * The limit never changes the mask of a state whose every allowed token
 * stays within it, and the cache knows it: a mask computed without
 * cutting anything answers every limit at or above the largest distance
 * it saw. */
int gr_token_mask_within(gr_matcher *m, const gr_trie *t, int max_close, uint64_t *bits);
/* 0: compute every mask (no per-state cache), for measurements. */
void gr_matcher_mask_cache(gr_matcher *m, int on);

#endif
