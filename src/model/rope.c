/*
 * Rotary position embedding frequencies: inv_freq[i] = theta^(-2i/d) for
 * i < d/2, with the Llama 3 rope_scaling applied when configured:
 * wavelengths longer than original_ctx / low_freq_factor are slowed by
 * `factor`, those shorter than original_ctx / high_freq_factor are kept,
 * and the band between is interpolated smoothly. Computed in double once
 * at load; the engine rotates q and k with them (see runtime/engine.c).
 */
#include <math.h>
#include <stdlib.h>

#include "error.h"
#include "model/model.h"

int rope_init(kvlm_model *m, kvlm_error *err) {
    const kvlm_config *c = &m->cfg;
    if (c->rope_theta <= 0) return KVLM_OK;
    const int half = c->head_dim / 2;
    if (c->head_dim % 2)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "rotary embedding needs an even head_dim, not %d", c->head_dim);
    float *f = model_own(m, malloc((size_t)half * sizeof(float)));
    if (!f) return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    const double pi2 = 2 * M_PI;
    for (int i = 0; i < half; i++) {
        double freq = 1.0 / pow((double)c->rope_theta, (2.0 * i) / c->head_dim);
        if (c->rope_factor > 0) {
            const double low_wl = c->rope_original_ctx / c->rope_low_freq_factor;
            const double high_wl = c->rope_original_ctx / c->rope_high_freq_factor;
            const double wl = pi2 / freq;
            if (wl > low_wl) {
                freq /= c->rope_factor;
            } else if (wl >= high_wl) {
                double smooth = (c->rope_original_ctx / wl - c->rope_low_freq_factor) /
                                (c->rope_high_freq_factor - c->rope_low_freq_factor);
                freq = (1 - smooth) * freq / c->rope_factor + smooth * freq;
            }
        }
        f[i] = (float)freq;
    }
    m->rope_inv_freq = f;
    return KVLM_OK;
}
