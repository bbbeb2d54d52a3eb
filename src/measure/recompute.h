/*
 * Generation without a KV cache, for measurement and checks: each step
 * truncates the sequence to 0 (kvlm_kv_seq_truncate) and runs its whole
 * context again through the ordinary engine, so every token's K/V are
 * recomputed, which is what a model costs without a cache. The engine and
 * the KV cache know nothing of it. Used by `kvlm bench`'s cache-off timing
 * (and so by `kvlm report`) and by the parity test's "cached decode equals
 * recomputation".
 */
#ifndef KVLM_MEASURE_RECOMPUTE_H
#define KVLM_MEASURE_RECOMPUTE_H

#include <stdint.h>

#include "kvlm.h"

/* Runs context[0..n) on seq from position 0 in one step: logits receives
 * the last position's vocab logits. seq ends holding the n tokens. */
int measure_recompute_step(kvlm_engine *e, kvlm_kv *kv, int seq, const int32_t *context, int n, float *logits,
                           kvlm_error *err);

/* Greedy generation of n_new (>= 1) tokens after prompt[0..n_prompt) on seq,
 * every step recomputing the whole context: step 0 runs the prompt, step i
 * the prompt and the i tokens drawn so far. ids receives the n_new ids (the
 * argmax of each step's logits, lowest id on ties), *seconds the wall time
 * of all steps and picks. vocab: the model's vocabulary size. */
int measure_recompute_generate(kvlm_engine *e, kvlm_kv *kv, int seq, int vocab, const int32_t *prompt, int n_prompt,
                               int n_new, int32_t *ids, double *seconds, kvlm_error *err);

#endif
