/*
 * Tiled attention kernels (flash-attention style online softmax) for
 * prefill: a tile of query rows against one chunk of at most
 * ATTN_TILE_KEYS consecutive keys at a time, keeping per query row a
 * running maximum, a running sum and an unnormalised output that is
 * rescaled whenever the maximum grows. runtime/attention.c walks the block
 * table and calls these; the kernels know nothing of blocks or sequences.
 *
 * Layouts (all floats, in the caller's per-thread scratch):
 *   rows      padded to a multiple of `lanes` (the ISA's vector width);
 *             group g holds rows g*lanes .. g*lanes + lanes - 1
 *   qt        [group][d][lanes]: the scaled queries, transposed per group
 *   kf        [key][d]: the chunk's keys as floats (widen)
 *   vf        [key][dp]: the chunk's values as floats, row stride dp
 *             (dp: d rounded up to ATTN_TILE_DPAD; lanes >= d are unused)
 *   acc       [row][dp]: unnormalised outputs; mx, l: [row]
 *   lo, hi    [row]: key positions lo <= pos <= hi are visible to the row
 * Keys of a chunk are positions kpos .. kpos + n - 1 (n <= ATTN_TILE_KEYS).
 * A row that has seen no visible key yet has mx = -INFINITY and l = 0.
 *
 * Invariant: only keys j < n and rows' visible positions enter a row's
 * sums; a masked key contributes exactly 0 (never exp of a clamp), so the
 * result is the same whether a chunk is split or not, up to float order.
 */
#ifndef KVLM_ATTN_TILE_H
#define KVLM_ATTN_TILE_H

#include <stddef.h>

#include "kvlm.h"

#define ATTN_TILE_KEYS 16
#define ATTN_TILE_DPAD 16
#define ATTN_TILE_MAX_LANES 16

typedef struct attn_tile_ops {
    kvlm_isa isa;
    int lanes; /* rows per group: the padding of the row count */
    /* dst[i] = src[i] as float for i < n; src in dtype t (f32, f16, bf16,
     * or Q8_0 with n a multiple of 32: n / 32 blocks). */
    void (*widen)(const void *src, kvlm_dtype t, size_t n, float *dst);
    /* Online-softmax update of `groups` row groups by one key chunk (see
     * the layouts above); sbuf and pbuf hold ATTN_TILE_KEYS * lanes
     * floats of scratch each. softcap > 0 caps every score s (the scaled
     * q . k) to softcap * tanh(s / softcap) before the softmax; 0: none. */
    void (*update)(int groups, int d, int dp, const float *qt, const float *kf, const float *vf, int kpos, int n,
                   const int *lo, const int *hi, float *mx, float *l, float *acc, float *sbuf, float *pbuf,
                   float softcap);
} attn_tile_ops;

extern const attn_tile_ops attn_tile_scalar;
extern const attn_tile_ops attn_tile_avx2;
extern const attn_tile_ops attn_tile_avx512;
extern const attn_tile_ops attn_tile_neon;

/* The set for isa (the VNNI sets map to their base ISA; AUTO: the best the
 * CPU has); NULL if the CPU lacks it. */
const attn_tile_ops *attn_tile_select(kvlm_isa isa);

#endif
