/*
 * Binding tensors by name, shared by the architecture binders: find a
 * tensor (with an optional prefix), check its exact shape, widen a vector
 * to f32, bring a matrix into [out, in] layout in its stored dtype (a
 * transpose once at load for [in, out] files), or take an embedding table
 * in place. Every mismatch names the file, the tensor and the expected
 * shape.
 */
#ifndef KVLM_MODEL_BIND_H
#define KVLM_MODEL_BIND_H

#include "model/model.h"

typedef struct bind_ctx {
    kvlm_model *m;
    const char *origin;   /* file named in messages when a tensor is missing */
    const char *prefix;   /* optional name prefix ("transformer."), or NULL */
    kvlm_error *err;
} bind_ctx;

/* The tensor, or NULL (err set when required). */
const named_tensor *bind_find(bind_ctx *b, const char *name, int required);
int bind_vector(bind_ctx *b, const char *name, int64_t n, float **out);
/* Like bind_vector, but a missing tensor leaves *out NULL. */
int bind_vector_opt(bind_ctx *b, const char *name, int64_t n, float **out);
int bind_matrix(bind_ctx *b, const char *name, int64_t out, int64_t in, kern_matrix *w);
/* [rows >= min_rows, cols], used in place. */
int bind_table(bind_ctx *b, const char *name, int64_t min_rows, int64_t cols, kern_matrix *w);

#endif
