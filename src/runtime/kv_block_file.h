/*
 * The on-disk form of one spilled KV block position (all layer slices of
 * block_size tokens of one prefix), one file each:
 *
 *   offset size
 *   0      8    magic "KVLMBLK\0"
 *   8      4    format version (KV_BLOCK_FILE_VERSION)
 *   12     4    header bytes (KV_BLOCK_HEADER_BYTES)
 *   16     16   kv_fingerprint of the cache (kv_fingerprint_for_cache)
 *   32     8    chain hash of the block (the prefix index's, over all
 *               tokens of the prefix through this block)
 *   40     8    the parent block's chain hash (0: first block)
 *   48     4    block_size (tokens)
 *   52     4    n_slices
 *   56     8    bytes of one slice's block
 *   64     8    payload bytes (n_slices x slice block bytes)
 *   72     8    XXH3-64 of the whole file with this field read as 0
 *   80     block_size x int32 token ids, then the payload: slice 0's
 *               block, slice 1's, ... in the pool's layout
 * All integers little-endian. KV_BLOCK_HEADER_BYTES + 4 x block_size is
 * what a file costs beyond the KV bytes it holds.
 *
 * kv_block_file_check validates a whole file's bytes against what the
 * reader expects and says what is wrong; it never trusts a length field
 * before comparing it with the bytes it has. Pure functions: no I/O.
 */
#ifndef KVLM_KV_BLOCK_FILE_H
#define KVLM_KV_BLOCK_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/kv_fingerprint.h"

#define KV_BLOCK_FILE_VERSION 1
#define KV_BLOCK_HEADER_BYTES 80

typedef struct kv_block_file_head {
    kv_fingerprint fp;
    uint64_t hash, parent;
    int block_size, n_slices;
    uint64_t slice_bytes, payload_bytes;
} kv_block_file_head;

typedef enum kv_block_file_status {
    KV_BLOCK_FILE_OK = 0,
    KV_BLOCK_FILE_TRUNCATED = 1,  /* shorter (or longer) than its header says */
    KV_BLOCK_FILE_CORRUPT = 2,    /* bad magic or checksum */
    KV_BLOCK_FILE_VERSION_ = 3,   /* another format version */
    KV_BLOCK_FILE_FOREIGN = 4,    /* another fingerprint or layout */
    KV_BLOCK_FILE_MISMATCH = 5,   /* another block: chain hash or token ids differ */
} kv_block_file_status;

/* Bytes of a file for head (header, tokens, payload); 0 if it overflows. */
size_t kv_block_file_size(const kv_block_file_head *h);
/* Writes the file for head, tokens (block_size ids) and payload
 * (payload_bytes) into out (kv_block_file_size bytes), checksum included. */
void kv_block_file_encode(const kv_block_file_head *h, const int32_t *tokens, const void *payload, unsigned char *out);
/* Writes the header (checksum field 0) and the token ids into out, and
 * returns where the payload_bytes of payload go; kv_block_file_stamp over
 * the whole file then completes it (the disk tier's writer thread does,
 * so the engine thread only copies). */
unsigned char *kv_block_file_encode_head(const kv_block_file_head *h, const int32_t *tokens, unsigned char *out);
/* Writes the checksum of n >= KV_BLOCK_HEADER_BYTES bytes at buf into
 * its field (the fuzz target stamps inputs so the checks past it run). */
void kv_block_file_stamp(unsigned char *buf, size_t n);
/* Checks n bytes at buf against want (fingerprint, layout, chain hash)
 * and, when tokens is not NULL, the block's token ids. On
 * KV_BLOCK_FILE_OK, *payload points at the payload inside buf. */
kv_block_file_status kv_block_file_check(const unsigned char *buf, size_t n, const kv_block_file_head *want,
                                         const int32_t *tokens, const unsigned char **payload);
/* A short name of a status ("truncated", "corrupt", ...). */
const char *kv_block_file_status_name(kv_block_file_status s);

#endif
