/*
 * kvlm_weight_bytes (kvlm.h): the bytes of weights a checkpoint declares,
 * for capacity planning (kvlm kv, kvlm serve's GET /kvlm/model) without
 * loading a model. The path goes through the one probe (formats/probe.h);
 * the tensor headers are read by the format's own reader, so a size here
 * is the size the loader would map. Sums are overflow-checked.
 */
#include <stdlib.h>
#include <string.h>

#include "formats/gguf.h"
#include "formats/llmc.h"
#include "formats/probe.h"
#include "formats/safetensors.h"
#include "formats/tensor_set.h"
#include "tensor.h"

static int has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), k = strlen(suf);
    return n >= k && !strcmp(s + n - k, suf);
}

/* Buffers some checkpoints store beside the parameters (GPT-2's causal
 * masks, older Llama rotary tables): never read by kvlm, so never resident. */
static int is_buffer(const char *name) {
    return has_suffix(name, ".attn.bias") || has_suffix(name, ".attn.masked_bias") || has_suffix(name, ".inv_freq");
}

static int load_headers(tensor_set *ts, const probe_result *p, kvlm_error *err) {
    switch (p->kind) {
    case PROBE_HF:
        if (!p->weights[0]) return probe_no_weights(p, err);
        return p->sharded ? safetensors_load_index(ts, p->weights, err) : safetensors_load(ts, p->weights, err);
    case PROBE_GGUF: {
        gguf_meta g = {0};
        int rc = gguf_load(ts, &g, p->weights, err);
        gguf_meta_free(&g);
        return rc;
    }
    case PROBE_LLMC: {
        llmc_header h;
        return llmc_load(ts, p->weights, &h, err);
    }
    }
    return kvlm_error_set(err, KVLM_ERR_ARG, "%s: unknown format", p->weights);
}

int kvlm_weight_bytes(const char *path, uint64_t *bytes, uint64_t *params, kvlm_error *err) {
    probe_result *p = malloc(sizeof *p);
    if (!p) return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    tensor_set ts;
    tensor_set_init(&ts);
    int rc = probe_model_path(path, p, err);
    if (!rc) rc = load_headers(&ts, p, err);
    uint64_t sum = 0, count = 0;
    for (int i = 0; !rc && i < ts.n_items; i++)
        if (!is_buffer(ts.items[i].name) &&
            (__builtin_add_overflow(sum, (uint64_t)tensor_nbytes(&ts.items[i].t), &sum) ||
             __builtin_add_overflow(count, (uint64_t)tensor_numel(&ts.items[i].t), &count)))
            rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: weight bytes do not fit in 64 bits", path);
    tensor_set_free(&ts);
    free(p);
    if (!rc) {
        *bytes = sum;
        if (params) *params = count;
    }
    return rc;
}
