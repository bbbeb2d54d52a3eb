/*
 * AVX512-VNNI instance of the int8 K-quant decode (quant_int8_decode.h):
 * zmm vpdpbusd over two 32-value blocks (KD_ZMM), 32 vector registers, 4
 * weight rows by 4 rows of x per tile. Compiled with the AVX-512 flags plus -mavx512vnni and only called
 * through the avx512-vnni kern_ops (quant_int8.c), after
 * kern_cpu_supports(KVLM_ISA_AVX512_VNNI).
 */
#include <immintrin.h>
#include <stdint.h>

#include "kernels/quant_int8.h"
#include "tensor.h"

#define KD_NR 4
#define KD_MR 4
#define KDNAME(n) n##_avx512

#include "kernels/quant_int8_decode.h"
