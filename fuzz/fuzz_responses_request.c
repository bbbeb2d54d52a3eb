/*
 * libFuzzer target: the OpenAI Responses request parser
 * (src/app/responses_request.c) with the GPT-2 tokenizer and a chat
 * template that renders tools (tests/fixtures/templates/
 * Qwen-Qwen2.5-7B-Instruct.jinja). The input is the body; a
 * previous_response_id of "resp_a" finds a stored conversation with a tool
 * call (any other id finds none).
 *
 * Checked on every input: a rejection has a status of 400, 404 or 500 and
 * a non-empty message; an accepted request has the Responses shape, one
 * prompt in the vocabulary that fits the context window with max_new, a
 * conversation that is a JSON list of turns and echoed fields that are a
 * JSON object.
 */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_common.h"
#include "kvlm.h"
#include "app/responses_request.h"

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
        fprintf(stderr, "fuzz_responses_request: %s (run from the repository root or set KVLM_ROOT)\n", err.msg);
        abort();
    }
    lim = (api_limits){.tok = tok, .tpl = &tpl, .model_name = "m", .n_ctx = 1024, .vocab = 50257,
                       .max_seqs = 8, .block_size = 16, .max_prompts = 8, .kv_blocks = 256, .random_seed = 1};
    return 0;
}

static json_t *lookup(void *user, const char *id) {
    (void)user;
    if (strcmp(id, "resp_a")) return NULL;
    return json_loads("[{\"role\":\"user\",\"content\":\"Weather?\"},{\"role\":\"assistant\",\"content\":\"\","
                      "\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"f\","
                      "\"arguments\":\"{}\"}}]}]", 0, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    api_error e;
    api_request rq;
    memset(&e, 0, sizeof e);
    if (oresp_parse((const char *)data, size, &lim, lookup, NULL, &rq, &e)) {
        if ((e.status != 400 && e.status != 404 && e.status != 500) || !e.message[0] || !e.type) abort();
        if (strlen(e.param) >= sizeof e.param) abort();
        return 0;
    }
    if (rq.shape != API_SHAPE_RESPONSES || rq.n_prompts != 1 || rq.n != 1) abort();
    if (rq.n_prompt[0] < 1 || rq.n_prompt[0] + rq.max_new[0] > lim.n_ctx || rq.max_new[0] < 1) abort();
    for (int i = 0; i < rq.n_prompt[0]; i++)
        if (rq.prompts[0][i] < 0 || rq.prompts[0][i] >= lim.vocab) abort();
    json_t *conv = json_loads(rq.conversation, 0, NULL), *echo = json_loads(rq.echo, 0, NULL);
    if (!json_is_array(conv) || !json_array_size(conv) || !json_is_object(echo)) abort();
    json_decref(conv);
    json_decref(echo);
    api_request_free(&rq);
    return 0;
}
