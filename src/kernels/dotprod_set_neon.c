/*
 * The kern_ops of the neon-dotprod level: every op that of the neon set,
 * except that matmul_rows and its prepared form send Q8_0, Q4_0, Q4_K,
 * Q5_K and Q6_K weights to the int8 dot-product kernels of
 * quant_int8_dotprod.c; and of the neon-i8mm level: neon-dotprod's, with
 * the Q8_0 / Q4_0 / K-quant matmuls of two or more rows sent to
 * quant_int8_i8mm.c (whose K-quant panel holds two weight rows).
 * Built once, on first use. Compiled without the dot-product or i8mm
 * flags: nothing here runs one of their instructions. aarch64 only.
 */
#include <pthread.h>

#include "kernels/quant_int8.h"

static kern_ops ops, ops_i8mm;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void build(void) {
    ops = kern_ops_neon;
    ops.isa = KVLM_ISA_NEON_DOTPROD;
    ops.matmul_rows = quant_int8_dotprod_matmul_rows;
    ops.matmul_prep_bytes = quant_int8_dotprod_prep_bytes;
    ops.matmul_prep = quant_int8_dotprod_prep;
    ops.matmul_rows_prep = quant_int8_dotprod_rows_prep;
    ops_i8mm = ops;
    ops_i8mm.isa = KVLM_ISA_NEON_I8MM;
    ops_i8mm.matmul_rows = quant_int8_i8mm_matmul_rows;
    ops_i8mm.matmul_prep_bytes = quant_int8_i8mm_prep_bytes;
    ops_i8mm.matmul_rows_prep = quant_int8_i8mm_rows_prep;
}

const kern_ops *dotprod_ops(void) {
    pthread_once(&once, build);
    return &ops;
}

const kern_ops *i8mm_ops(void) {
    pthread_once(&once, build);
    return &ops_i8mm;
}
