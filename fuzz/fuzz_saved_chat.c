/*
 * libFuzzer target: the saved conversation of kvlm chat (app/saved_chat.h:
 * header, checksummed text, the messages' checks) and the KV record after
 * it (kvlm_kv_seq_restore: header fields, fingerprint, lengths, rows,
 * checksum), restored into a KV cache of the shipped Llama (loaded once).
 * An input that is not a saved conversation is also read as a bare KV
 * record. After each restore the cache's invariants must hold and, on
 * success, the sequence is freed, so no state carries over.
 */
#include <stddef.h>
#include <stdint.h>

#include "app/saved_chat.h"
#include "fuzz_common.h"
#include "kvlm.h"
#include "runtime/kvcache.h"

#define LLAMA_GGUF "models/shakespeare-llama/shakespeare-llama-q8_0.gguf"

static kvlm_model *model;
static kvlm_kv *cache;

static void open_cache(void) {
    kvlm_error err;
    if (cache) return;
    model = kvlm_model_load(LLAMA_GGUF, NULL, &err);
    kvlm_kv_options o = kvlm_kv_default_params();
    o.dtype = KVLM_F16;
    cache = model ? kvlm_kv_create(model, &o, &err) : NULL;
    if (!cache) {
        fprintf(stderr, "fuzz_saved_chat: %s (run from the repository root)\n", err.msg);
        abort();
    }
}

static void restore(FILE *f) {
    kvlm_error err;
    int seq;
    if (kvlm_kv_seq_restore(cache, model, f, &seq, &err) == 0) kvlm_kv_seq_free(cache, seq);
    if (kv_check_invariants(cache, &err)) {
        fprintf(stderr, "fuzz_saved_chat: %s\n", err.msg);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    open_cache();
    if (!size) return 0;
    FILE *f = fmemopen((void *)data, size, "rb");
    if (!f) return 0;
    json_t *doc;
    int has_kv;
    char msg[600];
    if (saved_chat_read_text(f, &doc, &has_kv, msg, sizeof msg) == 0) {
        json_decref(doc);
        if (has_kv) restore(f);
    } else {
        rewind(f);
        restore(f);
    }
    fclose(f);
    return 0;
}
