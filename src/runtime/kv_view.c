/*
 * The public read-only look at a KV cache beyond its statistics (kvlm.h):
 * its fixed shape, the state of every block and a sequence's block table,
 * for live pictures of the pool, its layer types and what one sequence
 * of a given length holds; and the one rule for which dtypes a KV cache
 * stores. Built on the accessors of kvcache.h; the layout stays
 * private to kvcache.c and attention.c. Nothing here changes the cache.
 */
#include <string.h>

#include "error.h"
#include "runtime/kvcache.h"

int kvlm_kv_dtype_supported(kvlm_dtype t) { return t == KVLM_F32 || t == KVLM_F16 || t == KVLM_Q8_0; }

int kvlm_kv_dtype_parse(const char *s, kvlm_dtype *out, kvlm_error *err) {
    kvlm_dtype t;
    if (s && !kvlm_dtype_parse(s, &t, NULL) && kvlm_kv_dtype_supported(t)) {
        *out = t;
        return KVLM_OK;
    }
    return kvlm_error_set(err, KVLM_ERR_ARG, "'%s' is not a KV cache dtype (f32, f16 or q8_0)", s ? s : "(null)");
}

void kvlm_kv_get_info(const kvlm_kv *kv, kvlm_kv_info *info) {
    memset(info, 0, sizeof *info);
    info->dtype = kv_dtype(kv);
    info->block_size = kv_block_size(kv);
    info->max_seqs = kv_max_seqs(kv);
    info->n_ctx = kv_n_ctx(kv);
    info->n_blocks = kv_n_blocks(kv);
    kv_slice_info(kv, info);
    info->n_layer_types = kvlm_kv_layer_types(kv, NULL, 0);
}

int kvlm_kv_block_states(const kvlm_kv *kv, int *refs, unsigned char *cached, size_t cap, kvlm_error *err) {
    const size_t n = kv_n_blocks(kv);
    if (cap < n || (n && (!refs || !cached)))
        return kvlm_error_set(err, KVLM_ERR_ARG, "kvlm_kv_block_states: room for %zu blocks; the pool has %zu", cap, n);
    kv_block_states(kv, refs, cached);
    return KVLM_OK;
}

int kvlm_kv_seq_blocks(const kvlm_kv *kv, int seq, const int **table, kvlm_error *err) {
    *table = NULL;
    if (!kv_seq_valid(kv, seq)) return kvlm_error_set(err, KVLM_ERR_ARG, "kvlm_kv_seq_blocks: no sequence %d", seq);
    return kv_seq_blocks(kv, seq, table);
}

int kvlm_kv_seq_slice_blocks(const kvlm_kv *kv, int seq, int slice, const int **table, kvlm_error *err) {
    *table = NULL;
    if (!kv_seq_valid(kv, seq)) return kvlm_error_set(err, KVLM_ERR_ARG, "kvlm_kv_seq_slice_blocks: no sequence %d", seq);
    if (slice < 0 || slice >= kv_n_slices(kv))
        return kvlm_error_set(err, KVLM_ERR_ARG, "kvlm_kv_seq_slice_blocks: slice %d of %d", slice, kv_n_slices(kv));
    return kv_seq_slice_blocks(kv, seq, slice, table);
}
