/*
 * Tokenizer file formats: the same ids from tokenizer.json (string and pair
 * merges), vocab.json + merges.txt and encoder.json + vocab.bpe; which file
 * a directory load picks; added tokens and ignore_merges; GPT-2's merge
 * rounds; and malformed or missing files, which must fail with a message
 * naming the file and what is wrong (never a crash: run under ASan too).
 * Run from the repository root.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tokenizer_testlib.h"

/* ---------------------------------------------------------- file formats */

static void write_tokenizer_json(const char *path, int pairs, int extra_added, int extra_vocab) {
    json_error_t je;
    json_t *vocab = json_load_file(MODEL "/encoder.json", 0, &je);
    assert_non_null(vocab);
    size_t len;
    char *bpe = th_read_file(MODEL "/vocab.bpe", &len);
    assert_non_null(bpe);
    json_t *merges = json_array();
    char *save = NULL;
    for (char *line = strtok_r(bpe, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (!strncmp(line, "#version", 8)) continue;
        if (!pairs) {
            json_array_append_new(merges, json_string(line));
            continue;
        }
        char *sp = strchr(line, ' ');
        *sp = 0;
        json_array_append_new(merges, json_pack("[ss]", line, sp + 1));
    }
    free(bpe);
    json_t *added = json_array();
    json_array_append_new(added, json_pack("{sisssbsbsbsbsb}", "id", 50256, "content", "<|endoftext|>",
                                           "single_word", 0, "lstrip", 0, "rstrip", 0,
                                           "normalized", 1, "special", 1));
    if (extra_added) {
        json_array_append_new(added, json_pack("{sisssb}", "id", 50257, "content", "<pad>", "special", 0));
        json_array_append_new(added, json_pack("{sisssb}", "id", 50258, "content", "<|im_start|>",
                                               "special", 1));
    }
    if (extra_vocab) json_object_set_new(vocab, "zzzzqqq", json_integer(50259));
    json_t *model = json_pack("{sssnsnssssso}", "type", "BPE", "dropout", "unk_token",
                              "continuing_subword_prefix", "", "end_of_word_suffix", "",
                              "fuse_unk", json_false());
    json_object_set_new(model, "vocab", vocab);
    json_object_set_new(model, "merges", merges);
    if (extra_vocab) json_object_set_new(model, "ignore_merges", json_true());
    json_t *root = json_pack("{sssosnsn}", "version", "1.0", "added_tokens", added, "normalizer",
                             "post_processor");
    json_object_set_new(root, "pre_tokenizer",
                        json_pack("{sssbsbsb}", "type", "ByteLevel", "add_prefix_space", 0,
                                  "trim_offsets", 1, "use_regex", 1));
    json_object_set_new(root, "model", model);
    assert_int_equal(json_dump_file(root, path, JSON_COMPACT), 0);
    json_decref(root);
}

static void test_formats_same_ids(void **state) {
    (void)state;
    char *dir = th_tempdir();
    assert_non_null(dir);
    char *d1 = path_in(dir, "hf"), *d2 = path_in(dir, "tj_strings"), *d3 = path_in(dir, "tj_pairs");
    mkdir(d1, 0755);
    mkdir(d2, 0755);
    mkdir(d3, 0755);
    copy_file(MODEL "/encoder.json", d1, "vocab.json");
    copy_file(MODEL "/vocab.bpe", d1, "merges.txt");
    char *tj2 = path_in(d2, "tokenizer.json"), *tj3 = path_in(d3, "tokenizer.json");
    write_tokenizer_json(tj2, 0, 0, 0);
    write_tokenizer_json(tj3, 1, 0, 0);
    const char *paths[] = {d1, d2, d3, tj2, tj3, MODEL "/encoder.json", MODEL "/vocab.bpe"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        kvlm_tokenizer *t = load_ok(paths[i]);
        assert_int_equal(kvlm_tokenizer_vocab_size(t), 50257);
        assert_int_equal(run_fixture(t, paths[i]), 0);
        kvlm_tokenizer_free(t);
    }
    char *vj = path_in(d1, "vocab.json");
    kvlm_tokenizer *t = load_ok(vj);   /* a vocab file finds merges.txt beside it */
    assert_non_null(strstr(kvlm_tokenizer_source(t), "merges.txt"));
    kvlm_tokenizer_free(t);
    free(vj);
    free(tj2);
    free(tj3);
    free(d1);
    free(d2);
    free(d3);
    th_rmtree(dir);
    free(dir);
}

static void test_directory_priority(void **state) {
    (void)state;
    char *dir = th_tempdir();
    copy_file(MODEL "/encoder.json", dir, "encoder.json");
    copy_file(MODEL "/vocab.bpe", dir, "vocab.bpe");
    copy_file(MODEL "/encoder.json", dir, "vocab.json");
    copy_file(MODEL "/vocab.bpe", dir, "merges.txt");
    char *tj = path_in(dir, "tokenizer.json");
    write_tokenizer_json(tj, 1, 1, 0);
    kvlm_tokenizer *t = load_ok(dir);
    assert_non_null(strstr(kvlm_tokenizer_source(t), "tokenizer.json"));
    assert_int_equal(kvlm_tokenizer_vocab_size(t), 50259);
    kvlm_tokenizer_free(t);
    remove(tj);
    t = load_ok(dir);
    assert_non_null(strstr(kvlm_tokenizer_source(t), "vocab.json"));
    kvlm_tokenizer_free(t);
    char *vj = path_in(dir, "vocab.json");
    remove(vj);
    t = load_ok(dir);
    assert_non_null(strstr(kvlm_tokenizer_source(t), "encoder.json"));
    kvlm_tokenizer_free(t);
    free(vj);
    free(tj);
    th_rmtree(dir);
    free(dir);
}

static void test_added_tokens(void **state) {
    (void)state;
    char *dir = th_tempdir();
    char *tj = path_in(dir, "tokenizer.json");
    write_tokenizer_json(tj, 0, 1, 0);
    kvlm_tokenizer *t = load_ok(tj);
    /* A non-special added token is always one token; a special one only
     * when allowed. */
    expect_ids(t, "a<pad>b", 0, (int32_t[]){64, 50257, 65}, 3);
    expect_ids(t, "<|im_start|>", 1, (int32_t[]){50258}, 1);
    int32_t *ids;
    size_t n;
    encode_ok(t, "<|im_start|>", 12, 0, &ids, &n);
    assert_true(n > 1);
    for (size_t i = 0; i < n; i++) assert_true(ids[i] < 50256);
    free(ids);
    assert_true(kvlm_tokenizer_is_special(t, 50258));
    assert_false(kvlm_tokenizer_is_special(t, 50257));
    kvlm_tokenizer_free(t);
    /* ignore_merges: a word in the vocabulary is taken whole. */
    write_tokenizer_json(tj, 0, 0, 1);
    t = load_ok(tj);
    expect_ids(t, "zzzzqqq", 0, (int32_t[]){50259}, 1);
    expect_ids(t, "Hello world", 0, (int32_t[]){15496, 995}, 2);
    kvlm_tokenizer_free(t);
    free(tj);
    th_rmtree(dir);
    free(dir);
}

/* A merges file where a round matters: "aa a" outranks "a a". GPT-2
 * merges every "a a" left to right first, so "aaaa" is [aa, aa]; merging
 * one pair at a time would give [aaa, a]. Checked on the short (scan) and
 * long (heap) paths. */
static void test_merge_rounds(void **state) {
    (void)state;
    char *dir = th_tempdir();
    copy_file(MODEL "/encoder.json", dir, "encoder.json");
    char *bpe = path_in(dir, "vocab.bpe");
    const char *merges = "#version: 0.2\naa a\na a\n";
    assert_int_equal(th_write_file(bpe, merges, strlen(merges)), 0);
    kvlm_tokenizer *t = load_ok(dir);
    int32_t aa = kvlm_tokenizer_token_id(t, "aa", 2);
    assert_true(aa >= 0);
    expect_ids(t, "aaaa", 0, (int32_t[]){aa, aa}, 2);
    char long_a[201];
    memset(long_a, 'a', 200);
    long_a[200] = 0;
    int32_t *ids;
    size_t n;
    encode_ok(t, long_a, 200, 0, &ids, &n);
    assert_int_equal(n, 100);
    for (size_t i = 0; i < n; i++) assert_int_equal(ids[i], aa);
    free(ids);
    kvlm_tokenizer_free(t);
    free(bpe);
    th_rmtree(dir);
    free(dir);
}

/* -------------------------------------------------------- malformed files */

static void expect_load_error(const char *path, int code, const char *has1, const char *has2) {
    kvlm_error err = {0};
    kvlm_tokenizer *t = kvlm_tokenizer_load(path, &err);
    if (t || err.code != code || (has1 && !strstr(err.msg, has1)) || (has2 && !strstr(err.msg, has2)))
        print_error("load %s: code %d, message '%s' (want code %d with '%s' and '%s')\n", path,
                    err.code, err.msg, code, has1 ? has1 : "", has2 ? has2 : "");
    assert_null(t);
    assert_int_equal(err.code, code);
    if (has1) assert_non_null(strstr(err.msg, has1));
    if (has2) assert_non_null(strstr(err.msg, has2));
}

/* Writes vocab (JSON text) and merges (text) into dir as encoder.json and
 * vocab.bpe, or copies the real ones when NULL. */
static void write_pair(const char *dir, const char *vocab, size_t vlen, const char *merges,
                       size_t mlen) {
    char *v = path_in(dir, "encoder.json"), *m = path_in(dir, "vocab.bpe");
    if (vocab) assert_int_equal(th_write_file(v, vocab, vlen), 0);
    else copy_file(MODEL "/encoder.json", dir, "encoder.json");
    if (merges) assert_int_equal(th_write_file(m, merges, mlen), 0);
    else copy_file(MODEL "/vocab.bpe", dir, "vocab.bpe");
    free(v);
    free(m);
}

static void test_malformed_vocab(void **state) {
    (void)state;
    char *dir = th_tempdir();
    const char *ver = "#version: 0.2\n";
    struct { const char *json; const char *has; } cases[] = {
        {"{\"a\": 0,,}", "invalid JSON"},
        {"", "invalid JSON"},
        {"[1, 2]", "expected a JSON object"},
        {"{}", "non-empty object"},
        {"{\"a\": 0, \"b\": 0}", "duplicate id 0"},
        {"{\"a\": 0, \"a\": 1}", "duplicate"},
        {"{\"a\": \"x\"}", "not an integer"},
        {"{\"a\": 1.5}", "not an integer"},
        {"{\"a\": -1}", "out of range"},
        {"{\"a\": 99999999999}", "out of range"},
        {"{\"a\": 0}", "no token for byte 0x00"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_pair(dir, cases[i].json, strlen(cases[i].json), ver, strlen(ver));
        expect_load_error(dir, KVLM_ERR_FORMAT, "encoder.json", cases[i].has);
    }
    /* The real vocabulary cut in half. */
    size_t len;
    char *real = th_read_file(MODEL "/encoder.json", &len);
    write_pair(dir, real, len / 2, NULL, 0);
    expect_load_error(dir, KVLM_ERR_FORMAT, "encoder.json", "invalid JSON");
    free(real);
    th_rmtree(dir);
    free(dir);
}

static void test_malformed_merges(void **state) {
    (void)state;
    char *dir = th_tempdir();
    size_t len;
    char *real = th_read_file(MODEL "/vocab.bpe", &len);
    assert_non_null(real);
    size_t cut = 0;   /* end of line 1001 (the 1000th merge) */
    for (int lines = 0; lines < 1001; cut++)
        if (real[cut] == '\n') lines++;
    struct { const char *tail; const char *has1, *has2; } cases[] = {
        {"\xC4\xA0 zzzzqqq\n", "vocab.bpe:1002", "token 'zzzzqqq'"},
        {"Q z\n", "vocab.bpe:1002", "merged token 'Qz'"},
        {"\xC4\xA0t", "vocab.bpe:1002", "expected two tokens"},
        {"\xC4\xA0 t h\n", "vocab.bpe:1002", "expected two tokens"},
        {"\xC4\xA0 \xC4", "vocab.bpe:1002", "not valid UTF-8"},
        {"\n\xC4\xA0 t\n", "vocab.bpe:1002", "empty line"},
        {" t\n", "vocab.bpe:1002", "expected two tokens"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t tl = strlen(cases[i].tail);
        char *buf = malloc(cut + tl);
        memcpy(buf, real, cut);
        memcpy(buf + cut, cases[i].tail, tl);
        write_pair(dir, NULL, 0, buf, cut + tl);
        expect_load_error(dir, KVLM_ERR_FORMAT, cases[i].has1, cases[i].has2);
        free(buf);
    }
    /* Cut at a line boundary is a shorter, valid merges list. */
    write_pair(dir, NULL, 0, real, cut);
    kvlm_tokenizer *t = load_ok(dir);
    assert_int_equal(kvlm_tokenizer_n_merges(t), 1000);
    kvlm_tokenizer_free(t);
    free(real);
    th_rmtree(dir);
    free(dir);
}

static void test_malformed_tokenizer_json(void **state) {
    (void)state;
    char *dir = th_tempdir();
    char *tj = path_in(dir, "tokenizer.json");
    const char *pre = "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false}";
    const char *vocab = "\"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}";
    struct { char json[400]; int code; const char *has; } cases[] = {
        {"{\"version\": \"1.0\"}", KVLM_ERR_FORMAT, "missing object 'model'"},
        {"{\"model\": {\"type\": \"WordPiece\"}}", KVLM_ERR_UNSUPPORTED, "model.type WordPiece"},
        {"{\"model\": {\"type\": \"BPE\"}, \"pre_tokenizer\": {\"type\": \"Whitespace\"}}",
         KVLM_ERR_UNSUPPORTED, "pre-tokenizer Whitespace is not supported"},
        {"", 0, NULL},
        {"", 0, NULL},
        {"", 0, NULL},
        {"", 0, NULL},
        {"", 0, NULL},
        {"", 0, NULL},
        {"{\"model\": {\"type\": \"BPE\", ", KVLM_ERR_FORMAT, "invalid JSON"},
    };
    snprintf(cases[3].json, sizeof cases[3].json, "{%s, \"normalizer\": {\"type\": \"Lowercase\"}, "
             "\"model\": {%s, \"merges\": []}}", pre, vocab);
    cases[3].code = KVLM_ERR_UNSUPPORTED, cases[3].has = "normalizer Lowercase";
    snprintf(cases[4].json, sizeof cases[4].json, "{%s, \"model\": {%s}}", pre, vocab);
    cases[4].code = KVLM_ERR_FORMAT, cases[4].has = "missing model.merges";
    snprintf(cases[5].json, sizeof cases[5].json, "{%s, \"model\": {%s, \"merges\": [5]}}", pre, vocab);
    cases[5].code = KVLM_ERR_FORMAT, cases[5].has = "model.merges[0]";
    snprintf(cases[6].json, sizeof cases[6].json,
             "{%s, \"model\": {%s, \"merges\": [[\"a\", \"b\", \"c\"]]}}", pre, vocab);
    cases[6].code = KVLM_ERR_FORMAT, cases[6].has = "model.merges[0]";
    snprintf(cases[7].json, sizeof cases[7].json,
             "{%s, \"model\": {%s, \"merges\": [\"a b\", [\"a\", \"x\"]]}}", pre, vocab);
    cases[7].code = KVLM_ERR_FORMAT, cases[7].has = "model.merges[1]: merge names token 'x'";
    snprintf(cases[8].json, sizeof cases[8].json,
             "{%s, \"added_tokens\": [{\"id\": \"x\", \"content\": \"<s>\"}], "
             "\"model\": {%s, \"merges\": []}}", pre, vocab);
    cases[8].code = KVLM_ERR_FORMAT, cases[8].has = "added_tokens[0].id";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        assert_int_equal(th_write_file(tj, cases[i].json, strlen(cases[i].json)), 0);
        expect_load_error(dir, cases[i].code, "tokenizer.json", cases[i].has);
    }
    free(tj);
    th_rmtree(dir);
    free(dir);
}

static void test_missing_files(void **state) {
    (void)state;
    char *dir = th_tempdir();
    expect_load_error("/nonexistent/kvlm-tokenizer", KVLM_ERR_IO, "/nonexistent/kvlm-tokenizer", NULL);
    expect_load_error(dir, KVLM_ERR_IO, "no tokenizer found", NULL);
    copy_file(MODEL "/encoder.json", dir, "vocab.json");
    char *vj = path_in(dir, "vocab.json");
    expect_load_error(vj, KVLM_ERR_IO, "no merges file", NULL);
    expect_load_error(dir, KVLM_ERR_IO, "no tokenizer found", NULL);
    copy_file(MODEL "/vocab.bpe", dir, "merges.txt");
    remove(vj);
    char *mt = path_in(dir, "merges.txt");
    expect_load_error(mt, KVLM_ERR_IO, "vocab.json", "cannot open");
    expect_load_error("", KVLM_ERR_ARG, "empty path", NULL);
    free(vj);
    free(mt);
    th_rmtree(dir);
    free(dir);
}


int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_formats_same_ids),
        cmocka_unit_test(test_directory_priority),
        cmocka_unit_test(test_added_tokens),
        cmocka_unit_test(test_merge_rounds),
        cmocka_unit_test(test_malformed_vocab),
        cmocka_unit_test(test_malformed_merges),
        cmocka_unit_test(test_malformed_tokenizer_json),
        cmocka_unit_test(test_missing_files),
    };
    return cmocka_run_group_tests_name("tokenizer files", tests, load_fixture, free_fixture);
}
