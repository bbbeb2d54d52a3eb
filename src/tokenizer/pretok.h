/*
 * GPT-2 pre-tokeniser: splits text into the pieces the pattern
 *
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *
 * finds, with leftmost-first alternation as in a backtracking regex engine.
 * It is a hand-written scanner, not a regex: every character falls into
 * exactly one class (letter, number, white space, other), which is all the
 * pattern looks at. Classes: \p{L} and \p{N} are the Unicode general
 * categories; \s is the White_Space property (as in the reference GPT-2
 * implementation; not PCRE2's UCP \s, which adds U+180E). A byte that does
 * not start a well-formed UTF-8 sequence is one character of class other.
 * It knows nothing about vocabularies or merges.
 */
#ifndef KVLM_TOKENIZER_PRETOK_H
#define KVLM_TOKENIZER_PRETOK_H

#include <stddef.h>
#include <stdint.h>

enum tok_class { TOK_O = 0, TOK_L = 1, TOK_N = 2, TOK_S = 3 };

typedef struct tok_urange {
    uint32_t lo, hi;   /* inclusive */
    uint32_t cls;      /* enum tok_class */
} tok_urange;

/* Generated table (tokenizer/unicode_classes.c): sorted, non-overlapping ranges of
 * code points >= 0x80 whose class is not TOK_O. */
extern const tok_urange tok_uranges[];
extern const size_t tok_n_uranges;

/* Decodes one well-formed UTF-8 sequence at s (n > 0 bytes available).
 * Returns its length (1..4) and sets *cp, or returns 1 with *cp = -1 when
 * s[0] does not start a well-formed sequence (overlong forms, surrogates,
 * code points above U+10FFFF and truncated sequences are not well formed). */
size_t tok_utf8_decode(const unsigned char *s, size_t n, int32_t *cp);

/* Class of a code point (cp < 0 means an invalid byte: TOK_O). */
int tok_class_of(int32_t cp);

/* End (exclusive) of the pre-token that starts at s[i], i < n. */
size_t tok_pretok_next(const unsigned char *s, size_t n, size_t i);

#endif
