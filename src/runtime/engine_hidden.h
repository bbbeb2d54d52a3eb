/*
 * The engine step without the output head, for embeddings
 * (runtime/embed.c): the same forward pass as kvlm_engine_step, its
 * checks, KV appends and failure rules, but what it returns is every new
 * row's final-normed hidden state instead of logits.
 */
#ifndef KVLM_RUNTIME_ENGINE_HIDDEN_H
#define KVLM_RUNTIME_ENGINE_HIDDEN_H

#include "kvlm.h"

/* Runs one step over items (their logits_all is ignored) and writes the
 * hidden state after the final norm of every new token, item after item,
 * into hidden (sum of n_tokens x n_embd floats). Returns 0 or a negative
 * status; on error nothing is appended to any sequence. */
int engine_step_hidden(kvlm_engine *e, const kvlm_batch_item *items, int n_items, float *hidden, kvlm_error *err);
/* The model and KV cache the engine was created with. */
const kvlm_model *engine_model(const kvlm_engine *e);
kvlm_kv *engine_kv(const kvlm_engine *e);

#endif
