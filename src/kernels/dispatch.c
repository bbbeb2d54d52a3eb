/*
 * Run-time choice of kernel set (what the CPU has: cpu_features.c), and
 * the threaded matmul driver
 * that splits output features into items for the caller's team (its own
 * pool, kernels/team.h; the process-wide OpenMP default is never used).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16_dot.h"
#include "kernels/float_batch.h"
#include "kernels/kernels.h"
#include "kernels/quant_int8.h"
#include "kernels/team.h"
#include "kernels/vec_softmax.h"
#include "omp_compat.h"

const kern_ops *kern_select(kvlm_isa isa) {
    if (isa == KVLM_ISA_AUTO) isa = kvlm_isa_best();
    if (!kern_cpu_supports(isa)) return NULL;
    switch (isa) {
    case KVLM_ISA_SCALAR: return &kern_ops_scalar;
#if defined(__x86_64__)
    case KVLM_ISA_AVX2: return &kern_ops_avx2;
    case KVLM_ISA_AVX512: return &kern_ops_avx512;
    case KVLM_ISA_AVX512_VNNI: case KVLM_ISA_AVX2_VNNI: return quant_int8_ops(isa);
    case KVLM_ISA_AVX512_BF16: return bf16_dot_ops();
#elif defined(__aarch64__)
    case KVLM_ISA_NEON: return &kern_ops_neon;
    case KVLM_ISA_NEON_DOTPROD: return dotprod_ops();
    case KVLM_ISA_NEON_I8MM: return i8mm_ops();
    case KVLM_ISA_NEON_BF16: return bf16_dot_ops();
#endif
    default: return NULL;
    }
}

int kern_load_threads(void) { return omp_get_num_procs(); }

typedef struct matmul_job {
    const kern_ops *ops;
    kern_rows_fn rows;   /* ops' matmul_rows form for this batch (kernels/float_batch.h) */
    const float *x;
    const kern_matrix *w;
    const float *bias;
    float *y;
    int M, ldy, step, N;
    unsigned char *prep; /* x's prepared form (NULL: matmul_rows) */
    size_t pre, panel;   /* its bytes; then scratch bytes per worker */
} matmul_job;

static void matmul_item(void *ctx, int item, int worker) {
    const matmul_job *j = ctx;
    const int n0 = item * j->step, n1 = n0 + j->step < j->N ? n0 + j->step : j->N;
    if (j->prep)
        j->ops->matmul_rows_prep(j->prep, j->prep + j->pre + j->panel * (size_t)worker, j->w, n0, n1, j->bias, j->y,
                                 j->ldy);
    else
        j->rows(j->x, j->M, j->w, n0, n1, j->bias, j->y, j->ldy);
}

/* A staged matmul (kern_team_stage): the job, then x's copy or prepared
 * form and one panel per thread, all in the stage, so a worker that is
 * still computing after the region returned reads only the stage and the
 * weights. Its private outputs are M rows of `step` floats. */
typedef struct staged_matmul {
    const kern_ops *ops;
    kern_rows_fn rows;
    kern_matrix w;      /* a copy: the caller's may live on its stack */
    const float *bias;  /* weights: unchanged while the team lives */
    float *y;
    int M, ldy, step, N;
    const float *x;                 /* the stage's copy of x (NULL with prep) */
    const unsigned char *prep;      /* the stage's prepared x */
    unsigned char *panels;          /* panel bytes per thread */
    size_t panel;
} staged_matmul;

static void staged_matmul_item(const void *ctx, int item, int worker, void *out) {
    const staged_matmul *j = ctx;
    const int n0 = item * j->step, n1 = n0 + j->step < j->N ? n0 + j->step : j->N;
    float *y = j->y;
    int ldy = j->ldy;
    if (out) { /* rows of `step` floats whose first column is n0: the kernel writes y[m * ldy + n], n0 <= n < n1 */
        y = (float *)((uintptr_t)out - (uintptr_t)n0 * sizeof(float));
        ldy = j->step;
    }
    if (j->prep)
        j->ops->matmul_rows_prep(j->prep, j->panels + j->panel * (size_t)worker, &j->w, n0, n1, j->bias, y, ldy);
    else
        j->rows(j->x, j->M, &j->w, n0, n1, j->bias, y, ldy);
}

static void staged_matmul_commit(const void *ctx, int item, const void *out) {
    const staged_matmul *j = ctx;
    const int n0 = item * j->step, n1 = n0 + j->step < j->N ? n0 + j->step : j->N;
    const float *o = out;
    for (int m = 0; m < j->M; m++)
        memcpy(j->y + (size_t)m * j->ldy + n0, o + (size_t)m * j->step, (size_t)(n1 - n0) * sizeof(float));
}

/* The team's scratch of at least n bytes (64-byte aligned), NULL if it
 * cannot grow. */
static unsigned char *team_scratch(kern_team *team, size_t n) {
    if (team->scratch_bytes >= n) return team->scratch;
    free(team->scratch);
    n = (n + 65535) & ~(size_t)65535;
    team->scratch = aligned_alloc(64, n);
    team->scratch_bytes = team->scratch ? n : 0;
    return team->scratch;
}

/* Stages the matmul and runs it as a stealable region; returns 0, or -1
 * when it cannot be staged (nothing ran). */
static int matmul_staged(const kern_ops *ops, kern_rows_fn rows, kern_team *team, const float *x, int M,
                         const kern_matrix *w, const float *bias, float *y, int ldy, int step, size_t pre,
                         size_t panel) {
    const int N = w->rows, items = (N + step - 1) / step, K = w->cols;
    const size_t head = (sizeof(staged_matmul) + 63) & ~(size_t)63;
    const size_t input = pre ? pre : (((size_t)M * K * sizeof(float) + 63) & ~(size_t)63);
    unsigned char *stage = kern_team_stage(team, items, head + input + panel * (size_t)team->threads,
                                           (size_t)M * step * sizeof(float));
    if (!stage) return -1;
    staged_matmul *j = (staged_matmul *)stage;
    *j = (staged_matmul){ops, rows, *w, bias, y, M, ldy, step, N, NULL, NULL, stage + head + input, panel};
    if (pre) {
        ops->matmul_prep(x, M, w, 0, M, stage + head);
        j->prep = stage + head;
    } else {
        memcpy(stage + head, x, (size_t)M * K * sizeof(float));
        j->x = (const float *)(stage + head);
    }
    return kern_team_run_staged(team, items, staged_matmul_item, staged_matmul_commit);
}

/* Output features are split into items that are a multiple of the SIMD
 * tile so every thread streams whole weight rows (8 items per thread of
 * the team, so a late thread's share is small); small matrices stay on the
 * caller, whose work would be smaller than waking a thread. Every output
 * element is computed by one item, with one accumulation order, whatever
 * the split or the thread. Regions are staged (stealable: a worker that
 * the OS deschedules while it holds an item does not hold the caller up)
 * when x's staged form costs nothing extra (its prepared form) or little
 * (a copy of at most STAGE_COPY_ROWS rows: decode and small batches; a
 * prefill's copy would cost a few percent of its compute-bound matmul). */
#define STAGE_COPY_ROWS 16
void kern_matmul(const kern_ops *ops, kern_team *team, const float *x, int M, const kern_matrix *w,
                 const float *bias, float *y, int ldy) {
    const int N = w->rows;
    double work = (double)M * N * w->cols;
    const int nt = team->threads;
    const kern_rows_fn rows = kern_float_batch_rows(ops, w, M);
    if (nt <= 1 || work < 65536.0) {
        kern_team_note(team);
        rows(x, M, w, 0, N, bias, y, ldy);
        return;
    }
    int chunks = nt * 8;
    int step = (N + chunks - 1) / chunks;
    step = (step + 15) & ~15;
    size_t panel = 0, pre = ops->matmul_prep_bytes && team->pool ? ops->matmul_prep_bytes(M, w, &panel) : 0;
    if (pre) pre = (pre + 63) & ~(size_t)63, panel = (panel + 63) & ~(size_t)63;
    if (team->pool && (pre || M <= STAGE_COPY_ROWS) &&
        !matmul_staged(ops, rows, team, x, M, w, bias, y, ldy, step, pre, panel))
        return;
    matmul_job j = {ops, rows, x, w, bias, y, M, ldy, step, N, NULL, 0, 0};
    /* the prepared form of x is made once, on the caller, then shared */
    if (pre) {
        unsigned char *buf = team_scratch(team, pre + panel * (size_t)nt);
        if (buf) {
            ops->matmul_prep(x, M, w, 0, M, buf);
            j.prep = buf, j.pre = pre, j.panel = panel;
        }
    }
    kern_team_run(team, (N + step - 1) / step, matmul_item, &j);
}

void kern_softmax(const kern_ops *ops, float *x, int n) {
    const vec_softmax_ops *v = vec_softmax_of(ops->isa);
    const float mx = v->max(x, (size_t)n);
    const double sum = v->exp_sum(x, x, (size_t)n, mx);
    v->div(x, (size_t)n, (float)sum);
}
