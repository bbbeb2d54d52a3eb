/*
 * llm.c GPT-2 checkpoint reader (gpt2_124M.bin and friends): a header of
 * 256 little-endian int32 (magic 20240326, version 3 = fp32 or 5 = bf16,
 * max positions, vocabulary, layers, heads, channels, padded vocabulary),
 * then every parameter tensor back to back in a fixed order, matrices in
 * [out, in] layout. The reader checks the header and that the file holds
 * exactly the bytes the header implies, then exposes per-layer views under
 * the Hugging Face GPT-2 names.
 */
#ifndef KVLM_LLMC_H
#define KVLM_LLMC_H

#include "formats/tensor_set.h"

#define LLMC_MAGIC 20240326

typedef struct llmc_header {
    int version, max_t, vocab, n_layer, n_head, channels, padded_vocab;
} llmc_header;

/* 1 if the file starts with the llm.c magic number. */
int llmc_sniff(const unsigned char *data, size_t size);
int llmc_load(tensor_set *ts, const char *path, llmc_header *hdr, kvlm_error *err);
/* Checks the header at d (size bytes available; path names it in errors). */
int llmc_parse_header(const char *path, const unsigned char *d, size_t size, llmc_header *h, kvlm_error *err);
/* Reads and checks only the header of path; the weights are not touched. */
int llmc_read_header(const char *path, llmc_header *h, kvlm_error *err);
/* The GPT-2 configuration a checked header describes (weight_dtype from the
 * version: 3 = f32, 5 = bf16). */
void llmc_header_config(const llmc_header *h, kvlm_config *c);

#endif
