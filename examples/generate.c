/*
 * generate: the smallest complete program on libkvlm. Loads a model and its
 * tokenizer, encodes a prompt, runs it through the engine over a paged KV
 * cache and generates up to N tokens, greedily (temperature 0, the default)
 * or sampled, printing the text as the tokens arrive. It drives one
 * sequence by hand with kvlm_engine_step; examples/batch.c lets the
 * scheduler do it for many.
 *
 * usage: generate MODEL PROMPT [N [TEMPERATURE [SEED]]]
 *   MODEL  a Hugging Face directory, a .safetensors file or a .gguf file
 *   e.g.   generate models/shakespeare-gpt2 "ROMEO:" 40
 *          generate models/shakespeare-llama/shakespeare-llama-q8_0.gguf "JULIET:" 40 0.8 7
 *
 * Prints the prompt, then the generated text, then a newline. Stops early
 * at the model's end-of-sequence token. Uses only the installed public API
 * (kvlm.h); build with `make -C examples` (see docs/embedding.md).
 */
#include <kvlm.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Prints one token's bytes, holding back a UTF-8 character split across
 * tokens until it is complete. */
static void print_token(const kvlm_tokenizer *tok, kvlm_utf8_stream *utf8, int32_t id) {
    size_t len;
    const char *piece = kvlm_tokenizer_piece(tok, id, &len);
    char out[256];
    while (piece && len > 0) {
        size_t n = len < sizeof out - 4 ? len : sizeof out - 4; /* push n writes at most n + 4 bytes */
        fwrite(out, 1, kvlm_utf8_push(utf8, piece, n, out), stdout);
        piece += n, len -= n;
    }
    fflush(stdout);
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
    kvlm_sampler *sampler = NULL;
    int32_t *ids = NULL;
    float *logits = NULL;
    int status = 1;

    if (!(model = kvlm_model_load(path, &err))) goto done;
    const kvlm_config *cfg = kvlm_model_config(model);
    if (!(tok = kvlm_tokenizer_load(kvlm_model_tokenizer_path(model), &err))) goto done;

    /* ADD_SPECIAL puts BOS in front when the tokenizer asks for it. */
    size_t n_ids = 0;
    if (kvlm_tokenizer_encode_ex(tok, prompt, strlen(prompt), KVLM_ENCODE_ADD_SPECIAL, &ids, &n_ids, &err)) goto done;
    if (n_ids == 0 || (int)n_ids >= cfg->n_ctx) {
        kvlm_error_set(&err, KVLM_ERR_ARG, "the prompt is %zu tokens; it must be 1..%d", n_ids, cfg->n_ctx - 1);
        goto done;
    }
    if (n_new > cfg->n_ctx - (int)n_ids) n_new = cfg->n_ctx - (int)n_ids;

    /* One sequence; zeroed options are the defaults (f32 KV in 16-token
     * blocks, all cores, the best kernels this CPU has). */
    kvlm_kv_options kv_opt = {.dtype = KVLM_F32, .max_seqs = 1};
    kvlm_engine_options engine_opt = {0};
    kvlm_sampler_options sampling = kvlm_sampler_options_default();
    sampling.temperature = temperature;
    sampling.seed = seed;
    if (!(kv = kvlm_kv_create(model, &kv_opt, &err))) goto done;
    if (!(engine = kvlm_engine_create(model, kv, &engine_opt, &err))) goto done;
    if (!(sampler = kvlm_sampler_create(&sampling, cfg->vocab_size, &err))) goto done;
    int seq = kvlm_kv_seq_new(kv, &err);
    if (seq < 0) goto done;
    if (!(logits = malloc((size_t)cfg->vocab_size * sizeof *logits))) {
        kvlm_error_set(&err, KVLM_ERR_NOMEM, "out of memory");
        goto done;
    }

    const int32_t eos = cfg->eos_id >= 0 ? cfg->eos_id : kvlm_tokenizer_eos_id(tok);
    kvlm_sampler_accept(sampler, ids, (int)n_ids); /* the penalties see the prompt too */
    printf("%s", prompt);
    /* The first step runs the whole prompt (prefill), each later one the
     * token just chosen (decode); both leave the next token's logits. */
    int32_t next;
    kvlm_batch_item item = {.seq = seq, .tokens = ids, .n_tokens = (int)n_ids, .logits_all = 0};
    kvlm_utf8_stream utf8 = {0};
    for (int i = 0; i < n_new; i++) {
        if (kvlm_engine_step(engine, &item, 1, logits, &err)) goto done;
        next = kvlm_sampler_next(sampler, logits);
        if (next == eos) break;
        kvlm_sampler_accept(sampler, &next, 1);
        print_token(tok, &utf8, next);
        item.tokens = &next;
        item.n_tokens = 1;
    }
    char rest[8];
    fwrite(rest, 1, kvlm_utf8_flush(&utf8, rest), stdout);
    printf("\n");
    status = 0;

done:
    if (status) fprintf(stderr, "generate: %s\n", err.msg);
    free(logits);
    free(ids);
    kvlm_sampler_free(sampler);
    kvlm_engine_free(engine); /* before the cache and the model it uses */
    kvlm_kv_free(kv);
    kvlm_tokenizer_free(tok);
    kvlm_model_free(model);
    return status;
}
