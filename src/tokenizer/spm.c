/*
 * SentencePiece-style BPE words (Llama 2): the initial symbols of a word
 * (one per character, a character missing from the vocabulary falling back
 * to its byte tokens <0xXX>, or to unk) and the merge loop by piece scores
 * used by GGUF vocabularies of model "llama".
 *
 * The score merge follows SentencePiece's BPE: start from the characters of
 * the (already normalised) word; among adjacent symbols whose concatenation
 * is a piece that text may produce (not control, unknown, byte or unused),
 * merge the pair whose piece has the highest score, the leftmost one on a
 * tie; repeat until no pair qualifies. A remaining symbol that is not a
 * piece (a character outside the vocabulary) becomes its byte tokens.
 * Symbols are spans of the word, so a candidate is looked up by the bytes
 * it covers, with no copying. A byte that is not part of well-formed UTF-8
 * is a character of its own, never in the vocabulary, so it always becomes
 * its byte token and decodes back to itself.
 * Nothing here reads files or splits text into words.
 */
#include "tokenizer/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "tokenizer/pretok.h"

static int hexdigit(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

int tok_byte_piece_value(const char *p, size_t len) {
    if (len != 6 || memcmp(p, "<0x", 3) != 0 || p[5] != '>') return -1;
    int hi = hexdigit(p[3]), lo = hexdigit(p[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

size_t tok_spm_initial(const kvlm_tokenizer *t, const unsigned char *w, size_t n, int32_t *out) {
    size_t k = 0;
    int prev_unk = 0;
    for (size_t i = 0; i < n;) {
        int32_t cp;
        size_t l = tok_utf8_decode(w + i, n - i, &cp);
        int32_t id = tok_map_get(t, w + i, l);
        if (id >= 0 && (t->flags[id] & TOK_INMODEL)) {
            out[k++] = id;
            prev_unk = 0;
        } else if (t->byte_fallback) {
            for (size_t j = 0; j < l; j++) out[k++] = t->byte_id[w[i + j]];
            prev_unk = 0;
        } else {   /* the loaders require unk when there is no byte fallback */
            if (!(t->fuse_unk && prev_unk)) out[k++] = t->unk_id;
            prev_unk = 1;
        }
        i += l;
    }
    return k;
}

/* Orders scores so that the highest comes first as an unsigned key. */
static uint32_t score_key(float f) {
    if (f == 0) f = 0;   /* -0 and +0 are the same score */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ~u;
}

static int usable(const kvlm_tokenizer *t, int32_t id) {
    return id >= 0 && (t->flags[id] & (TOK_INMODEL | TOK_NOMERGE)) == TOK_INMODEL;
}

/* Symbols live in the scratch arrays: id = offset in the word, touched =
 * length (0 once merged into its left neighbour), prev/next = the list. */
static void push_bigram(const kvlm_tokenizer *t, const unsigned char *text, tok_bpe_scratch *s,
                        size_t *hlen, int32_t left) {
    if (left < 0 || s->next[left] < 0) return;
    int32_t right = s->next[left];
    int32_t id = tok_map_get(t, text + s->id[left], s->touched[left] + s->touched[right]);
    if (!usable(t, id)) return;
    tok_heap_push(s->heap, hlen, ((uint64_t)score_key(t->scores[id]) << 32) | (uint32_t)left);
}

static size_t emit_symbol(const kvlm_tokenizer *t, const unsigned char *p, size_t len,
                          int32_t *out) {
    int32_t id = tok_map_get(t, p, len);
    if (usable(t, id)) {
        out[0] = id;
        return 1;
    }
    if (!t->byte_fallback) {
        out[0] = t->unk_id;
        return 1;
    }
    for (size_t j = 0; j < len; j++) out[j] = t->byte_id[p[j]];
    return len;
}

long tok_spm_score_merge(const kvlm_tokenizer *t, const unsigned char *text, size_t n,
                         int32_t *out, tok_bpe_scratch *s) {
    if (n == 0) return 0;
    if (n > INT32_MAX || tok_bpe_scratch_reserve(s, n) != 0) return -1;
    int32_t nsym = 0;
    for (size_t i = 0; i < n;) {
        int32_t cp;
        size_t l = tok_utf8_decode(text + i, n - i, &cp);
        s->id[nsym] = (int32_t)i;
        s->touched[nsym] = (uint32_t)l;
        s->prev[nsym] = nsym - 1;
        s->next[nsym] = -1;
        if (nsym > 0) s->next[nsym - 1] = nsym;
        nsym++;
        i += l;
    }
    size_t hlen = 0;
    for (int32_t k = 0; k + 1 < nsym; k++) push_bigram(t, text, s, &hlen, k);
    /* At most nsym - 1 initial entries and two per merge: within 3n. */
    while (hlen > 0) {
        uint64_t e = tok_heap_pop(s->heap, &hlen);
        int32_t left = (int32_t)(uint32_t)e;
        int32_t right = s->next[left];
        if (s->touched[left] == 0 || right < 0) continue;
        /* Still the pair this entry was made for? (An equal key for a
         * different pair at the same place is an entry of the same rank
         * in the queue anyway, so merging it now changes nothing.) */
        int32_t id = tok_map_get(t, text + s->id[left], s->touched[left] + s->touched[right]);
        if (!usable(t, id) || score_key(t->scores[id]) != (uint32_t)(e >> 32)) continue;
        s->touched[left] += s->touched[right];
        s->touched[right] = 0;
        s->next[left] = s->next[right];
        if (s->next[right] >= 0) s->prev[s->next[right]] = left;
        if (s->prev[left] >= 0) push_bigram(t, text, s, &hlen, s->prev[left]);
        push_bigram(t, text, s, &hlen, left);
    }
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = s->next[i])
        k += emit_symbol(t, text + s->id[i], s->touched[i], out + k);
    return (long)k;
}
