/*
 * tokenizer.json (Hugging Face "fast" tokenizers): the model (BPE: vocab,
 * merges, byte_fallback, unk_token, ignore_merges), added_tokens, and the
 * pipeline around it, read into the settings of kvlm_tokenizer:
 *
 * - byte-level BPE (GPT-2, Llama 3, Qwen2): a ByteLevel pre-tokenizer,
 *   alone (GPT-2's pattern) or after one or more Split patterns (Llama 3,
 *   Qwen2: Split with the file's regex, then ByteLevel with use_regex
 *   false); normalizer none or NFC.
 * - SentencePiece-style BPE (Llama 2): no ByteLevel; normalizer Prepend("▁")
 *   and Replace(" ", "▁") (or a Metaspace pre-tokenizer, the older form),
 *   byte_fallback with the tokens <0x00>..<0xFF>, decoder Replace("▁", " "),
 *   ByteFallback, Fuse, Strip (or Metaspace).
 * - post_processor TemplateProcessing: the special tokens put before and
 *   after a single text (BOS), and tokenizer_config.json beside the file
 *   for bos_token, eos_token (strings, or objects with "content"),
 *   add_bos_token and add_eos_token (tok_read_config, which the
 *   vocab.json + merges.txt loader uses too).
 *
 * Anything that would change ids and is not implemented exactly is refused
 * with KVLM_ERR_UNSUPPORTED naming the field, never approximated.
 */
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "tokenizer/regex.h"

#define META "\xE2\x96\x81"   /* "▁", U+2581 */

static const char *type_of(json_t *o) {
    json_t *t = json_is_object(o) ? json_object_get(o, "type") : NULL;
    return json_is_string(t) ? json_string_value(t) : "";
}

static int is_str(json_t *v, const char *s) {
    return json_is_string(v) && strcmp(json_string_value(v), s) == 0;
}

/* {"String": s} or {"Regex": s} patterns: 1 and the string if a String. */
static const char *string_pattern(json_t *pat) {
    json_t *s = json_is_object(pat) ? json_object_get(pat, "String") : NULL;
    return json_is_string(s) ? json_string_value(s) : NULL;
}

/* ------------------------------------------------------------------ model */

static int check_model(kvlm_tokenizer *t, json_t *model, const char *path, kvlm_error *err) {
    json_t *type = json_object_get(model, "type");
    if (type && !is_str(type, "BPE"))
        return kvlm_error_set(err, KVLM_ERR_UNSUPPORTED, "%s: model.type %s is not supported (only BPE)",
                              path, json_is_string(type) ? json_string_value(type) : "(not a string)");
    json_t *v = json_object_get(model, "dropout");
    if (v && !json_is_null(v))
        return kvlm_error_set(err, KVLM_ERR_UNSUPPORTED, "%s: model.dropout is not supported", path);
    static const char *const affixes[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        v = json_object_get(model, affixes[k]);
        if (v && !json_is_null(v) && !(json_is_string(v) && json_string_length(v) == 0))
            return kvlm_error_set(err, KVLM_ERR_UNSUPPORTED, "%s: model.%s is not supported", path,
                                  affixes[k]);
    }
    t->byte_fallback = json_is_true(json_object_get(model, "byte_fallback"));
    t->fuse_unk = json_is_true(json_object_get(model, "fuse_unk"));
    t->ignore_merges = json_is_true(json_object_get(model, "ignore_merges"));
    return 0;
}

/* ---------------------------------------------------------- pre-tokenizer */

static int add_level(kvlm_tokenizer *t, const char *pattern, size_t len, const char *path,
                     const char *where, kvlm_error *err) {
    if (t->n_levels == TOK_MAX_LEVELS)
        return kvlm_error_set(err, KVLM_ERR_UNSUPPORTED, "%s: %s: more than %d pre-tokenizer stages", path,
                              where, TOK_MAX_LEVELS);
    tok_level *l = &t->levels[t->n_levels];
    l->re = NULL;
    if (pattern && !(len == strlen(tok_gpt2_pattern) && memcmp(pattern, tok_gpt2_pattern, len) == 0)) {
        char msg[400];
        l->re = tok_regex_compile(pattern, len, msg, sizeof msg);
        if (!l->re)
            return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: %s: invalid pattern: %s", path, where, msg);
    }
    t->n_levels++;
    return 0;
}

/* A String pattern as a regex matching it literally. */
static char *quote_literal(const char *s, size_t n, size_t *out_len) {
    char *q = malloc(2 * n + 1);
    if (!q) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        int plain = c >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                    (c >= 'A' && c <= 'Z') || c == ' ';
        if (!plain) q[o++] = '\\';
        q[o++] = (char)c;
    }
    q[o] = 0;
    *out_len = o;
    return q;
}

static int read_split(kvlm_tokenizer *t, json_t *p, const char *path, const char *where,
                      kvlm_error *err) {
    json_t *behavior = json_object_get(p, "behavior");
    if (!is_str(behavior, "Isolated"))
        return kvlm_error_set(err, KVLM_ERR_UNSUPPORTED, "%s: %s.behavior %s is not supported (only "
                              "Isolated)", path, where,
                              json_is_string(behavior) ? json_string_value(behavior) : "(missing)");
    if (json_is_true(json_object_get(p, "invert")))
        return kvlm_error_set(err, KVLM_ERR_UNSUPPORTED, "%s: %s.invert true is not supported", path,
                              where);
    json_t *pat = json_object_get(p, "pattern");
    json_t *rx = json_is_object(pat) ? json_object_get(pat, "Regex") : NULL;
    const char *lit = string_pattern(pat);
    if (json_is_string(rx))
        return add_level(t, json_string_value(rx), json_string_length(rx), path, where, err);
    if (lit) {
        size_t qlen;
        char *q = quote_literal(lit, strlen(lit), &qlen);
        if (!q) return kvlm_error_set(err, KVLM_ERR_NOMEM, "%s: out of memory", path);
        int rc = add_level(t, q, qlen, path, where, err);
        free(q);
        return rc;
    }
    return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: %s.pattern must be {\"Regex\": ...} or "
                          "{\"String\": ...}", path, where);
}

static int read_bytelevel(kvlm_tokenizer *t, json_t *p, int last, const char *path,
                          const char *where, kvlm_error *err) {
    json_t *aps = json_object_get(p, "add_prefix_space");
    if (aps && !json_is_false(aps))
        return kvlm_error_set(err, KVLM_ERR_UNSUPPORTED, "%s: %s.add_prefix_space true is not supported",
                              path, where);
    if (!last)
        return kvlm_error_set(err, KVLM_ERR_UNSUPPORTED, "%s: %s: ByteLevel must be the last "
                              "pre-tokenizer", path, where);
    json_t *regex = json_object_get(p, "use_regex");
    if (!regex || json_is_true(regex)) return add_level(t, NULL, 0, path, where, err);
    return 0;
}

static int read_metaspace(kvlm_tokenizer *t, json_t *p, const char *path, const char *where,
                          kvlm_error *err) {
    json_t *rep = json_object_get(p, "replacement");
    if (rep && !is_str(rep, META))
        return kvlm_error_set(err, KVLM_ERR_UNSUPPORTED, "%s: %s.replacement must be \"" META "\"", path,
                              where);
    json_t *scheme = json_object_get(p, "prepend_scheme");
    json_t *aps = json_object_get(p, "add_prefix_space");
    if (is_str(scheme, "first")) t->spm_prefix = TOK_PREFIX_META_FIRST;
    else if (is_str(scheme, "always")) t->spm_prefix = TOK_PREFIX_META_ALWAYS;
    else if (is_str(scheme, "never")) t->spm_prefix = TOK_PREFIX_NONE;
    else if (scheme && !json_is_null(scheme))
        return kvlm_error_set(err, KVLM_ERR_UNSUPPORTED, "%s: %s.prepend_scheme %s is not supported",
                              path, where, json_is_string(scheme) ? json_string_value(scheme) : "?");
    else t->spm_prefix = !aps || json_is_true(aps) ? TOK_PREFIX_META_ALWAYS : TOK_PREFIX_NONE;
    json_t *split = json_object_get(p, "split");
    t->spm_split = !split || json_is_true(split);
    t->spm_replace = 1;
    return 0;
}

/* Fills t->levels (byte-level) or the Metaspace settings (SentencePiece). */
static int read_pre_tokenizer(kvlm_tokenizer *t, json_t *pre, const char *path, kvlm_error *err) {
    t->n_levels = 0;
    if (!pre || json_is_null(pre)) return 0;
    json_t *list = pre;
    int single = strcmp(type_of(pre), "Sequence") != 0;
    if (!single) list = json_object_get(pre, "pretokenizers");
    size_t n = single ? 1 : json_array_size(list);
    if (!single && !json_is_array(list))
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: pre_tokenizer.pretokenizers must be an array",
                              path);
    for (size_t i = 0; i < n; i++) {
        json_t *p = single ? pre : json_array_get(list, i);
        char where[64];
        if (single) snprintf(where, sizeof where, "pre_tokenizer");
        else snprintf(where, sizeof where, "pre_tokenizer.pretokenizers[%zu]", i);
        const char *ty = type_of(p);
        int rc;
        if (strcmp(ty, "Split") == 0 && t->kind == TOK_KIND_BYTELEVEL)
            rc = read_split(t, p, path, where, err);
        else if (strcmp(ty, "ByteLevel") == 0)
            rc = read_bytelevel(t, p, i + 1 == n, path, where, err);
        else if (strcmp(ty, "Metaspace") == 0 && t->kind == TOK_KIND_SPM && n == 1)
            rc = read_metaspace(t, p, path, where, err);
        else
            rc = kvlm_error_set(err, KVLM_ERR_UNSUPPORTED, "%s: %s: pre-tokenizer %s is not supported "
                                "here", path, where, *ty ? ty : "(no type)");
        if (rc != 0) return rc;
    }
    return 0;
}

/* ------------------------------------------------------------- normalizer */

static int read_normalizer(kvlm_tokenizer *t, json_t *norm, const char *path, kvlm_error *err) {
    if (!norm || json_is_null(norm)) return 0;
    json_t *list = norm;
    int single = strcmp(type_of(norm), "Sequence") != 0;
    if (!single) list = json_object_get(norm, "normalizers");
    size_t n = single ? 1 : json_array_size(list);
    for (size_t i = 0; i < n; i++) {
        json_t *p = single ? norm : json_array_get(list, i);
        const char *ty = type_of(p);
        if (strcmp(ty, "NFC") == 0) {
            t->nfc = 1;
        } else if (strcmp(ty, "Prepend") == 0 && t->kind == TOK_KIND_SPM &&
                   is_str(json_object_get(p, "prepend"), META)) {
            t->spm_prefix = TOK_PREFIX_ALWAYS;
        } else if (strcmp(ty, "Replace") == 0 && t->kind == TOK_KIND_SPM &&
                   string_pattern(json_object_get(p, "pattern")) &&
                   strcmp(string_pattern(json_object_get(p, "pattern")), " ") == 0 &&
                   is_str(json_object_get(p, "content"), META)) {
            t->spm_replace = 1;
        } else {
            return kvlm_error_set(err, KVLM_ERR_UNSUPPORTED, "%s: normalizer %s%s is not supported "
                                  "(supported: NFC; for SentencePiece-style files Prepend(\"" META
                                  "\") and Replace(\" \", \"" META "\"))", path, *ty ? ty : "(no type)",
                                  strcmp(ty, "Prepend") == 0 || strcmp(ty, "Replace") == 0 ?
                                  " with these arguments" : "");
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- decoder */

static int read_decoder(kvlm_tokenizer *t, json_t *dec, const char *path, kvlm_error *err) {
    if (!dec || json_is_null(dec)) return 0;
    json_t *list = dec;
    int single = strcmp(type_of(dec), "Sequence") != 0;
    if (!single) list = json_object_get(dec, "decoders");
    size_t n = single ? 1 : json_array_size(list);
    for (size_t i = 0; i < n; i++) {
        json_t *p = single ? dec : json_array_get(list, i);
        const char *ty = type_of(p);
        if (strcmp(ty, "ByteLevel") == 0 && t->kind == TOK_KIND_BYTELEVEL) continue;
        if (strcmp(ty, "Fuse") == 0) continue;
        if (strcmp(ty, "ByteFallback") == 0) { t->dec_byte_fallback = 1; continue; }
        if (strcmp(ty, "Replace") == 0 && string_pattern(json_object_get(p, "pattern")) &&
            strcmp(string_pattern(json_object_get(p, "pattern")), META) == 0 &&
            is_str(json_object_get(p, "content"), " ")) {
            t->dec_meta_space = 1;
            continue;
        }
        if (strcmp(ty, "Strip") == 0 && is_str(json_object_get(p, "content"), " ") &&
            json_integer_value(json_object_get(p, "stop")) == 0 &&
            json_integer_value(json_object_get(p, "start")) <= 1) {
            t->strip_leading_space = json_integer_value(json_object_get(p, "start")) == 1;
            continue;
        }
        if (strcmp(ty, "Metaspace") == 0) {
            json_t *scheme = json_object_get(p, "prepend_scheme");
            json_t *aps = json_object_get(p, "add_prefix_space");
            t->dec_meta_space = 1;
            t->strip_leading_space = scheme && json_is_string(scheme) ? !is_str(scheme, "never") :
                                     !aps || json_is_true(aps);
            continue;
        }
        return kvlm_error_set(err, KVLM_ERR_UNSUPPORTED, "%s: decoder %s is not supported here", path,
                              *ty ? ty : "(no type)");
    }
    return 0;
}

/* ------------------------------------------------------------ added tokens */

static int load_added(kvlm_tokenizer *t, json_t *added, const char *path, kvlm_error *err) {
    if (!added || json_is_null(added)) return 0;
    if (!json_is_array(added))
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: added_tokens must be an array", path);
    size_t i;
    json_t *a;
    json_array_foreach(added, i, a) {
        json_t *id = json_object_get(a, "id");
        json_t *content = json_object_get(a, "content");
        json_t *special = json_object_get(a, "special");
        if (!json_is_integer(id) || json_integer_value(id) < 0 || json_integer_value(id) > TOK_MAX_ID)
            return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: added_tokens[%zu].id must be an integer "
                                  "in 0..%d", path, i, TOK_MAX_ID);
        if (!json_is_string(content) || json_string_length(content) == 0)
            return kvlm_error_set(err, KVLM_ERR_FORMAT,
                                  "%s: added_tokens[%zu].content must be a non-empty string", path, i);
        int32_t tid = (int32_t)json_integer_value(id);
        if (tok_set_piece(t, tid, json_string_value(content), json_string_length(content)) != 0)
            return kvlm_error_set(err, KVLM_ERR_NOMEM, "%s: out of memory", path);
        t->flags[tid] |= TOK_ADDED | (json_is_true(special) ? TOK_SPECIAL : 0);
    }
    return 0;
}

/* --------------------------------------------------------- post-processor */

static int template_ids(json_t *special, const char *name, int32_t *out, int room) {
    json_t *e = json_object_get(special, name);
    json_t *ids = json_object_get(e, "ids");
    if (!json_is_array(ids)) return -1;
    int n = 0;
    size_t i;
    json_t *v;
    json_array_foreach(ids, i, v) {
        if (n == room || !json_is_integer(v)) return -1;
        out[n++] = (int32_t)json_integer_value(v);
    }
    return n;
}

static int read_template(kvlm_tokenizer *t, json_t *pp, const char *path, kvlm_error *err) {
    json_t *single = json_object_get(pp, "single");
    json_t *special = json_object_get(pp, "special_tokens");
    if (!json_is_array(single))
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: post_processor.single must be an array", path);
    int seen_text = 0;
    size_t i;
    json_t *item;
    json_array_foreach(single, i, item) {
        if (json_object_get(item, "Sequence")) { seen_text = 1; continue; }
        json_t *st = json_object_get(item, "SpecialToken");
        json_t *name = json_object_get(st, "id");
        if (!json_is_string(name))
            return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: post_processor.single[%zu] is neither a "
                                  "Sequence nor a SpecialToken", path, i);
        int32_t *dst = seen_text ? t->suffix_ids + t->n_suffix : t->prefix_ids + t->n_prefix;
        int room = TOK_MAX_TEMPLATE - (seen_text ? t->n_suffix : t->n_prefix);
        int n = template_ids(special, json_string_value(name), dst, room);
        if (n < 0)
            return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: post_processor: special token '%s' has no "
                                  "usable ids in special_tokens", path, json_string_value(name));
        *(seen_text ? &t->n_suffix : &t->n_prefix) += n;
    }
    return 0;
}

static int read_post_processor(kvlm_tokenizer *t, json_t *pp, const char *path, kvlm_error *err) {
    if (!pp || json_is_null(pp)) return 0;
    if (strcmp(type_of(pp), "TemplateProcessing") == 0) return read_template(t, pp, path, err);
    if (strcmp(type_of(pp), "Sequence") == 0) {
        size_t i;
        json_t *p;
        json_array_foreach(json_object_get(pp, "processors"), i, p)
            if (read_post_processor(t, p, path, err) != 0) return -1;
    }
    /* ByteLevel (offsets only) and other processors add no tokens to a
     * single text that this tokenizer could know about. */
    return 0;
}

/* tokenizer_config.json beside the tokenizer's file(s): bos/eos names and
 * add_*. */
static const char *token_name(json_t *v) {
    if (json_is_object(v)) v = json_object_get(v, "content");
    return json_is_string(v) ? json_string_value(v) : NULL;
}

void tok_read_config(kvlm_tokenizer *t, const char *path) {
    char cfg[1100];
    const char *slash = strrchr(path, '/');
    snprintf(cfg, sizeof cfg, "%.*stokenizer_config.json", slash ? (int)(slash - path + 1) : 0, path);
    FILE *f = fopen(cfg, "rb");
    if (!f) return;
    fclose(f);
    kvlm_error ignored;
    json_t *root = tok_load_json(cfg, &ignored);
    if (!root) return;   /* optional file: a broken one is not the tokenizer's */
    const char *bos = token_name(json_object_get(root, "bos_token"));
    const char *eos = token_name(json_object_get(root, "eos_token"));
    int32_t bos_id = bos ? tok_map_get(t, bos, strlen(bos)) : -1;
    int32_t eos_id = eos ? tok_map_get(t, eos, strlen(eos)) : -1;
    if (bos_id >= 0) t->bos_id = bos_id;
    if (eos_id >= 0) t->eos_id = eos_id;
    json_t *add_bos = json_object_get(root, "add_bos_token");
    if (json_is_boolean(add_bos)) {
        if (json_is_true(add_bos) && t->n_prefix == 0 && t->bos_id >= 0)
            t->prefix_ids[t->n_prefix++] = t->bos_id;
        if (json_is_false(add_bos)) t->n_prefix = 0;
    }
    json_t *add_eos = json_object_get(root, "add_eos_token");
    if (json_is_boolean(add_eos)) {
        if (json_is_true(add_eos) && t->n_suffix == 0 && t->eos_id >= 0)
            t->suffix_ids[t->n_suffix++] = t->eos_id;
        if (json_is_false(add_eos)) t->n_suffix = 0;
    }
    json_decref(root);
}

/* ------------------------------------------------------------ entry point */

static int uses_bytelevel(json_t *root) {
    json_t *pre = json_object_get(root, "pre_tokenizer");
    if (strcmp(type_of(pre), "ByteLevel") == 0) return 1;
    if (strcmp(type_of(pre), "Sequence") == 0) {
        size_t i;
        json_t *p;
        json_array_foreach(json_object_get(pre, "pretokenizers"), i, p)
            if (strcmp(type_of(p), "ByteLevel") == 0) return 1;
    }
    return strcmp(type_of(json_object_get(root, "decoder")), "ByteLevel") == 0;
}

static int check_ids(kvlm_tokenizer *t, const char *path, kvlm_error *err) {
    for (int k = 0; k < t->n_prefix + t->n_suffix; k++) {
        int32_t id = k < t->n_prefix ? t->prefix_ids[k] : t->suffix_ids[k - t->n_prefix];
        if (id < 0 || id >= t->n_vocab || !(t->flags[id] & TOK_PRESENT))
            return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: post_processor names id %d, which is not "
                                  "a token", path, id);
    }
    if (t->n_prefix) t->bos_id = t->prefix_ids[0];
    if (t->bos_id < 0) {
        const char *name = t->kind == TOK_KIND_SPM ? "<s>" : "<|begin_of_text|>";
        t->bos_id = tok_map_get(t, name, strlen(name));
    }
    return 0;
}

int tok_load_tokenizer_json(kvlm_tokenizer *t, json_t *root, const char *path, kvlm_error *err) {
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model))
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: missing object 'model'", path);
    if (check_model(t, model, path, err) != 0) return -1;
    t->kind = uses_bytelevel(root) ? TOK_KIND_BYTELEVEL : TOK_KIND_SPM;
    t->merge_mode = TOK_MERGE_ONE;
    if (t->kind == TOK_KIND_BYTELEVEL && t->byte_fallback)
        return kvlm_error_set(err, KVLM_ERR_UNSUPPORTED, "%s: model.byte_fallback with a ByteLevel "
                              "pre-tokenizer is not supported", path);
    if (read_normalizer(t, json_object_get(root, "normalizer"), path, err) != 0 ||
        read_pre_tokenizer(t, json_object_get(root, "pre_tokenizer"), path, err) != 0 ||
        read_decoder(t, json_object_get(root, "decoder"), path, err) != 0)
        return -1;
    if (t->kind == TOK_KIND_BYTELEVEL && t->n_levels == 0 &&
        strcmp(type_of(json_object_get(root, "pre_tokenizer")), "") == 0)
        return kvlm_error_set(err, KVLM_ERR_UNSUPPORTED, "%s: a ByteLevel decoder without a ByteLevel "
                              "pre-tokenizer is not supported", path);
    int16_t rev[TOK_UNMAP_SIZE];
    tok_build_unmap(rev);
    const int16_t *r = t->kind == TOK_KIND_BYTELEVEL ? rev : NULL;
    char where[1100];
    snprintf(where, sizeof where, "%s: model.vocab", path);
    if (tok_load_vocab(t, json_object_get(model, "vocab"), r, where, err) != 0) return -1;
    if (load_added(t, json_object_get(root, "added_tokens"), path, err) != 0) return -1;
    if (tok_map_build(t) != 0) return kvlm_error_set(err, KVLM_ERR_NOMEM, "%s: out of memory", path);
    json_t *merges = json_object_get(model, "merges");
    if (!merges) return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: missing model.merges", path);
    if (tok_load_merges_json(t, r, merges, path, err) != 0) return -1;
    json_t *unk = json_object_get(model, "unk_token");
    if (json_is_string(unk)) {
        t->unk_id = tok_map_get(t, json_string_value(unk), json_string_length(unk));
        if (t->unk_id < 0)
            return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: model.unk_token '%s' is not in the "
                                  "vocabulary", path, json_string_value(unk));
    }
    if (read_post_processor(t, json_object_get(root, "post_processor"), path, err) != 0) return -1;
    tok_read_config(t, path);
    return check_ids(t, path, err);
}
