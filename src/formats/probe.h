/*
 * Which format a model path is in, and which files hold it: the one place
 * kvlm tells a Hugging Face directory from a .safetensors file, a sharded
 * index, a bare config.json, a GGUF file or an llm.c checkpoint. The model
 * loader (kvlm_model_load), the configuration reader (kvlm_config_load) and
 * the weight-size sum (kvlm_weight_bytes) all start here, so a path means
 * the same thing to each.
 *
 * The probe looks at names, at whether files exist and at a file's first
 * four bytes (the GGUF and llm.c magics); it parses nothing and maps
 * nothing. What a format needs beyond that (config.json being valid, the
 * weights matching it) is the reader's job.
 */
#ifndef KVLM_FORMATS_PROBE_H
#define KVLM_FORMATS_PROBE_H

#include "kvlm.h"

typedef enum probe_kind {
    /* Hugging Face layout: config.json and safetensors weights (one file,
     * or an index of shards) in one directory. The path was the directory,
     * a .safetensors file, an index or a .json file in it. */
    PROBE_HF = 0,
    PROBE_GGUF, /* a GGUF file: configuration, tokenizer and weights in one */
    PROBE_LLMC, /* an llm.c checkpoint: a 1,024-byte header, then the weights */
} probe_kind;

#define PROBE_PATH_MAX 4096

typedef struct probe_result {
    probe_kind kind;
    int sharded;                   /* PROBE_HF: weights is model.safetensors.index.json */
    char dir[PROBE_PATH_MAX];      /* the directory the files are in (the path itself for a directory) */
    char weights[PROBE_PATH_MAX];  /* the weight file (.safetensors, the index, .gguf, .bin); "" for a
                                      Hugging Face directory (or config.json) with no weights beside it */
    char config[PROBE_PATH_MAX];   /* PROBE_HF: the config.json to read; "" otherwise */
} probe_result;

/* Fills out for path. KVLM_ERR_IO when path does not exist (or cannot be
 * read), KVLM_ERR_FORMAT for a file that is none of the formats, each
 * naming the path. A directory without weights is no error here (the
 * configuration alone can be read); weights is then "". */
int probe_model_path(const char *path, probe_result *out, kvlm_error *err);

/* The message for a Hugging Face directory without weights, the same from
 * every caller. Returns KVLM_ERR_IO. */
int probe_no_weights(const probe_result *p, kvlm_error *err);

#endif
