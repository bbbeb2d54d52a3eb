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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "formats/hf_config.h"
#include "formats/llmc.h"
#include "formats/probe.h"
#include "model/model.h"

/* Reads the config path names (and, spec not NULL, what it says per
 * layer); origin receives the file it came from and *hf 1 when that is a
 * config.json. */
static int load_config(const char *path, kvlm_config *cfg, layer_spec *spec, char *origin, size_t cap, int *hf,
                       kvlm_error *err) {
    probe_result *p = malloc(sizeof *p);
    if (!p) return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    int rc = probe_model_path(path, p, err);
    snprintf(origin, cap, "%s", rc ? path : p->kind == PROBE_HF ? p->config : p->weights);
    *hf = !rc && p->kind == PROBE_HF;
    if (!rc && p->kind == PROBE_HF) rc = spec ? hf_config_load_spec(p->config, cfg, spec, err) : hf_config_load(p->config, cfg, err);
    else if (!rc && p->kind == PROBE_GGUF) rc = model_gguf_config(path, cfg, spec, err);
    else if (!rc) {
        llmc_header h;
        if (!(rc = llmc_read_header(path, &h, err))) llmc_header_config(&h, cfg);
    }
    free(p);
    return rc;
}

static int config_spec(const char *path, kvlm_config *cfg, layer_spec *spec, kvlm_error *err) {
    memset(cfg, 0, sizeof *cfg);
    if (spec) layer_spec_init(spec);
    if (!path || !*path) return kvlm_error_set(err, KVLM_ERR_ARG, "model path is empty");
    char origin[PROBE_PATH_MAX];
    int hf = 0;
    int rc = load_config(path, cfg, spec, origin, sizeof origin, &hf, err);
    /* GPT-2 configs get the loader's own checks (and its field names). */
    if (!rc && !strcmp(cfg->arch, "gpt2"))
        rc = model_check_config(cfg, hf ? MODEL_SRC_HF_GPT2 : MODEL_SRC_LLMC, origin, err);
    if (rc) memset(cfg, 0, sizeof *cfg);
    return rc;
}

int kvlm_config_load(const char *path, kvlm_config *cfg, kvlm_error *err) {
    kvlm_error local;
    if (!err) err = &local;
    kvlm_error_clear(err);
    if (!cfg) return kvlm_error_set(err, KVLM_ERR_ARG, "kvlm_config_load: cfg is NULL");
    return config_spec(path, cfg, NULL, err);
}

int kvlm_config_layer_windows(const char *path, int *windows, int cap, kvlm_error *err) {
    kvlm_error local;
    if (!err) err = &local;
    kvlm_error_clear(err);
    if (cap < 0 || (cap > 0 && !windows))
        return kvlm_error_set(err, KVLM_ERR_ARG, "kvlm_config_layer_windows: room for %d windows at %p", cap,
                              (void *)windows);
    kvlm_config cfg;
    layer_spec *spec = malloc(sizeof *spec);
    if (!spec) return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    int rc = config_spec(path, &cfg, spec, err);
    if (!rc) {
        for (int l = 0; l < cfg.n_layer && l < cap; l++) windows[l] = model_spec_window(spec, &cfg, l);
        rc = cfg.n_layer;
    }
    free(spec);
    return rc;
}
