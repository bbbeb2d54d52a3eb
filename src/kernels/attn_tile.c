/*
 * Tiled attention kernels (kernels/attn_tile.h) in plain C: the body of
 * attn_tile_body.h with one-lane "vectors" (every row its own group), and
 * the choice of set by ISA. The exponential is the sampler's reference
 * (vec_expf), 0 below VEC_EXP_LO.
 */
#include <math.h>

#include "kernels/attn_tile.h"
#include "kernels/kernels.h"
#include "kernels/vec_softmax.h"

static inline float hide1(float s, int lo, int hi, int pos) { return pos < lo || pos > hi ? -INFINITY : s; }

#define VW 1
#define KP 8
#define vf float
#define vi int
#define V_ZERO() 0.0f
#define V_SET1(s) (s)
#define V_LOADU(p) (*(p))
#define V_STOREU(p, v) (*(p) = (v))
#define V_FMA(a, b, c) ((a) * (b) + (c))
#define V_ADD(a, b) ((a) + (b))
#define V_SUB(a, b) ((a) - (b))
#define V_MUL(a, b) ((a) * (b))
#define V_DIV(a, b) ((a) / (b))
#define V_MAX(a, b) fmaxf((a), (b))
#define VI_LOADU(p) (*(p))
#define V_HIDE(s, lo, hi, pos) hide1((s), (lo), (hi), (pos))
#define V_EXPZ(x) vec_expf(x)
#define V_UNINF(m) ((m) == -INFINITY ? 0.0f : (m))
#define V_LOAD_F16(p) dtype_load(KVLM_F16, (p), 0)
#define V_LOAD_BF16(p) dtype_load(KVLM_BF16, (p), 0)
#define V_LOAD_I8(p) ((float)*(p))
#define S_F16(h) f16_to_f32(h)
#define TILE_NAME(n) attn_tile_##n##_scalar

#include "kernels/attn_tile_body.h"

const attn_tile_ops attn_tile_scalar = {KVLM_ISA_SCALAR, VW, attn_tile_widen_scalar, attn_tile_update_scalar};

const attn_tile_ops *attn_tile_select(kvlm_isa isa) {
    if (isa == KVLM_ISA_AUTO) isa = kvlm_isa_best();
    if (!kern_cpu_supports(isa)) return NULL;
    switch (isa) {
    case KVLM_ISA_SCALAR: return &attn_tile_scalar;
#if defined(__x86_64__)
    case KVLM_ISA_AVX2: case KVLM_ISA_AVX2_VNNI: return &attn_tile_avx2;
    case KVLM_ISA_AVX512: case KVLM_ISA_AVX512_VNNI: case KVLM_ISA_AVX512_BF16: return &attn_tile_avx512;
#elif defined(__aarch64__)
    case KVLM_ISA_NEON: case KVLM_ISA_NEON_DOTPROD: case KVLM_ISA_NEON_I8MM: case KVLM_ISA_NEON_BF16:
        return &attn_tile_neon;
#endif
    default: return NULL;
    }
}
