/*
 * kvlm tokenizer: the public API of include/kvlm_tokenizer.h.
 *
 * encode = split out added tokens (special ones only when the caller allows
 * them) -> normalise each stretch between them (NFC; for SentencePiece-style
 * vocabularies "▁" for spaces and in front) -> pre-tokenise it (byte-level:
 * GPT-2's scanner or the file's Split patterns; SentencePiece: the whole
 * stretch, or words at each "▁" for Metaspace with split) -> for each word:
 * the word cache, else its initial symbols (bytes; or characters with byte
 * fallback) merged by rank (GPT-2 rounds or one pair at a time) or by
 * piece score (GGUF "llama" vocabularies).
 * decode = concatenate what each token prints (raw bytes; "▁" as a space
 * and <0xXX> as its byte for SentencePiece), minus one leading space when
 * the file's decoder strips it.
 *
 * A loaded tokenizer is immutable except for its word cache, which an
 * encode call uses only if it can take the cache lock without waiting, so
 * any number of threads may encode at once and get the same ids as with
 * the cache off. Loading lives in tokenizer/load.c, pre-tokenisation in
 * tokenizer/pretok.c, merging in tokenizer/bpe.c.
 */
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "tokenizer/nfc.h"
#include "tokenizer/pretok.h"
#include "tokenizer/regex.h"

static int is_gguf(const char *path) {
    FILE *f = fopen(path, "rb");
    char magic[4] = {0};
    int yes = f && fread(magic, 1, 4, f) == 4 && !memcmp(magic, "GGUF", 4);
    if (f) fclose(f);
    return yes;
}

kvlm_tokenizer *kvlm_tokenizer_load(const char *path, kvlm_error *err) {
    if (path && is_gguf(path)) return tok_load_gguf_file(path, err);
    kvlm_tokenizer *t = tok_alloc();
    if (!t) {
        kvlm_error_set(err, KVLM_ERR_NOMEM, "tokenizer: out of memory");
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
    free(t->scores);
    free(t->dec_arena);
    free(t->dec_off);
    free(t->dec_len);
    for (int k = 0; k < t->n_levels; k++) tok_regex_free(t->levels[k].re);
    tok_merges_free(&t->merges);
    tok_cache_free(&t->cache);
    pthread_mutex_destroy(&t->cache_lock);
    free(t);
}

int kvlm_tokenizer_vocab_size(const kvlm_tokenizer *t) { return t->n_vocab; }
int32_t kvlm_tokenizer_eos_id(const kvlm_tokenizer *t) { return t->eos_id; }
int32_t kvlm_tokenizer_bos_id(const kvlm_tokenizer *t) { return t->bos_id; }
int kvlm_tokenizer_add_bos(const kvlm_tokenizer *t) { return t->n_prefix > 0; }
const char *kvlm_tokenizer_source(const kvlm_tokenizer *t) { return t->source; }
size_t kvlm_tokenizer_n_merges(const kvlm_tokenizer *t) { return t->merges.n; }

int tok_end_of_turn_ids(const kvlm_tokenizer *t, int32_t ids[2]) {
    int n = 0;
    if (t->eot_id >= 0) ids[n++] = t->eot_id;
    if (t->eom_id >= 0) ids[n++] = t->eom_id;
    return n;
}

int kvlm_tokenizer_is_special(const kvlm_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && (t->flags[id] & TOK_SPECIAL) != 0;
}

const char *kvlm_tokenizer_piece(const kvlm_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab || !(t->flags[id] & TOK_PRESENT)) {
        if (len) *len = 0;
        return NULL;
    }
    size_t n;
    const char *p = tok_dec_piece(t, id, &n);
    if (len) *len = n;
    return p;
}

int32_t kvlm_tokenizer_token_id(const kvlm_tokenizer *t, const char *piece, size_t len) {
    return tok_map_get(t, piece, len);
}

int kvlm_tokenizer_set_cache(kvlm_tokenizer *t, size_t max_words, kvlm_error *err) {
    if (max_words > (1u << 24))
        return kvlm_error_set(err, KVLM_ERR_ARG, "tokenizer cache: %zu words is more than %u", max_words,
                              1u << 24);
    pthread_mutex_lock(&t->cache_lock);
    tok_cache_free(&t->cache);
    int rc = tok_cache_init(&t->cache, max_words);
    pthread_mutex_unlock(&t->cache_lock);
    if (rc != 0) return kvlm_error_set(err, KVLM_ERR_NOMEM, "tokenizer cache: out of memory");
    return 0;
}

/* ---------------------------------------------------------------- encode */

typedef struct enc_state {
    const kvlm_tokenizer *t;
    int32_t *ids;
    size_t n, cap;
    tok_cache *cache;          /* NULL: encode without it */
    tok_bpe_scratch scratch;
    unsigned char *norm;       /* normalised fragment (SentencePiece, NFC) */
    size_t norm_cap;
    unsigned char *nfc;
    size_t nfc_cap;
    int status;                /* on failure: KVLM_ERR_NOMEM or KVLM_ERR_FORMAT */
    char msg[320];
} enc_state;

static int oom(enc_state *s) {
    s->status = KVLM_ERR_NOMEM;
    snprintf(s->msg, sizeof s->msg, "out of memory");
    return -1;
}

static int reserve(enc_state *s, size_t extra) {
    if (s->n + extra <= s->cap) return 0;
    size_t cap = s->cap * 2;
    if (cap < s->n + extra) cap = s->n + extra;
    int32_t *p = realloc(s->ids, cap * sizeof *p);
    if (!p) return oom(s);
    s->ids = p;
    s->cap = cap;
    return 0;
}

static int push_id(enc_state *s, int32_t id) {
    if (reserve(s, 1) != 0) return -1;
    s->ids[s->n++] = id;
    return 0;
}

static int merge_word(enc_state *s, const unsigned char *w, size_t len);

/* One pre-token: at most len ids (a word never becomes more tokens than it
 * has bytes), merged in place at the end of the output. */
static int encode_word(enc_state *s, const unsigned char *w, size_t len) {
    const kvlm_tokenizer *t = s->t;
    if (len == 0) return 0;
    if (t->ignore_merges) {
        int32_t id = tok_map_get(t, w, len);
        if (id >= 0 && (t->flags[id] & TOK_INMODEL)) return push_id(s, id);
    }
    if (t->bytes_optional) {
        /* A byte without a token is left out and nothing merges across it. */
        size_t start = 0;
        for (size_t i = 0; i < len; i++) {
            if (t->byte_id[w[i]] >= 0) continue;
            if (merge_word(s, w + start, i - start) != 0) return -1;
            start = i + 1;
        }
        return merge_word(s, w + start, len - start);
    }
    return merge_word(s, w, len);
}

/* encode_word after the whole-word lookup; every byte of w has a token. */
static int merge_word(enc_state *s, const unsigned char *w, size_t len) {
    const kvlm_tokenizer *t = s->t;
    if (len == 0) return 0;
    if (len == 1 && t->kind == TOK_KIND_BYTELEVEL) return push_id(s, t->byte_id[w[0]]);
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
    if (reserve(s, len) != 0) return -1;
    int32_t *out = s->ids + s->n;
    size_t k;
    if (t->merge_mode == TOK_MERGE_SCORE) {
        long r = tok_spm_score_merge(t, w, len, out, &s->scratch);
        if (r < 0) return oom(s);
        k = (size_t)r;
    } else {
        size_t k0 = len;
        if (t->kind == TOK_KIND_BYTELEVEL)
            for (size_t i = 0; i < len; i++) out[i] = t->byte_id[w[i]];
        else
            k0 = tok_spm_initial(t, w, len, out);
        k = t->merge_mode == TOK_MERGE_ROUNDS ? tok_bpe(&t->merges, out, k0, &s->scratch)
                                              : tok_bpe_one(&t->merges, out, k0, &s->scratch);
        if (k == (size_t)-1) return oom(s);
    }
    if (cacheable) tok_cache_put(s->cache, w, len, h, out, k);
    s->n += k;
    return 0;
}

/* Byte-level pre-tokenisation: stage `level` cuts, the next one cuts each
 * piece again, the last pieces are words. */
typedef struct level_ctx {
    enc_state *s;
    int level;
} level_ctx;

static int split_level(enc_state *s, int level, const unsigned char *text, size_t len);

static int level_piece(void *ctx, const unsigned char *piece, size_t n) {
    level_ctx *c = ctx;
    return split_level(c->s, c->level, piece, n);
}

static int split_level(enc_state *s, int level, const unsigned char *text, size_t len) {
    const kvlm_tokenizer *t = s->t;
    if (level == t->n_levels) return encode_word(s, text, len);
    const tok_level *l = &t->levels[level];
    if (!l->re) {
        for (size_t i = 0; i < len;) {
            size_t end = tok_pretok_next(text, len, i);
            if (split_level(s, level + 1, text + i, end - i) != 0) return -1;
            i = end;
        }
        return 0;
    }
    level_ctx c = {s, level + 1};
    char msg[300];
    int rc = tok_regex_split(l->re, text, len, level_piece, &c, msg, sizeof msg);
    if (rc != 0 && s->status == 0) {   /* the regex itself failed */
        s->status = strcmp(msg, "out of memory") == 0 ? KVLM_ERR_NOMEM : KVLM_ERR_FORMAT;
        snprintf(s->msg, sizeof s->msg, "pre-tokenizer: %s", msg);
    }
    return rc ? -1 : 0;
}

static int grow(unsigned char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    unsigned char *p = realloc(*buf, need);
    if (!p) return -1;
    *buf = p;
    *cap = need;
    return 0;
}

#define META "\xE2\x96\x81"

/* SentencePiece-style normalisation of one fragment into s->norm, then its
 * words. at_start: the fragment begins the text. */
static int encode_spm_fragment(enc_state *s, const unsigned char *p, size_t n, int at_start) {
    const kvlm_tokenizer *t = s->t;
    if (n > (SIZE_MAX - 3) / 3 || grow(&s->norm, &s->norm_cap, 3 * n + 3) != 0) return oom(s);
    int starts_meta = (p[0] == ' ' && t->spm_replace) || (n >= 3 && memcmp(p, META, 3) == 0);
    int prefix = t->spm_prefix == TOK_PREFIX_ALWAYS ||
                 (t->spm_prefix == TOK_PREFIX_META_ALWAYS && !starts_meta) ||
                 (t->spm_prefix == TOK_PREFIX_META_FIRST && !starts_meta && at_start);
    size_t o = 0;
    if (prefix) { memcpy(s->norm, META, 3); o = 3; }
    for (size_t i = 0; i < n; i++) {
        if (p[i] == ' ' && t->spm_replace) { memcpy(s->norm + o, META, 3); o += 3; }
        else s->norm[o++] = p[i];
    }
    if (!t->spm_split) return encode_word(s, s->norm, o);
    /* Metaspace split: every "▁" starts a word. */
    size_t start = 0;
    for (size_t i = 1; i + 3 <= o; i++) {
        if (memcmp(s->norm + i, META, 3) != 0) continue;
        if (encode_word(s, s->norm + start, i - start) != 0) return -1;
        start = i;
        i += 2;
    }
    return encode_word(s, s->norm + start, o - start);
}

static int encode_fragment(enc_state *s, const unsigned char *text, size_t len, int at_start) {
    const kvlm_tokenizer *t = s->t;
    if (len == 0) return 0;
    if (t->nfc) {
        size_t n;
        int rc = tok_nfc(text, len, &s->nfc, &s->nfc_cap, &n);
        if (rc < 0) return oom(s);
        if (rc > 0) {   /* it changed */
            text = s->nfc;
            len = n;
        }
    }
    if (t->kind == TOK_KIND_SPM) return encode_spm_fragment(s, text, len, at_start);
    return split_level(s, 0, text, len);
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
            if (encode_fragment(s, text + start, i - start, start == 0) != 0 || push_id(s, id) != 0)
                return -1;
            start = i + mlen;
            i = start - 1;
        }
    }
    return encode_fragment(s, text + start, len - start, start == 0);
}

int kvlm_tokenizer_encode_ex(const kvlm_tokenizer *t, const char *text, size_t len,
                             unsigned flags, int32_t **ids, size_t *n_ids, kvlm_error *err) {
    *ids = NULL;
    *n_ids = 0;
    if (!text && len) return kvlm_error_set(err, KVLM_ERR_ARG, "tokenizer encode: text is NULL");
    /* The cache is the one mutable part; see the file comment. */
    kvlm_tokenizer *mt = (kvlm_tokenizer *)t;
    enc_state s = {.t = t};
    s.cap = len / 3 + 16;
    s.ids = malloc(s.cap * sizeof *s.ids);
    if (!s.ids) return kvlm_error_set(err, KVLM_ERR_NOMEM, "tokenizer encode: out of memory");
    int add = (flags & KVLM_ENCODE_ADD_SPECIAL) != 0;
    int rc = 0;
    for (int k = 0; add && rc == 0 && k < t->n_prefix; k++) rc = push_id(&s, t->prefix_ids[k]);
    int locked = pthread_mutex_trylock(&mt->cache_lock) == 0;
    if (locked && t->cache.slots) s.cache = &mt->cache;
    if (rc == 0)
        rc = encode_all(&s, (const unsigned char *)text, len, (flags & KVLM_ENCODE_ALLOW_SPECIAL) != 0);
    if (locked) pthread_mutex_unlock(&mt->cache_lock);
    for (int k = 0; add && rc == 0 && k < t->n_suffix; k++) rc = push_id(&s, t->suffix_ids[k]);
    tok_bpe_scratch_free(&s.scratch);
    free(s.norm);
    free(s.nfc);
    if (rc != 0) {
        free(s.ids);
        return kvlm_error_set(err, s.status ? s.status : KVLM_ERR_NOMEM,
                              "tokenizer encode (%zu bytes of text): %s", len,
                              s.status ? s.msg : "out of memory");
    }
    *ids = s.ids;
    *n_ids = s.n;
    return 0;
}

int kvlm_tokenizer_encode(const kvlm_tokenizer *t, const char *text, size_t len,
                          int allow_special, int32_t **ids, size_t *n_ids, kvlm_error *err) {
    return kvlm_tokenizer_encode_ex(t, text, len, allow_special ? KVLM_ENCODE_ALLOW_SPECIAL : 0,
                                    ids, n_ids, err);
}

int kvlm_tokenizer_encode_prompt(const kvlm_tokenizer *t, const char *text, size_t len, int allow_special,
                                 int32_t **ids, size_t *n_ids, kvlm_error *err) {
    unsigned flags = KVLM_ENCODE_ADD_SPECIAL | (allow_special ? KVLM_ENCODE_ALLOW_SPECIAL : 0u);
    int rc = kvlm_tokenizer_encode_ex(t, text, len, flags, ids, n_ids, err);
    if (rc) return rc;
    /* A text that already starts with BOS (a chat template writing
     * <|begin_of_text|>) keeps only its own. */
    int32_t *v = *ids;
    if (t->n_prefix > 0 && *n_ids >= 2 && v[0] == t->bos_id && v[1] == t->bos_id) {
        memmove(v, v + 1, (*n_ids - 1) * sizeof *v);
        (*n_ids)--;
    }
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
            return kvlm_error_set(err, KVLM_ERR_ARG, "tokenizer decode: ids[%zu] = %d is not a token "
                                  "(vocabulary size %d)", i, ids[i], t->n_vocab);
        size_t plen;
        tok_dec_piece(t, ids[i], &plen);
        total += plen;
    }
    char *out = malloc(total + 1);
    if (!out) return kvlm_error_set(err, KVLM_ERR_NOMEM, "tokenizer decode: out of memory");
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        size_t plen;
        const char *p = tok_dec_piece(t, ids[i], &plen);
        memcpy(out + o, p, plen);
        o += plen;
    }
    if (t->strip_leading_space && o > 0 && out[0] == ' ') {
        memmove(out, out + 1, o - 1);
        o--;
    }
    out[o] = 0;
    *text = out;
    if (len) *len = o;
    return 0;
}
