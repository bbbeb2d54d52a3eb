/*
 * NEON kernel set (4-lane Advanced SIMD vectors) for aarch64: f32, f16 and
 * bf16 weights, attention over f32 / f16 / Q8_0 KV, norms, GELU, SwiGLU,
 * KV stores. Bodies live in simd_template.h, shared with the x86 sets;
 * the block-quantised weights go to quant_neon.c. Built only for aarch64.
 * The tiles are sized for 32 vector registers (every aarch64 core has
 * them): a 4 x 4 register tile for small batches, 4 x 4 for the packed
 * prefill tile.
 */
#include <math.h>
#include <string.h>

#include "kernels/kernels.h"
#include "kernels/vec_f32_neon.h"

/* exp with about 1 ulp of error on [-87, 88] (the x86 sets' polynomial). */
static inline float32x4_t exp_neon(float32x4_t x) {
    x = min_neon(max_neon(x, vdupq_n_f32(-87.0f)), vdupq_n_f32(88.0f));
    const float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.4426950408889634f)));
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693359375f));
    r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
    float32x4_t p = vdupq_n_f32(1.0f / 5040);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 720), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 120), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 24), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 6), p, r);
    p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127)), 23);
    return vmulq_f32(p, vreinterpretq_f32_s32(e));
}

/* out[j] = lane sum of v[j] for j < 8, pairing (l0 + l1) + (l2 + l3) as
 * hsum_neon does. */
static inline void reduce8_neon(const float32x4_t *v, float *out) {
    for (int h = 0; h < 2; h++) {
        const float32x4_t a = vpaddq_f32(v[4 * h], v[4 * h + 1]), b = vpaddq_f32(v[4 * h + 2], v[4 * h + 3]);
        vst1q_f32(out + 4 * h, vpaddq_f32(a, b));
    }
}

/* sign(v) x floor(|v| + 0.5), as the reference rounds (not vrndaq: |v| +
 * 0.5 may round up in f32, and the reference's bits are kept). */
static inline float32x4_t round_away_neon(float32x4_t v) {
    const float32x4_t a = vrndmq_f32(vaddq_f32(vabsq_f32(v), vdupq_n_f32(0.5f)));
    return vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(a),
                                           vandq_u32(vreinterpretq_u32_f32(v), vdupq_n_u32(0x80000000u))));
}

/* 4 integral floats in [-127, 127] as int8. */
static inline void store_i8_neon(int8_t *p, float32x4_t v) {
    const int16x4_t h = vmovn_s32(vcvtq_s32_f32(v));
    const int8x8_t b = vmovn_s16(vcombine_s16(h, h));
    vst1_lane_s32((int32_t *)(void *)p, vreinterpret_s32_s8(b), 0);
}

#define V_DIV(a, b) vdivq_f32((a), (b))
#define V_MIN(a, b) min_neon((a), (b))
#define V_REDUCE(v) hsum_neon(v)
#define V_STORE_F16(p, v) vst1_u16((uint16_t *)(p), vreinterpret_u16_f16(vcvt_f16_f32(v)))
#define V_ABS(v) vabsq_f32(v)
#define V_ROUND_AWAY(v) round_away_neon(v)
#define V_STORE_I8(p, v) store_i8_neon((int8_t *)(p), (v))
#define V_EXP(v) exp_neon(v)
#define MR_MAX 4
#define NR_MAX 4
#define NR1 8
#define V_REDUCE8(v, out) reduce8_neon((v), (out))
#define PK_MR 4
#define PK_NR 4
#define PK_PANEL1 24576
#define PK_PANEL 16384
#define PK_L2 (1 << 20)
#define PK_MC 120
#define PK_MIN_M 8
#define PK_PF 1
#define KERNEL_NAME(n) n##_neon
#define KERNEL_ISA KVLM_ISA_NEON

#include "kernels/simd_template.h"
