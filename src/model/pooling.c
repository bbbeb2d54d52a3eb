/*
 * The embedding pooling a model's files name (kvlm_model_pooling), read
 * once at load: GGUF {arch}.pooling_type (llama.cpp's enum: 0 none, 1
 * mean, 2 cls, 3 last, 4 rank), else sentence-transformers'
 * 1_Pooling/config.json in the model's directory, else last-token, what
 * decoder embedding models (Qwen3-Embedding) use. A file naming a pooling
 * kvlm does not compute (rank, max, weighted mean, mean_sqrt_len, several
 * modes at once, an unknown value) leaves -1 and says which in
 * pooling_src; reading it never fails a load (the model still generates).
 * Also the names of the pooling types.
 */
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "error.h"
#include "model/model.h"

static const char *const names[] = {"none", "mean", "cls", "last"};

const char *kvlm_pooling_name(kvlm_pooling p) {
    if (p == KVLM_POOLING_UNSPECIFIED) return "unspecified";
    return (int)p >= 0 && (int)p < 4 ? names[p] : NULL;
}

int kvlm_pooling_parse(const char *s, kvlm_pooling *out, kvlm_error *err) {
    for (int i = 0; s && i < 4; i++)
        if (!strcasecmp(s, names[i])) {
            *out = (kvlm_pooling)i;
            return KVLM_OK;
        }
    return kvlm_error_set(err, KVLM_ERR_ARG, "pooling '%s' is not one of mean, cls, last, none", s ? s : "(null)");
}

/* The one true pooling_mode_* of a 1_Pooling/config.json, or -1 with why. */
static int st_pooling(json_t *root, char *why, size_t why_size) {
    static const struct { const char *key; int pooling; } modes[] = {
        {"pooling_mode_mean_tokens", KVLM_POOLING_MEAN},
        {"pooling_mode_cls_token", KVLM_POOLING_CLS},
        {"pooling_mode_lasttoken", KVLM_POOLING_LAST},
        {"pooling_mode_max_tokens", -1},
        {"pooling_mode_mean_sqrt_len_tokens", -1},
        {"pooling_mode_weightedmean_tokens", -1},
    };
    int found = -2, n_true = 0;
    for (size_t i = 0; i < sizeof modes / sizeof *modes; i++) {
        if (!json_is_true(json_object_get(root, modes[i].key))) continue;
        n_true++;
        found = modes[i].pooling;
        if (found < 0) {
            snprintf(why, why_size, "1_Pooling: %s", modes[i].key);
            return -1;
        }
    }
    if (n_true == 1) return found;
    snprintf(why, why_size, "1_Pooling: %s", n_true ? "several modes" : "no mode");
    return -1;
}

void model_read_pooling(kvlm_model *m, int gguf_pooling) {
    m->pooling = KVLM_POOLING_LAST;
    if (gguf_pooling >= KVLM_POOLING_MEAN && gguf_pooling <= KVLM_POOLING_LAST) {
        m->pooling = gguf_pooling;
        snprintf(m->pooling_src, sizeof m->pooling_src, "gguf");
        return;
    }
    if (gguf_pooling != -1 && gguf_pooling != KVLM_POOLING_NONE) {
        m->pooling = -1;
        snprintf(m->pooling_src, sizeof m->pooling_src, "gguf: pooling_type %d%s", gguf_pooling,
                 gguf_pooling == 4 ? " (rank)" : "");
        return;
    }
    /* GGUF "none" (converters write it for models without a pooling) falls
     * through to the files beside it, then to the default. */
    char path[sizeof m->dir + 32];
    snprintf(path, sizeof path, "%s/1_Pooling/config.json", m->dir[0] ? m->dir : ".");
    json_t *root = m->dir[0] ? json_load_file(path, 0, NULL) : NULL;
    if (!root || !json_is_object(root)) {
        json_decref(root);
        snprintf(m->pooling_src, sizeof m->pooling_src, "default");
        return;
    }
    m->pooling = st_pooling(root, m->pooling_src, sizeof m->pooling_src);
    if (m->pooling >= 0) snprintf(m->pooling_src, sizeof m->pooling_src, "1_Pooling");
    json_decref(root);
}

kvlm_pooling kvlm_model_pooling(const kvlm_model *m, const char **source) {
    if (!m->pooling_src[0]) { /* synthetic models */
        if (source) *source = "default";
        return KVLM_POOLING_LAST;
    }
    if (source) *source = m->pooling_src;
    return (kvlm_pooling)m->pooling;
}
