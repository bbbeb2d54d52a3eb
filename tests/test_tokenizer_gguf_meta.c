/*
 * GGUF tokenizer metadata, on small vocabulary-only GGUF files written at
 * test time: every tokenizer.ggml.pre name llama.cpp accepts and kvlm
 * supports picks the right split (each split has its own signature on six
 * probe texts, and the name -> split list here is restated from llama.cpp's
 * loader, independently of tokenizer/gguf_pre.c), other names are refused
 * naming the value and the supported ones; add_bos_token / add_eos_token
 * (and the defaults when absent); the end-of-turn and end-of-message ids
 * join the model's end-of-sequence ids; special ids outside the vocabulary
 * are refused naming the key.
 *
 * The vocabulary: ids 0..3 the control tokens <|bos|>, <|eos|>, <|eot|>,
 * <|eom|>; 4..259 the 256 bytes in GPT-2's alphabet; then the merges
 * "3 4", "1 2", "! a", "a B", "Ġ 1", "a Ì" (a and the first byte of
 * U+0301, a combining mark) and their tokens 260..265.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kvlm.h"

#define TINY "tests/fixtures/gpt2/hf_f32"   /* a GPT-2 model of 200 tokens */

enum { BOS = 0, EOS = 1, EOT = 2, EOM = 3, BYTE0 = 4, T34 = 260, T12, TBA, TAB, TSP1, TAM, N_TOKENS };

static char *tmpdir;
static int file_no;

/* ----------------------------------------------------------- GGUF writer */

typedef struct gb {
    unsigned char *b;
    size_t n, cap;
    uint64_t n_kv;
} gb;

static void put(gb *g, const void *p, size_t n) {
    if (g->n + n > g->cap) {
        g->cap = (g->n + n) * 2 + 64;
        g->b = realloc(g->b, g->cap);
        assert_non_null(g->b);
    }
    memcpy(g->b + g->n, p, n);
    g->n += n;
}
static void u32(gb *g, uint32_t v) { put(g, &v, 4); }   /* little-endian hosts */
static void u64(gb *g, uint64_t v) { put(g, &v, 8); }
static void str(gb *g, const char *s) { u64(g, strlen(s)); put(g, s, strlen(s)); }
static void key(gb *g, const char *k, uint32_t type) { str(g, k); u32(g, type); g->n_kv++; }
static void kv_str(gb *g, const char *k, const char *v) { key(g, k, 8); str(g, v); }
static void kv_u32(gb *g, const char *k, uint32_t v) { key(g, k, 4); u32(g, v); }
static void kv_bool(gb *g, const char *k, int v) { key(g, k, 7); unsigned char b = (unsigned char)v; put(g, &b, 1); }

/* GPT-2's byte-to-unicode alphabet: the character of byte b, as UTF-8. */
static void byte_char(int b, char out[4]) {
    int cp, printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    if (printable) {
        cp = b;
    } else {
        int k = 0;
        for (int c = 0; c < b; c++)
            if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF))) k++;
        cp = 256 + k;
    }
    if (cp < 0x80) { out[0] = (char)cp; out[1] = 0; }
    else { out[0] = (char)(0xC0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3F)); out[2] = 0; }
}

typedef struct meta {
    const char *pre;          /* NULL: no key */
    int add_bos, add_eos;     /* -1: no key */
    int64_t bos, eos, eot, eom, unk, pad;   /* -1: no key */
} meta;

static const meta BASE = {"gpt-2", -1, -1, BOS, EOS, EOT, EOM, -1, -1};

/* Writes the vocabulary with m's metadata; returns the path. */
static const char *write_vocab(const meta *m) {
    static char path[600];
    gb g = {0};
    put(&g, "GGUF", 4);
    u32(&g, 3);
    u64(&g, 0);   /* tensors */
    size_t n_kv_at = g.n;
    u64(&g, 0);   /* patched below */
    kv_str(&g, "general.architecture", "gpt2");
    kv_str(&g, "tokenizer.ggml.model", "gpt2");
    if (m->pre) kv_str(&g, "tokenizer.ggml.pre", m->pre);
    static const char *const specials[4] = {"<|bos|>", "<|eos|>", "<|eot|>", "<|eom|>"};
    static const char *const merged[6] = {"34", "12", "!a", "aB", "\xC4\xA0" "1", "a\xC3\x8C"};
    key(&g, "tokenizer.ggml.tokens", 9);
    u32(&g, 8);
    u64(&g, N_TOKENS);
    for (int i = 0; i < 4; i++) str(&g, specials[i]);
    for (int b = 0; b < 256; b++) {
        char c[4];
        byte_char(b, c);
        str(&g, c);
    }
    for (int i = 0; i < 6; i++) str(&g, merged[i]);
    key(&g, "tokenizer.ggml.token_type", 9);
    u32(&g, 5);
    u64(&g, N_TOKENS);
    for (int i = 0; i < N_TOKENS; i++) u32(&g, i < 4 ? 3 : 1);
    key(&g, "tokenizer.ggml.merges", 9);
    u32(&g, 8);
    u64(&g, 6);
    static const char *const merges[6] = {"3 4", "1 2", "! a", "a B", "\xC4\xA0 1", "a \xC3\x8C"};
    for (int i = 0; i < 6; i++) str(&g, merges[i]);
    static const char *const id_keys[6] = {"bos", "eos", "eot", "eom", "unknown", "padding"};
    const int64_t ids[6] = {m->bos, m->eos, m->eot, m->eom, m->unk, m->pad};
    for (int k = 0; k < 6; k++) {
        char name[64];
        snprintf(name, sizeof name, "tokenizer.ggml.%s_token_id", id_keys[k]);
        if (ids[k] >= 0) kv_u32(&g, name, (uint32_t)ids[k]);
    }
    if (m->add_bos >= 0) kv_bool(&g, "tokenizer.ggml.add_bos_token", m->add_bos);
    if (m->add_eos >= 0) kv_bool(&g, "tokenizer.ggml.add_eos_token", m->add_eos);
    memcpy(g.b + n_kv_at, &g.n_kv, 8);
    while (g.n % 32) put(&g, "", 1);
    snprintf(path, sizeof path, "%s/v%d.gguf", tmpdir, file_no++);
    assert_int_equal(th_write_file(path, g.b, g.n), 0);
    free(g.b);
    return path;
}

static kvlm_tokenizer *load_meta(const meta *m) {
    const char *path = write_vocab(m);
    kvlm_error err = {0};
    kvlm_tokenizer *t = kvlm_tokenizer_load(path, &err);
    if (!t) print_error("pre %s: %s\n", m->pre ? m->pre : "(none)", err.msg);
    assert_non_null(t);
    return t;
}

static void expect_load_error(const meta *m, int code, const char *has) {
    kvlm_error err = {0};
    kvlm_tokenizer *t = kvlm_tokenizer_load(write_vocab(m), &err);
    if (t || err.code != code || !strstr(err.msg, has))
        print_error("got code %d '%s', want %d with '%s'\n", err.code, err.msg, code, has);
    assert_null(t);
    assert_int_equal(err.code, code);
    assert_non_null(strstr(err.msg, has));
}

/* ------------------------------------------------------------ the splits */

#define B(c) (BYTE0 + (c))
enum { N_PROBES = 6, MAX_IDS = 4 };
static const char *const probes[N_PROBES] = {"12", "1234", "!a", "aB", " 1", "a\xCC\x81"};
#define SPLIT_MARK {B('a'), B(0xCC), B(0x81), -1}   /* the mark is not part of the word */
#define JOIN_MARK {TAM, B(0x81), -1}                 /* it is */

typedef struct signature {
    const char *split;
    int32_t ids[N_PROBES][MAX_IDS + 1];   /* -1 ends */
} signature;

/* What each split makes of the probes (from its patterns; see the file
 * comment of tokenizer/gguf_pre.c). */
static const signature sigs[] = {
    {"gpt2", {{T12, -1}, {T12, T34, -1}, {B('!'), B('a'), -1}, {TAB, -1}, {TSP1, -1}, SPLIT_MARK}},
    {"llama3", {{T12, -1}, {T12, B('3'), B('4'), -1}, {TBA, -1}, {TAB, -1}, {B(' '), B('1'), -1}, SPLIT_MARK}},
    {"qwen2", {{B('1'), B('2'), -1}, {B('1'), B('2'), B('3'), B('4'), -1}, {TBA, -1}, {TAB, -1},
               {B(' '), B('1'), -1}, SPLIT_MARK}},
    {"qwen35", {{B('1'), B('2'), -1}, {B('1'), B('2'), B('3'), B('4'), -1}, {TBA, -1}, {TAB, -1},
                {B(' '), B('1'), -1}, JOIN_MARK}},
    {"digits", {{B('1'), B('2'), -1}, {B('1'), B('2'), B('3'), B('4'), -1}, {B('!'), B('a'), -1}, {TAB, -1},
                {B(' '), B('1'), -1}, SPLIT_MARK}},
    {"falcon", {{T12, -1}, {T12, B('3'), B('4'), -1}, {B('!'), B('a'), -1}, {TAB, -1}, {TSP1, -1}, SPLIT_MARK}},
    {"default", {{T12, -1}, {T12, B('3'), B('4'), -1}, {B('!'), B('a'), -1}, {TAB, -1}, {B(' '), B('1'), -1},
                 SPLIT_MARK}},
    {"tekken", {{B('1'), B('2'), -1}, {B('1'), B('2'), B('3'), B('4'), -1}, {TBA, -1}, {B('a'), B('B'), -1},
                {B(' '), B('1'), -1}, JOIN_MARK}},
    {"gpt4o", {{T12, -1}, {T12, B('3'), B('4'), -1}, {TBA, -1}, {B('a'), B('B'), -1}, {B(' '), B('1'), -1},
               JOIN_MARK}},
};

/* llama.cpp's loader (src/llama-vocab.cpp): names whose regex list is one
 * kvlm implements; add_bos: its default when the file does not say. */
static const struct { const char *name, *split; int add_bos; } names[] = {
    {"gpt-2", "gpt2", 0}, {"phi-2", "gpt2", 0}, {"mpt", "gpt2", 0}, {"olmo", "gpt2", 0},
    {"jais", "gpt2", 0}, {"trillion", "gpt2", 0}, {"granite-docling", "gpt2", 0}, {"exaone4", "gpt2", 0},
    {"gigachat", "gpt2", 0}, {"a.x-4.0", "gpt2", 0}, {"mellum", "gpt2", 0}, {"modern-bert", "gpt2", 0},
    {"roberta-bpe", "gpt2", 0}, {"jina-es", "gpt2", 0}, {"jina-de", "gpt2", 0}, {"jina-v2-es", "gpt2", 0},
    {"jina-v2-de", "gpt2", 0}, {"jina-v1-en", "gpt2", 0}, {"jina-v2-code", "gpt2", 0},
    {"gpt2", "gpt2", 0},   /* kvlm's own converter's name */
    {NULL, "gpt2", 0},     /* no key: GPT-2's pattern */
    {"llama-bpe", "llama3", 1}, {"llama3", "llama3", 1}, {"llama-v3", "llama3", 1}, {"falcon3", "llama3", 1},
    {"falcon-h1", "llama3", 1}, {"pixtral", "llama3", 1}, {"midm-2.0", "llama3", 1}, {"lfm2", "llama3", 1},
    {"jina-v5-nano", "llama3", 1}, {"dbrx", "llama3", 0}, {"smaug-bpe", "llama3", 0},
    {"chatglm-bpe", "llama3", 0}, {"glm4", "llama3", 0},
    {"qwen2", "qwen2", 0}, {"deepseek-r1-qwen", "qwen2", 0}, {"kormo", "qwen2", 0}, {"f2llmv2", "qwen2", 0},
    {"megrez", "qwen2", 0}, {"stablelm2", "qwen2", 0}, {"hunyuan", "qwen2", 0}, {"solar-open", "qwen2", 0},
    {"grok-2", "qwen2", 0}, {"qwen35", "qwen35", 0},
    {"starcoder", "digits", 0}, {"smollm", "digits", 0}, {"refact", "digits", 0}, {"command-r", "digits", 0},
    {"codeshell", "digits", 0}, {"exaone", "digits", 0}, {"minerva-7b", "digits", 0}, {"mellum2", "digits", 0},
    {"falcon", "falcon", 0}, {"default", "default", 0}, {"tekken", "tekken", 1}, {"gpt-4o", "gpt4o", 0},
};

static const signature *sig_of(const char *split) {
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        if (!strcmp(sigs[i].split, split)) return &sigs[i];
    fail_msg("no signature %s", split);
    return NULL;
}

static void test_pre_names(void **state) {
    (void)state;
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        meta m = BASE;
        m.pre = names[k].name;
        kvlm_tokenizer *t = load_meta(&m);
        const signature *s = sig_of(names[k].split);
        for (int p = 0; p < N_PROBES; p++) {
            int32_t *ids;
            size_t n;
            kvlm_error err;
            assert_int_equal(kvlm_tokenizer_encode_ex(t, probes[p], strlen(probes[p]), 0, &ids, &n, &err), 0);
            size_t want = 0;
            while (s->ids[p][want] >= 0) want++;
            if (n != want || memcmp(ids, s->ids[p], n * sizeof *ids) != 0) {
                fprintf(stderr, "pre %s (split %s), '%s':", names[k].name ? names[k].name : "(none)",
                        s->split, probes[p]);
                for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
                fprintf(stderr, "\n");
                fail();
            }
            free(ids);
        }
        assert_int_equal(kvlm_tokenizer_add_bos(t), names[k].add_bos);
        kvlm_tokenizer_free(t);
    }
    printf("%zu tokenizer.ggml.pre names checked\n", sizeof names / sizeof names[0]);
}

static void test_unsupported_pre(void **state) {
    (void)state;
    static const char *const unsupported[] = {"deepseek-llm", "deepseek-coder", "deepseek-v3", "seed-coder",
                                              "llama4", "bloom", "viking", "chameleon", "kimi-k2",
                                              "GPT-2", ""};
    for (size_t k = 0; k < sizeof unsupported / sizeof unsupported[0]; k++) {
        meta m = BASE;
        m.pre = unsupported[k];
        char want[200];
        snprintf(want, sizeof want, "tokenizer.ggml.pre '%s' is not supported (supported: gpt-2, llama-bpe, "
                 "qwen2, qwen35, starcoder, falcon, default, tekken, ", unsupported[k]);
        expect_load_error(&m, KVLM_ERR_UNSUPPORTED, want);
    }
}

/* ------------------------------------------------------- the other keys */

static void expect_encode(const kvlm_tokenizer *t, const char *s, const int32_t *want, size_t n_want) {
    int32_t *ids;
    size_t n;
    kvlm_error err;
    assert_int_equal(kvlm_tokenizer_encode_ex(t, s, strlen(s), KVLM_ENCODE_ADD_SPECIAL, &ids, &n, &err), 0);
    assert_int_equal(n, n_want);
    assert_memory_equal(ids, want, n * sizeof *ids);
    free(ids);
}

static void test_add_bos_eos(void **state) {
    (void)state;
    meta m = BASE;
    m.add_bos = 1;
    m.add_eos = 1;
    kvlm_tokenizer *t = load_meta(&m);
    expect_encode(t, "12", (int32_t[]){BOS, T12, EOS}, 3);
    kvlm_tokenizer_free(t);
    m.add_bos = 0;
    t = load_meta(&m);
    expect_encode(t, "12", (int32_t[]){T12, EOS}, 2);
    kvlm_tokenizer_free(t);
    /* llama-bpe adds BOS unless the file says not to */
    m = BASE;
    m.pre = "llama-bpe";
    t = load_meta(&m);
    expect_encode(t, "12", (int32_t[]){BOS, T12}, 2);
    kvlm_tokenizer_free(t);
    m.add_bos = 0;
    t = load_meta(&m);
    expect_encode(t, "12", (int32_t[]){T12}, 1);
    kvlm_tokenizer_free(t);
    /* asked for but missing */
    m = BASE;
    m.add_eos = 1;
    m.eos = -1;
    expect_load_error(&m, KVLM_ERR_FORMAT, "add_eos is set but there is no eos id");
    m = BASE;
    m.add_bos = 1;
    m.bos = -1;
    expect_load_error(&m, KVLM_ERR_FORMAT, "add_bos is set but there is no bos id");
}

static void test_end_ids(void **state) {
    (void)state;
    kvlm_error err;
    kvlm_model *model = kvlm_model_load(TINY, NULL, &err);
    if (!model) fail_msg("%s: %s", TINY, err.msg);
    assert_int_equal(kvlm_model_config(model)->vocab_size, 200);
    const int32_t model_eos = kvlm_model_config(model)->eos_id;
    meta m = BASE;
    kvlm_tokenizer *t = load_meta(&m);
    int32_t ids[8];
    int n = kvlm_eos_ids(model, t, ids, 8);
    int32_t want[4] = {model_eos, EOS, EOT, EOM};
    int n_want = model_eos == EOS ? 3 : 4;
    if (model_eos == EOS) memmove(want + 1, want + 2, 2 * sizeof *want);
    assert_int_equal(n, n_want);
    assert_memory_equal(ids, want, (size_t)n * sizeof *ids);
    kvlm_tokenizer_free(t);
    /* without eot/eom only the eos */
    m.eot = m.eom = -1;
    t = load_meta(&m);
    assert_int_equal(kvlm_eos_ids(model, t, ids, 8), model_eos == EOS ? 1 : 2);
    kvlm_tokenizer_free(t);
    kvlm_model_free(model);
}

static void test_id_ranges(void **state) {
    (void)state;
    static const char *const keys[6] = {"bos", "eos", "eot", "eom", "unknown", "padding"};
    for (int k = 0; k < 6; k++) {
        meta m = BASE;
        int64_t *f[6] = {&m.bos, &m.eos, &m.eot, &m.eom, &m.unk, &m.pad};
        *f[k] = N_TOKENS;   /* one past the last token */
        char want[80];
        snprintf(want, sizeof want, "tokenizer.ggml.%s_token_id", keys[k]);
        expect_load_error(&m, KVLM_ERR_FORMAT, want);
        *f[k] = N_TOKENS - 1;   /* the last token: fine */
        kvlm_tokenizer *t = load_meta(&m);
        kvlm_tokenizer_free(t);
    }
}

static int setup(void **state) {
    (void)state;
    tmpdir = th_tempdir();
    return tmpdir ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    th_rmtree(tmpdir);
    free(tmpdir);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pre_names),
        cmocka_unit_test(test_unsupported_pre),
        cmocka_unit_test(test_add_bos_eos),
        cmocka_unit_test(test_end_ids),
        cmocka_unit_test(test_id_ranges),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
