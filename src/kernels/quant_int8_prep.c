/*
 * Which int8 kernel runs a matmul of the avx512-vnni / avx2-vnni kern_ops,
 * and the prepared form of x that kern_matmul makes once per matmul and
 * shares between its work items (kernels.h, matmul_prep_*).
 *
 * A call (M rows of x, weights w) goes to the first kernel that takes it:
 * the K-quant decode kernel (quant_int8_decode.h) below
 * quant_int8_min_rows (16 rows on avx512-vnni, 8 on avx2-vnni), the
 * AVX512-VNNI Q4_0 decode kernel (1 to 3 rows, quant_int8_q4_0_avx512.c),
 * the prefill kernels (M >= PR_MIN_ROWS, 16), the small-row kernels of
 * quant_int8_body.h (decode and decode batches of the 32-value block
 * types; on avx2-vnni 8 to 15 rows of the K-quants); MXFP4 and IQ4_XS to the AVX512-VNNI
 * table kernel (quant_int8_lut_avx512.c, every row count); otherwise to the f32-activation
 * kernels of the same ISA. matmul_rows and the prepared form make the same
 * choice, and each kernel's matmul_rows form is its prep + rows on a
 * buffer of its own, so a matmul gives the same bits either way.
 *
 * The prepared form: a 64-byte header (the kernel, M), then the kernel's
 * own activation layout. For decode this moves the activation
 * quantisation (a pass over x, 1-3 us per 2048-8192 values) out of the
 * work items: each matmul has 16 of them at 2 threads, and each quantised
 * the same row again.
 *
 * A Q4_0 matrix with a packed copy (model/repack.c) has only that copy
 * resident: the file's pages are dropped at load. The packed decode kernel
 * reads it directly; every other kernel here runs on UNPACK_ROWS rows at a
 * time unpacked from it into the file's block layout (q4_0_unpack), the
 * same bytes, so the same bits as on the file's blocks.
 */
#include <stdint.h>
#include <stdlib.h>

#include "kernels/q4_0_packed.h"
#include "kernels/quant_int8.h"
#include "tensor.h"

enum { I8_NONE, I8_DECODE_K, I8_DECODE_Q4_0, I8_PREFILL, I8_SMALL, I8_LUT };

#define HEAD 64

typedef struct i8_head {
    int kind, M;
} i8_head;

/* One ISA level's kernels. */
typedef struct i8_isa {
    const kern_ops *fallback;
    int (*min_rows)(kvlm_dtype t);
    size_t (*dec_bytes)(int M, const kern_matrix *w);
    void (*dec_prep)(const float *x, int M, const kern_matrix *w, int m0, int m1, void *buf);
    void (*dec_rows)(const void *buf, int M, const kern_matrix *w, int n0, int n1, const float *bias, float *y,
                     int ldy);
    int (*dec_run)(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias, float *y, int ldy);
    size_t (*q40_bytes)(int M, const kern_matrix *w); /* NULL: no Q4_0 decode kernel */
    void (*q40_prep)(const float *x, int M, const kern_matrix *w, int m0, int m1, void *buf);
    void (*q40_rows)(const void *buf, int M, const kern_matrix *w, int n0, int n1, const float *bias, float *y,
                     int ldy);
    int (*q40_run)(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias, float *y, int ldy);
    size_t (*pre_bytes)(int M, const kern_matrix *w, size_t *panel);
    void (*pre_prep)(const float *x, int M, const kern_matrix *w, int m0, int m1, void *buf);
    void (*pre_rows)(const void *buf, void *panel, const kern_matrix *w, int n0, int n1, const float *bias, float *y,
                     int ldy);
    size_t (*small_bytes)(int M, const kern_matrix *w, size_t *panel);
    void (*small_prep)(const float *x, int M, const kern_matrix *w, int m0, int m1, void *buf);
    void (*small_rows)(const void *buf, int M, void *panel, const kern_matrix *w, int n0, int n1, const float *bias,
                       float *y, int ldy);
    int (*int8_run)(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias, float *y,
                    int ldy);
    size_t (*lut_bytes)(int M, const kern_matrix *w); /* NULL: no MXFP4 / IQ4_XS kernel */
    void (*lut_prep)(const float *x, int M, const kern_matrix *w, int m0, int m1, void *buf);
    void (*lut_rows)(const void *buf, int M, const kern_matrix *w, int n0, int n1, const float *bias, float *y,
                     int ldy);
    int (*lut_run)(const float *x, int M, const kern_matrix *w, int n0, int n1, const float *bias, float *y, int ldy);
} i8_isa;

static const i8_isa isa_avx512 = {
    &kern_ops_avx512,
    quant_int8_min_rows_avx512,
    quant_int8_decode_bytes_avx512,
    quant_int8_decode_prep_avx512,
    quant_int8_decode_rows_prep_avx512,
    quant_int8_decode_rows_avx512,
    quant_int8_q4_0_decode_bytes_avx512,
    quant_int8_q4_0_decode_prep_avx512,
    quant_int8_q4_0_decode_rows_prep_avx512,
    quant_int8_q4_0_decode_avx512,
    quant_int8_prep_bytes_avx512,
    quant_int8_prep_avx512,
    quant_int8_rows_prep_avx512,
    quant_int8_small_bytes_avx512,
    quant_int8_small_prep_avx512,
    quant_int8_small_rows_avx512,
    quant_int8_matmul_rows_avx512,
    quant_int8_lut_bytes_avx512,
    quant_int8_lut_prep_avx512,
    quant_int8_lut_rows_avx512,
    quant_int8_lut_run_avx512,
};

static const i8_isa isa_avx2 = {
    &kern_ops_avx2,
    quant_int8_min_rows_avx2,
    quant_int8_decode_bytes_avx2,
    quant_int8_decode_prep_avx2,
    quant_int8_decode_rows_prep_avx2,
    quant_int8_decode_rows_avx2,
    NULL,
    NULL,
    NULL,
    NULL,
    quant_int8_prep_bytes_avx2,
    quant_int8_prep_avx2,
    quant_int8_rows_prep_avx2,
    quant_int8_small_bytes_avx2,
    quant_int8_small_prep_avx2,
    quant_int8_small_rows_avx2,
    quant_int8_matmul_rows_avx2,
    NULL,
    NULL,
    NULL,
    NULL,
};

/* The kernel for (M, w), its activation bytes and per-item panel. */
static int choose(const i8_isa *k, int M, const kern_matrix *w, size_t *bytes, size_t *panel) {
    *panel = 0;
    if (M >= 1 && k->lut_bytes && quant_int8_lut_supports(w->dtype) && (*bytes = k->lut_bytes(M, w))) return I8_LUT;
    if (!quant_int8_supports(w->dtype) || M < 1) return I8_NONE;
    if (M < k->min_rows(w->dtype) && (*bytes = k->dec_bytes(M, w))) return I8_DECODE_K;
    if (k->q40_bytes && (*bytes = k->q40_bytes(M, w))) return I8_DECODE_Q4_0;
    if ((*bytes = k->pre_bytes(M, w, panel))) return I8_PREFILL;
    if ((*bytes = k->small_bytes(M, w, panel))) return I8_SMALL;
    return I8_NONE;
}

/* Rows unpacked from a packed copy per pass: a multiple of every
 * kernel's row tile (16 on AVX-512, 8 on AVX2), a few KiB to 100 KiB. */
#define UNPACK_ROWS 16

/* 1 when a kernel of this kind must read w's rows from its packed copy. */
static int from_packed(const kern_matrix *w, int kind) {
    return w->packed && w->dtype == KVLM_Q4_0 && kind != I8_DECODE_Q4_0;
}

static void rows_prep(const i8_isa *k, const void *buf, void *panel, const kern_matrix *w, int n0, int n1,
                      const float *bias, float *y, int ldy);

/* rows_prep over rows [n0, n1) of w read from its packed copy. Without
 * memory for the rows it reads the file's layout (the same bytes; their
 * pages are read in again). */
static void rows_prep_unpacked(const i8_isa *k, const void *buf, void *panel, const kern_matrix *w, int n0, int n1,
                               const float *bias, float *y, int ldy) {
    const size_t rb = dtype_row_bytes(KVLM_Q4_0, w->cols, NULL);
    unsigned char *rows = malloc(UNPACK_ROWS * rb);
    if (!rows) {
        const kern_matrix f = {w->dtype, w->data, w->rows, w->cols, NULL, 0};
        rows_prep(k, buf, panel, &f, n0, n1, bias, y, ldy);
        return;
    }
    for (int n = n0; n < n1; n += UNPACK_ROWS) {
        const int e = n1 - n < UNPACK_ROWS ? n1 : n + UNPACK_ROWS;
        q4_0_unpack(w->packed, w->cols, n, e, rows);
        const kern_matrix u = {KVLM_Q4_0, rows, e - n, w->cols, NULL, 0};
        rows_prep(k, buf, panel, &u, 0, e - n, bias ? bias + n : NULL, y + n, ldy);
    }
    free(rows);
}

static void prep(const i8_isa *k, const float *x, int M, const kern_matrix *w, int m0, int m1, void *buf);

static void matmul_rows(const i8_isa *k, const float *x, int M, const kern_matrix *w, int n0, int n1,
                        const float *bias, float *y, int ldy) {
    size_t bytes = 0, panel = 0;
    const int kind = choose(k, M, w, &bytes, &panel);
    if (from_packed(w, kind)) {
        /* x prepared once for all the passes over the unpacked rows */
        const size_t pre = (HEAD + bytes + 63) & ~(size_t)63;
        unsigned char *buf = kind != I8_NONE ? aligned_alloc(64, pre + ((panel + 63) & ~(size_t)63)) : NULL;
        if (buf) {
            prep(k, x, M, w, 0, M, buf);
            rows_prep_unpacked(k, buf, panel ? buf + pre : NULL, w, n0, n1, bias, y, ldy);
            free(buf);
            return;
        }
        const kern_matrix f = {w->dtype, w->data, w->rows, w->cols, NULL, 0};
        k->fallback->matmul_rows(x, M, &f, n0, n1, bias, y, ldy);
        return;
    }
    /* each kernel's own matmul_rows form (a buffer of its own, the first
     * weight tile requested before the activations are quantised); 0 when
     * it has no memory */
    int ran = 0;
    if (kind == I8_DECODE_K) ran = k->dec_run(x, M, w, n0, n1, bias, y, ldy);
    else if (kind == I8_DECODE_Q4_0) ran = k->q40_run(x, M, w, n0, n1, bias, y, ldy);
    else if (kind == I8_LUT) ran = k->lut_run(x, M, w, n0, n1, bias, y, ldy);
    if (!ran && kind != I8_NONE && kind != I8_LUT) ran = k->int8_run(x, M, w, n0, n1, bias, y, ldy);
    if (!ran) k->fallback->matmul_rows(x, M, w, n0, n1, bias, y, ldy);
}

static size_t prep_bytes(const i8_isa *k, int M, const kern_matrix *w, size_t *panel) {
    size_t bytes = 0;
    if (choose(k, M, w, &bytes, panel) == I8_NONE) return *panel = 0, 0;
    return HEAD + bytes;
}

static void prep(const i8_isa *k, const float *x, int M, const kern_matrix *w, int m0, int m1, void *buf) {
    size_t bytes = 0, panel = 0;
    const int kind = choose(k, M, w, &bytes, &panel);
    *(i8_head *)buf = (i8_head){kind, M};
    unsigned char *a = (unsigned char *)buf + HEAD;
    switch (kind) {
    case I8_DECODE_K: k->dec_prep(x, M, w, m0, m1, a); break;
    case I8_DECODE_Q4_0: k->q40_prep(x, M, w, m0, m1, a); break;
    case I8_PREFILL: k->pre_prep(x, M, w, m0, m1, a); break;
    case I8_SMALL: k->small_prep(x, M, w, m0, m1, a); break;
    case I8_LUT: k->lut_prep(x, M, w, m0, m1, a); break;
    default: break;
    }
}

static void rows_prep(const i8_isa *k, const void *buf, void *panel, const kern_matrix *w, int n0, int n1,
                      const float *bias, float *y, int ldy) {
    const i8_head *h = buf;
    if (from_packed(w, h->kind)) {
        rows_prep_unpacked(k, buf, panel, w, n0, n1, bias, y, ldy);
        return;
    }
    const unsigned char *a = (const unsigned char *)buf + HEAD;
    switch (h->kind) {
    case I8_DECODE_K: k->dec_rows(a, h->M, w, n0, n1, bias, y, ldy); break;
    case I8_DECODE_Q4_0: k->q40_rows(a, h->M, w, n0, n1, bias, y, ldy); break;
    case I8_PREFILL: k->pre_rows(a, panel, w, n0, n1, bias, y, ldy); break;
    case I8_SMALL: k->small_rows(a, h->M, panel, w, n0, n1, bias, y, ldy); break;
    case I8_LUT: k->lut_rows(a, h->M, w, n0, n1, bias, y, ldy); break;
    default: break;
    }
}

void quant_int8_vnni_matmul_rows_avx512(const float *x, int M, const kern_matrix *w, int n0, int n1,
                                        const float *bias, float *y, int ldy) {
    matmul_rows(&isa_avx512, x, M, w, n0, n1, bias, y, ldy);
}
void quant_int8_vnni_matmul_rows_avx2(const float *x, int M, const kern_matrix *w, int n0, int n1,
                                      const float *bias, float *y, int ldy) {
    matmul_rows(&isa_avx2, x, M, w, n0, n1, bias, y, ldy);
}
size_t quant_int8_vnni_prep_bytes_avx512(int M, const kern_matrix *w, size_t *panel) {
    return prep_bytes(&isa_avx512, M, w, panel);
}
size_t quant_int8_vnni_prep_bytes_avx2(int M, const kern_matrix *w, size_t *panel) {
    return prep_bytes(&isa_avx2, M, w, panel);
}
void quant_int8_vnni_prep_avx512(const float *x, int M, const kern_matrix *w, int m0, int m1, void *buf) {
    prep(&isa_avx512, x, M, w, m0, m1, buf);
}
void quant_int8_vnni_prep_avx2(const float *x, int M, const kern_matrix *w, int m0, int m1, void *buf) {
    prep(&isa_avx2, x, M, w, m0, m1, buf);
}
void quant_int8_vnni_rows_prep_avx512(const void *buf, void *panel, const kern_matrix *w, int n0, int n1,
                                      const float *bias, float *y, int ldy) {
    rows_prep(&isa_avx512, buf, panel, w, n0, n1, bias, y, ldy);
}
void quant_int8_vnni_rows_prep_avx2(const void *buf, void *panel, const kern_matrix *w, int n0, int n1,
                                    const float *bias, float *y, int ldy) {
    rows_prep(&isa_avx2, buf, panel, w, n0, n1, bias, y, ldy);
}
