/*
 * batch: several prompts served together by one scheduler. Every prompt is
 * submitted as a request; kvlm_sched_step then runs them with continuous
 * batching (each step advances every running sequence, prompts are
 * prefilled in chunks, requests join and leave between steps) until all
 * have finished. Tokens arrive through the on_token callback; at the end
 * each request's text is printed, then the scheduler's and the KV cache's
 * figures. Greedy decoding, so each output is exactly what the prompt
 * gives alone (examples/generate.c prints the same text).
 *
 * usage: batch MODEL N PROMPT [PROMPT ...]
 *   MODEL  a Hugging Face directory, a .safetensors file or a .gguf file
 *   N      tokens to generate per prompt at most
 *   e.g.   batch models/shakespeare-gpt2 40 "ROMEO:" "JULIET:" "First Citizen:"
 *
 * Output: per request a line "=== request I: REASON, K tokens" and the
 * prompt followed by its generated text; then "=== stats" and the figures.
 * Uses only the installed public API (kvlm.h); build with `make -C examples`.
 */
#include <kvlm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What the callbacks collect for one request: its text as the scheduler
 * releases it (end-of-sequence tokens add none; a character split across
 * tokens is released whole). */
typedef struct output {
    char *text;
    size_t len, cap;
    int n;
    kvlm_finish reason;
    int failed; /* out of memory in a callback */
} output;

static void append(output *o, const char *b, size_t n) {
    if (o->len + n + 1 > o->cap) {
        size_t cap = o->cap ? 2 * o->cap : 256;
        while (cap < o->len + n + 1) cap *= 2;
        char *t = realloc(o->text, cap);
        if (!t) {
            o->failed = 1;
            return;
        }
        o->text = t, o->cap = cap;
    }
    memcpy(o->text + o->len, b, n);
    o->len += n;
    o->text[o->len] = 0;
}

/* Runs on the thread that calls kvlm_sched_step, once per generated token.
 * Returning non-zero would end this request (finish reason STOP). */
static int on_token(void *user, const kvlm_token_event *ev) {
    output *o = user;
    append(o, ev->text, ev->text_len);
    return o->failed;
}

static void on_finish(void *user, const kvlm_finish_event *ev) {
    output *o = user;
    append(o, ev->text, ev->text_len);
    o->reason = ev->reason;
    o->n = ev->n_generated;
}

static const char *reason_name(kvlm_finish r) {
    switch (r) {
    case KVLM_FINISH_STOP: return "stop";
    case KVLM_FINISH_LENGTH: return "length";
    case KVLM_FINISH_CANCELLED: return "cancelled";
    case KVLM_FINISH_TIMEOUT: return "timeout";
    case KVLM_FINISH_ERROR: return "error";
    default: return "unfinished";
    }
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s MODEL N PROMPT [PROMPT ...]\n", argv[0]);
        return 2;
    }
    const char *path = argv[1];
    const int max_tokens = atoi(argv[2]), n_req = argc - 3;
    char **prompts = argv + 3;

    kvlm_error err = {0};
    kvlm_model *model = NULL;
    kvlm_tokenizer *tok = NULL;
    kvlm_kv *kv = NULL;
    kvlm_engine *engine = NULL;
    kvlm_sched *sched = NULL;
    output *out = calloc((size_t)n_req, sizeof *out);
    int status = 1;
    if (!out) {
        kvlm_error_set(&err, KVLM_ERR_NOMEM, "out of memory");
        goto done;
    }

    if (!(model = kvlm_model_load(path, NULL /* kvlm_model_default_params() */, &err))) goto done;
    const kvlm_config *cfg = kvlm_model_config(model);
    if (!(tok = kvlm_tokenizer_load(kvlm_model_tokenizer_path(model), &err))) goto done;

    /* A pool with room for every request at full context (the other
     * options keep the defaults: 16-token blocks, all cores, the best
     * kernels). A
     * smaller n_blocks also works: the scheduler then waits, or preempts
     * and later recomputes a sequence, and the outputs stay the same. */
    kvlm_kv_options kv_opt = kvlm_kv_default_params();
    kv_opt.dtype = KVLM_F32;
    kv_opt.max_seqs = n_req;
    kvlm_engine_options engine_opt = kvlm_engine_default_params();
    kvlm_sched_options sched_opt = kvlm_sched_default_params();
    if (!(kv = kvlm_kv_create(model, &kv_opt, &err))) goto done;
    if (!(engine = kvlm_engine_create(model, kv, &engine_opt, &err))) goto done;
    if (!(sched = kvlm_sched_create(engine, kv, cfg->vocab_size, &sched_opt, &err))) goto done;
    int32_t eos[KVLM_MAX_EOS];
    const int n_eos = kvlm_eos_ids(model, tok, eos, KVLM_MAX_EOS);

    for (int i = 0; i < n_req; i++) {
        int32_t *ids = NULL;
        size_t n_ids = 0;
        if (kvlm_tokenizer_encode_ex(tok, prompts[i], strlen(prompts[i]), KVLM_ENCODE_ADD_SPECIAL, &ids, &n_ids,
                                     &err))
            goto done;
        kvlm_request_params p = kvlm_request_default_params();
        p.prompt = ids; /* copied by kvlm_sched_submit */
        p.n_prompt = (int)n_ids;
        p.max_tokens = max_tokens;
        p.eos_ids = eos;
        p.n_eos = n_eos;
        p.text = 1;
        p.tokenizer = tok;
        p.on_token = on_token;
        p.on_finish = on_finish;
        p.user = &out[i];
        p.sampling.temperature = 0; /* greedy */
        int64_t id = kvlm_sched_submit(sched, &p, &err);
        free(ids);
        if (id < 0) goto done;
    }

    /* The loop an embedding program runs: one step at a time, from one
     * thread, until nothing is running or waiting. */
    while (kvlm_sched_has_work(sched))
        if (kvlm_sched_step(sched, &err) < 0) goto done;

    for (int i = 0; i < n_req; i++) {
        if (out[i].failed) {
            kvlm_error_set(&err, KVLM_ERR_NOMEM, "out of memory collecting request %d", i);
            goto done;
        }
        printf("=== request %d: %s, %d tokens\n%s%s\n", i, reason_name(out[i].reason), out[i].n, prompts[i],
               out[i].text ? out[i].text : "");
    }

    kvlm_sched_stats ss;
    kvlm_kv_stats ks;
    kvlm_sched_get_stats(sched, &ss);
    kvlm_kv_get_stats(kv, &ks);
    printf("=== stats\n");
    printf("steps %llu, prompt tokens %llu (%llu from the prefix cache), generated tokens %llu, preemptions %llu\n",
           (unsigned long long)ss.steps, (unsigned long long)ss.prompt_tokens,
           (unsigned long long)ss.cached_prompt_tokens, (unsigned long long)ss.generated_tokens,
           (unsigned long long)ss.preemptions);
    printf("KV pool %zu blocks of %zu bytes: %zu used, %zu cached for prefix reuse, %zu free\n", ks.blocks_total,
           ks.block_bytes, ks.blocks_used, ks.blocks_cached, ks.blocks_free);
    status = 0;

done:
    if (status) fprintf(stderr, "batch: %s\n", err.msg);
    for (int i = 0; out && i < n_req; i++) free(out[i].text);
    free(out);
    kvlm_sched_free(sched); /* before the engine and the cache it drives */
    kvlm_engine_free(engine);
    kvlm_kv_free(kv);
    kvlm_tokenizer_free(tok);
    kvlm_model_free(model);
    return status;
}
