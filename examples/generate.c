/*
 * generate: the smallest complete program on libkvlm. Loads a model and its
 * tokenizer, encodes a prompt (with BOS when the model's files ask for it),
 * and generates up to N tokens, greedily (temperature 0, the default) or
 * sampled, printing the text as the tokens arrive. Generation goes through
 * a scheduler running this one request: it samples, ends at the model's
 * end-of-sequence ids and turns tokens into UTF-8-safe text, exactly as
 * `kvlm run` and `kvlm serve` do. examples/batch.c runs several requests
 * on one scheduler.
 *
 * usage: generate MODEL PROMPT [N [TEMPERATURE [SEED]]]
 *   MODEL  a Hugging Face directory, a .safetensors file or a .gguf file
 *   e.g.   generate models/shakespeare-gpt2 "ROMEO:" 40
 *          generate models/shakespeare-llama/shakespeare-llama-q8_0.gguf "JULIET:" 40 0.8 7
 *
 * Prints the prompt, then the generated text, then a newline. Uses only the
 * installed public API (kvlm.h); build with `make -C examples` (see
 * docs/embedding.md).
 */
#include <kvlm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Runs on the thread that calls kvlm_sched_step, once per generated token:
 * ev->text is what the token releases (nothing for an end-of-sequence
 * token; a character split across tokens is held back until complete). */
static int on_token(void *user, const kvlm_token_event *ev) {
    (void)user;
    fwrite(ev->text, 1, ev->text_len, stdout);
    fflush(stdout);
    return 0;
}

static void on_finish(void *user, const kvlm_finish_event *ev) {
    (void)user;
    fwrite(ev->text, 1, ev->text_len, stdout);
}

int main(int argc, char **argv) {
    if (argc < 3 || argc > 6) {
        fprintf(stderr, "usage: %s MODEL PROMPT [N [TEMPERATURE [SEED]]]\n", argv[0]);
        return 2;
    }
    const char *path = argv[1], *prompt = argv[2];
    int n_new = argc > 3 ? atoi(argv[3]) : 64;
    float temperature = argc > 4 ? strtof(argv[4], NULL) : 0.0f;
    uint64_t seed = argc > 5 ? strtoull(argv[5], NULL, 10) : 1;

    kvlm_error err = {0};
    kvlm_model *model = NULL;
    kvlm_tokenizer *tok = NULL;
    kvlm_kv *kv = NULL;
    kvlm_engine *engine = NULL;
    kvlm_sched *sched = NULL;
    int32_t *ids = NULL;
    int status = 1;

    if (!(model = kvlm_model_load(path, NULL /* kvlm_model_default_params() */, &err))) goto done;
    const kvlm_config *cfg = kvlm_model_config(model);
    if (!(tok = kvlm_tokenizer_load(kvlm_model_tokenizer_path(model), &err))) goto done;

    /* ADD_SPECIAL puts BOS in front when the tokenizer asks for it. */
    size_t n_ids = 0;
    if (kvlm_tokenizer_encode_ex(tok, prompt, strlen(prompt), KVLM_ENCODE_ADD_SPECIAL, &ids, &n_ids, &err)) goto done;
    if (n_ids == 0 || (int)n_ids >= cfg->n_ctx) {
        kvlm_error_set(&err, KVLM_ERR_ARG, "the prompt is %zu tokens; it must be 1..%d", n_ids, cfg->n_ctx - 1);
        goto done;
    }
    if (n_new < 1) n_new = 1;

    /* One sequence in an f32 cache; every other option keeps its default
     * (16-token blocks, all cores, the best kernels this CPU has). Options
     * start from the *_default_params() functions, so a field a later
     * release adds keeps its default here. */
    kvlm_kv_options kv_opt = kvlm_kv_default_params();
    kv_opt.dtype = KVLM_F32;
    kv_opt.max_seqs = 1;
    kvlm_engine_options engine_opt = kvlm_engine_default_params();
    kvlm_sched_options sched_opt = kvlm_sched_default_params();
    if (!(kv = kvlm_kv_create(model, &kv_opt, &err))) goto done;
    if (!(engine = kvlm_engine_create(model, kv, &engine_opt, &err))) goto done;
    if (!(sched = kvlm_sched_create(engine, kv, cfg->vocab_size, &sched_opt, &err))) goto done;

    int32_t eos[KVLM_MAX_EOS];
    kvlm_request_params p = kvlm_request_default_params();
    p.prompt = ids;
    p.n_prompt = (int)n_ids;
    p.max_tokens = n_new; /* the context window also ends it */
    p.eos_ids = eos;
    p.n_eos = kvlm_eos_ids(model, tok, eos, KVLM_MAX_EOS);
    p.text = 1;
    p.tokenizer = tok;
    p.on_token = on_token;
    p.on_finish = on_finish;
    p.sampling.temperature = temperature;
    p.sampling.seed = seed;
    printf("%s", prompt);
    if (kvlm_sched_submit(sched, &p, &err) < 0) goto done;
    while (kvlm_sched_has_work(sched))
        if (kvlm_sched_step(sched, &err) < 0) goto done;
    printf("\n");
    status = 0;

done:
    if (status) fprintf(stderr, "generate: %s\n", err.msg);
    free(ids);
    kvlm_sched_free(sched); /* before the engine and the cache it drives */
    kvlm_engine_free(engine);
    kvlm_kv_free(kv);
    kvlm_tokenizer_free(tok);
    kvlm_model_free(model);
    return status;
}
