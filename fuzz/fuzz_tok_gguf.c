/*
 * libFuzzer target: a tokenizer built from GGUF metadata
 * (tokenizer.ggml.model, tokens, merges, scores, token_type, special ids,
 * add_bos/add_eos/add_space_prefix, pre) through tok_load_gguf_file (what
 * kvlm_tokenizer_load calls for a file starting "GGUF"); when it loads, the tokenizer is used (fuzz_use_tokenizer).
 */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_common.h"
#include "kvlm.h"
#include "tokenizer/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write(0, "vocab.gguf", data, size);
    kvlm_error err;
    kvlm_tokenizer *t = tok_load_gguf_file(path, &err);
    if (!t) return 0;
    fuzz_use_tokenizer(t);
    kvlm_tokenizer_free(t);
    return 0;
}
