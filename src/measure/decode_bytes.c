/*
 * Bytes of weights one decode step reads (kvlm_model_decode_bytes, see
 * kvlm_measure.h): every weight matrix once in its stored dtype (quantised
 * rows at their block size), the output head, and one row of each
 * embedding table. The numerator of the decode roofline; vectors (norms,
 * biases) are not counted.
 */
#include "kvlm_measure.h"
#include "model/model.h"
#include "tensor.h"

static size_t matrix_bytes(const kern_matrix *w, int rows) {
    return w->data ? (size_t)rows * dtype_row_bytes(w->dtype, w->cols, NULL) : 0;
}

static size_t layer_matrix_bytes(const model_layer *L) {
    const kern_matrix *ws[] = {&L->wqkv, &L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up, &L->w_down};
    size_t b = 0;
    for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) b += matrix_bytes(ws[i], ws[i]->rows);
    return b;
}

size_t kvlm_model_decode_bytes(const kvlm_model *m) {
    const kvlm_config *c = &m->cfg;
    size_t b = 0;
    for (int l = 0; l < c->n_layer; l++) b += layer_matrix_bytes(&m->layers[l]);
    b += matrix_bytes(&m->lm_head, c->vocab_size);               /* output head */
    b += matrix_bytes(&m->wte, 1) + matrix_bytes(&m->wpe, 1);    /* one embedding row each */
    return b;
}
