/*
 * Tiled attention kernels (kernels/attn_tile.h) with NEON: 4 query rows per
 * vector, 8 keys per score pass. aarch64 only; selected by attn_tile_select
 * for the neon levels. The body is attn_tile_body.h; the exponential is
 * the sampler's (vec_exp_neon.h).
 */
#include <arm_neon.h>
#include <math.h>

#include "kernels/vec_f32_neon.h"
#include "kernels/vec_softmax.h"

#include "kernels/vec_exp_neon.h"

static inline float32x4_t hide4(float32x4_t s, int32x4_t lo, int32x4_t hi, int pos) {
    const int32x4_t p = vdupq_n_s32(pos);
    const uint32x4_t hidden = vorrq_u32(vcgtq_s32(lo, p), vcgtq_s32(p, hi));
    return vbslq_f32(hidden, vdupq_n_f32(-INFINITY), s);
}

static inline float32x4_t uninf4(float32x4_t m) {
    const uint32x4_t inf = vceqq_f32(m, vdupq_n_f32(-INFINITY));
    return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(m), inf));
}

#define KP 8
#define V_DIV(a, b) vdivq_f32((a), (b))
#define vi int32x4_t
#define VI_LOADU(p) vld1q_s32((const int32_t *)(p))
#define V_HIDE(s, lo, hi, pos) hide4((s), (lo), (hi), (pos))
#define V_EXPZ(x) vec_exp4(x)
#define V_UNINF(m) uninf4(m)
#define TILE_NAME(n) attn_tile_##n##_neon

#include "kernels/attn_tile_body.h"

const attn_tile_ops attn_tile_neon = {KVLM_ISA_NEON, VW, attn_tile_widen_neon, attn_tile_update_neon};
