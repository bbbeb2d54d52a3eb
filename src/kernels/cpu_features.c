/*
 * Which kernel levels this CPU runs, and their names: cpuid
 * (__builtin_cpu_supports) on x86-64, the hardware capabilities the kernel
 * reports (getauxval(AT_HWCAP)) on Linux/aarch64, the hw.optional sysctls
 * on macOS/arm64. A level of the other architecture is never supported;
 * on any other architecture only the scalar set is. Reads CPU state only:
 * no kernel set is chosen here (dispatch.c does that).
 */
#include "kernels/kernels.h"

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#ifndef HWCAP_ASIMD
#define HWCAP_ASIMD (1ul << 1)
#endif
#ifndef HWCAP_ASIMDDP
#define HWCAP_ASIMDDP (1ul << 20)
#endif
#ifndef HWCAP2_I8MM
#define HWCAP2_I8MM (1ul << 13)
#endif
#ifndef HWCAP2_BF16
#define HWCAP2_BF16 (1ul << 14)
#endif
#elif defined(__aarch64__) && defined(__APPLE__)
#include <sys/sysctl.h>
#endif

#if defined(__aarch64__)
/* Advanced SIMD is part of every aarch64 CPU that Linux and macOS run on;
 * the dot-product instructions came with Armv8.2 (optional there, required
 * from Armv8.4). */
static int arm_has_dotprod(void) {
#if defined(__linux__)
    return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#elif defined(__APPLE__)
    int v = 0;
    size_t n = sizeof v;
    return sysctlbyname("hw.optional.arm.FEAT_DotProd", &v, &n, NULL, 0) == 0 && v != 0;
#else
    return 0; /* no portable query: the neon level only */
#endif
}

/* The int8 matrix multiply (SMMLA) came with Armv8.6 (Graviton 3/4,
 * Neoverse V1/V2/N2, Apple M2 and later). */
static int arm_has_i8mm(void) {
#if defined(__linux__)
    return (getauxval(AT_HWCAP2) & HWCAP2_I8MM) != 0;
#elif defined(__APPLE__)
    int v = 0;
    size_t n = sizeof v;
    return sysctlbyname("hw.optional.arm.FEAT_I8MM", &v, &n, NULL, 0) == 0 && v != 0;
#else
    return 0;
#endif
}

/* The bf16 dot products (BFDOT, BFMMLA) came with Armv8.6 too. */
static int arm_has_bf16(void) {
#if defined(__linux__)
    return (getauxval(AT_HWCAP2) & HWCAP2_BF16) != 0;
#elif defined(__APPLE__)
    int v = 0;
    size_t n = sizeof v;
    return sysctlbyname("hw.optional.arm.FEAT_BF16", &v, &n, NULL, 0) == 0 && v != 0;
#else
    return 0;
#endif
}

static int arm_has_neon(void) {
#if defined(__linux__)
    return (getauxval(AT_HWCAP) & HWCAP_ASIMD) != 0;
#else
    return 1;
#endif
}
#endif

int kern_cpu_supports(kvlm_isa isa) {
    switch (isa) {
    case KVLM_ISA_SCALAR: return 1;
#if defined(__x86_64__)
    case KVLM_ISA_AVX2:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c");
    case KVLM_ISA_AVX512:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case KVLM_ISA_AVX512_VNNI:
        return kern_cpu_supports(KVLM_ISA_AVX512) && __builtin_cpu_supports("avx512vnni");
    case KVLM_ISA_AVX2_VNNI:
        return kern_cpu_supports(KVLM_ISA_AVX2) && __builtin_cpu_supports("avxvnni");
    case KVLM_ISA_AVX512_BF16:
        return kern_cpu_supports(KVLM_ISA_AVX512_VNNI) && __builtin_cpu_supports("avx512bf16");
#elif defined(__aarch64__)
    case KVLM_ISA_NEON: return arm_has_neon();
    case KVLM_ISA_NEON_DOTPROD: return arm_has_neon() && arm_has_dotprod();
    case KVLM_ISA_NEON_I8MM: return arm_has_neon() && arm_has_dotprod() && arm_has_i8mm();
    case KVLM_ISA_NEON_BF16: return arm_has_neon() && arm_has_dotprod() && arm_has_i8mm() && arm_has_bf16();
#endif
    default: return 0;
    }
}

/* Int8 activations (the -vnni, -dotprod levels) and bf16 ones where the
 * CPU has the dot products. */
kvlm_isa kvlm_isa_best(void) {
    static const kvlm_isa order[] = {KVLM_ISA_AVX512_BF16, KVLM_ISA_AVX512_VNNI, KVLM_ISA_AVX512,
                                     KVLM_ISA_AVX2_VNNI,   KVLM_ISA_AVX2,        KVLM_ISA_NEON_BF16, KVLM_ISA_NEON_I8MM,
                                     KVLM_ISA_NEON_DOTPROD, KVLM_ISA_NEON};
    for (size_t i = 0; i < sizeof order / sizeof *order; i++)
        if (kern_cpu_supports(order[i])) return order[i];
    return KVLM_ISA_SCALAR;
}

const char *kvlm_isa_name(kvlm_isa isa) {
    switch (isa) {
    case KVLM_ISA_AUTO: return "auto";
    case KVLM_ISA_SCALAR: return "scalar";
    case KVLM_ISA_AVX2: return "avx2";
    case KVLM_ISA_AVX512: return "avx512";
    case KVLM_ISA_AVX512_VNNI: return "avx512-vnni";
    case KVLM_ISA_AVX2_VNNI: return "avx2-vnni";
    case KVLM_ISA_AVX512_BF16: return "avx512-bf16";
    case KVLM_ISA_NEON: return "neon";
    case KVLM_ISA_NEON_DOTPROD: return "neon-dotprod";
    case KVLM_ISA_NEON_I8MM: return "neon-i8mm";
    case KVLM_ISA_NEON_BF16: return "neon-bf16";
    }
    return "?";
}
