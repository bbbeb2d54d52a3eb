/*
 * kvlm_config_load: a model's configuration without its weights, for
 * commands that only need shapes (kvlm kv sizes the KV cache of models
 * kvlm cannot run yet). It reuses the readers kvlm_model_load uses
 * (hf_config_load, the llm.c header check, the GGUF metadata) and applies
 * the same GPT-2 validation, so a config accepted here is the config the
 * loader would build. Only a GGUF file is memory-mapped (its metadata and
 * tensor table; no weight is touched); an llm.c file is read for its
 * 1,024-byte header only, so a truncated weight section goes unnoticed.
 */
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "error.h"
#include "formats/hf_config.h"
#include "formats/llmc.h"
#include "model/model.h"

static int has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && !strcmp(s + n - k, suf);
}

/* Reads the config path names; origin receives the file it came from. */
static int load_config(const char *path, kvlm_config *cfg, char *origin, size_t cap, kvlm_error *err) {
    struct stat st;
    if (stat(path, &st) != 0) return kvlm_error_set(err, KVLM_ERR_IO, "%s: no such file or directory", path);
    snprintf(origin, cap, "%s", path);
    if (S_ISDIR(st.st_mode)) {
        snprintf(origin, cap, "%s/config.json", path);
        return hf_config_load(origin, cfg, err);
    }
    if (has_suffix(path, ".safetensors") || has_suffix(path, ".index.json")) {
        char *dup = strdup(path);
        if (!dup) return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
        snprintf(origin, cap, "%s/config.json", dirname(dup));
        free(dup);
        return hf_config_load(origin, cfg, err);
    }
    if (has_suffix(path, ".json")) return hf_config_load(path, cfg, err);
    llmc_header h;
    unsigned char magic[4] = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return kvlm_error_set(err, KVLM_ERR_IO, "%s: cannot open", path);
    size_t n = fread(magic, 1, sizeof magic, f);
    fclose(f);
    if (n == sizeof magic && !memcmp(magic, "GGUF", 4)) return model_gguf_config(path, cfg, err);
    if (!llmc_sniff(magic, n))
        return kvlm_error_set(err, KVLM_ERR_FORMAT,
                              "%s: unrecognised model file (expected a model directory, config.json, .safetensors, "
                              "model.safetensors.index.json, .gguf or an llm.c checkpoint)", path);
    int rc = llmc_read_header(path, &h, err);
    if (rc) return rc;
    llmc_header_config(&h, cfg);
    return KVLM_OK;
}

int kvlm_config_load(const char *path, kvlm_config *cfg, kvlm_error *err) {
    kvlm_error local;
    if (!err) err = &local;
    kvlm_error_clear(err);
    if (!cfg) return kvlm_error_set(err, KVLM_ERR_ARG, "kvlm_config_load: cfg is NULL");
    memset(cfg, 0, sizeof *cfg);
    if (!path || !*path) return kvlm_error_set(err, KVLM_ERR_ARG, "model path is empty");
    char origin[4200];
    int rc = load_config(path, cfg, origin, sizeof origin, err);
    /* GPT-2 configs get the loader's own checks (and its field names). */
    if (!rc && !strcmp(cfg->arch, "gpt2"))
        rc = model_check_config(cfg, has_suffix(origin, ".json") ? MODEL_SRC_HF_GPT2 : MODEL_SRC_LLMC, origin, err);
    if (rc) memset(cfg, 0, sizeof *cfg);
    return rc;
}
