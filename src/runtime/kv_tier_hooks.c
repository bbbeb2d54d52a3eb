/*
 * The pool's side of the memory and disk tiers (runtime/kv_tiers.h):
 * - eviction: an anchor block leaving the pool's LRU goes to the memory
 *   tier together with every other slice's block of the same positions
 *   (found under its registration number). When a window slice has no
 *   block there any more (released by the window and already evicted),
 *   the position is not spilled (counted as refused): a restored position
 *   always carries every slice.
 * - indexing: a block position newly entering the prefix index is queued
 *   for the disk (write-through, so a restart finds what the pool held);
 * - lookup: past the pool's hits, positions are fetched from memory, then
 *   disk, into fresh blocks of every slice, verified by chain hash,
 *   parent's hash and the block's token ids (and the fingerprint on disk),
 *   stopping at the first miss; kvcache.c then indexes them again.
 * - kvlm_kv_prefetch: the positions past the pool's hits, handed to the
 *   disk tier's reader thread;
 * - restore latency: each restoring lookup's time in a histogram under the
 *   lowest tier it read.
 */
#include <time.h>

#include "runtime/kv_layout.h"
#include "runtime/kv_tiers.h"

#define MAX_SLICES 512

void kv_tier_on_evict(kvlm_kv *kv, int b) {
    const kv_block *k = &kv->blk[b];
    if (k->slice != kv->anchor || !k->node || kv->n_slices > MAX_SLICES) return;
    const unsigned char *sl[MAX_SLICES];
    for (int s = 0; s < kv->n_slices; s++) {
        const int bb = s == kv->anchor ? b : kv_index_find_slice(kv, k->node, s);
        if (bb < 0) {
            kv->counters.tier_spill_refused++;
            return;
        }
        sl[s] = kv->pool + (size_t)bb * kv->block_bytes;
    }
    kv_tiers_spill(kv->tiers, k->hash, k->phash, kv->blk_tokens + (size_t)b * kv->block_size, sl);
}

void kv_tier_on_index(kvlm_kv *kv, const kv_seq *q, int j, uint64_t h, uint64_t ph) {
    if (kv->n_slices > MAX_SLICES) return;
    const unsigned char *sl[MAX_SLICES];
    for (int s = 0; s < kv->n_slices; s++) {
        const int b = kv_tab(kv, q, s)[j];
        if (b < 0) return;
        sl[s] = kv->pool + (size_t)b * kv->block_bytes;
    }
    kv_tiers_write(kv->tiers, h, ph, q->tokens + (size_t)j * kv->block_size, sl);
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static const double BOUNDS[KVLM_KV_RESTORE_BUCKETS - 1] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                           0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5};

double kvlm_kv_restore_bucket_bound(int i) {
    return i >= 0 && i < KVLM_KV_RESTORE_BUCKETS - 1 ? BOUNDS[i] : 1.0 / 0.0;
}

int kv_tier_restore(kvlm_kv *kv, kv_seq *q, const int32_t *prompt, int J, int max_blocks) {
    if (J >= max_blocks || kv->n_slices > MAX_SLICES) return J;
    const uint64_t t0 = now_ns();
    const int bs = kv->block_size, first = J;
    uint64_t ph = J ? q->bhash[J - 1] : 0;
    int blocks[MAX_SLICES], disk = 0;
    unsigned char *dst[MAX_SLICES];
    for (; J < max_blocks; J++) {
        const int32_t *toks = prompt + (size_t)J * bs;
        const uint64_t h = kv->hash(ph, toks, bs);
        int got = 0, ok = 1;
        for (; got < kv->n_slices && ok; got++) {
            blocks[got] = kv_alloc_block(kv);
            if (blocks[got] < 0) ok = 0;
            else dst[got] = kv->pool + (size_t)blocks[got] * kv->block_bytes;
        }
        if (!ok) got--;
        if (ok) {
            const int tier = kv_tiers_fetch(kv->tiers, h, ph, toks, dst);
            ok = tier > 0;
            disk |= tier == 2;
        }
        if (!ok) {
            while (got-- > 0) kv_unref_block(kv, blocks[got]);
            break;
        }
        for (int s = 0; s < kv->n_slices; s++) {
            kv_tab(kv, q, s)[J] = blocks[s];
            kv->blk[blocks[s]].filled = bs;
        }
        q->n_blocks = J + 1;
        ph = h;
    }
    if (J > first) {
        const uint64_t ns = now_ns() - t0;
        int b = 0;
        while (b < KVLM_KV_RESTORE_BUCKETS - 1 && (double)ns * 1e-9 > BOUNDS[b]) b++;
        kv->counters.tier_restores++;
        kv->counters.tier_restore_ns += ns;
        kv->counters.tier_restore_buckets[disk][b]++;
        kv->counters.tier_restore_ns_by[disk] += ns;
    }
    return J;
}

void kvlm_kv_prefetch(kvlm_kv *kv, const int32_t *prompt, int n) {
    if (!kv || !kv->tiers || !prompt || n < 2 || n > kv->n_ctx) return;
    const int bs = kv->block_size, max_blocks = (n - 1) / bs;
    uint64_t h = 0, node = 0;
    int j = 0;
    for (; j < max_blocks; j++) { /* the pool's part needs no reading */
        const uint64_t hj = kv->hash(h, prompt + (size_t)j * bs, bs);
        const int b = kv_index_find(kv, hj, node, prompt + (size_t)j * bs);
        if (b < 0) break;
        h = hj, node = kv->blk[b].node;
    }
    for (; j < max_blocks; j++) {
        const uint64_t hj = kv->hash(h, prompt + (size_t)j * bs, bs);
        kv_tiers_prefetch(kv->tiers, hj, h, prompt + (size_t)j * bs);
        h = hj;
    }
}

kv_tiers *kv_tiers_of(kvlm_kv *kv) { return kv ? kv->tiers : NULL; }
