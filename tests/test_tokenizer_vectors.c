/*
 * llama.cpp's own tokenizer test vectors against kvlm: the GGUF
 * vocabularies ggml-vocab-*.gguf of llama.cpp's models/ directory with
 * their .inp (texts separated by a marker line) and .out (ids, one line per
 * text) files, tests/fixtures/llama_vocab/ (README.md there: provenance,
 * checksums). The .gguf files are committed xz-compressed; the Makefile
 * decompresses them into <build>/tests/vocab/ before the tests run, and
 * this test finds them beside its own binary.
 *
 * As llama.cpp's test-tokenizer-0 does: each text encoded without adding
 * BOS/EOS and without matching special tokens in the text; every id must
 * match. That test only prints the detokenised text; here decoding the ids
 * must give the text back byte for byte (kvlm's decode is lossless for
 * these vocabularies: no clean-up of spaces). Per-vocabulary counts are
 * printed. Run from the repository root.
 */
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kvlm.h"

#define FIX "tests/fixtures/llama_vocab/"
#define SEP "\n__ggml_vocab_test__\n"

static char vocab_dir[4096];

typedef struct vcase {
    const char *text;
    size_t len;
    int32_t *ids;
    size_t n_ids;
} vcase;

/* Splits the .inp text at the marker and parses the .out lines (ids
 * separated by spaces). Returns the number of cases; both counts must agree. */
static size_t read_cases(char *inp, size_t inp_len, char *out, vcase **cases) {
    size_t cap = 64, n = 0;
    vcase *c = calloc(cap, sizeof *c);
    assert_non_null(c);
    size_t pos = 0, seplen = strlen(SEP);
    while (pos < inp_len) {
        char *next = memmem(inp + pos, inp_len - pos, SEP, seplen);
        size_t end = next ? (size_t)(next - inp) : inp_len;
        if (n == cap) c = realloc(c, (cap *= 2) * sizeof *c);
        assert_non_null(c);
        c[n].text = inp + pos;
        c[n].len = end - pos;
        n++;
        if (!next) break;
        pos = end + seplen;
    }
    size_t lines = 0;
    for (char *line = out; *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        assert_true(lines < n);
        vcase *v = &c[lines++];
        size_t ncap = strlen(line) / 2 + 1;
        v->ids = malloc(ncap * sizeof *v->ids);
        assert_non_null(v->ids);
        for (char *p = line; *p;) {
            if (*p == ' ') { p++; continue; }
            char *e;
            long id = strtol(p, &e, 10);
            assert_true(e > p && id >= 0);
            assert_true(v->n_ids < ncap);
            v->ids[v->n_ids++] = (int32_t)id;
            p = e;
        }
        if (!nl) break;
        line = nl + 1;
    }
    assert_int_equal(lines, n);
    *cases = c;
    return n;
}

static void show(const char *s, size_t n) {
    for (size_t i = 0; i < n && i < 60; i++)
        fprintf(stderr, (unsigned char)s[i] < 0x20 ? "\\x%02x" : "%c", (unsigned char)s[i]);
}

/* Checks one vocabulary (the file at path, or the decompressed one when
 * path is NULL); n_want: the number of texts its files hold. */
static void check_vocab_at(const char *name, const char *file, size_t n_want, int32_t bos, int32_t eos) {
    char path[4200], inp_path[256], out_path[256];
    if (file) snprintf(path, sizeof path, "%s", file);
    else snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf", vocab_dir, name);
    snprintf(inp_path, sizeof inp_path, FIX "ggml-vocab-%s.gguf.inp", name);
    snprintf(out_path, sizeof out_path, FIX "ggml-vocab-%s.gguf.out", name);
    kvlm_error err = {0};
    kvlm_tokenizer *t = kvlm_tokenizer_load(path, &err);
    if (!t) print_error("%s: %s (run through make test, which decompresses the vocabularies)\n", path, err.msg);
    assert_non_null(t);
    assert_int_equal(kvlm_tokenizer_bos_id(t), bos);
    assert_int_equal(kvlm_tokenizer_eos_id(t), eos);
    size_t inp_len, out_len;
    char *inp = th_read_file(inp_path, &inp_len), *out = th_read_file(out_path, &out_len);
    assert_non_null(inp);
    assert_non_null(out);
    vcase *c;
    size_t n = read_cases(inp, inp_len, out, &c);
    assert_int_equal(n, n_want);
    size_t ids_ok = 0, dec_ok = 0, n_tokens = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t *ids;
        size_t k;
        assert_int_equal(kvlm_tokenizer_encode_ex(t, c[i].text, c[i].len, 0, &ids, &k, &err), 0);
        n_tokens += k;
        size_t j = 0;
        while (j < k && j < c[i].n_ids && ids[j] == c[i].ids[j]) j++;
        if (j == k && j == c[i].n_ids) {
            ids_ok++;
        } else {
            fprintf(stderr, "%s: case %zu '", name, i);
            show(c[i].text, c[i].len);
            fprintf(stderr, "': ids differ at %zu (got %d, want %d; %zu vs %zu ids)\n", j, j < k ? ids[j] : -1,
                    j < c[i].n_ids ? c[i].ids[j] : -1, k, c[i].n_ids);
        }
        char *text;
        size_t tlen;
        assert_int_equal(kvlm_tokenizer_decode(t, c[i].ids, c[i].n_ids, &text, &tlen, &err), 0);
        if (tlen == c[i].len && memcmp(text, c[i].text, tlen) == 0) {
            dec_ok++;
        } else {
            fprintf(stderr, "%s: case %zu '", name, i);
            show(c[i].text, c[i].len);
            fprintf(stderr, "': decodes to '");
            show(text, tlen);
            fprintf(stderr, "'\n");
        }
        free(text);
        free(ids);
    }
    printf("llama.cpp vectors %-10s %zu/%zu ids exact, %zu/%zu decode to the text (%zu tokens)\n", name,
           ids_ok, n, dec_ok, n, n_tokens);
    assert_int_equal(ids_ok, n);
    assert_int_equal(dec_ok, n);
    for (size_t i = 0; i < n; i++) free(c[i].ids);
    free(c);
    free(inp);
    free(out);
    kvlm_tokenizer_free(t);
}

static void check_vocab(const char *name, size_t n_want, int32_t bos, int32_t eos) {
    check_vocab_at(name, NULL, n_want, bos, eos);
}

static void test_gpt2(void **state) {
    (void)state;
    check_vocab("gpt-2", 46, 50256, 50256);
}

static void test_llama_bpe(void **state) {
    (void)state;
    check_vocab("llama-bpe", 46, 128000, 128001);
}

static void test_llama_spm(void **state) {
    (void)state;
    check_vocab("llama-spm", 46, 1, 2);
}

static void test_qwen2(void **state) {
    (void)state;
    check_vocab("qwen2", 46, 151643, 151643);
}

/* llama.cpp's ggml-vocab-qwen35.gguf is its ggml-vocab-qwen2.gguf with
 * tokenizer.ggml.pre "qwen35" instead of "qwen2" and nothing else changed
 * (same vocabulary; combining marks stay inside words): made here from the
 * qwen2 file, then checked against the qwen35 vectors. */
static void test_qwen35(void **state) {
    (void)state;
    static const char from[] = "tokenizer.ggml.pre\x08\0\0\0\x05\0\0\0\0\0\0\0qwen2";
    static const char to[] = "tokenizer.ggml.pre\x08\0\0\0\x06\0\0\0\0\0\0\0qwen35";
    char src[4200], dst[4200];
    snprintf(src, sizeof src, "%s/ggml-vocab-qwen2.gguf", vocab_dir);
    size_t n;
    char *b = th_read_file(src, &n);
    assert_non_null(b);
    char *at = memmem(b, n, from, sizeof from - 1);
    assert_non_null(at);
    assert_null(memmem(at + 1, n - (size_t)(at + 1 - b), from, sizeof from - 1));
    char *c = malloc(n + 1);
    assert_non_null(c);
    size_t head = (size_t)(at - b);
    memcpy(c, b, head);
    memcpy(c + head, to, sizeof to - 1);
    memcpy(c + head + sizeof to - 1, at + sizeof from - 1, n - head - (sizeof from - 1));
    char *dir = th_tempdir();
    assert_non_null(dir);
    snprintf(dst, sizeof dst, "%s/ggml-vocab-qwen35.gguf", dir);
    assert_int_equal(th_write_file(dst, c, n + 1), 0);
    free(b);
    free(c);
    check_vocab_at("qwen35", dst, 50, 151643, 151643);
    th_rmtree(dir);
    free(dir);
}

/* pre "starcoder": digits alone, then GPT-2's pattern. */
static void test_starcoder(void **state) {
    (void)state;
    check_vocab("starcoder", 46, 0, 0);
}

/* pre "falcon": punctuation runs, GPT-2's pattern, digit triples. */
static void test_falcon(void **state) {
    (void)state;
    check_vocab("falcon", 46, 11, 11);
}

static kvlm_tokenizer *load_vocab(const char *name) {
    char path[4200];
    snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf", vocab_dir, name);
    kvlm_error err = {0};
    kvlm_tokenizer *t = kvlm_tokenizer_load(path, &err);
    if (!t) print_error("%s: %s\n", path, err.msg);
    assert_non_null(t);
    return t;
}

static size_t encode_n(const kvlm_tokenizer *t, const char *s, size_t len, int32_t *out, size_t cap) {
    int32_t *ids;
    size_t n;
    kvlm_error err;
    assert_int_equal(kvlm_tokenizer_encode_ex(t, s, len, KVLM_ENCODE_ADD_SPECIAL, &ids, &n, &err), 0);
    assert_true(n <= cap);
    memcpy(out, ids, n * sizeof *ids);
    free(ids);
    return n;
}

/* BOS as llama.cpp adds it: the SentencePiece file says add_bos_token;
 * the GPT-2 and Qwen2 files say nothing (no BOS), the Llama 3 file says
 * nothing either and gets llama.cpp's default for llama-bpe (BOS). No file
 * adds EOS. */
static void test_add_special(void **state) {
    (void)state;
    static const struct { const char *name; int32_t first; size_t n; } want[] = {
        {"gpt-2", 15496, 1}, {"qwen2", 9707, 1}, {"llama-bpe", 128000, 2}, {"llama-spm", 1, 2},
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        kvlm_tokenizer *t = load_vocab(want[k].name);
        int32_t ids[8];
        size_t n = encode_n(t, "Hello", 5, ids, 8);
        if (n != want[k].n || ids[0] != want[k].first)
            fail_msg("%s: 'Hello' with specials: %zu ids, first %d", want[k].name, n, ids[0]);
        assert_int_equal(kvlm_tokenizer_add_bos(t), want[k].n == 2);
        kvlm_tokenizer_free(t);
    }
}

/* StarCoder's vocabulary has no token for the bytes 0xC0, 0xC1 and
 * 0xF5..0xFF (never in UTF-8): such a byte is left out, as llama.cpp
 * does, and nothing merges across it. */
static void test_missing_byte(void **state) {
    (void)state;
    kvlm_tokenizer *t = load_vocab("starcoder");
    assert_int_equal(kvlm_tokenizer_token_id(t, "\xC0", 1), -1);
    int32_t a[16], b[16];
    size_t na = encode_n(t, "abc\xC0\xC0" "def\xFF", 9, a, 16);
    size_t nb = encode_n(t, "abc", 3, b, 16);
    nb += encode_n(t, "def", 3, b + nb, 16 - nb);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na * sizeof *a);
    kvlm_tokenizer_free(t);
}

int main(int argc, char **argv) {
    (void)argc;
    char self[4096];
    snprintf(self, sizeof self, "%s", argv[0]);
    snprintf(vocab_dir, sizeof vocab_dir, "%s/vocab", dirname(self));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpt2),
        cmocka_unit_test(test_llama_bpe),
        cmocka_unit_test(test_llama_spm),
        cmocka_unit_test(test_qwen2),
        cmocka_unit_test(test_qwen35),
        cmocka_unit_test(test_starcoder),
        cmocka_unit_test(test_falcon),
        cmocka_unit_test(test_add_special),
        cmocka_unit_test(test_missing_byte),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
