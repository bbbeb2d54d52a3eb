/*
 * SIMD kernel bodies written once against a small vector vocabulary (V_*)
 * and instantiated three times: by avx2.c with 8-lane ymm vectors, by
 * avx512.c with 16-lane zmm vectors and by kernels_neon.c with 4-lane NEON
 * vectors. Include only from those files, after defining:
 *
 *   VW             lanes per vector
 *   vf             vector of VW floats
 *   V_ZERO() V_SET1(s) V_LOADU(p) V_STOREU(p, v) V_FMA(a, b, c) (a*b+c)
 *   V_ADD V_SUB V_MUL V_DIV V_MAX V_MIN V_REDUCE(v) (horizontal sum)
 *   V_LOAD_F16(p) V_LOAD_BF16(p) (VW halves widened to floats)
 *   V_STORE_F16(p, v)
 *   V_LOAD_I8(p)   VW int8 widened to floats
 *   S_F16(h)       one f16 widened to a float (the Q8_0 block scales)
 *   V_ABS(v)       |v|
 *   V_ROUND_AWAY(v) v rounded half away from zero: sign(v) x floor(|v| + 0.5)
 *   V_STORE_I8(p, v) VW integral floats in [-127, 127] stored as int8
 *   V_EXP(v)       exp with about 1 ulp of error on [-87, 88]
 *   MR_MAX NR_MAX  matmul register tile (rows of x, rows of W), small batches
 *   NR1            rows of W per tile when x has a single row (decode), 8
 *   V_REDUCE8(v, out) out[j] = lane sum of v[j], j < 8, in a fixed tree
 *   PK_MR PK_NR    packed prefill tile (PK_NR <= 8); PK_PANEL1 largest
 *                  weight panel (bytes) that holds all of K, PK_PANEL the
 *                  largest when K is cut into blocks (<= PK_PANEL1); PK_L2
 *                  bytes of x per block of rows, PK_MC most rows of x per
 *                  block when K is cut; PK_MIN_M fewest rows that take the
 *                  packed path, PK_PF prefetch the next tile's x rows (0/1)
 *   KERNEL_NAME(n) name mangling: n ## _avx512
 *   KERNEL_ISA     the kvlm_isa value
 *
 * Matmul tiles accumulate MR x NR dot products over K in registers, one
 * vector accumulator per output whose lane l sums k = l, l + VW, ... in
 * ascending order; V_REDUCE8 sums the lanes, K tails (K not a multiple of
 * VW) finish in scalar code, then the bias. Every float path (decode,
 * small batch, packed prefill) keeps that order, so an output does not
 * depend on how many rows were batched with it (tests/test_kernels.c).
 */
#include "tensor.h"

#define AI static inline __attribute__((always_inline))

/* An empty asm that keeps v in a vector register ("v": the x86 files; the
 * NEON vocabulary defines its own with aarch64's "w"). */
#ifndef V_PIN
#define V_PIN(v) __asm__("" : "+v"(v))
#endif

AI vf load_w(const void *w, kvlm_dtype t, size_t off) {
    if (t == KVLM_F16) return V_LOAD_F16((const uint16_t *)w + off);
    if (t == KVLM_BF16) return V_LOAD_BF16((const uint16_t *)w + off);
    return V_LOADU((const float *)w + off);
}

/* The horizontal sums of up to 8 accumulators: out[j] = sum of the lanes
 * of a[j], in the ISA's fixed pairing tree (V_REDUCE8). Every float matmul
 * path finishes an output this way, so an output's value does not depend
 * on which path (decode, small batch, packed batch) computed it. Unused
 * slots are zero vectors. */
AI void reduce_acc(const vf *a, int nr, float *out) {
    vf v[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++) v[j] = j < nr ? a[j] : V_ZERO();
    V_REDUCE8(v, out);
}

/* Output (row, col) from its reduced lanes: the scalar K tail [k, K) in
 * order, then the bias. */
AI float mm_finish(float s, const float *xr, const void *w, kvlm_dtype t, size_t wrow, int k, int K,
                   const float *bias, int col) {
    for (int kk = k; kk < K; kk++) s += xr[kk] * dtype_load(t, w, wrow + kk);
    return s + (bias ? bias[col] : 0.0f);
}

/* Software prefetch of the weight rows a tile reads next (the decode
 * tile, and the first small-batch tile of each weight group): locality
 * MM_PF_LOC (1 = prefetcht2, into L2), on when MM_PF_ON; both may be set on
 * the command line for experiments (see mm_row1_tile for the measurements
 * behind the defaults). */
#ifndef MM_PF_LOC
#define MM_PF_LOC 1
#endif
#ifndef MM_PF_ON
#define MM_PF_ON 1
#endif

/* One MR x NR tile: y[m+i][n+j] for i < mr, j < nr (compile-time constants
 * once inlined into the switch arms below); pf: prefetch the nr weight
 * rows after this tile's, at the same K offsets, into L2. */
#define NR_ALL (NR1 > NR_MAX ? NR1 : NR_MAX)

AI void mm_tile(const float *x, int K, const void *w, kvlm_dtype t, int mr, int nr, int m,
                int n, int pf, const float *bias, float *y, int ldy) {
    vf acc[MR_MAX][NR_ALL];
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) acc[i][j] = V_ZERO();
    const float *xr = x + (size_t)m * K;
    const size_t wr = (size_t)n * K, es = t == KVLM_F32 ? 4 : 2, row_bytes = (size_t)K * es;
    const char *next = (const char *)w + (size_t)(n + nr) * row_bytes;
    int k = 0;
    for (; k + VW <= K; k += VW) {
        vf xv[MR_MAX];
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) xv[i] = V_LOADU(xr + (size_t)i * K + k);
        const size_t off = (size_t)k * es;
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) {
            if (MM_PF_ON && pf && off % 64 < VW * es)
                for (size_t q = 0; q < VW * es; q += 64)
                    __builtin_prefetch(next + (size_t)j * row_bytes + off + q, 0, MM_PF_LOC);
            vf wv = load_w(w, t, wr + (size_t)j * K + k);
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) acc[i][j] = V_FMA(xv[i], wv, acc[i][j]);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++) {
        float s[8];
        reduce_acc(acc[i], nr, s);
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++)
            y[(size_t)(m + i) * ldy + n + j] =
                mm_finish(s[j], xr + (size_t)i * K, w, t, wr + (size_t)j * K, k, K, bias, n + j);
    }
}

/* The rows [m, m1) left after whole MR_MAX-row tiles (fewer than
 * MR_MAX) against nr weight rows: tiles of 4, 2 and 1 rows, so a weight
 * group is read once per tile, not once per row. pf as for mm_tile, on
 * the first tile only. */
AI void mm_rest(const float *x, int K, const void *wd, kvlm_dtype t, int nr, int m, int m1, int n, int pf,
                const float *bias, float *y, int ldy) {
    if (MR_MAX > 4 && m + 4 <= m1) mm_tile(x, K, wd, t, 4, nr, m, n, pf, bias, y, ldy), m += 4, pf = 0;
    if (MR_MAX > 2 && m + 2 <= m1) mm_tile(x, K, wd, t, 2, nr, m, n, pf, bias, y, ldy), m += 2, pf = 0;
    if (m < m1) mm_tile(x, K, wd, t, 1, nr, m, n, pf, bias, y, ldy);
}

/* Rows [n0, n1) of W against all M rows of x, for one weight dtype,
 * straight from the stored weights (small batches). The rows of x are
 * taken in blocks that stay in L2 (about 256 KB); within a block each
 * weight tile is loaded once and used for every row of the block. */
AI void mm_rows_t(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias,
                  float *y, int ldy, kvlm_dtype t) {
    const int K = w->cols;
    const void *wd = w->data;
    int mb = (int)(65536 / (K > 0 ? K : 1));
    mb = mb < MR_MAX ? MR_MAX : mb - mb % MR_MAX;
    for (int m0 = 0; m0 < M; m0 += mb) {
        const int m1 = m0 + mb < M ? m0 + mb : M, full = m0 + (m1 - m0) / MR_MAX * MR_MAX;
        int n = n0;
        for (; n + NR_MAX <= n1; n += NR_MAX) {
            /* the first tile of each weight group prefetches the next group into L2 */
            const int pf = n + 2 * NR_MAX <= n1;
            for (int m = m0; m < full; m += MR_MAX)
                mm_tile(x, K, wd, t, MR_MAX, NR_MAX, m, n, pf && m == m0, bias, y, ldy);
            mm_rest(x, K, wd, t, NR_MAX, full, m1, n, pf && full == m0, bias, y, ldy);
        }
        for (; n < n1; n++) {
            for (int m = m0; m < full; m += MR_MAX) mm_tile(x, K, wd, t, MR_MAX, 1, m, n, 0, bias, y, ldy);
            mm_rest(x, K, wd, t, 1, full, m1, n, 0, bias, y, ldy);
        }
    }
}

/* Prefill (M >= PK_MIN_M): the weights are packed, PK_NR rows at a time,
 * into an L1 panel of f32 in step-major order (the PK_NR vectors of one K
 * step side by side), so f16/bf16 are widened once per panel and not once
 * per group of x rows, and the tile reads one sequential weight stream.
 * When the whole of K fits in PK_PANEL1 bytes of panel (K <= 768 with
 * 8 zmm rows) there is one panel per PK_NR rows and the accumulators stay
 * in registers from k = 0 to the end. Otherwise K is cut into equal blocks
 * of at most PK_PANEL bytes of panel (smaller: a long x sweep beside a
 * large panel evicts it from L1) and the PK_MR x PK_NR accumulators of
 * each tile of x rows are kept in a small buffer between K blocks (stored
 * and reloaded as whole vectors, so each lane still sums its k in
 * ascending order, as in mm_tile and mm_row1_tile). Rows of x go in
 * blocks of about PK_L2 bytes (L2) that every weight panel of the block
 * sweeps. Measured on an Intel Xeon (Sapphire Rapids class, one thread,
 * M = 512, K = 768, f32): 138 GFLOP/s with one panel for all of K,
 * against 119 with the former fixed 256-value K blocks. */
AI void pk_pack(const void *w, kvlm_dtype t, int K, int n, int nr, int k0, int steps, float *panel) {
    for (int s = 0; s < steps; s++)
#pragma GCC unroll 8
        for (int j = 0; j < PK_NR; j++)
            V_STOREU(panel + ((size_t)s * PK_NR + j) * VW,
                     j < nr ? load_w(w, t, (size_t)(n + j) * K + k0 + (size_t)s * VW) : V_ZERO());
}

AI void pk_tile(const float *x, int K, const void *w, kvlm_dtype t, int mr, int m, int n, int nr, int k0,
                int steps, int first, int last, const float *panel, vf *save, const float *bias, float *y,
                int ldy) {
    vf acc[PK_MR][PK_NR];
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < PK_NR; j++) acc[i][j] = first ? V_ZERO() : save[i * PK_NR + j];
    const float *xr = x + (size_t)m * K + k0;
    for (int s = 0; s < steps; s++) {
        vf xv[PK_MR];
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            xv[i] = V_LOADU(xr + (size_t)i * K + (size_t)s * VW);
            if (PK_PF) __builtin_prefetch(xr + (size_t)(i + mr) * K + (size_t)s * VW, 0, 3);
        }
        const float *ps = panel + (size_t)s * PK_NR * VW;
#pragma GCC unroll 8
        for (int j = 0; j < PK_NR; j++) {
            vf wv = V_LOADU(ps + (size_t)j * VW);
            V_PIN(wv); /* one load per vector, not one per FMA */
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) acc[i][j] = V_FMA(xv[i], wv, acc[i][j]);
        }
    }
    if (!last) {
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
            for (int j = 0; j < PK_NR; j++) save[i * PK_NR + j] = acc[i][j];
        return;
    }
    const int kv = k0 + steps * VW;
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++) {
        float s[8];
        reduce_acc(acc[i], PK_NR, s);
        const float *xi = x + (size_t)(m + i) * K;
        for (int j = 0; j < nr; j++)
            y[(size_t)(m + i) * ldy + n + j] = mm_finish(s[j], xi, w, t, (size_t)(n + j) * K, kv, K, bias, n + j);
    }
}

AI void mm_packed_t(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias, float *y,
                    int ldy, kvlm_dtype t) {
    const int K = w->cols, ksteps = K / VW;
    const void *wd = w->data;
    float panel[PK_PANEL1 / sizeof(float)] __attribute__((aligned(64)));
    vf save[PK_MC * PK_NR];
    /* all of K in one panel of at most PK_PANEL1 bytes, else K blocks of
     * equal size, each panel at most PK_PANEL bytes */
    const int step_bytes = PK_NR * VW * (int)sizeof(float), max_steps = PK_PANEL / step_bytes;
    const int kblocks = (size_t)ksteps * step_bytes <= PK_PANEL1 ? 1 : (ksteps + max_steps - 1) / max_steps;
    const int kc = (ksteps + kblocks - 1) / kblocks;
    /* saved accumulators per row of x (none with one K block: every tile
     * gets save[0] and neither reads nor writes it) */
    const size_t ss = kblocks > 1 ? PK_NR : 0;
    /* rows of x per block: about PK_L2 bytes; PK_MC at most (the saved
     * accumulators) when K takes more than one block */
    int mc = (int)(PK_L2 / ((size_t)K * sizeof(float)));
    if (kblocks > 1 && mc > PK_MC) mc = PK_MC;
    mc = mc < PK_MR ? PK_MR : mc - mc % PK_MR;
    for (int m0 = 0; m0 < M; m0 += mc) {
        const int m1 = m0 + mc < M ? m0 + mc : M;
        for (int n = n0; n < n1; n += PK_NR) {
            const int nr = n1 - n < PK_NR ? n1 - n : PK_NR;
            for (int s0 = 0; s0 < ksteps; s0 += kc) {
                const int steps = ksteps - s0 < kc ? ksteps - s0 : kc;
                const int first = s0 == 0, last = s0 + steps == ksteps, k0 = s0 * VW;
                if (nr == PK_NR) pk_pack(wd, t, K, n, PK_NR, k0, steps, panel);
                else pk_pack(wd, t, K, n, nr, k0, steps, panel);
                int m = m0;
                for (; m + PK_MR <= m1; m += PK_MR)
                    pk_tile(x, K, wd, t, PK_MR, m, n, nr, k0, steps, first, last, panel,
                            save + (size_t)(m - m0) * ss, bias, y, ldy);
                vf *sv = save + (size_t)(m - m0) * ss;
                if (m1 - m >= 2 && PK_MR > 2)
                    pk_tile(x, K, wd, t, 2, m, n, nr, k0, steps, first, last, panel, sv, bias, y, ldy),
                        m += 2, sv += 2 * ss;
                if (m < m1) pk_tile(x, K, wd, t, 1, m, n, nr, k0, steps, first, last, panel, sv, bias, y, ldy);
            }
        }
    }
}

/* One row of x (decode) against NR1 rows of W, K unrolled by two vectors
 * per row (every row stream advances at least a whole 64-byte line per
 * step with f32, half a line with f16/bf16). One accumulator per row in
 * mm_tile's order, so a decode row sums exactly as a prefill row does
 * (a prefix-cache hit gives the same logits as a cold run). While summing tile n the same
 * offsets of tile n + 1 (the next NR1 rows, one tile further on in memory)
 * are prefetched into L2 (prefetcht2), one prefetch per line of each row
 * stream: a fixed distance of one tile ahead, issued in step with the
 * loads, so it neither depends on one CPU's hardware prefetcher following
 * NR1 interleaved streams nor issues a burst of prefetches at once.
 * Measured on an Intel Xeon (Sapphire Rapids class, 2 cores, GPT-2 124M
 * shapes, whole decode step): this layout (then with prefetcht0) 23-25
 * GB/s f32 at 2 threads, against 6-7 GB/s for the former burst of
 * prefetchnta for the tile after next and 16-18 GB/s with no software
 * prefetch. On an AMD EPYC Zen 4 (2 cores), prefetcht2 against prefetcht0,
 * decode tokens/s alternated: GPT-2 f16 1.29-1.38x, f32 1.07-1.29x, 1B
 * f16 1.31-1.35x (prefetchnta 1.02-1.13x, none 0.98x); the int8 decode
 * kernels prefetch into L2 as well (MM_PF_LOC, MM_PF_ON above). */
AI void mm_row1_tile(const float *x, int K, const void *w, kvlm_dtype t, int nr, int n, int pf,
                     const float *bias, float *y) {
    vf acc[NR1];
#pragma GCC unroll 8
    for (int j = 0; j < nr; j++) acc[j] = V_ZERO();
    const size_t es = t == KVLM_F32 ? 4 : 2, row_bytes = (size_t)K * es;
    const char *next = (const char *)w + (size_t)(n + nr) * row_bytes;
    const size_t wr = (size_t)n * K;
    int k = 0;
    for (; k + 2 * VW <= K; k += 2 * VW) {
        const vf x0 = V_LOADU(x + k), x1 = V_LOADU(x + k + VW);
        const size_t off = (size_t)k * es;
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) {
            if (MM_PF_ON && pf) {
                if (2 * VW * es >= 64) {
                    for (size_t q = 0; q < 2 * VW * es; q += 64)
                        __builtin_prefetch(next + (size_t)j * row_bytes + off + q, 0, MM_PF_LOC);
                } else if (off % 64 < 2 * VW * es) {
                    __builtin_prefetch(next + (size_t)j * row_bytes + off, 0, MM_PF_LOC);
                }
            }
            acc[j] = V_FMA(x0, load_w(w, t, wr + (size_t)j * K + k), acc[j]);
            acc[j] = V_FMA(x1, load_w(w, t, wr + (size_t)j * K + k + VW), acc[j]);
        }
    }
    for (; k + VW <= K; k += VW) {
        const vf x0 = V_LOADU(x + k);
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) acc[j] = V_FMA(x0, load_w(w, t, wr + (size_t)j * K + k), acc[j]);
    }
    float s[8];
    reduce_acc(acc, nr, s);
#pragma GCC unroll 8
    for (int j = 0; j < nr; j++) y[n + j] = mm_finish(s[j], x, w, t, wr + (size_t)j * K, k, K, bias, n + j);
}

/* Rows [n0, n1) for one row of x: whole NR1 tiles (each prefetching the
 * next while one follows in [n0, n1)), then a tail of 4, 2 and 1 rows. */
AI void mm_row1_t(const float *x, const kern_matrix *w, int n0, int n1, const float *bias, float *y,
                  kvlm_dtype t) {
    const int K = w->cols;
    int n = n0;
    for (; n + NR1 <= n1; n += NR1) mm_row1_tile(x, K, w->data, t, NR1, n, n + 2 * NR1 <= n1, bias, y);
    if (n + 4 <= n1) mm_row1_tile(x, K, w->data, t, 4, n, 0, bias, y), n += 4;
    if (n + 2 <= n1) mm_row1_tile(x, K, w->data, t, 2, n, 0, bias, y), n += 2;
    if (n < n1) mm_row1_tile(x, K, w->data, t, 1, n, 0, bias, y);
}

/* matmul_rows, and matmul_rows_direct (packed = 0: float batches straight
 * from the stored weights, as below PK_MIN_M; the same bits). */
AI void mm_rows_any(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias, float *y,
                    int ldy, int packed) {
    if (M == 1) {
        switch (w->dtype) {
        case KVLM_F16: mm_row1_t(x, w, n0, n1, bias, y, KVLM_F16); return;
        case KVLM_BF16: mm_row1_t(x, w, n0, n1, bias, y, KVLM_BF16); return;
        case KVLM_F32: mm_row1_t(x, w, n0, n1, bias, y, KVLM_F32); return;
        default: break;
        }
    }
    if (packed && M >= PK_MIN_M && w->cols >= VW) {
        switch (w->dtype) {
        case KVLM_F16: mm_packed_t(x, M, w, n0, n1, bias, y, ldy, KVLM_F16); return;
        case KVLM_BF16: mm_packed_t(x, M, w, n0, n1, bias, y, ldy, KVLM_BF16); return;
        case KVLM_F32: mm_packed_t(x, M, w, n0, n1, bias, y, ldy, KVLM_F32); return;
        default: break;
        }
    }
    switch (w->dtype) {
    case KVLM_F16: mm_rows_t(x, M, w, n0, n1, bias, y, ldy, KVLM_F16); break;
    case KVLM_BF16: mm_rows_t(x, M, w, n0, n1, bias, y, ldy, KVLM_BF16); break;
    case KVLM_Q8_0: case KVLM_Q4_0: KERNEL_NAME(quant_matmul_rows)(x, M, w, n0, n1, bias, y, ldy); break;
    case KVLM_F32: mm_rows_t(x, M, w, n0, n1, bias, y, ldy, KVLM_F32); break;
    default: KERNEL_NAME(quant_wide_matmul_rows)(x, M, w, n0, n1, bias, y, ldy); break;
    }
}

static void KERNEL_NAME(matmul_rows)(const float *x, int M, const kern_matrix *w, int n0, int n1,
                                     const float *bias, float *y, int ldy) {
    mm_rows_any(x, M, w, n0, n1, bias, y, ldy, 1);
}

static void KERNEL_NAME(matmul_rows_direct)(const float *x, int M, const kern_matrix *w, int n0, int n1,
                                            const float *bias, float *y, int ldy) {
    mm_rows_any(x, M, w, n0, n1, bias, y, ldy, 0);
}

AI void scores_t(const float *q, const void *k, kvlm_dtype t, int n, int d, float scale,
                 float *scores) {
    for (int j = 0; j < n; j++) {
        vf acc = V_ZERO();
        int i = 0;
        for (; i + VW <= d; i += VW) acc = V_FMA(V_LOADU(q + i), load_w(k, t, (size_t)j * d + i), acc);
        float s = V_REDUCE(acc);
        for (; i < d; i++) s += q[i] * dtype_load(t, k, (size_t)j * d + i);
        scores[j] = s * scale;
    }
}

/* Q8_0 keys (d a multiple of 32): per block, the 32 products with the
 * int8 widened to floats summed in a vector, scaled once by the block's
 * f16 scale. */
AI void scores_q8_0(const float *q, const void *k, int n, int d, float scale, float *scores) {
    const int nb = d / QK;
    const blk_q8_0 *b = k;
    for (int j = 0; j < n; j++, b += nb) {
        vf acc = V_ZERO();
        for (int c = 0; c < nb; c++) {
            vf t = V_ZERO();
#pragma GCC unroll 4
            for (int i = 0; i < QK; i += VW) t = V_FMA(V_LOADU(q + c * QK + i), V_LOAD_I8(b[c].q + i), t);
            acc = V_FMA(t, V_SET1(S_F16(b[c].d)), acc);
        }
        scores[j] = V_REDUCE(acc) * scale;
    }
}

static void KERNEL_NAME(attn_scores)(const float *q, const void *k, kvlm_dtype kt, int n, int d,
                                     float scale, float *scores) {
    if (kt == KVLM_F16) scores_t(q, k, KVLM_F16, n, d, scale, scores);
    else if (kt == KVLM_Q8_0) scores_q8_0(q, k, n, d, scale, scores);
    else scores_t(q, k, KVLM_F32, n, d, scale, scores);
}

AI void accum_t(const float *p, const void *v, kvlm_dtype t, int n, int d, float *out) {
    int i = 0;
    for (; i + VW <= d; i += VW) {
        vf acc = V_LOADU(out + i);
        for (int j = 0; j < n; j++) acc = V_FMA(V_SET1(p[j]), load_w(v, t, (size_t)j * d + i), acc);
        V_STOREU(out + i, acc);
    }
    for (; i < d; i++)
        for (int j = 0; j < n; j++) out[i] += p[j] * dtype_load(t, v, (size_t)j * d + i);
}

/* Q8_0 values (d a multiple of 32): block column c of every row at a
 * time, its 32 outputs in registers, each row's weight p[j] folded into
 * the block's scale. */
AI void accum_q8_0(const float *p, const void *v, int n, int d, float *out) {
    const int nb = d / QK;
    for (int c = 0; c < nb; c++) {
        vf a[QK / VW];
#pragma GCC unroll 4
        for (int u = 0; u < QK / VW; u++) a[u] = V_LOADU(out + c * QK + u * VW);
        const blk_q8_0 *b = (const blk_q8_0 *)v + c;
        for (int j = 0; j < n; j++, b += nb) {
            const vf w = V_SET1(p[j] * S_F16(b->d));
#pragma GCC unroll 4
            for (int u = 0; u < QK / VW; u++) a[u] = V_FMA(w, V_LOAD_I8(b->q + u * VW), a[u]);
        }
#pragma GCC unroll 4
        for (int u = 0; u < QK / VW; u++) V_STOREU(out + c * QK + u * VW, a[u]);
    }
}

static void KERNEL_NAME(attn_accum)(const float *p, const void *v, kvlm_dtype vt, int n, int d,
                                    float *out) {
    if (vt == KVLM_F16) accum_t(p, v, KVLM_F16, n, d, out);
    else if (vt == KVLM_Q8_0) accum_q8_0(p, v, n, d, out);
    else accum_t(p, v, KVLM_F32, n, d, out);
}

/* Decode attention for the query heads of one KV group (grouped-query
 * attention): each key or value vector is loaded and widened once for hb
 * heads (hb a constant at each call: 4, 2), where one call per head reads
 * the whole context once per head. Every head's sums keep the order of
 * scores_t / accum_t, so its bits are theirs. */
AI void scores_heads_t(const float *q, int hb, const void *k, kvlm_dtype t, int n, int d, float scale,
                       float *scores, size_t lds) {
    for (int j = 0; j < n; j++) {
        vf acc[4];
#pragma GCC unroll 4
        for (int h = 0; h < hb; h++) acc[h] = V_ZERO();
        int i = 0;
        for (; i + VW <= d; i += VW) {
            const vf kv = load_w(k, t, (size_t)j * d + i);
#pragma GCC unroll 4
            for (int h = 0; h < hb; h++) acc[h] = V_FMA(V_LOADU(q + (size_t)h * d + i), kv, acc[h]);
        }
#pragma GCC unroll 4
        for (int h = 0; h < hb; h++) {
            float s = V_REDUCE(acc[h]);
            for (int r = i; r < d; r++) s += q[(size_t)h * d + r] * dtype_load(t, k, (size_t)j * d + r);
            scores[h * lds + j] = s * scale;
        }
    }
}

/* Q8_0 keys for hb heads of a group: each block's 32 int8 are widened once
 * for all the heads; each head's sums keep scores_q8_0's order, so its bits. */
AI void scores_heads_q8_0(const float *q, int hb, const void *k, int n, int d, float scale, float *scores,
                          size_t lds) {
    const int nb = d / QK;
    const blk_q8_0 *b = k;
    for (int j = 0; j < n; j++, b += nb) {
        vf acc[4];
#pragma GCC unroll 4
        for (int h = 0; h < hb; h++) acc[h] = V_ZERO();
        for (int c = 0; c < nb; c++) {
            vf t[4];
#pragma GCC unroll 4
            for (int h = 0; h < hb; h++) t[h] = V_ZERO();
#pragma GCC unroll 4
            for (int i = 0; i < QK; i += VW) {
                const vf kv = V_LOAD_I8(b[c].q + i);
#pragma GCC unroll 4
                for (int h = 0; h < hb; h++) t[h] = V_FMA(V_LOADU(q + (size_t)h * d + c * QK + i), kv, t[h]);
            }
            const vf sc = V_SET1(S_F16(b[c].d));
#pragma GCC unroll 4
            for (int h = 0; h < hb; h++) acc[h] = V_FMA(t[h], sc, acc[h]);
        }
#pragma GCC unroll 4
        for (int h = 0; h < hb; h++) scores[h * lds + j] = V_REDUCE(acc[h]) * scale;
    }
}

/* Q8_0 values for hb heads: block column c of every row at a time, as in
 * accum_q8_0, each int8 vector widened once for all the heads. */
AI void accum_heads_q8_0(const float *p, size_t ldp, int hb, const void *v, int n, int d, float *out) {
    const int nb = d / QK;
    for (int c = 0; c < nb; c++) {
        vf a[4][QK / VW];
#pragma GCC unroll 4
        for (int h = 0; h < hb; h++)
#pragma GCC unroll 4
            for (int u = 0; u < QK / VW; u++) a[h][u] = V_LOADU(out + (size_t)h * d + c * QK + u * VW);
        const blk_q8_0 *b = (const blk_q8_0 *)v + c;
        for (int j = 0; j < n; j++, b += nb) {
            const float sc = S_F16(b->d);
#pragma GCC unroll 4
            for (int u = 0; u < QK / VW; u++) {
                const vf x = V_LOAD_I8(b->q + u * VW);
#pragma GCC unroll 4
                for (int h = 0; h < hb; h++) a[h][u] = V_FMA(V_SET1(p[h * ldp + j] * sc), x, a[h][u]);
            }
        }
#pragma GCC unroll 4
        for (int h = 0; h < hb; h++)
#pragma GCC unroll 4
            for (int u = 0; u < QK / VW; u++) V_STOREU(out + (size_t)h * d + c * QK + u * VW, a[h][u]);
    }
}

static void KERNEL_NAME(attn_scores_heads)(const float *q, int heads, const void *k, kvlm_dtype kt, int n, int d,
                                           float scale, float *scores, size_t lds) {
    int h = 0;
    if (kt == KVLM_F16 || kt == KVLM_F32) {
        for (; h + 4 <= heads; h += 4)
            if (kt == KVLM_F16) scores_heads_t(q + (size_t)h * d, 4, k, KVLM_F16, n, d, scale, scores + h * lds, lds);
            else scores_heads_t(q + (size_t)h * d, 4, k, KVLM_F32, n, d, scale, scores + h * lds, lds);
        for (; h + 2 <= heads; h += 2)
            if (kt == KVLM_F16) scores_heads_t(q + (size_t)h * d, 2, k, KVLM_F16, n, d, scale, scores + h * lds, lds);
            else scores_heads_t(q + (size_t)h * d, 2, k, KVLM_F32, n, d, scale, scores + h * lds, lds);
    }
    if (kt == KVLM_Q8_0) {
        for (; h + 4 <= heads; h += 4) scores_heads_q8_0(q + (size_t)h * d, 4, k, n, d, scale, scores + h * lds, lds);
        for (; h + 2 <= heads; h += 2) scores_heads_q8_0(q + (size_t)h * d, 2, k, n, d, scale, scores + h * lds, lds);
    }
    for (; h < heads; h++) KERNEL_NAME(attn_scores)(q + (size_t)h * d, k, kt, n, d, scale, scores + h * lds);
}

/* Two vectors of d per value row at a time, so 2 hb accumulator chains
 * hide the FMA latency (accum_t has one chain per vector of d). */
AI void accum_heads_t(const float *p, size_t ldp, int hb, const void *v, kvlm_dtype t, int n, int d, float *out) {
    int i = 0;
    for (; i + 2 * VW <= d; i += 2 * VW) {
        vf a0[4], a1[4];
#pragma GCC unroll 4
        for (int h = 0; h < hb; h++) a0[h] = V_LOADU(out + (size_t)h * d + i), a1[h] = V_LOADU(out + (size_t)h * d + i + VW);
        for (int j = 0; j < n; j++) {
            const vf v0 = load_w(v, t, (size_t)j * d + i), v1 = load_w(v, t, (size_t)j * d + i + VW);
#pragma GCC unroll 4
            for (int h = 0; h < hb; h++) {
                const vf pj = V_SET1(p[h * ldp + j]);
                a0[h] = V_FMA(pj, v0, a0[h]);
                a1[h] = V_FMA(pj, v1, a1[h]);
            }
        }
#pragma GCC unroll 4
        for (int h = 0; h < hb; h++) V_STOREU(out + (size_t)h * d + i, a0[h]), V_STOREU(out + (size_t)h * d + i + VW, a1[h]);
    }
    for (; i + VW <= d; i += VW) {
        vf a[4];
#pragma GCC unroll 4
        for (int h = 0; h < hb; h++) a[h] = V_LOADU(out + (size_t)h * d + i);
        for (int j = 0; j < n; j++) {
            const vf v0 = load_w(v, t, (size_t)j * d + i);
#pragma GCC unroll 4
            for (int h = 0; h < hb; h++) a[h] = V_FMA(V_SET1(p[h * ldp + j]), v0, a[h]);
        }
#pragma GCC unroll 4
        for (int h = 0; h < hb; h++) V_STOREU(out + (size_t)h * d + i, a[h]);
    }
    for (int h = 0; h < hb; h++)
        for (int r = i; r < d; r++)
            for (int j = 0; j < n; j++) out[(size_t)h * d + r] += p[h * ldp + j] * dtype_load(t, v, (size_t)j * d + r);
}

static void KERNEL_NAME(attn_accum_heads)(const float *p, size_t ldp, int heads, const void *v, kvlm_dtype vt, int n,
                                          int d, float *out) {
    int h = 0;
    if (vt == KVLM_F16 || vt == KVLM_F32) {
        for (; h + 4 <= heads; h += 4)
            if (vt == KVLM_F16) accum_heads_t(p + h * ldp, ldp, 4, v, KVLM_F16, n, d, out + (size_t)h * d);
            else accum_heads_t(p + h * ldp, ldp, 4, v, KVLM_F32, n, d, out + (size_t)h * d);
        for (; h + 2 <= heads; h += 2)
            if (vt == KVLM_F16) accum_heads_t(p + h * ldp, ldp, 2, v, KVLM_F16, n, d, out + (size_t)h * d);
            else accum_heads_t(p + h * ldp, ldp, 2, v, KVLM_F32, n, d, out + (size_t)h * d);
    }
    if (vt == KVLM_Q8_0) {
        for (; h + 4 <= heads; h += 4) accum_heads_q8_0(p + h * ldp, ldp, 4, v, n, d, out + (size_t)h * d);
        for (; h + 2 <= heads; h += 2) accum_heads_q8_0(p + h * ldp, ldp, 2, v, n, d, out + (size_t)h * d);
    }
    for (; h < heads; h++) KERNEL_NAME(attn_accum)(p + h * ldp, v, vt, n, d, out + (size_t)h * d);
}

/* tanh(u) = 1 - 2 / (exp(2u) + 1), 2u clamped to [-80, 80] (tanh is +-1
 * in float well before). */
AI vf vec_tanh(vf u) {
    const vf one = V_SET1(1.0f), two = V_SET1(2.0f);
    const vf e = V_EXP(V_MIN(V_MAX(V_MUL(two, u), V_SET1(-80.0f)), V_SET1(80.0f)));
    return V_SUB(one, V_DIV(two, V_ADD(e, one)));
}

/* gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
AI vf vec_gelu(vf v) {
    const vf c = V_SET1(0.7978845608028654f), a = V_SET1(0.044715f);
    const vf u = V_MUL(c, V_FMA(V_MUL(a, V_MUL(v, v)), v, v));
    return V_MUL(V_MUL(V_SET1(0.5f), v), V_ADD(V_SET1(1.0f), vec_tanh(u)));
}

static void KERNEL_NAME(gelu)(float *x, size_t n) {
    size_t i = 0;
    for (; i + VW <= n; i += VW) V_STOREU(x + i, vec_gelu(V_LOADU(x + i)));
    for (; i < n; i++) {
        float v = x[i];
        x[i] = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    }
}

static void KERNEL_NAME(geglu)(const float *gate, const float *up, float *out, size_t n) {
    size_t i = 0;
    for (; i + VW <= n; i += VW) V_STOREU(out + i, V_MUL(vec_gelu(V_LOADU(gate + i)), V_LOADU(up + i)));
    for (; i < n; i++) {
        const float v = gate[i];
        out[i] = 0.5f * v * (1.0f + tanhf(0.7978845608028654f * (v + 0.044715f * v * v * v))) * up[i];
    }
}

static void KERNEL_NAME(softcap)(float *x, size_t n, float cap) {
    const vf c = V_SET1(cap), inv = V_SET1(1.0f / cap);
    size_t i = 0;
    for (; i + VW <= n; i += VW) V_STOREU(x + i, V_MUL(c, vec_tanh(V_MUL(V_LOADU(x + i), inv))));
    for (; i < n; i++) x[i] = cap * tanhf(x[i] / cap);
}

static void KERNEL_NAME(layernorm)(const float *x, const float *w, const float *b, int n, float eps,
                                   float *out) {
    vf s = V_ZERO();
    int i = 0;
    for (; i + VW <= n; i += VW) s = V_ADD(s, V_LOADU(x + i));
    float mean = V_REDUCE(s);
    for (; i < n; i++) mean += x[i];
    mean /= (float)n;
    const vf mv = V_SET1(mean);
    vf q = V_ZERO();
    for (i = 0; i + VW <= n; i += VW) {
        vf dlt = V_SUB(V_LOADU(x + i), mv);
        q = V_FMA(dlt, dlt, q);
    }
    float var = V_REDUCE(q);
    for (; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
    var /= (float)n;
    const float rstd = 1.0f / sqrtf(var + eps);
    const vf rv = V_SET1(rstd);
    for (i = 0; i + VW <= n; i += VW) {
        vf v = V_MUL(V_SUB(V_LOADU(x + i), mv), rv);
        V_STOREU(out + i, V_FMA(v, V_LOADU(w + i), V_LOADU(b + i)));
    }
    for (; i < n; i++) out[i] = (x[i] - mean) * rstd * w[i] + b[i];
}

static void KERNEL_NAME(rmsnorm)(const float *x, const float *w, int n, float eps, float *out) {
    vf q = V_ZERO();
    int i = 0;
    for (; i + VW <= n; i += VW) q = V_FMA(V_LOADU(x + i), V_LOADU(x + i), q);
    float ss = V_REDUCE(q);
    for (; i < n; i++) ss += x[i] * x[i];
    const float r = 1.0f / sqrtf(ss / (float)n + eps);
    const vf rv = V_SET1(r);
    for (i = 0; i + VW <= n; i += VW) V_STOREU(out + i, V_MUL(V_MUL(V_LOADU(x + i), rv), V_LOADU(w + i)));
    for (; i < n; i++) out[i] = x[i] * r * w[i];
}

static void KERNEL_NAME(swiglu)(const float *gate, const float *up, float *out, size_t n) {
    const vf one = V_SET1(1.0f), lo = V_SET1(-80.0f), hi = V_SET1(80.0f), zero = V_ZERO();
    size_t i = 0;
    for (; i + VW <= n; i += VW) {
        vf g = V_LOADU(gate + i);
        vf e = V_EXP(V_MIN(V_MAX(V_SUB(zero, g), lo), hi));
        V_STOREU(out + i, V_MUL(V_DIV(g, V_ADD(one, e)), V_LOADU(up + i)));
    }
    for (; i < n; i++) out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

/* One Q8_0 block of the KV cache with exactly the reference's bits
 * (kernels/quant_scalar.c): amax over the block (NaN ignored), the scale
 * amax / 127 rounded to f16 (saturating at 65504), each value x / d
 * rounded half away from zero and clamped to [-127, 127] (NaN to -127:
 * V_MAX returns its second operand when the first is NaN). */
AI void store_q8_0_block(const float *x, blk_q8_0 *b) {
    vf m = V_ZERO();
#pragma GCC unroll 4
    for (int i = 0; i < QK; i += VW) m = V_MAX(V_ABS(V_LOADU(x + i)), m);
    float lanes[VW], amax = 0;
    V_STOREU(lanes, m);
    for (int l = 0; l < VW; l++) amax = fmaxf(amax, lanes[l]);
    float v = amax / 127.0f;
    if (v > 65504.0f) v = 65504.0f;
    b->d = f32_to_f16(v);
    const float d = f16_to_f32(b->d);
    const vf dv = V_SET1(d), lo = V_SET1(-127.0f), hi = V_SET1(127.0f);
#pragma GCC unroll 4
    for (int i = 0; i < QK; i += VW) {
        const vf q = d != 0 ? V_ROUND_AWAY(V_DIV(V_LOADU(x + i), dv)) : V_ZERO();
        V_STORE_I8(b->q + i, V_MIN(V_MAX(q, lo), hi));
    }
}

static void KERNEL_NAME(store_row)(void *dst, kvlm_dtype t, const float *x, int n) {
    int i = 0;
    if (t == KVLM_F32) {
        memcpy(dst, x, (size_t)n * sizeof(float));
        return;
    }
    if (t == KVLM_Q8_0) { /* n is whole blocks (a KV row) */
        for (; i + QK <= n; i += QK) store_q8_0_block(x + i, (blk_q8_0 *)dst + i / QK);
        return;
    }
    if (t == KVLM_F16)
        for (; i + VW <= n; i += VW) V_STORE_F16((uint16_t *)dst + i, V_LOADU(x + i));
    for (; i < n; i++) dtype_store(t, dst, (size_t)i, x[i]);
}

const kern_ops KERNEL_NAME(kern_ops) = {
    .isa = KERNEL_ISA,
    .matmul_rows = KERNEL_NAME(matmul_rows),
    .matmul_rows_direct = KERNEL_NAME(matmul_rows_direct),
    .batch_forms = 1u << KVLM_F32 | 1u << KVLM_F16 | 1u << KVLM_BF16,
    .attn_scores = KERNEL_NAME(attn_scores),
    .attn_accum = KERNEL_NAME(attn_accum),
    .attn_scores_heads = KERNEL_NAME(attn_scores_heads),
    .attn_accum_heads = KERNEL_NAME(attn_accum_heads),
    .gelu = KERNEL_NAME(gelu),
    .layernorm = KERNEL_NAME(layernorm),
    .rmsnorm = KERNEL_NAME(rmsnorm),
    .swiglu = KERNEL_NAME(swiglu),
    .geglu = KERNEL_NAME(geglu),
    .softcap = KERNEL_NAME(softcap),
    .store_row = KERNEL_NAME(store_row),
};
