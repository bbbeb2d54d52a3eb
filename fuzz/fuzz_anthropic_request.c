/*
 * libFuzzer target: the Anthropic Messages request parser
 * (src/app/anthropic_request.c) with the GPT-2 tokenizer and a chat
 * template that renders tools (tests/fixtures/templates/
 * Qwen-Qwen2.5-7B-Instruct.jinja). The first byte picks /v1/messages
 * (even) or /v1/messages/count_tokens (odd); the rest is the body.
 *
 * Checked on every input: a rejection has a status of 400, 404 or 500 and
 * a non-empty message; an accepted request has the Anthropic shape, one
 * prompt whose token ids are in the vocabulary and whose length fits the
 * context window with max_new, and a count is positive and within the
 * context's tokenisation of the same body.
 */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_common.h"
#include "kvlm.h"
#include "app/anthropic_request.h"

static kvlm_tokenizer *tok;
static chat_template tpl;
static api_limits lim;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *root = getenv("KVLM_ROOT");
    char path[512], tpath[512];
    snprintf(path, sizeof path, "%s/models/gpt2-tokenizer", root ? root : ".");
    snprintf(tpath, sizeof tpath, "%s/tests/fixtures/templates/Qwen-Qwen2.5-7B-Instruct.jinja", root ? root : ".");
    kvlm_error err;
    tok = kvlm_tokenizer_load(path, &err);
    if (!tok || chat_template_load(&tpl, path, path, tpath, &err)) {
        fprintf(stderr, "fuzz_anthropic_request: %s (run from the repository root or set KVLM_ROOT)\n", err.msg);
        abort();
    }
    lim = (api_limits){.tok = tok, .tpl = &tpl, .model_name = "m", .n_ctx = 1024, .vocab = 50257,
                       .max_seqs = 8, .block_size = 16, .max_prompts = 8, .kv_blocks = 256, .random_seed = 1};
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
    if (data[0] & 1) {
        int n = -1;
        if (anth_count_tokens(body, len, &lim, &n, &e)) check_error(&e);
        else if (n < 1) abort();
        return 0;
    }
    api_request rq;
    if (anth_parse_messages(body, len, &lim, &rq, &e)) {
        check_error(&e);
        return 0;
    }
    if (rq.shape != API_SHAPE_ANTHROPIC || rq.n_prompts != 1 || rq.n != 1) abort();
    if (rq.n_prompt[0] < 1 || rq.n_prompt[0] + rq.max_new[0] > lim.n_ctx || rq.max_new[0] < 1) abort();
    for (int i = 0; i < rq.n_prompt[0]; i++)
        if (rq.prompts[0][i] < 0 || rq.prompts[0][i] >= lim.vocab) abort();
    api_request_free(&rq);
    return 0;
}
