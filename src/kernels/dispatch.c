/*
 * Run-time choice of kernel set from cpuid, and the threaded matmul driver
 * that splits output features across the caller's threads (a kern_team:
 * every region names its team size; the process-wide OpenMP default is
 * never used).
 */
#include <math.h>
#include <omp.h>

#include "kernels/kernels.h"
#include "kernels/quant_int8.h"

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

void kern_team_note(kern_team *t) {
    if (omp_get_thread_num() != 0) return;
    const int n = omp_get_num_threads();
    if (n > t->peak) t->peak = n;
}

/* Output features are split into chunks that are a multiple of the SIMD
 * tile so every thread streams whole weight rows; small matrices stay on one
 * thread to avoid fork/join costs larger than the work. */
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
    #pragma omp parallel num_threads(nt)
    {
        kern_team_note(team);
        #pragma omp for schedule(dynamic, 1)
        for (int n0 = 0; n0 < N; n0 += step) {
            int n1 = n0 + step < N ? n0 + step : N;
            ops->matmul_rows(x, M, w, n0, n1, bias, y, ldy);
        }
    }
}

void kern_softmax(float *x, int n) {
    float mx = x[0];
    for (int i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    float sum = 0;
    for (int i = 0; i < n; i++) { x[i] = expf(x[i] - mx); sum += x[i]; }
    float inv = 1.0f / sum;
    for (int i = 0; i < n; i++) x[i] *= inv;
}
