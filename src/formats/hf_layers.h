/*
 * The per-layer fields of a Llama-family config.json (see hf_layers.c):
 * hf_layer_spec fills s for cfg->arch from root (the parsed config);
 * hf_longrope and hf_yarn read a rope_scaling object of type longrope / yarn. Errors name
 * the file and key.
 */
#ifndef KVLM_HF_LAYERS_H
#define KVLM_HF_LAYERS_H

#include <jansson.h>

#include "formats/layer_spec.h"

int hf_layer_spec(json_t *root, const char *path, kvlm_config *cfg, layer_spec *s, kvlm_error *err);
int hf_longrope(json_t *root, json_t *sc, const char *path, const kvlm_config *cfg, layer_spec *s, kvlm_error *err);
/* A rope_scaling object of type yarn (any architecture). */
int hf_yarn(json_t *root, json_t *sc, const char *path, const kvlm_config *cfg, layer_spec *s, kvlm_error *err);

#endif
