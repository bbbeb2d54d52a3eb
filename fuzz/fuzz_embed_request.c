/*
 * libFuzzer target: the /v1/embeddings request parser
 * (src/app/embed_request.c) and the base64 encoder of its answers, with
 * the tokenizer of tests/fixtures/fim/fim_mini.gguf, a 64-token context, a
 * 256-token vocabulary and a width of 16. The input is the body.
 *
 * Checked on every input: a rejection has a status of 400, 404 or 500 and
 * a non-empty message; an accepted request has 1 to EMBED_MAX_INPUTS
 * inputs, each of 1 to 64 ids in the vocabulary, total_tokens their sum
 * (at most EMBED_MAX_TOKENS), dimensions 0 or 1..16; the base64 text of a
 * vector has 4 * ceil(4n / 3) characters of the alphabet.
 */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_common.h"
#include "kvlm.h"
#include "app/embed_request.h"

static kvlm_tokenizer *tok;
static api_limits lim;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *root = getenv("KVLM_ROOT");
    char path[512];
    snprintf(path, sizeof path, "%s/tests/fixtures/fim/fim_mini.gguf", root ? root : ".");
    kvlm_error err;
    tok = kvlm_tokenizer_load(path, &err);
    if (!tok) {
        fprintf(stderr, "fuzz_embed_request: %s (run from the repository root or set KVLM_ROOT)\n", err.msg);
        abort();
    }
    lim = (api_limits){.tok = tok, .model_name = "m", .n_ctx = 64, .vocab = 256, .max_seqs = 8, .block_size = 16,
                       .max_prompts = 8, .kv_blocks = 256, .random_seed = 1};
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    api_error e;
    memset(&e, 0, sizeof e);
    embed_request rq;
    if (api_parse_embeddings((const char *)data, size, &lim, 16, &rq, &e)) {
        if ((e.status != 400 && e.status != 404 && e.status != 500) || !e.message[0] || !e.type) abort();
        embed_request_free(&rq);
        return 0;
    }
    if (rq.n_inputs < 1 || rq.n_inputs > EMBED_MAX_INPUTS) abort();
    if (rq.dimensions < 0 || rq.dimensions > 16 || rq.total_tokens > EMBED_MAX_TOKENS) abort();
    long total = 0;
    for (int i = 0; i < rq.n_inputs; i++) {
        if (rq.n_ids[i] < 1 || rq.n_ids[i] > lim.n_ctx) abort();
        for (int j = 0; j < rq.n_ids[i]; j++)
            if (rq.ids[i][j] < 0 || rq.ids[i][j] >= lim.vocab) abort();
        total += rq.n_ids[i];
    }
    if (total != rq.total_tokens) abort();
    /* the first input's ids, as floats, through the base64 encoder */
    const size_t n = (size_t)rq.n_ids[0];
    float *v = malloc(n * sizeof *v);
    if (v) {
        for (size_t k = 0; k < n; k++) v[k] = (float)rq.ids[0][k];
        char *b = embed_base64(v, n);
        if (b) {
            if (strlen(b) != (4 * n + 2) / 3 * 4) abort();
            if (strspn(b, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=") != strlen(b)) abort();
            free(b);
        }
        free(v);
    }
    embed_request_free(&rq);
    return 0;
}
