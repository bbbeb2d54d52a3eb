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
 *   YaRN      with r(b) = d ln(orig / (2 pi b)) / (2 ln theta) the index
 *             whose wavelength makes b turns over the original context,
 *             low = r(beta_fast), high = r(beta_slow) (rounded down and up
 *             when truncating, kept in [0, d - 1]), the ramp
 *             t = clamp((i - low) / (high - low), 0, 1) mixes the
 *             interpolated frequency (divided by the factor) and the
 *             original one: freq t / factor + freq (1 - t);
 *             cos and sin multiplied by the attention factor.
 * Table 1 (Gemma 3's sliding layers) uses its own base, unscaled.
 * Computed in double once at load; the engine rotates q and k with them
 * (see runtime/engine.c).
 */
#include <math.h>
#include <stdlib.h>

#include "error.h"
#include "model/model.h"

/* Index of the rotary pair that turns b times over the original context. */
static double yarn_dim(double b, double theta, int dims, int orig) {
    return dims * log(orig / (b * 2 * M_PI)) / (2 * log(theta));
}

static double yarn(double freq, int i, double theta, int dims, const layer_spec *s) {
    double lo = yarn_dim(s->yarn_beta_fast, theta, dims, s->yarn_orig_ctx);
    double hi = yarn_dim(s->yarn_beta_slow, theta, dims, s->yarn_orig_ctx);
    if (s->yarn_truncate) lo = floor(lo), hi = ceil(hi);
    lo = fmax(lo, 0), hi = fmin(hi, dims - 1);
    double t = (i - lo) / fmax(hi - lo, 0.001);
    t = fmin(fmax(t, 0), 1);
    return freq / s->yarn_factor * t + freq * (1 - t);
}

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
        if (global && s && s->yarn_factor > 0) freq = yarn(freq, i, theta, dims, s);
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
    m->rope_mscale[0] = s && s->n_factors ? s->longrope_mscale : s && s->yarn_factor > 0 ? s->yarn_mscale : 1.0f;
    m->n_rope = 1;
    if (s && s->local_rope_theta > 0) {
        if (!(m->rope_freq[1] = table(m, s->local_rope_theta, dims, s, 0, err))) return KVLM_ERR_NOMEM;
        m->rope_freq_n[1] = dims / 2;
        m->rope_mscale[1] = 1.0f;
        m->n_rope = 2;
    }
    return KVLM_OK;
}
