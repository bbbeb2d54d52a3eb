/*
 * A decode batch of the 32-value block types (Q8_0, Q4_0, Q4_1, Q5_0,
 * Q5_1) in the int8 kernels: several rows of x against weight rows read in
 * place from their blocks, each weight vector unpacked once for all the
 * tile's rows. Part of quant_int8_body.h (its i8_act layout, weight
 * unpacking and ISA macros); include only from there, after i8_tile1. Does
 * not handle the K-quants (their decode kernel and panels) nor choose
 * which calls come here (i8_rows_t does).
 */

/* mr rows of x against nr weight rows read in place from their blocks
 * (a batch of decode rows): each weight vector is unpacked once and serves
 * the mr rows, whose activation vectors stay in registers. Per output the
 * float operations are i8_tile1's, so a row gives the same bits alone or
 * in a batch. The caller walks the rows of x in tiles of MR_MAX over the
 * same nr weight rows, which the first tile left in L1. */
AI void i8_tilem(const i8_act *a, int nb, const unsigned char *w, size_t rb, kvlm_dtype t, int mr, int nr, int m,
                 int n, const float *bias, float *y, int ldy, int pf) {
    const size_t bb = dtype_block_bytes(t);
    vf acc[MR_MAX][NR_MAX];
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) acc[i][j] = V_ZERO();
    const unsigned char *wr = w + (size_t)n * rb;
    const unsigned char *next = wr + (size_t)nr * rb;
    const size_t step = (size_t)nr * BPV * bb;
    const int8_t *xr = a->xq + (size_t)m * a->kp;
    const float *fr = a->f + (size_t)m * a->nv * 2 * VW;
    const size_t fs = (size_t)a->nv * 2 * VW;
    const int full = nb / BPV;
    for (int p = 0; p <= full; p++) {
        const int tail = p == full;
        if (tail && nb % BPV == 0) break;
        if (pf) i8_prefetch(next, (size_t)p * step, (size_t)(p + 1) * step);
        vq xv[MR_MAX];
        vf dv[MR_MAX], ev[MR_MAX];
#pragma GCC unroll 8
        for (int i = 0; i < mr; i++) {
            xv[i] = Q_LOAD(xr + (size_t)i * a->kp + (size_t)p * 4 * VW);
            dv[i] = V_LOADU(fr + (size_t)i * fs + (size_t)p * 2 * VW);
            ev[i] = V_LOADU(fr + (size_t)i * fs + (size_t)p * 2 * VW + VW);
        }
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++) {
            const unsigned char *b0 = wr + (size_t)j * rb + (size_t)p * BPV * bb;
            const unsigned char *b1 = BPV == 2 && !tail ? b0 + bb : NULL;
            const vq wv = i8_wvec(t, b0, b1);
            const vf sw = i8_wscale_dec(b0, b1);
#pragma GCC unroll 8
            for (int i = 0; i < mr; i++)
                acc[i][j] = V_FMA(V_FMS(Q_TO_F(Q_DP(Q_ZERO(), wv, xv[i])), dv[i], ev[i]), sw, acc[i][j]);
        }
    }
    if (i8_hasmin(t))
        for (int c = 0; c < a->nbq; c += VW) {
#pragma GCC unroll 8
            for (int j = 0; j < nr; j++) {
                float mb[VW];
                for (int b = 0; b < VW; b++)
                    mb[b] = c + b < nb ? i8_half(wr + (size_t)j * rb + (size_t)(c + b) * bb + 2) : 0.0f;
                const vf mv = V_LOADU(mb);
#pragma GCC unroll 8
                for (int i = 0; i < mr; i++)
                    acc[i][j] = V_FMA(mv, V_LOADU(a->ex + (size_t)(m + i) * a->nbq + c), acc[i][j]);
            }
        }
#pragma GCC unroll 8
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
        for (int j = 0; j < nr; j++)
            y[(size_t)(m + i) * ldy + n + j] = V_REDUCE(acc[i][j]) + (bias ? bias[n + j] : 0.0f);
}

/* i8_tilem with mr (1 .. MR_MAX) a run-time count made compile-time. */
AI void i8_tilem_r(const i8_act *a, int nb, const unsigned char *w, size_t rb, kvlm_dtype t, int mr, int nr, int m,
                   int n, const float *bias, float *y, int ldy, int pf) {
#define I8_TILEM_CASE(r)                                                                                       \
    case r: i8_tilem(a, nb, w, rb, t, r, nr, m, n, bias, y, ldy, pf); break;
    switch (mr) {
        I8_TILEM_CASE(1)
        I8_TILEM_CASE(2)
#if MR_MAX >= 3
        I8_TILEM_CASE(3)
#endif
#if MR_MAX >= 4
        I8_TILEM_CASE(4)
#endif
    default: break;
    }
#undef I8_TILEM_CASE
}

