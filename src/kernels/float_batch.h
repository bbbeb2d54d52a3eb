/*
 * Which kernel multiplies a batch of rows (prefill, batched decode) by
 * f32 / f16 / bf16 weights: an ISA's packed panels (matmul_rows: weights
 * widened into an f32 panel once and swept by every row of the batch) or
 * its tiles straight from the stored weights (matmul_rows_direct). Both
 * give the same bits; which one is faster depends on the CPU (packed
 * 1.06-1.7x on an Intel Xeon against an earlier direct kernel, direct
 * 1.1-1.4x on AMD Zen 4 for f16, docs/performance.md),
 * so each process measures the two once per ISA, weight dtype and K (the
 * input features: from 768 to 8192 the faster form changed with K for f32
 * on Zen 4), on the thread that first needs the answer, and keeps the
 * faster.
 * KVLM_FLOAT_BATCH=packed or =direct in the environment skips the
 * measurement (benchmarks comparing the two); any other value is ignored.
 */
#ifndef KVLM_KERNELS_FLOAT_BATCH_H
#define KVLM_KERNELS_FLOAT_BATCH_H

#include "kernels/kernels.h"

typedef void (*kern_rows_fn)(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias,
                             float *y, int ldy);

/* What was chosen for one ISA and dtype, and the measurement behind it. */
typedef struct kern_float_batch {
    int direct;              /* 1: matmul_rows_direct, 0: matmul_rows */
    int forced;              /* set by KVLM_FLOAT_BATCH, nothing measured */
    double packed_us, direct_us; /* best time of each on the measured shape */
} kern_float_batch;

/* The matmul_rows form for an M-row batch of w under ops: ops->matmul_rows
 * unless w's dtype is in ops->batch_forms, M >= 2 and the direct form
 * measured faster for that dtype and K. Measures on first use (0.1-5 ms,
 * growing with K). */
kern_rows_fn kern_float_batch_rows(const kern_ops *ops, const kern_matrix *w, int M);

/* The choice for ops, a float dtype t and K input features (measuring it
 * if not yet done): 1 direct, 0 packed, -1 if ops has one form for t (t
 * not in ops->batch_forms) or the process holds too many choices
 * (packed). */
int kern_float_batch_get(const kern_ops *ops, kvlm_dtype t, int K, kern_float_batch *out);

#endif
