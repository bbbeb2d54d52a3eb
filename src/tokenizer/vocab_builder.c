/*
 * Building a vocabulary: the pieces by id, the bytes -> id map, vocabulary
 * and merges from already-parsed JSON or text (tok_load_vocab,
 * tok_add_merge, tok_load_merges_json), and the finishing checks every
 * loader ends with (tok_finish: byte tokens, the added-token index, decoded
 * forms, the end-of-text id, the word cache). The format readers
 * (tokenizer/load.c, hf_json.c, gguf_vocab.c) call these; this file reads
 * no files and knows no format.
 *
 * Every failure names where the value came from (the `where` the reader
 * passes); nothing is trusted before it is checked (ids in range and
 * unique, merges naming known tokens, every byte having a token).
 * Vocabulary strings are in GPT-2's byte-to-unicode alphabet; they are
 * turned into raw bytes here, once. A character outside that alphabet
 * (possible only in unusual files) stands for its own UTF-8 bytes.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "tokenizer/pretok.h"
#include "tokenizer/tokenizer.h"

/* --------------------------------------------------------------- helpers */

/* Printable rendering of a token for error messages (truncated). */
const char *tok_show(const char *s, size_t n, char *buf, size_t cap) {
    size_t o = 0, i = 0;
    for (; i < n && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7F && c != '\\') buf[o++] = (char)c;
        else o += (size_t)snprintf(buf + o, cap - o, "\\x%02X", c);
    }
    if (i < n) { memcpy(buf + o, "...", 3); o += 3; }   /* o + 8 >= cap: room left */
    buf[o] = 0;
    return buf;
}

/* GPT-2's byte -> character table, inverted: code point -> byte, or -1.
 * Printable Latin-1 bytes stand for themselves; the other 68 bytes, in
 * order, are U+0100 onwards. Every character is below U+0144. */
void tok_build_unmap(int16_t rev[TOK_UNMAP_SIZE]) {
    for (int i = 0; i < TOK_UNMAP_SIZE; i++) rev[i] = -1;
    int extra = 0;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        rev[keep ? b : 0x100 + extra++] = (int16_t)b;
    }
}

/* Mapped string -> raw bytes (out has room for n bytes). Returns the raw
 * length, or -1 if s is not valid UTF-8. */
static long unmap_string(const int16_t *rev, const char *s, size_t n, char *out) {
    const unsigned char *u = (const unsigned char *)s;
    if (!rev) {
        if (n) memcpy(out, s, n); /* an empty piece may come with no buffer */
        return (long)n;
    }
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        int32_t cp;
        size_t l = tok_utf8_decode(u + i, n - i, &cp);
        if (cp < 0) return -1;
        if (cp < TOK_UNMAP_SIZE && rev[cp] >= 0) out[o++] = (char)rev[cp];
        else { memcpy(out + o, s + i, l); o += l; }
        i += l;
    }
    return (long)o;
}

/* ------------------------------------------------------------ the pieces */

kvlm_tokenizer *tok_alloc(void) {
    kvlm_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->eos_id = -1;
    t->bos_id = -1;
    t->unk_id = -1;
    t->eot_id = t->eom_id = -1;
    for (int k = 0; k < KVLM_FIM_COUNT; k++) t->fim_ids[k] = -1;
    t->n_levels = 1;   /* GPT-2's pattern by the scanner */
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    pthread_mutex_init(&t->cache_lock, NULL);
    return t;
}

/* Makes ids 0..n-1 addressable. */
int tok_reserve_ids(kvlm_tokenizer *t, int32_t n) {
    if (n <= t->n_vocab) return 0;
    uint32_t *off = realloc(t->piece_off, (size_t)n * sizeof *off);
    if (off) t->piece_off = off;
    uint32_t *len = realloc(t->piece_len, (size_t)n * sizeof *len);
    if (len) t->piece_len = len;
    uint8_t *flags = realloc(t->flags, (size_t)n);
    if (flags) t->flags = flags;
    if (!off || !len || !flags) return -1;
    for (int32_t i = t->n_vocab; i < n; i++) {
        t->piece_off[i] = 0;
        t->piece_len[i] = 0;
        t->flags[i] = 0;
    }
    t->n_vocab = n;
    return 0;
}

int tok_set_piece(kvlm_tokenizer *t, int32_t id, const char *raw, size_t len) {
    if (tok_reserve_ids(t, id + 1) != 0) return -1;
    /* allocated at the first piece, even an empty one: pieces point into it */
    if (!t->arena || t->arena_len + len > t->arena_cap) {
        size_t cap = t->arena_cap ? t->arena_cap : 1 << 16;
        while (cap < t->arena_len + len) cap *= 2;
        if (cap > UINT32_MAX) return -1;
        char *a = realloc(t->arena, cap);
        if (!a) return -1;
        t->arena = a;
        t->arena_cap = cap;
    }
    if (len) memcpy(t->arena + t->arena_len, raw, len); /* raw may be NULL when empty */
    t->piece_off[id] = (uint32_t)t->arena_len;
    t->piece_len[id] = (uint32_t)len;
    t->flags[id] |= TOK_PRESENT;
    t->arena_len += len;
    return 0;
}

/* ------------------------------------------------------------- bytes->id */

int tok_map_build(kvlm_tokenizer *t) {
    size_t cap = 64;
    while (cap < (size_t)t->n_vocab * 2) cap *= 2;
    free(t->map.slots);
    free(t->map.hashes);
    t->map.slots = malloc(cap * sizeof *t->map.slots);
    t->map.hashes = malloc(cap * sizeof *t->map.hashes);
    if (!t->map.slots || !t->map.hashes) return -1;
    t->map.mask = cap - 1;
    for (size_t i = 0; i < cap; i++) t->map.slots[i] = -1;
    /* In id order, and an equal piece already present is kept: the lowest
     * id wins when two ids share bytes. */
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (!(t->flags[id] & TOK_PRESENT) || (t->flags[id] & TOK_NOMAP)) continue;
        size_t len;
        const char *p = tok_piece(t, id, &len);
        if (tok_map_get(t, p, len) >= 0) continue;
        uint64_t h = tok_hash_bytes(p, len);
        size_t i = (size_t)h & t->map.mask;
        while (t->map.slots[i] >= 0) i = (i + 1) & t->map.mask;
        t->map.slots[i] = id;
        t->map.hashes[i] = (uint32_t)(h >> 32);
    }
    return 0;
}

int32_t tok_map_get(const kvlm_tokenizer *t, const void *bytes, size_t len) {
    if (!t->map.slots) return -1;
    uint64_t h = tok_hash_bytes(bytes, len);
    for (size_t i = (size_t)h & t->map.mask;; i = (i + 1) & t->map.mask) {
        int32_t id = t->map.slots[i];
        if (id < 0) return -1;
        if (t->map.hashes[i] == (uint32_t)(h >> 32) && t->piece_len[id] == len &&
            memcmp(t->arena + t->piece_off[id], bytes, len) == 0)
            return id;
    }
}

/* ------------------------------------------------------------ vocabulary */

/* vocab: object of mapped string -> id. where: "PATH" or "PATH: model.vocab". */
int tok_load_vocab(kvlm_tokenizer *t, json_t *vocab, const int16_t *rev, const char *where,
                      kvlm_error *err) {
    if (!json_is_object(vocab) || json_object_size(vocab) == 0)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: expected a non-empty object of token -> id",
                              where);
    const char *key;
    size_t klen;
    json_t *v;
    char sbuf[96], sbuf2[96];
    /* Ids first, so that the piece arrays are allocated once. */
    json_int_t max_id = -1;
    json_object_keylen_foreach(vocab, key, klen, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > TOK_MAX_ID)
            return kvlm_error_set(err, KVLM_ERR_FORMAT,
                                  "%s: token '%s' has id %s, expected an integer in 0..%d", where,
                                  tok_show(key, klen, sbuf, sizeof sbuf),
                                  json_is_integer(v) ? "out of range" : "not an integer", TOK_MAX_ID);
        if (json_integer_value(v) > max_id) max_id = json_integer_value(v);
    }
    if (tok_reserve_ids(t, (int32_t)max_id + 1) != 0)
        return kvlm_error_set(err, KVLM_ERR_NOMEM, "%s: out of memory", where);
    char *raw = NULL;
    size_t raw_cap = 0;
    json_object_keylen_foreach(vocab, key, klen, v) {
        int32_t id = (int32_t)json_integer_value(v);
        if (t->flags[id] & TOK_PRESENT) {
            size_t plen;
            const char *p = tok_piece(t, id, &plen);
            free(raw);
            return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: duplicate id %d (tokens '%s' and '%s')",
                                  where, id, tok_show(p, plen, sbuf, sizeof sbuf),
                                  tok_show(key, klen, sbuf2, sizeof sbuf2));
        }
        if (klen > raw_cap) {
            free(raw);
            raw_cap = klen * 2 + 16;
            raw = malloc(raw_cap);
            if (!raw) return kvlm_error_set(err, KVLM_ERR_NOMEM, "%s: out of memory", where);
        }
        long n = unmap_string(rev, key, klen, raw);
        if (n < 0) {   /* jansson has checked the UTF-8 already */
            free(raw);
            return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: token '%s' is not valid UTF-8", where,
                                  tok_show(key, klen, sbuf, sizeof sbuf));
        }
        if (tok_set_piece(t, id, raw, (size_t)n) != 0) {
            free(raw);
            return kvlm_error_set(err, KVLM_ERR_NOMEM, "%s: out of memory", where);
        }
        t->flags[id] |= TOK_INMODEL;
    }
    free(raw);
    return 0;
}

/* ---------------------------------------------------------------- merges */

/* Adds the merge (a, b) given as mapped strings. where/at locate it in
 * messages ("merges.txt:12" or "tokenizer.json: model.merges[11]"). */
int tok_add_merge(kvlm_tokenizer *t, const int16_t *rev, const char *a, size_t alen,
                     const char *b, size_t blen, const char *where, kvlm_error *err) {
    char small[512];
    char *raw = alen + blen <= sizeof small ? small : malloc(alen + blen);
    char sbuf[96];
    if (!raw) return kvlm_error_set(err, KVLM_ERR_NOMEM, "%s: out of memory", where);
    int rc = 0;
    long ra = unmap_string(rev, a, alen, raw);
    long rb = ra < 0 ? -1 : unmap_string(rev, b, blen, raw + ra);
    if (ra < 0 || rb < 0) {
        rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: merge is not valid UTF-8", where);
        goto out;
    }
    int32_t ia = tok_map_get(t, raw, (size_t)ra);
    int32_t ib = tok_map_get(t, raw + ra, (size_t)rb);
    int32_t im = tok_map_get(t, raw, (size_t)(ra + rb));
    if (ia < 0 || ib < 0) {
        const char *bad = ia < 0 ? a : b;
        size_t badlen = ia < 0 ? alen : blen;
        rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: merge names token '%s', which is not in the "
                            "vocabulary", where, tok_show(bad, badlen, sbuf, sizeof sbuf));
        goto out;
    }
    if (im < 0) {
        rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: merged token '%s' is not in the vocabulary",
                            where, tok_show(raw, (size_t)(ra + rb), sbuf, sizeof sbuf));
        goto out;
    }
    if (tok_merges_add(&t->merges, ia, ib, im) != 0)
        rc = kvlm_error_set(err, KVLM_ERR_NOMEM, "%s: out of memory", where);
out:
    if (raw != small) free(raw);
    return rc;
}

int tok_load_merges_json(kvlm_tokenizer *t, const int16_t *rev, json_t *merges,
                            const char *path, kvlm_error *err) {
    if (!json_is_array(merges))
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: model.merges must be an array", path);
    if (tok_merges_init(&t->merges, json_array_size(merges)) != 0)
        return kvlm_error_set(err, KVLM_ERR_NOMEM, "%s: out of memory", path);
    size_t i;
    json_t *m;
    json_array_foreach(merges, i, m) {
        char where[1100];
        snprintf(where, sizeof where, "%s: model.merges[%zu]", path, i);
        const char *a, *b;
        size_t alen, blen;
        if (json_is_string(m)) {
            a = json_string_value(m);
            size_t n = json_string_length(m);
            const char *sp = memchr(a, ' ', n);
            if (!sp || sp == a || sp == a + n - 1 || memchr(sp + 1, ' ', n - (size_t)(sp - a) - 1))
                return kvlm_error_set(err, KVLM_ERR_FORMAT,
                                      "%s: expected \"a b\" (two tokens, one space)", where);
            alen = (size_t)(sp - a);
            b = sp + 1;
            blen = n - alen - 1;
        } else if (json_is_array(m) && json_array_size(m) == 2 &&
                   json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
            a = json_string_value(json_array_get(m, 0));
            alen = json_string_length(json_array_get(m, 0));
            b = json_string_value(json_array_get(m, 1));
            blen = json_string_length(json_array_get(m, 1));
        } else {
            return kvlm_error_set(err, KVLM_ERR_FORMAT,
                                  "%s: expected a string \"a b\" or a pair [\"a\", \"b\"]", where);
        }
        if (tok_add_merge(t, rev, a, alen, b, blen, where, err) != 0) return -1;
    }
    return 0;
}

/* ---------------------------------------------------------- finishing up */

static int cmp_added(const void *pa, const void *pb, void *ctx) {
    const kvlm_tokenizer *t = ctx;
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    if (t->piece_len[a] != t->piece_len[b]) return t->piece_len[a] > t->piece_len[b] ? -1 : 1;
    return a < b ? -1 : a > b;
}

static int find_byte_tokens(kvlm_tokenizer *t, const char *where, kvlm_error *err) {
    for (int b = 0; b < 256; b++) {
        if (t->kind == TOK_KIND_BYTELEVEL) {
            unsigned char c = (unsigned char)b;
            t->byte_id[b] = tok_map_get(t, &c, 1);
            if (t->byte_id[b] < 0 && !t->bytes_optional)
                return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: no token for byte 0x%02X (byte-level "
                                      "BPE needs all 256)", where, b);
        } else if (t->byte_fallback) {
            char name[8];
            snprintf(name, sizeof name, "<0x%02X>", b);
            t->byte_id[b] = tok_map_get(t, name, 6);
            if (t->byte_id[b] < 0)
                return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: no byte token %s (byte fallback needs "
                                      "all 256, <0x00> to <0xFF>)", where, name);
        }
    }
    if (t->kind == TOK_KIND_BYTELEVEL && t->bytes_optional) {
        t->bytes_optional = 0;   /* encode checks bytes only when one lacks a token */
        for (int b = 0; b < 256; b++)
            if (t->byte_id[b] < 0) t->bytes_optional = 1;
    }
    return 0;
}

/* SentencePiece-style: what decode prints for each token ("▁" as a space,
 * <0xXX> as its byte, as the file's decoder says). */
static int build_decoded(kvlm_tokenizer *t) {
    t->dec_off = calloc((size_t)t->n_vocab, sizeof *t->dec_off);
    t->dec_len = calloc((size_t)t->n_vocab, sizeof *t->dec_len);
    t->dec_arena = malloc(t->arena_len + 1);
    if (!t->dec_off || !t->dec_len || !t->dec_arena) return -1;
    size_t o = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (!(t->flags[id] & TOK_PRESENT)) continue;
        size_t len;
        const char *p = tok_piece(t, id, &len);
        t->dec_off[id] = (uint32_t)o;
        int byte = t->dec_byte_fallback && (t->flags[id] & TOK_INMODEL) ?
                   tok_byte_piece_value(p, len) : -1;
        if (byte >= 0) {
            t->dec_arena[o++] = (char)byte;
        } else {
            for (size_t i = 0; i < len; i++) {
                if (t->dec_meta_space && i + 3 <= len && memcmp(p + i, "\xE2\x96\x81", 3) == 0) {
                    t->dec_arena[o++] = ' ';
                    i += 2;
                } else {
                    t->dec_arena[o++] = p[i];
                }
            }
        }
        t->dec_len[id] = (uint32_t)(o - t->dec_off[id]);
    }
    return 0;
}

static void find_eos(kvlm_tokenizer *t) {
    static const char *const names[] = {"<|endoftext|>", "<|end_of_text|>", "</s>"};
    for (size_t k = 0; t->eos_id < 0 && k < sizeof names / sizeof names[0]; k++)
        t->eos_id = tok_map_get(t, names[k], strlen(names[k]));
    /* Files without added_tokens: GPT-2's end-of-text marker is special,
     * whether it was found by name or named by tokenizer_config.json. */
    const int32_t id = t->eos_id;
    if (id >= 0 && t->piece_len[id] == 13 && !memcmp(t->arena + t->piece_off[id], names[0], 13) &&
        !(t->flags[id] & TOK_ADDED))
        t->flags[id] |= TOK_ADDED | TOK_SPECIAL;
}

int tok_finish(kvlm_tokenizer *t, const char *where, kvlm_error *err) {
    if (find_byte_tokens(t, where, err) != 0) return -1;
    if (t->kind == TOK_KIND_SPM && !t->byte_fallback && t->unk_id < 0)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: neither byte fallback nor an unknown token: "
                              "characters outside the vocabulary could not be encoded", where);
    if (t->kind == TOK_KIND_SPM && build_decoded(t) != 0)
        return kvlm_error_set(err, KVLM_ERR_NOMEM, "%s: out of memory", where);
    find_eos(t);
    tok_find_fim(t);
    for (int32_t id = 0; id < t->n_vocab; id++)
        if (t->flags[id] & TOK_ADDED) t->n_added++;
    if (t->n_added) {
        t->added = malloc(t->n_added * sizeof *t->added);
        if (!t->added) return kvlm_error_set(err, KVLM_ERR_NOMEM, "%s: out of memory", where);
        size_t k = 0;
        for (int32_t id = 0; id < t->n_vocab; id++) {
            if (!(t->flags[id] & TOK_ADDED)) continue;
            if (t->piece_len[id] == 0) {   /* never matches anything */
                t->flags[id] &= (uint8_t)~TOK_ADDED;
                continue;
            }
            t->added[k++] = id;
            unsigned char first = (unsigned char)t->arena[t->piece_off[id]];
            t->added_first[first] |= (t->flags[id] & TOK_SPECIAL) ? 1 : 3;
        }
        t->n_added = k;
        qsort_r(t->added, t->n_added, sizeof *t->added, cmp_added, t);
    }
    if (tok_cache_init(&t->cache, TOK_DEFAULT_CACHE) != 0)
        return kvlm_error_set(err, KVLM_ERR_NOMEM, "%s: out of memory", where);
    return 0;
}
