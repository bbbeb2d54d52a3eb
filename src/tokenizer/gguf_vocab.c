/*
 * Tokenizers from the vocabulary arrays of a GGUF file (tokenizer.ggml.*),
 * for the GGUF loader to call once it has read and checked the metadata;
 * this file reads no file itself.
 *
 * model "gpt2": byte-level BPE. tokens are in GPT-2's byte-to-unicode
 * alphabet, merges are "a b" strings ranked by position, merged one pair at
 * a time (lowest rank, leftmost first); pre (tokenizer.ggml.pre) picks the
 * pre-tokeniser: NULL/"gpt2"/"default" GPT-2's pattern, "llama-bpe" or
 * "llama3" Llama 3's (and a word that is a token is taken whole, as Llama 3
 * does), "qwen2" Qwen2's. No normaliser is applied.
 * model "llama": SentencePiece BPE by scores (tokenizer/spm.c): "▁" for
 * spaces and in front of every text fragment, the byte tokens <0x00>..<0xFF>
 * (token type 6) for characters outside the vocabulary; merges are not used.
 *
 * Token types (tokenizer.ggml.token_type): 0/1 normal, 2 unknown, 3 control
 * (special: matched in text only when allowed, never formed by merging),
 * 4 user-defined (always matched in text before anything else), 5 unused
 * and 6 byte (never formed by merging).
 */
#include "tokenizer/tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "tokenizer/pretok.h"
#include "tokenizer/regex.h"

#define WHERE "GGUF vocabulary"

static int valid_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        int32_t cp;
        i += tok_utf8_decode((const unsigned char *)s + i, n - i, &cp);
        if (cp < 0) return 0;
    }
    return 1;
}

static int set_pre(kvlm_tokenizer *t, const char *pre, kvlm_error *err) {
    t->n_levels = 1;
    t->levels[0].re = NULL;
    if (!pre || !strcmp(pre, "gpt2") || !strcmp(pre, "default")) return 0;
    const char *pattern = NULL;
    if (!strcmp(pre, "llama-bpe") || !strcmp(pre, "llama3")) {
        pattern = tok_llama3_pattern;
        t->ignore_merges = 1;
    } else if (!strcmp(pre, "qwen2")) {
        pattern = tok_qwen2_pattern;
    } else {
        return kvlm_error_set(err, KVLM_ERR_UNSUPPORTED, WHERE ": tokenizer.ggml.pre '%.100s' is not "
                              "supported (gpt2, llama-bpe, qwen2)", pre);
    }
    char msg[300];
    t->levels[0].re = tok_regex_compile(pattern, strlen(pattern), msg, sizeof msg);
    if (!t->levels[0].re)
        return kvlm_error_set(err, KVLM_ERR_NOMEM, WHERE ": pre-tokenizer pattern: %s", msg);
    return 0;
}

static int add_tokens(kvlm_tokenizer *t, int llama, const char *const *tokens, int n,
                      const int32_t *types, const float *scores, kvlm_error *err) {
    int16_t rev[TOK_UNMAP_SIZE];
    tok_build_unmap(rev);
    if (tok_reserve_ids(t, n) != 0) return kvlm_error_set(err, KVLM_ERR_NOMEM, WHERE ": out of memory");
    char *raw = NULL;
    size_t raw_cap = 0;
    for (int i = 0; i < n; i++) {
        if (!tokens[i]) {
            free(raw);
            return kvlm_error_set(err, KVLM_ERR_ARG, WHERE ": tokens[%d] is NULL", i);
        }
        size_t len = strlen(tokens[i]);
        int type = types ? types[i] : 1;
        if (type < 0 || type > 6) {
            free(raw);
            return kvlm_error_set(err, KVLM_ERR_FORMAT, WHERE ": token_type[%d] = %d is not a token "
                                  "type (0..6)", i, type);
        }
        if (llama && !isfinite(scores[i])) {
            free(raw);
            return kvlm_error_set(err, KVLM_ERR_FORMAT, WHERE ": scores[%d] is not a finite number", i);
        }
        if (len + 1 > raw_cap) {
            free(raw);
            raw_cap = len * 2 + 16;
            if (!(raw = malloc(raw_cap))) return kvlm_error_set(err, KVLM_ERR_NOMEM, WHERE ": out of memory");
        }
        size_t rlen = len;
        if (!llama) {
            char sbuf[96];
            if (!valid_utf8(tokens[i], len)) {
                free(raw);
                return kvlm_error_set(err, KVLM_ERR_FORMAT, WHERE ": tokens[%d] '%s' is not valid UTF-8",
                                      i, tok_show(tokens[i], len, sbuf, sizeof sbuf));
            }
            /* the same unmapping as vocab.json's */
            rlen = 0;
            for (size_t k = 0; k < len;) {
                int32_t cp;
                size_t l = tok_utf8_decode((const unsigned char *)tokens[i] + k, len - k, &cp);
                if (cp < TOK_UNMAP_SIZE && rev[cp] >= 0) raw[rlen++] = (char)rev[cp];
                else { memcpy(raw + rlen, tokens[i] + k, l); rlen += l; }
                k += l;
            }
        } else {
            memcpy(raw, tokens[i], len);
        }
        if (tok_set_piece(t, i, raw, rlen) != 0) {
            free(raw);
            return kvlm_error_set(err, KVLM_ERR_NOMEM, WHERE ": out of memory");
        }
        uint8_t f = TOK_INMODEL;
        if (type == 2 || type == 5 || (type == 6 && llama)) f |= TOK_NOMERGE;
        if (type == 3) f |= TOK_NOMERGE | TOK_ADDED | TOK_SPECIAL;
        if (type == 4) f |= TOK_ADDED;
        if (type == 2 && t->unk_id < 0) t->unk_id = i;
        t->flags[i] |= f;
    }
    free(raw);
    return 0;
}

static int add_merges(kvlm_tokenizer *t, const char *const *merges, int n, kvlm_error *err) {
    int16_t rev[TOK_UNMAP_SIZE];
    tok_build_unmap(rev);
    if (tok_merges_init(&t->merges, (size_t)n) != 0)
        return kvlm_error_set(err, KVLM_ERR_NOMEM, WHERE ": out of memory");
    for (int i = 0; i < n; i++) {
        char where[80];
        snprintf(where, sizeof where, WHERE ": merges[%d]", i);
        const char *m = merges[i];
        if (!m) return kvlm_error_set(err, KVLM_ERR_ARG, "%s is NULL", where);
        size_t len = strlen(m);
        const char *sp = memchr(m, ' ', len);
        if (!sp || sp == m || sp == m + len - 1 || memchr(sp + 1, ' ', len - (size_t)(sp - m) - 1))
            return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: expected two tokens separated by one space",
                                  where);
        if (tok_add_merge(t, rev, m, (size_t)(sp - m), sp + 1, len - (size_t)(sp - m) - 1, where,
                          err) != 0)
            return -1;
    }
    return 0;
}

static int build(kvlm_tokenizer *t, const char *model, const char *const *tokens, int n_tokens,
                 const float *scores, const int32_t *types, const char *const *merges,
                 int n_merges, int bos, int eos, int add_bos, const char *pre, kvlm_error *err) {
    int llama;
    if (model && !strcmp(model, "gpt2")) llama = 0;
    else if (model && !strcmp(model, "llama")) llama = 1;
    else
        return kvlm_error_set(err, KVLM_ERR_UNSUPPORTED, WHERE ": tokenizer.ggml.model '%.100s' is not "
                              "supported (gpt2, llama)", model ? model : "(none)");
    snprintf(t->source, sizeof t->source, WHERE " (model %s%s%.100s)", model, pre ? ", pre " : "",
             pre ? pre : "");
    if (n_tokens <= 0 || n_tokens > TOK_MAX_ID + 1 || !tokens)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, WHERE ": %d tokens (expected 1..%d)", n_tokens,
                              TOK_MAX_ID + 1);
    if (llama && !scores)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, WHERE ": model llama needs tokenizer.ggml.scores");
    if (!llama && (n_merges <= 0 || !merges))
        return kvlm_error_set(err, KVLM_ERR_FORMAT, WHERE ": model gpt2 needs tokenizer.ggml.merges");
    if (bos < -1 || bos >= n_tokens || eos < -1 || eos >= n_tokens)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, WHERE ": bos id %d or eos id %d is not a token "
                              "(%d tokens)", bos, eos, n_tokens);
    if (add_bos && bos < 0)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, WHERE ": add_bos is set but there is no bos id");
    if (add_tokens(t, llama, tokens, n_tokens, types, scores, err) != 0) return -1;
    if (tok_map_build(t) != 0) return kvlm_error_set(err, KVLM_ERR_NOMEM, WHERE ": out of memory");
    if (llama) {
        t->kind = TOK_KIND_SPM;
        t->merge_mode = TOK_MERGE_SCORE;
        t->n_levels = 0;
        t->spm_prefix = TOK_PREFIX_ALWAYS;
        t->spm_replace = 1;
        t->dec_meta_space = t->dec_byte_fallback = t->strip_leading_space = 1;
        t->scores = malloc((size_t)n_tokens * sizeof *t->scores);
        if (!t->scores) return kvlm_error_set(err, KVLM_ERR_NOMEM, WHERE ": out of memory");
        for (int i = 0; i < n_tokens; i++) t->scores[i] = scores[i];
        for (int i = 0; i < n_tokens && !t->byte_fallback; i++)
            if (tok_byte_piece_value(t->arena + t->piece_off[i], t->piece_len[i]) >= 0)
                t->byte_fallback = 1;
    } else {
        t->kind = TOK_KIND_BYTELEVEL;
        t->merge_mode = TOK_MERGE_ONE;
        if (set_pre(t, pre, err) != 0 || add_merges(t, merges, n_merges, err) != 0) return -1;
    }
    t->bos_id = bos;
    t->eos_id = eos;
    if (add_bos) t->prefix_ids[t->n_prefix++] = bos;
    return tok_finish(t, WHERE, err);
}

kvlm_tokenizer *tok_from_gguf_vocab(const char *model, const char *const *tokens, int n_tokens,
                                    const float *scores, const int32_t *token_types,
                                    const char *const *merges, int n_merges, int bos, int eos,
                                    int add_bos, const char *pre, kvlm_error *err) {
    kvlm_tokenizer *t = tok_alloc();
    if (!t) {
        kvlm_error_set(err, KVLM_ERR_NOMEM, WHERE ": out of memory");
        return NULL;
    }
    if (build(t, model, tokens, n_tokens, scores, token_types, merges, n_merges, bos, eos, add_bos,
              pre, err) != 0) {
        kvlm_tokenizer_free(t);
        return NULL;
    }
    return t;
}
