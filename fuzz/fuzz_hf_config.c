/*
 * libFuzzer target: a Hugging Face config.json (architectures, sizes,
 * rope_scaling, sliding windows, token ids...) through hf_config_load and,
 * when it loads, the model's configuration check (model_check_config).
 * Every input must be accepted or rejected with a status.
 */
#include <stddef.h>
#include <stdint.h>

#include "formats/hf_config.h"
#include "fuzz_common.h"
#include "model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write(0, "config.json", data, size);
    kvlm_config cfg;
    kvlm_error err;
    if (hf_config_load(path, &cfg, &err) == 0)
        (void)model_check_config(&cfg, strcmp(cfg.arch, "gpt2") ? MODEL_SRC_HF_LLAMA : MODEL_SRC_HF_GPT2, path, &err);
    return 0;
}
