/*
 * A KV cache's layer types and what they cost: the layers grouped by the
 * window they attend over, the bytes per token of each group, and the
 * bytes one sequence of a given length holds in whole blocks (window types
 * that release count only their last window's blocks). Admission, the
 * capacity figures of kvlm kv and --stats read these; nothing here
 * changes the cache.
 */
#include <string.h>

#include "runtime/kv_layout.h"

void kv_slice_info(const kvlm_kv *kv, kvlm_kv_info *info) {
    info->n_slices = kv->n_slices;
    info->slice_layers = kv->slice_layers;
    info->block_bytes = kv->block_bytes;
    info->bytes_per_token = kv->bytes_per_token;
    info->keep_whole = kv->keep_whole;
}

int kvlm_kv_layer_types(const kvlm_kv *kv, kvlm_kv_layer_type *out, int cap) {
    int n = 0, last = -1;
    for (;;) { /* windows in increasing order, 0 (global) first */
        int w = -1;
        for (int l = 0; l < kv->n_layer; l++)
            if (kv->layer_window[l] > last && (w < 0 || kv->layer_window[l] < w)) w = kv->layer_window[l];
        if (w < 0) return n;
        if (n < cap) {
            kvlm_kv_layer_type *t = &out[n];
            memset(t, 0, sizeof *t);
            t->window = w;
            for (int l = 0; l < kv->n_layer; l++) t->n_layers += kv->layer_window[l] == w;
            t->bytes_per_token = kv->bytes_per_token / (size_t)kv->n_layer * (size_t)t->n_layers;
            for (int s = 0; s < kv->n_slices; s++) t->releases |= kv->slice_window[s] == w && kv->slice_release[s] > 0;
        }
        n++;
        last = w;
    }
}

/* Blocks slice s of a sequence of len tokens holds: between steps (chunk
 * 0), or at most while it grew to len by appends of up to chunk tokens
 * (each append's blocks are all taken before the window gives any back:
 * at most ceil((W - 1 + chunk) / block_size) + 1 for a window W). */
static size_t slice_blocks(const kvlm_kv *kv, int s, int len, int chunk) {
    const int bs = kv->block_size, W = kv->slice_release[s];
    int rows = (len + bs - 1) / bs;
    if (rows < kv->reserve_blocks) rows = kv->reserve_blocks;
    if (!W) return (size_t)rows;
    if (!chunk) return (size_t)(rows - kv_window_start(W, len) / bs);
    const int peak = (W - 1 + chunk + bs - 1) / bs + 1;
    return (size_t)(peak < rows ? peak : rows);
}

size_t kv_blocks_for(const kvlm_kv *kv, int len, int chunk) {
    if (len <= 0) return 0;
    if (len > kv->n_ctx) len = kv->n_ctx;
    size_t blocks = 0;
    for (int s = 0; s < kv->n_slices; s++) blocks += slice_blocks(kv, s, len, chunk < 0 ? 0 : chunk);
    return blocks;
}

size_t kvlm_kv_seq_bytes(const kvlm_kv *kv, int len) { return kv_blocks_for(kv, len, 0) * kv->block_bytes; }
