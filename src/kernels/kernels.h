/*
 * Compute kernels: matrix multiplication against weights in their stored
 * dtype, attention over a block table, LayerNorm, GELU, softmax.
 *
 * Every kernel has a plain C version (the reference the tests compare
 * against) and SIMD versions (AVX2, AVX-512 on x86-64; NEON and the
 * dot-product extension on aarch64) compiled in their own files with their
 * own target flags; kern_select() picks one set at run time from what the
 * CPU reports (cpu_features.c). The kernels know nothing about models or requests: weights arrive as
 * a kern_matrix, KV as per-block pointers.
 *
 * Weight layout is always [rows = out features][cols = in features], row
 * major (PyTorch Linear); loaders transpose other layouts once at load time.
 */
#ifndef KVLM_KERNELS_H
#define KVLM_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "kvlm.h"

typedef struct kern_matrix {
    kvlm_dtype dtype;
    const void *data;
    int rows;   /* N: output features */
    int cols;   /* K: input features (a multiple of dtype_block_len for blocked dtypes) */
    /* Q4_0 only, or NULL: the same weights in the packed layout of
     * kernels/q4_0_packed.h (at least ceil(rows / 4) tiles), made at load
     * for the AVX512-VNNI decode kernel, which then reads it instead of
     * data; every other kernel reads data. */
    const void *packed;
    /* MXFP4 only: the smallest scale byte of the matrix (tensor.e8m0_min),
     * or 0 when not known. */
    uint8_t e8m0_min;
} kern_matrix;

/* One ISA's implementation of the inner loops. */
typedef struct kern_ops {
    kvlm_isa isa;
    /* y[m*ldy + n] = bias[n] + sum_k x[m*K + k] * W[n, k] for m < M and
     * n0 <= n < n1 (one thread's share; bias may be NULL). */
    void (*matmul_rows)(const float *x, int M, const kern_matrix *w, int n0, int n1,
                        const float *bias, float *y, int ldy);
    /* matmul_rows for the weight dtypes in batch_forms without packing
     * them into panels at any batch size (NULL in sets that never pack):
     * the same bits, faster on some CPUs (kernels/float_batch.h picks one). */
    void (*matmul_rows_direct)(const float *x, int M, const kern_matrix *w, int n0, int n1,
                               const float *bias, float *y, int ldy);
    /* Bit 1 << dtype for each weight dtype whose batches have those two
     * forms (f32, f16, bf16 in the avx2 / avx512 sets; 0 without a
     * direct form). */
    unsigned batch_forms;
    /* scores[j] = scale * dot(q, k_j) for j < n, k_j = k + j * d in kv dtype
     * (f32, f16, or Q8_0 with d a multiple of 32: rows of d / 32 blocks). */
    void (*attn_scores)(const float *q, const void *k, kvlm_dtype kt, int n, int d,
                        float scale, float *scores);
    /* out[i] += sum_j p[j] * v_j[i] for j < n, v_j = v + j * d (rows in vt
     * as for attn_scores). */
    void (*attn_accum)(const float *p, const void *v, kvlm_dtype vt, int n, int d, float *out);
    /* The two above for the `heads` query heads of one KV group in one pass
     * over the keys (values): head h's query is q + h * d, its scores
     * scores + h * lds; its weights p + h * ldp, its output out + h * d.
     * Each head gets the same bits as from attn_scores / attn_accum alone. */
    void (*attn_scores_heads)(const float *q, int heads, const void *k, kvlm_dtype kt, int n, int d, float scale,
                              float *scores, size_t lds);
    void (*attn_accum_heads)(const float *p, size_t ldp, int heads, const void *v, kvlm_dtype vt, int n, int d,
                             float *out);
    /* In place: x = gelu_tanh(x). */
    void (*gelu)(float *x, size_t n);
    /* out = (x - mean) / sqrt(var + eps) * w + b over one row of n. */
    void (*layernorm)(const float *x, const float *w, const float *b, int n, float eps, float *out);
    /* out = x / sqrt(mean(x^2) + eps) * w over one row of n. */
    void (*rmsnorm)(const float *x, const float *w, int n, float eps, float *out);
    /* out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)). */
    void (*swiglu)(const float *gate, const float *up, float *out, size_t n);
    /* out[i] = gelu_tanh(gate[i]) * up[i] (GeGLU: Gemma's MLP). */
    void (*geglu)(const float *gate, const float *up, float *out, size_t n);
    /* In place: x = cap * tanh(x / cap) (logit soft-capping, cap > 0). */
    void (*softcap)(float *x, size_t n, float cap);
    /* Writes x[i] in dst dtype (KV cache stores; Q8_0 rows are rounded as
     * quant_quantize_row does on every ISA, n a multiple of 32). */
    void (*store_row)(void *dst, kvlm_dtype t, const float *x, int n);
    /* Optional (NULL in sets without it): matmul_rows split into work done
     * once per matmul on x and the per-item work, for kern_matmul.
     * matmul_prep_bytes(M, w, &panel) is the size of x's prepared form (0:
     * this call has none, use matmul_rows) and sets panel to the scratch
     * each concurrent matmul_rows_prep needs (64-byte aligned buffers);
     * matmul_prep writes rows [m0, m1) of the prepared form (all rows
     * before any matmul_rows_prep); matmul_rows_prep is matmul_rows for
     * its share, with the same bits whatever the split. */
    size_t (*matmul_prep_bytes)(int M, const kern_matrix *w, size_t *panel);
    void (*matmul_prep)(const float *x, int M, const kern_matrix *w, int m0, int m1, void *buf);
    void (*matmul_rows_prep)(const void *buf, void *panel, const kern_matrix *w, int n0, int n1,
                             const float *bias, float *y, int ldy);
} kern_ops;

/* matmul_rows for block-quantised weights (kernels/quant.h), one per ISA;
 * the matmul_rows of each kern_ops calls its own for those dtypes. The
 * scalar one takes every blocked dtype; the SIMD ones are split by dtype:
 * quant_matmul_rows_* for Q8_0 / Q4_0 (quant_simd.h), quant_wide_* for the
 * others (quant_wide.h). */
void quant_matmul_rows_scalar(const float *x, int M, const kern_matrix *w, int n0, int n1,
                              const float *bias, float *y, int ldy);
void quant_matmul_rows_avx2(const float *x, int M, const kern_matrix *w, int n0, int n1,
                            const float *bias, float *y, int ldy);
void quant_matmul_rows_avx512(const float *x, int M, const kern_matrix *w, int n0, int n1,
                              const float *bias, float *y, int ldy);
void quant_wide_matmul_rows_avx2(const float *x, int M, const kern_matrix *w, int n0, int n1,
                                 const float *bias, float *y, int ldy);
void quant_wide_matmul_rows_avx512(const float *x, int M, const kern_matrix *w, int n0, int n1,
                                   const float *bias, float *y, int ldy);

/* aarch64: Q8_0 / Q4_0 (quant_simd.h) and the other block types
 * (quant_neon.c) against f32 activations, with NEON. */
void quant_matmul_rows_neon(const float *x, int M, const kern_matrix *w, int n0, int n1,
                            const float *bias, float *y, int ldy);
void quant_wide_matmul_rows_neon(const float *x, int M, const kern_matrix *w, int n0, int n1,
                                 const float *bias, float *y, int ldy);

extern const kern_ops kern_ops_scalar;
extern const kern_ops kern_ops_avx2;
extern const kern_ops kern_ops_avx512;
extern const kern_ops kern_ops_neon;
/* The neon-dotprod set (dotprod_set_neon.c): kern_ops_neon with int8
 * activations for Q8_0, Q4_0, Q4_K, Q5_K and Q6_K weights. */
const kern_ops *dotprod_ops(void);
/* The neon-i8mm set (dotprod_set_neon.c): the neon-dotprod set with SMMLA
 * for the Q8_0 / Q4_0 / K-quant matmuls of two or more rows
 * (quant_int8_i8mm.c). */
const kern_ops *i8mm_ops(void);

/* The ops for isa (AUTO resolves with cpuid); NULL if the CPU lacks it. */
const kern_ops *kern_select(kvlm_isa isa);
int kern_cpu_supports(kvlm_isa isa);

/* The threads a caller lends the kernels: an engine-owned pool
 * (kernels/team.h: kern_team_open starts threads - 1 persistent workers,
 * kern_team_run hands a region's items out to them and to the caller).
 * Nothing process-wide is read or set (no OpenMP in any region an engine
 * opens), so no other engine or host setting changes how many threads run.
 * A worker number stays below `threads`, which is what per-thread scratch
 * is sized for. `peak` is the largest number of threads that actually ran
 * items of one region (written only by the calling thread). A team written
 * as {.threads = N} without kern_team_open has no pool and runs every
 * region on the caller. One kern_team per caller; not shared between
 * threads that step concurrently. */
struct kern_pool;
typedef struct kern_team {
    int threads;             /* >= 1 */
    int peak;                /* 0 until a region (or a serial kernel call) has run */
    struct kern_pool *pool;  /* NULL: every region runs on the caller */
    void *scratch;           /* kern_matmul's prepared x and panels (teams with a pool); freed by kern_team_close */
    size_t scratch_bytes;
} kern_team;

/* A kernel call ran on the caller alone: peak becomes at least 1. */
void kern_team_note(kern_team *t);

/* Threads for one-off work outside any engine (model load: synthetic
 * weights, layout transposes; the read-bandwidth measurement; these use
 * OpenMP): every processor this process may run on (omp_get_num_procs
 * honours the CPU affinity mask, so taskset or a cpuset bounds it). Load runs once, before
 * an engine exists, and its results do not depend on the count. */
int kern_load_threads(void);

/* y = x W^T + bias for M rows, output features split into items of whole
 * 16-row tiles run by the team (at most team->threads threads). x may
 * change once this returns (decode-sized products are staged, see
 * team.h); w->data and bias must stay unchanged until the team is closed
 * (a worker whose item was stolen may still be reading them). */
void kern_matmul(const kern_ops *ops, kern_team *team, const float *x, int M, const kern_matrix *w,
                 const float *bias, float *y, int ldy);

/* Softmax in place over n >= 1 scores, max subtracted, with the vector
 * exponential of vec_softmax.h in the ISA of ops (the same bits on every
 * ISA). */
void kern_softmax(const kern_ops *ops, float *x, int n);

#endif
