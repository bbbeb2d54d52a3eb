/*
 * The tokenizer object shared by the tokenizer_*.c files: the vocabulary as
 * raw byte strings (pieces), the lookup from bytes to id, the merge table,
 * added/special tokens and the word cache.
 *
 * Invariants once a load has succeeded: every byte 0..255 has a token
 * (byte_id), every merge names existing tokens and a merged token that
 * exists, ids are unique and < n_vocab, pieces never change. Pieces are raw
 * bytes: the GPT-2 byte-to-unicode mapping is undone at load time, so the
 * encoder and decoder never see it.
 * Nothing here reads files (tokenizer_load.c does) or splits text
 * (tokenizer_pretok.c does).
 */
#ifndef KVLM_TOKENIZER_INTERNAL_H
#define KVLM_TOKENIZER_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "kvlm.h"
#include "tokenizer_bpe.h"
#include "tokenizer_cache.h"

/* Largest id accepted from a file: keeps allocations sized by ids bounded. */
#define TOK_MAX_ID ((1 << 24) - 1)
#define TOK_DEFAULT_CACHE 65536

enum {
    TOK_PRESENT = 1,   /* the id has a piece */
    TOK_SPECIAL = 2,   /* matched in text only when the caller allows it */
    TOK_ADDED = 4,     /* matched in text before pre-tokenisation */
};

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
    uint8_t *flags;               /* TOK_PRESENT | TOK_SPECIAL | TOK_ADDED */
    int32_t byte_id[256];
    tok_map map;
    tok_merge_table merges;
    int32_t *added;               /* TOK_ADDED ids, longest piece first */
    size_t n_added;
    uint8_t added_first[256];     /* bit 1: some added token starts with the
                                     byte; bit 2: some non-special one does */
    int ignore_merges;            /* tokenizer.json: a word in the vocabulary
                                     is one token without merging */
    int32_t eos_id;
    char source[1100];

    pthread_mutex_t cache_lock;
    tok_cache cache;
};

/* tokenizer_load.c */
kvlm_tokenizer *tok_alloc(void);
int tok_load_path(kvlm_tokenizer *t, const char *path, kvlm_error *err);
int32_t tok_map_get(const kvlm_tokenizer *t, const void *bytes, size_t len);

static inline const char *tok_piece(const kvlm_tokenizer *t, int32_t id, size_t *len) {
    *len = t->piece_len[id];
    return t->arena + t->piece_off[id];
}

#endif
