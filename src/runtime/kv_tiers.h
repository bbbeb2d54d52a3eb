/*
 * The tiers below the KV pool: host memory and a directory on disk, both
 * holding whole block positions (every layer slice of block_size tokens of
 * one prefix) under the prefix index's chain hash, with the block's token
 * ids (checked on every fetch) and, on disk, the cache's fingerprint
 * (runtime/kv_block_file.h). The pool's side of it (what is spilled when,
 * where restored blocks go) is runtime/kv_tier_hooks.c.
 *
 * Memory: an LRU of copies, bounded in bytes; filled by blocks the pool
 * evicts, emptied by fetches (a fetched block returns to the pool) and by
 * its bound. Disk: one file per block position,
 *   DIR/<first 8 bytes of the fingerprint, hex>-<chain hash, hex>.kvb
 * checksummed and written by one writer thread from a bounded queue (a
 * full queue drops the write and counts it; the engine thread only
 * copies the block and never waits for the disk): written
 * to DIR/.tmp-<pid>-<n>, then renamed, without fsync (a crash of the
 * process leaves a tmp file or nothing; a power loss can leave a torn
 * file, which the checksum rejects). The first failed write (ENOSPC,
 * EFBIG, EIO ...) logs one line to stderr and stops the tier's writes;
 * reads go on. Creation scans DIR: this cache's files enter the LRU in
 * mtime order (a hit refreshes the mtime), the bound is enforced, and tmp
 * files of processes no longer running are removed. A file that fails its
 * check is counted, removed and treated as a miss. A reader thread reads
 * files ahead of their lookup (kv_tiers_prefetch) into a bounded staging
 * list the fetch looks at before reading the file itself.
 *
 * All functions but the writer thread's run on the thread that owns the
 * cache; the disk map and counters are shared with the writer under one
 * mutex.
 */
#ifndef KVLM_KV_TIERS_H
#define KVLM_KV_TIERS_H

#include "kvlm.h"
#include "runtime/kv_block_file.h"

typedef struct kv_tiers kv_tiers;

/* layout: fingerprint, block_size, n_slices, slice_bytes (hash, parent
 * unused). NULL with err set when dir cannot be created or read, or
 * memory fails. */
kv_tiers *kv_tiers_create(const kv_block_file_head *layout, size_t ram_bytes, const char *dir, size_t disk_bytes,
                          kvlm_error *err);
/* Waits for queued writes, stops the writer, frees everything. */
void kv_tiers_free(kv_tiers *t);

/* Keeps a copy of a block position evicted from the pool (slices[s]:
 * slice s's block, slice_bytes each) in memory. Returns 1 when kept. */
int kv_tiers_spill(kv_tiers *t, uint64_t hash, uint64_t parent, const int32_t *tokens,
                   const unsigned char *const *slices);
/* Queues a disk write of a block position unless its file is known to
 * exist: the calling thread copies header, ids and slices into one
 * buffer; the writer thread checksums and writes it. */
void kv_tiers_write(kv_tiers *t, uint64_t hash, uint64_t parent, const int32_t *tokens,
                    const unsigned char *const *slices);
/* Copies the block position (hash, parent, tokens) into dst[s] from
 * memory (returns 1) or disk (2); 0 when neither holds it (a bad file is
 * removed and counted). */
int kv_tiers_fetch(kv_tiers *t, uint64_t hash, uint64_t parent, const int32_t *tokens, unsigned char *const *dst);
/* Asks the reader thread to read the file of a block position ahead of
 * its lookup, check it, and keep it (at most 128 MiB of such blocks,
 * oldest dropped first) for kv_tiers_fetch. No-op without a disk tier or
 * when memory holds it; a full request queue (1024) drops the request. */
void kv_tiers_prefetch(kv_tiers *t, uint64_t hash, uint64_t parent, const int32_t *tokens);
/* Adds the tier counters to st. */
void kv_tiers_stats(kv_tiers *t, kvlm_kv_stats *st);
/* Blocks until the writer's queue and the reader's requests are done
 * (tests). */
void kv_tiers_flush(kv_tiers *t);
/* The tiers of a cache (NULL without any; runtime/kv_tier_hooks.c). */
kv_tiers *kv_tiers_of(kvlm_kv *kv);
/* The disk tier's directory (NULL without one), the cache's fingerprint
 * and its first 16 hex digits (what file names open with). */
const char *kv_tiers_dir(const kv_tiers *t);
const kv_fingerprint *kv_tiers_fingerprint(const kv_tiers *t);
const char *kv_tiers_prefix(const kv_tiers *t);
/* Counts a bad file found outside the block files (the pin record). */
void kv_tiers_count_bad(kv_tiers *t);
/* Tests: the writer fails every write after the next n (-1: never). */
void kv_tiers_fail_writes_after(kv_tiers *t, int n);

#endif
