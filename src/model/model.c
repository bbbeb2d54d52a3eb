/*
 * Model loading: recognises the checkpoint format from the path (a Hugging
 * Face directory, a .safetensors file or index, an llm.c .bin), reads the
 * config, validates it and binds the weights. Also the accessors of the
 * public kvlm_model handle.
 */
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "formats/hf_config.h"
#include "formats/llmc.h"
#include "formats/probe.h"
#include "formats/safetensors.h"

/* The config fields under the names each source file gives them, so that a
 * message points at the field to fix. GGUF keys take the architecture as
 * prefix ("%s." below). */
enum { F_LAYER, F_HEAD, F_KV_HEAD, F_EMBD, F_FF, F_CTX, F_VOCAB, F_EOS, F_EPS, F_HEAD_DIM, F_COUNT };

static const char *const field_names[][F_COUNT] = {
    [MODEL_SRC_HF_GPT2] = {"n_layer", "n_head", "n_head", "n_embd", "n_inner", "n_positions", "vocab_size",
                           "eos_token_id", "layer_norm_epsilon", "n_embd / n_head"},
    [MODEL_SRC_HF_LLAMA] = {"num_hidden_layers", "num_attention_heads", "num_key_value_heads", "hidden_size",
                            "intermediate_size", "max_position_embeddings", "vocab_size", "eos_token_id",
                            "rms_norm_eps", "head_dim"},
    [MODEL_SRC_GGUF] = {"%s.block_count", "%s.attention.head_count", "%s.attention.head_count_kv",
                        "%s.embedding_length", "%s.feed_forward_length", "%s.context_length",
                        "rows of token_embd.weight", "tokenizer.ggml.eos_token_id", "%s.attention.layer_norm%s_epsilon",
                        "%s.attention.key_length"},
    [MODEL_SRC_LLMC] = {"num_layers", "num_heads", "num_heads", "channels", "4 x channels", "max_seq_len",
                        "vocab_size", "the end-of-text id", "the layer norm epsilon", "channels / num_heads"},
};

typedef struct field_name { char s[96]; } field_name;

static field_name name_of(model_source src, const kvlm_config *c, int field) {
    field_name n;
    const int rms = strcmp(c->arch, "gpt2") != 0;
    /* GGUF names carry the architecture (and "_rms" for RMSNorm models). */
    snprintf(n.s, sizeof n.s, field_names[src][field], c->arch, rms ? "_rms" : "");
    return n;
}

int model_check_config(const kvlm_config *c, model_source src, const char *origin, kvlm_error *err) {
    struct { int field, v, lo, hi; } f[] = {
        {F_LAYER, c->n_layer, 1, 1024},    {F_HEAD, c->n_head, 1, 1024},  {F_EMBD, c->n_embd, 1, 1 << 16},
        {F_FF, c->n_ff, 1, 1 << 20},       {F_CTX, c->n_ctx, 1, 1 << 20}, {F_VOCAB, c->vocab_size, 1, 1 << 22},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].v < f[i].lo || f[i].v > f[i].hi)
            return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: %s = %d is outside [%d, %d]", origin,
                                  name_of(src, c, f[i].field).s, f[i].v, f[i].lo, f[i].hi);
    if (!strcmp(c->arch, "gpt2") && c->n_embd % c->n_head)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: %s = %d is not a multiple of %s = %d", origin,
                              name_of(src, c, F_EMBD).s, c->n_embd, name_of(src, c, F_HEAD).s, c->n_head);
    if (c->n_kv_head < 1 || c->n_head % c->n_kv_head || c->head_dim < 1 || c->head_dim > 4096)
        return kvlm_error_set(err, KVLM_ERR_FORMAT,
                              "%s: %d query heads (%s) over %d KV heads (%s) of dimension %d (%s) is not a valid layout",
                              origin, c->n_head, name_of(src, c, F_HEAD).s, c->n_kv_head, name_of(src, c, F_KV_HEAD).s,
                              c->head_dim, name_of(src, c, F_HEAD_DIM).s);
    if (c->eos_id >= c->vocab_size)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: %s = %d is not below %s = %d", origin, name_of(src, c, F_EOS).s,
                              c->eos_id, name_of(src, c, F_VOCAB).s, c->vocab_size);
    if (!(c->norm_eps > 0 && c->norm_eps < 1))
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: %s = %g is outside (0, 1)", origin, name_of(src, c, F_EPS).s,
                              c->norm_eps);
    return KVLM_OK;
}

/* Hugging Face: config.json beside the weights (one file or an index). */
static int load_hf(kvlm_model *m, const char *cfg_path, const char *weights, int sharded, kvlm_error *err) {
    int rc = hf_config_load_spec(cfg_path, &m->cfg, m->spec, err);
    if (rc) return rc;
    const int gpt2 = !strcmp(m->cfg.arch, "gpt2");
    if ((rc = model_check_config(&m->cfg, gpt2 ? MODEL_SRC_HF_GPT2 : MODEL_SRC_HF_LLAMA, cfg_path, err))) return rc;
    /* GPT-2's Conv1D matrices are [in, out]; the Llama family's are Linear. */
    m->ts.layout = gpt2 ? LAYOUT_IN_OUT : LAYOUT_OUT_IN;
    rc = sharded ? safetensors_load_index(&m->ts, weights, err) : safetensors_load(&m->ts, weights, err);
    if (rc) return rc;
    snprintf(m->source, sizeof m->source, "safetensors%s (%s): %s", sharded ? " (sharded)" : "", m->cfg.arch,
             weights);
    return gpt2 ? gpt2_bind(m, weights, err) : llama_bind(m, weights, err);
}

static int load_llmc(kvlm_model *m, const char *path, kvlm_error *err) {
    llmc_header h;
    int rc = llmc_load(&m->ts, path, &h, err);
    if (rc) return rc;
    llmc_header_config(&h, &m->cfg);
    if ((rc = model_check_config(&m->cfg, MODEL_SRC_LLMC, path, err))) return rc;
    snprintf(m->source, sizeof m->source, "llm.c v%d: %s", h.version, path);
    return gpt2_bind(m, path, err);
}

static int load_path(kvlm_model *m, const char *path, kvlm_error *err) {
    probe_result *p = malloc(sizeof *p);
    if (!p) return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    int rc = probe_model_path(path, p, err);
    if (!rc) snprintf(m->dir, sizeof m->dir, "%s", p->dir);
    if (!rc && p->kind == PROBE_HF) {
        rc = p->weights[0] ? load_hf(m, p->config, p->weights, p->sharded, err) : probe_no_weights(p, err);
        if (!rc) model_read_pooling(m, -1);
    } else if (!rc && p->kind == PROBE_LLMC) {
        rc = load_llmc(m, path, err);
        if (!rc) model_read_pooling(m, -1);
    } else if (!rc) {
        snprintf(m->tokenizer_path, sizeof m->tokenizer_path, "%s", path);
        rc = model_load_gguf(m, path, err);
    }
    free(p);
    return rc;
}

kvlm_model_params kvlm_model_default_params(void) {
    return (kvlm_model_params){.isa = KVLM_ISA_AUTO, .repack = 1, .use_mmap = 1};
}

int model_check_params(const kvlm_model_params *p, kvlm_error *err) {
    if ((int)p->isa < KVLM_ISA_AUTO || (int)p->isa > KVLM_ISA_NEON_BF16)
        return kvlm_error_set(err, KVLM_ERR_ARG, "model params: isa %d is not a kvlm_isa", (int)p->isa);
    if (p->repack != 0 && p->repack != 1)
        return kvlm_error_set(err, KVLM_ERR_ARG, "model params: repack %d is neither 0 nor 1", p->repack);
    if (p->use_mmap != 0 && p->use_mmap != 1)
        return kvlm_error_set(err, KVLM_ERR_ARG, "model params: use_mmap %d is neither 0 nor 1", p->use_mmap);
    return KVLM_OK;
}

int model_finish_load(kvlm_model *m, const kvlm_model_params *params, kvlm_error *err) {
    return params->repack ? model_repack(m, params->isa, err) : KVLM_OK;
}

kvlm_model *kvlm_model_load(const char *path, const kvlm_model_params *params, kvlm_error *err) {
    kvlm_error local;
    if (!err) err = &local;
    kvlm_error_clear(err);
    const kvlm_model_params p = params ? *params : kvlm_model_default_params();
    if (model_check_params(&p, err)) return NULL;
    kvlm_model *m = calloc(1, sizeof *m);
    if (!m) { kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory"); return NULL; }
    tensor_set_init(&m->ts);
    m->ts.read_files = !p.use_mmap;
    m->spec = model_own(m, malloc(sizeof *m->spec));
    if (m->spec) layer_spec_init(m->spec);
    if (!m->spec) kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    else if (!path || !*path) kvlm_error_set(err, KVLM_ERR_ARG, "model path is empty");
    else if (load_path(m, path, err) == KVLM_OK && model_finish_load(m, &p, err) == KVLM_OK) return m;
    kvlm_model_free(m);
    return NULL;
}

void kvlm_model_free(kvlm_model *m) {
    if (!m) return;
    for (int i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    model_arena_free(m);
    tensor_set_free(&m->ts);
    free(m);
}

const kvlm_config *kvlm_model_config(const kvlm_model *m) { return &m->cfg; }
const char *kvlm_model_dir(const kvlm_model *m) { return m->dir; }
const char *kvlm_model_tokenizer_path(const kvlm_model *m) { return m->tokenizer_path[0] ? m->tokenizer_path : m->dir; }
const char *kvlm_model_source(const kvlm_model *m) { return m->source; }

static size_t matrix_params(const kern_matrix *w, int rows) { return w->data ? (size_t)rows * w->cols : 0; }

/* A layer's mixture of experts: the router, the shared expert, and
 * `experts` of its experts (they have one shape), with their biases. */
static size_t moe_params(const model_moe *moe, int experts) {
    size_t n = matrix_params(&moe->router, moe->router.rows);
    const kern_matrix *sh[] = {&moe->sh_gate, &moe->sh_up, &moe->sh_down};
    for (int i = 0; i < 3; i++) n += matrix_params(sh[i], sh[i]->rows);
    if (moe->sh_router) n += (size_t)moe->router.cols;
    const kern_matrix *ex[] = {&moe->gate[0], &moe->up[0], &moe->down[0]};
    for (int i = 0; i < 3; i++) n += (size_t)experts * matrix_params(ex[i], ex[i]->rows);
    if (moe->router_b) n += (size_t)moe->router.rows;
    if (moe->gate_b) n += (size_t)experts * (2 * (size_t)moe->gate[0].rows + (size_t)moe->down[0].rows);
    return n;
}

static size_t param_count(const kvlm_model *m, int active);

size_t kvlm_model_param_count(const kvlm_model *m) { return param_count(m, 0); }
size_t kvlm_model_active_param_count(const kvlm_model *m) { return param_count(m, 1); }

static size_t param_count(const kvlm_model *m, int active) {
    const kvlm_config *c = &m->cfg;
    const size_t C = (size_t)c->n_embd, F = (size_t)c->n_ff;
    const size_t qkv = (size_t)(c->n_head + 2 * c->n_kv_head) * c->head_dim;
    size_t n = matrix_params(&m->wte, c->vocab_size) + matrix_params(&m->wpe, m->wpe.rows);
    if (m->lm_head.data != m->wte.data) n += matrix_params(&m->lm_head, c->vocab_size);
    n += C + (m->normf_b ? C : 0);
    for (int l = 0; l < c->n_layer; l++) {
        const model_layer *L = &m->layers[l];
        const kern_matrix *ws[] = MODEL_LAYER_MATRICES(L);
        for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) n += matrix_params(ws[i], ws[i]->rows);
        if (L->moe) n += moe_params(L->moe, active ? c->n_expert_used : c->n_expert);
        n += 2 * C + (L->norm1_b ? C : 0) + (L->norm2_b ? C : 0) + (L->bqkv ? qkv : 0) + (L->bo ? C : 0) +
             (L->b_up ? F : 0) + (L->b_down ? C : 0) + (L->q_norm ? 2 * (size_t)c->head_dim : 0) +
             (L->sinks ? (size_t)c->n_head : 0);
    }
    return n;
}

int model_layer_window(const kvlm_model *m, int l) {
    const int w = m->layer_window ? m->layer_window[l] : m->cfg.sliding_window;
    return w > 0 && w < m->cfg.n_ctx ? w : 0;
}

model_attn_layer model_layer_attn(const kvlm_model *m, int l) {
    model_attn_layer a = {0};
    if (m->attn) a = m->attn[l];
    else a.rope_dims = m->n_rope ? 2 * m->rope_freq_n[0] : 0;
    if (!(a.scale > 0)) a.scale = 1.0f / sqrtf((float)m->cfg.head_dim);
    a.window = model_layer_window(m, l);
    return a;
}
