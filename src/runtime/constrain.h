/*
 * Constrained decoding in the scheduler: the vocabulary tries it keeps
 * (one per tokenizer, shared by every grammar request on it) and the step
 * that turns a choice's logits into masked logits.
 *
 * A trie is built at the first grammar request on a tokenizer and kept
 * while the scheduler lives (up to CST_MAX_TRIES tokenizers; one without
 * live requests is dropped to make room). A kept trie is recognised by
 * the tokenizer's address and a fingerprint of its size and of pieces
 * spread over it, so a tokenizer freed and a different one loaded at the
 * same address is not mistaken for it.
 * Nothing here samples or decides the end of a choice (scheduler.c does).
 */
#ifndef KVLM_RUNTIME_CONSTRAIN_H
#define KVLM_RUNTIME_CONSTRAIN_H

#include <stdint.h>

#include "grammar/grammar.h"
#include "kvlm.h"

#define CST_MAX_TRIES 4

typedef struct cst_entry {
    const kvlm_tokenizer *tok;
    uint64_t fingerprint;
    gr_trie *trie;
    int refs;            /* live choices using it */
} cst_entry;

typedef struct cst_tries {
    cst_entry e[CST_MAX_TRIES];
} cst_tries;

/* The trie for tok (built or reused), its reference count raised. vocab:
 * the model's logits width, which must cover the tokenizer's ids. */
gr_trie *cst_trie_acquire(cst_tries *t, const kvlm_tokenizer *tok, int vocab, kvlm_error *err);
void cst_trie_release(cst_tries *t, const gr_trie *trie);
void cst_tries_free(cst_tries *t);

/* Writes to out the logits with every token the matcher's state cannot
 * consume at -infinity; the eos ids keep their logits when the state is
 * accepting. bits: scratch of (vocab + 63) / 64 words. max_close: keep
 * only the tokens after which the output can be closed in that many bytes
 * (GR_NO_CLOSE: no limit; see gr_token_mask_within). Returns the number
 * of tokens left allowed (eos ids included), or KVLM_ERR_NOMEM. */
int cst_mask_logits(gr_matcher *m, const gr_trie *trie, const float *logits, float *out, uint64_t *bits, int vocab,
                    const int32_t *eos, int n_eos, int max_close);

#endif
