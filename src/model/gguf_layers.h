/*
 * The per-layer part of a GGUF file's metadata (see gguf_layers.c): fills
 * a layer_spec for c->arch from the keys and tensors llama.cpp writes and
 * reads. Errors name the file and the key or tensor.
 */
#ifndef KVLM_GGUF_LAYERS_H
#define KVLM_GGUF_LAYERS_H

#include "formats/gguf.h"
#include "formats/layer_spec.h"
#include "formats/tensor_set.h"

int gguf_layer_spec(const gguf_meta *g, const tensor_set *ts, kvlm_config *c, layer_spec *s, kvlm_error *err);

#endif
