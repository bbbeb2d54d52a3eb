/*
 * Load-time copies of weight matrices in the layouts some kernels read
 * faster (kvlm_model_repack). Today one: on the avx512-vnni kernels, every
 * Q4_0 matrix of the layers and the output head gets a copy in the packed
 * layout of kernels/q4_0_packed.h (kern_matrix .packed), which the Q4_0
 * decode kernel (1-3 rows of x) reads instead of the file's blocks. The
 * file's layout stays mapped for everything else (prefill, the embedding
 * lookup, other ISAs), so the model holds both: the copy of a rows x cols
 * matrix is ceil(rows / 4) * ceil(cols / 128) * 288 bytes, the file's
 * bytes when rows is a multiple of 4 and cols of 128. A matrix whose copy
 * cannot be allocated keeps the file's layout only.
 */
#include <stdlib.h>

#include "kernels/q4_0_packed.h"
#include "model/model.h"

#define TILES_PER_TASK 64

static size_t repack_q4_0(kvlm_model *m, kern_matrix *w) {
    if (!w->data || w->dtype != KVLM_Q4_0 || w->packed) return 0;
    const size_t size = q4_0_packed_size(w->rows, w->cols);
    if (!size) return 0;
    void *buf = model_own(m, aligned_alloc(64, (size + 63) & ~(size_t)63));
    if (!buf) return 0;
    const int tiles = (w->rows + 3) / 4;
    #pragma omp parallel for num_threads(kern_load_threads()) schedule(dynamic)
    for (int t = 0; t < tiles; t += TILES_PER_TASK)
        q4_0_pack(w->data, w->rows, w->cols, t, t + TILES_PER_TASK < tiles ? t + TILES_PER_TASK : tiles, buf);
    w->packed = buf;
    return size;
}

size_t kvlm_model_repack(kvlm_model *m, kvlm_isa isa) {
    if (isa == KVLM_ISA_AUTO) isa = kvlm_isa_best();
    if (isa != KVLM_ISA_AVX512_VNNI || !kern_cpu_supports(isa)) return 0;
    size_t added = 0;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        model_layer *L = &m->layers[l];
        kern_matrix *ws[] = {&L->wqkv, &L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_gate_up, &L->w_down};
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) added += repack_q4_0(m, ws[i]);
    }
    added += repack_q4_0(m, &m->lm_head);
    m->repacked_bytes += added;
    return added;
}

size_t kvlm_model_repacked_bytes(const kvlm_model *m) { return m->repacked_bytes; }
