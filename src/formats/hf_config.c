/*
 * Hugging Face config.json reader (see hf_config.h). Two field dialects:
 * GPT-2 (n_layer, n_head, n_embd, ...) and the Llama family (llama,
 * mistral, qwen2, qwen3, phi3: num_hidden_layers, num_attention_heads,
 * num_key_value_heads, ...), the latter with the expert counts and sizes
 * of the mixtures of experts (qwen2_moe, qwen3_moe, mixtral, gpt_oss). Llama-family configs are range-checked here
 * under their own field names (their different limits and defaults too);
 * model_check_config then checks what every source shares.
 */
#include "formats/hf_config.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "formats/hf_layers.h"

static int get_int(json_t *root, const char *path, const char *key, int required, int def, int *out,
                   kvlm_error *err) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        if (required) return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: missing field '%s'", path, key);
        *out = def;
        return KVLM_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < -1 || json_integer_value(v) > (1 << 30))
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: field '%s' must be an integer in range", path, key);
    *out = (int)json_integer_value(v);
    return KVLM_OK;
}

/* eos_token_id of one file: an integer, or a list of them (Llama 3 lists
 * several end tokens). Each id is appended to cfg->eos_ids once; the first
 * id kvlm meets becomes cfg->eos_id. Absent, null or -1: nothing. */
static int add_eos(kvlm_config *cfg, json_int_t id, const char *path, kvlm_error *err) {
    if (id == -1) return KVLM_OK; /* "none", as some files write it */
    if (id < 0 || id > (1 << 30))
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: eos_token_id %lld is not a token id", path, (long long)id);
    for (int i = 0; i < cfg->n_eos; i++)
        if (cfg->eos_ids[i] == id) return KVLM_OK;
    if (cfg->n_eos == KVLM_MAX_EOS)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: eos_token_id: more than %d distinct ids", path, KVLM_MAX_EOS);
    cfg->eos_ids[cfg->n_eos++] = (int32_t)id;
    if (cfg->eos_id < 0) cfg->eos_id = (int)id;
    return KVLM_OK;
}

static int get_eos(json_t *root, const char *path, kvlm_config *cfg, kvlm_error *err) {
    json_t *v = json_object_get(root, "eos_token_id");
    if (!v || json_is_null(v)) return KVLM_OK;
    if (json_is_integer(v)) return add_eos(cfg, json_integer_value(v), path, err);
    if (!json_is_array(v))
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: field 'eos_token_id' must be an integer or a list of them", path);
    size_t i;
    json_t *x;
    json_array_foreach(v, i, x) {
        if (!json_is_integer(x))
            return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: eos_token_id[%zu] is not an integer", path, i);
        int rc = add_eos(cfg, json_integer_value(x), path, err);
        if (rc) return rc;
    }
    return KVLM_OK;
}

static int check_eos(const char *path, const kvlm_config *cfg, kvlm_error *err) {
    for (int i = 0; i < cfg->n_eos; i++)
        if (cfg->eos_ids[i] >= cfg->vocab_size)
            return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: eos_token_id = %d is not below vocab_size = %d", path,
                                  cfg->eos_ids[i], cfg->vocab_size);
    return KVLM_OK;
}

/* generation_config.json beside config.json (optional): its eos_token_id
 * joins config.json's, since either may name the token generation ends on
 * (instruction-tuned models list their end-of-turn token there). A file
 * that exists must be valid. */
static int load_generation_config(const char *path, kvlm_config *cfg, kvlm_error *err) {
    char gen[4200];
    const char *slash = strrchr(path, '/');
    snprintf(gen, sizeof gen, "%.*sgeneration_config.json", slash ? (int)(slash - path + 1) : 0, path);
    FILE *f = fopen(gen, "rb");
    if (!f) return KVLM_OK;
    fclose(f);
    json_error_t je;
    json_t *root = json_load_file(gen, JSON_REJECT_DUPLICATES, &je);
    if (!root) return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: not valid JSON: %s (line %d)", gen, je.text, je.line);
    int rc = json_is_object(root) ? get_eos(root, gen, cfg, err)
                                  : kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: not a JSON object", gen);
    if (!rc) rc = check_eos(gen, cfg, err);
    json_decref(root);
    return rc;
}


/* Architectures this reader understands, by model_type and, when that is
 * absent, by the prefix of an entry in "architectures". */
static const struct hf_arch {
    const char *model_type, *class_prefix, *arch; /* arch: kvlm's (and llama.cpp's) name */
} hf_archs[] = {
    {"gpt2", "GPT2", "gpt2"},       {"llama", "Llama", "llama"},   {"mistral", "Mistral", "mistral"},
    {"qwen2", "Qwen2", "qwen2"},    {"qwen3", "Qwen3", "qwen3"},   {"phi3", "Phi3", "phi3"},
    {"gemma2", "Gemma2", "gemma2"}, {"gemma3_text", "Gemma3", "gemma3"}, {"smollm3", "SmolLM3", "smollm3"},
    {"granite", "Granite", "granite"}, {"qwen2_moe", "Qwen2Moe", "qwen2moe"}, {"qwen3_moe", "Qwen3Moe", "qwen3moe"},
    {"mixtral", "Mixtral", "mixtral"}, {"gpt_oss", "GptOss", "gpt-oss"},
};
#define HF_ARCH_NAMES \
    "gpt2, llama, mistral, qwen2, qwen3, phi3, gemma2, gemma3_text, smollm3, granite, qwen2_moe, qwen3_moe, mixtral, gpt_oss"

static const char *find_arch(json_t *root) {
    json_t *mt = json_object_get(root, "model_type");
    if (json_is_string(mt)) {
        for (size_t k = 0; k < sizeof hf_archs / sizeof hf_archs[0]; k++)
            if (!strcmp(json_string_value(mt), hf_archs[k].model_type)) return hf_archs[k].arch;
        return NULL;
    }
    json_t *arch = json_object_get(root, "architectures");
    size_t i;
    json_t *a;
    json_array_foreach(arch, i, a) {
        if (!json_is_string(a)) continue;
        for (size_t k = 0; k < sizeof hf_archs / sizeof hf_archs[0]; k++) {
            const char *p = hf_archs[k].class_prefix, *s = json_string_value(a);
            /* "Qwen2ForCausalLM" but not "Qwen2MoeForCausalLM" */
            if (!strncmp(s, p, strlen(p)) && !strncmp(s + strlen(p), "For", 3)) return hf_archs[k].arch;
            if (k == 0 && !strncmp(s, p, strlen(p))) return hf_archs[k].arch;
        }
    }
    return NULL;
}

static void get_torch_dtype(json_t *root, kvlm_config *cfg) {
    json_t *td = json_object_get(root, "torch_dtype");
    kvlm_dtype dt;
    cfg->weight_dtype = json_is_string(td) && !kvlm_dtype_parse(json_string_value(td), &dt, NULL) ? dt : KVLM_F32;
}

static int load_gpt2(json_t *root, const char *path, kvlm_config *cfg, kvlm_error *err) {
    json_t *act = json_object_get(root, "activation_function");
    if (json_is_string(act) && strcmp(json_string_value(act), "gelu_new") &&
        strcmp(json_string_value(act), "gelu_pytorch_tanh"))
        return kvlm_error_set(err, KVLM_ERR_UNSUPPORTED, "%s: activation_function '%s' is not supported (gelu_new)", path,
                              json_string_value(act));
    int rc, n_pos = 0;
    if ((rc = get_int(root, path, "n_layer", 1, 0, &cfg->n_layer, err)) ||
        (rc = get_int(root, path, "n_head", 1, 0, &cfg->n_head, err)) ||
        (rc = get_int(root, path, "n_embd", 1, 0, &cfg->n_embd, err)) ||
        (rc = get_int(root, path, "vocab_size", 1, 0, &cfg->vocab_size, err)) ||
        (rc = get_int(root, path, "n_positions", 0, 1024, &n_pos, err)) ||
        (rc = get_int(root, path, "n_inner", 0, 0, &cfg->n_ff, err)) || (rc = get_eos(root, path, cfg, err)))
        return rc;
    cfg->n_ctx = n_pos;
    /* n_embd is range-checked later; 4 x n_embd must not overflow first. */
    if (cfg->n_ff == 0 && cfg->n_embd <= (1 << 20)) cfg->n_ff = 4 * cfg->n_embd;
    cfg->n_kv_head = cfg->n_head;
    cfg->head_dim = cfg->n_head > 0 ? cfg->n_embd / cfg->n_head : 0;
    json_t *eps = json_object_get(root, "layer_norm_epsilon");
    cfg->norm_eps = json_is_number(eps) ? (float)json_number_value(eps) : 1e-5f;
    return KVLM_OK;
}

static int check_range(const char *path, const char *field, int v, int lo, int hi, kvlm_error *err) {
    if (v < lo || v > hi)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: %s = %d is outside [%d, %d]", path, field, v, lo, hi);
    return KVLM_OK;
}

static double get_num(json_t *o, const char *key, double def) {
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : def;
}

/* sliding_window (an integer or null) as Hugging Face applies it to every
 * layer: Mistral and Phi-3 whenever it is set (Mistral's default, when the
 * key is absent, is 4096). The families that window some layers only
 * (Qwen's use_sliding_window, Gemma, SmolLM3) are read by hf_layers.c.
 * Llama has none. A window at least as long as the context never masks
 * anything and is stored as 0. */
static int load_window(json_t *root, const char *path, kvlm_config *cfg, kvlm_error *err) {
    if (strcmp(cfg->arch, "mistral") && strcmp(cfg->arch, "phi3") && strcmp(cfg->arch, "mixtral")) return KVLM_OK;
    int w = 0, rc;
    /* Hugging Face's MistralConfig defaults to 4096 when the key is absent
     * (null is no window); the others default to none. */
    const int def = !strcmp(cfg->arch, "mistral") && !json_object_get(root, "sliding_window") ? 4096 : 0;
    if ((rc = get_int(root, path, "sliding_window", 0, def, &w, err))) return rc;
    if (w < 0) return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: sliding_window = %d is not a window length", path, w);
    cfg->sliding_window = w < cfg->n_ctx ? w : 0;
    return KVLM_OK;
}

/* The window of the per-layer spec: when every layer slides, it is the
 * model's sliding_window (the KV cache then releases what no layer sees
 * any more); when only some do, sliding_window stays 0. */
static void spec_window(kvlm_config *cfg, const layer_spec *s) {
    if (!s->window || s->window >= cfg->n_ctx) return;
    for (int l = 0; l < cfg->n_layer; l++)
        if (!s->sliding[l]) return;
    cfg->sliding_window = s->window;
}

/* rope_theta, rope_scaling (none or type llama3), tied embeddings, q/k/v
 * biases (Qwen2 has them; attention_bias says so for Llama, Qwen3 and
 * Phi-3), Qwen3's q/k norms. */
static int load_rope(json_t *root, const char *path, kvlm_config *cfg, layer_spec *spec, kvlm_error *err) {
    cfg->rope_theta = (float)get_num(root, "rope_theta", 10000.0);
    if (!(cfg->rope_theta > 1 && cfg->rope_theta < 1e12))
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: rope_theta = %g is outside (1, 1e12)", path, cfg->rope_theta);
    json_t *tie = json_object_get(root, "tie_word_embeddings"), *ab = json_object_get(root, "attention_bias");
    cfg->tie_embeddings = json_is_true(tie);
    cfg->qkv_bias = !strcmp(cfg->arch, "qwen2") || !strcmp(cfg->arch, "qwen2moe") || json_is_true(ab) ||
                    (!strcmp(cfg->arch, "gpt-oss") && !json_is_false(ab)); /* GptOssConfig's default: true */
    cfg->qk_norm = !strcmp(cfg->arch, "qwen3") || !strcmp(cfg->arch, "qwen3moe");
    int rc;
    if ((rc = load_window(root, path, cfg, err))) return rc;
    if ((rc = hf_layer_spec(root, path, cfg, spec, err))) return rc;
    spec_window(cfg, spec);
    json_t *sc = json_object_get(root, "rope_scaling");
    if (!sc || json_is_null(sc)) return KVLM_OK;
    json_t *type = json_object_get(sc, "rope_type");
    if (!type) type = json_object_get(sc, "type");
    const char *tn = json_is_string(type) ? json_string_value(type) : "?";
    if (json_is_object(sc) && !strcmp(tn, "linear")) {
        spec->rope_linear = (float)get_num(sc, "factor", 0);
        if (!(spec->rope_linear >= 1 && spec->rope_linear < 1e6))
            return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: rope_scaling.factor %g (linear) is outside [1, 1e6)", path,
                                  spec->rope_linear);
        return KVLM_OK;
    }
    if (json_is_object(sc) && (!strcmp(tn, "longrope") || !strcmp(tn, "su")))
        return hf_longrope(root, sc, path, cfg, spec, err);
    if (json_is_object(sc) && !strcmp(tn, "yarn")) return hf_yarn(root, sc, path, cfg, spec, err);
    if (!json_is_object(sc) || strcmp(tn, "llama3"))
        return kvlm_error_set(err, KVLM_ERR_UNSUPPORTED,
                              "%s: rope_scaling.%s '%s' is not supported (llama3, linear, longrope, yarn)",
                              path, json_object_get(sc, "rope_type") ? "rope_type" : "type", tn);
    cfg->rope_factor = (float)get_num(sc, "factor", 0);
    cfg->rope_low_freq_factor = (float)get_num(sc, "low_freq_factor", 1);
    cfg->rope_high_freq_factor = (float)get_num(sc, "high_freq_factor", 4);
    if ((rc = get_int(sc, path, "original_max_position_embeddings", 0, 8192, &cfg->rope_original_ctx, err)))
        return rc;
    if (!(cfg->rope_factor >= 1 && cfg->rope_factor < 1e4) || !(cfg->rope_low_freq_factor > 0) ||
        !(cfg->rope_high_freq_factor > cfg->rope_low_freq_factor) || cfg->rope_original_ctx < 1)
        return kvlm_error_set(err, KVLM_ERR_FORMAT,
                              "%s: rope_scaling: factor %g (>= 1), low_freq_factor %g, high_freq_factor %g (> low), "
                              "original_max_position_embeddings %d out of range",
                              path, cfg->rope_factor, cfg->rope_low_freq_factor, cfg->rope_high_freq_factor,
                              cfg->rope_original_ctx);
    return KVLM_OK;
}

/* The mixtures of experts: gpt-oss (num_local_experts, num_experts_per_tok
 * or experts_per_token, experts of intermediate_size), Qwen2-MoE and Qwen3-MoE (num_experts,
 * moe_intermediate_size, norm_topk_prob, Qwen2-MoE's shared expert of
 * shared_expert_intermediate_size) and Mixtral (num_local_experts, experts
 * of intermediate_size, top-k always renormalised). Every layer must be
 * sparse: decoder_sparse_step other than 1 or a non-empty mlp_only_layers
 * (dense MLPs on some layers) is refused by name. */
static int load_moe(json_t *root, const char *path, kvlm_config *cfg, kvlm_error *err) {
    const int mixtral = !strcmp(cfg->arch, "mixtral"), qwen2 = !strcmp(cfg->arch, "qwen2moe");
    const int oss = !strcmp(cfg->arch, "gpt-oss");
    const char *n_key = mixtral || oss ? "num_local_experts" : "num_experts";
    /* gpt-oss's configs carry experts_per_token too (OpenAI's name). */
    const char *k_key = oss && !json_object_get(root, "num_experts_per_tok") ? "experts_per_token" : "num_experts_per_tok";
    int rc, step = 1;
    if ((rc = get_int(root, path, n_key, 1, 0, &cfg->n_expert, err)) ||
        (rc = get_int(root, path, k_key, 1, 0, &cfg->n_expert_used, err)) ||
        (rc = check_range(path, n_key, cfg->n_expert, 1, 4096, err)) ||
        (rc = check_range(path, k_key, cfg->n_expert_used, 1, cfg->n_expert, err)))
        return rc;
    if (mixtral || oss) {
        cfg->n_ff_expert = cfg->n_ff;
        cfg->expert_norm_topk = mixtral; /* gpt-oss: a softmax over the k chosen logits (layer_spec) */
        return KVLM_OK;
    }
    if ((rc = get_int(root, path, "moe_intermediate_size", 1, 0, &cfg->n_ff_expert, err)) ||
        (rc = check_range(path, "moe_intermediate_size", cfg->n_ff_expert, 1, 1 << 20, err)) ||
        (rc = get_int(root, path, "decoder_sparse_step", 0, 1, &step, err)))
        return rc;
    if (qwen2 && ((rc = get_int(root, path, "shared_expert_intermediate_size", 1, 0, &cfg->n_ff_shared, err)) ||
                  (rc = check_range(path, "shared_expert_intermediate_size", cfg->n_ff_shared, 1, 1 << 20, err))))
        return rc;
    json_t *dense = json_object_get(root, "mlp_only_layers");
    if (step != 1 || (json_is_array(dense) && json_array_size(dense) > 0))
        return kvlm_error_set(err, KVLM_ERR_UNSUPPORTED, "%s: %s: dense MLPs on some layers are not supported (every "
                              "layer a mixture of experts)", path, step != 1 ? "decoder_sparse_step != 1" : "mlp_only_layers");
    cfg->expert_norm_topk = json_is_true(json_object_get(root, "norm_topk_prob"));
    return KVLM_OK;
}

/* Llama, Mistral, Qwen2, Qwen3, Phi-3 and the mixtures of experts share these field names and
 * defaults. */
static int load_llama(json_t *root, const char *path, kvlm_config *cfg, layer_spec *spec, kvlm_error *err) {
    int rc;
    if ((rc = get_int(root, path, "num_hidden_layers", 1, 0, &cfg->n_layer, err)) ||
        (rc = get_int(root, path, "num_attention_heads", 1, 0, &cfg->n_head, err)) ||
        (rc = get_int(root, path, "num_key_value_heads", 0, cfg->n_head, &cfg->n_kv_head, err)) ||
        (rc = get_int(root, path, "hidden_size", 1, 0, &cfg->n_embd, err)) ||
        (rc = get_int(root, path, "intermediate_size", 1, 0, &cfg->n_ff, err)) ||
        (rc = get_int(root, path, "max_position_embeddings", 1, 0, &cfg->n_ctx, err)) ||
        (rc = get_int(root, path, "vocab_size", 1, 0, &cfg->vocab_size, err)) ||
        (rc = get_eos(root, path, cfg, err)))
        return rc;
    if ((rc = check_range(path, "num_hidden_layers", cfg->n_layer, 1, 1024, err)) ||
        (rc = check_range(path, "num_attention_heads", cfg->n_head, 1, 1024, err)) ||
        (rc = check_range(path, "num_key_value_heads", cfg->n_kv_head, 1, cfg->n_head, err)) ||
        (rc = check_range(path, "hidden_size", cfg->n_embd, 1, 1 << 17, err)) ||
        (rc = check_range(path, "intermediate_size", cfg->n_ff, 1, 1 << 20, err)) ||
        (rc = check_range(path, "max_position_embeddings", cfg->n_ctx, 1, 1 << 24, err)) ||
        (rc = check_range(path, "vocab_size", cfg->vocab_size, 1, 1 << 22, err)))
        return rc;
    if (cfg->n_head % cfg->n_kv_head)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: num_attention_heads = %d is not a multiple of num_key_value_heads = %d",
                              path, cfg->n_head, cfg->n_kv_head);
    /* head_dim may be set explicitly (and differ from hidden_size / heads). */
    if ((rc = get_int(root, path, "head_dim", 0, 0, &cfg->head_dim, err))) return rc;
    if (cfg->head_dim == 0) {
        if (cfg->n_embd % cfg->n_head)
            return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: hidden_size = %d is not a multiple of num_attention_heads = %d",
                                  path, cfg->n_embd, cfg->n_head);
        cfg->head_dim = cfg->n_embd / cfg->n_head;
    }
    if ((rc = check_range(path, "head_dim", cfg->head_dim, 1, 1 << 12, err))) return rc;
    if ((rc = check_eos(path, cfg, err))) return rc;
    if ((!strcmp(cfg->arch, "mixtral") || !strcmp(cfg->arch, "gpt-oss") || strstr(cfg->arch, "moe")) &&
        (rc = load_moe(root, path, cfg, err)))
        return rc;
    json_t *eps = json_object_get(root, "rms_norm_eps");
    cfg->norm_eps = json_is_number(eps) ? (float)json_number_value(eps) : 1e-6f;
    if (!(cfg->norm_eps > 0 && cfg->norm_eps < 1))
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: rms_norm_eps = %g is outside (0, 1)", path, cfg->norm_eps);
    return load_rope(root, path, cfg, spec, err);
}

int hf_config_load(const char *path, kvlm_config *cfg, kvlm_error *err) {
    layer_spec *s = malloc(sizeof *s);
    if (!s) return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    int rc = hf_config_load_spec(path, cfg, s, err);
    free(s);
    return rc;
}

int hf_config_load_spec(const char *path, kvlm_config *cfg, layer_spec *spec, kvlm_error *err) {
    json_error_t je;
    memset(cfg, 0, sizeof *cfg);
    layer_spec_init(spec);
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        if (je.line < 0 || strstr(je.text, "unable to open"))
            return kvlm_error_set(err, KVLM_ERR_IO, "%s: %s", path, je.text);
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: not valid JSON: %s (line %d)", path, je.text, je.line);
    }
    int rc = KVLM_OK;
    if (!json_is_object(root)) {
        rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: not a JSON object", path);
        goto done;
    }
    const char *arch = find_arch(root);
    if (!arch) {
        json_t *mt = json_object_get(root, "model_type");
        rc = kvlm_error_set(err, KVLM_ERR_UNSUPPORTED, "%s: model_type '%s' is not supported (" HF_ARCH_NAMES ")", path,
                            json_is_string(mt) ? json_string_value(mt) : "(missing)");
        goto done;
    }
    /* Set before the fields are read: see hf_config.h. */
    snprintf(cfg->arch, sizeof cfg->arch, "%s", arch);
    get_torch_dtype(root, cfg);
    cfg->eos_id = -1;
    rc = strcmp(arch, "gpt2") ? load_llama(root, path, cfg, spec, err) : load_gpt2(root, path, cfg, err);
    if (!rc) rc = check_eos(path, cfg, err);
    if (!rc) rc = load_generation_config(path, cfg, err);
done:
    json_decref(root);
    return rc;
}
