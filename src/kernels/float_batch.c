/*
 * The float batch kernel choice (kernels/float_batch.h): both forms timed
 * alternately on a batch of the call's K, best of several samples each,
 * once per process, ISA, weight dtype and K.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/float_batch.h"
#include "tensor.h"

/* 48 rows of x against 48 weight rows of the call's K (2 x 48 x 48 x K
 * flops per call; x and weights in L2 up to K = 8192 f32, as a prefill
 * item's sweep is): one warm-up call of each form, then CAL_ROUNDS rounds
 * alternating which goes first, best call of each. Past CAL_MAX_K nothing
 * is timed (packed). */
enum { CAL_M = 48, CAL_N = 48, CAL_ROUNDS = 5, CAL_MAX_K = 65536 };

typedef struct choice {
    int slot, dtype, K;
    kern_float_batch fb;
} choice;

/* Written under the lock and published by count (release), so readers
 * scan the first count entries without it. */
#define MAX_CHOICES 64
static choice choices[MAX_CHOICES];
static int count;
static pthread_mutex_t measuring = PTHREAD_MUTEX_INITIALIZER;

/* The -vnni and -bf16 sets run their base set's float kernels (for the
 * dtypes of their batch_forms): one measurement. */
static int isa_slot(kvlm_isa isa) {
    if (isa == KVLM_ISA_AVX512_VNNI || isa == KVLM_ISA_AVX512_BF16) return KVLM_ISA_AVX512;
    if (isa == KVLM_ISA_AVX2_VNNI) return KVLM_ISA_AVX2;
    if (isa == KVLM_ISA_NEON_DOTPROD || isa == KVLM_ISA_NEON_I8MM || isa == KVLM_ISA_NEON_BF16) return KVLM_ISA_NEON;
    return (int)isa;
}

static void measure(const kern_ops *ops, kvlm_dtype t, int K, kern_float_batch *out) {
    const size_t nx = (size_t)CAL_M * K, nw = (size_t)CAL_N * K;
    float *x = malloc(sizeof(float) * nx), *y = malloc(sizeof(float) * CAL_M * CAL_N);
    void *wd = malloc(nw * kvlm_dtype_size(t));
    if (!x || !y || !wd) { /* keep the packed form */
        free(x), free(y), free(wd);
        return;
    }
    unsigned s = 12345u;
    for (size_t i = 0; i < nx; i++) s = s * 1664525u + 1013904223u, x[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    for (size_t i = 0; i < nw; i++)
        s = s * 1664525u + 1013904223u, dtype_store(t, wd, i, (float)(s >> 8) / 16777216.0f - 0.5f);
    const kern_matrix w = {t, wd, CAL_N, K, NULL, 0};
    const kern_rows_fn fn[2] = {ops->matmul_rows, ops->matmul_rows_direct};
    double best[2] = {1e30, 1e30};
    for (int f = 0; f < 2; f++) fn[f](x, CAL_M, &w, 0, CAL_N, NULL, y, CAL_N);
    for (int r = 0; r < CAL_ROUNDS; r++)
        for (int h = 0; h < 2; h++) {
            const int f = h ^ (r & 1);
            const double t0 = kvlm_now();
            fn[f](x, CAL_M, &w, 0, CAL_N, NULL, y, CAL_N);
            const double dt = kvlm_now() - t0;
            if (dt < best[f]) best[f] = dt;
        }
    out->direct = best[1] < best[0];
    out->packed_us = best[0] * 1e6, out->direct_us = best[1] * 1e6;
    free(x), free(y), free(wd);
}

static const choice *find(int slot, kvlm_dtype t, int K, int n) {
    for (int i = 0; i < n; i++)
        if (choices[i].slot == slot && choices[i].dtype == (int)t && choices[i].K == K) return &choices[i];
    return NULL;
}

int kern_float_batch_get(const kern_ops *ops, kvlm_dtype t, int K, kern_float_batch *out) {
    if ((unsigned)t >= 32 || !(ops->batch_forms >> t & 1u) || !ops->matmul_rows_direct || K < 1) return -1;
    const int slot = isa_slot(ops->isa);
    const choice *c = find(slot, t, K, __atomic_load_n(&count, __ATOMIC_ACQUIRE));
    if (!c) {
        pthread_mutex_lock(&measuring);
        const int n = count;
        c = find(slot, t, K, n);
        if (!c && n < MAX_CHOICES) {
            choice *e = &choices[n];
            *e = (choice){slot, (int)t, K, {0}};
            const char *env = getenv("KVLM_FLOAT_BATCH");
            if (env && (!strcmp(env, "packed") || !strcmp(env, "direct")))
                e->fb.direct = !strcmp(env, "direct"), e->fb.forced = 1;
            else if (K <= CAL_MAX_K)
                measure(ops, t, K, &e->fb);
            __atomic_store_n(&count, n + 1, __ATOMIC_RELEASE);
            c = e;
        }
        pthread_mutex_unlock(&measuring);
        if (!c) return -1; /* table full: the packed form */
    }
    if (out) *out = c->fb;
    return c->fb.direct;
}

kern_rows_fn kern_float_batch_rows(const kern_ops *ops, const kern_matrix *w, int M) {
    if (M >= 2 && kern_float_batch_get(ops, w->dtype, w->cols, NULL) == 1) return ops->matmul_rows_direct;
    return ops->matmul_rows;
}
