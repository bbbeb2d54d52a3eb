/*
 * Constrained decoding in the scheduler (see constrain.h): trie cache and
 * logits masking.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "runtime/constrain.h"

/* A hash of the vocabulary size and about a thousand pieces spread over
 * it (every piece would cost milliseconds per request at 150k tokens). */
static uint64_t fingerprint(const kvlm_tokenizer *tok) {
    const int v = kvlm_tokenizer_vocab_size(tok);
    uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)v;
    const int stride = v / 1024 > 1 ? v / 1024 : 1;
    for (int32_t i = 0; i < v; i += (i < 256 || i >= v - 256) ? 1 : stride) {
        size_t n = 0;
        const char *p = kvlm_tokenizer_piece(tok, i, &n);
        h = (h ^ n ^ ((uint64_t)kvlm_tokenizer_is_special(tok, i) << 40)) * 0x100000001b3ull;
        for (size_t k = 0; p && k < n; k++) h = (h ^ (unsigned char)p[k]) * 0x100000001b3ull;
    }
    return h;
}

gr_trie *cst_trie_acquire(cst_tries *t, const kvlm_tokenizer *tok, int vocab, kvlm_error *err) {
    if (!tok) {
        kvlm_error_set(err, KVLM_ERR_ARG, "a grammar needs the request's tokenizer (the bytes of each token)");
        return NULL;
    }
    if (kvlm_tokenizer_vocab_size(tok) > vocab) {
        kvlm_error_set(err, KVLM_ERR_ARG, "the tokenizer has %d ids, more than the model's %d logits",
                       kvlm_tokenizer_vocab_size(tok), vocab);
        return NULL;
    }
    const uint64_t fp = fingerprint(tok);
    for (int i = 0; i < CST_MAX_TRIES; i++)
        if (t->e[i].trie && t->e[i].tok == tok && t->e[i].fingerprint == fp) {
            t->e[i].refs++;
            return t->e[i].trie;
        }
    int slot = -1;
    for (int i = 0; i < CST_MAX_TRIES && slot < 0; i++)
        if (!t->e[i].trie) slot = i;
    for (int i = 0; i < CST_MAX_TRIES && slot < 0; i++)
        if (t->e[i].refs == 0) slot = i;
    if (slot < 0) {
        kvlm_error_set(err, KVLM_ERR_BUSY, "grammar requests on more than %d tokenizers at once", CST_MAX_TRIES);
        return NULL;
    }
    gr_trie *trie = gr_trie_build(tok, err);
    if (!trie) return NULL;
    gr_trie_free(t->e[slot].trie);
    t->e[slot] = (cst_entry){.tok = tok, .fingerprint = fp, .trie = trie, .refs = 1};
    return trie;
}

void cst_trie_release(cst_tries *t, const gr_trie *trie) {
    for (int i = 0; i < CST_MAX_TRIES; i++)
        if (trie && t->e[i].trie == trie && t->e[i].refs > 0) t->e[i].refs--;
}

void cst_tries_free(cst_tries *t) {
    for (int i = 0; i < CST_MAX_TRIES; i++) gr_trie_free(t->e[i].trie);
    memset(t, 0, sizeof *t);
}

int cst_mask_logits(gr_matcher *m, const gr_trie *trie, const float *logits, float *out, uint64_t *bits, int vocab,
                    const int32_t *eos, int n_eos, int max_close) {
    int n = gr_token_mask_within(m, trie, max_close, bits);
    if (n < 0) return n;
    const int tv = gr_trie_vocab(trie);
    for (int w = 0; w * 64 < vocab; w++) {
        const uint64_t b = w * 64 < tv ? bits[w] : 0;
        const int end = w * 64 + 64 < vocab ? w * 64 + 64 : vocab;
        if (b == 0) {
            for (int i = w * 64; i < end; i++) out[i] = -INFINITY;
        } else if (b == ~0ull && end == w * 64 + 64) {
            memcpy(out + w * 64, logits + w * 64, 64 * sizeof *out);
        } else {
            for (int i = w * 64; i < end; i++) out[i] = (b >> (i & 63)) & 1 ? logits[i] : -INFINITY;
        }
    }
    const int acc = gr_matcher_accepting(m);
    for (int i = 0; i < n_eos; i++) {
        if (eos[i] < 0 || eos[i] >= vocab) continue;
        const int was = out[eos[i]] != -INFINITY || logits[eos[i]] == -INFINITY;
        out[eos[i]] = acc ? logits[eos[i]] : -INFINITY;
        n += acc && !was ? 1 : !acc && was ? -1 : 0;
    }
    return n;
}
