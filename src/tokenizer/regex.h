/*
 * Split pre-tokeniser of Hugging Face tokenizer.json files (Llama 3, Qwen2
 * and others) and of GGUF vocabularies (tokenizer/gguf_pre.c): a regular
 * expression, compiled once with PCRE2 (UTF, UCP, JIT), that cuts a text
 * fragment into pieces: every
 * match is a piece, and so is every stretch of text between two matches
 * (the "Isolated" behaviour).
 *
 * The pattern is the file's, with one translation: \s and \S become
 * \p{White_Space} and \P{White_Space}, which is what \s means to the
 * Oniguruma engine of the reference implementation (PCRE2's own UCP \s
 * also takes U+180E).
 *
 * Bytes that are not valid UTF-8 are matched as characters of their own
 * that are neither letters, numbers nor white space (each is replaced, for
 * the match only, by a private-use code point, category Co), exactly as
 * the GPT-2 scanner treats them; pieces always cut the original bytes.
 * A compiled pattern is immutable and may be shared by threads.
 */
#ifndef KVLM_TOKENIZER_REGEX_H
#define KVLM_TOKENIZER_REGEX_H

#include <stddef.h>

typedef struct tok_regex tok_regex;

/* GPT-2's pattern (its pieces are made by the hand-written scanner). */
extern const char tok_gpt2_pattern[];
/* The patterns GGUF files name (tokenizer.ggml.pre) are in tokenizer/gguf_pre.c. */

/* Compiles pattern[0..len). On failure returns NULL and writes PCRE2's
 * message and the offset into msg. */
tok_regex *tok_regex_compile(const char *pattern, size_t len, char *msg, size_t msgcap);
void tok_regex_free(tok_regex *re);

/* Called for every piece, in order; returns 0 to go on, non-zero to stop. */
typedef int (*tok_piece_fn)(void *ctx, const unsigned char *piece, size_t n);

/* Cuts text[0..n) into pieces. Returns 0, or what fn returned, or -1 with
 * msg set (out of memory, or PCRE2 failed to match, e.g. a resource
 * limit). */
int tok_regex_split(const tok_regex *re, const unsigned char *text, size_t n, tok_piece_fn fn,
                    void *ctx, char *msg, size_t msgcap);

#endif
