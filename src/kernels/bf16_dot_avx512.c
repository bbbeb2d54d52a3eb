/*
 * The AVX512-BF16 matmul of kernels/bf16_dot.h: activations rounded to
 * bf16 once (vcvtne2ps2bf16), then register tiles of vdpbf16ps straight
 * from the stored bf16 weight rows. Compiled with AVX512-BF16 flags; only
 * called through the avx512-bf16 kern_ops after cpuid said so.
 */
#include <immintrin.h>

#include "kernels/bf16_dot.h"
#include "kernels/reduce_avx512.h"

#define AI static inline __attribute__((always_inline))

/* Register tiles: MR rows of x by NR weight rows (24 accumulators; 4 + 6
 * loads per 32-value step), NR1 weight rows for a single row of x
 * (decode). Rows of x are taken in blocks of at most XB_BLOCK bytes (a
 * quarter of a 1 MB L2), so a block stays in L2 while every weight tile
 * sweeps it (with 128 KB blocks and the next tile fetched during the first
 * row tile, batches were up to 14% slower on Zen 4: docs/performance.md). */
enum { MR = 4, NR = 6, NR1 = 8, XB_BLOCK = 262144 };

void bf16_dot_prep_avx512(const float *x, int K, int m0, int m1, uint16_t *xb) {
    const int ks = bf16_dot_stride(K);
    for (int m = m0; m < m1; m++) {
        const float *xr = x + (size_t)m * K;
        uint16_t *o = xb + (size_t)m * ks;
        for (int k = 0; k < ks; k += 32) {
            const int left = K - k; /* > 0: ks - 32 < K */
            __m512 lo, hi;
            if (left >= 32) {
                lo = _mm512_loadu_ps(xr + k), hi = _mm512_loadu_ps(xr + k + 16);
            } else {
                const __mmask16 ml = left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
                const __mmask16 mh = left > 16 ? (__mmask16)((1u << (left - 16)) - 1) : 0;
                lo = _mm512_maskz_loadu_ps(ml, xr + k), hi = _mm512_maskz_loadu_ps(mh, xr + k + 16);
            }
            _mm512_storeu_si512(o + k, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
        }
    }
}

/* One mr x nr tile (constants once inlined): y[m + i][n + j]. The K tail
 * (K not a multiple of 32) is one more step with the weights masked; x's
 * padding is zero. Prefetches into L2, spread over the steps: pfr, the nr
 * weight rows after this tile's at the same offsets (one line per row per
 * step; decode); pfn > 0, the pfn cache lines from pf in address order (a
 * slice of the next weight tile; batches). */
AI void tile(const uint16_t *xb, int ks, const uint16_t *w, int K, int mr, int nr, int m, int n, int pfr,
             const char *pf, int pfn, const float *bias, float *y, int ldy) {
    __m512 acc[MR][NR1];
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) acc[i][j] = _mm512_setzero_ps();
    const uint16_t *xr = xb + (size_t)m * ks, *wr = w + (size_t)n * K;
    const char *next = (const char *)(wr + (size_t)nr * K);
    const size_t rb = (size_t)K * sizeof(uint16_t);
    const int steps = K / 32, per_step = pfn > 0 && steps > 0 ? (pfn + steps - 1) / steps : 0;
    int k = 0, line = 0;
    for (; k + 32 <= K; k += 32) {
        for (const int end = line + per_step < pfn ? line + per_step : pfn; line < end; line++)
            __builtin_prefetch(pf + (size_t)line * 64, 0, 1);
        __m512bh xv[MR];
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) xv[i] = (__m512bh)_mm512_loadu_si512(xr + (size_t)i * ks + k);
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) {
            if (pfr) __builtin_prefetch(next + (size_t)j * rb + (size_t)k * sizeof(uint16_t), 0, 1);
            const __m512bh wv = (__m512bh)_mm512_loadu_si512(wr + (size_t)j * K + k);
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv[i], wv);
        }
    }
    if (k < K) {
        const __mmask32 mk = (__mmask32)((1u << (K - k)) - 1);
        __m512bh xv[MR];
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) xv[i] = (__m512bh)_mm512_loadu_si512(xr + (size_t)i * ks + k);
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) {
            const __m512bh wv = (__m512bh)_mm512_maskz_loadu_epi16(mk, wr + (size_t)j * K + k);
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv[i], wv);
        }
    }
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++) {
        __m512 v[8];
        float s[8];
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) v[j] = j < nr ? acc[i][j] : _mm512_setzero_ps();
        reduce8_avx512(v, s);
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) y[(size_t)(m + i) * ldy + n + j] = s[j] + (bias ? bias[n + j] : 0.0f);
    }
}

/* The slice of a prefetch that starts at cache line `line` of the `lines`
 * at next: its address (NULL once nothing is left) and its length. */
static inline const char *slice_at(const char *next, int line, int lines) {
    return line < lines ? next + (size_t)line * 64 : NULL;
}
static inline int slice_len(int slice, int line, int lines) {
    return line >= lines ? 0 : slice < lines - line ? slice : lines - line;
}

/* Rows [m0, m1) of x against nr weight rows: whole MR tiles, then tiles of
 * 2 and 1 rows. The nb bytes at next (the next weight tile; NULL: none)
 * are prefetched in equal slices, one per row tile, so the whole sweep
 * overlaps the fetch instead of its first tile alone. */
AI void tile_rows(const uint16_t *xb, int ks, const uint16_t *w, int K, int nr, int m0, int m1, int n,
                  const char *next, size_t nb, const float *bias, float *y, int ldy) {
    const int tiles = (m1 - m0 + MR - 1) / MR, lines = next ? (int)((nb + 63) / 64) : 0;
    const int slice = (lines + tiles - 1) / tiles;
    int m = m0, line = 0;
    for (; m + MR <= m1; m += MR, line += slice)
        tile(xb, ks, w, K, MR, nr, m, n, 0, slice_at(next, line, lines), slice_len(slice, line, lines), bias, y,
             ldy);
    if (m + 2 <= m1) {
        tile(xb, ks, w, K, 2, nr, m, n, 0, slice_at(next, line, lines), slice_len(slice, line, lines), bias, y, ldy);
        m += 2, line += slice;
    }
    if (m < m1)
        tile(xb, ks, w, K, 1, nr, m, n, 0, slice_at(next, line, lines), slice_len(slice, line, lines), bias, y, ldy);
}

void bf16_dot_rows_avx512(const uint16_t *xb, int M, const kern_matrix *w, int n0, int n1, const float *bias,
                          float *y, int ldy) {
    const int K = w->cols, ks = bf16_dot_stride(K);
    const uint16_t *wd = w->data;
    if (M == 1) {
        int n = n0;
        for (; n + NR1 <= n1; n += NR1) tile(xb, ks, wd, K, 1, NR1, 0, n, n + 2 * NR1 <= n1, NULL, 0, bias, y, ldy);
        if (n + 4 <= n1) tile(xb, ks, wd, K, 1, 4, 0, n, 0, NULL, 0, bias, y, ldy), n += 4;
        if (n + 2 <= n1) tile(xb, ks, wd, K, 1, 2, 0, n, 0, NULL, 0, bias, y, ldy), n += 2;
        if (n < n1) tile(xb, ks, wd, K, 1, 1, 0, n, 0, NULL, 0, bias, y, ldy);
        return;
    }
    int mb = XB_BLOCK / (ks * (int)sizeof(uint16_t));
    mb = mb < MR ? MR : mb - mb % MR;
    for (int m0 = 0; m0 < M; m0 += mb) {
        const int m1 = m0 + mb < M ? m0 + mb : M;
        int n = n0;
        for (; n + NR <= n1; n += NR) {
            const char *next = n + 2 * NR <= n1 ? (const char *)(wd + (size_t)(n + NR) * K) : NULL;
            tile_rows(xb, ks, wd, K, NR, m0, m1, n, next, (size_t)NR * K * sizeof(uint16_t), bias, y, ldy);
        }
        if (n + 4 <= n1) tile_rows(xb, ks, wd, K, 4, m0, m1, n, NULL, 0, bias, y, ldy), n += 4;
        if (n + 2 <= n1) tile_rows(xb, ks, wd, K, 2, m0, m1, n, NULL, 0, bias, y, ldy), n += 2;
        if (n < n1) tile_rows(xb, ks, wd, K, 1, m0, m1, n, NULL, 0, bias, y, ldy);
    }
}
