/*
 * Tokenizers from the vocabulary arrays of a GGUF file (tokenizer.ggml.*),
 * for the GGUF loader to call once it has read and checked the metadata;
 * this file reads no file itself.
 *
 * model "gpt2": byte-level BPE. tokens are in GPT-2's byte-to-unicode
 * alphabet, merges are "a b" strings ranked by position, merged one pair at
 * a time (lowest rank, leftmost first); pre (tokenizer.ggml.pre) picks the
 * pre-tokeniser from the table of tokenizer/gguf_pre.c. No normaliser is
 * applied. As in llama.cpp: a byte without a token is left out of the
 * encoding (some vocabularies lack bytes that never occur in UTF-8), and a
 * normal token written outside the alphabet is never produced from text.
 * model "llama": SentencePiece BPE by scores (tokenizer/spm.c): "▁" for
 * spaces and, unless add_space_prefix is false, in front of every text
 * fragment; the byte tokens <0x00>..<0xFF> (token type 6) for characters
 * outside the vocabulary; merges and pre are not used.
 *
 * Token types (tokenizer.ggml.token_type): 0/1 normal, 2 unknown, 3 control
 * (special: matched in text only when allowed, never formed by merging),
 * 4 user-defined (always matched in text before anything else), 5 unused
 * and 6 byte (never formed by merging).
 *
 * Special ids (bos, eos, unknown, padding, end of turn, end of message)
 * must name a token; add_bos/add_eos put bos/eos around an encoded text
 * (KVLM_ENCODE_ADD_SPECIAL); when the file does not say, llama.cpp's
 * defaults apply (bos for SentencePiece and the Llama 3 and Tekken
 * pre-tokenisers, no eos).
 */
#include "tokenizer/tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "tokenizer/pretok.h"

#define WHERE "GGUF vocabulary"

static int valid_utf8(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        int32_t cp;
        i += tok_utf8_decode((const unsigned char *)s + i, n - i, &cp);
        if (cp < 0) return 0;
    }
    return 1;
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
        int outside = 0;
        if (!llama) {
            char sbuf[96];
            if (!valid_utf8(tokens[i], len)) {
                free(raw);
                return kvlm_error_set(err, KVLM_ERR_FORMAT, WHERE ": tokens[%d] '%s' is not valid UTF-8",
                                      i, tok_show(tokens[i], len, sbuf, sizeof sbuf));
            }
            /* the same unmapping as vocab.json's; a character outside the
             * alphabet stands for itself */
            rlen = 0;
            for (size_t k = 0; k < len;) {
                int32_t cp;
                size_t l = tok_utf8_decode((const unsigned char *)tokens[i] + k, len - k, &cp);
                if (cp < TOK_UNMAP_SIZE && rev[cp] >= 0) {
                    raw[rlen++] = (char)rev[cp];
                } else {
                    memcpy(raw + rlen, tokens[i] + k, l);
                    rlen += l;
                    outside = 1;
                }
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
        /* llama.cpp looks a normal token up by its text in the alphabet: one
         * written otherwise is never produced from text */
        if (outside && type <= 1) f |= TOK_NOMAP;
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

/* A special id: -1 (absent) or a token. */
static int check_id(const char *what, int id, int n_tokens, kvlm_error *err) {
    if (id < -1 || id >= n_tokens)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, WHERE ": %s %d is not a token (%d tokens)", what, id,
                              n_tokens);
    return 0;
}

static int build(kvlm_tokenizer *t, const tok_gguf_vocab *v, kvlm_error *err) {
    const char *model = v->model, *pre = v->pre;
    const int n_tokens = v->n_tokens;
    int llama;
    if (model && !strcmp(model, "gpt2")) llama = 0;
    else if (model && !strcmp(model, "llama")) llama = 1;
    else
        return kvlm_error_set(err, KVLM_ERR_UNSUPPORTED, WHERE ": tokenizer.ggml.model '%.100s' is not "
                              "supported (gpt2, llama)", model ? model : "(none)");
    snprintf(t->source, sizeof t->source, WHERE " (model %s%s%.100s)", model, pre ? ", pre " : "",
             pre ? pre : "");
    if (n_tokens <= 0 || n_tokens > TOK_MAX_ID + 1 || !v->tokens)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, WHERE ": %d tokens (expected 1..%d)", n_tokens,
                              TOK_MAX_ID + 1);
    if (llama && !v->scores)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, WHERE ": model llama needs tokenizer.ggml.scores");
    if (!llama && (v->n_merges <= 0 || !v->merges))
        return kvlm_error_set(err, KVLM_ERR_FORMAT, WHERE ": model gpt2 needs tokenizer.ggml.merges");
    if (check_id("bos id", v->bos, n_tokens, err) || check_id("eos id", v->eos, n_tokens, err) ||
        check_id("unknown id", v->unk, n_tokens, err) || check_id("padding id", v->pad, n_tokens, err) ||
        check_id("end-of-turn id", v->eot, n_tokens, err) ||
        check_id("end-of-message id", v->eom, n_tokens, err))
        return -1;
    for (int k = 0; k < KVLM_FIM_COUNT; k++)
        if (check_id("fill-in-the-middle id", v->fim[k], n_tokens, err)) return -1;
    if (v->add_bos > 0 && v->bos < 0)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, WHERE ": add_bos is set but there is no bos id");
    if (v->add_eos > 0 && v->eos < 0)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, WHERE ": add_eos is set but there is no eos id");
    /* The pre-tokeniser first: an unknown name fails before the work. */
    int add_bos = llama;
    if (!llama && tok_gguf_pre_set(t, pre, &add_bos, err) != 0) return -1;
    if (add_tokens(t, llama, v->tokens, n_tokens, v->types, v->scores, err) != 0) return -1;
    if (tok_map_build(t) != 0) return kvlm_error_set(err, KVLM_ERR_NOMEM, WHERE ": out of memory");
    if (v->unk >= 0) t->unk_id = v->unk;
    if (llama) {
        t->kind = TOK_KIND_SPM;
        t->merge_mode = TOK_MERGE_SCORE;
        t->n_levels = 0;
        t->spm_prefix = v->add_space_prefix == 0 ? TOK_PREFIX_NONE : TOK_PREFIX_ALWAYS;
        t->spm_replace = 1;
        t->dec_meta_space = t->dec_byte_fallback = 1;
        t->strip_leading_space = v->add_space_prefix != 0;
        t->scores = malloc((size_t)n_tokens * sizeof *t->scores);
        if (!t->scores) return kvlm_error_set(err, KVLM_ERR_NOMEM, WHERE ": out of memory");
        for (int i = 0; i < n_tokens; i++) t->scores[i] = v->scores[i];
        for (int i = 0; i < n_tokens && !t->byte_fallback; i++)
            if (tok_byte_piece_value(t->arena + t->piece_off[i], t->piece_len[i]) >= 0)
                t->byte_fallback = 1;
    } else {
        t->kind = TOK_KIND_BYTELEVEL;
        t->merge_mode = TOK_MERGE_ONE;
        t->bytes_optional = 1;
        if (add_merges(t, v->merges, v->n_merges, err) != 0) return -1;
    }
    t->bos_id = v->bos;
    t->eos_id = v->eos;
    t->eot_id = v->eot;
    t->eom_id = v->eom;
    for (int k = 0; k < KVLM_FIM_COUNT; k++) t->fim_ids[k] = v->fim[k];
    if (v->add_bos >= 0) add_bos = v->add_bos;
    if (add_bos && v->bos >= 0) t->prefix_ids[t->n_prefix++] = v->bos;
    if (v->add_eos > 0) t->suffix_ids[t->n_suffix++] = v->eos;
    return tok_finish(t, WHERE, err);
}

kvlm_tokenizer *tok_from_gguf_vocab(const tok_gguf_vocab *v, kvlm_error *err) {
    kvlm_tokenizer *t = tok_alloc();
    if (!t) {
        kvlm_error_set(err, KVLM_ERR_NOMEM, WHERE ": out of memory");
        return NULL;
    }
    if (build(t, v, err) != 0) {
        kvlm_tokenizer_free(t);
        return NULL;
    }
    return t;
}
