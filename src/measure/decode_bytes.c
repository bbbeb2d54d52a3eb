/*
 * The weights one decode step reads (kvlm_model_decode_bytes and
 * kvlm_measure_weight_read_bandwidth, see kvlm_measure.h; the ranges in
 * measure/decode_ranges.h): every weight matrix once in its stored dtype
 * (quantised rows at their block size; a Q4_0 matrix with a packed copy
 * for decode in the copy's bytes), the output head, and one row of each
 * embedding table. The numerator of the decode roofline; vectors
 * (norms, biases) are not counted. A mixture of experts counts, per layer,
 * its router, its shared expert and n_expert_used experts (the first ones:
 * which experts a token picks varies, their sizes do not), the active
 * bytes one token reads; the read test over these ranges then reads that
 * many bytes of the expert tensors.
 */
#include <stdlib.h>

#include "kernels/q4_0_packed.h"
#include "kvlm_measure.h"
#include "measure/decode_ranges.h"
#include "model/model.h"
#include "tensor.h"

/* rows of w as decode reads them: from the packed copy when there is one
 * (kernels/q4_0_packed.h, whole tiles of 4 rows), else the stored rows. */
static int add(decode_range *r, int n, int cap, const kern_matrix *w, int rows) {
    if (!w->data || rows <= 0) return n;
    if (n < cap)
        r[n] = w->packed ? (decode_range){w->packed, q4_0_packed_size(rows, w->cols)}
                         : (decode_range){w->data, (size_t)rows * dtype_row_bytes(w->dtype, w->cols, NULL)};
    return n + 1;
}

int model_decode_ranges(const kvlm_model *m, decode_range *r, int cap) {
    const kvlm_config *c = &m->cfg;
    int n = 0;
    for (int l = 0; l < c->n_layer; l++) {
        const model_layer *L = &m->layers[l];
        const kern_matrix *ws[] = MODEL_LAYER_MATRICES(L);
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) n = add(r, n, cap, ws[i], ws[i]->rows);
        if (!L->moe) continue;
        const model_moe *moe = L->moe;
        n = add(r, n, cap, &moe->router, moe->router.rows);
        n = add(r, n, cap, &moe->sh_gate, moe->sh_gate.rows);
        n = add(r, n, cap, &moe->sh_up, moe->sh_up.rows);
        n = add(r, n, cap, &moe->sh_down, moe->sh_down.rows);
        for (int e = 0; e < c->n_expert_used; e++) { /* every expert of a layer has the same bytes */
            n = add(r, n, cap, &moe->gate[e], moe->gate[e].rows);
            n = add(r, n, cap, &moe->up[e], moe->up[e].rows);
            n = add(r, n, cap, &moe->down[e], moe->down[e].rows);
        }
    }
    n = add(r, n, cap, &m->lm_head, c->vocab_size); /* output head */
    n = add(r, n, cap, &m->wte, 1);                 /* one embedding row each */
    return add(r, n, cap, &m->wpe, 1);
}

size_t kvlm_model_decode_bytes(const kvlm_model *m) {
    const int n = model_decode_ranges(m, NULL, 0);
    decode_range *r = malloc(sizeof *r * (size_t)(n ? n : 1));
    size_t b = 0;
    if (r) {
        model_decode_ranges(m, r, n);
        for (int i = 0; i < n; i++) b += r[i].bytes;
    }
    free(r);
    return b;
}
