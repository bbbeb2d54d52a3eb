/*
 * The pre-tokenisers of GGUF byte-level vocabularies: the one table from
 * tokenizer.ggml.pre (the names llama.cpp's converter writes and its loader
 * accepts) to a split kvlm implements. Vocabularies of model "llama"
 * (SentencePiece) have no pre-tokeniser and never come here.
 *
 * A split is a list of stages applied in turn (tokenizer.h, levels): each
 * stage cuts every piece of the previous one, a match is a piece and so is
 * the text between two matches. NULL is GPT-2's pattern, by the scanner of
 * tokenizer/pretok.c; any other stage is a PCRE2 pattern (tokenizer/regex.c,
 * \s meaning White_Space). The patterns are those of the models'
 * tokenizer.json files; where llama.cpp rewrites one for its own regex
 * engine (the (?i:...) groups of Llama 3 and Qwen2) the meaning is the same.
 *
 * Per name also: ignore_merges (a word that is a token is taken whole, as
 * the Llama 3 and Tekken tokenizers do) and the default of add_bos_token
 * when the file does not set it (llama.cpp's defaults).
 *
 * Two deliberate differences from llama.cpp: a file without
 * tokenizer.ggml.pre gets GPT-2's pattern (llama.cpp falls back to its
 * "default" list and warns that quality is degraded), and "gpt2" is
 * accepted as a name of GPT-2's pattern (kvlm's own converter wrote it;
 * llama.cpp's name is "gpt-2"). "tekken" uses the pattern of the
 * tokenizer.json (llama.cpp approximates its letter classes), and so does
 * "gpt-4o" (o200k, gpt-oss's vocabulary). Any other
 * name is refused with the list of supported ones. docs/tokenizer.md has
 * this table for users.
 */
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer.h"

/* Llama 3's tokenizer.json pattern. */
#define LLAMA3                                                                                    \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+" \
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Qwen2's: Llama 3's with single digits. */
#define QWEN2                                                                                 \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+" \
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Qwen3.5's: Qwen2's with combining marks (\p{M}) inside words. */
#define QWEN35                                                                                          \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+" \
    "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Mistral's Tekken (tokenizer.json of Mistral Nemo and later). */
#define TEKKEN                                                                              \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"  \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|"  \
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* GPT-4o's (o200k; gpt-oss's vocabulary): Tekken's words with English
 * contractions attached, digit triples. */
#define GPT4O                                                                                                        \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|" \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|" \
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* Runs of punctuation and the ASCII symbols $+<=>^~| (Falcon, llama.cpp's default). */
#define PUNCT "[\\p{P}\\$\\+<=>\\^~\\|]+"

enum split {
    SPLIT_GPT2,       /* GPT-2's pattern */
    SPLIT_LLAMA3,
    SPLIT_QWEN2,
    SPLIT_QWEN35,
    SPLIT_DIGITS,     /* each digit alone, then GPT-2's pattern (StarCoder) */
    SPLIT_FALCON,     /* punctuation runs, GPT-2's pattern, digit triples */
    SPLIT_DEFAULT,    /* llama.cpp's "default": Falcon's with digit runs */
    SPLIT_TEKKEN,
    SPLIT_GPT4O,
    N_SPLITS
};

static const struct {
    const char *levels[TOK_MAX_LEVELS];
    int n;
} splits[N_SPLITS] = {
    [SPLIT_GPT2] = {{NULL}, 1},
    [SPLIT_LLAMA3] = {{LLAMA3}, 1},
    [SPLIT_QWEN2] = {{QWEN2}, 1},
    [SPLIT_QWEN35] = {{QWEN35}, 1},
    [SPLIT_DIGITS] = {{"\\p{N}", NULL}, 2},
    [SPLIT_FALCON] = {{PUNCT, NULL, "[0-9][0-9][0-9]"}, 3},
    [SPLIT_DEFAULT] = {{PUNCT, NULL, "\\p{N}+", "[0-9][0-9][0-9]"}, 4},
    [SPLIT_TEKKEN] = {{TEKKEN}, 1},
    [SPLIT_GPT4O] = {{GPT4O}, 1},
};

/* tokenizer.ggml.pre -> split. Every name here is one llama.cpp's loader
 * maps to the same list of patterns. */
static const struct pre_name {
    const char *name;
    unsigned char split, ignore_merges, add_bos;
} names[] = {
    {"gpt-2", SPLIT_GPT2, 0, 0},
    {"gpt2", SPLIT_GPT2, 0, 0},   /* kvlm's converter */
    {"phi-2", SPLIT_GPT2, 0, 0},
    {"mpt", SPLIT_GPT2, 0, 0},
    {"olmo", SPLIT_GPT2, 0, 0},
    {"jais", SPLIT_GPT2, 0, 0},
    {"trillion", SPLIT_GPT2, 0, 0},
    {"granite-docling", SPLIT_GPT2, 0, 0},
    {"exaone4", SPLIT_GPT2, 0, 0},
    {"gigachat", SPLIT_GPT2, 0, 0},
    {"a.x-4.0", SPLIT_GPT2, 0, 0},
    {"mellum", SPLIT_GPT2, 0, 0},
    {"modern-bert", SPLIT_GPT2, 0, 0},
    {"roberta-bpe", SPLIT_GPT2, 0, 0},
    {"jina-es", SPLIT_GPT2, 0, 0},
    {"jina-de", SPLIT_GPT2, 0, 0},
    {"jina-v2-es", SPLIT_GPT2, 0, 0},
    {"jina-v2-de", SPLIT_GPT2, 0, 0},
    {"jina-v1-en", SPLIT_GPT2, 0, 0},
    {"jina-v2-code", SPLIT_GPT2, 0, 0},
    {"llama-bpe", SPLIT_LLAMA3, 1, 1},
    {"llama3", SPLIT_LLAMA3, 1, 1},
    {"llama-v3", SPLIT_LLAMA3, 1, 1},
    {"falcon3", SPLIT_LLAMA3, 1, 1},
    {"falcon-h1", SPLIT_LLAMA3, 1, 1},
    {"pixtral", SPLIT_LLAMA3, 1, 1},
    {"midm-2.0", SPLIT_LLAMA3, 1, 1},
    {"lfm2", SPLIT_LLAMA3, 1, 1},
    {"jina-v5-nano", SPLIT_LLAMA3, 1, 1},
    {"dbrx", SPLIT_LLAMA3, 0, 0},
    {"smaug-bpe", SPLIT_LLAMA3, 0, 0},
    {"chatglm-bpe", SPLIT_LLAMA3, 0, 0},
    {"glm4", SPLIT_LLAMA3, 0, 0},
    {"qwen2", SPLIT_QWEN2, 0, 0},
    {"deepseek-r1-qwen", SPLIT_QWEN2, 0, 0},
    {"kormo", SPLIT_QWEN2, 0, 0},
    {"f2llmv2", SPLIT_QWEN2, 0, 0},
    {"megrez", SPLIT_QWEN2, 0, 0},
    {"stablelm2", SPLIT_QWEN2, 0, 0},
    {"hunyuan", SPLIT_QWEN2, 0, 0},
    {"solar-open", SPLIT_QWEN2, 0, 0},
    {"grok-2", SPLIT_QWEN2, 0, 0},
    {"qwen35", SPLIT_QWEN35, 0, 0},
    {"starcoder", SPLIT_DIGITS, 0, 0},
    {"smollm", SPLIT_DIGITS, 0, 0},
    {"refact", SPLIT_DIGITS, 0, 0},
    {"command-r", SPLIT_DIGITS, 0, 0},
    {"codeshell", SPLIT_DIGITS, 0, 0},
    {"exaone", SPLIT_DIGITS, 0, 0},
    {"minerva-7b", SPLIT_DIGITS, 0, 0},
    {"mellum2", SPLIT_DIGITS, 0, 0},
    {"falcon", SPLIT_FALCON, 0, 0},
    {"default", SPLIT_DEFAULT, 0, 0},
    {"tekken", SPLIT_TEKKEN, 1, 1},
    {"gpt-4o", SPLIT_GPT4O, 0, 0},
};

#define N_NAMES (sizeof names / sizeof names[0])

int tok_gguf_pre_set(kvlm_tokenizer *t, const char *pre, int *add_bos_default, kvlm_error *err) {
    const struct pre_name *p = NULL;
    for (size_t i = 0; pre && i < N_NAMES && !p; i++)
        if (!strcmp(pre, names[i].name)) p = &names[i];
    if (pre && !p) {
        /* The first name of each split, then the others while they fit. */
        char list[320];
        size_t o = 0, shown = 0;
        for (int pass = 0; pass < 2; pass++)
            for (size_t i = 0; i < N_NAMES; i++) {
                int first = i == 0 || names[i - 1].split != names[i].split;
                if (first != (pass == 0)) continue;
                size_t len = strlen(names[i].name);
                if (o + len + 2 >= sizeof list) continue;
                o += (size_t)snprintf(list + o, sizeof list - o, "%s%s", o ? ", " : "", names[i].name);
                shown++;
            }
        return kvlm_error_set(err, KVLM_ERR_UNSUPPORTED, "GGUF vocabulary: tokenizer.ggml.pre '%.40s' is not "
                              "supported (supported: %s%s)", pre, list,
                              shown < N_NAMES ? "; all in docs/tokenizer.md" : "");
    }
    int split = p ? p->split : SPLIT_GPT2;
    t->ignore_merges = p ? p->ignore_merges : 0;
    *add_bos_default = p ? p->add_bos : 0;
    t->n_levels = 0;
    for (int k = 0; k < splits[split].n; k++) {
        const char *pattern = splits[split].levels[k];
        tok_level *l = &t->levels[t->n_levels++];
        l->re = NULL;
        if (!pattern) continue;
        char msg[300];
        l->re = tok_regex_compile(pattern, strlen(pattern), msg, sizeof msg);
        if (!l->re)
            return kvlm_error_set(err, KVLM_ERR_NOMEM, "GGUF vocabulary: tokenizer.ggml.pre '%s': "
                                  "pattern %d: %s", pre ? pre : "(none)", k, msg);
    }
    return 0;
}
