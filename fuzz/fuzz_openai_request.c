/*
 * libFuzzer target: the OpenAI request parser (src/app/openai_request.c)
 * with the GPT-2 tokenizer and a chat template that renders tools
 * (tests/fixtures/templates/Qwen-Qwen2.5-7B-Instruct.jinja). The first
 * byte picks the endpoint: /v1/completions, /v1/chat/completions,
 * /tokenize or /detokenize; the rest is the body.
 *
 * Checked on every input: a rejection has a status of 400, 404 or 500, a
 * non-empty message and never names a JSON library flag (JSON_...) that
 * the body did not contain; an
 * accepted completion has prompts whose token ids are in the vocabulary
 * and whose lengths fit the context window with max_new.
 */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_common.h"
#include "kvlm.h"
#include "app/openai_request.h"

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
        fprintf(stderr, "fuzz_openai_request: %s (run from the repository root or set KVLM_ROOT)\n", err.msg);
        abort();
    }
    lim = (api_limits){.tok = tok, .tpl = &tpl, .model_name = "m", .n_ctx = 1024, .vocab = 50257,
                       .max_seqs = 8, .block_size = 16, .max_prompts = 8, .kv_blocks = 256, .random_seed = 1};
    return 0;
}

static void check_error(const api_error *e, const char *body, size_t len) {
    if ((e->status != 400 && e->status != 404 && e->status != 500) || !e->message[0] || !e->type)
        abort();
    /* a flag name in the message must come from the request itself */
    if (strstr(e->message, "JSON_") && !memmem(body, len, "JSON_", 5)) abort();
    if (strlen(e->param) >= sizeof e->param) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int which = data[0] & 3;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    api_error e;
    memset(&e, 0, sizeof e);
    if (which < 2) {
        api_request rq;
        if (api_parse_completion(body, len, which, &lim, &rq, &e)) {
            check_error(&e, body, len);
            return 0;
        }
        for (int p = 0; p < rq.n_prompts; p++) {
            if (rq.n_prompt[p] < 1 || rq.n_prompt[p] + rq.max_new[p] > lim.n_ctx || rq.max_new[p] < 1) abort();
            for (int i = 0; i < rq.n_prompt[p]; i++)
                if (rq.prompts[p][i] < 0 || rq.prompts[p][i] >= lim.vocab) abort();
        }
        if (rq.n < 1 || rq.n > lim.max_seqs) abort();
        api_request_free(&rq);
        return 0;
    }
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = which == 2 ? api_parse_tokenize(body, len, &lim, &ids, &n, &e)
                        : api_parse_detokenize(body, len, &lim, &ids, &n, &e);
    if (rc) check_error(&e, body, len);
    free(ids);
    return 0;
}
