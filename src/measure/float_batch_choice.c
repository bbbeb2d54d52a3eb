/*
 * kvlm_model_float_batch (kvlm_measure.h): the float batch kernel chosen
 * for each distinct (dtype, K) among a model's weight matrices, as the
 * matmul driver will pick it (kernels/float_batch.h).
 */
#include "kernels/float_batch.h"
#include "kvlm_measure.h"
#include "model/model.h"

static int add(const kern_ops *ops, const kern_matrix *w, kvlm_float_batch_choice *out, int n, int cap) {
    if (!w->data) return n;
    for (int i = 0; i < n && i < cap; i++)
        if (out[i].dtype == w->dtype && out[i].cols == w->cols) return n;
    kern_float_batch fb;
    const int direct = kern_float_batch_get(ops, w->dtype, w->cols, &fb);
    if (direct < 0) return n;
    if (n < cap)
        out[n] = (kvlm_float_batch_choice){w->dtype, w->cols, direct, fb.forced, fb.packed_us, fb.direct_us};
    return n + 1;
}

int kvlm_model_float_batch(const kvlm_model *m, kvlm_isa isa, kvlm_float_batch_choice *out, int cap) {
    const kern_ops *ops = kern_select(isa);
    if (!m || !ops) return 0;
    int n = 0;
    for (int l = 0; l < m->cfg.n_layer; l++) {
        const model_layer *L = &m->layers[l];
        const kern_matrix *ws[] = MODEL_LAYER_MATRICES(L);
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) n = add(ops, ws[i], out, n, cap);
    }
    return add(ops, &m->lm_head, out, n, cap);
}
