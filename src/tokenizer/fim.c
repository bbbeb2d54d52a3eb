/*
 * Fill-in-the-middle tokens: kvlm_tokenizer_fim_id, and the names a
 * vocabulary's FIM tokens are found by when no file named their ids (a
 * tokenizer.json's added_tokens, a GGUF file without fim_*_token_id).
 * A name is looked up as the exact bytes of a piece; the first name of a
 * list that is in the vocabulary wins. Ids a file named are never
 * replaced. Nothing here reads files or encodes text.
 */
#include <string.h>

#include "tokenizer/tokenizer.h"

/* The names code-model families give their FIM tokens (Qwen2.5-Coder,
 * StarCoder, Granite, DeepSeek-Coder, CodeLlama, CodeGemma, GLM). */
static const char *const pre_names[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                                        "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>", "<PRE>",
                                        "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", NULL};
static const char *const suf_names[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                                        "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "hole\xEF\xBD\x9C>", "<SUF>",
                                        "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", NULL};
static const char *const mid_names[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                                        "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>", "<MID>",
                                        "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>", NULL};
static const char *const pad_names[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", NULL};
static const char *const rep_names[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", NULL};
static const char *const sep_names[] = {"<|file_sep|>", NULL};

void tok_find_fim(kvlm_tokenizer *t) {
    static const char *const *const lists[KVLM_FIM_COUNT] = {pre_names, suf_names, mid_names,
                                                            pad_names, rep_names, sep_names};
    for (int k = 0; k < KVLM_FIM_COUNT; k++)
        for (const char *const *n = lists[k]; t->fim_ids[k] < 0 && *n; n++)
            t->fim_ids[k] = tok_map_get(t, *n, strlen(*n));
}

int32_t kvlm_tokenizer_fim_id(const kvlm_tokenizer *t, kvlm_fim_token which) {
    if (!t || (int)which < 0 || which >= KVLM_FIM_COUNT) return KVLM_NO_TOKEN;
    return t->fim_ids[which];
}
