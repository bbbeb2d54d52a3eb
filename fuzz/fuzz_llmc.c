/*
 * libFuzzer target: an llm.c checkpoint header (256 int32 words: magic,
 * version, sizes) through llmc_sniff and llmc_parse_header, and, when the
 * header parses, the whole file through llmc_load (parameter sizes
 * against the file size). Every input must be accepted or rejected with a
 * status.
 */
#include <stddef.h>
#include <stdint.h>

#include "formats/llmc.h"
#include "formats/tensor_set.h"
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    llmc_header h;
    kvlm_error err;
    (void)llmc_sniff(data, size);
    if (llmc_parse_header("fuzz.bin", data, size, &h, &err) != 0) return 0;
    kvlm_config cfg;
    llmc_header_config(&h, &cfg);
    const char *path = fuzz_write(0, "model.bin", data, size);
    tensor_set ts;
    tensor_set_init(&ts);
    (void)llmc_load(&ts, path, &h, &err);
    tensor_set_free(&ts);
    return 0;
}
