/*
 * Cache of merged words (see tokenizer/word_cache.h). Open addressing keyed by a
 * 64-bit hash of the word, the word's bytes compared on a hash match; keys
 * and id lists live in one arena so a clear is two memsets, not a free per
 * entry.
 */
#include "tokenizer/word_cache.h"

#include <stdlib.h>
#include <string.h>

/* A multiply-xorshift hash over 8-byte words; any good mix works here, as
 * equal hashes are always confirmed by comparing the bytes. */
uint64_t tok_hash_bytes(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 0x243F6A8885A308D3ull ^ (n * 0x9E3779B97F4A7C15ull);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = (h ^ v) * 0xBF58476D1CE4E5B9ull;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) v |= (uint64_t)s[i] << (8 * i);
    h = (h ^ v) * 0x94D049BB133111EBull;
    h ^= h >> 29;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 32;
    return h ? h : 1;
}

int tok_cache_init(tok_cache *c, size_t max_entries) {
    memset(c, 0, sizeof *c);
    if (max_entries == 0) return 0;
    size_t cap = 16;
    while (cap < max_entries * 2) cap *= 2;
    c->slots = calloc(cap, sizeof *c->slots);
    /* Room for the average word (a few bytes plus a couple of ids). */
    c->arena_cap = max_entries * 32;
    c->arena = malloc(c->arena_cap);
    if (!c->slots || !c->arena) {
        tok_cache_free(c);
        return -1;
    }
    c->mask = cap - 1;
    c->max_entries = max_entries;
    return 0;
}

void tok_cache_free(tok_cache *c) {
    free(c->slots);
    free(c->arena);
    memset(c, 0, sizeof *c);
}

void tok_cache_clear(tok_cache *c) {
    if (c->slots) memset(c->slots, 0, (c->mask + 1) * sizeof *c->slots);
    c->used = 0;
    c->arena_used = 0;
}

const int32_t *tok_cache_get(tok_cache *c, const unsigned char *w, size_t n, uint64_t h,
                             size_t *n_ids) {
    if (!c->slots) return NULL;
    for (size_t i = (size_t)h & c->mask;; i = (i + 1) & c->mask) {
        const tok_cache_slot *s = &c->slots[i];
        if (s->hash == 0) break;
        if (s->hash == h && s->key_len == n && memcmp(c->arena + s->off, w, n) == 0) {
            c->hits++;
            *n_ids = s->n_ids;
            return (const int32_t *)(c->arena + s->off + ((n + 3) & ~(size_t)3));
        }
    }
    c->misses++;
    return NULL;
}

void tok_cache_put(tok_cache *c, const unsigned char *w, size_t n, uint64_t h,
                   const int32_t *ids, size_t n_ids) {
    if (!c->slots || n > TOK_CACHE_MAX_WORD || n_ids > n) return;
    size_t need = ((n + 3) & ~(size_t)3) + n_ids * sizeof(int32_t);
    if (c->used + 1 > c->max_entries || c->arena_used + need > c->arena_cap) tok_cache_clear(c);
    size_t i = (size_t)h & c->mask;
    while (c->slots[i].hash != 0) i = (i + 1) & c->mask;
    unsigned char *dst = c->arena + c->arena_used;
    memcpy(dst, w, n);
    memcpy(dst + ((n + 3) & ~(size_t)3), ids, n_ids * sizeof(int32_t));
    c->slots[i] = (tok_cache_slot){h, (uint32_t)c->arena_used, (uint16_t)n, (uint16_t)n_ids};
    c->arena_used += need;
    c->used++;
}
