/*
 * libFuzzer target: a Hugging Face tokenizer.json (BPE model, vocab,
 * merges, added_tokens, pre-tokenizer / normalizer / decoder pipeline)
 * through kvlm_tokenizer_load; when it loads, the tokenizer is used
 * (fuzz_use_tokenizer: encode, decode) so the tables it built are read.
 */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_common.h"
#include "kvlm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_write(0, "tokenizer.json", data, size);
    kvlm_error err;
    kvlm_tokenizer *t = kvlm_tokenizer_load(path, &err);
    if (!t) return 0;
    fuzz_use_tokenizer(t);
    kvlm_tokenizer_free(t);
    return 0;
}
