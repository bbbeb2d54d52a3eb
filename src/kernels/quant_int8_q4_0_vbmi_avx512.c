/*
 * The weight side of the AVX512-VNNI Q4_0 decode kernel with AVX512-VBMI
 * and GFNI (quant_int8_q4_0_tile.h); quant_int8_q4_0_avx512.c calls it
 * when the CPU has both. Compiled with -mavx512vnni -mavx512vbmi -mgfni.
 */
#define Q40_VBMI 1
#define Q40_ROWS quant_int8_q4_0_rows_vbmi_avx512
#include "kernels/quant_int8_q4_0_tile.h"
