/*
 * libFuzzer target: a .safetensors file (8-byte header length, JSON header
 * of dtype/shape/data_offsets, __metadata__, data bounds) through
 * safetensors_load. Every input must be accepted or rejected with a status.
 */
#include <stddef.h>
#include <stdint.h>

#include "formats/safetensors.h"
#include "formats/tensor_set.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write(0, "model.safetensors", data, size);
    tensor_set ts;
    kvlm_error err;
    tensor_set_init(&ts);
    (void)safetensors_load(&ts, path, &err);
    tensor_set_free(&ts);
    return 0;
}
