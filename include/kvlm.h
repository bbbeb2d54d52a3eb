/*
 * kvlm public API.
 *
 * Everything a program needs to load a decoder-only language model, run it
 * over a paged KV cache and read back what it cost. All handles are opaque;
 * the layout of models, caches and engines may change without notice.
 *
 * Return convention (kvlm.h, kvlm_tokenizer.h, kvlm_measure.h): every
 * function that can fail takes a kvlm_error * (NULL when the message is
 * not wanted) and, on failure, fills it with a status and a message that
 * names the file, field or parameter at fault, and returns
 *   - NULL, when it returns a handle or a pointer, or
 *   - a negative enum kvlm_status (KVLM_ERR_*), when it returns an int:
 *     on success 0, or a count, id or flag that is never negative.
 * A function that cannot fail (an accessor, a size computed from its
 * arguments, a statistic of numbers it is given) takes no kvlm_error and
 * says what it returns for an argument that has no answer (0 bytes, NULL
 * for an unknown token). Lookups of a token id return the id or
 * KVLM_NO_TOKEN (-1) when there is none: an answer, not a failure. The
 * bandwidth measurements of kvlm_measure.h, which return a rate as a
 * double, return 0 when they could not run. Library code never exits the
 * process.
 *
 * Options: every options struct has a kvlm_<thing>_default_params()
 * returning its defaults by value. Start from it and set the fields to
 * change; a field added in a later release then keeps its default in the
 * program once it is rebuilt against the new header. Zero-initialised
 * structs keep working where a zero field is documented to mean the
 * default.
 *
 * This header holds what a program embedding kvlm needs: model, tokenizer
 * (kvlm_tokenizer.h, included below), KV cache, engine, sampler, scheduler,
 * stop strings, errors, version and clock. The measurement entry points
 * (distribution statistics, bandwidth and attention benchmarks) are in
 * kvlm_measure.h. Threads: a handle is driven by one thread at a time
 * unless its section says otherwise (see docs/embedding.md).
 */
#ifndef KVLM_H
#define KVLM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every declaration of the public headers is exported from libkvlm.so; the
 * library is built with -fvisibility=hidden, so nothing else is. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#define KVLM_PRINTF(fmt, first) __attribute__((format(printf, fmt, first)))
#else
#define KVLM_PRINTF(fmt, first)
#endif

/* --------------------------------------------------------------- version */

#define KVLM_VERSION_MAJOR 0
#define KVLM_VERSION_MINOR 17
#define KVLM_VERSION_PATCH 0
#define KVLM_VERSION "0.17.0"

/* The version of the library actually linked (KVLM_VERSION's form,
 * "MAJOR.MINOR.PATCH"); compare it with KVLM_VERSION, the version of the
 * header the program was compiled with. */
const char *kvlm_version(void);

/* ---------------------------------------------------------------- errors */

enum kvlm_status {
    KVLM_OK = 0,
    KVLM_ERR_IO = -1,      /* a file could not be opened, mapped or read */
    KVLM_ERR_FORMAT = -2,  /* a file is malformed, truncated or inconsistent */
    KVLM_ERR_ARG = -3,     /* a caller-supplied value is out of range */
    KVLM_ERR_NOMEM = -4,   /* an allocation failed or the KV pool is full */
    KVLM_ERR_UNSUPPORTED = -5,
    KVLM_ERR_BUSY = -6,    /* a bounded queue is full; retry later */
    KVLM_ERR_SYSTEM = -7,  /* the operating system refused a thread, socket or other resource */
};

/* "No such token": what a token-id lookup returns when there is none
 * (kvlm_tokenizer_token_id, _eos_id, _bos_id; kvlm_config.eos_id). Not a
 * status: these lookups cannot fail. */
#define KVLM_NO_TOKEN (-1)

#define KVLM_ERROR_MAX 512
typedef struct kvlm_error {
    int code;                  /* one of enum kvlm_status */
    char msg[KVLM_ERROR_MAX];  /* human-readable, names what is wrong */
} kvlm_error;

/* Fills err (when non-NULL) with code and the printf-formatted message
 * (truncated to KVLM_ERROR_MAX - 1 bytes) and returns code, so a failure
 * path reads `return kvlm_error_set(err, KVLM_ERR_ARG, "--n %d ...", n);`. */
int kvlm_error_set(kvlm_error *err, int code, const char *fmt, ...) KVLM_PRINTF(3, 4);

/* ---------------------------------------------------------------- dtypes */

typedef enum kvlm_dtype {
    KVLM_F32 = 0,
    KVLM_F16 = 1,
    KVLM_BF16 = 2,
    /* Block-quantised weights (GGUF): rows are a whole number of 32-value
     * blocks. Q8_0 block: f16 scale d, 32 int8 q; value = d * q (34 bytes).
     * Q4_0 block: f16 scale d, 16 bytes; byte j holds value j in its low
     * nibble and value j + 16 in its high nibble; value = d * (nibble - 8)
     * (18 bytes). Q8_0 is also a KV cache dtype (kvlm_kv_options). */
    KVLM_Q8_0 = 3,
    KVLM_Q4_0 = 4,
    /* More GGUF block types, read in place (llama.cpp's layouts; the
     * library's tensor.h spells each out). 32-value blocks: Q4_1 (f16 d, f16
     * m, 4-bit codes; value = d * q + m, 20 bytes), Q5_0 (f16 d, 5-bit codes;
     * value = d * (q - 16), 22 bytes), Q5_1 (f16 d, f16 m, 5-bit codes; value
     * = d * q + m, 24 bytes), IQ4_NL (f16 d, 4-bit indices into a fixed
     * table of 16 int8 levels; 18 bytes). 256-value super-blocks ("K-quants")
     * with per-16 or per-32 sub-block scales packed into 4, 6 or 8 bits
     * under an f16 super-block scale: Q2_K (84 bytes), Q3_K (110), Q4_K
     * (144), Q5_K (176), Q6_K (210). Rows must be whole blocks. MXFP4:
     * 32-value blocks of one E8M0 scale byte e (2^(e - 127); 0xFF, NaN, is
     * refused at load) and 16 bytes of 4-bit E2M1 codes laid out as Q4_0's
     * (17 bytes, so rows are only byte-aligned). IQ4_XS: 256-value
     * super-blocks, f16 d, 6-bit scales of 8 sub-blocks of 32, IQ4_NL's
     * 4-bit indices (136 bytes). */
    KVLM_Q4_1 = 5,
    KVLM_Q5_0 = 6,
    KVLM_Q5_1 = 7,
    KVLM_Q2_K = 8,
    KVLM_Q3_K = 9,
    KVLM_Q4_K = 10,
    KVLM_Q5_K = 11,
    KVLM_Q6_K = 12,
    KVLM_IQ4_NL = 13,
    KVLM_MXFP4 = 14,
    KVLM_IQ4_XS = 15,
} kvlm_dtype;

const char *kvlm_dtype_name(kvlm_dtype t);
/* Bytes per element of f32, f16, bf16; 0 for the block-quantised types,
 * whose size is only defined per row (see the library's dtype_row_bytes). */
size_t kvlm_dtype_size(kvlm_dtype t);
/* Parses the names kvlm_dtype_name gives ("f32", "f16", "bf16", "q8_0", "q4_0",
 * "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "iq4_nl",
 * "mxfp4", "iq4_xs"),
 * case-insensitive, and "float32", "float16", "bfloat16". Returns 0, or
 * KVLM_ERR_ARG for any other name (the message lists the names). */
int kvlm_dtype_parse(const char *s, kvlm_dtype *out, kvlm_error *err);
/* The storage unit of t: returns the bytes of one block and sets *values
 * (may be NULL) to the values it holds: 1 and the element size for f32,
 * f16 and bf16; 32 (Q8_0 .. Q5_1, IQ4_NL, MXFP4) or 256 (the K-quants,
 * IQ4_XS) and the
 * block's bytes for the block-quantised types. 0 for a value that is no
 * dtype. n values stored as t take ceil(n / *values) blocks. */
size_t kvlm_dtype_block(kvlm_dtype t, int *values);

/* ------------------------------------------------------------------- ISA */

typedef enum kvlm_isa {
    KVLM_ISA_AUTO = 0,   /* best the CPU supports (cpuid / hwcaps) */
    KVLM_ISA_SCALAR,     /* plain C, the reference path */
    KVLM_ISA_AVX2,
    KVLM_ISA_AVX512,
    KVLM_ISA_AVX512_VNNI, /* avx512, with int8 activations for Q8_0, Q4_0, Q4_K, Q5_K, Q6_K,
                             MXFP4, IQ4_XS weights (AVX512-VNNI dot products) */
    KVLM_ISA_AVX2_VNNI,   /* avx2, with int8 activations for Q8_0, Q4_0, Q4_K, Q5_K, Q6_K
                             weights (AVX-VNNI dot products) */
    KVLM_ISA_AVX512_BF16, /* avx512-vnni, with bf16 activations for bf16 weights
                             (AVX512-BF16 dot products) */
    /* aarch64 (getauxval on Linux; the x86 values are unsupported there,
       these on x86-64): */
    KVLM_ISA_NEON,         /* Advanced SIMD (every aarch64 CPU): f32 activations */
    KVLM_ISA_NEON_DOTPROD, /* neon, with int8 activations for Q8_0, Q4_0, Q4_K,
                              Q5_K, Q6_K weights (SDOT, Armv8.2 dotprod) */
    KVLM_ISA_NEON_I8MM,    /* neon-dotprod, with Q8_0 / Q4_0 prefill and batches on
                              the int8 matrix multiply (SMMLA, Armv8.6 i8mm) */
    KVLM_ISA_NEON_BF16,    /* neon-i8mm, with bf16 activations for bf16 weights
                              (BFDOT, Armv8.6 BF16) */
} kvlm_isa;

const char *kvlm_isa_name(kvlm_isa isa);
/* The ISA AUTO resolves to on this CPU. */
kvlm_isa kvlm_isa_best(void);

/* ----------------------------------------------------------------- model */

typedef struct kvlm_model kvlm_model;

#define KVLM_MAX_EOS 8

typedef struct kvlm_config {
    char arch[32];        /* "gpt2", "llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3",
                             "smollm3", "granite", and the mixtures of experts "qwen2moe", "qwen3moe",
                             "mixtral" (a GGUF Mixtral is "llama" with experts), "gpt-oss" */
    int n_layer;
    int n_head;           /* query heads */
    int n_kv_head;        /* key/value heads (== n_head for GPT-2) */
    int n_embd;
    int head_dim;
    int n_ff;             /* MLP hidden size */
    int n_ctx;            /* maximum positions */
    int vocab_size;       /* real vocabulary (logits have this many entries) */
    int eos_id;           /* end-of-sequence token, KVLM_NO_TOKEN if unknown (the first of eos_ids) */
    int n_eos;            /* every end-of-sequence id the model's files name */
    int32_t eos_ids[KVLM_MAX_EOS];
    float norm_eps;
    kvlm_dtype weight_dtype;
    /* Llama family (zero for GPT-2, which has learned positions) */
    float rope_theta;           /* rotary base; 0: no rotary embedding */
    int rope_interleaved;       /* 1: rotate pairs (2i, 2i+1) (GGUF); 0: halves (i, i + d/2) (Hugging Face) */
    float rope_factor;          /* llama3 rope_scaling factor; 0: none */
    float rope_low_freq_factor, rope_high_freq_factor;
    int rope_original_ctx;      /* llama3 original_max_position_embeddings */
    int tie_embeddings;         /* output head is the token embedding */
    int qkv_bias;               /* q/k/v projections have biases (Qwen2) */
    int qk_norm;                /* per-head RMSNorm of q and k before rotary (Qwen3) */
    int sliding_window;         /* a query at position p attends to keys p - W + 1 .. p
                                   (Hugging Face's convention) on every layer; 0: the whole
                                   context, or a window on some layers only (Gemma, Qwen's
                                   max_window_layers: each layer's own is internal) */
    /* Mixture of experts (all 0 for a dense model): each layer's FFN is
     * n_expert SwiGLU experts of n_ff_expert, a router picking
     * n_expert_used of them per token (softmax over all experts, the top
     * n_expert_used kept, renormalised to sum 1 when expert_norm_topk),
     * plus, when n_ff_shared > 0, a shared expert of that size scaled by a
     * sigmoid gate (Qwen2-MoE). gpt-oss routes by the top n_expert_used
     * router logits and a softmax over those, with biases and a clamped
     * SwiGLU (the model's own description; expert_norm_topk 0). */
    int n_expert;
    int n_expert_used;
    int n_ff_expert;
    int n_ff_shared;
    int expert_norm_topk;
} kvlm_config;

/* How a model is loaded (kvlm_model_default_params gives the defaults;
 * start from it and set the fields to change, so that a field added in a
 * later release keeps its default in your program). */
typedef struct kvlm_model_params {
    /* The engines' ISA the load-time weight copies are made for
     * (KVLM_ISA_AUTO: the best this CPU has). Engines of another ISA
     * ignore the copies. */
    kvlm_isa isa;
    /* 1 (default): repack weight matrices into the layouts the kernels of
     * isa read faster, in memory the model owns, in place of the file's
     * bytes. Today: with avx512-vnni and avx512-bf16, every Q4_0 matrix of
     * the layers and the output head, packed for decode (1-3 rows per
     * matmul): ceil(rows / 4) * ceil(cols / 128) * 288 bytes each, as many
     * as the file's when rows is a multiple of 4 and cols of 128. Every
     * other kernel of those ISAs (prefill, batches) reads the packed
     * layout too, a few rows unpacked at a time, and the file's pages of a
     * packed matrix are dropped from the process once it is packed (when
     * the file is mapped: use_mmap 1), so the model holds one copy and
     * decode runs faster (docs/performance.md). An engine of another ISA
     * reads the file's layout, whose pages then come back. Nothing applies
     * to other ISAs and dtypes, or to an ISA this CPU lacks (0 bytes
     * packed). 0: the file's layout only (kvlm --no-repack). */
    int repack;
    /* 1 (default): weight files are memory-mapped and read in place, paged
     * in on first use. 0: each weight file is read into memory the model
     * owns at load (no mapping of the file stays; the whole file is read
     * once, before kvlm_model_load returns). Ignored by
     * kvlm_model_synthetic. */
    int use_mmap;
} kvlm_model_params;

/* isa KVLM_ISA_AUTO, repack 1, use_mmap 1. */
kvlm_model_params kvlm_model_default_params(void);

/* Loads a model from a directory (Hugging Face layout) or a single file
 * (llm.c checkpoint, GGUF, or a .safetensors file with config.json beside
 * it), with params (NULL: kvlm_model_default_params()). Weights are used
 * in their stored dtype. Returns NULL with err set on failure:
 * KVLM_ERR_IO for a path that cannot be opened or read, KVLM_ERR_FORMAT
 * for a malformed file, KVLM_ERR_UNSUPPORTED for an architecture kvlm
 * does not run, KVLM_ERR_ARG for a params field out of range,
 * KVLM_ERR_NOMEM when memory (the repacked copies included) ran out. */
kvlm_model *kvlm_model_load(const char *path, const kvlm_model_params *params, kvlm_error *err);

/* Builds a model with random weights and the exact shapes of a known
 * checkpoint ("gpt2-124m", "gpt2-355m", "gpt2-tiny", "llama-1b",
 * "llama-tiny"), for speed and memory figures. dtype: f32, f16, bf16,
 * q8_0 or q4_0 (the types the library can quantise to); any other is
 * KVLM_ERR_UNSUPPORTED. params as for kvlm_model_load (NULL: defaults;
 * use_mmap does not apply). */
kvlm_model *kvlm_model_synthetic(const char *preset, kvlm_dtype dtype, uint64_t seed,
                                 const kvlm_model_params *params, kvlm_error *err);

void kvlm_model_free(kvlm_model *m);
const kvlm_config *kvlm_model_config(const kvlm_model *m);
/* Directory the model was loaded from ("" for synthetic models). */
const char *kvlm_model_dir(const kvlm_model *m);
/* Where the model's tokenizer lives: the GGUF file itself, else the
 * directory ("" for synthetic models). Pass it to kvlm_tokenizer_load. */
const char *kvlm_model_tokenizer_path(const kvlm_model *m);
/* Human-readable origin: format and file ("safetensors: dir/model.safetensors"). */
const char *kvlm_model_source(const kvlm_model *m);
/* Every parameter of the model (all experts of a mixture of experts). */
size_t kvlm_model_param_count(const kvlm_model *m);
/* The parameters one token uses: kvlm_model_param_count for a dense
 * model; for a mixture of experts, n_expert_used of each layer's experts
 * (plus the router and any shared expert) instead of all n_expert. */
size_t kvlm_model_active_param_count(const kvlm_model *m);
/* The bytes of the weights repacked at load (kvlm_model_params.repack; 0
 * when none were), held in place of the file's layout of those matrices. */
size_t kvlm_model_repacked_bytes(const kvlm_model *m);

/* Reads only the configuration of a model, without mapping its weights:
 * path is a model directory, a config.json (any *.json but an index), a
 * .safetensors file or model.safetensors.index.json with config.json
 * beside it, or an llm.c .bin (its header). Knows every architecture
 * config.json may name that kvlm can describe (gpt2, llama, mistral,
 * qwen2, qwen3, phi3), including ones kvlm_model_load cannot run yet.
 * Returns 0 or a negative status (KVLM_ERR_IO, _FORMAT, _UNSUPPORTED). */
int kvlm_config_load(const char *path, kvlm_config *cfg, kvlm_error *err);

/* The window each layer of the model at path attends over, as
 * kvlm_model_load would set it (0: the whole context; a window at least as
 * long as the context is none), from the same files kvlm_config_load
 * reads: windows[l] for l < cap (windows may be NULL with cap 0 to count).
 * Returns the layer count, or a negative status as kvlm_config_load. */
int kvlm_config_layer_windows(const char *path, int *windows, int cap, kvlm_error *err);

/* Bytes of weights a checkpoint holds, without loading it: the sum of its
 * tensors' sizes as its headers declare them, for the paths
 * kvlm_config_load takes (a config.json counts the weights beside it) and
 * GGUF files; *params (may be NULL) receives their element count. Stored
 * buffers that are not parameters (GPT-2's "attn.bias" causal masks,
 * "inv_freq" rotary tables) are left out. The files are mapped to read
 * their headers; no weight is touched. Returns 0, or an error naming the
 * file (KVLM_ERR_IO when there is no weight file). */
int kvlm_weight_bytes(const char *path, uint64_t *bytes, uint64_t *params, kvlm_error *err);

/* -------------------------------------------------------------- KV cache */

typedef struct kvlm_kv kvlm_kv;

/* A KV cache's shape. Initialise with kvlm_kv_default_params() and set
 * the fields to change (a field added later then keeps its default); a
 * zero-initialised struct still means the same defaults. */
typedef struct kvlm_kv_options {
    kvlm_dtype dtype;          /* KVLM_F32, KVLM_F16 or KVLM_Q8_0 (head dim a multiple
                                  of 32: per token and head, head_dim / 32 blocks of an
                                  f16 scale and 32 int8, 34 bytes each) */
    int block_size;            /* tokens per block; 0 means 16 */
    size_t n_blocks;           /* pool size in blocks of kvlm_kv_info.block_bytes (one layer
                                  slice); 0 means max_seqs * ceil(n_ctx / block_size)
                                  * kvlm_kv_info.n_slices, every slice's whole context */
    int max_seqs;              /* 0 means 1 */
    int reserve_tokens;        /* 0..n_ctx: every new sequence holds blocks for at least
                                  this many tokens from creation until it is freed
                                  (truncation keeps them). 0: blocks are taken on demand
                                  (paging); n_ctx: the contiguous max-length reservation
                                  (the baseline kvlm bench-kv compares against). A
                                  sequence created under a reservation copies what it
                                  forks into its own blocks. */
    int no_prefix_cache;       /* 1: do not index full blocks for reuse (always off
                                  when reserve_tokens > 0) */
    int keep_whole;            /* 1: layers with a sliding window keep every block as
                                  global layers do (0: their blocks older than the
                                  window go back to the pool; the baseline kvlm
                                  bench-kv compares against) */
    /* Tiers below the pool (docs/kv-tiers.md; need the prefix cache). A full
     * block position (every layer slice) evicted from the pool's LRU is kept
     * in host memory up to tier_ram_bytes (0: no memory tier); every full
     * block is also written to tier_dir (NULL or "": no disk tier), one
     * file each, bounded by tier_disk_bytes (0: 1 GiB). A lookup
     * (kvlm_kv_seq_new_prefixed) goes on past the pool into memory, then
     * disk, verifying token ids and the cache's fingerprint (model file,
     * shape, rotary and window settings, dtype, block size). */
    size_t tier_ram_bytes;
    const char *tier_dir;
    size_t tier_disk_bytes;
} kvlm_kv_options;

/* dtype KVLM_F32, block_size 16, n_blocks 0 (max_seqs full contexts),
 * max_seqs 1, reserve_tokens 0 (paging), the prefix cache on. */
kvlm_kv_options kvlm_kv_default_params(void);

#define KVLM_KV_RESTORE_BUCKETS 15

typedef struct kvlm_kv_stats {
    size_t bytes_per_token;    /* kvlm_kv_bytes_per_token of the model and dtype */
    size_t block_bytes;        /* bytes_per_token x block_size x slice_layers / layers
                                  (one slice's block; kvlm_kv_info) */
    size_t blocks_total;
    size_t blocks_used;        /* held by at least one sequence or pin */
    size_t blocks_cached;      /* held by none, kept for prefix reuse (evictable) */
    size_t blocks_free;        /* never written or evicted */
    size_t blocks_shared;      /* held by more than one sequence */
    size_t tokens;             /* sum of sequence lengths (shared tokens counted per sequence) */
    size_t tokens_stored;      /* token states held in used blocks, each block once (a
                                  block of one layer slice counts 1 / n_slices) */
    size_t bytes_pool;         /* blocks_total x block_bytes */
    size_t bytes_reserved;     /* blocks_used x block_bytes */
    size_t bytes_live;         /* slots written in used blocks x bytes of one slot
                                  (tokens_stored x bytes_per_token with one slice) */
    size_t bytes_slack;        /* bytes_reserved - bytes_live */
    double utilisation;        /* bytes_live / bytes_reserved (0 when nothing is reserved) */
    int seqs;                  /* live sequences */
    /* prefix cache counters since creation */
    uint64_t prefix_queries;       /* prompts looked up */
    uint64_t prefix_query_tokens;  /* their tokens */
    uint64_t prefix_hits;          /* prompts with at least one block reused */
    uint64_t prefix_hit_tokens;    /* tokens whose KV was reused */
    uint64_t evictions;            /* cached blocks reclaimed for new data */
    uint64_t cow_copies;           /* shared partial blocks copied before a write */
    size_t blocks_pinned;          /* held by a pin (kvlm_kv_pin; counted in blocks_used) */
    /* tiers (kvlm_kv_options.tier_*), counted in block positions (all slices) */
    uint64_t tier_ram_hits;        /* restored from host memory */
    uint64_t tier_disk_hits;       /* restored from disk */
    uint64_t tier_spills;          /* evicted pool blocks kept in host memory */
    uint64_t tier_spill_refused;   /* evicted but not kept: a window slice had released its block */
    size_t tier_ram_blocks, tier_ram_bytes;    /* held in host memory now */
    size_t tier_disk_files, tier_disk_bytes;   /* this cache's files on disk now */
    uint64_t tier_bytes_read;      /* file bytes read by hits */
    uint64_t tier_bytes_written;   /* file bytes written */
    uint64_t tier_writes_dropped;  /* not written: the writer's queue was full or writes are off */
    uint64_t tier_write_errors;    /* failed writes (the disk tier then stops writing) */
    uint64_t tier_bad_files;       /* corrupt, truncated or foreign files found and removed */
    uint64_t tier_restore_ns;      /* time spent restoring tier hits (sum) */
    uint64_t tier_restores;        /* lookups that restored at least one block */
    uint64_t tier_prefetched;      /* block files read ahead of their lookup (kvlm_kv_prefetch) */
    /* Restore latency: each lookup that restored blocks, by the lowest
     * tier it read ([0] memory only, [1] disk): its count in the first
     * bucket whose upper bound (kvlm_kv_restore_bucket_bound) holds its
     * time (not cumulative; the last bucket is unbounded), and the time. */
    uint64_t tier_restore_buckets[2][KVLM_KV_RESTORE_BUCKETS];
    uint64_t tier_restore_ns_by[2];
} kvlm_kv_stats;

/* The upper bound in seconds of restore-latency bucket i (0 <=
 * i < KVLM_KV_RESTORE_BUCKETS - 1: 0.0001 ... 2.5); the last bucket has
 * none (+Inf). */
double kvlm_kv_restore_bucket_bound(int i);

/* KV bytes one token costs in a cache of dtype t for a model of config c:
 * 2 x layers x KV heads x (head_dim x 4 for f32, x 2 for f16; head_dim +
 * 2 x head_dim / 32 for q8_0, the int8 values and one f16 scale per 32).
 * 0 when t is not a KV dtype, the head dim does not divide into its
 * blocks (kvlm_kv_create then refuses it) or the product does not fit in
 * a size_t. */
size_t kvlm_kv_bytes_per_token(const kvlm_config *c, kvlm_dtype t);

/* 1 when a KV cache stores t (f32, f16, q8_0), else 0: the one rule for
 * which dtypes kvlm_kv_options.dtype, kvlm run --kv-dtype and kvlm kv
 * accept. */
int kvlm_kv_dtype_supported(kvlm_dtype t);
/* Parses a KV cache dtype: a kvlm_dtype_parse name that
 * kvlm_kv_dtype_supported accepts. Returns 0, or KVLM_ERR_ARG with err
 * naming s and listing the KV dtypes. */
int kvlm_kv_dtype_parse(const char *s, kvlm_dtype *out, kvlm_error *err);

kvlm_kv *kvlm_kv_create(const kvlm_model *m, const kvlm_kv_options *opt,
                        kvlm_error *err);
void kvlm_kv_free(kvlm_kv *kv);
/* Returns a new empty sequence id (>= 0), or KVLM_ERR_NOMEM when every
 * sequence slot (max_seqs) or the blocks of its reserve_tokens are taken. */
int kvlm_kv_seq_new(kvlm_kv *kv, kvlm_error *err);
/* A new sequence whose first *n_cached tokens of prompt are served from the
 * prefix cache (whole blocks; at least one token is always left to
 * compute). The caller then runs the rest of the prompt. Returns the id,
 * KVLM_ERR_ARG for a prompt longer than the context window, or as
 * kvlm_kv_seq_new. */
int kvlm_kv_seq_new_prefixed(kvlm_kv *kv, const int32_t *prompt, int n, int *n_cached,
                             kvlm_error *err);
/* A new sequence sharing all of parent's blocks; a partly filled last
 * block is copied only when one side writes to it (copy-on-write).
 * Returns the id, KVLM_ERR_ARG for an unknown parent, or as
 * kvlm_kv_seq_new. */
/* Starts reading the disk tier's files of prompt's full blocks that the
 * pool does not hold, on the tier's reader thread, so that a later
 * kvlm_kv_seq_new_prefixed of the same prompt finds them read and checked
 * (the scheduler calls it when a request is submitted). Never waits for
 * the disk; a no-op without a disk tier (kvlm_kv_options.tier_dir). */
void kvlm_kv_prefetch(kvlm_kv *kv, const int32_t *prompt, int n);
int kvlm_kv_seq_fork(kvlm_kv *kv, int parent, kvlm_error *err);
/* Frees the sequence's blocks (an unknown seq is ignored). */
void kvlm_kv_seq_free(kvlm_kv *kv, int seq);
/* Drops the sequence's tokens from position len on (0 <= len <= its length),
 * returning blocks it no longer needs (those of its reserve_tokens stay);
 * shared and indexed blocks stay with their other holders. Used to roll
 * back, or to recompute: truncated to 0 and the whole context stepped
 * again is generation without a KV cache. With a sliding-window model the
 * blocks that fell out of the window are gone: a length whose window
 * would need them is refused (KVLM_ERR_ARG); 0 always works. */
int kvlm_kv_seq_truncate(kvlm_kv *kv, int seq, int len, kvlm_error *err);
/* Number of token positions cached for the sequence, or KVLM_ERR_ARG
 * when there is no such sequence. */
int kvlm_kv_seq_len(const kvlm_kv *kv, int seq, kvlm_error *err);
/* The sequence's token ids: *tokens receives its kvlm_kv_seq_len ids
 * (valid until the sequence changes); returns that length, or
 * KVLM_ERR_ARG when there is no such sequence. */
int kvlm_kv_seq_tokens(const kvlm_kv *kv, int seq, const int32_t **tokens, kvlm_error *err);
/* Blocks a new allocation can take now (free + evictable cached). */
size_t kvlm_kv_available_blocks(const kvlm_kv *kv);
/* Blocks seq needs beyond what it holds to grow to len tokens (including a
 * copy-on-write of a shared last block); 0 for an unknown seq. */
size_t kvlm_kv_blocks_needed(const kvlm_kv *kv, int seq, int len);
void kvlm_kv_get_stats(const kvlm_kv *kv, kvlm_kv_stats *st);

/* Saved KV of one sequence: its token ids and the K/V rows of every layer
 * as stored (the cache's dtype), under a 64-byte header with the model's
 * KV fingerprint (the model's weights and shape, the KV dtype, rotary and
 * window settings) and an XXH3-64 checksum; the record does not depend on
 * the block size. kvlm_kv_seq_save writes seq's record to f (KVLM_ERR_ARG
 * for an unknown sequence, or one whose sliding window released its first
 * positions; KVLM_ERR_IO when a write fails). kvlm_kv_seq_restore reads
 * one record from f into a new sequence of kv (*seq its id; its full
 * blocks enter the prefix index as if the tokens had been computed) and
 * returns 0, or KVLM_ERR_FORMAT (a record that is truncated, corrupted,
 * of another version, or from another model file or setting: the message
 * says which) or KVLM_ERR_NOMEM (no sequence slot or blocks), leaving
 * the cache as it was and *seq -1. m is the model kv was made for. */
int kvlm_kv_seq_save(const kvlm_kv *kv, const kvlm_model *m, int seq, FILE *f, kvlm_error *err);
int kvlm_kv_seq_restore(kvlm_kv *kv, const kvlm_model *m, FILE *f, int *seq, kvlm_error *err);

/* Pinned prefixes: the cached blocks of a prompt's whole blocks kept in
 * the pool (never evicted) until unpinned, so every prompt that starts with
 * it hits them. kvlm_kv_pin pins what the prefix cache holds of tokens now
 * (run the prompt first to warm it): its leading whole blocks, every layer
 * slice's; *pinned_tokens receives how many tokens they cover (0 is
 * refused: KVLM_ERR_ARG). A block held by several pins counts once.
 * Refuses with KVLM_ERR_NOMEM, pinning nothing, when the blocks pinned
 * would exceed max_pinned_blocks (the caller's bound: what must stay
 * available to requests). Returns the pin's id (>= 1). kvlm_kv_unpin drops
 * one (KVLM_ERR_ARG for an unknown id); its blocks go back to the prefix
 * cache's LRU. kvlm_kv_pins lists up to cap pins in creation order and
 * returns how many there are. */
typedef struct kvlm_kv_pin_info {
    int id;
    int tokens;                /* tokens its blocks cover (a multiple of the block size) */
    size_t blocks;             /* blocks it pins, every slice's */
} kvlm_kv_pin_info;
int kvlm_kv_pin(kvlm_kv *kv, const int32_t *tokens, int n, size_t max_pinned_blocks, int *pinned_tokens,
                kvlm_error *err);
int kvlm_kv_unpin(kvlm_kv *kv, int pin, kvlm_error *err);
int kvlm_kv_pins(const kvlm_kv *kv, kvlm_kv_pin_info *out, int cap);
/* With a disk tier (tier_dir), the pins' token ids are recorded in its
 * directory (DIR/<fingerprint>.pins, checksummed, written atomically)
 * whenever kvlm_kv_pin or kvlm_kv_unpin changes them. The record found
 * when the cache was created: kvlm_kv_recorded_pins is the number of its
 * pins (0 without a disk tier or record; a record that fails its checks
 * is reported on stderr, counted in tier_bad_files, removed and
 * ignored), kvlm_kv_recorded_pin the i-th's ids (*n_tokens of them,
 * owned by kv; NULL out of range). The caller pins them again (warm the
 * prompt, then kvlm_kv_pin: the lookup restores its blocks from disk). */
int kvlm_kv_recorded_pins(const kvlm_kv *kv);
const int32_t *kvlm_kv_recorded_pin(const kvlm_kv *kv, int i, int *n_tokens);

/* A cache's fixed shape, as kvlm_kv_create settled it (defaults applied). */
typedef struct kvlm_kv_info {
    kvlm_dtype dtype;          /* KVLM_F32, KVLM_F16 or KVLM_Q8_0 */
    int block_size;            /* tokens per block */
    int max_seqs;              /* sequences it can hold at once */
    int n_ctx;                 /* longest sequence: the model's context window */
    size_t n_blocks;           /* blocks in the pool (kvlm_kv_stats.blocks_total) */
    int n_slices;              /* block tables per sequence: the layers grouped by window,
                                  each group cut into slices of slice_layers layers */
    int slice_layers;          /* layers per slice (all the model's with one window) */
    size_t block_bytes;        /* one block: block_size tokens of one slice */
    size_t bytes_per_token;    /* every layer of one token (kvlm_kv_bytes_per_token) */
    int n_layer_types;         /* distinct windows among the layers (kvlm_kv_layer_types) */
    int keep_whole;            /* kvlm_kv_options.keep_whole */
} kvlm_kv_info;
void kvlm_kv_get_info(const kvlm_kv *kv, kvlm_kv_info *info);

/* One layer type of a cache: the layers sharing one window. */
typedef struct kvlm_kv_layer_type {
    int window;                /* tokens each query reads (0: the whole context) */
    int n_layers;              /* layers of this type */
    size_t bytes_per_token;    /* KV bytes of one token for these layers */
    int releases;              /* 1: blocks older than the window go back to the pool
                                  (0: kept: global, keep_whole or reserve_tokens) */
} kvlm_kv_layer_type;
/* The cache's layer types, global first then by window: up to cap into
 * out (NULL with cap 0 to count); returns how many there are. */
int kvlm_kv_layer_types(const kvlm_kv *kv, kvlm_kv_layer_type *out, int cap);
/* The most KV bytes one sequence of len tokens holds in this cache's
 * blocks between steps (whole blocks; a window type holds the blocks of
 * its last window only when it releases): what admission and capacity
 * planning count. 0 for len <= 0; len is clipped to n_ctx. */
size_t kvlm_kv_seq_bytes(const kvlm_kv *kv, int len);

/* The live block view, for pictures of the pool (kvlm serve's GET
 * /kvlm/engine, docs/engine-view.md). Read-only; call it from the thread
 * that drives the cache, between steps. */

/* The state of every block: refs[b] receives block b's reference count
 * (sequences holding it; more than 1: shared), cached[b] 1 for a block no
 * sequence holds but the prefix cache keeps (evictable), else 0. Both
 * arrays have room for cap entries; returns 0, or KVLM_ERR_ARG when cap is
 * less than kvlm_kv_info.n_blocks (nothing written). */
int kvlm_kv_block_states(const kvlm_kv *kv, int *refs, unsigned char *cached, size_t cap, kvlm_error *err);
/* seq's block table (of its first layer slice; kvlm_kv_info.n_slices):
 * *table receives its block numbers in position order
 * (position p is in block (*table)[p / block_size]; -1 for a block a
 * sliding window released), valid until the sequence next changes.
 * Returns how many (enough for its length and any pending append), or
 * KVLM_ERR_ARG when seq is no live sequence. */
int kvlm_kv_seq_blocks(const kvlm_kv *kv, int seq, const int **table, kvlm_error *err);
/* kvlm_kv_seq_blocks for any layer slice 0 .. kvlm_kv_info.n_slices - 1
 * (each slice has its own table; a window slice's starts with -1 where
 * its window released blocks). KVLM_ERR_ARG for no live seq or a slice
 * out of range. */
int kvlm_kv_seq_slice_blocks(const kvlm_kv *kv, int seq, int slice, const int **table, kvlm_error *err);

/* ---------------------------------------------------------------- engine */

typedef struct kvlm_engine kvlm_engine;

/* Initialise with kvlm_engine_default_params() (zero fields are the
 * same defaults). */
typedef struct kvlm_engine_options {
    int threads;       /* threads of every parallel region of a step (0:
                          kvlm_default_threads, one per physical core the
                          process may run on). The engine's own
                          count: omp_set_num_threads / OMP_NUM_THREADS and other
                          engines do not change it, and it sets nothing
                          process-wide. */
    kvlm_isa isa;      /* KVLM_ISA_AUTO: the best this CPU has */
} kvlm_engine_options;

/* threads 0 (kvlm_default_threads: one per physical core), isa
 * KVLM_ISA_AUTO. */
kvlm_engine_options kvlm_engine_default_params(void);

/* One sequence's share of a step: n_tokens new tokens appended at the end of
 * the sequence (a prefill chunk or one decode token). */
typedef struct kvlm_batch_item {
    int seq;
    const int32_t *tokens;
    int n_tokens;
    int logits_all;    /* 1: logits for every new token; 0: only the last; -1: none
                          (a prefill chunk that does not end the prompt) */
} kvlm_batch_item;

/* The thread count an engine created with threads 0 runs: one per
 * physical core in the process's affinity mask (SMT siblings, read from
 * /sys/devices/system/cpu/cpuN/topology, not counted; every processor of
 * the mask when sysfs has no topology), at least 1 and at most 1024. Never
 * fails. When why is not NULL, writes the reason there (why_size bytes,
 * NUL-terminated), e.g. "2 physical cores available to this process; no
 * SMT siblings". */
int kvlm_default_threads(char *why, size_t why_size);

kvlm_engine *kvlm_engine_create(kvlm_model *m, kvlm_kv *kv,
                                const kvlm_engine_options *opt, kvlm_error *err);
void kvlm_engine_free(kvlm_engine *e);
/* Runs one forward step over a batch. logits receives, item after item,
 * n_tokens x vocab (logits_all 1), 1 x vocab (0) or nothing (-1). Returns 0
 * or a negative status; on error nothing is appended to any sequence. */
int kvlm_engine_step(kvlm_engine *e, const kvlm_batch_item *items, int n_items,
                     float *logits, kvlm_error *err);
/* Number of floats kvlm_engine_step writes for this batch. */
size_t kvlm_engine_logits_size(const kvlm_engine *e,
                               const kvlm_batch_item *items, int n_items);
kvlm_isa kvlm_engine_isa(const kvlm_engine *e);
int kvlm_engine_threads(const kvlm_engine *e);
/* The largest number of threads that ran one of the engine's parallel
 * regions so far (0 before the first step); never above kvlm_engine_threads. */
int kvlm_engine_threads_used(const kvlm_engine *e);

/* ------------------------------------------------------------ embeddings */

/* How the final hidden states of an input (after the model's final norm,
 * one vector of n_embd per token) become its embedding. The values are
 * llama.cpp's (GGUF {arch}.pooling_type). */
typedef enum kvlm_pooling {
    KVLM_POOLING_UNSPECIFIED = -1, /* the model's (kvlm_model_pooling) */
    KVLM_POOLING_NONE = 0,  /* no pooling: every token's vector */
    KVLM_POOLING_MEAN = 1,  /* the mean over the input's tokens */
    KVLM_POOLING_CLS = 2,   /* the first token's */
    KVLM_POOLING_LAST = 3,  /* the last token's (decoder embedding models such as Qwen3-Embedding) */
} kvlm_pooling;

/* "none", "mean", "cls", "last" ("unspecified" for -1; NULL for another value). */
const char *kvlm_pooling_name(kvlm_pooling p);
/* Parses "mean", "cls", "last" or "none" (case-insensitive). Returns 0 or
 * KVLM_ERR_ARG naming s and listing the names. */
int kvlm_pooling_parse(const char *s, kvlm_pooling *out, kvlm_error *err);
/* The pooling the model's files name: GGUF {arch}.pooling_type (mean, cls
 * or last), else a sentence-transformers 1_Pooling/config.json in the
 * model's directory (pooling_mode_mean_tokens, _cls_token, _lasttoken),
 * else KVLM_POOLING_LAST, the pooling of decoder embedding models. *source
 * (may be NULL) receives where it came from: "gguf", "1_Pooling" or
 * "default". A file naming a pooling kvlm does not compute (max, weighted
 * mean, several modes, rank) gives KVLM_POOLING_UNSPECIFIED and *source
 * says which; kvlm_embed then needs an explicit pooling. */
kvlm_pooling kvlm_model_pooling(const kvlm_model *m, const char **source);

/* Initialise with kvlm_embed_default_params(). */
typedef struct kvlm_embed_params {
    kvlm_pooling pooling;  /* UNSPECIFIED: kvlm_model_pooling */
    int raw;               /* 0: each vector scaled to L2 norm 1 (a zero vector stays
                              zero); 1: as pooled */
    int max_batch_tokens;  /* tokens per engine step (inputs are grouped into steps
                              of at most this many; an input longer runs alone).
                              The engine's activations grow to the largest step
                              and stay. 0: 512 */
} kvlm_embed_params;

/* pooling UNSPECIFIED, raw 0, max_batch_tokens 0 (512). */
kvlm_embed_params kvlm_embed_default_params(void);

/* Floats kvlm_embed writes for these inputs: n_inputs x n_embd, or
 * sum(n_tokens) x n_embd with KVLM_POOLING_NONE (p NULL: defaults). 0 when
 * the pooling is unknown or a count is negative. */
size_t kvlm_embed_size(const kvlm_engine *e, const int *n_tokens, int n_inputs, const kvlm_embed_params *p);
/* Embeds n_inputs token sequences (inputs[i] of n_tokens[i] ids, each
 * 1..n_ctx) with the engine's model: each input is its own KV sequence
 * (causal attention within it, nothing seen across inputs), as many
 * inputs as fit the batch budget, the free sequence slots and the free
 * blocks run in one engine step, and their sequences are freed at once
 * (blocks that running sequences hold are never touched). out receives
 * the vectors input after input (cap floats; kvlm_embed_size needed).
 * Returns 0, or KVLM_ERR_ARG (an input empty or longer than the context,
 * naming its index; a token outside the vocabulary; cap too small; a
 * pooling the model's files name that kvlm does not compute),
 * KVLM_ERR_NOMEM when not even one input finds a sequence slot and its
 * blocks now (nothing is written then; inputs of earlier steps may be). */
int kvlm_embed(kvlm_engine *e, const int32_t *const *inputs, const int *n_tokens, int n_inputs,
               const kvlm_embed_params *p, float *out, size_t cap, kvlm_error *err);

/* --------------------------------------------------------------- sampler */

typedef struct kvlm_sampler kvlm_sampler;

typedef struct kvlm_logit_bias {
    int32_t id;
    float bias;        /* added to the logit; -100 or less bans the token */
} kvlm_logit_bias;

/* Logits processors, applied in `order` (see kvlm_sampler_options.order):
 *   penalties    repetition (multiplicative: positive logits divided by it,
 *                negative ones multiplied), frequency (logit -= f x count)
 *                and presence (logit -= p if count > 0), over the last
 *                penalty_window tokens of the history (0: all of it)
 *   bias         logit_bias added
 *   temperature  logits divided by T (T = 0: greedy, the argmax after
 *                penalties and bias; the filters cannot change it)
 *   top_k        the k most likely tokens kept (0: off)
 *   top_p        the smallest set of most likely tokens whose mass reaches
 *                p kept, at least one (1: off)
 *   min_p        tokens with probability below min_p x the top probability
 *                dropped (0: off)
 * then one token is drawn from the softmax of what is left. */
typedef struct kvlm_sampler_options {
    float temperature;
    int top_k;
    float top_p;
    float min_p;
    float repetition_penalty;  /* 1: off */
    float frequency_penalty;   /* 0: off; may be negative */
    float presence_penalty;    /* 0: off; may be negative */
    int penalty_window;        /* last N history tokens; 0: all */
    const kvlm_logit_bias *logit_bias;
    int n_logit_bias;
    /* Comma-separated processor names; NULL means the default
     * "penalties,bias,temperature,top_k,top_p,min_p" (Hugging Face and
     * vLLM order). "penalties,bias,top_k,top_p,min_p,temperature" is
     * llama.cpp's: the filters then see the untempered distribution. */
    const char *order;
    uint64_t seed;
} kvlm_sampler_options;

/* Temperature 1 (sampling, not greedy), every filter and penalty off
 * (top_p 1, repetition_penalty 1), no bias, the default order, seed 0.
 * Initialise with it: a zero-initialised struct is greedy (temperature 0)
 * with top_p and repetition_penalty 0, which the sampler reads as off. */
kvlm_sampler_options kvlm_sampler_default_params(void);

kvlm_sampler *kvlm_sampler_create(const kvlm_sampler_options *opt, int vocab,
                                  kvlm_error *err);
void kvlm_sampler_free(kvlm_sampler *s);
/* Appends tokens to the history the penalties look at (prompt and output).
 * Ids outside the vocabulary are skipped; when memory runs out the history
 * stops growing and the penalties see what it holds. */
void kvlm_sampler_accept(kvlm_sampler *s, const int32_t *ids, int n);
/* Clears the history (a new request with the same sampler). */
void kvlm_sampler_reset(kvlm_sampler *s);
/* Picks the next token from logits (not modified). Does not accept it. */
int32_t kvlm_sampler_next(kvlm_sampler *s, const float *logits);
/* The candidates the chain keeps for these logits and their renormalised
 * probabilities, most likely first; returns how many (ids/probs hold vocab
 * entries). With temperature 0: the argmax alone, probability 1. */
int kvlm_sampler_candidates(kvlm_sampler *s, const float *logits, int32_t *ids,
                            float *probs);

/* Writes the k most likely tokens of log_softmax(logits) in descending order
 * (ties: lower id first). Returns the number written (min(k, vocab)). */
int kvlm_top_logprobs(const float *logits, int vocab, int k, int32_t *ids,
                      float *logprobs);
/* log_softmax(logits)[id]. */
float kvlm_token_logprob(const float *logits, int vocab, int32_t id);
/* Entropy in nats of softmax(logits), exact over the whole vocabulary (two
 * passes in double precision, no sort; -inf logits contribute nothing). */
double kvlm_logits_entropy(const float *logits, int vocab);

/* ------------------------------------------------------------- grammars */

/* Constrained decoding (docs/structured-output.md): a grammar limits the
 * tokens a request may draw to those whose bytes can continue a sentence
 * of the grammar, so the output is valid by construction (given enough
 * max_tokens). A compiled grammar is immutable: one may serve any number
 * of requests on any threads at once. Each constructor returns NULL with
 * err set (KVLM_ERR_ARG for a malformed input, KVLM_ERR_UNSUPPORTED for
 * what kvlm does not implement), the message naming the keyword, JSON
 * pointer, line and column or offset at fault, e.g.
 * "json schema: unsupported keyword \"patternProperties\" at /properties/a". */
typedef struct kvlm_grammar kvlm_grammar;

/* JSON text of a JSON Schema (the supported subset is documented). */
kvlm_grammar *kvlm_grammar_from_json_schema(const char *schema_json, size_t len, kvlm_error *err);
/* Any JSON object (OpenAI's json_object mode). */
kvlm_grammar *kvlm_grammar_json_object(kvlm_error *err);
/* llama.cpp's GBNF syntax; the start rule is "root". */
kvlm_grammar *kvlm_grammar_from_gbnf(const char *text, size_t len, kvlm_error *err);
/* A regular expression that the whole output must match. */
kvlm_grammar *kvlm_grammar_from_regex(const char *re, size_t len, kvlm_error *err);
/* The same grammar with fixed text around it: prefix G suffix (a tool
 * call's wrapper, e.g. "<tool_call>\n" + schema + "\n</tool_call>").
 * NULL prefix or suffix: none. g is not changed and may be freed after. */
kvlm_grammar *kvlm_grammar_wrap(const kvlm_grammar *g, const char *prefix, const char *suffix, kvlm_error *err);
void kvlm_grammar_free(kvlm_grammar *g);
/* A grammar whose sentences are those of any of gs[0 .. n) (n >= 1; a
 * tool call of any of several functions, each with its own wrapper). The
 * gs are not changed and may be freed after. */
kvlm_grammar *kvlm_grammar_any(const kvlm_grammar *const *gs, int n, kvlm_error *err);
/* Whether text[0..len) is a complete sentence of g: 1 yes, 0 no (not
 * even a prefix of one, or a prefix only), negative status on failure. */
int kvlm_grammar_match(const kvlm_grammar *g, const char *text, size_t len, kvlm_error *err);
/* The length in bytes of g's shortest sentence: the fewest tokens a
 * request must allow (max_tokens) for the output to close, counting one
 * token per byte (kvlm_sched_submit refuses fewer). KVLM_ERR_ARG when g
 * has no finite sentence, KVLM_ERR_NOMEM. */
int kvlm_grammar_min_bytes(const kvlm_grammar *g, kvlm_error *err);

/* ------------------------------------------------------------- scheduler */

/* Continuous batching over one engine: requests join and leave the running
 * batch between steps; prompts are prefilled in chunks under a per-step
 * token budget; admission waits for free KV blocks; when the pool runs dry
 * the most recently admitted sequence is preempted and later recomputed
 * (its sampler state is kept, so its output does not change); n > 1
 * choices fork the prompt's blocks. Single-threaded: one caller drives
 * kvlm_sched_step.
 *
 * The scheduler is kvlm's one generation loop: the CLI runs a request on a
 * scheduler of its own and the server shares one among its clients. For
 * each token it samples (penalty history: prompt and output), records the
 * log-probabilities asked for, turns the token into text (kvlm_text_stream:
 * stop strings, UTF-8) and ends the choice on an end-of-sequence id, a
 * completed stop string, max_tokens or the context window. */
typedef struct kvlm_sched kvlm_sched;
typedef struct kvlm_tokenizer kvlm_tokenizer; /* kvlm_tokenizer.h */

typedef enum kvlm_finish {
    KVLM_FINISH_NONE = 0,
    KVLM_FINISH_STOP,       /* an eos id, a stop string, or on_token asked to stop */
    KVLM_FINISH_LENGTH,     /* max_tokens or the context window */
    KVLM_FINISH_CANCELLED,
    KVLM_FINISH_TIMEOUT,
    KVLM_FINISH_ERROR,      /* the request can never fit the KV pool, or memory ran out */
} kvlm_finish;

typedef struct kvlm_token_event {
    int choice;
    int32_t id;
    float logprob;          /* log-softmax of the model's logits at this step (NaN
                               unless logprobs were asked) */
    const int32_t *top_ids; /* top_n most likely tokens, when logprobs were asked */
    const float *top_logprobs;
    int top_n;
    /* With `text` set in the request: the text this token releases (may be
     * empty: special and eos tokens add none, text that may begin a stop
     * string or a character is held back). Valid during the callback. */
    const char *text;
    size_t text_len;
    /* Entropy in nats of the distribution the log-probabilities come from
     * (softmax of the model's logits at this step), over the whole
     * vocabulary; NaN unless the request set `entropy`. */
    double entropy;
} kvlm_token_event;

typedef struct kvlm_finish_event {
    int choice;
    kvlm_finish reason;
    int n_generated;        /* tokens drawn, the last eos id included */
    /* With `text`: the held-back text the choice ends with (empty after a
     * stop string but for an unfinished character). Valid during the call. */
    const char *text;
    size_t text_len;
    /* Speculative decoding: tokens drafted for the choice and how many of
     * them the target kept (0 without speculation). */
    int n_drafted, n_accepted;
} kvlm_finish_event;

/* Speculative decoding (docs/speculative.md): before a decode step a
 * drafter proposes the next k tokens, the step computes them all (logits
 * for each), and they are verified so that the output follows exactly the
 * distribution of decoding without speculation (greedy: the same tokens);
 * rejected tokens are rolled back from the KV cache. Every sampling
 * setting and a grammar apply (each draft is verified against its row
 * masked at the grammar state the tokens before it reached); the
 * recompute policy is refused. */
typedef enum kvlm_draft_mode {
    KVLM_DRAFT_NONE = 0,
    KVLM_DRAFT_NGRAM,   /* prompt lookup: what followed the latest earlier occurrence
                           of the sequence's last n tokens (its own prompt and output) */
    KVLM_DRAFT_MODEL,   /* the scheduler's draft model (kvlm_sched_set_draft) */
} kvlm_draft_mode;

typedef struct kvlm_speculation {
    kvlm_draft_mode mode;
    int k;              /* tokens drafted per step, 1..16; 0 means 4 */
    int ngram;          /* prompt lookup: longest n-gram matched, 1..8; 0 means 3 */
    /* 0: the adaptive policy decides per choice, from its own measured
     * acceptance and the measured cost of verification steps on this
     * machine and batch, whether drafting pays at each decode step, and
     * drafts only then (docs/speculative.md). 1: draft at every step (for
     * measurements). */
    int fixed;
} kvlm_speculation;

/* mode KVLM_DRAFT_NONE, k 4, ngram 3, fixed 0 (adaptive); zero fields
 * mean the same. */
kvlm_speculation kvlm_speculation_default_params(void);

/* One request. Initialise with kvlm_request_default_params() and set
 * the prompt, max_tokens and what else differs. A zero-initialised struct
 * is still accepted as before, but its `sampling` is then greedy (see
 * kvlm_sampler_default_params). */
typedef struct kvlm_request_params {
    const int32_t *prompt;  /* copied at submission */
    int n_prompt;
    int max_tokens;
    int n_choices;          /* 0 means 1 */
    /* Tokens that end a choice (STOP) when drawn: the model's end-of-sequence
     * ids (kvlm_eos_ids), and e.g. a chat template's end of turn. They are
     * reported to on_token and counted, but add no text. Copied at
     * submission; n_eos 0: none (generation runs to max_tokens). */
    const int32_t *eos_ids;
    int n_eos;
    int logprobs;           /* top log-probabilities per token; -1: only the chosen
                               token's; 0: none */
    double deadline;        /* kvlm_now() value after which it times out; 0: none */
    kvlm_sampler_options sampling; /* choice i uses seed + i */
    /* Text: 1 makes token and finish events carry the generated text, from
     * `tokenizer` (which must outlive the request; NULL: each token as its
     * id and a space). Stop strings (copied) end a choice with STOP; they
     * need text, and are not matched without a tokenizer. */
    int text;
    const kvlm_tokenizer *tokenizer;
    const char *const *stops;
    int n_stops;
    /* Called for each generated token; non-zero ends that choice (STOP). */
    int (*on_token)(void *user, const kvlm_token_event *ev);
    /* Called once per choice when it finishes, after its KV blocks have
     * been returned. */
    void (*on_finish)(void *user, const kvlm_finish_event *ev);
    /* Called once, when the request first leaves the waiting queue (its
     * queue time ends), with the prompt tokens served from the prefix
     * cache. Optional. */
    void (*on_admit)(void *user, int n_cached);
    void *user;
    /* Constrained decoding: NULL unconstrained. Needs `tokenizer` (the
     * bytes of each token). At each step the tokens that cannot continue
     * the grammar get -infinity before the sampler's processors, so every
     * sampling setting still applies and greedy picks the best allowed
     * token; special tokens are never allowed; the eos_ids are allowed
     * exactly when the output is a complete sentence (and are the only
     * choice when nothing can follow it; without eos_ids the choice then
     * ends with STOP). Log-probabilities stay the model's own (of the
     * unmasked logits). Each choice keeps its own matcher (kept across
     * preemption); the grammar must outlive the request. */
    const kvlm_grammar *grammar;
    /* 1: each token event carries the entropy of its step's distribution
     * (a pass over the vocabulary per token). */
    int entropy;
    /* Speculative decoding for every choice; zero: none. */
    kvlm_speculation speculation;
} kvlm_request_params;

/* No prompt, max_tokens 16, n_choices 1, no eos ids, logprobs 0, no
 * deadline, sampling kvlm_sampler_default_params(), no text, stops,
 * callbacks or grammar, entropy 0, speculation
 * kvlm_speculation_default_params(). */
kvlm_request_params kvlm_request_default_params(void);

/* Initialise with kvlm_sched_default_params() (zero fields are the same
 * defaults). */
typedef struct kvlm_sched_options {
    int max_batch_tokens;   /* tokens per step, prefill chunks included (0: 256) */
    int max_waiting;        /* queue bound; beyond it submit fails with KVLM_ERR_BUSY (0: 256) */
    /* 1: keep no KV between steps. Before each step a choice whose context
     * is computed is truncated to 0 tokens (kvlm_kv_seq_truncate) and its
     * whole context, prompt and output, is computed again; the prefix cache
     * is not consulted. The reference for what the cache saves (kvlm run
     * --no-cache); the tokens drawn are the same. */
    int recompute;
    /* Prompt (and recomputation) tokens per step, within max_batch_tokens;
     * 0: no limit of their own. Decoding choices are planned first and do
     * not count against it, so every running stream advances each step
     * while new prompts are fed a few per step (small groups of requests
     * reach their first token sooner than one large prefill step). */
    int max_prefill_tokens;
} kvlm_sched_options;

/* max_batch_tokens 256, max_waiting 256, recompute 0, max_prefill_tokens 0. */
kvlm_sched_options kvlm_sched_default_params(void);

typedef struct kvlm_sched_stats {
    int running, waiting;
    uint64_t steps, preemptions, prompt_tokens, cached_prompt_tokens, generated_tokens;
    uint64_t finished, cancelled, timed_out;
    /* speculative decoding: tokens drafted, drafts kept, and decode items
     * that carried drafts (each one target step of one choice) */
    uint64_t drafted_tokens, accepted_tokens, spec_items;
} kvlm_sched_stats;

kvlm_sched *kvlm_sched_create(kvlm_engine *e, kvlm_kv *kv, int vocab, const kvlm_sched_options *opt,
                              kvlm_error *err);
void kvlm_sched_free(kvlm_sched *s);
/* Queues a request; returns its id (>= 0) or a negative status. */
int64_t kvlm_sched_submit(kvlm_sched *s, const kvlm_request_params *p, kvlm_error *err);
/* Finishes every choice of the request with CANCELLED and frees its
 * blocks (an id that is not queued or running is ignored). */
void kvlm_sched_cancel(kvlm_sched *s, int64_t id);
/* One engine step over the running batch (admitting and preempting as
 * needed). Returns the number of sequences advanced, 0 when idle, or a
 * negative status on an engine error. */
int kvlm_sched_step(kvlm_sched *s, kvlm_error *err);
int kvlm_sched_has_work(const kvlm_sched *s);
void kvlm_sched_get_stats(const kvlm_sched *s, kvlm_sched_stats *st);

/* The scheduler's view of one choice, for live views of what it is doing
 * (kvlm serve's GET /kvlm/engine). */
typedef struct kvlm_sched_choice_info {
    void *user;        /* the request's kvlm_request_params.user */
    int64_t request;   /* kvlm_sched_submit's id */
    int choice;        /* index within the request */
    int running;       /* 1: in the batch; 0: in the waiting queue (new or preempted) */
    int seq;           /* its KV sequence (kvlm_kv_seq_blocks); -1 while waiting */
    int n_prompt;      /* prompt tokens */
    int n_tokens;      /* prompt + generated */
    int n_computed;    /* tokens whose K/V are in the cache */
    int generated;     /* tokens drawn so far */
    int max_tokens;    /* the request's max_tokens */
} kvlm_sched_choice_info;
/* Writes the running choices in batch order, then the waiting ones in
 * queue order, at most cap of them (out may be NULL when cap is 0);
 * returns how many there are in all. The choices an n > 1 request keeps
 * back until its first has computed the prompt (they then fork its
 * blocks) are in neither list. Read-only; call it between steps from the
 * thread that steps the scheduler. */
int kvlm_sched_list_choices(const kvlm_sched *s, kvlm_sched_choice_info *out, int cap);
/* Gives the scheduler a draft model for KVLM_DRAFT_MODEL requests: an
 * engine over its own KV cache (with as many sequences as the target's),
 * both owned by the caller and outliving the scheduler. Its vocabulary
 * (draft_vocab) must be the target's, and it must share the tokenizer.
 * Returns 0, KVLM_ERR_ARG on a vocabulary mismatch. */
int kvlm_sched_set_draft(kvlm_sched *s, kvlm_engine *draft, kvlm_kv *draft_kv, int draft_vocab, kvlm_error *err);

/* The ids that end a generation for this model, as its files give them:
 * config.json's and generation_config.json's eos_token_id (each an id or a
 * list), GGUF's tokenizer.ggml.eos_token_id and eot_token_id, the
 * tokenizer's end-of-text token (tokenizer_config.json's eos_token) and, for
 * a GGUF vocabulary, its eot_token_id and eom_token_id (tok may be NULL). Ids outside the model's vocabulary are left out, each id comes
 * once. Writes at most cap ids; returns how many there are. */
int kvlm_eos_ids(const kvlm_model *m, const kvlm_tokenizer *tok, int32_t *ids, int cap);

/* ---------------------------------------------------------- stop strings */

typedef struct kvlm_stop kvlm_stop;

/* Watches generated text for any of n stop strings (empty strings are
 * ignored). Text that might be the start of a stop string is held back. */
kvlm_stop *kvlm_stop_create(const char *const *stops, int n, kvlm_error *err);
void kvlm_stop_free(kvlm_stop *st);
/* Appends n bytes of generated text. out and out_len receive the bytes now
 * safe to show (valid until the next call). Returns 1 when a stop string
 * has completed: the text before it has been given out, the stop string and
 * anything after it never are. 0 otherwise; KVLM_ERR_NOMEM when memory ran
 * out (nothing given out; the bytes are kept). */
int kvlm_stop_push(kvlm_stop *st, const char *bytes, size_t n, const char **out, size_t *out_len,
                   kvlm_error *err);
/* Gives out the held-back bytes at the end of a generation without a stop.
 * Returns 0 or KVLM_ERR_NOMEM. */
int kvlm_stop_flush(kvlm_stop *st, const char **out, size_t *out_len, kvlm_error *err);

/* -------------------------------------------------------- generated text */

/* Generated token ids as the text a reader sees; the one pipeline behind
 * the scheduler's events, so kvlm run prints what kvlm serve returns. Each
 * token's bytes (kvlm_tokenizer_piece; none for special tokens such as
 * <|endoftext|>; without a tokenizer the id and a space) pass the stop
 * strings (kvlm_stop; ignored without a tokenizer), then the UTF-8
 * assembler, so no piece of text ends inside a character. */
typedef struct kvlm_text_stream kvlm_text_stream;

kvlm_text_stream *kvlm_text_stream_create(const kvlm_tokenizer *tok, const char *const *stops, int n_stops,
                                          kvlm_error *err);
void kvlm_text_stream_free(kvlm_text_stream *ts);
/* Appends one token; *text and *len receive the text it releases (valid
 * until the next call on ts). Returns 1 once a stop string has completed
 * (the generation must end; later tokens add nothing), 0 otherwise,
 * KVLM_ERR_NOMEM when memory ran out. */
int kvlm_text_stream_push(kvlm_text_stream *ts, int32_t id, const char **text, size_t *len, kvlm_error *err);
/* The end of the generation: the text still held back (an unfinished stop
 * string candidate or character). Returns 0 or KVLM_ERR_NOMEM. */
int kvlm_text_stream_finish(kvlm_text_stream *ts, const char **text, size_t *len, kvlm_error *err);

/* ---------------------------------------------------------------- clock */

/* Monotonic clock in seconds. */
double kvlm_now(void);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#include "kvlm_tokenizer.h"

#endif /* KVLM_H */
