/*
 * KV cache sizing: the bytes a model's key/value cache costs per token and
 * per context, the built-in presets of well-known models, and capacity
 * planning (how many requests fit in a memory budget under contiguous
 * max-length reservation vs paged allocation). Pure arithmetic on shapes:
 * no model is run and no weights are read. The facts come from the
 * library: a model's shape from kvlm_config_load, the bytes per token from
 * kvlm_kv_bytes_per_token, dtype sizes from kvlm_dtype_block and weight
 * bytes from kvlm_weight_bytes, so kvlm kv and the engine never disagree.
 *
 * Every product is overflow-checked; a figure that does not fit in 64 bits
 * is an error, never a wrapped number.
 */
#ifndef KVLM_APP_KV_SIZING_H
#define KVLM_APP_KV_SIZING_H

#include <stddef.h>
#include <stdint.h>

#include "kvlm.h"

/* Bytes of n numbers stored as t (kvlm_dtype_block: whole blocks, n
 * rounded up to the block). 0, or -1 for a value that is no dtype or on
 * overflow. */
int kvs_numbers_bytes(kvlm_dtype t, uint64_t n, uint64_t *out);
/* Bytes per number: 4, 2, and 34 / 32 = 1.0625 for q8_0 (0: no dtype). */
double kvs_dtype_bytes(kvlm_dtype t);

/* What sizing needs to know about a model. */
typedef struct kvs_model {
    char name[64];        /* preset key or path */
    char label[64];       /* display name */
    char arch[32];
    int n_layer;
    int n_head;           /* query heads */
    int n_kv_head;
    int head_dim;
    int max_ctx;
    uint64_t params;      /* 0 if unknown */
    int window;           /* sliding window of the window layers (0: none) */
    int window_layers;    /* layers with that window; the others attend globally */
    /* A mixture of experts: the parameters of the experts one token does
     * not use (n_layer x (n_expert - n_expert_used) x 3 x n_embd x
     * n_ff_expert); params minus this is the active count. 0: dense. */
    uint64_t idle_expert_params;
} kvs_model;

/* The built-in presets, in display order. */
const kvs_model *kvs_presets(size_t *n);
/* The preset called name (case-insensitive), or NULL. */
const kvs_model *kvs_preset_find(const char *name);
/* Comma-separated preset names, for messages. */
const char *kvs_preset_names(void);
/* Fills m from a loaded config; name and label are the path. windows:
 * each layer's window (kvlm_config_layer_windows; 0: global), or NULL
 * for the config's one window on every layer. Layers of two different
 * windows count under the larger (an upper bound: no model kvlm reads
 * has more than one window size). */
void kvs_model_from_config(kvs_model *m, const kvlm_config *c, const int *windows, const char *path);

/* The library's KV bytes per token (kvlm_kv_bytes_per_token) of m's
 * shape in a cache of dtype t: 2 x layers x KV heads x the bytes of one
 * head. 0, or -1 when t is not a KV dtype (kvlm_kv_dtype_supported) or
 * m's head dim is not whole blocks of it (q8_0: a multiple of 32). */
int kvs_bytes_per_token(const kvs_model *m, kvlm_dtype t, uint64_t *out);
/* The same for a multi-head twin (one KV head per query head). */
int kvs_mha_bytes_per_token(const kvs_model *m, kvlm_dtype t, uint64_t *out);
/* The bytes per token of m's global and of its window layers (the two
 * add up to kvs_bytes_per_token). 0, or -1 as kvs_bytes_per_token. */
int kvs_split_bytes_per_token(const kvs_model *m, kvlm_dtype t, uint64_t *global, uint64_t *window);
/* KV bytes of one sequence of `tokens` tokens: global layers keep every
 * token, window layers their last min(tokens, window) (every layer whole
 * without a window). 0, or -1 on overflow or as kvs_bytes_per_token. */
int kvs_context_bytes(const kvs_model *m, kvlm_dtype t, uint64_t tokens, uint64_t *out);
/* a x b, 0 or -1 on overflow. */
int kvs_mul(uint64_t a, uint64_t b, uint64_t *out);

/* Capacity planning for one model in a memory budget. */
typedef struct kvs_plan_in {
    uint64_t memory;          /* bytes available for weights + KV */
    uint64_t weights;         /* bytes of weights */
    uint64_t bytes_per_token; /* KV bytes per token */
    uint64_t ctx_len;         /* L: max tokens reserved per request */
    uint64_t mean_len;        /* M: mean tokens per request, 1..L */
    uint64_t block_size;      /* B: tokens per paged block */
    uint64_t window;          /* W: sliding window of the window layers (0: none) */
    uint64_t window_bytes_per_token; /* the part of bytes_per_token the window layers cost */
} kvs_plan_in;

typedef struct kvs_plan {
    int weights_fit;            /* 0: weights > memory, nothing else is set */
    uint64_t kv_memory;         /* memory - weights */
    uint64_t contig_bytes;      /* L x bytes per token */
    uint64_t contig_requests;   /* floor(kv_memory / contig_bytes) */
    double contig_util;         /* M / L */
    uint64_t paged_blocks;      /* ceil(M / B) */
    uint64_t paged_bytes;       /* ceil(M / B) x B x bytes per token; with a window, the window
                                   layers' part only for the blocks from (M + 1 - W) / B on */
    uint64_t paged_requests;    /* floor(kv_memory / paged_bytes) */
    double paged_util;          /* M / (ceil(M / B) x B); with a window, bytes held (a window
                                   layer: min(M, W - 1) tokens) / paged_bytes */
} kvs_plan;

/* Returns 0, or KVLM_ERR_ARG naming the bad input (a zero length, M > L,
 * a product beyond 64 bits). weights > memory is not an error here: the
 * plan says weights_fit = 0 and the caller decides. */
int kvs_plan_compute(const kvs_plan_in *in, kvs_plan *out, kvlm_error *err);

/* Binary units with at most two decimals, trailing zeros trimmed:
 * "512 B", "36 KiB", "1.25 GiB", "4.5 GiB". Returns buf. */
char *kvs_human_bytes(uint64_t bytes, char *buf, size_t cap);
/* "131,072". Returns buf. */
char *kvs_thousands(uint64_t v, char *buf, size_t cap);
/* A byte count with an optional unit: B, KB/MB/GB/TB (powers of 1000) or
 * KiB/MiB/GiB/TiB (powers of 1024), case-insensitive, no space, e.g.
 * "24GiB", "1.5TB", "17179869184". A fraction is allowed and the result
 * rounded down to whole bytes. Returns 0, or -1 for anything else
 * (signs, spaces, unknown units, overflow). */
int kvs_parse_size(const char *s, uint64_t *out);

#endif
