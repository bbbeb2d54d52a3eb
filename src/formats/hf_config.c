/* Hugging Face config.json reader (see hf_config.h). */
#include "formats/hf_config.h"

#include <jansson.h>
#include <string.h>

#include "error.h"

static int get_int(json_t *root, const char *path, const char *key, int required, int def, int *out,
                   kvlm_error *err) {
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) {
        if (required) return kvlm_fail(err, KVLM_ERR_FORMAT, "%s: missing field '%s'", path, key);
        *out = def;
        return KVLM_OK;
    }
    if (!json_is_integer(v) || json_integer_value(v) < -1 || json_integer_value(v) > (1 << 30))
        return kvlm_fail(err, KVLM_ERR_FORMAT, "%s: field '%s' must be an integer in range", path, key);
    *out = (int)json_integer_value(v);
    return KVLM_OK;
}

static int is_gpt2(json_t *root) {
    json_t *mt = json_object_get(root, "model_type");
    if (json_is_string(mt)) return !strcmp(json_string_value(mt), "gpt2");
    json_t *arch = json_object_get(root, "architectures");
    size_t i;
    json_t *a;
    json_array_foreach(arch, i, a) {
        if (json_is_string(a) && !strncmp(json_string_value(a), "GPT2", 4)) return 1;
    }
    return 0;
}

int hf_config_load(const char *path, kvlm_config *cfg, kvlm_error *err) {
    json_error_t je;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!root) {
        if (je.line < 0 || strstr(je.text, "unable to open"))
            return kvlm_fail(err, KVLM_ERR_IO, "%s: %s", path, je.text);
        return kvlm_fail(err, KVLM_ERR_FORMAT, "%s: not valid JSON: %s (line %d)", path, je.text, je.line);
    }
    int rc = KVLM_OK;
    memset(cfg, 0, sizeof *cfg);
    if (!json_is_object(root)) {
        rc = kvlm_fail(err, KVLM_ERR_FORMAT, "%s: not a JSON object", path);
        goto done;
    }
    if (!is_gpt2(root)) {
        json_t *mt = json_object_get(root, "model_type");
        rc = kvlm_fail(err, KVLM_ERR_UNSUPPORTED, "%s: model_type '%s' is not supported (gpt2)", path,
                       json_is_string(mt) ? json_string_value(mt) : "(missing)");
        goto done;
    }
    json_t *act = json_object_get(root, "activation_function");
    if (json_is_string(act) && strcmp(json_string_value(act), "gelu_new") &&
        strcmp(json_string_value(act), "gelu_pytorch_tanh")) {
        rc = kvlm_fail(err, KVLM_ERR_UNSUPPORTED, "%s: activation_function '%s' is not supported (gelu_new)", path,
                       json_string_value(act));
        goto done;
    }
    strcpy(cfg->arch, "gpt2");
    int n_pos = 0;
    if ((rc = get_int(root, path, "n_layer", 1, 0, &cfg->n_layer, err)) ||
        (rc = get_int(root, path, "n_head", 1, 0, &cfg->n_head, err)) ||
        (rc = get_int(root, path, "n_embd", 1, 0, &cfg->n_embd, err)) ||
        (rc = get_int(root, path, "vocab_size", 1, 0, &cfg->vocab_size, err)) ||
        (rc = get_int(root, path, "n_positions", 0, 1024, &n_pos, err)) ||
        (rc = get_int(root, path, "n_inner", 0, 0, &cfg->n_ff, err)) ||
        (rc = get_int(root, path, "eos_token_id", 0, -1, &cfg->eos_id, err)))
        goto done;
    cfg->n_ctx = n_pos;
    /* n_embd is range-checked later; 4 x n_embd must not overflow first. */
    if (cfg->n_ff == 0 && cfg->n_embd <= (1 << 20)) cfg->n_ff = 4 * cfg->n_embd;
    cfg->n_kv_head = cfg->n_head;
    cfg->head_dim = cfg->n_head > 0 ? cfg->n_embd / cfg->n_head : 0;
    json_t *eps = json_object_get(root, "layer_norm_epsilon");
    cfg->norm_eps = json_is_number(eps) ? (float)json_number_value(eps) : 1e-5f;
done:
    json_decref(root);
    return rc;
}
