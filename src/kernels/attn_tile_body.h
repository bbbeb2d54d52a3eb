/*
 * The tiled attention kernels (kernels/attn_tile.h) written once against a
 * small vector vocabulary and instantiated per ISA: attn_tile.c with
 * one-lane "vectors" (plain floats, the scalar set), attn_tile_avx2.c with
 * 8 lanes, attn_tile_avx512.c with 16. Include only from those files, after
 * defining:
 *
 *   VW  lanes (rows per group)      KP  keys per score pass (<= 16)
 *   vf  float vector   vi  int32 vector
 *   V_ZERO() V_SET1(s) V_LOADU(p) V_STOREU(p, v) V_FMA(a, b, c) (a*b+c)
 *   V_ADD V_SUB V_MUL V_DIV V_MAX  VI_LOADU(p)
 *   V_HIDE(s, lo, hi, pos)  s with -INFINITY where pos < lo or pos > hi
 *   V_EXPZ(x)      exp(x), 0 where x < VEC_EXP_LO (and for -inf, NaN)
 *   V_UNINF(m)     m with 0 where m == -INFINITY
 *   V_LOAD_F16(p) V_LOAD_BF16(p)  VW halves widened to floats
 *   V_LOAD_I8(p)   VW int8 widened to floats (VW divides 32)
 *   S_F16(h)       one f16 widened to a float
 *   TILE_NAME(n)   name mangling: n ## _avx512
 *
 * Scores are vectors over rows (lanes) for one key, so the softmax's
 * maxima and sums run across vectors, never across lanes.
 */
#include <math.h>

#include "kernels/attn_tile.h"
#include "tensor.h"

static void TILE_NAME(widen)(const void *src, kvlm_dtype t, size_t n, float *dst) {
    size_t i = 0;
    if (t == KVLM_Q8_0) { /* n is whole blocks: rows of the cache are */
        const blk_q8_0 *b = src;
        for (; i + QK <= n; i += QK, b++) {
            const vf sc = V_SET1(S_F16(b->d));
            for (int u = 0; u < QK; u += VW) V_STOREU(dst + i + u, V_MUL(V_LOAD_I8(b->q + u), sc));
        }
        return;
    }
    if (t == KVLM_F16) {
        for (; i + VW <= n; i += VW) V_STOREU(dst + i, V_LOAD_F16((const uint16_t *)src + i));
    } else if (t == KVLM_BF16) {
        for (; i + VW <= n; i += VW) V_STOREU(dst + i, V_LOAD_BF16((const uint16_t *)src + i));
    } else {
        for (; i + VW <= n; i += VW) V_STOREU(dst + i, V_LOADU((const float *)src + i));
    }
    for (; i < n; i++) dst[i] = dtype_load(t, src, i);
}

/* Scores of one group's rows for keys j0 .. j0 + KP - 1 of the chunk:
 * sbuf[j][lane] = qt[.][lane] . k_j (keys past n read stale but finite
 * scratch and are never used). */
static inline __attribute__((always_inline)) void TILE_NAME(scores)(int d, const float *qt, const float *kf, int j0,
                                                                    float *sbuf) {
    vf s[KP];
#pragma GCC unroll 16
    for (int jj = 0; jj < KP; jj++) s[jj] = V_ZERO();
    const float *kr = kf + (size_t)j0 * d;
    for (int k = 0; k < d; k++) {
        const vf qv = V_LOADU(qt + (size_t)k * VW);
#pragma GCC unroll 16
        for (int jj = 0; jj < KP; jj++) s[jj] = V_FMA(V_SET1(kr[(size_t)jj * d + k]), qv, s[jj]);
    }
#pragma GCC unroll 16
    for (int jj = 0; jj < KP; jj++) V_STOREU(sbuf + (size_t)(j0 + jj) * VW, s[jj]);
}

static void TILE_NAME(update)(int groups, int d, int dp, const float *qt, const float *kf, const float *vf_,
                              int kpos, int n, const int *lo, const int *hi, float *mx, float *l, float *acc,
                              float *sbuf, float *pbuf, float softcap) {
    const int klast = kpos + n - 1;
    for (int g = 0; g < groups; g++) {
        const int *glo = lo + (size_t)g * VW, *ghi = hi + (size_t)g * VW;
        int lo_max = glo[0], lo_min = glo[0], hi_min = ghi[0], hi_max = ghi[0];
        for (int r = 1; r < VW; r++) {
            lo_max = glo[r] > lo_max ? glo[r] : lo_max, lo_min = glo[r] < lo_min ? glo[r] : lo_min;
            hi_min = ghi[r] < hi_min ? ghi[r] : hi_min, hi_max = ghi[r] > hi_max ? ghi[r] : hi_max;
        }
        if (hi_max < kpos || lo_min > klast) continue; /* no row of the group sees the chunk */
        const int all = lo_max <= kpos && hi_min >= klast;
        const float *gq = qt + (size_t)g * d * VW;
        /* Head dims 64, 128 and 256 (Gemma) as constants: the KP key rows
         * are then one base register plus fixed offsets. */
        if (d == 64)
            for (int j0 = 0; j0 < n; j0 += KP) TILE_NAME(scores)(64, gq, kf, j0, sbuf);
        else if (d == 128)
            for (int j0 = 0; j0 < n; j0 += KP) TILE_NAME(scores)(128, gq, kf, j0, sbuf);
        else if (d == 256)
            for (int j0 = 0; j0 < n; j0 += KP) TILE_NAME(scores)(256, gq, kf, j0, sbuf);
        else
            for (int j0 = 0; j0 < n; j0 += KP) TILE_NAME(scores)(d, gq, kf, j0, sbuf);
        if (softcap > 0) { /* logit soft-capping (Gemma 2): cap tanh(s / cap), tanh(u) = 1 - 2 / (exp(2u) + 1) */
            const vf cap = V_SET1(softcap), k2 = V_SET1(2.0f / softcap), one = V_SET1(1.0f), two = V_SET1(2.0f);
            for (int j = 0; j < n; j++) {
                const vf e = V_EXPZ(V_MUL(V_LOADU(sbuf + (size_t)j * VW), k2));
                V_STOREU(sbuf + (size_t)j * VW, V_MUL(cap, V_SUB(one, V_DIV(two, V_ADD(e, one)))));
            }
        }
        const vi lov = VI_LOADU(glo), hiv = VI_LOADU(ghi);
        const vf mo = V_LOADU(mx + (size_t)g * VW);
        vf mb = V_SET1(-INFINITY);
        for (int j = 0; j < n; j++) {
            vf s = V_LOADU(sbuf + (size_t)j * VW);
            if (!all) {
                s = V_HIDE(s, lov, hiv, kpos + j);
                V_STOREU(sbuf + (size_t)j * VW, s);
            }
            mb = V_MAX(mb, s);
        }
        const vf mn = V_MAX(mo, mb), base = V_UNINF(mn);
        /* exp(mo - mn): 1 while the maximum stays, 0 while a row has seen
         * nothing (mo = -inf: its acc and l are still 0). */
        const vf c = V_EXPZ(V_SUB(mo, base));
        vf sum = V_ZERO();
        for (int j = 0; j < n; j++) {
            const vf p = V_EXPZ(V_SUB(V_LOADU(sbuf + (size_t)j * VW), base));
            V_STOREU(pbuf + (size_t)j * VW, p);
            sum = V_ADD(sum, p);
        }
        V_STOREU(mx + (size_t)g * VW, mn);
        V_STOREU(l + (size_t)g * VW, V_FMA(V_LOADU(l + (size_t)g * VW), c, sum));
        float cs[VW];
        V_STOREU(cs, c);
        float *ga = acc + (size_t)g * VW * dp;
        for (int u = 0; u < d; u += VW) {
#define RU (VW < 8 ? VW : 8)
            for (int r0 = 0; r0 < VW; r0 += RU) {
                vf a[RU];
#pragma GCC unroll 8
                for (int rr = 0; rr < RU; rr++)
                    a[rr] = V_MUL(V_LOADU(ga + (size_t)(r0 + rr) * dp + u), V_SET1(cs[r0 + rr]));
                for (int j = 0; j < n; j++) {
                    const vf vv = V_LOADU(vf_ + (size_t)j * dp + u);
                    const float *pj = pbuf + (size_t)j * VW + r0;
#pragma GCC unroll 8
                    for (int rr = 0; rr < RU; rr++) a[rr] = V_FMA(V_SET1(pj[rr]), vv, a[rr]);
                }
#pragma GCC unroll 8
                for (int rr = 0; rr < RU; rr++) V_STOREU(ga + (size_t)(r0 + rr) * dp + u, a[rr]);
            }
#undef RU
        }
    }
}
