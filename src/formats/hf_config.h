/*
 * Hugging Face config.json reader: fills a kvlm_config from the fields a
 * GPT-2 checkpoint uses (n_layer, n_head, n_embd, n_positions, vocab_size,
 * n_inner, layer_norm_epsilon, eos_token_id). Unknown architectures and
 * missing or out-of-range fields are errors naming the file and field.
 */
#ifndef KVLM_HF_CONFIG_H
#define KVLM_HF_CONFIG_H

#include "kvlm.h"

int hf_config_load(const char *path, kvlm_config *cfg, kvlm_error *err);

#endif
