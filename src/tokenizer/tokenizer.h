/*
 * The tokenizer object shared by the tokenizer_*.c files: the vocabulary as
 * byte strings (pieces), the lookup from bytes to id, the merge table (or
 * the piece scores), added/special tokens, the pre-tokenisation and
 * normalisation settings and the word cache.
 *
 * Two kinds of vocabulary:
 * - byte-level (GPT-2, Llama 3, Qwen2): pieces are raw bytes (the GPT-2
 *   byte-to-unicode mapping is undone at load time), every byte 0..255 has
 *   a token (byte_id) and a word starts as its bytes.
 * - SentencePiece-style (Llama 2): pieces are the vocabulary strings as
 *   written ("▁the", "<0x0A>"), a word starts as its characters, and a
 *   character missing from the vocabulary falls back to the byte tokens
 *   <0x00>..<0xFF> (byte_id). What decode prints for a token ("▁" as a
 *   space, a byte token as its byte) is kept apart in dec_*.
 *
 * Invariants once a load has succeeded: every merge names existing tokens
 * and a merged token that exists, ids are unique and < n_vocab, every byte
 * has a byte token (byte-level unless bytes_optional, or SentencePiece
 * with byte fallback),
 * pieces never change. Nothing here reads files (tokenizer/load.c,
 * tokenizer/hf_json.c and tokenizer/gguf_vocab.c do) or splits text
 * (tokenizer/pretok.c, tokenizer/regex.c and tokenizer/spm.c do).
 */
#ifndef KVLM_TOKENIZER_INTERNAL_H
#define KVLM_TOKENIZER_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "kvlm.h"
#include "tokenizer/bpe.h"
#include "tokenizer/word_cache.h"

/* Largest id accepted from a file: keeps allocations sized by ids bounded. */
#define TOK_MAX_ID ((1 << 24) - 1)
#define TOK_DEFAULT_CACHE 65536
/* Pre-tokenisation stages (Split patterns, ByteLevel's own) applied in turn. */
#define TOK_MAX_LEVELS 4
#define TOK_MAX_TEMPLATE 4

enum {
    TOK_PRESENT = 1,   /* the id has a piece */
    TOK_SPECIAL = 2,   /* matched in text only when the caller allows it */
    TOK_ADDED = 4,     /* matched in text before pre-tokenisation */
    TOK_INMODEL = 8,   /* in the model's vocabulary (may come out of a merge) */
    TOK_NOMERGE = 16,  /* SentencePiece control/unknown/byte/unused piece:
                          never formed from text by merging */
    TOK_NOMAP = 32,    /* has a piece (decode prints it) but text never maps
                          to it: a GGUF byte-level token written outside
                          GPT-2's byte alphabet, which llama.cpp never
                          produces; another id with the same bytes does */
};

enum tok_kind { TOK_KIND_BYTELEVEL = 0, TOK_KIND_SPM = 1 };

enum tok_merge_mode {
    TOK_MERGE_ROUNDS = 0,  /* OpenAI's GPT-2 encoder: all occurrences of the
                              lowest-ranked pair per round */
    TOK_MERGE_ONE = 1,     /* Hugging Face / llama.cpp BPE: the leftmost
                              occurrence of the lowest-ranked pair at a time */
    TOK_MERGE_SCORE = 2,   /* SentencePiece BPE: the adjacent pair whose
                              concatenation is the piece of highest score */
};

/* When a SentencePiece-style tokenizer puts "▁" in front of a text fragment. */
enum tok_prefix {
    TOK_PREFIX_NONE = 0,
    TOK_PREFIX_ALWAYS = 1,      /* normalizer Prepend: every non-empty fragment */
    TOK_PREFIX_META_ALWAYS = 2, /* Metaspace: every fragment not already starting with ▁ */
    TOK_PREFIX_META_FIRST = 3,  /* Metaspace "first": only a fragment at offset 0 */
};

typedef struct tok_regex tok_regex;

typedef struct tok_level {
    tok_regex *re;     /* NULL: GPT-2's pattern, by the hand-written scanner */
} tok_level;

/* Bytes -> id, open addressing over ids; keys are the pieces themselves. */
typedef struct tok_map {
    int32_t *slots;    /* -1 empty */
    uint32_t *hashes;
    size_t mask;
} tok_map;

struct kvlm_tokenizer {
    int32_t n_vocab;              /* largest id + 1 */
    char *arena;                  /* all pieces, in load order */
    size_t arena_len, arena_cap;
    uint32_t *piece_off;          /* n_vocab entries */
    uint32_t *piece_len;
    uint8_t *flags;               /* TOK_* */
    int32_t byte_id[256];         /* -1: no token (bytes_optional only) */
    int bytes_optional;           /* byte-level: a byte without a token is
                                     dropped from the encoding (GGUF files,
                                     as llama.cpp does) instead of refusing
                                     the vocabulary; tok_finish clears it
                                     when every byte has a token */
    tok_map map;
    tok_merge_table merges;
    float *scores;                /* TOK_MERGE_SCORE: n_vocab scores */
    int32_t *added;               /* TOK_ADDED ids, longest piece first */
    size_t n_added;
    uint8_t added_first[256];     /* bit 1: some added token starts with the
                                     byte; bit 2: some non-special one does */
    int ignore_merges;            /* a word in the vocabulary is one token
                                     without merging */
    int kind;                     /* enum tok_kind */
    int merge_mode;               /* enum tok_merge_mode */
    tok_level levels[TOK_MAX_LEVELS];   /* byte-level pre-tokenisation */
    int n_levels;
    int nfc;                      /* normalizer NFC */
    /* SentencePiece-style normalisation and model options */
    int spm_prefix;               /* enum tok_prefix */
    int spm_replace;              /* ' ' -> "▁" */
    int spm_split;                /* Metaspace split: words start at each ▁ */
    int byte_fallback;
    int32_t unk_id;
    int fuse_unk;
    /* decoding: dec_* is NULL when decode prints the pieces themselves */
    char *dec_arena;
    uint32_t *dec_off, *dec_len;
    int strip_leading_space;      /* decoder Strip / Metaspace: drop one leading ' ' */
    int dec_meta_space;           /* decoder prints "▁" as ' ' */
    int dec_byte_fallback;        /* decoder prints <0xXX> as the byte */
    /* special ids and the template added by KVLM_ENCODE_ADD_SPECIAL */
    int32_t eos_id, bos_id;
    int32_t eot_id, eom_id;       /* GGUF end of turn / end of message, or -1 */
    int32_t fim_ids[KVLM_FIM_COUNT];  /* fill-in-the-middle tokens by kvlm_fim_token, or -1
                                         (tokenizer/fim.c) */
    int32_t prefix_ids[TOK_MAX_TEMPLATE], suffix_ids[TOK_MAX_TEMPLATE];
    int n_prefix, n_suffix;
    char source[1100];

    pthread_mutex_t cache_lock;
    tok_cache cache;
};

/* tokenizer/load.c: the format dispatch (which files a path names) */
int tok_load_path(kvlm_tokenizer *t, const char *path, kvlm_error *err);

/* tokenizer/files.c: a file's bytes (malloc'ed), a JSON object file */
int tok_read_file(const char *path, char **buf, size_t *len, kvlm_error *err);
json_t *tok_load_json(const char *path, kvlm_error *err);

/* tokenizer/vocab_builder.c: allocation, pieces, the bytes->id map,
 * vocabulary and merges, the finishing checks (no files, no formats) */
kvlm_tokenizer *tok_alloc(void);
int32_t tok_map_get(const kvlm_tokenizer *t, const void *bytes, size_t len);
int tok_set_piece(kvlm_tokenizer *t, int32_t id, const char *raw, size_t len);
int tok_reserve_ids(kvlm_tokenizer *t, int32_t n);
int tok_map_build(kvlm_tokenizer *t);
const char *tok_show(const char *s, size_t n, char *buf, size_t cap);
/* GPT-2's byte-to-unicode table, inverted (code point -> byte, or -1). */
#define TOK_UNMAP_SIZE 0x144
void tok_build_unmap(int16_t rev[TOK_UNMAP_SIZE]);
/* rev NULL: vocabulary strings are the pieces themselves. */
int tok_load_vocab(kvlm_tokenizer *t, json_t *vocab, const int16_t *rev, const char *where,
                   kvlm_error *err);
int tok_add_merge(kvlm_tokenizer *t, const int16_t *rev, const char *a, size_t alen,
                  const char *b, size_t blen, const char *where, kvlm_error *err);
int tok_load_merges_json(kvlm_tokenizer *t, const int16_t *rev, json_t *merges,
                         const char *path, kvlm_error *err);
/* Fills byte_id, the added-token index, decoded forms and the cache. */
int tok_finish(kvlm_tokenizer *t, const char *where, kvlm_error *err);

/* tokenizer/hf_json.c: tokenizer.json (and tokenizer_config.json beside it) */
int tok_load_tokenizer_json(kvlm_tokenizer *t, json_t *root, const char *path, kvlm_error *err);
/* tokenizer_config.json in the directory of path, if there is one: bos_token
 * and eos_token (names of tokens; ids set when found), add_bos_token and
 * add_eos_token (the tokens KVLM_ENCODE_ADD_SPECIAL puts around a text).
 * Needs the bytes -> id map. A missing or unreadable file changes nothing. */
void tok_read_config(kvlm_tokenizer *t, const char *path);

/* tokenizer/gguf_vocab.c: a tokenizer from the arrays of GGUF metadata, for
 * the GGUF loader (tokenizer/gguf_file.c) and tests. The arrays are copied;
 * the caller keeps them. Returns NULL with err set (KVLM_ERR_FORMAT naming
 * the array and index or the id at fault, KVLM_ERR_UNSUPPORTED for an
 * unknown model or pre). */
typedef struct tok_gguf_vocab {
    const char *model;             /* tokenizer.ggml.model: "gpt2" (byte-level
                                      BPE by merges) or "llama" (SentencePiece
                                      BPE by scores with byte fallback) */
    const char *pre;               /* tokenizer.ggml.pre or NULL (gguf_pre.c) */
    const char *const *tokens;     /* NUL-terminated */
    int n_tokens;
    const float *scores;           /* needed for "llama"; may be NULL for "gpt2" */
    const int32_t *types;          /* token_type; NULL: all normal */
    const char *const *merges;     /* "gpt2"; ignored for "llama" */
    int n_merges;
    /* *_token_id; -1 if absent */
    int bos, eos, unk, pad, eot, eom;
    int fim[KVLM_FIM_COUNT];       /* fim_{pre,suf,mid,pad,rep,sep}_token_id */
    /* add_bos_token, add_eos_token, add_space_prefix: 0/1, -1 if absent */
    int add_bos, add_eos, add_space_prefix;
} tok_gguf_vocab;
/* All ids -1, all flags absent. */
#define TOK_GGUF_VOCAB_INIT \
    {.bos = -1, .eos = -1, .unk = -1, .pad = -1, .eot = -1, .eom = -1, .fim = {-1, -1, -1, -1, -1, -1}, \
     .add_bos = -1, .add_eos = -1, .add_space_prefix = -1}
kvlm_tokenizer *tok_from_gguf_vocab(const tok_gguf_vocab *v, kvlm_error *err);
/* The vocabulary a GGUF file carries (see tokenizer/gguf_file.c). */
kvlm_tokenizer *tok_load_gguf_file(const char *path, struct kvlm_error *err);
/* tokenizer/gguf_pre.c: sets t's pre-tokenisation stages and ignore_merges
 * for tokenizer.ggml.pre (NULL: GPT-2's pattern) and *add_bos_default (the
 * add_bos_token of a file that does not set it); KVLM_ERR_UNSUPPORTED
 * naming pre and the supported names otherwise. */
int tok_gguf_pre_set(kvlm_tokenizer *t, const char *pre, int *add_bos_default, kvlm_error *err);

/* End-of-turn and end-of-message ids (GGUF eot/eom) of t: writes up to 2
 * to ids and returns their number. */
/* tokenizer/fim.c: fills the fill-in-the-middle ids no file named from
 * the vocabulary's well-known FIM token names (tok_finish calls it). */
void tok_find_fim(kvlm_tokenizer *t);
int tok_end_of_turn_ids(const kvlm_tokenizer *t, int32_t ids[2]);

/* tokenizer/spm.c */
/* Byte value of a "<0xXX>" piece (uppercase hex digits), or -1. */
int tok_byte_piece_value(const char *p, size_t len);
/* SentencePiece BPE by scores over text[0..n) (already normalised):
 * writes at most n ids to out and returns their number, or -1 (out of
 * memory). */
long tok_spm_score_merge(const kvlm_tokenizer *t, const unsigned char *text, size_t n,
                         int32_t *out, tok_bpe_scratch *scratch);
/* Initial symbols of a SentencePiece-style word: one token per character,
 * or its byte tokens (byte fallback), or unk. Writes at most n ids. */
size_t tok_spm_initial(const kvlm_tokenizer *t, const unsigned char *w, size_t n, int32_t *out);

static inline const char *tok_piece(const kvlm_tokenizer *t, int32_t id, size_t *len) {
    *len = t->piece_len[id];
    return t->arena + t->piece_off[id];
}

/* What decode prints for id. */
static inline const char *tok_dec_piece(const kvlm_tokenizer *t, int32_t id, size_t *len) {
    if (!t->dec_off) return tok_piece(t, id, len);
    *len = t->dec_len[id];
    return t->dec_arena + t->dec_off[id];
}

#endif
