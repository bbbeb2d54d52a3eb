/*
 * The tokenizer a GGUF file carries: reads the tokenizer.ggml.* metadata
 * (model, pre, tokens, scores, token_type, merges, the bos, eos, unknown,
 * padding, end-of-turn and end-of-message ids, the fill-in-the-middle ids
 * (fim_pre/suf/mid/pad/rep/sep, or prefix/suffix/middle), add_bos_token,
 * add_eos_token, add_space_prefix) through the GGUF reader and builds the
 * vocabulary with tok_from_gguf_vocab. Every id must name a token (an
 * error names the key otherwise). The mapping is released before
 * returning.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "formats/gguf.h"
#include "tokenizer/tokenizer.h"

/* NUL-terminated copies of a string array (GGUF strings are not). */
static char **copy_strings(const gguf_kv *kv, kvlm_error *err) {
    char **out = calloc(kv->n + 1, sizeof *out);
    for (uint64_t i = 0; out && i < kv->n; i++) {
        gguf_str s = gguf_kv_str(kv, i);
        if (memchr(s.s, 0, s.len)) {
            kvlm_error_set(err, KVLM_ERR_FORMAT, "%s[%llu] contains a NUL byte", kv->key, (unsigned long long)i);
            goto fail;
        }
        if (!(out[i] = malloc(s.len + 1))) goto nomem;
        memcpy(out[i], s.s, s.len);
        out[i][s.len] = 0;
    }
    if (out) return out;
nomem:
    kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
fail:
    for (uint64_t i = 0; out && i < kv->n; i++) free(out[i]);
    free(out);
    return NULL;
}

static void free_strings(char **s, uint64_t n) {
    for (uint64_t i = 0; s && i < n; i++) free(s[i]);
    free(s);
}

kvlm_tokenizer *tok_load_gguf_file(const char *path, kvlm_error *err) {
    tensor_set ts;
    gguf_meta g = {0};
    tensor_set_init(&ts);
    kvlm_tokenizer *t = NULL;
    char **tokens = NULL, **merges = NULL;
    float *scores = NULL;
    int32_t *types = NULL;
    const gguf_kv *ktok = NULL, *kmerge = NULL, *kscore = NULL, *ktype = NULL;
    const char *model = NULL, *pre = NULL;
    tok_gguf_vocab v = TOK_GGUF_VOCAB_INIT;
    static const char *const id_keys[] = {"bos", "eos", "unknown", "padding", "eot", "eom"};
    int *const id_vals[] = {&v.bos, &v.eos, &v.unk, &v.pad, &v.eot, &v.eom};
    static const char *const flag_keys[] = {"add_bos_token", "add_eos_token", "add_space_prefix"};
    int *const flag_vals[] = {&v.add_bos, &v.add_eos, &v.add_space_prefix};
    if (gguf_load(&ts, &g, path, err) || gguf_get_string(&g, "tokenizer.ggml.model", &model, err) ||
        gguf_get_array(&g, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &ktok, err))
        goto out;
    for (int k = 0; k < 6; k++) {
        char key[64];
        int64_t id;
        snprintf(key, sizeof key, "tokenizer.ggml.%s_token_id", id_keys[k]);
        if (gguf_get_int_or(&g, key, -1, (int64_t)ktok->n - 1, -1, &id, err)) goto out;
        *id_vals[k] = (int)id;
    }
    /* fill-in-the-middle: fim_*_token_id, or the older prefix/suffix/middle
     * names for the first three */
    static const char *const fim_keys[KVLM_FIM_COUNT] = {"fim_pre", "fim_suf", "fim_mid",
                                                         "fim_pad", "fim_rep", "fim_sep"};
    static const char *const fim_old[3] = {"prefix", "suffix", "middle"};
    for (int k = 0; k < KVLM_FIM_COUNT; k++) {
        for (int old = 0; old < (k < 3 ? 2 : 1) && v.fim[k] < 0; old++) {
            char key[64];
            int64_t id;
            snprintf(key, sizeof key, "tokenizer.ggml.%s_token_id", old ? fim_old[k] : fim_keys[k]);
            if (gguf_get_int_or(&g, key, -1, (int64_t)ktok->n - 1, -1, &id, err)) goto out;
            v.fim[k] = (int)id;
        }
    }
    for (int k = 0; k < 3; k++) {
        char key[64];
        snprintf(key, sizeof key, "tokenizer.ggml.%s", flag_keys[k]);
        if (gguf_meta_find(&g, key) && gguf_get_bool_or(&g, key, 0, flag_vals[k], err)) goto out;
    }
    if (ktok->n > (1u << 22)) {
        kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: tokenizer.ggml.tokens has %llu entries (at most %u)", path,
                       (unsigned long long)ktok->n, 1u << 22);
        goto out;
    }
    if (gguf_meta_find(&g, "tokenizer.ggml.pre") && gguf_get_string(&g, "tokenizer.ggml.pre", &pre, err)) goto out;
    if (gguf_meta_find(&g, "tokenizer.ggml.merges") &&
        gguf_get_array(&g, "tokenizer.ggml.merges", GGUF_TYPE_STRING, &kmerge, err))
        goto out;
    if (gguf_meta_find(&g, "tokenizer.ggml.scores") &&
        gguf_get_array(&g, "tokenizer.ggml.scores", GGUF_TYPE_COUNT, &kscore, err))
        goto out;
    if (gguf_meta_find(&g, "tokenizer.ggml.token_type") &&
        gguf_get_array(&g, "tokenizer.ggml.token_type", GGUF_TYPE_COUNT, &ktype, err))
        goto out;
    if ((kscore && (kscore->elem != GGUF_TYPE_F32 && kscore->elem != GGUF_TYPE_F64)) ||
        (ktype && !gguf_type_is_int(ktype->elem))) {
        kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: tokenizer.ggml.scores must hold floats and token_type integers", path);
        goto out;
    }
    if ((kscore && kscore->n != ktok->n) || (ktype && ktype->n != ktok->n) || (kmerge && kmerge->n > (1u << 22))) {
        kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: tokenizer.ggml scores/token_type/merges do not match the %llu tokens",
                       path, (unsigned long long)ktok->n);
        goto out;
    }
    if (!(tokens = copy_strings(ktok, err)) || (kmerge && !(merges = copy_strings(kmerge, err)))) goto out;
    if (kscore && (scores = malloc(ktok->n * sizeof *scores)))
        for (uint64_t i = 0; i < ktok->n; i++) scores[i] = (float)gguf_kv_float(kscore, i);
    if (ktype && (types = malloc(ktok->n * sizeof *types)))
        for (uint64_t i = 0; i < ktok->n; i++) types[i] = (int32_t)gguf_kv_int(ktype, i);
    if ((kscore && !scores) || (ktype && !types)) {
        kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
        goto out;
    }
    v.model = model;
    v.pre = pre;
    v.tokens = (const char *const *)tokens;
    v.n_tokens = (int)ktok->n;
    v.scores = scores;
    v.types = types;
    v.merges = (const char *const *)merges;
    v.n_merges = kmerge ? (int)kmerge->n : 0;
    t = tok_from_gguf_vocab(&v, err);
out:
    free_strings(tokens, ktok ? ktok->n : 0);
    free_strings(merges, kmerge ? kmerge->n : 0);
    free(scores);
    free(types);
    gguf_meta_free(&g);
    tensor_set_free(&ts);
    return t;
}
