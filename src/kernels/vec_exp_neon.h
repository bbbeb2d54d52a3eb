/*
 * The vector exponential of vec_exp_body.h instantiated for NEON (4
 * lanes), with lanes below its range set to exactly 0: vec_exp4(x).
 * Included by the NEON files that need it (the sampler's softmax, the
 * tiled attention's online softmax). The intrinsics never fuse a multiply
 * and an add, so the reference's bits are kept.
 */
#ifndef KVLM_KERNELS_VEC_EXP_NEON_H
#define KVLM_KERNELS_VEC_EXP_NEON_H

#include <arm_neon.h>

#define EV float32x4_t
#define EVI int32x4_t
#define EV_SET1 vdupq_n_f32
#define EV_ADD vaddq_f32
#define EV_SUB vsubq_f32
#define EV_MUL vmulq_f32
#define EV_MIN(a, b) vbslq_f32(vcltq_f32((a), (b)), (a), (b))
#define EVI_SET1 vdupq_n_s32
#define EVI_ADD vaddq_s32
#define EVI_SLLI(v, n) vshlq_n_s32((v), (n))
#define EV_TO_I vcvtnq_s32_f32
#define EVI_AS_EV vreinterpretq_f32_s32
#include "kernels/vec_exp_body.h"

static inline float32x4_t vec_exp4(float32x4_t x) {
    const uint32x4_t live = vcgeq_f32(x, vdupq_n_f32(VEC_EXP_LO));
    return vreinterpretq_f32_u32(vandq_u32(live, vreinterpretq_u32_f32(vec_exp_raw(x))));
}

#endif
