/*
 * Llama-family tokenizers, checked id by id against fixtures whose ids come
 * from Hugging Face's tokenizers library (npm 'tokenizers', the Rust
 * implementation) and agree with tools/tokenizer_llama_reference.py:
 * Llama 3 and Qwen2 byte-level BPE (Split patterns by PCRE2, NFC),
 * Llama 2 SentencePiece-style BPE with byte fallback, and the GGUF
 * vocabulary constructor (model "llama" by scores against the Python
 * reference; model "gpt2" against the Llama 3 and Qwen2 fixtures). Also:
 * decode against Hugging Face's decode, BOS handling, the two merge-loop
 * implementations, and malformed files and arrays, which must fail with a
 * message naming what is wrong. Run from the repository root.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tokenizer/tokenizer.h"
#include "tokenizer_testlib.h"

#define FIX "tests/fixtures/tokenizer/"

/* ------------------------------------------------------------- fixtures */

typedef struct lcase {
    const char *name;
    unsigned char *bytes, *decoded;
    size_t len, dec_len;
    int special, add_special, has_decoded, nfc_stable;
    int32_t *ids;
    size_t n_ids;
} lcase;

typedef struct lfixture {
    json_t *root;
    lcase *c;
    size_t n;
} lfixture;

static unsigned char *unhex(const char *hex, size_t *len) {
    size_t n = strlen(hex) / 2;
    unsigned char *b = malloc(n + 1);
    for (size_t k = 0; k < n; k++) b[k] = (unsigned char)(hexval(hex[2 * k]) * 16 + hexval(hex[2 * k + 1]));
    *len = n;
    return b;
}

static void fixture_load(lfixture *f, const char *path) {
    json_error_t je;
    f->root = json_load_file(path, 0, &je);
    if (!f->root) print_error("%s: %s\n", path, je.text);
    assert_non_null(f->root);
    json_t *cases = json_object_get(f->root, "cases");
    f->n = json_array_size(cases);
    assert_true(f->n >= 100);
    f->c = calloc(f->n, sizeof *f->c);
    for (size_t i = 0; i < f->n; i++) {
        json_t *j = json_array_get(cases, i);
        lcase *c = &f->c[i];
        c->name = json_string_value(json_object_get(j, "name"));
        c->bytes = unhex(json_string_value(json_object_get(j, "hex")), &c->len);
        c->special = json_is_true(json_object_get(j, "special"));
        c->add_special = json_is_true(json_object_get(j, "add_special"));
        json_t *nfc = json_object_get(j, "nfc_stable");
        c->nfc_stable = !nfc || json_is_true(nfc);
        json_t *dec = json_object_get(j, "decoded_hex");
        if (dec) {
            c->has_decoded = 1;
            c->decoded = unhex(json_string_value(dec), &c->dec_len);
        }
        json_t *ids = json_object_get(j, "ids");
        c->n_ids = json_array_size(ids);
        c->ids = malloc((c->n_ids + 1) * sizeof *c->ids);
        for (size_t k = 0; k < c->n_ids; k++) c->ids[k] = (int32_t)json_integer_value(json_array_get(ids, k));
    }
}

static void fixture_free(lfixture *f) {
    for (size_t i = 0; i < f->n; i++) {
        free(f->c[i].bytes);
        free(f->c[i].decoded);
        free(f->c[i].ids);
    }
    free(f->c);
    json_decref(f->root);
}

enum { DEC_ROUNDTRIP = 1, DEC_NFC_ONLY = 2 };

/* Checks every case id by id, then decode: Hugging Face's decode when the
 * fixture has it, else the input itself where the format guarantees a
 * round trip (decode_rule). only_nfc_stable skips cases NFC changes (for
 * vocabularies without the normalizer). Returns the number checked. */
static size_t run_cases(const kvlm_tokenizer *t, const lfixture *f, const char *label,
                        int only_nfc_stable, int decode_rule) {
    int failures = 0;
    size_t checked = 0;
    for (size_t i = 0; i < f->n; i++) {
        const lcase *c = &f->c[i];
        if (only_nfc_stable && !c->nfc_stable) continue;
        unsigned flags = (c->special ? KVLM_ENCODE_ALLOW_SPECIAL : 0) |
                         (c->add_special ? KVLM_ENCODE_ADD_SPECIAL : 0);
        int32_t *ids;
        size_t n;
        kvlm_error err = {0};
        int rc = kvlm_tokenizer_encode_ex(t, (const char *)c->bytes, c->len, flags, &ids, &n, &err);
        if (rc) print_error("%s: case %s: %s\n", label, c->name, err.msg);
        assert_int_equal(rc, 0);
        size_t k = 0;
        while (k < n && k < c->n_ids && ids[k] == c->ids[k]) k++;
        if (k != n || k != c->n_ids) {
            print_error("%s: case %s: ids differ at index %zu (got %d, want %d; %zu vs %zu ids)\n",
                        label, c->name, k, k < n ? ids[k] : -1, k < c->n_ids ? c->ids[k] : -1, n,
                        c->n_ids);
            failures++;
        }
        char *text;
        size_t tlen;
        assert_int_equal(kvlm_tokenizer_decode(t, ids, n, &text, &tlen, &err), 0);
        const unsigned char *want = NULL;
        size_t want_len = 0;
        if (c->has_decoded) {
            want = c->decoded;
            want_len = c->dec_len;
        } else if (decode_rule == DEC_ROUNDTRIP || (decode_rule == DEC_NFC_ONLY && c->nfc_stable)) {
            want = c->bytes;
            want_len = c->len;
        }
        if (want && (tlen != want_len || memcmp(text, want, want_len) != 0)) {
            print_error("%s: case %s: decode differs (%zu bytes, want %zu)\n", label, c->name,
                        tlen, want_len);
            failures++;
        }
        free(text);
        free(ids);
        checked++;
    }
    assert_int_equal(failures, 0);
    return checked;
}

/* ---------------------------------------------------- tokenizer.json files */

static void test_llama3_json(void **state) {
    (void)state;
    lfixture f;
    fixture_load(&f, FIX "llama3_cases.json");
    kvlm_tokenizer *t = load_ok(FIX "llama3");
    assert_int_equal(kvlm_tokenizer_vocab_size(t), 256 + 480 + 8);
    /* byte-level: decode gives the input back, special tokens included */
    assert_true(run_cases(t, &f, "llama3", 0, DEC_ROUNDTRIP) >= 500);
    int32_t bos = kvlm_tokenizer_token_id(t, "<|begin_of_text|>", 17);
    assert_true(bos >= 0);
    assert_int_equal(kvlm_tokenizer_bos_id(t), bos);
    assert_int_equal(kvlm_tokenizer_add_bos(t), 1);
    assert_int_equal(kvlm_tokenizer_eos_id(t), kvlm_tokenizer_token_id(t, "<|end_of_text|>", 15));
    assert_true(kvlm_tokenizer_is_special(t, bos));
    kvlm_tokenizer_free(t);
    fixture_free(&f);
}

static void test_qwen2_json(void **state) {
    (void)state;
    lfixture f;
    fixture_load(&f, FIX "qwen2_cases.json");
    kvlm_tokenizer *t = load_ok(FIX "qwen2/tokenizer.json");
    assert_true(run_cases(t, &f, "qwen2", 0, DEC_NFC_ONLY) >= 500);
    assert_int_equal(kvlm_tokenizer_add_bos(t), 0);
    assert_int_equal(kvlm_tokenizer_bos_id(t), -1);
    assert_int_equal(kvlm_tokenizer_eos_id(t), kvlm_tokenizer_token_id(t, "<|endoftext|>", 13));
    /* <tool_call> is added but not special: matched without allow_special */
    int32_t tc = kvlm_tokenizer_token_id(t, "<tool_call>", 11);
    assert_true(tc >= 0);
    assert_false(kvlm_tokenizer_is_special(t, tc));
    expect_ids(t, "<tool_call>", 0, &tc, 1);
    kvlm_tokenizer_free(t);
    fixture_free(&f);
}

static void test_llama2_json(void **state) {
    (void)state;
    lfixture f;
    fixture_load(&f, FIX "llama2_cases.json");
    kvlm_tokenizer *t = load_ok(FIX "llama2");
    /* SentencePiece: "▁" is added in front and decode strips it, so a text
     * without added tokens or "▁" of its own comes back; the rest is
     * checked against Hugging Face's decode. */
    assert_true(run_cases(t, &f, "llama2", 0, DEC_ROUNDTRIP) >= 500);
    assert_int_equal(kvlm_tokenizer_bos_id(t), 1);
    assert_int_equal(kvlm_tokenizer_add_bos(t), 1);
    assert_int_equal(kvlm_tokenizer_eos_id(t), 2);
    /* piece() prints "▁" as a space and byte tokens as their byte */
    size_t len;
    int32_t hello = kvlm_tokenizer_token_id(t, "\xE2\x96\x81the", 6);
    assert_true(hello >= 0);
    const char *p = kvlm_tokenizer_piece(t, hello, &len);
    assert_int_equal(len, 4);
    assert_memory_equal(p, " the", 4);
    p = kvlm_tokenizer_piece(t, 3 + 0x0A, &len);
    assert_int_equal(len, 1);
    assert_int_equal(p[0], '\n');
    /* a character outside the vocabulary: its UTF-8 bytes as byte tokens */
    int32_t want[] = {kvlm_tokenizer_token_id(t, "\xE2\x96\x81", 3), 3 + 0xF0, 3 + 0x9F, 3 + 0x9C,
                      3 + 0x81};
    expect_ids(t, "\xF0\x9F\x9C\x81", 0, want, 5);
    kvlm_tokenizer_free(t);
    fixture_free(&f);
}

/* ------------------------------------------------------------ GGUF arrays */

typedef struct gguf_arrays {
    json_t *root;
    const char *model, *pre;
    const char **tokens, **merges;
    float *scores;
    int32_t *types;
    int n_tokens, n_merges, bos, eos, add_bos;
} gguf_arrays;

static void gguf_load(gguf_arrays *g, const char *path) {
    json_error_t je;
    memset(g, 0, sizeof *g);
    g->root = json_load_file(path, 0, &je);
    assert_non_null(g->root);
    g->model = json_string_value(json_object_get(g->root, "model"));
    g->pre = json_string_value(json_object_get(g->root, "pre"));
    json_t *tokens = json_object_get(g->root, "tokens");
    json_t *scores = json_object_get(g->root, "scores");
    json_t *types = json_object_get(g->root, "token_type");
    json_t *merges = json_object_get(g->root, "merges");
    g->n_tokens = (int)json_array_size(tokens);
    g->n_merges = (int)json_array_size(merges);
    g->tokens = calloc((size_t)g->n_tokens, sizeof *g->tokens);
    g->types = calloc((size_t)g->n_tokens, sizeof *g->types);
    g->scores = json_is_array(scores) ? calloc((size_t)g->n_tokens, sizeof *g->scores) : NULL;
    g->merges = calloc((size_t)g->n_merges + 1, sizeof *g->merges);
    for (int i = 0; i < g->n_tokens; i++) {
        g->tokens[i] = json_string_value(json_array_get(tokens, (size_t)i));
        g->types[i] = (int32_t)json_integer_value(json_array_get(types, (size_t)i));
        if (g->scores) g->scores[i] = (float)json_number_value(json_array_get(scores, (size_t)i));
    }
    for (int i = 0; i < g->n_merges; i++) g->merges[i] = json_string_value(json_array_get(merges, (size_t)i));
    g->bos = (int)json_integer_value(json_object_get(g->root, "bos"));
    g->eos = (int)json_integer_value(json_object_get(g->root, "eos"));
    g->add_bos = (int)json_integer_value(json_object_get(g->root, "add_bos"));
}

static void gguf_free(gguf_arrays *g) {
    free(g->tokens);
    free(g->types);
    free(g->scores);
    free(g->merges);
    json_decref(g->root);
}

static kvlm_tokenizer *gguf_build(const gguf_arrays *g, kvlm_error *err) {
    tok_gguf_vocab v = TOK_GGUF_VOCAB_INIT;
    v.model = g->model;
    v.pre = g->pre;
    v.tokens = g->tokens;
    v.n_tokens = g->n_tokens;
    v.scores = g->scores;
    v.types = g->types;
    v.merges = g->merges;
    v.n_merges = g->n_merges;
    v.bos = g->bos;
    v.eos = g->eos;
    v.add_bos = g->add_bos;
    return tok_from_gguf_vocab(&v, err);
}

static kvlm_tokenizer *gguf_ok(const gguf_arrays *g) {
    kvlm_error err = {0};
    kvlm_tokenizer *t = gguf_build(g, &err);
    if (!t) print_error("GGUF arrays: %s\n", err.msg);
    assert_non_null(t);
    return t;
}

static void test_gguf_llama(void **state) {
    (void)state;
    gguf_arrays g;
    gguf_load(&g, FIX "gguf_llama.json");
    lfixture f;
    fixture_load(&f, FIX "gguf_llama_cases.json");
    kvlm_tokenizer *t = gguf_ok(&g);
    assert_int_equal(kvlm_tokenizer_bos_id(t), 1);
    assert_int_equal(kvlm_tokenizer_eos_id(t), 2);
    assert_int_equal(kvlm_tokenizer_add_bos(t), 1);
    assert_true(run_cases(t, &f, "gguf llama", 0, 0) >= 500);
    /* Round trips where SentencePiece guarantees them: no added token in
     * the text (specials allowed, the user-defined <|tool|>), no "▁". */
    for (size_t i = 0; i < f.n; i++) {
        const lcase *c = &f.c[i];
        if (c->special || c->add_special || memmem(c->bytes, c->len, "\xE2\x96\x81", 3) ||
            memmem(c->bytes, c->len, "<|tool|>", 8))
            continue;
        char *text;
        size_t tlen;
        kvlm_error err;
        assert_int_equal(kvlm_tokenizer_decode(t, c->ids, c->n_ids, &text, &tlen, &err), 0);
        if (tlen != c->len || memcmp(text, c->bytes, c->len) != 0)
            fail_msg("gguf llama: case %s does not decode back", c->name);
        free(text);
    }
    /* control tokens are never produced from text; user-defined always are */
    int32_t tool = g.n_tokens - 1;
    expect_ids(t, "<|tool|>", 0, &tool, 1);
    kvlm_tokenizer_free(t);
    g.add_bos = 0;
    t = gguf_ok(&g);
    assert_int_equal(kvlm_tokenizer_add_bos(t), 0);
    /* add_space_prefix false: no "▁" in front, so " Hello world" gives
     * what "Hello world" gives with the prefix, and decodes back whole */
    tok_gguf_vocab v = TOK_GGUF_VOCAB_INIT;
    v.model = g.model;
    v.tokens = g.tokens;
    v.n_tokens = g.n_tokens;
    v.scores = g.scores;
    v.types = g.types;
    v.bos = g.bos;
    v.eos = g.eos;
    v.add_space_prefix = 0;
    kvlm_error err = {0};
    kvlm_tokenizer *np = tok_from_gguf_vocab(&v, &err);
    assert_non_null(np);
    int32_t *a, *b;
    size_t na, nb;
    encode_ok(t, "Hello world", 11, 0, &a, &na);
    encode_ok(np, " Hello world", 12, 0, &b, &nb);
    assert_true(na >= 2);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na * sizeof *a);
    free(b);
    encode_ok(np, "Hello world", 11, 0, &b, &nb);
    assert_true(nb != na || memcmp(a, b, na * sizeof *a) != 0);
    char *text;
    size_t tlen;
    assert_int_equal(kvlm_tokenizer_decode(np, b, nb, &text, &tlen, &err), 0);
    assert_int_equal(tlen, 11);
    assert_memory_equal(text, "Hello world", 11);
    free(text);
    free(a);
    free(b);
    kvlm_tokenizer_free(np);
    kvlm_tokenizer_free(t);
    fixture_free(&f);
    gguf_free(&g);
}

static void test_gguf_gpt2_llama3(void **state) {
    (void)state;
    gguf_arrays g;
    gguf_load(&g, FIX "gguf_gpt2.json");
    lfixture f;
    fixture_load(&f, FIX "llama3_cases.json");
    kvlm_tokenizer *t = gguf_ok(&g);
    assert_true(run_cases(t, &f, "gguf gpt2 llama-bpe", 0, DEC_ROUNDTRIP) >= 500);
    assert_int_equal(kvlm_tokenizer_bos_id(t), g.bos);
    assert_int_equal(kvlm_tokenizer_add_bos(t), 1);
    kvlm_tokenizer_free(t);
    fixture_free(&f);
    gguf_free(&g);
}

/* GGUF arrays made here from qwen2/tokenizer.json, pre "qwen2": the same
 * ids on every case NFC leaves alone (GGUF vocabularies get no NFC). */
static void test_gguf_gpt2_qwen2(void **state) {
    (void)state;
    json_error_t je;
    json_t *root = json_load_file(FIX "qwen2/tokenizer.json", 0, &je);
    assert_non_null(root);
    json_t *model = json_object_get(root, "model");
    json_t *vocab = json_object_get(model, "vocab"), *mj = json_object_get(model, "merges");
    json_t *added = json_object_get(root, "added_tokens");
    int n = (int)(json_object_size(vocab) + json_array_size(added));
    const char **tokens = calloc((size_t)n, sizeof *tokens);
    int32_t *types = calloc((size_t)n, sizeof *types);
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        tokens[json_integer_value(v)] = key;
        types[json_integer_value(v)] = 1;
    }
    size_t i;
    json_array_foreach(added, i, v) {
        int id = (int)json_integer_value(json_object_get(v, "id"));
        tokens[id] = json_string_value(json_object_get(v, "content"));
        types[id] = json_is_true(json_object_get(v, "special")) ? 3 : 4;
    }
    int nm = (int)json_array_size(mj);
    char **merges = calloc((size_t)nm, sizeof *merges);
    for (int k = 0; k < nm; k++) {
        json_t *p = json_array_get(mj, (size_t)k);
        const char *a = json_string_value(json_array_get(p, 0)), *b = json_string_value(json_array_get(p, 1));
        merges[k] = malloc(strlen(a) + strlen(b) + 2);
        sprintf(merges[k], "%s %s", a, b);
    }
    kvlm_error err = {0};
    tok_gguf_vocab gv = TOK_GGUF_VOCAB_INIT;
    gv.model = "gpt2";
    gv.pre = "qwen2";
    gv.tokens = tokens;
    gv.n_tokens = n;
    gv.types = types;
    gv.merges = (const char *const *)merges;
    gv.n_merges = nm;
    gv.eos = n - 5;
    kvlm_tokenizer *t = tok_from_gguf_vocab(&gv, &err);
    if (!t) print_error("%s\n", err.msg);
    assert_non_null(t);
    lfixture f;
    fixture_load(&f, FIX "qwen2_cases.json");
    assert_true(run_cases(t, &f, "gguf gpt2 qwen2", 1, DEC_ROUNDTRIP) >= 450);
    fixture_free(&f);
    kvlm_tokenizer_free(t);
    for (int k = 0; k < nm; k++) free(merges[k]);
    free(merges);
    free(tokens);
    free(types);
    json_decref(root);
}

/* ----------------------------------------------- variants of the pipeline */

static json_t *load_json_file(const char *path) {
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    assert_non_null(j);
    return j;
}

static kvlm_tokenizer *load_variant(json_t *root, const char *dir, kvlm_error *err) {
    char *p = path_in(dir, "tokenizer.json");
    assert_int_equal(json_dump_file(root, p, JSON_COMPACT), 0);
    kvlm_tokenizer *t = kvlm_tokenizer_load(p, err);
    free(p);
    return t;
}

/* The older Llama 2 form: no normalizer, Metaspace(prepend_scheme first,
 * split false), decoder Metaspace + ByteFallback. It equals Prepend +
 * Replace on every text that starts without a space or added token. */
static void test_llama2_metaspace(void **state) {
    (void)state;
    char *dir = th_tempdir();
    json_t *root = load_json_file(FIX "llama2/tokenizer.json");
    json_object_set_new(root, "normalizer", json_null());
    json_object_set_new(root, "pre_tokenizer",
                        json_pack("{sssssssb}", "type", "Metaspace", "replacement", "\xE2\x96\x81",
                                  "prepend_scheme", "first", "split", 0));
    json_object_set_new(root, "decoder", json_pack("{s[{ssssss}{ss}{ss}]}", "decoders", "type",
                                                   "Metaspace", "replacement", "\xE2\x96\x81",
                                                   "prepend_scheme", "first", "type", "ByteFallback",
                                                   "type", "Fuse"));
    json_object_set_new(json_object_get(root, "decoder"), "type", json_string("Sequence"));
    kvlm_error err = {0};
    kvlm_tokenizer *t = load_variant(root, dir, &err);
    if (!t) print_error("%s\n", err.msg);
    assert_non_null(t);
    lfixture f;
    fixture_load(&f, FIX "llama2_cases.json");
    size_t same = 0;
    for (size_t i = 0; i < f.n; i++) {
        lcase *c = &f.c[i];
        if (c->special || c->add_special || c->len == 0 || c->bytes[0] == ' ' ||
            memmem(c->bytes, c->len, "\xE2\x96\x81", 3))
            continue;
        int32_t *ids;
        size_t n;
        encode_ok(t, c->bytes, c->len, 0, &ids, &n);
        if (n != c->n_ids || memcmp(ids, c->ids, n * sizeof *ids) != 0)
            fail_msg("metaspace: case %s differs", c->name);
        free(ids);
        same++;
    }
    assert_true(same > 400);
    /* Metaspace adds no "▁" in front of a text that starts with a space */
    int32_t *a, *b;
    size_t na, nb;
    encode_ok(t, " x", 2, 0, &a, &na);
    kvlm_tokenizer *t2 = load_ok(FIX "llama2");
    encode_ok(t2, "x", 1, 0, &b, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na * sizeof *a);
    free(a);
    free(b);
    kvlm_tokenizer_free(t2);
    fixture_free(&f);
    kvlm_tokenizer_free(t);
    json_decref(root);
    th_rmtree(dir);
    free(dir);
}

/* tokenizer_config.json beside tokenizer.json overrides add_bos_token. */
static void test_tokenizer_config(void **state) {
    (void)state;
    char *dir = th_tempdir();
    copy_file(FIX "llama2/tokenizer.json", dir, "tokenizer.json");
    char *cfg = path_in(dir, "tokenizer_config.json");
    const char *text = "{\"add_bos_token\": false, \"add_eos_token\": true, "
                       "\"bos_token\": {\"content\": \"<s>\"}, \"eos_token\": \"</s>\"}";
    assert_int_equal(th_write_file(cfg, text, strlen(text)), 0);
    kvlm_tokenizer *t = load_ok(dir);
    assert_int_equal(kvlm_tokenizer_add_bos(t), 0);
    assert_int_equal(kvlm_tokenizer_bos_id(t), 1);
    int32_t *ids;
    size_t n;
    kvlm_error err;
    assert_int_equal(kvlm_tokenizer_encode_ex(t, "", 0, KVLM_ENCODE_ADD_SPECIAL, &ids, &n, &err), 0);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 2);   /* add_eos_token */
    free(ids);
    kvlm_tokenizer_free(t);
    free(cfg);
    th_rmtree(dir);
    free(dir);
}

/* A Split pattern that can match nothing: no piece is empty, no loop hangs,
 * and every byte comes back. */
static void test_empty_matches(void **state) {
    (void)state;
    char *dir = th_tempdir();
    json_t *root = load_json_file(FIX "llama3/tokenizer.json");
    json_t *split = json_array_get(json_object_get(json_object_get(root, "pre_tokenizer"),
                                                   "pretokenizers"), 0);
    json_object_set_new(split, "pattern", json_pack("{ss}", "Regex", "x*|(?=y)"));
    kvlm_error err = {0};
    kvlm_tokenizer *t = load_variant(root, dir, &err);
    assert_non_null(t);
    const char *s = "axxby\xff xyz";
    int32_t *ids;
    size_t n;
    encode_ok(t, s, strlen(s), 0, &ids, &n);
    char *text;
    size_t len;
    assert_int_equal(kvlm_tokenizer_decode(t, ids, n, &text, &len, &err), 0);
    assert_int_equal(len, strlen(s));
    assert_memory_equal(text, s, len);
    free(text);
    free(ids);
    kvlm_tokenizer_free(t);
    json_decref(root);
    th_rmtree(dir);
    free(dir);
}

/* ------------------------------------------------------------ merge loops */

/* One-at-a-time merging: the array scan and the heap agree on random
 * words, and "aaaa" with "aa a" ranked above "a a" gives [aaa, a] (GPT-2's
 * rounds would give [aa, aa]). */
static void test_merge_one_at_a_time(void **state) {
    (void)state;
    kvlm_tokenizer *t = load_ok(FIX "llama3");
    tok_bpe_scratch scratch = {0};
    const char alphabet[] = "the quick brown fox, e.g. 'tis THE end\n";
    for (int iter = 0; iter < 3000; iter++) {
        size_t n = 1 + rnd() % 200;
        int32_t a[200], b[200];
        for (size_t k = 0; k < n; k++)
            a[k] = b[k] = t->byte_id[(unsigned char)alphabet[rnd() % (sizeof alphabet - 1)]];
        size_t na = tok_bpe_one_scan(&t->merges, a, n);
        size_t nb = tok_bpe_one_heap(&t->merges, b, n, &scratch);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, na * sizeof *a);
    }
    tok_bpe_scratch_free(&scratch);
    kvlm_tokenizer_free(t);

    tok_merge_table m;
    assert_int_equal(tok_merges_init(&m, 4), 0);
    /* ids: a = 0, aa = 1, aaa = 2 */
    assert_int_equal(tok_merges_add(&m, 1, 0, 2), 0);   /* "aa a" */
    assert_int_equal(tok_merges_add(&m, 0, 0, 1), 0);   /* "a a" */
    int32_t w[4] = {0, 0, 0, 0}, h[4] = {0, 0, 0, 0};
    tok_bpe_scratch s2 = {0};
    assert_int_equal(tok_bpe_one_scan(&m, w, 4), 2);
    assert_int_equal(tok_bpe_one_heap(&m, h, 4, &s2), 2);
    assert_int_equal(w[0], 2);
    assert_int_equal(w[1], 0);
    assert_memory_equal(w, h, 2 * sizeof *w);
    tok_bpe_scratch_free(&s2);
    tok_merges_free(&m);
}

/* ------------------------------------------------------------ bad input */

static void expect_variant_error(json_t *root, int code, const char *has1, const char *has2) {
    char *dir = th_tempdir();
    kvlm_error err = {0};
    kvlm_tokenizer *t = load_variant(root, dir, &err);
    if (t || err.code != code || !strstr(err.msg, has1) || (has2 && !strstr(err.msg, has2)))
        print_error("got code %d '%s', want %d with '%s' and '%s'\n", err.code, err.msg, code,
                    has1, has2 ? has2 : "");
    assert_null(t);
    assert_int_equal(err.code, code);
    assert_non_null(strstr(err.msg, "tokenizer.json"));
    th_rmtree(dir);
    free(dir);
}

static void test_malformed_json(void **state) {
    (void)state;
    /* a pattern PCRE2 cannot compile */
    json_t *root = load_json_file(FIX "llama3/tokenizer.json");
    json_t *split = json_array_get(json_object_get(json_object_get(root, "pre_tokenizer"),
                                                   "pretokenizers"), 0);
    json_object_set_new(split, "pattern", json_pack("{ss}", "Regex", "(?i:'s|[a-"));
    expect_variant_error(root, KVLM_ERR_FORMAT, "pre_tokenizer.pretokenizers[0]: invalid pattern",
                         "missing terminating ]");
    json_object_set_new(split, "behavior", json_string("Removed"));
    expect_variant_error(root, KVLM_ERR_UNSUPPORTED, "behavior Removed", NULL);
    json_decref(root);

    /* merges naming tokens that are not in the vocabulary */
    root = load_json_file(FIX "llama2/tokenizer.json");
    json_t *merges = json_object_get(json_object_get(root, "model"), "merges");
    json_array_append_new(merges, json_string("zz\xE2\x96\x81 q"));
    expect_variant_error(root, KVLM_ERR_FORMAT, "model.merges[480]: merge names token 'zz\\xE2\\x96\\x81'",
                         NULL);
    json_array_remove(merges, json_array_size(merges) - 1);
    /* a missing byte token under byte fallback */
    json_t *vocab = json_object_get(json_object_get(root, "model"), "vocab");
    json_object_del(vocab, "<0x80>");
    expect_variant_error(root, KVLM_ERR_FORMAT, "no byte token <0x80>", "byte fallback");
    json_object_set_new(vocab, "<0x80>", json_integer(3 + 0x80));
    /* normalizers and decoders that would change ids or text silently */
    json_object_set_new(root, "normalizer", json_pack("{ss}", "type", "NFKC"));
    expect_variant_error(root, KVLM_ERR_UNSUPPORTED, "normalizer NFKC", NULL);
    json_object_set_new(root, "normalizer", json_pack("{ssss}", "type", "Prepend", "prepend", "_"));
    expect_variant_error(root, KVLM_ERR_UNSUPPORTED, "normalizer Prepend with these arguments", NULL);
    json_object_set_new(root, "normalizer", json_null());
    json_object_set_new(root, "decoder", json_pack("{ss}", "type", "WordPiece"));
    expect_variant_error(root, KVLM_ERR_UNSUPPORTED, "decoder WordPiece", NULL);
    json_object_set_new(root, "decoder", json_null());
    /* no byte fallback and no unknown token */
    json_object_set_new(json_object_get(root, "model"), "byte_fallback", json_false());
    json_object_set_new(json_object_get(root, "model"), "unk_token", json_null());
    expect_variant_error(root, KVLM_ERR_FORMAT, "neither byte fallback nor an unknown token", NULL);
    json_object_set_new(json_object_get(root, "model"), "unk_token", json_string("<nope>"));
    expect_variant_error(root, KVLM_ERR_FORMAT, "model.unk_token '<nope>'", NULL);
    json_decref(root);

    /* a template naming an id that is not a token */
    root = load_json_file(FIX "llama2/tokenizer.json");
    json_t *st = json_object_get(json_object_get(json_object_get(root, "post_processor"),
                                                 "special_tokens"), "<s>");
    json_object_set_new(st, "ids", json_pack("[i]", 999999));
    expect_variant_error(root, KVLM_ERR_FORMAT, "post_processor names id 999999", NULL);
    json_decref(root);
}

static void expect_gguf_error(const gguf_arrays *g, int code, const char *has) {
    kvlm_error err = {0};
    kvlm_tokenizer *t = gguf_build(g, &err);
    if (t || err.code != code || !strstr(err.msg, has))
        print_error("got code %d '%s', want %d with '%s'\n", err.code, err.msg, code, has);
    assert_null(t);
    assert_int_equal(err.code, code);
    assert_non_null(strstr(err.msg, "GGUF vocabulary"));
}

static void test_malformed_gguf(void **state) {
    (void)state;
    gguf_arrays g;
    gguf_load(&g, FIX "gguf_llama.json");
    gguf_arrays bad = g;
    bad.model = "bert";
    expect_gguf_error(&bad, KVLM_ERR_UNSUPPORTED, "tokenizer.ggml.model 'bert'");
    bad = g;
    bad.scores = NULL;
    expect_gguf_error(&bad, KVLM_ERR_FORMAT, "needs tokenizer.ggml.scores");
    bad = g;
    bad.bos = g.n_tokens;
    expect_gguf_error(&bad, KVLM_ERR_FORMAT, "bos id");
    bad = g;
    bad.bos = -1;
    expect_gguf_error(&bad, KVLM_ERR_FORMAT, "add_bos is set but there is no bos id");
    bad = g;
    bad.n_tokens = 0;
    expect_gguf_error(&bad, KVLM_ERR_FORMAT, "0 tokens");
    int32_t type5 = g.types[5];
    g.types[5] = 9;
    expect_gguf_error(&g, KVLM_ERR_FORMAT, "token_type[5] = 9");
    g.types[5] = type5;
    float s7 = g.scores[300];
    g.scores[300] = NAN;
    expect_gguf_error(&g, KVLM_ERR_FORMAT, "scores[300] is not a finite number");
    g.scores[300] = s7;
    /* a byte token missing (renamed) */
    const char *b80 = g.tokens[3 + 0x80];
    g.tokens[3 + 0x80] = "<0x80!>";
    expect_gguf_error(&g, KVLM_ERR_FORMAT, "no byte token <0x80>");
    g.tokens[3 + 0x80] = b80;
    const char *t0 = g.tokens[0];
    g.tokens[0] = NULL;
    expect_gguf_error(&g, KVLM_ERR_ARG, "tokens[0] is NULL");
    g.tokens[0] = t0;
    kvlm_tokenizer *t = gguf_ok(&g);   /* all restored */
    kvlm_tokenizer_free(t);
    gguf_free(&g);

    gguf_load(&g, FIX "gguf_gpt2.json");
    bad = g;
    bad.pre = "deepseek-coder";
    expect_gguf_error(&bad, KVLM_ERR_UNSUPPORTED,
                      "tokenizer.ggml.pre 'deepseek-coder' is not supported (supported: gpt-2, llama-bpe, "
                      "qwen2, qwen35, starcoder, falcon, default, tekken, gpt2, phi-2");
    bad = g;
    bad.n_merges = 0;
    expect_gguf_error(&bad, KVLM_ERR_FORMAT, "needs tokenizer.ggml.merges");
    const char *m0 = g.merges[0];
    g.merges[0] = "zzz q";
    expect_gguf_error(&g, KVLM_ERR_FORMAT, "merges[0]: merge names token 'zzz'");
    g.merges[0] = "ab";
    expect_gguf_error(&g, KVLM_ERR_FORMAT, "merges[0]: expected two tokens");
    g.merges[0] = m0;
    const char *tk = g.tokens[10];
    g.tokens[10] = "\xff";
    expect_gguf_error(&g, KVLM_ERR_FORMAT, "tokens[10] '\\xFF' is not valid UTF-8");
    g.tokens[10] = tk;
    /* GPT-2's own pattern when pre is absent: still every byte back */
    g.pre = NULL;
    t = gguf_ok(&g);
    const char *s = "Hello world's 12345 \xff\xfe\n\n";
    int32_t *ids;
    size_t n;
    encode_ok(t, s, strlen(s), 0, &ids, &n);
    char *text;
    size_t len;
    kvlm_error err;
    assert_int_equal(kvlm_tokenizer_decode(t, ids, n, &text, &len, &err), 0);
    assert_int_equal(len, strlen(s));
    assert_memory_equal(text, s, len);
    free(text);
    free(ids);
    kvlm_tokenizer_free(t);
    gguf_free(&g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llama3_json),
        cmocka_unit_test(test_qwen2_json),
        cmocka_unit_test(test_llama2_json),
        cmocka_unit_test(test_gguf_llama),
        cmocka_unit_test(test_gguf_gpt2_llama3),
        cmocka_unit_test(test_gguf_gpt2_qwen2),
        cmocka_unit_test(test_llama2_metaspace),
        cmocka_unit_test(test_tokenizer_config),
        cmocka_unit_test(test_empty_matches),
        cmocka_unit_test(test_merge_one_at_a_time),
        cmocka_unit_test(test_malformed_json),
        cmocka_unit_test(test_malformed_gguf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
