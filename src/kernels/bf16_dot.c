/*
 * The avx512-bf16 kernel set (the avx512-vnni set with bf16-weight
 * matmuls sent to bf16_dot_avx512.c, through a prepared form of bf16
 * activations), on aarch64 the neon-bf16 set (the neon-i8mm set with them
 * sent to bf16_dot_arm_bf16.c), and the plain C reference of their math
 * (bf16_dot.h). The kernel sets exist on x86-64 and aarch64; the
 * reference everywhere. Compiled without ISA flags: nothing here runs a
 * vector instruction.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16_dot.h"
#include "kernels/quant_int8.h"
#include "tensor.h"

uint16_t bf16_dot_round(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) == 0) return (uint16_t)((u >> 16) & 0x8000u); /* zero or subnormal: signed zero */
    return f32_to_bf16(x);                                              /* nearest, ties to even; NaN quietened */
}

void bf16_dot_matmul_ref(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias,
                         float *y, int ldy) {
    const int K = w->cols;
    const uint16_t *wd = w->data;
    for (int m = 0; m < M; m++)
        for (int n = n0; n < n1; n++) {
            double acc = 0;
            for (int k = 0; k < K; k++)
                acc += (double)bf16_to_f32(bf16_dot_round(x[(size_t)m * K + k])) * bf16_to_f32(wd[(size_t)n * K + k]);
            y[(size_t)m * ldy + n] = (float)acc + (bias ? bias[n] : 0.0f);
        }
}

#if defined(__x86_64__)
#define BF16_ISA KVLM_ISA_AVX512_BF16
#define BF16_BASE() quant_int8_ops(KVLM_ISA_AVX512_VNNI)
#define BF16_PREP bf16_dot_prep_avx512
#define BF16_ROWS bf16_dot_rows_avx512
#elif defined(__aarch64__)
#define BF16_ISA KVLM_ISA_NEON_BF16
#define BF16_BASE() i8mm_ops()
#define BF16_PREP bf16_dot_prep_neon
#define BF16_ROWS bf16_dot_rows_neon
#endif

#if defined(BF16_ISA)
/* The prepared form: a 64-byte head holding M, then M rows of
 * bf16_dot_stride(K) bf16. */
enum { HEAD = 64 };

static const kern_ops *vnni; /* the level below: avx512-vnni, or neon-i8mm */
static kern_ops ops_bf16;
static pthread_once_t ops_once = PTHREAD_ONCE_INIT;

static size_t prep_bytes(int M, const kern_matrix *w, size_t *panel) {
    if (w->dtype != KVLM_BF16) return vnni->matmul_prep_bytes(M, w, panel);
    *panel = 0;
    return M < 1 ? 0 : HEAD + (size_t)M * (size_t)bf16_dot_stride(w->cols) * sizeof(uint16_t);
}

static void prep(const float *x, int M, const kern_matrix *w, int m0, int m1, void *buf) {
    if (w->dtype != KVLM_BF16) {
        vnni->matmul_prep(x, M, w, m0, m1, buf);
        return;
    }
    *(int *)buf = M;
    BF16_PREP(x, w->cols, m0, m1, (uint16_t *)((unsigned char *)buf + HEAD));
}

static void rows_prep(const void *buf, void *panel, const kern_matrix *w, int n0, int n1, const float *bias,
                      float *y, int ldy) {
    if (w->dtype != KVLM_BF16) {
        vnni->matmul_rows_prep(buf, panel, w, n0, n1, bias, y, ldy);
        return;
    }
    BF16_ROWS((const uint16_t *)((const unsigned char *)buf + HEAD), *(const int *)buf, w, n0, n1,
                         bias, y, ldy);
}

/* matmul_rows without a prepared form: x's bf16 rows in a stack buffer
 * (decode and small batches) or one allocation; without memory for that,
 * the stack buffer's worth of rows at a time (the same bits: each output
 * row depends only on its own row of x). */
enum { STACK_VALUES = 8192 }; /* 16 KB: one row of K <= 8192 */

static void bf16_rows(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias, float *y,
                      int ldy) {
    const int K = w->cols, ks = bf16_dot_stride(K);
    _Alignas(64) uint16_t stack[STACK_VALUES];
    const size_t need = (size_t)M * (size_t)ks;
    uint16_t *xb = need <= STACK_VALUES ? stack : aligned_alloc(64, (need * sizeof(uint16_t) + 63) & ~(size_t)63);
    if (xb) {
        BF16_PREP(x, K, 0, M, xb);
        BF16_ROWS(xb, M, w, n0, n1, bias, y, ldy);
        if (xb != stack) free(xb);
        return;
    }
    const int per = ks <= STACK_VALUES ? STACK_VALUES / ks : 0;
    if (per == 0) { /* one row of more than STACK_VALUES values and no memory: the f32 path */
        vnni->matmul_rows(x, M, w, n0, n1, bias, y, ldy);
        return;
    }
    for (int m = 0; m < M; m += per) {
        const int rows = M - m < per ? M - m : per;
        BF16_PREP(x + (size_t)m * K, K, 0, rows, stack);
        BF16_ROWS(stack, rows, w, n0, n1, bias, y + (size_t)m * ldy, ldy);
    }
}

static void matmul_rows(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias, float *y,
                        int ldy) {
    if (w->dtype == KVLM_BF16 && M >= 1) bf16_rows(x, M, w, n0, n1, bias, y, ldy);
    else vnni->matmul_rows(x, M, w, n0, n1, bias, y, ldy);
}

static void build_ops(void) {
    vnni = BF16_BASE();
    ops_bf16 = *vnni;
    ops_bf16.isa = BF16_ISA;
    ops_bf16.matmul_rows = matmul_rows;
    ops_bf16.batch_forms &= ~(1u << KVLM_BF16); /* one form for bf16: this file's */
    ops_bf16.matmul_prep_bytes = prep_bytes;
    ops_bf16.matmul_prep = prep;
    ops_bf16.matmul_rows_prep = rows_prep;
}

const kern_ops *bf16_dot_ops(void) {
    pthread_once(&ops_once, build_ops);
    return &ops_bf16;
}
#endif
