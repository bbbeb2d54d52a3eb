/*
 * Run-time choice of kernel set from cpuid, and the threaded matmul driver
 * that splits output features into items for the caller's team (its own
 * pool, kernels/team.h; the process-wide OpenMP default is never used).
 */
#include <math.h>
#include <stdlib.h>
#include <omp.h>

#include "kernels/kernels.h"
#include "kernels/quant_int8.h"
#include "kernels/team.h"

int kern_cpu_supports(kvlm_isa isa) {
    __builtin_cpu_init();
    switch (isa) {
    case KVLM_ISA_SCALAR: return 1;
    case KVLM_ISA_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("f16c");
    case KVLM_ISA_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    case KVLM_ISA_AVX512_VNNI:
        return kern_cpu_supports(KVLM_ISA_AVX512) && __builtin_cpu_supports("avx512vnni");
    case KVLM_ISA_AVX2_VNNI:
        return kern_cpu_supports(KVLM_ISA_AVX2) && __builtin_cpu_supports("avxvnni");
    default: return 0;
    }
}

/* Int8 activations (the -vnni levels) where the CPU has the dot products. */
kvlm_isa kvlm_isa_best(void) {
    if (kern_cpu_supports(KVLM_ISA_AVX512_VNNI)) return KVLM_ISA_AVX512_VNNI;
    if (kern_cpu_supports(KVLM_ISA_AVX512)) return KVLM_ISA_AVX512;
    if (kern_cpu_supports(KVLM_ISA_AVX2_VNNI)) return KVLM_ISA_AVX2_VNNI;
    if (kern_cpu_supports(KVLM_ISA_AVX2)) return KVLM_ISA_AVX2;
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
    }
    return "?";
}

const kern_ops *kern_select(kvlm_isa isa) {
    if (isa == KVLM_ISA_AUTO) isa = kvlm_isa_best();
    if (!kern_cpu_supports(isa)) return NULL;
    switch (isa) {
    case KVLM_ISA_SCALAR: return &kern_ops_scalar;
    case KVLM_ISA_AVX2: return &kern_ops_avx2;
    case KVLM_ISA_AVX512: return &kern_ops_avx512;
    case KVLM_ISA_AVX512_VNNI: case KVLM_ISA_AVX2_VNNI: return quant_int8_ops(isa);
    default: return NULL;
    }
}

int kern_load_threads(void) { return omp_get_num_procs(); }

typedef struct matmul_job {
    const kern_ops *ops;
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
        j->ops->matmul_rows(j->x, j->M, j->w, n0, n1, j->bias, j->y, j->ldy);
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

/* Output features are split into items that are a multiple of the SIMD
 * tile so every thread streams whole weight rows (8 items per thread of
 * the team, so a late thread's share is small); small matrices stay on the
 * caller, whose work would be smaller than waking a thread. Every output
 * element is computed by one item, with one accumulation order, whatever
 * the split. */
void kern_matmul(const kern_ops *ops, kern_team *team, const float *x, int M, const kern_matrix *w,
                 const float *bias, float *y, int ldy) {
    const int N = w->rows;
    double work = (double)M * N * w->cols;
    const int nt = team->threads;
    if (nt <= 1 || work < 65536.0) {
        kern_team_note(team);
        ops->matmul_rows(x, M, w, 0, N, bias, y, ldy);
        return;
    }
    int chunks = nt * 8;
    int step = (N + chunks - 1) / chunks;
    step = (step + 15) & ~15;
    matmul_job j = {ops, x, w, bias, y, M, ldy, step, N, NULL, 0, 0};
    /* the prepared form of x is made once, on the caller, then shared */
    size_t panel = 0, pre = ops->matmul_prep_bytes && team->pool ? ops->matmul_prep_bytes(M, w, &panel) : 0;
    if (pre) {
        pre = (pre + 63) & ~(size_t)63, panel = (panel + 63) & ~(size_t)63;
        unsigned char *buf = team_scratch(team, pre + panel * (size_t)nt);
        if (buf) {
            ops->matmul_prep(x, M, w, 0, M, buf);
            j.prep = buf, j.pre = pre, j.panel = panel;
        }
    }
    kern_team_run(team, (N + step - 1) / step, matmul_item, &j);
}

void kern_softmax(float *x, int n) {
    float mx = x[0];
    for (int i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    float sum = 0;
    for (int i = 0; i < n; i++) { x[i] = expf(x[i] - mx); sum += x[i]; }
    float inv = 1.0f / sum;
    for (int i = 0; i < n; i++) x[i] *= inv;
}
