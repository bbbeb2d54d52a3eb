/*
 * Cache of merged words: pre-token bytes -> the token ids BPE made of them.
 * Natural text repeats a small set of words, so most pre-tokens skip the
 * merge loop entirely once the cache is warm.
 *
 * Bounded: at most max_entries words of at most TOK_CACHE_MAX_WORD bytes;
 * when either the table or its byte arena is full the whole cache is
 * cleared (simple, and a warm working set refills it in one pass).
 * Not thread-safe by itself: the tokenizer guards it with a lock that an
 * encode call only tries to take, and encodes without the cache if the
 * lock is busy, so results never depend on the cache.
 */
#ifndef KVLM_TOKENIZER_CACHE_H
#define KVLM_TOKENIZER_CACHE_H

#include <stddef.h>
#include <stdint.h>

#define TOK_CACHE_MAX_WORD 64

typedef struct tok_cache_slot {
    uint64_t hash;      /* 0 marks an empty slot */
    uint32_t off;       /* key bytes at arena + off, ids right after (aligned) */
    uint16_t key_len;
    uint16_t n_ids;
} tok_cache_slot;

typedef struct tok_cache {
    tok_cache_slot *slots;
    size_t mask, used, max_entries;
    unsigned char *arena;
    size_t arena_used, arena_cap;
    uint64_t hits, misses;
} tok_cache;

/* max_entries 0 leaves the cache empty and disabled. Returns 0 or -1. */
int tok_cache_init(tok_cache *c, size_t max_entries);
void tok_cache_free(tok_cache *c);
void tok_cache_clear(tok_cache *c);
uint64_t tok_hash_bytes(const void *p, size_t n);
/* Cached ids of word w (hash h = tok_hash_bytes(w, n)), or NULL. */
const int32_t *tok_cache_get(tok_cache *c, const unsigned char *w, size_t n, uint64_t h,
                             size_t *n_ids);
/* Stores ids for w; silently does nothing for words it does not keep. */
void tok_cache_put(tok_cache *c, const unsigned char *w, size_t n, uint64_t h,
                   const int32_t *ids, size_t n_ids);

#endif
