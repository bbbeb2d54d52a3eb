/*
 * The end-of-sequence ids of a model (kvlm_eos_ids, see kvlm.h): the ids
 * its configuration names (config.json and generation_config.json, or the
 * GGUF metadata, gathered by the model loaders into kvlm_config.eos_ids),
 * its tokenizer's end-of-text token and, for a GGUF vocabulary, its
 * end-of-turn and end-of-message tokens (tokenizer.ggml.eot_token_id,
 * eom_token_id), in that order, each once, all inside the model's
 * vocabulary. The scheduler stops on whichever list a
 * request carries; this file only builds the model's own.
 */
#include "kvlm.h"
#include "tokenizer/tokenizer.h"

static int add(int32_t *ids, int cap, int n, int32_t id, int vocab) {
    if (id < 0 || id >= vocab) return n;
    for (int i = 0; i < n && i < cap; i++)
        if (ids[i] == id) return n;
    if (n < cap) ids[n] = id;
    return n + 1;
}

int kvlm_eos_ids(const kvlm_model *m, const kvlm_tokenizer *tok, int32_t *ids, int cap) {
    const kvlm_config *c = kvlm_model_config(m);
    int n = 0;
    for (int i = 0; i < c->n_eos && i < KVLM_MAX_EOS; i++) n = add(ids, cap, n, c->eos_ids[i], c->vocab_size);
    n = add(ids, cap, n, c->eos_id, c->vocab_size); /* loaders that fill eos_id alone */
    if (tok) {
        n = add(ids, cap, n, kvlm_tokenizer_eos_id(tok), c->vocab_size);
        int32_t turn[2];
        int k = tok_end_of_turn_ids(tok, turn);
        for (int i = 0; i < k; i++) n = add(ids, cap, n, turn[i], c->vocab_size);
    }
    return n;
}
