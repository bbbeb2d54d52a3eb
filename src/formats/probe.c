/*
 * Model path probe (see probe.h). Order of the checks: a directory; then
 * by name, an index (".index.json" before ".json"), a .safetensors file,
 * any other .json; then by content, the GGUF magic and the llm.c magic.
 * Only the first four bytes of a file are read.
 */
#include "formats/probe.h"

#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "formats/llmc.h"

static int has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && !strcmp(s + n - k, suf);
}

static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

/* Copies s into a PROBE_PATH_MAX buffer; KVLM_ERR_ARG when it does not fit. */
static int put(char *dst, const char *what, const char *s, const char *path, kvlm_error *err) {
    if ((size_t)snprintf(dst, PROBE_PATH_MAX, "%s", s) >= PROBE_PATH_MAX)
        return kvlm_error_set(err, KVLM_ERR_ARG, "%s: %s path is longer than %d bytes", path, what, PROBE_PATH_MAX - 1);
    return KVLM_OK;
}

/* config.json and the weights (an index first, then one file) in dir. */
static int hf_files(probe_result *r, const char *path, kvlm_error *err) {
    if ((size_t)snprintf(r->config, PROBE_PATH_MAX, "%s/config.json", r->dir) >= PROBE_PATH_MAX)
        return kvlm_error_set(err, KVLM_ERR_ARG, "%s: directory path is too long", path);
    if (r->weights[0]) return KVLM_OK;
    char w[PROBE_PATH_MAX + 32];
    snprintf(w, sizeof w, "%s/model.safetensors.index.json", r->dir);
    if (exists(w)) {
        r->sharded = 1;
        return put(r->weights, "weights", w, path, err);
    }
    snprintf(w, sizeof w, "%s/model.safetensors", r->dir);
    return exists(w) ? put(r->weights, "weights", w, path, err) : KVLM_OK;
}

int probe_model_path(const char *path, probe_result *out, kvlm_error *err) {
    memset(out, 0, sizeof *out);
    struct stat st;
    if (!path || !*path) return kvlm_error_set(err, KVLM_ERR_ARG, "model path is empty");
    if (stat(path, &st) != 0) return kvlm_error_set(err, KVLM_ERR_IO, "%s: no such file or directory", path);
    if (S_ISDIR(st.st_mode)) {
        out->kind = PROBE_HF;
        int rc = put(out->dir, "directory", path, path, err);
        return rc ? rc : hf_files(out, path, err);
    }
    char *dup = strdup(path);
    if (!dup) return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    int rc = put(out->dir, "directory", dirname(dup), path, err);
    free(dup);
    if (rc) return rc;
    if (has_suffix(path, ".index.json") || has_suffix(path, ".safetensors")) {
        out->kind = PROBE_HF;
        out->sharded = has_suffix(path, ".index.json");
        rc = put(out->weights, "weights", path, path, err);
        return rc ? rc : hf_files(out, path, err);
    }
    if (has_suffix(path, ".json")) { /* a config.json: its weights, if any, are beside it */
        out->kind = PROBE_HF;
        if ((rc = hf_files(out, path, err))) return rc;
        return put(out->config, "config", path, path, err);
    }
    unsigned char magic[4] = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return kvlm_error_set(err, KVLM_ERR_IO, "%s: cannot open", path);
    size_t n = fread(magic, 1, sizeof magic, f);
    fclose(f);
    if (n == sizeof magic && !memcmp(magic, "GGUF", 4)) out->kind = PROBE_GGUF;
    else if (llmc_sniff(magic, n)) out->kind = PROBE_LLMC;
    else
        return kvlm_error_set(err, KVLM_ERR_FORMAT,
                              "%s: unrecognised model file (expected a Hugging Face directory, config.json, "
                              ".safetensors, model.safetensors.index.json, a GGUF file or an llm.c checkpoint)",
                              path);
    return put(out->weights, "weights", path, path, err);
}

int probe_no_weights(const probe_result *p, kvlm_error *err) {
    return kvlm_error_set(err, KVLM_ERR_IO, "%s: no model.safetensors or model.safetensors.index.json in directory",
                          p->dir);
}
