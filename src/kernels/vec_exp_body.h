/*
 * The sampler's exponential, written once for the vector kernels of
 * vec_softmax_avx2.c and vec_softmax_avx512.c: the same operations in the
 * same order as vec_expf in vec_softmax.c (no fused multiply-add), so every
 * ISA gives the reference's bits. Include only from those files, after
 * defining:
 *
 *   EV            float vector type        EVI  int32 vector type
 *   EV_SET1(s) EV_ADD EV_SUB EV_MUL EV_MIN
 *   EVI_SET1(s) EVI_ADD EVI_SLLI(v, n) EV_TO_I(v) (round to int)
 *   EVI_AS_EV(v)  the int lanes' bits as floats
 *
 * vec_exp_raw(x) is exp(x) for x in [VEC_EXP_LO, VEC_EXP_HI] after the
 * clamp to VEC_EXP_HI; the caller zeroes the lanes below VEC_EXP_LO (a
 * mask on AVX-512, an and on AVX2).
 */
static inline EV vec_exp_raw(EV x) {
    x = EV_MIN(x, EV_SET1(VEC_EXP_HI));
    const EV magic = EV_SET1(VEC_EXP_MAGIC);
    const EV t = EV_ADD(EV_MUL(x, EV_SET1(VEC_EXP_LOG2E)), magic);
    const EV k = EV_SUB(t, magic);
    EV r = EV_SUB(x, EV_MUL(k, EV_SET1(VEC_EXP_LN2_HI)));
    r = EV_SUB(r, EV_MUL(k, EV_SET1(VEC_EXP_LN2_LO)));
    EV p = EV_SET1(VEC_EXP_C0);
    p = EV_ADD(EV_MUL(p, r), EV_SET1(VEC_EXP_C1));
    p = EV_ADD(EV_MUL(p, r), EV_SET1(VEC_EXP_C2));
    p = EV_ADD(EV_MUL(p, r), EV_SET1(VEC_EXP_C3));
    p = EV_ADD(EV_MUL(p, r), EV_SET1(VEC_EXP_C4));
    p = EV_ADD(EV_MUL(p, r), EV_SET1(VEC_EXP_C5));
    const EV y = EV_ADD(EV_ADD(EV_MUL(p, EV_MUL(r, r)), r), EV_SET1(1.0f));
    const EVI bits = EVI_SLLI(EVI_ADD(EV_TO_I(k), EVI_SET1(127)), 23);
    return EV_MUL(y, EVI_AS_EV(bits));
}
