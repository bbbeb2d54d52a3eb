/*
 * libFuzzer target: a GGUF file (header, metadata key/values, tensor
 * infos, alignment and data bounds) through gguf_load, then the model
 * configuration built from its metadata (model_gguf_config: architecture
 * keys, ranges, tensor shapes), then, when that is valid, the whole load
 * (kvlm_model_load: every tensor bound by name and shape, a mixture of
 * experts' 3-D expert tensors among them). Every input must be accepted
 * or rejected with a status; nothing else is checked here.
 */
#include <stddef.h>
#include <stdint.h>

#include "formats/gguf.h"
#include "formats/tensor_set.h"
#include "fuzz_common.h"
#include "model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write(0, "model.gguf", data, size);
    tensor_set ts;
    gguf_meta m = {0};
    kvlm_error err;
    tensor_set_init(&ts);
    int rc = gguf_load(&ts, &m, path, &err);
    gguf_meta_free(&m);
    tensor_set_free(&ts);
    if (rc == 0) {
        kvlm_config cfg;
        if (model_gguf_config(path, &cfg, NULL, &err) == 0) {
            kvlm_model_params p = kvlm_model_default_params();
            p.repack = 0;
            kvlm_model_free(kvlm_model_load(path, &p, &err));
        }
    }
    return 0;
}
