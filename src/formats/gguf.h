/*
 * GGUF reader (versions 2 and 3; little-endian): the file is memory-mapped,
 * its tensors become views in a tensor_set and its typed metadata becomes a
 * gguf_meta the model binder queries by key. Nothing is copied but the
 * keys, scalar strings and an index of string arrays.
 *
 * Layout: "GGUF", u32 version, u64 tensor_count, u64 metadata_kv_count;
 * metadata_kv_count x (string key, u32 value type, value); tensor_count x
 * (string name, u32 n_dims, u64 ne[n_dims], u32 ggml type, u64 offset);
 * padding to general.alignment (default 32); the tensor data, each offset
 * relative to its start and a multiple of the alignment. Strings are a u64
 * byte length and the bytes (no NUL). Arrays are a u32 element type, a u64
 * count and the elements.
 *
 * Everything is validated before use, and each error names the file and
 * the field: magic, version, both counts against the bytes they need,
 * every string length against the bytes left, value and element types
 * (nested arrays refused), bool bytes (0 or 1), duplicate keys and tensor
 * names, n_dims (1..4), every ne[i] > 0 with no overflow of the element
 * count or byte size, tensor types (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0,
 * Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4; any other is
 * KVLM_ERR_UNSUPPORTED naming the tensor and the type), row lengths that
 * are whole blocks (32 values, 256 for the K-quants and IQ4_XS),
 * general.alignment (an integer power of two), offsets aligned, data
 * inside the file, tensors not overlapping, and every MXFP4 block's scale
 * byte below 0xFF (E8M0's NaN; this reads one byte of each block).
 *
 * Shapes: GGUF lists ne[0] first, the contiguous dimension; the tensor_set
 * view has it last (row-major, like every other kvlm format), so a matrix
 * with ne = [in, out] is the view [out, in] and the set's layout is
 * LAYOUT_OUT_IN.
 *
 * Metadata keys kvlm's converter (tools/write_gguf.py) writes and the
 * binder reads ({arch} is general.architecture):
 *
 *   general.architecture              string  "llama", "qwen2" or "gpt2"
 *   general.name                      string  (informational)
 *   general.alignment                 u32     data alignment (default 32)
 *   general.file_type                 u32     llama.cpp file type of the bulk of the weights
 *   general.quantization_version      u32     2 (present when quantised)
 *   {arch}.context_length             u32     n_ctx
 *   {arch}.embedding_length           u32     n_embd
 *   {arch}.block_count                u32     n_layer
 *   {arch}.feed_forward_length        u32     n_ff
 *   {arch}.attention.head_count       u32     n_head
 *   {arch}.attention.head_count_kv    u32     n_kv_head (absent: = head_count)
 *   {arch}.attention.key_length       u32     head_dim (absent: n_embd / n_head)
 *   {arch}.attention.layer_norm_rms_epsilon f32   RMSNorm eps (llama, qwen2)
 *   {arch}.attention.layer_norm_epsilon     f32   LayerNorm eps (gpt2)
 *   {arch}.rope.freq_base             f32     rope_theta (absent: 10000)
 *   {arch}.rope.dimension_count       u32     rotary dims (= head_dim)
 *   {arch}.vocab_size                 u32     rows of token_embd
 *   tokenizer.ggml.model              string  "gpt2" (byte-level BPE) or "llama" (SentencePiece)
 *   tokenizer.ggml.pre                string  pre-tokeniser name ("gpt2", "llama-bpe", "qwen2")
 *   tokenizer.ggml.tokens             array of string
 *   tokenizer.ggml.scores             array of f32     (llama)
 *   tokenizer.ggml.token_type         array of i32     (1 normal, 2 unknown, 3 control, 4 user-defined, 6 byte)
 *   tokenizer.ggml.merges             array of string  ("a b", gpt2)
 *   tokenizer.ggml.bos_token_id / eos_token_id / unknown_token_id / padding_token_id  u32
 *   tokenizer.ggml.add_bos_token / add_eos_token  bool
 *
 * Rotary layout: for general.architecture "llama" the rows of attn_q and
 * attn_k (and their biases) are permuted so that rotary pairs are adjacent
 * (2i, 2i + 1) within each head (interleaved); for "qwen2" they are in
 * Hugging Face order and pairs are (i, i + head_dim / 2). Llama 3 rope
 * scaling is a tensor rope_freqs.weight [head_dim / 2] (F32): frequency i
 * is divided by rope_freqs[i].
 *
 * Tensor names (N = layer): token_embd, output_norm, output (absent: tied
 * to token_embd); blk.N.attn_norm, attn_q, attn_k, attn_v, attn_output,
 * ffn_norm, ffn_gate, ffn_up, ffn_down (".weight"; qwen2 also
 * attn_q/k/v.bias). gpt2: token_embd, position_embd, output_norm(.bias),
 * blk.N.attn_norm(.bias), attn_qkv(.bias), attn_output(.bias),
 * ffn_norm(.bias), ffn_up(.bias), ffn_down(.bias).
 */
#ifndef KVLM_GGUF_H
#define KVLM_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "formats/tensor_set.h"

typedef enum gguf_type {
    GGUF_TYPE_U8 = 0,
    GGUF_TYPE_I8 = 1,
    GGUF_TYPE_U16 = 2,
    GGUF_TYPE_I16 = 3,
    GGUF_TYPE_U32 = 4,
    GGUF_TYPE_I32 = 5,
    GGUF_TYPE_F32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_U64 = 10,
    GGUF_TYPE_I64 = 11,
    GGUF_TYPE_F64 = 12,
    GGUF_TYPE_COUNT
} gguf_type;

/* Tensor types in the file (ggml's numbering) that kvlm reads. */
enum {
    GGML_TYPE_F32 = 0,
    GGML_TYPE_F16 = 1,
    GGML_TYPE_Q4_0 = 2,
    GGML_TYPE_Q4_1 = 3,
    GGML_TYPE_Q5_0 = 6,
    GGML_TYPE_Q5_1 = 7,
    GGML_TYPE_Q8_0 = 8,
    GGML_TYPE_Q2_K = 10,
    GGML_TYPE_Q3_K = 11,
    GGML_TYPE_Q4_K = 12,
    GGML_TYPE_Q5_K = 13,
    GGML_TYPE_Q6_K = 14,
    GGML_TYPE_IQ4_NL = 20,
    GGML_TYPE_IQ4_XS = 23,
    GGML_TYPE_BF16 = 30,
    GGML_TYPE_MXFP4 = 39
};

/* A string in the mapping: len bytes at s, not NUL-terminated. */
typedef struct gguf_str {
    const char *s;
    size_t len;
} gguf_str;

/* One metadata entry. A scalar is an "array" of one (n == 1, type ==
 * elem). Values stay in the mapping: `data` points at the first value
 * (little-endian, possibly unaligned; read them with the accessors). */
typedef struct gguf_kv {
    char *key;                  /* NUL-terminated copy */
    gguf_type type;             /* GGUF_TYPE_ARRAY for arrays, else == elem */
    gguf_type elem;             /* type of each value */
    uint64_t n;                 /* number of values */
    const unsigned char *data;  /* first value */
    char *str;                  /* scalar strings: NUL-terminated copy (embedded NULs cut it short) */
    gguf_str *strs;             /* string values (scalar or array): n views into the mapping */
} gguf_kv;

typedef struct gguf_meta {
    char *path;
    uint32_t version;
    uint32_t alignment;         /* general.alignment or 32 */
    uint64_t data_offset;       /* file offset of the tensor data section */
    uint64_t n_tensors;
    gguf_kv *kv;                /* sorted by key */
    size_t n_kv;
} gguf_meta;

/* Maps path, adds its tensors to ts (layout set to LAYOUT_OUT_IN) and fills
 * meta. meta's views live in ts's mapping: free meta before or with ts. On
 * failure meta is left empty (safe to free) and ts may hold the mapping. */
int gguf_load(tensor_set *ts, gguf_meta *meta, const char *path, kvlm_error *err);
void gguf_meta_free(gguf_meta *meta);

/* The entry for key, or NULL. */
const gguf_kv *gguf_meta_find(const gguf_meta *m, const char *key);
/* "u32", "array of string", ... for messages. */
const char *gguf_type_name(gguf_type t);
/* The ggml tensor type's name ("Q4_K"), or NULL if unknown. */
const char *gguf_ggml_type_name(uint32_t t);

/* Typed getters. Absent key: KVLM_ERR_FORMAT naming the file and key,
 * unless the _or form supplies a default. Wrong type or value out of
 * range: KVLM_ERR_FORMAT naming the file, key and the type found. */
/* Any integer type (bool excluded), value within [lo, hi]. */
int gguf_get_int(const gguf_meta *m, const char *key, int64_t lo, int64_t hi, int64_t *out, kvlm_error *err);
int gguf_get_int_or(const gguf_meta *m, const char *key, int64_t lo, int64_t hi, int64_t def, int64_t *out,
                    kvlm_error *err);
/* f32 or f64 (integers are accepted and converted). */
int gguf_get_float(const gguf_meta *m, const char *key, double *out, kvlm_error *err);
int gguf_get_float_or(const gguf_meta *m, const char *key, double def, double *out, kvlm_error *err);
int gguf_get_bool_or(const gguf_meta *m, const char *key, int def, int *out, kvlm_error *err);
/* NUL-terminated (valid as long as meta). */
int gguf_get_string(const gguf_meta *m, const char *key, const char **out, kvlm_error *err);
/* An array whose elements have type elem (GGUF_TYPE_COUNT: any). */
int gguf_get_array(const gguf_meta *m, const char *key, gguf_type elem, const gguf_kv **out, kvlm_error *err);

/* Element i (< kv->n) of an array or scalar, converted. The caller has
 * checked the element type class: integers (and bool) for _int, numbers
 * for _float, strings for _str. */
int64_t gguf_kv_int(const gguf_kv *kv, uint64_t i);
double gguf_kv_float(const gguf_kv *kv, uint64_t i);
gguf_str gguf_kv_str(const gguf_kv *kv, uint64_t i);
/* 1 for the integer value types (u8..i64, not bool), 0 otherwise. */
int gguf_type_is_int(gguf_type t);

#endif
