/*
 * kvlm tokenizer: the public API of include/kvlm_tokenizer.h.
 *
 * encode = split out added tokens (special ones only when the caller allows
 * them) -> pre-tokenise each stretch between them with GPT-2's pattern ->
 * for each pre-token: the word cache, else byte tokens merged by rank.
 * decode = concatenate the raw bytes of the pieces.
 *
 * A loaded tokenizer is immutable except for its word cache, which an
 * encode call uses only if it can take the cache lock without waiting, so
 * any number of threads may encode at once and get the same ids as with
 * the cache off. Loading lives in tokenizer_load.c, pre-tokenisation in
 * tokenizer_pretok.c, merging in tokenizer_bpe.c.
 */
#include "tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "tokenizer_pretok.h"

kvlm_tokenizer *kvlm_tokenizer_load(const char *path, kvlm_error *err) {
    kvlm_tokenizer *t = tok_alloc();
    if (!t) {
        kvlm_fail(err, KVLM_ERR_NOMEM, "tokenizer: out of memory");
        return NULL;
    }
    if (tok_load_path(t, path, err) != 0) {
        kvlm_tokenizer_free(t);
        return NULL;
    }
    return t;
}

void kvlm_tokenizer_free(kvlm_tokenizer *t) {
    if (!t) return;
    free(t->arena);
    free(t->piece_off);
    free(t->piece_len);
    free(t->flags);
    free(t->map.slots);
    free(t->map.hashes);
    free(t->added);
    tok_merges_free(&t->merges);
    tok_cache_free(&t->cache);
    pthread_mutex_destroy(&t->cache_lock);
    free(t);
}

int kvlm_tokenizer_vocab_size(const kvlm_tokenizer *t) { return t->n_vocab; }
int32_t kvlm_tokenizer_eos_id(const kvlm_tokenizer *t) { return t->eos_id; }
const char *kvlm_tokenizer_source(const kvlm_tokenizer *t) { return t->source; }
size_t kvlm_tokenizer_n_merges(const kvlm_tokenizer *t) { return t->merges.n; }

int kvlm_tokenizer_is_special(const kvlm_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && (t->flags[id] & TOK_SPECIAL) != 0;
}

const char *kvlm_tokenizer_piece(const kvlm_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab || !(t->flags[id] & TOK_PRESENT)) {
        if (len) *len = 0;
        return NULL;
    }
    size_t n;
    const char *p = tok_piece(t, id, &n);
    if (len) *len = n;
    return p;
}

int32_t kvlm_tokenizer_token_id(const kvlm_tokenizer *t, const char *piece, size_t len) {
    return tok_map_get(t, piece, len);
}

int kvlm_tokenizer_set_cache(kvlm_tokenizer *t, size_t max_words, kvlm_error *err) {
    if (max_words > (1u << 24))
        return kvlm_fail(err, KVLM_ERR_ARG, "tokenizer cache: %zu words is more than %u", max_words,
                         1u << 24);
    pthread_mutex_lock(&t->cache_lock);
    tok_cache_free(&t->cache);
    int rc = tok_cache_init(&t->cache, max_words);
    pthread_mutex_unlock(&t->cache_lock);
    if (rc != 0) return kvlm_fail(err, KVLM_ERR_NOMEM, "tokenizer cache: out of memory");
    return 0;
}

/* ---------------------------------------------------------------- encode */

typedef struct enc_state {
    const kvlm_tokenizer *t;
    int32_t *ids;
    size_t n, cap;
    tok_cache *cache;          /* NULL: encode without it */
    tok_bpe_scratch scratch;
} enc_state;

static int reserve(enc_state *s, size_t extra) {
    if (s->n + extra <= s->cap) return 0;
    size_t cap = s->cap * 2;
    if (cap < s->n + extra) cap = s->n + extra;
    int32_t *p = realloc(s->ids, cap * sizeof *p);
    if (!p) return -1;
    s->ids = p;
    s->cap = cap;
    return 0;
}

static int encode_word(enc_state *s, const unsigned char *w, size_t len) {
    const kvlm_tokenizer *t = s->t;
    if (len == 1) {
        if (reserve(s, 1) != 0) return -1;
        s->ids[s->n++] = t->byte_id[w[0]];
        return 0;
    }
    if (t->ignore_merges) {
        int32_t id = tok_map_get(t, w, len);
        if (id >= 0) {
            if (reserve(s, 1) != 0) return -1;
            s->ids[s->n++] = id;
            return 0;
        }
    }
    uint64_t h = 0;
    int cacheable = s->cache && len <= TOK_CACHE_MAX_WORD;
    if (cacheable) {
        size_t k;
        h = tok_hash_bytes(w, len);
        const int32_t *hit = tok_cache_get(s->cache, w, len, h, &k);
        if (hit) {
            if (reserve(s, k) != 0) return -1;
            memcpy(s->ids + s->n, hit, k * sizeof *hit);
            s->n += k;
            return 0;
        }
    }
    /* Merge in place at the end of the output: a word of len bytes never
     * becomes more than len tokens. */
    if (reserve(s, len) != 0) return -1;
    int32_t *out = s->ids + s->n;
    for (size_t i = 0; i < len; i++) out[i] = t->byte_id[w[i]];
    size_t k = tok_bpe(&t->merges, out, len, &s->scratch);
    if (k == (size_t)-1) return -1;
    if (cacheable) tok_cache_put(s->cache, w, len, h, out, k);
    s->n += k;
    return 0;
}

static int encode_ordinary(enc_state *s, const unsigned char *text, size_t len) {
    for (size_t i = 0; i < len;) {
        size_t end = tok_pretok_next(text, len, i);
        if (encode_word(s, text + i, end - i) != 0) return -1;
        i = end;
    }
    return 0;
}

/* The added token (longest first) that starts at text[i], or -1. */
static int32_t match_added(const kvlm_tokenizer *t, const unsigned char *text, size_t len,
                           size_t i, int allow_special, size_t *mlen) {
    for (size_t k = 0; k < t->n_added; k++) {
        int32_t id = t->added[k];
        if ((t->flags[id] & TOK_SPECIAL) && !allow_special) continue;
        size_t plen;
        const char *p = tok_piece(t, id, &plen);
        if (plen <= len - i && memcmp(text + i, p, plen) == 0) {
            *mlen = plen;
            return id;
        }
    }
    return -1;
}

static int encode_all(enc_state *s, const unsigned char *text, size_t len, int allow_special) {
    const kvlm_tokenizer *t = s->t;
    size_t start = 0;
    /* added_first: bit 1 = some added token starts here, bit 2 = some
     * non-special one does. */
    uint8_t need = allow_special ? 1 : 2;
    if (t->n_added) {
        for (size_t i = 0; i < len; i++) {
            if (!(t->added_first[text[i]] & need)) continue;
            size_t mlen;
            int32_t id = match_added(t, text, len, i, allow_special, &mlen);
            if (id < 0) continue;
            if (encode_ordinary(s, text + start, i - start) != 0 || reserve(s, 1) != 0) return -1;
            s->ids[s->n++] = id;
            start = i + mlen;
            i = start - 1;
        }
    }
    return encode_ordinary(s, text + start, len - start);
}

int kvlm_tokenizer_encode(const kvlm_tokenizer *t, const char *text, size_t len,
                          int allow_special, int32_t **ids, size_t *n_ids, kvlm_error *err) {
    *ids = NULL;
    *n_ids = 0;
    if (!text && len) return kvlm_fail(err, KVLM_ERR_ARG, "tokenizer encode: text is NULL");
    /* The cache is the one mutable part; see the file comment. */
    kvlm_tokenizer *mt = (kvlm_tokenizer *)t;
    enc_state s = {.t = t};
    s.cap = len / 3 + 16;
    s.ids = malloc(s.cap * sizeof *s.ids);
    if (!s.ids) return kvlm_fail(err, KVLM_ERR_NOMEM, "tokenizer encode: out of memory");
    int locked = pthread_mutex_trylock(&mt->cache_lock) == 0;
    if (locked && t->cache.slots) s.cache = &mt->cache;
    int rc = encode_all(&s, (const unsigned char *)text, len, allow_special);
    if (locked) pthread_mutex_unlock(&mt->cache_lock);
    tok_bpe_scratch_free(&s.scratch);
    if (rc != 0) {
        free(s.ids);
        return kvlm_fail(err, KVLM_ERR_NOMEM, "tokenizer encode: out of memory (%zu bytes of text)",
                         len);
    }
    *ids = s.ids;
    *n_ids = s.n;
    return 0;
}

/* ---------------------------------------------------------------- decode */

int kvlm_tokenizer_decode(const kvlm_tokenizer *t, const int32_t *ids, size_t n, char **text,
                          size_t *len, kvlm_error *err) {
    *text = NULL;
    if (len) *len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n_vocab || !(t->flags[ids[i]] & TOK_PRESENT))
            return kvlm_fail(err, KVLM_ERR_ARG, "tokenizer decode: ids[%zu] = %d is not a token "
                             "(vocabulary size %d)", i, ids[i], t->n_vocab);
        total += t->piece_len[ids[i]];
    }
    char *out = malloc(total + 1);
    if (!out) return kvlm_fail(err, KVLM_ERR_NOMEM, "tokenizer decode: out of memory");
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        size_t plen;
        const char *p = tok_piece(t, ids[i], &plen);
        memcpy(out + o, p, plen);
        o += plen;
    }
    out[o] = 0;
    *text = out;
    if (len) *len = o;
    return 0;
}
