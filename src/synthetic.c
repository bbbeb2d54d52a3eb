/*
 * Random-weight models with the exact shapes of known checkpoints, built in
 * memory in the requested dtype. They make speed and memory figures
 * reproducible without downloading anything; their outputs are noise.
 * Weights are deterministic for a given seed (a counter-based generator, so
 * the parallel fill does not depend on the thread count).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "model.h"

typedef struct synth_preset {
    const char *name;
    int n_layer, n_head, n_embd, n_ctx, vocab;
} synth_preset;

static const synth_preset presets[] = {
    {"gpt2-124m", 12, 12, 768, 1024, 50257},
    {"gpt2-355m", 24, 16, 1024, 1024, 50257},
    {"gpt2-tiny", 2, 4, 64, 32, 200},
};

static uint64_t splitmix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Uniform in [-a, a]: element i of stream `stream`. */
static float rand_uniform(uint64_t seed, uint64_t stream, uint64_t i, float a) {
    uint64_t r = splitmix(seed ^ splitmix(stream * 0x100000001b3ull + i));
    return a * ((float)(r >> 40) * (2.0f / 16777216.0f) - 1.0f);
}

static int fill_matrix(kvlm_model *m, kern_matrix *w, int rows, int cols, kvlm_dtype dt, uint64_t seed,
                       uint64_t stream, float scale, kvlm_error *err) {
    size_t n = (size_t)rows * cols, es = kvlm_dtype_size(dt);
    void *buf = model_own(m, aligned_alloc(64, (n * es + 63) & ~(size_t)63));
    if (!buf) return kvlm_fail(err, KVLM_ERR_NOMEM, "synthetic model: out of memory");
    #pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) dtype_store(dt, buf, i, rand_uniform(seed, stream, i, scale));
    *w = (kern_matrix){.dtype = dt, .data = buf, .rows = rows, .cols = cols};
    return KVLM_OK;
}

static float *const_vector(kvlm_model *m, int n, float v) {
    float *p = model_own(m, malloc((size_t)n * sizeof(float)));
    if (p) for (int i = 0; i < n; i++) p[i] = v;
    return p;
}

static int build(kvlm_model *m, const synth_preset *p, kvlm_dtype dt, uint64_t seed, kvlm_error *err) {
    kvlm_config *c = &m->cfg;
    strcpy(c->arch, "gpt2");
    c->n_layer = p->n_layer;
    c->n_head = c->n_kv_head = p->n_head;
    c->n_embd = p->n_embd;
    c->head_dim = p->n_embd / p->n_head;
    c->n_ff = 4 * p->n_embd;
    c->n_ctx = p->n_ctx;
    c->vocab_size = p->vocab;
    c->eos_id = p->vocab - 1;
    c->norm_eps = 1e-5f;
    c->weight_dtype = dt;
    const int C = c->n_embd, F = c->n_ff;
    const float a = 0.02f * sqrtf(3.0f); /* uniform with std 0.02, as GPT-2 initialises */
    uint64_t s = 0;
    int rc;
    if ((rc = fill_matrix(m, &m->wte, c->vocab_size, C, dt, seed, s++, a, err)) ||
        (rc = fill_matrix(m, &m->wpe, c->n_ctx, C, dt, seed, s++, a, err)))
        return rc;
    m->lm_head = m->wte;
    m->layers = model_own(m, calloc((size_t)c->n_layer, sizeof *m->layers));
    m->lnf_w = const_vector(m, C, 1.0f);
    m->lnf_b = const_vector(m, C, 0.0f);
    if (!m->layers || !m->lnf_w || !m->lnf_b) return kvlm_fail(err, KVLM_ERR_NOMEM, "synthetic model: out of memory");
    for (int l = 0; l < c->n_layer; l++) {
        gpt2_layer *L = &m->layers[l];
        if ((rc = fill_matrix(m, &L->attn_qkv, 3 * C, C, dt, seed, s++, a, err)) ||
            (rc = fill_matrix(m, &L->attn_proj, C, C, dt, seed, s++, a, err)) ||
            (rc = fill_matrix(m, &L->mlp_fc, F, C, dt, seed, s++, a, err)) ||
            (rc = fill_matrix(m, &L->mlp_proj, C, F, dt, seed, s++, a, err)))
            return rc;
        L->ln1_w = const_vector(m, C, 1.0f);
        L->ln1_b = const_vector(m, C, 0.0f);
        L->ln2_w = const_vector(m, C, 1.0f);
        L->ln2_b = const_vector(m, C, 0.0f);
        L->attn_qkv_b = const_vector(m, 3 * C, 0.0f);
        L->attn_proj_b = const_vector(m, C, 0.0f);
        L->mlp_fc_b = const_vector(m, F, 0.0f);
        L->mlp_proj_b = const_vector(m, C, 0.0f);
        if (!L->ln1_w || !L->ln1_b || !L->ln2_w || !L->ln2_b || !L->attn_qkv_b || !L->attn_proj_b ||
            !L->mlp_fc_b || !L->mlp_proj_b)
            return kvlm_fail(err, KVLM_ERR_NOMEM, "synthetic model: out of memory");
    }
    return KVLM_OK;
}

kvlm_model *kvlm_model_synthetic(const char *preset, kvlm_dtype dtype, uint64_t seed, kvlm_error *err) {
    kvlm_error local;
    if (!err) err = &local;
    const synth_preset *p = NULL;
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (preset && !strcmp(presets[i].name, preset)) p = &presets[i];
    if (!p) {
        kvlm_fail(err, KVLM_ERR_ARG, "unknown synthetic preset '%s' (gpt2-124m, gpt2-355m, gpt2-tiny)",
                  preset ? preset : "");
        return NULL;
    }
    kvlm_model *m = calloc(1, sizeof *m);
    if (!m) { kvlm_fail(err, KVLM_ERR_NOMEM, "out of memory"); return NULL; }
    tensor_set_init(&m->ts);
    snprintf(m->source, sizeof m->source, "synthetic %s (random %s weights, seed %llu)", p->name,
             kvlm_dtype_name(dtype), (unsigned long long)seed);
    if (build(m, p, dtype, seed, err) != KVLM_OK) {
        kvlm_model_free(m);
        return NULL;
    }
    return m;
}
