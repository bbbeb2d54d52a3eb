/*
 * Hugging Face config.json reader: fills a kvlm_config from the fields a
 * GPT-2 checkpoint uses (n_layer, n_head, n_embd, n_positions, vocab_size,
 * n_inner, layer_norm_epsilon, eos_token_id) or a Llama-family one (model_type
 * llama, mistral, qwen2, qwen3 or phi3: num_hidden_layers, num_attention_heads,
 * num_key_value_heads (default: num_attention_heads), hidden_size,
 * intermediate_size, max_position_embeddings, vocab_size, rms_norm_eps,
 * head_dim (default: hidden_size / num_attention_heads), eos_token_id (an
 * integer or a list), sliding_window (Mistral, Phi-3: every layer), rope_theta
 * and rope_scaling (llama3, linear, longrope)); Gemma 2, Gemma 3 (text),
 * SmolLM3 and Granite too, whose per-layer fields (and Qwen's windows on
 * some layers) formats/hf_layers.c reads into a layer_spec.
 * eos_token_id of config.json and of
 * generation_config.json beside it (when present) make up eos_ids, the
 * first of them eos_id. torch_dtype, when present, gives
 * weight_dtype (f32 otherwise). Unknown architectures and missing or
 * out-of-range fields are errors naming the file and field.
 *
 * Reading a config says nothing about whether kvlm can run the model: the
 * model loader decides that from cfg->arch. cfg->arch is filled as soon as
 * the architecture is recognised, so it is set even when a later field is
 * at fault, and the loader can report the architecture first.
 */
#ifndef KVLM_HF_CONFIG_H
#define KVLM_HF_CONFIG_H

#include "formats/layer_spec.h"
#include "kvlm.h"

int hf_config_load(const char *path, kvlm_config *cfg, kvlm_error *err);
/* hf_config_load that also fills the per-layer spec (formats/hf_layers.c). */
int hf_config_load_spec(const char *path, kvlm_config *cfg, layer_spec *spec, kvlm_error *err);

#endif
