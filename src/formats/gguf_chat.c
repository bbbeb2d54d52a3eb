/*
 * kvlm_gguf_chat_load (kvlm_tokenizer.h): the chat facts of a GGUF file
 * (tokenizer.chat_template, tokenizer.chat_template.tool_use and the text
 * of the BOS and EOS tokens), copied out of the mapping so the caller
 * needs neither the GGUF reader nor the file once this returns. Rendering
 * the templates is not the library's job (kvlm serve's chat templates
 * live above it, in src/app).
 */
#include <stdlib.h>
#include <string.h>

#include "formats/gguf.h"
#include "formats/tensor_set.h"

static char *dup_str(gguf_str s) {
    char *p = malloc(s.len + 1);
    if (p) {
        memcpy(p, s.s, s.len);
        p[s.len] = 0;
    }
    return p;
}

void kvlm_gguf_chat_free(kvlm_gguf_chat *c) {
    if (!c) return;
    free(c->chat_template);
    free(c->tool_use_template);
    free(c->bos_token);
    free(c->eos_token);
    memset(c, 0, sizeof *c);
}

/* *out: a copy of the string value of key, or NULL when the file has none
 * (or, unless required, has something else under the key). */
static int take_string(const gguf_meta *m, const char *key, int required, const char *path, char **out,
                       kvlm_error *err) {
    const gguf_kv *kv = gguf_meta_find(m, key);
    if (!kv) return KVLM_OK;
    if (kv->type != GGUF_TYPE_STRING || !kv->strs)
        return required ? kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: %s must be a string", path, key) : KVLM_OK;
    *out = dup_str(gguf_kv_str(kv, 0));
    return *out ? KVLM_OK : kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
}

/* The text of the token the integer key names, when it names one. */
static int take_token(const gguf_meta *m, const char *key, char **out, kvlm_error *err) {
    const gguf_kv *toks = gguf_meta_find(m, "tokenizer.ggml.tokens");
    const gguf_kv *id = gguf_meta_find(m, key);
    if (!toks || toks->elem != GGUF_TYPE_STRING || !id || !gguf_type_is_int(id->elem) || id->n != 1) return KVLM_OK;
    const int64_t v = gguf_kv_int(id, 0);
    if (v < 0 || (uint64_t)v >= toks->n) return KVLM_OK;
    *out = dup_str(gguf_kv_str(toks, (uint64_t)v));
    return *out ? KVLM_OK : kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
}

int kvlm_gguf_chat_load(const char *path, kvlm_gguf_chat *out, kvlm_error *err) {
    memset(out, 0, sizeof *out);
    if (!path || !*path) return kvlm_error_set(err, KVLM_ERR_ARG, "GGUF path is empty");
    tensor_set ts;
    gguf_meta meta = {0};
    tensor_set_init(&ts);
    int rc = gguf_load(&ts, &meta, path, err);
    if (!rc) rc = take_token(&meta, "tokenizer.ggml.bos_token_id", &out->bos_token, err);
    if (!rc) rc = take_token(&meta, "tokenizer.ggml.eos_token_id", &out->eos_token, err);
    if (!rc) rc = take_string(&meta, "tokenizer.chat_template", 1, path, &out->chat_template, err);
    if (!rc) rc = take_string(&meta, "tokenizer.chat_template.tool_use", 0, path, &out->tool_use_template, err);
    gguf_meta_free(&meta);
    tensor_set_free(&ts);
    if (rc) kvlm_gguf_chat_free(out);
    return rc;
}
