/*
 * Rotary position embedding frequencies, one table per layer type:
 * inv_freq[i] = theta^(-2i/d) for i < d/2, d the rotated dimensions of a
 * head (all of it, or Phi's partial_rotary_factor of it), then scaled:
 *   llama3    wavelengths longer than original_ctx / low_freq_factor are
 *             slowed by `factor`, those shorter than original_ctx /
 *             high_freq_factor kept, the band between interpolated;
 *   linear    every frequency divided by the factor (positions / factor);
 *   LongRoPE  frequency i divided by the long factor i when the context
 *             exceeds the original one, else by the short factor i; cos
 *             and sin multiplied by the attention factor (rope_mscale).
 * Table 1 (Gemma 3's sliding layers) uses its own base, unscaled.
 * Computed in double once at load; the engine rotates q and k with them
 * (see runtime/engine.c).
 */
#include <math.h>
#include <stdlib.h>

#include "error.h"
#include "model/model.h"

static float *table(kvlm_model *m, double theta, int dims, const layer_spec *s, int global, kvlm_error *err) {
    const kvlm_config *c = &m->cfg;
    const int half = dims / 2;
    float *f = model_own(m, malloc((size_t)half * sizeof(float)));
    if (!f) {
        kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
        return NULL;
    }
    const double pi2 = 2 * M_PI;
    for (int i = 0; i < half; i++) {
        double freq = 1.0 / pow(theta, (2.0 * i) / dims);
        if (global && c->rope_factor > 0) {
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
        if (global && s && s->rope_linear > 0) freq /= s->rope_linear;
        if (global && s && s->n_factors)
            freq /= c->n_ctx > s->longrope_ctx ? s->long_factor[i] : s->short_factor[i];
        f[i] = (float)freq;
    }
    return f;
}

int rope_init(kvlm_model *m, const layer_spec *s, kvlm_error *err) {
    const kvlm_config *c = &m->cfg;
    m->n_rope = 0;
    if (c->rope_theta <= 0) return KVLM_OK;
    const int dims = s && s->rope_dims ? s->rope_dims : c->head_dim;
    if (dims % 2 || dims > c->head_dim)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "rotary embedding needs an even count of dimensions <= head_dim "
                              "(%d), not %d", c->head_dim, dims);
    if (s && s->n_factors && s->n_factors != dims / 2)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "longrope: %d factors for %d rotary dimensions (need %d)",
                              s->n_factors, dims, dims / 2);
    if (!(m->rope_freq[0] = table(m, c->rope_theta, dims, s, 1, err))) return KVLM_ERR_NOMEM;
    m->rope_freq_n[0] = dims / 2;
    m->rope_mscale[0] = s && s->n_factors ? s->longrope_mscale : 1.0f;
    m->n_rope = 1;
    if (s && s->local_rope_theta > 0) {
        if (!(m->rope_freq[1] = table(m, s->local_rope_theta, dims, s, 0, err))) return KVLM_ERR_NOMEM;
        m->rope_freq_n[1] = dims / 2;
        m->rope_mscale[1] = 1.0f;
        m->n_rope = 2;
    }
    return KVLM_OK;
}
