/*
 * Random-weight models with the exact shapes of known checkpoints, built in
 * memory in the requested dtype. They make speed and memory figures
 * reproducible without downloading anything; their outputs are noise.
 * Weights are deterministic for a given seed (a counter-based generator, so
 * the parallel fill does not depend on the thread count). A preset may give
 * its window layers a sliding window (model->layer_window), Gemma 3's
 * pattern of five window layers to one global.
 *
 * Mixture-of-experts presets (Qwen3-MoE blocks: q/k norms, a router and
 * stacked experts, each expert a view of one [n_expert x F_e, C] buffer as
 * in a GGUF file) take a depth suffix, "qwen3-30b-a3b:12" for the first 12
 * of its 48 layers, so the largest shapes fit in memory.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "kernels/quant.h"
#include "model/model.h"

typedef struct synth_preset {
    const char *name;
    int llama; /* 0: GPT-2 block, 1: Llama block (RMSNorm, rotary, SwiGLU, GQA, tied head) */
    int n_layer, n_head, n_kv_head, n_embd, n_ff, n_ctx, vocab;
    int head_dim;      /* 0: n_embd / n_head */
    int window;        /* sliding window of the window layers (0: every layer global) */
    int global_every;  /* with a window: layer l is global when (l + 1) % global_every == 0 */
    /* mixtures of experts (Qwen3-MoE blocks; 0: dense): experts, experts
     * per token, each expert's FFN */
    int n_expert, n_expert_used, n_ff_expert;
} synth_preset;

static const synth_preset presets[] = {
    {"gpt2-124m", 0, 12, 12, 12, 768, 3072, 1024, 50257, 0, 0, 0, 0, 0, 0},
    {"gpt2-355m", 0, 24, 16, 16, 1024, 4096, 1024, 50257, 0, 0, 0, 0, 0, 0},
    {"gpt2-tiny", 0, 2, 4, 4, 64, 256, 32, 200, 0, 0, 0, 0, 0, 0},
    /* Llama 3.2 1B shapes; the context is capped at 4,096 to keep pools small */
    {"llama-1b", 1, 16, 32, 8, 2048, 8192, 4096, 128256, 0, 0, 0, 0, 0, 0},
    {"llama-tiny", 1, 2, 4, 2, 64, 128, 64, 256, 0, 0, 0, 0, 0, 0},
    /* Gemma 3 1B's attention shapes (26 layers, 4 query heads and 1 KV head
     * of 256, a window of 512 on five layers of every six, hidden 1152,
     * MLP 6912) in a Llama block; the vocabulary is cut to 32,768 (Gemma's
     * 262,144 would only make the output layer larger) and the context to
     * 32,768 */
    {"gemma3-1b-shape", 1, 26, 4, 1, 1152, 6912, 32768, 32768, 256, 512, 6, 0, 0, 0},
    /* the same pattern, small: 12 layers (10 window, 2 global: slices of 2
     * layers), window 8 */
    {"gemma3-tiny", 1, 12, 4, 1, 64, 128, 128, 256, 32, 8, 6, 0, 0, 0},
    /* Qwen3-30B-A3B shapes (128 experts, top 8, expert FFN 768, 32 query /
     * 4 KV heads of 128); context capped at 4,096 */
    {"qwen3-30b-a3b", 1, 48, 32, 4, 2048, 6144, 4096, 151936, 128, 0, 0, 128, 8, 768},
    {"qwen3moe-tiny", 1, 2, 4, 2, 64, 128, 64, 256, 16, 0, 0, 8, 2, 32},
};
#define PRESET_NAMES                                                                                          \
    "gpt2-124m, gpt2-355m, gpt2-tiny, llama-1b, llama-tiny, gemma3-1b-shape, gemma3-tiny, qwen3-30b-a3b[:LAYERS], " \
    "qwen3moe-tiny[:LAYERS]"

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
    size_t n = (size_t)rows * cols, rb = dtype_row_bytes(dt, cols, NULL);
    if (!rb) return kvlm_error_set(err, KVLM_ERR_ARG, "synthetic model: %d columns are not whole %s blocks", cols,
                                   kvlm_dtype_name(dt));
    void *buf = model_own(m, aligned_alloc(64, ((size_t)rows * rb + 63) & ~(size_t)63));
    if (!buf) return kvlm_error_set(err, KVLM_ERR_NOMEM, "synthetic model: out of memory");
    if (dtype_is_blocked(dt)) { /* the f32 values of each row, quantised a row at a time */
        int oom = 0;
        #pragma omp parallel num_threads(kern_load_threads()) reduction(| : oom)
        {
            float *row = malloc((size_t)cols * sizeof(float));
            oom |= !row;
            #pragma omp for schedule(static)
            for (int r = 0; r < rows; r++) {
                if (!row) continue;
                for (int k = 0; k < cols; k++) row[k] = rand_uniform(seed, stream, (size_t)r * cols + k, scale);
                quant_quantize_row(dt, row, cols, (char *)buf + (size_t)r * rb);
            }
            free(row);
        }
        if (oom) return kvlm_error_set(err, KVLM_ERR_NOMEM, "synthetic model: out of memory");
    } else {
        #pragma omp parallel for num_threads(kern_load_threads()) schedule(static)
        for (size_t i = 0; i < n; i++) dtype_store(dt, buf, i, rand_uniform(seed, stream, i, scale));
    }
    *w = (kern_matrix){.dtype = dt, .data = buf, .rows = rows, .cols = cols};
    return KVLM_OK;
}

static float *const_vector(kvlm_model *m, int n, float v) {
    float *p = model_own(m, malloc((size_t)n * sizeof(float)));
    if (p) for (int i = 0; i < n; i++) p[i] = v;
    return p;
}

static void set_config(kvlm_config *c, const synth_preset *p, kvlm_dtype dt) {
    strcpy(c->arch, p->n_expert ? "qwen3moe" : p->llama ? "llama" : "gpt2");
    c->n_layer = p->n_layer;
    c->n_head = p->n_head;
    c->n_kv_head = p->n_kv_head;
    c->n_embd = p->n_embd;
    c->head_dim = p->head_dim ? p->head_dim : p->n_embd / p->n_head;
    c->n_expert = p->n_expert;
    c->n_expert_used = p->n_expert_used;
    c->n_ff_expert = p->n_ff_expert;
    c->expert_norm_topk = p->n_expert > 0;
    c->qk_norm = p->n_expert > 0;
    c->n_ff = p->n_ff;
    c->n_ctx = p->n_ctx;
    c->vocab_size = p->vocab;
    c->eos_id = p->vocab - 1;
    c->norm_eps = 1e-5f;
    c->weight_dtype = dt;
    c->rope_theta = p->llama ? 500000.0f : 0;
    c->tie_embeddings = 1;
}

/* A Qwen3-MoE layer: attention with q/k norms, a router and stacked experts. */
static int build_moe_layer(kvlm_model *m, model_layer *L, kvlm_dtype dt, uint64_t seed, uint64_t *s, float a,
                           kvlm_error *err) {
    const kvlm_config *c = &m->cfg;
    const int C = c->n_embd, F = c->n_ff_expert, E = c->n_expert;
    const int qd = c->n_head * c->head_dim, kd = c->n_kv_head * c->head_dim;
    model_moe *moe = model_own(m, calloc(1, sizeof *moe));
    kern_matrix *views = moe ? model_own(m, calloc((size_t)E * 3, sizeof *views)) : NULL;
    L->q_norm = const_vector(m, c->head_dim, 1.0f);
    L->k_norm = const_vector(m, c->head_dim, 1.0f);
    L->norm1_w = const_vector(m, C, 1.0f);
    L->norm2_w = const_vector(m, C, 1.0f);
    if (!views || !L->q_norm || !L->k_norm || !L->norm1_w || !L->norm2_w)
        return kvlm_error_set(err, KVLM_ERR_NOMEM, "synthetic model: out of memory");
    moe->gate = views, moe->up = views + E, moe->down = views + 2 * E;
    kern_matrix stacked[3];
    int rc;
    if ((rc = fill_matrix(m, &L->wq, qd, C, dt, seed, (*s)++, a, err)) ||
        (rc = fill_matrix(m, &L->wk, kd, C, dt, seed, (*s)++, a, err)) ||
        (rc = fill_matrix(m, &L->wv, kd, C, dt, seed, (*s)++, a, err)) ||
        (rc = fill_matrix(m, &L->wo, C, qd, dt, seed, (*s)++, a, err)) ||
        (rc = fill_matrix(m, &moe->router, E, C, KVLM_F32, seed, (*s)++, 1.0f, err)) ||
        (rc = fill_matrix(m, &stacked[0], E * F, C, dt, seed, (*s)++, a, err)) ||
        (rc = fill_matrix(m, &stacked[1], E * F, C, dt, seed, (*s)++, a, err)) ||
        (rc = fill_matrix(m, &stacked[2], E * C, F, dt, seed, (*s)++, a, err)))
        return rc;
    for (int e = 0; e < E; e++)
        for (int k = 0; k < 3; k++) {
            const int rows = k == 2 ? C : F, cols = k == 2 ? F : C;
            const size_t off = (size_t)e * rows * dtype_row_bytes(dt, cols, NULL);
            views[k * E + e] = (kern_matrix){.dtype = dt, .data = (const char *)stacked[k].data + off, .rows = rows,
                                             .cols = cols};
        }
    L->moe = moe;
    return KVLM_OK;
}

static int build_layer(kvlm_model *m, const synth_preset *p, model_layer *L, kvlm_dtype dt, uint64_t seed,
                       uint64_t *s, float a, kvlm_error *err) {
    const kvlm_config *c = &m->cfg;
    const int C = c->n_embd, F = c->n_ff, qd = c->n_head * c->head_dim, kd = c->n_kv_head * c->head_dim;
    int rc;
    if (p->n_expert) return build_moe_layer(m, L, dt, seed, s, a, err);
    if (p->llama) {
        if ((rc = fill_matrix(m, &L->wq, qd, C, dt, seed, (*s)++, a, err)) ||
            (rc = fill_matrix(m, &L->wk, kd, C, dt, seed, (*s)++, a, err)) ||
            (rc = fill_matrix(m, &L->wv, kd, C, dt, seed, (*s)++, a, err)) ||
            (rc = fill_matrix(m, &L->w_gate, F, C, dt, seed, (*s)++, a, err)))
            return rc;
    } else {
        if ((rc = fill_matrix(m, &L->wqkv, qd + 2 * kd, C, dt, seed, (*s)++, a, err))) return rc;
        L->norm1_b = const_vector(m, C, 0.0f);
        L->norm2_b = const_vector(m, C, 0.0f);
        L->bqkv = const_vector(m, qd + 2 * kd, 0.0f);
        L->bo = const_vector(m, C, 0.0f);
        L->b_up = const_vector(m, F, 0.0f);
        L->b_down = const_vector(m, C, 0.0f);
        if (!L->norm1_b || !L->norm2_b || !L->bqkv || !L->bo || !L->b_up || !L->b_down)
            return kvlm_error_set(err, KVLM_ERR_NOMEM, "synthetic model: out of memory");
    }
    if ((rc = fill_matrix(m, &L->wo, C, qd, dt, seed, (*s)++, a, err)) ||
        (rc = fill_matrix(m, &L->w_up, F, C, dt, seed, (*s)++, a, err)) ||
        (rc = fill_matrix(m, &L->w_down, C, F, dt, seed, (*s)++, a, err)))
        return rc;
    L->norm1_w = const_vector(m, C, 1.0f);
    L->norm2_w = const_vector(m, C, 1.0f);
    if (!L->norm1_w || !L->norm2_w) return kvlm_error_set(err, KVLM_ERR_NOMEM, "synthetic model: out of memory");
    return KVLM_OK;
}

static int build(kvlm_model *m, const synth_preset *p, kvlm_dtype dt, uint64_t seed, kvlm_error *err) {
    kvlm_config *c = &m->cfg;
    set_config(c, p, dt);
    m->arch = p->llama ? ARCH_LLAMA : ARCH_GPT2;
    const int C = c->n_embd;
    const float a = 0.02f * sqrtf(3.0f); /* uniform with std 0.02, as GPT-2 initialises */
    uint64_t s = 0;
    int rc;
    if ((rc = fill_matrix(m, &m->wte, c->vocab_size, C, dt, seed, s++, a, err))) return rc;
    if (!p->llama && (rc = fill_matrix(m, &m->wpe, c->n_ctx, C, dt, seed, s++, a, err))) return rc;
    m->lm_head = m->wte;
    m->layers = model_own(m, calloc((size_t)c->n_layer, sizeof *m->layers));
    m->normf_w = const_vector(m, C, 1.0f);
    m->normf_b = p->llama ? NULL : const_vector(m, C, 0.0f);
    if (!m->layers || !m->normf_w || (!p->llama && !m->normf_b))
        return kvlm_error_set(err, KVLM_ERR_NOMEM, "synthetic model: out of memory");
    for (int l = 0; l < c->n_layer; l++)
        if ((rc = build_layer(m, p, &m->layers[l], dt, seed, &s, a, err))) return rc;
    if (p->window) {
        m->layer_window = model_own(m, malloc((size_t)c->n_layer * sizeof(int)));
        if (!m->layer_window) return kvlm_error_set(err, KVLM_ERR_NOMEM, "synthetic model: out of memory");
        for (int l = 0; l < c->n_layer; l++) m->layer_window[l] = (l + 1) % p->global_every ? p->window : 0;
    }
    return rope_init(m, NULL, err);
}

/* The preset called name; a mixture of experts' may end in ":LAYERS" (1 ..
 * its layer count), the first LAYERS of its layers (*cut holds it). */
static const synth_preset *find_preset(const char *name, synth_preset *cut, kvlm_error *err) {
    const char *colon = name ? strchr(name, ':') : NULL;
    const size_t n = colon ? (size_t)(colon - name) : name ? strlen(name) : 0;
    for (size_t i = 0; name && i < sizeof presets / sizeof presets[0]; i++) {
        if (strlen(presets[i].name) != n || strncmp(presets[i].name, name, n)) continue;
        if (!colon) return &presets[i];
        char *end;
        const long layers = strtol(colon + 1, &end, 10);
        if (!presets[i].n_expert || *end || end == colon + 1 || layers < 1 || layers > presets[i].n_layer) {
            kvlm_error_set(err, KVLM_ERR_ARG, "synthetic preset '%s': %s", name,
                           presets[i].n_expert ? "the layer count after ':' must be 1 .. the preset's"
                                               : "only the mixtures of experts take a layer count");
            return NULL;
        }
        *cut = presets[i];
        cut->n_layer = (int)layers;
        return cut;
    }
    kvlm_error_set(err, KVLM_ERR_ARG, "unknown synthetic preset '%s' (" PRESET_NAMES ")", name ? name : "");
    return NULL;
}

kvlm_model *kvlm_model_synthetic(const char *preset, kvlm_dtype dtype, uint64_t seed, const kvlm_model_params *params,
                                 kvlm_error *err) {
    kvlm_error local;
    if (!err) err = &local;
    const kvlm_model_params mp = params ? *params : kvlm_model_default_params();
    if (model_check_params(&mp, err)) return NULL;
    synth_preset cut;
    const synth_preset *p = find_preset(preset, &cut, err);
    if (!p) return NULL;
    if (!dtype_is_valid(dtype) || (dtype_is_blocked(dtype) && !quant_can_quantize(dtype))) {
        kvlm_error_set(err, KVLM_ERR_UNSUPPORTED,
                       "synthetic model: cannot quantise to %s (weights can be f32, f16, bf16, q8_0 or q4_0; "
                       "the other block types are only read from GGUF files)",
                       kvlm_dtype_name(dtype));
        return NULL;
    }
    kvlm_model *m = calloc(1, sizeof *m);
    if (!m) { kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory"); return NULL; }
    tensor_set_init(&m->ts);
    snprintf(m->source, sizeof m->source, "synthetic %s (%d layers, random %s weights, seed %llu)", p->name,
             p->n_layer, kvlm_dtype_name(dtype), (unsigned long long)seed);
    if (build(m, p, dtype, seed, err) != KVLM_OK || model_finish_load(m, &mp, err) != KVLM_OK) {
        kvlm_model_free(m);
        return NULL;
    }
    return m;
}
