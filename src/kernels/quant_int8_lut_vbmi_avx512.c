/*
 * The weight side of the AVX512-VNNI MXFP4 / IQ4_XS table kernel with
 * AVX512-VBMI (quant_int8_lut_tile.h); quant_int8_lut_avx512.c calls it
 * when the CPU has AVX512-VBMI. Compiled with -mavx512vnni -mavx512vbmi.
 */
#define LUT_VBMI 1
#define LUT_ROWS quant_int8_lut_rows_vbmi_avx512
#include "kernels/quant_int8_lut_tile.h"

unsigned long quant_int8_lut_mx1_calls(void) { return lut_mx1_calls; }
