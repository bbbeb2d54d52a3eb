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

#endif
