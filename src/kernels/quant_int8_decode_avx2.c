/*
 * AVX-VNNI instance of the int8 K-quant decode (quant_int8_decode.h), for
 * CPUs with AVX-VNNI but without AVX-512: ymm vpdpbusd (VEX form, 16
 * vector registers), 2 weight rows by 1 row of x per tile (the wider tile
 * unmeasured on a CPU of this level). Compiled with the AVX2 flags
 * plus -mavxvnni and only called through the avx2-vnni kern_ops
 * (quant_int8.c), after kern_cpu_supports(KVLM_ISA_AVX2_VNNI).
 */
#include <immintrin.h>
#include <stdint.h>

#include "kernels/quant_int8.h"
#include "tensor.h"

#define KD_NR 2
#define KD_MR 1
#define KDNAME(n) n##_avx2

#include "kernels/quant_int8_decode.h"
