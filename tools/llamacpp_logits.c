/*
 * llama.cpp's own numbers for a GGUF file, through its public C API
 * (llama.h): the logits of every prompt position in one batch, then
 * greedy decoding one token at a time with the logits each token was
 * chosen from, and the ids llama.cpp's tokenizer gives a text (with the
 * special tokens the vocabulary adds, as llama-perplexity tokenizes).
 * An oracle for tools/make_llamacpp_fixtures.py, built only by it against a
 * llama.cpp build tree; never part of kvlm's build or tests.
 *
 *   llamacpp_logits MODEL N_CTX N_GEN TEXTFILE ID [ID ...]
 *
 * Prints one JSON object: prefill_logits [n_prompt][n_vocab],
 * greedy_ids [N_GEN], greedy_logits [N_GEN][n_vocab], text_ids (TEXTFILE
 * tokenized; "-" for none). Context defaults are llama.cpp's (F16 KV cache),
 * with n_ctx = n_batch = N_CTX and 2 threads; weights are not repacked
 * (llama-perplexity's --no-repack: the repacked AMX kernels of a native
 * build trap on machines whose AMX tiles are not enabled).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void print_row(const float *v, int n) {
    putchar('[');
    for (int i = 0; i < n; i++) printf("%s%.9g", i ? "," : "", v[i]);
    putchar(']');
}

static int argmax(const float *v, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: %s MODEL N_CTX N_GEN TEXTFILE ID [ID ...]\n", argv[0]);
        return 2;
    }
    int n_ctx = atoi(argv[2]), n_gen = atoi(argv[3]), n_prompt = argc - 5;
    llama_token *ids = malloc(sizeof *ids * (size_t)(n_prompt + n_gen));
    for (int i = 0; i < n_prompt; i++) ids[i] = atoi(argv[5 + i]);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.use_extra_bufts = false; /* no weight repacking, as llama-perplexity -nr */
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model) return 1;
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = cp.n_batch = cp.n_ubatch = (uint32_t)n_ctx;
    cp.n_threads = cp.n_threads_batch = 2;
    struct llama_context *ctx = llama_init_from_model(model, cp);
    if (!ctx) return 1;
    const struct llama_vocab *vocab = llama_model_get_vocab(model);
    int nv = llama_vocab_n_tokens(vocab);

    struct llama_batch b = llama_batch_init(n_prompt, 0, 1);
    for (int i = 0; i < n_prompt; i++) {
        b.token[i] = ids[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    b.n_tokens = n_prompt;
    if (llama_decode(ctx, b)) return 1;
    printf("{\"n_vocab\":%d,\"prefill_logits\":[", nv);
    for (int i = 0; i < n_prompt; i++) {
        if (i) putchar(',');
        print_row(llama_get_logits_ith(ctx, i), nv);
    }
    printf("],\"greedy_logits\":[");
    const float *last = llama_get_logits_ith(ctx, n_prompt - 1);
    for (int g = 0; g < n_gen; g++) {
        if (g) putchar(',');
        print_row(last, nv);
        ids[n_prompt + g] = argmax(last, nv);
        if (g + 1 == n_gen) break;
        if (llama_decode(ctx, llama_batch_get_one(&ids[n_prompt + g], 1))) return 1;
        last = llama_get_logits_ith(ctx, -1);
    }
    printf("],\"greedy_ids\":[");
    for (int g = 0; g < n_gen; g++) printf("%s%d", g ? "," : "", ids[n_prompt + g]);
    printf("],\"text_ids\":[");
    if (strcmp(argv[4], "-")) {
        FILE *f = fopen(argv[4], "rb");
        if (!f) return 1;
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        char *text = malloc((size_t)n + 1);
        if (fread(text, 1, (size_t)n, f) != (size_t)n) return 1;
        fclose(f);
        int cap = (int)n + 8;
        llama_token *t = malloc(sizeof *t * (size_t)cap);
        int k = llama_tokenize(vocab, text, (int32_t)n, t, cap, 1, 0);
        for (int i = 0; i < k; i++) printf("%s%d", i ? "," : "", t[i]);
        free(t);
        free(text);
    }
    printf("]}\n");
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    free(ids);
    return 0;
}
