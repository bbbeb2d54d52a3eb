/*
 * The float-vector vocabulary the kernel bodies are written in
 * (simd_template.h, attn_tile_body.h, quant_simd.h), for aarch64 Advanced
 * SIMD (NEON): 4 f32 lanes per vector (VW), the arithmetic, and the loads
 * that widen f16, bf16 and int8 values to f32 exactly. NEON is part of
 * every aarch64 CPU, so no target flag is needed. V_MAX / V_MIN keep the
 * x86 operand rule the bodies rely on (a NaN first operand gives the
 * second), not fmax/fmin's.
 */
#ifndef KVLM_VEC_F32_NEON_H
#define KVLM_VEC_F32_NEON_H

#include <arm_neon.h>
#include <stdint.h>
#include <string.h>

static inline float32x4_t max_neon(float32x4_t a, float32x4_t b) { return vbslq_f32(vcgtq_f32(a, b), a, b); }
static inline float32x4_t min_neon(float32x4_t a, float32x4_t b) { return vbslq_f32(vcltq_f32(a, b), a, b); }

/* 4 int8 values as f32. */
static inline float32x4_t load_i8_neon(const int8_t *p) {
    int32_t w;
    memcpy(&w, p, 4);
    const int16x8_t h = vmovl_s8(vreinterpret_s8_s32(vdup_n_s32(w)));
    return vcvtq_f32_s32(vmovl_s16(vget_low_s16(h)));
}

/* One f16 (its bits) as f32. */
static inline float f16_neon(uint16_t h) {
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

/* Lane sum in a fixed order: (l0 + l1) + (l2 + l3). */
static inline float hsum_neon(float32x4_t v) {
    const float32x4_t p = vpaddq_f32(v, v);
    return vgetq_lane_f32(vpaddq_f32(p, p), 0);
}

#define VW 4
#define vf float32x4_t
#define V_ZERO() vdupq_n_f32(0.0f)
#define V_SET1(s) vdupq_n_f32(s)
#define V_LOADU(p) vld1q_f32(p)
#define V_STOREU(p, v) vst1q_f32((p), (v))
#define V_FMA(a, b, c) vfmaq_f32((c), (a), (b))
#define V_ADD(a, b) vaddq_f32((a), (b))
#define V_SUB(a, b) vsubq_f32((a), (b))
#define V_MUL(a, b) vmulq_f32((a), (b))
#define V_MAX(a, b) max_neon((a), (b))
#define V_LOAD_F16(p) vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16((const uint16_t *)(p))))
#define V_LOAD_BF16(p) vreinterpretq_f32_u32(vshll_n_u16(vld1_u16((const uint16_t *)(p)), 16))
#define V_LOAD_I8(p) load_i8_neon((const int8_t *)(p))
#define S_F16(h) f16_neon(h)
/* Keeps a loaded vector in a register (simd_template.h's packed tile). */
#define V_PIN(v) __asm__("" : "+w"(v))

#endif
