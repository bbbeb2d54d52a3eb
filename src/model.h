/*
 * A loaded model: its configuration and weights bound by name for the
 * architecture (GPT-2 today). Matrices are kept in their stored dtype in
 * [out, in] layout (kern_matrix); small vectors (norm weights, biases) are
 * widened to f32 once at load. Knows nothing about the KV cache or sampling.
 */
#ifndef KVLM_MODEL_H
#define KVLM_MODEL_H

#include "formats/tensor_set.h"
#include "kernels/kernels.h"
#include "kvlm.h"

typedef struct gpt2_layer {
    float *ln1_w, *ln1_b;
    kern_matrix attn_qkv;  /* [3C, C] */
    float *attn_qkv_b;
    kern_matrix attn_proj; /* [C, C] */
    float *attn_proj_b;
    float *ln2_w, *ln2_b;
    kern_matrix mlp_fc;    /* [F, C] */
    float *mlp_fc_b;
    kern_matrix mlp_proj;  /* [C, F] */
    float *mlp_proj_b;
} gpt2_layer;

struct kvlm_model {
    kvlm_config cfg;
    char dir[4096];
    char source[4200];
    tensor_set ts;          /* mappings the weights point into */
    kern_matrix wte;        /* [V(+padding), C], also the tied output head */
    kern_matrix wpe;        /* [n_ctx, C] */
    kern_matrix lm_head;    /* [V(+padding), C]; == wte when tied */
    float *lnf_w, *lnf_b;
    gpt2_layer *layers;
    void **owned;           /* buffers to free: vectors, transposed matrices */
    int n_owned, cap_owned;
};

/* Validates a config (ranges, divisibility); err names the field. */
int model_check_config(const kvlm_config *c, const char *origin, kvlm_error *err);
/* Binds the GPT-2 weights of ts to m (m->cfg already filled). */
int gpt2_bind(kvlm_model *m, const char *origin, kvlm_error *err);
/* Records a heap buffer the model must free; returns it (NULL on failure). */
void *model_own(kvlm_model *m, void *p);

#endif
