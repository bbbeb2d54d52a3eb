/*
 * The paged KV cache's operations inside the library. The public half is
 * in kvlm.h: kvlm_kv_create / _free, sequences (kvlm_kv_seq_new, _new_prefixed
 * (the prefix lookup), _fork, _free, _truncate, _len), kvlm_kv_available_blocks,
 * kvlm_kv_blocks_needed, kvlm_kv_get_stats, a sequence's saved KV
 * (runtime/kv_save.c) and pinned prefixes (runtime/kv_pin.c: a pin count on
 * blocks keeps them off the LRU list). This header adds what the
 * engine, the scheduler, the measurements and the tests need on top, as
 * functions: nothing outside runtime/kvcache.c and runtime/attention.c sees
 * the layout (runtime/kv_layout.h).
 *
 * The design: one pool of fixed-size blocks (block_size tokens, K and V of
 * every KV head for the layers of one slice: the layers grouped by their
 * window, each group cut into slices of equal size, so a model with one
 * window has one slice of every layer), a block table per sequence and
 * slice, and reference counts so sequences share blocks. fork shares a parent's blocks; a block is
 * written only while its writer holds the sole reference and it is not in
 * the prefix index, otherwise the append copies it first (copy-on-write).
 * Each full block is registered in the prefix index under hash(parent hash,
 * tokens) with its token ids and its parent's registration number; a lookup
 * accepts a block only if hash, parent and every token id match, so a hash
 * collision never hands out another prefix's KV.
 *
 * Allocation has one policy knob, kvlm_kv_options.reserve_tokens: the
 * blocks a sequence takes at creation and keeps until it is freed. 0 is
 * paging (blocks on demand); n_ctx is the contiguous max-length baseline
 * kvlm bench-kv measures against. Nothing else in the allocator or the
 * forward pass depends on it: reservation is just a minimum block count,
 * and a fork copies into blocks the child already holds and shares the
 * rest. Generation without a cache is not a mode either: truncate the
 * sequence to 0 and step its whole context again (the scheduler's recompute option).
 *
 * Sliding window: in a slice whose layers attend over a window W (and
 * without reserve_tokens or keep_whole), each commit gives back the
 * sequence's reference to every leading block of that slice whose positions
 * all precede len - W + 1, the first key any later query of those layers
 * reads; global slices keep theirs. A block another sequence
 * still holds stays with it; an unshared one goes to the free stack, or,
 * being full and indexed, to the prefix cache's LRU list, where a new
 * sequence with the same prefix can still find it. Released entries read
 * -1 in the block table; truncating into them is refused (0 is fine). The
 * prefix index verifies token ids on one slice's chain (a global one when
 * there is one); the other slices' blocks are found under its
 * registration numbers, so a hit needs of a window slice only the blocks
 * its window reads.
 *
 * Appending is one protocol: kv_append_reserve gives a sequence private,
 * writable slots for its next n positions; the caller writes their K/V
 * (attn_store_kv in runtime/attention.h); kv_append_commit records the n
 * tokens (full blocks enter the prefix index), or kv_append_abort puts the
 * sequence back exactly as it was before the reservation (same length,
 * tokens and block table). At most one append per sequence is pending; while
 * it is, the sequence can be neither forked nor truncated, and freeing it
 * aborts the append.
 */
#ifndef KVLM_KVCACHE_H
#define KVLM_KVCACHE_H

#include "kvlm.h"

/* ------------------------------------------------------------ accessors */

int kv_block_size(const kvlm_kv *kv);
int kv_max_seqs(const kvlm_kv *kv);
int kv_n_ctx(const kvlm_kv *kv);
kvlm_dtype kv_dtype(const kvlm_kv *kv);
size_t kv_n_blocks(const kvlm_kv *kv);
/* Bytes of one head's K (or V) of one token in dtype t: head_dim values of
 * f32 or f16, or head_dim / 32 Q8_0 blocks of 34 bytes (32 int8 and an
 * f16 scale). 0 when t is not a KV dtype or head_dim is not a whole number
 * of its blocks. kvlm_kv_bytes_per_token is 2 x layers x KV heads x this. */
size_t kv_row_bytes(kvlm_dtype t, int head_dim);
/* 1 when the cache was created for a model of this shape (layers, KV
 * heads, head dim, context, the window of every layer). */
int kv_fits_model(const kvlm_kv *kv, const kvlm_model *m);
/* Layer slices (runtime/kv_layout.h): the block tables each sequence has. */
int kv_n_slices(const kvlm_kv *kv);
/* Blocks a sequence of len tokens holds: between steps (chunk 0; what
 * kvlm_kv_seq_bytes counts), or at the most while it grows to len by
 * appends of at most chunk tokens (a window slice takes an append's blocks
 * before it gives back what the window left): what admission counts. */
size_t kv_blocks_for(const kvlm_kv *kv, int len, int chunk);
/* Fills info's slice fields (n_slices, slice_layers, block_bytes,
 * bytes_per_token, keep_whole). */
void kv_slice_info(const kvlm_kv *kv, kvlm_kv_info *info);
/* Blocks every new sequence takes when it is created and keeps until it is
 * freed (kvlm_kv_options.reserve_tokens; 0 when blocks are taken on
 * demand). */
size_t kv_new_seq_blocks(const kvlm_kv *kv);
/* 1 when seq names a live sequence. */
int kv_seq_valid(const kvlm_kv *kv, int seq);
/* The token ids of seq's kvlm_kv_seq_len positions (valid until it changes). */
const int32_t *kv_seq_tokens(const kvlm_kv *kv, int seq);
/* seq's block table of slice 0: *table receives its blocks in position
 * order; returns how many (enough for its length and any pending append).
 * Entries a sliding window released are -1. kv_seq_slice_blocks: the same
 * for any slice (NULL and 0 for a slice out of range). */
int kv_seq_blocks(const kvlm_kv *kv, int seq, const int **table);
int kv_seq_slice_blocks(const kvlm_kv *kv, int seq, int slice, const int **table);
/* The state of every block of the pool (kvlm_kv_stats.blocks_total
 * entries each): refs receives its reference count (sequences holding it),
 * cached 1 for a block held by no sequence but kept by the prefix cache
 * (evictable), else 0. A read-only look for live views of the pool. */
void kv_block_states(const kvlm_kv *kv, int *refs, unsigned char *cached);

/* ------------------------------------------------------------ appending */

/* Reserves positions [len, len + n) of a live sequence without a pending
 * append: every block they fall in is private and unindexed afterwards
 * (a shared or indexed tail block is copied, new blocks are taken). Fails
 * with KVLM_ERR_NOMEM when the pool is exhausted, KVLM_ERR_ARG when n < 1,
 * the context window would be passed or an append is pending; on failure
 * the sequence is as it was. */
int kv_append_reserve(kvlm_kv *kv, int seq, int n, kvlm_error *err);
/* Positions reserved by a pending append of seq (0: none). */
int kv_append_pending(const kvlm_kv *kv, int seq);
/* Records the pending append's n tokens (their K/V have been written):
 * tokens holds n ids. Full blocks enter the prefix index. */
void kv_append_commit(kvlm_kv *kv, int seq, const int32_t *tokens);
/* Gives back what kv_append_reserve took: the sequence is exactly as before
 * the reservation. No-op without a pending append. */
void kv_append_abort(kvlm_kv *kv, int seq);

/* ------------------------------------------------------------ checks and tests */

/* Checks every structural invariant (reference counts against block
 * tables, free/LRU/used partition, index consistency, fill counts, pending
 * appends in private unindexed blocks, blocks past a sequence's tokens
 * private). Returns 0 or KVLM_ERR_FORMAT with err describing the first
 * violation. */
int kv_check_invariants(const kvlm_kv *kv, kvlm_error *err);

/* Hash of one full block for the prefix index: chained over the parent
 * block's hash (0 for the first block) and the block's token ids. */
typedef uint64_t (*kv_block_hash_fn)(uint64_t parent, const int32_t *tokens, int n);
/* Replaces the prefix index's hash (default XXH3-64; tests inject colliding
 * ones). Only before any block is registered: KVLM_ERR_ARG afterwards. */
int kv_set_block_hash(kvlm_kv *kv, kv_block_hash_fn fn, kvlm_error *err);

#endif
