/*
 * kv_check_invariants: every structural invariant of the paged KV cache
 * (runtime/kv_layout.h), checked from scratch: reference counts against
 * every slice's block table, the free / LRU / used partition, the prefix
 * index, fill counts, released entries of window slices, pending
 * appends in private unindexed blocks, and pin counts against the pins
 * (runtime/kv_pin.c: kv_pins_check). Reads the cache, never changes it;
 * used by the tests after random operations.
 */
#include <stdlib.h>

#include "error.h"
#include "runtime/kv_layout.h"

/* The table entries of sequence i, slice s: released prefix, fills, private tail. */
static int check_table(const kvlm_kv *kv, int i, int s, int *refs, kvlm_error *err) {
    const kv_seq *q = &kv->seqs[i];
    const int bs = kv->block_size, *t = kv_tab(kv, q, s), W = kv->slice_release[s];
    const int nr = q->n_released[s];
    if (nr < 0 || nr > q->n_blocks || nr * bs > kv_window_start(W, q->len))
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "seq %d slice %d: %d blocks released, but its window (%d) starts "
                              "at %d", i, s, nr, W, kv_window_start(W, q->len));
    if (q->pend_cow[s] >= 0) refs[q->pend_cow[s]]++; /* held until the pending append commits */
    /* Blocks a pending append writes, and blocks past the tokens (a
     * reservation), belong to this sequence alone and are not indexed. */
    const int first_private = q->pend_n ? q->len / bs : (q->len + bs - 1) / bs;
    for (int j = 0; j < q->n_blocks; j++) {
        const int b = t[j];
        if ((b < 0) != (j < nr) || b >= (int)kv->n_blocks)
            return kvlm_error_set(err, KVLM_ERR_FORMAT, "seq %d slice %d table entry %d: block %d (%d released)", i, s,
                                  j, b, nr);
        if (b < 0) continue;
        refs[b]++;
        int need = q->len - j * bs;
        if (need > bs) need = bs;
        if (need > 0 && kv->blk[b].filled < need)
            return kvlm_error_set(err, KVLM_ERR_FORMAT, "seq %d slice %d block %d: filled %d < %d", i, s, b,
                                  kv->blk[b].filled, need);
        if (j >= first_private && (kv->blk[b].refcount != 1 || kv->blk[b].node))
            return kvlm_error_set(err, KVLM_ERR_FORMAT, "seq %d slice %d block %d (table entry %d) is written next but "
                                  "%s", i, s, b, j, kv->blk[b].node ? "indexed" : "shared");
        if (kv->blk[b].node && kv->blk[b].slice != s)
            return kvlm_error_set(err, KVLM_ERR_FORMAT, "seq %d slice %d holds block %d registered for slice %d", i, s,
                                  b, kv->blk[b].slice);
    }
    return KVLM_OK;
}

int kv_check_invariants(const kvlm_kv *kv, kvlm_error *err) {
    const size_t N = kv->n_blocks;
    int *refs = calloc(N, sizeof(int)), *place = calloc(N, sizeof(int)); /* 1 used, 2 lru, 3 free */
    int rc = KVLM_OK;
    if (!refs || !place) { rc = kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory"); goto out; }
    for (int i = 0; i < kv->max_seqs; i++) {
        const kv_seq *q = &kv->seqs[i];
        if (!q->live) continue;
        const int bs = kv->block_size;
        if (q->n_blocks * bs < q->len + q->pend_n || q->n_indexed > q->len / bs ||
            q->n_blocks > kv->max_blocks_per_seq) {
            rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "seq %d: %d blocks, %d indexed for %d tokens + %d pending", i,
                                q->n_blocks, q->n_indexed, q->len, q->pend_n);
            goto out;
        }
        for (int s = 0; s < kv->n_slices; s++)
            if ((rc = check_table(kv, i, s, refs, err))) goto out;
    }
    size_t used = 0;
    for (size_t b = 0; b < N; b++) {
        if (kv->blk[b].filled < 0 || kv->blk[b].filled > kv->block_size) {
            rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "block %zu: filled %d is outside [0, %d]", b, kv->blk[b].filled,
                                kv->block_size);
            goto out;
        }
        if (refs[b] != kv->blk[b].refcount) {
            rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "block %zu: refcount %d but %d table references", b,
                                kv->blk[b].refcount, refs[b]);
            goto out;
        }
        if (refs[b] || kv->blk[b].pins) place[b] = 1, used++;
    }
    size_t lru = 0;
    for (int b = kv->lru_head; b >= 0; b = kv->blk[b].lru_next, lru++) {
        if (place[b] || !kv->blk[b].node || lru > N) {
            rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "block %d: on the LRU list but used, unindexed or listed twice", b);
            goto out;
        }
        place[b] = 2;
    }
    for (size_t i = 0; i < kv->n_free; i++) {
        int b = kv->free_stack[i];
        if (place[b] || kv->blk[b].node) {
            rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "block %d: on the free list but used, cached or indexed", b);
            goto out;
        }
        place[b] = 3;
    }
    if (used != kv->n_used || lru != kv->n_lru || used + lru + kv->n_free != N) {
        rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "block counts: used %zu/%zu lru %zu/%zu free %zu, total %zu", used,
                            kv->n_used, lru, kv->n_lru, kv->n_free, N);
        goto out;
    }
    size_t indexed = 0, chained = 0;
    for (size_t b = 0; b < N; b++) {
        if (!place[b]) {
            rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "block %zu is nowhere (leaked)", b);
            goto out;
        }
        if (kv->blk[b].node && (kv->blk[b].slice < 0 || kv->blk[b].slice >= kv->n_slices ||
                                (kv->blk[b].slice != kv->anchor && !kv->blk[b].parent))) {
            rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "block %zu: indexed for slice %d without an anchor prefix", b,
                                kv->blk[b].slice);
            goto out;
        }
        indexed += kv->blk[b].node != 0;
    }
    for (size_t i = 0; i < kv->n_bucket; i++)
        for (int b = kv->bucket[i]; b >= 0; b = kv->blk[b].next_in_bucket, chained++)
            if (!kv->blk[b].node || kv_bucket_of(kv, kv->blk[b].hash) != i || chained > N) {
                rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "index bucket %zu holds block %d wrongly", i, b);
                goto out;
            }
    if (indexed != chained) rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "%zu blocks indexed, %zu in buckets", indexed, chained);
    else rc = kv_pins_check(kv, err);
out:
    free(refs);
    free(place);
    return rc;
}
