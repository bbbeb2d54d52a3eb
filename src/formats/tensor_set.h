/*
 * A set of named tensor views over one or more memory-mapped files (or
 * copies read into memory, with read_files): what every format parser
 * produces and what the model binder consumes. The set owns the mappings;
 * the views stay valid until tensor_set_free.
 */
#ifndef KVLM_TENSOR_SET_H
#define KVLM_TENSOR_SET_H

#include "mapped_file.h"
#include "tensor.h"

typedef enum tensor_layout {
    LAYOUT_IN_OUT = 0, /* matrices stored [in, out] (Hugging Face GPT-2 Conv1D) */
    LAYOUT_OUT_IN = 1, /* matrices stored [out, in] (PyTorch Linear, llm.c) */
} tensor_layout;

typedef struct named_tensor {
    char *name;
    const char *file; /* path of the file holding it (owned by the set) */
    tensor t;
} named_tensor;

typedef struct tensor_set {
    mapped_file *files;
    int n_files;
    named_tensor *items;
    int n_items, cap_items;
    tensor_layout layout;
    int read_files;    /* 1: tensor_set_open reads files into memory instead of mapping them */
} tensor_set;

void tensor_set_init(tensor_set *ts);
void tensor_set_free(tensor_set *ts);
/* Maps path (or reads it, with read_files) into *f; 0 or a kvlm_status. */
int tensor_set_open(const tensor_set *ts, mapped_file *f, const char *path, kvlm_error *err);
/* Takes ownership of an open mapping; returns its index or -1 (no memory). */
int tensor_set_add_file(tensor_set *ts, mapped_file *f);
/* Adds a view; name is copied. Returns 0 or -1 (no memory). */
int tensor_set_add(tensor_set *ts, const char *name, const char *file, const tensor *t);
/* The tensor called name, or with `prefix` prepended; NULL if absent. */
const named_tensor *tensor_set_find(const tensor_set *ts, const char *name, const char *prefix);

#endif
