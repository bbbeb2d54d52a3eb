/*
 * libFuzzer target: the fill-in-the-middle request parser
 * (src/app/infill_request.c) with the tokenizer of
 * tests/fixtures/fim/fim_mini.gguf, which names FIM prefix, suffix,
 * middle, repository and file-separator tokens. The first byte picks POST
 * /infill (even) or /v1/completions (odd, where a `suffix` makes the
 * prompt a FIM prompt); the rest is the body. The context is 64 tokens,
 * so the cuts of prefix, suffix and extra context are reached.
 *
 * Checked on every input: a rejection has a status of 400, 404 or 500 and
 * a non-empty message; an accepted /infill request has one prompt in the
 * vocabulary that ends with the middle token, holds the prefix and suffix
 * tokens once each, and fits the context window with max_new.
 */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_common.h"
#include "kvlm.h"
#include "app/infill_request.h"

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
        fprintf(stderr, "fuzz_infill_request: %s (run from the repository root or set KVLM_ROOT)\n", err.msg);
        abort();
    }
    lim = (api_limits){.tok = tok, .model_name = "m", .n_ctx = 64, .vocab = 256, .max_seqs = 8, .block_size = 16,
                       .max_prompts = 8, .kv_blocks = 256, .random_seed = 1};
    return 0;
}

static void check_error(const api_error *e) {
    if ((e->status != 400 && e->status != 404 && e->status != 500) || !e->message[0] || !e->type) abort();
    if (strlen(e->param) >= sizeof e->param) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    api_error e;
    memset(&e, 0, sizeof e);
    api_request rq;
    const int infill = !(data[0] & 1);
    if (infill ? api_parse_infill(body, len, &lim, &rq, &e) : api_parse_completion(body, len, 0, &lim, &rq, &e)) {
        check_error(&e);
        return 0;
    }
    for (int p = 0; p < rq.n_prompts; p++) {
        if (rq.n_prompt[p] < 1 || rq.n_prompt[p] + rq.max_new[p] > lim.n_ctx || rq.max_new[p] < 1) abort();
        for (int i = 0; i < rq.n_prompt[p]; i++)
            if (rq.prompts[p][i] < 0 || rq.prompts[p][i] >= lim.vocab) abort();
    }
    if (infill) {
        if (rq.n_prompts != 1 || !rq.infill) abort();
        const int32_t *ids = rq.prompts[0];
        const int n = rq.n_prompt[0];
        int n_pre = 0, n_suf = 0;
        for (int i = 0; i < n; i++) {
            n_pre += ids[i] == kvlm_tokenizer_fim_id(tok, KVLM_FIM_PRE);
            n_suf += ids[i] == kvlm_tokenizer_fim_id(tok, KVLM_FIM_SUF);
        }
        /* the prompt text may hold more (special tokens are matched in it) */
        if (ids[n - 1] != kvlm_tokenizer_fim_id(tok, KVLM_FIM_MID) || n_pre < 1 || n_suf < 1) abort();
    }
    api_request_free(&rq);
    return 0;
}
