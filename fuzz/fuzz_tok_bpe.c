/*
 * libFuzzer target: the two-file BPE formats, vocab.json + merges.txt
 * (Hugging Face) and encoder.json + vocab.bpe (OpenAI's originals). The
 * input's first byte picks the pair and tokenizer_config.json's presence;
 * the rest is cut at the first "\n#####\n" into the vocabulary (JSON) and
 * the merges (text) and, when a second separator follows, a
 * tokenizer_config.json. The directory is loaded with
 * kvlm_tokenizer_load and, when it loads, used (fuzz_use_tokenizer).
 */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_common.h"
#include "kvlm.h"

static void write_named(const char *name, const uint8_t *d, size_t n) {
    char path[400];
    snprintf(path, sizeof path, "%s/%s", fuzz_workdir(), name);
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(d, 1, n, f) != n) || fclose(f) != 0) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int openai = data[0] & 1;
    const uint8_t *vocab, *rest, *merges, *cfg;
    size_t nv, nr, nm, nc;
    static const char sep[] = "\n#####\n";
    fuzz_split(data + 1, size - 1, sep, sizeof sep - 1, &vocab, &nv, &rest, &nr);
    fuzz_split(rest, nr, sep, sizeof sep - 1, &merges, &nm, &cfg, &nc);
    const char *dir = fuzz_workdir();
    char path[400];
    /* one layout per input: remove what another input left */
    static const char *const names[] = {"vocab.json", "merges.txt", "encoder.json", "vocab.bpe",
                                        "tokenizer_config.json", "tokenizer.json"};
    for (int i = 0; i < 6; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    write_named(openai ? "encoder.json" : "vocab.json", vocab, nv);
    write_named(openai ? "vocab.bpe" : "merges.txt", merges, nm);
    if (nc) write_named("tokenizer_config.json", cfg, nc);
    kvlm_error err;
    kvlm_tokenizer *t = kvlm_tokenizer_load(dir, &err);
    if (!t) return 0;
    fuzz_use_tokenizer(t);
    kvlm_tokenizer_free(t);
    return 0;
}
