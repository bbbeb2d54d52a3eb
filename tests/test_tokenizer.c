/*
 * Tokenizer tests: exact GPT-2 ids for the fixture produced by the
 * independent Python reference (tools/tokenizer_reference.py), the same ids
 * with and without the word cache, round trips of random bytes, the
 * pre-tokeniser against PCRE2, the two merge loops against each other, the
 * streaming UTF-8 assembler, and the CLI.
 * Run from the repository root (paths are relative to it).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>

#include "tokenizer/tokenizer.h"
#include "tokenizer/pretok.h"
#include "tokenizer_testlib.h"

static void test_known_ids(void **state) {
    (void)state;
    kvlm_tokenizer *t = load_ok(MODEL);
    assert_int_equal(kvlm_tokenizer_vocab_size(t), 50257);
    assert_int_equal(kvlm_tokenizer_n_merges(t), 50000);
    expect_ids(t, "Hello world", 0, (int32_t[]){15496, 995}, 2);
    expect_ids(t, " Hello", 0, (int32_t[]){18435}, 1);
    expect_ids(t, "<|endoftext|>", 1, (int32_t[]){50256}, 1);
    expect_ids(t, "<|endoftext|>", 0, (int32_t[]){27, 91, 437, 1659, 5239, 91, 29}, 7);
    expect_ids(t, "", 0, NULL, 0);
    assert_int_equal(kvlm_tokenizer_eos_id(t), 50256);
    assert_true(kvlm_tokenizer_is_special(t, 50256));
    assert_false(kvlm_tokenizer_is_special(t, 15496));
    assert_int_equal(kvlm_tokenizer_token_id(t, " Hello", 6), 18435);
    assert_int_equal(kvlm_tokenizer_token_id(t, "\xff", 1), 187);
    assert_int_equal(kvlm_tokenizer_token_id(t, "no such token", 13), -1);
    size_t len;
    const char *p = kvlm_tokenizer_piece(t, 15496, &len);
    assert_int_equal(len, 5);
    assert_memory_equal(p, "Hello", 5);
    assert_null(kvlm_tokenizer_piece(t, 50257, &len));
    assert_null(kvlm_tokenizer_piece(t, -1, &len));
    kvlm_tokenizer_free(t);
}


static void test_fixture_ids(void **state) {
    (void)state;
    assert_true(n_fixture_cases >= 200);
    kvlm_tokenizer *t = load_ok(MODEL);
    assert_int_equal(run_fixture(t, "encoder.json+vocab.bpe"), 0);
    /* Same ids with the word cache off and with it warm. */
    assert_int_equal(kvlm_tokenizer_set_cache(t, 0, NULL), 0);
    assert_int_equal(run_fixture(t, "no cache"), 0);
    assert_int_equal(kvlm_tokenizer_set_cache(t, 16, NULL), 0);   /* clears often */
    assert_int_equal(run_fixture(t, "tiny cache"), 0);
    assert_int_equal(run_fixture(t, "tiny cache, second pass"), 0);
    kvlm_tokenizer_free(t);
}

/* -------------------------------------------------------------- properties */

/* Random text: bytes, or fragments likely to hit every pre-token rule. */
static size_t random_text(unsigned char *buf, size_t cap) {
    static const char *const frags[] = {
        "a", "the", " the", "Hello", " ", "  ", "\t", "\n", "\r\n", "'s", "'ll", "'", "DON'T",
        "123", " 4", ".", "!?", "\xc3\xa9", "\xe4\xb8\xad", "\xf0\x9f\x98\x80", "\xcc\x81",
        "\xe2\x80\x8d", "\xc2\xa0", "\xc2\x85", "\xe1\xa0\x8e", "\x1c", "\x00", "\x80", "\xff",
        "\xe2\x82", "\xf0\x9f", "\xed\xa0\x80", "<|endoftext|>", "<|", "|>", "\xd7\xa9",
    };
    size_t n = rnd() % 48, o = 0;
    int mode = (int)(rnd() % 3);
    for (size_t i = 0; i < n; i++) {
        if (mode == 0) {
            if (o < cap) buf[o++] = (unsigned char)rnd();
        } else {
            const char *f = frags[rnd() % (sizeof frags / sizeof frags[0])];
            size_t l = f[0] ? strlen(f) : 1;
            if (o + l <= cap) { memcpy(buf + o, f, l); o += l; }
        }
    }
    return o;
}

static void test_roundtrip_random(void **state) {
    (void)state;
    kvlm_tokenizer *t = load_ok(MODEL);
    kvlm_tokenizer *nc = load_ok(MODEL);
    assert_int_equal(kvlm_tokenizer_set_cache(nc, 0, NULL), 0);
    rng_state = 20240131;
    unsigned char buf[512];
    for (int iter = 0; iter < 5000; iter++) {
        size_t n = random_text(buf, sizeof buf);
        for (int special = 0; special < 2; special++) {
            int32_t *ids, *ids2;
            size_t k, k2;
            encode_ok(t, buf, n, special, &ids, &k);
            encode_ok(nc, buf, n, special, &ids2, &k2);
            assert_int_equal(k, k2);
            assert_memory_equal(ids, ids2, k * sizeof *ids);
            char *text;
            size_t tlen;
            assert_int_equal(kvlm_tokenizer_decode(t, ids, k, &text, &tlen, NULL), 0);
            assert_int_equal(tlen, n);
            assert_memory_equal(text, buf, n);
            free(text);
            free(ids);
            free(ids2);
        }
    }
    kvlm_tokenizer_free(t);
    kvlm_tokenizer_free(nc);
}

/* The scan (short words) and the heap (long words) are the same function. */
static void test_bpe_scan_equals_heap(void **state) {
    (void)state;
    kvlm_tokenizer *t = load_ok(MODEL);
    static const char alphabet[] = " etahinosr'.\n\xc3\xa9";
    rng_state = 7;
    tok_bpe_scratch scratch = {0};
    int32_t a[400], b[400];
    for (int iter = 0; iter < 3000; iter++) {
        size_t n = 2 + rnd() % (iter < 2000 ? 60 : 398);
        for (size_t i = 0; i < n; i++) {
            unsigned char c = rnd() % 10 ? (unsigned char)alphabet[rnd() % (sizeof alphabet - 1)]
                                         : (unsigned char)rnd();
            a[i] = b[i] = t->byte_id[c];
        }
        size_t na = tok_bpe_scan(&t->merges, a, n);
        size_t nb = tok_bpe_heap(&t->merges, b, n, &scratch);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, na * sizeof *a);
    }
    tok_bpe_scratch_free(&scratch);
    kvlm_tokenizer_free(t);
}

static void test_long_runs(void **state) {
    (void)state;
    kvlm_tokenizer *t = load_ok(MODEL);
    size_t n = 1 << 20;
    char *buf = malloc(n);
    const char fill[] = {'!', ' ', 'a', '\n', '7'};
    for (size_t f = 0; f < sizeof fill; f++) {
        memset(buf, fill[f], n);
        int32_t *ids;
        size_t k;
        double t0 = kvlm_now();
        encode_ok(t, buf, n, 0, &ids, &k);
        double dt = kvlm_now() - t0;
        char *text;
        size_t tlen;
        assert_int_equal(kvlm_tokenizer_decode(t, ids, k, &text, &tlen, NULL), 0);
        assert_int_equal(tlen, n);
        assert_memory_equal(text, buf, n);
        print_message("1 MiB of 0x%02X: %zu tokens in %.3f s\n", fill[f], k, dt);
        free(text);
        free(ids);
    }
    free(buf);
    kvlm_tokenizer_free(t);
}

typedef struct thread_job {
    const kvlm_tokenizer *t;
    const char *text;
    size_t len;
    int32_t *ids;
    size_t n;
} thread_job;

static void *encode_thread(void *p) {
    thread_job *j = p;
    kvlm_tokenizer_encode(j->t, j->text, j->len, 0, &j->ids, &j->n, NULL);
    return NULL;
}

/* Threads encoding at once (some without the cache) agree with one. */
static void test_threads(void **state) {
    (void)state;
    kvlm_tokenizer *t = load_ok(MODEL);
    size_t len;
    char *text = th_read_file("data/tinyshakespeare.txt", &len);
    assert_non_null(text);
    len = len < 200000 ? len : 200000;
    int32_t *ref;
    size_t nref;
    encode_ok(t, text, len, 0, &ref, &nref);
    assert_int_equal(kvlm_tokenizer_set_cache(t, 1024, NULL), 0);
    thread_job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (thread_job){t, text, len, NULL, 0};
        assert_int_equal(pthread_create(&th[i], NULL, encode_thread, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(jobs[i].n, nref);
        assert_memory_equal(jobs[i].ids, ref, nref * sizeof *ref);
        free(jobs[i].ids);
    }
    free(ref);
    free(text);
    kvlm_tokenizer_free(t);
}

/* ----------------------------------------------------- pre-tokeniser proof */

static int pcre_match_cp(pcre2_code *re, pcre2_match_data *md, uint32_t cp) {
    unsigned char b[4];
    size_t n;
    if (cp < 0x80) { b[0] = (unsigned char)cp; n = 1; }
    else if (cp < 0x800) { b[0] = 0xC0 | (cp >> 6); b[1] = 0x80 | (cp & 63); n = 2; }
    else if (cp < 0x10000) {
        b[0] = 0xE0 | (cp >> 12); b[1] = 0x80 | ((cp >> 6) & 63); b[2] = 0x80 | (cp & 63); n = 3;
    } else {
        b[0] = 0xF0 | (cp >> 18); b[1] = 0x80 | ((cp >> 12) & 63);
        b[2] = 0x80 | ((cp >> 6) & 63); b[3] = 0x80 | (cp & 63); n = 4;
    }
    return pcre2_match(re, b, n, 0, 0, md, NULL) >= 0;
}

static pcre2_code *compile(const char *pat) {
    int e;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &e,
                                   &off, NULL);
    assert_non_null(re);
    return re;
}

/* Every code point: our letter and number classes are PCRE2's \p{L} and
 * \p{N}; our white space is PCRE2's UCP \s except U+180E, which PCRE2
 * 10.42 counts as space and Unicode's White_Space (our \s, and the
 * reference implementation's) does not. */
static void test_classes_match_pcre2(void **state) {
    (void)state;
    pcre2_code *L = compile("^\\p{L}$"), *N = compile("^\\p{N}$"), *S = compile("^\\s$");
    pcre2_match_data *md = pcre2_match_data_create(4, NULL);
    int bad = 0;
    for (uint32_t cp = 0; cp < 0x110000; cp++) {
        if (cp >= 0xD800 && cp < 0xE000) continue;
        int want = pcre_match_cp(L, md, cp) ? TOK_L : pcre_match_cp(N, md, cp) ? TOK_N
                 : (pcre_match_cp(S, md, cp) && cp != 0x180E) ? TOK_S : TOK_O;
        if (tok_class_of((int32_t)cp) != want && bad++ < 10)
            print_error("U+%04X: class %d, PCRE2 says %d\n", cp, tok_class_of((int32_t)cp), want);
    }
    assert_int_equal(bad, 0);
    pcre2_match_data_free(md);
    pcre2_code_free(L);
    pcre2_code_free(N);
    pcre2_code_free(S);
}

/* Random valid UTF-8: the scanner's pieces are PCRE2's matches of the
 * pattern, with \s spelled out as the White_Space set. */
static void test_pretok_matches_pcre2(void **state) {
    (void)state;
    const char *ws = "\\x{9}-\\x{d}\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}"
                     "\\x{2029}\\x{202f}\\x{205f}\\x{3000}";
    char pat[1024];
    snprintf(pat, sizeof pat, "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^%s\\p{L}\\p{N}]+|"
             "[%s]+(?![^%s])|[%s]+", ws, ws, ws, ws);
    pcre2_code *re = compile(pat);
    pcre2_match_data *md = pcre2_match_data_create(4, NULL);
    static const uint32_t alphabet[] = {
        'a', 'Z', 's', 't', 'r', 'e', 'v', 'm', 'l', 'd', '0', '9', ' ', ' ', '\t', '\n', '\r',
        '\'', '\'', '.', '!', '_', 0x0B, 0x1C, 0x1F, 0x7F, 0x85, 0xA0, 0xAD, 0xB2, 0xE9, 0x301,
        0x5D0, 0x661, 0x180E, 0x2000, 0x200B, 0x200D, 0x2028, 0x2163, 0x3000, 0x4E2D, 0xFEFF,
        0x1F600, 0x1F3FD, 0x20000, 0xE0041, 0x10FFFF,
    };
    rng_state = 99;
    for (int iter = 0; iter < 20000; iter++) {
        unsigned char s[200];
        size_t n = 0, len = 1 + rnd() % 30;
        for (size_t k = 0; k < len; k++) {
            uint32_t cp = alphabet[rnd() % (sizeof alphabet / sizeof alphabet[0])];
            if (cp < 0x80) s[n++] = (unsigned char)cp;
            else if (cp < 0x800) { s[n++] = 0xC0 | (cp >> 6); s[n++] = 0x80 | (cp & 63); }
            else if (cp < 0x10000) {
                s[n++] = 0xE0 | (cp >> 12); s[n++] = 0x80 | ((cp >> 6) & 63); s[n++] = 0x80 | (cp & 63);
            } else {
                s[n++] = 0xF0 | (cp >> 18); s[n++] = 0x80 | ((cp >> 12) & 63);
                s[n++] = 0x80 | ((cp >> 6) & 63); s[n++] = 0x80 | (cp & 63);
            }
        }
        for (size_t i = 0; i < n;) {
            int rc = pcre2_match(re, s, n, i, PCRE2_ANCHORED, md, NULL);
            assert_true(rc > 0);
            size_t want = pcre2_get_ovector_pointer(md)[1];
            size_t got = tok_pretok_next(s, n, i);
            if (got != want) print_error("iteration %d, offset %zu: scanner %zu, PCRE2 %zu\n", iter, i, got, want);
            assert_int_equal(got, want);
            i = got;
        }
    }
    pcre2_match_data_free(md);
    pcre2_code_free(re);
}

/* ------------------------------------------------------------ UTF-8 stream */

static size_t push_str(kvlm_utf8_stream *s, const char *in, size_t n, char *out) {
    return kvlm_utf8_push(s, in, n, out);
}

static void test_utf8_stream(void **state) {
    (void)state;
    char out[64];
    kvlm_utf8_stream s = {0};
    assert_int_equal(push_str(&s, "\xe2", 1, out), 0);
    assert_int_equal(push_str(&s, "\x82", 1, out), 0);
    assert_int_equal(push_str(&s, "\xac", 1, out), 3);
    assert_memory_equal(out, "\xe2\x82\xac", 3);
    assert_int_equal(push_str(&s, "ab\xf0\x9f", 4, out), 2);
    assert_int_equal(push_str(&s, "\x98\x80!", 3, out), 5);
    assert_memory_equal(out, "\xf0\x9f\x98\x80!", 5);
    /* Invalid bytes are not held. */
    assert_int_equal(push_str(&s, "\xff", 1, out), 1);
    assert_int_equal(push_str(&s, "\x80", 1, out), 1);
    assert_int_equal(push_str(&s, "\xc0", 1, out), 1);
    /* An interrupted sequence goes out with the byte that interrupts it. */
    assert_int_equal(push_str(&s, "\xe2\x82", 2, out), 0);
    assert_int_equal(push_str(&s, "A", 1, out), 3);
    assert_memory_equal(out, "\xe2\x82" "A", 3);
    /* Surrogates and overlongs are refused at the second byte. */
    assert_int_equal(push_str(&s, "\xed\xa0", 2, out), 2);
    assert_int_equal(push_str(&s, "\xe0\x80", 2, out), 2);
    assert_int_equal(push_str(&s, "\xf4\x90", 2, out), 2);
    /* Flush emits what is held. */
    assert_int_equal(push_str(&s, "\xf0\x9f\x98", 3, out), 0);
    assert_int_equal(kvlm_utf8_flush(&s, out), 3);
    assert_memory_equal(out, "\xf0\x9f\x98", 3);
    assert_int_equal(kvlm_utf8_flush(&s, out), 0);
    /* Random bytes in random chunks: every byte comes out once, in order,
     * within n + 4 bytes of room per push; on valid text every chunk ends on
     * a character boundary. */
    rng_state = 5;
    for (int iter = 0; iter < 3000; iter++) {
        unsigned char in[512];
        size_t n = random_text(in, sizeof in);
        int valid = 1;
        for (size_t i = 0; i < n;) {
            int32_t cp;
            i += tok_utf8_decode(in + i, n - i, &cp);
            if (cp < 0) valid = 0;
        }
        char res[600], chunk[600];
        size_t o = 0;
        kvlm_utf8_stream st = {0};
        for (size_t i = 0; i < n;) {
            size_t k = 1 + rnd() % 7;
            if (k > n - i) k = n - i;
            size_t w = kvlm_utf8_push(&st, (const char *)in + i, k, chunk);
            assert_true(w <= k + 4);
            if (valid) {
                for (size_t j = 0; j < w;) {
                    int32_t cp;
                    j += tok_utf8_decode((unsigned char *)chunk + j, w - j, &cp);
                    assert_true(cp >= 0);
                }
            }
            memcpy(res + o, chunk, w);
            o += w;
            i += k;
        }
        o += kvlm_utf8_flush(&st, res + o);
        assert_int_equal(o, n);
        assert_memory_equal(res, in, n);
    }
}

static void test_decode_errors(void **state) {
    (void)state;
    kvlm_tokenizer *t = load_ok(MODEL);
    kvlm_error err = {0};
    char *text = (char *)1;
    size_t len;
    int32_t bad[] = {15496, 50257};
    assert_int_equal(kvlm_tokenizer_decode(t, bad, 2, &text, &len, &err), KVLM_ERR_ARG);
    assert_null(text);
    assert_non_null(strstr(err.msg, "ids[1] = 50257"));
    int32_t neg[] = {-1};
    assert_int_equal(kvlm_tokenizer_decode(t, neg, 1, &text, &len, &err), KVLM_ERR_ARG);
    assert_int_equal(kvlm_tokenizer_decode(t, NULL, 0, &text, &len, &err), 0);
    assert_int_equal(len, 0);
    free(text);
    assert_int_equal(kvlm_tokenizer_set_cache(t, (size_t)1 << 30, &err), KVLM_ERR_ARG);
    kvlm_tokenizer_free(t);
}

/* -------------------------------------------------------------------- CLI */

static void expect_cli(const char *args, int code, const char *out_equals, const char *out_has) {
    char *out = NULL;
    int rc = th_run_kvlm(&out, "%s", args);
    if (rc != code || (out_equals && strcmp(out, out_equals)) || (out_has && !strstr(out, out_has)))
        print_error("kvlm %s: exit %d, output '%s' (want exit %d)\n", args, rc, out ? out : "", code);
    assert_int_equal(rc, code);
    if (out_equals) assert_string_equal(out, out_equals);
    if (out_has) assert_non_null(strstr(out, out_has));
    free(out);
}

static void test_cli(void **state) {
    (void)state;
    const char *m = "-m " MODEL;
    char cmd[2048];
#define CLI(code, eq, has, ...) do { snprintf(cmd, sizeof cmd, __VA_ARGS__); expect_cli(cmd, code, eq, has); } while (0)
    CLI(0, "15496 995\n", NULL, "tokenize %s 'Hello world'", m);
    CLI(0, "15496 995\n", NULL, "tokenize %s Hello world", m);
    CLI(0, "50256\n", NULL, "tokenize %s --special '<|endoftext|>'", m);
    CLI(0, "27 91 437 1659 5239 91 29\n", NULL, "tokenize %s '<|endoftext|>'", m);
    CLI(0, "18435\t\" Hello\"\n", NULL, "tokenize %s --pieces ' Hello'", m);
    CLI(0, "40\t\"I\"\n1101\t\"'m\"\n", NULL, "tokenize --pieces %s \"I'm\"", m);
    CLI(0, "15496 995\n", NULL, "tokenize -m " MODEL "/encoder.json 'Hello world'");
    CLI(0, "Hello world", NULL, "detokenize %s 15496 995", m);
    CLI(0, "Hello world", NULL, "detokenize %s 15496,995", m);
    CLI(0, "Hello world", NULL, "detokenize %s '15496 995'", m);
    CLI(0, NULL, "usage: kvlm tokenize", "tokenize --help");
    CLI(0, NULL, "usage: kvlm detokenize", "detokenize -h");
    CLI(2, NULL, "-m MODEL is required", "tokenize 'Hello'");
    CLI(2, NULL, "unknown argument '--bogus'", "tokenize %s --bogus x", m);
    CLI(2, NULL, "usage", "tokenize %s", m);
    CLI(2, NULL, "usage", "tokenize %s -m", m);
    CLI(2, NULL, "no token ids", "detokenize %s", m);
    CLI(2, NULL, "not a list", "detokenize %s abc", m);
    CLI(2, NULL, "'-5' is not a non-negative integer", "detokenize %s -5", m);
    CLI(1, NULL, "/nonexistent/model", "tokenize -m /nonexistent/model x");
    CLI(1, NULL, "ids[1] = 99999", "detokenize %s 15496 99999", m);
    CLI(1, NULL, "cannot read /nonexistent/text", "tokenize %s --file /nonexistent/text", m);
    /* Exact bytes through a file and back, invalid UTF-8 included. */
    char *dir = th_tempdir();
    char *f = path_in(dir, "in.bin"), *g = path_in(dir, "out.bin");
    const char text[] = "caf\xc3\xa9 \xff\xfe\n\t<|endoftext|> DON'T\x00 end";
    size_t tlen = sizeof text - 1;
    assert_int_equal(th_write_file(f, text, tlen), 0);
    snprintf(cmd, sizeof cmd, "tokenize %s --file %s | %s detokenize %s - > %s", m, f, th_kvlm(), m, g);
    expect_cli(cmd, 0, "", NULL);
    size_t glen;
    char *got = th_read_file(g, &glen);
    assert_non_null(got);
    assert_int_equal(glen, tlen);
    assert_memory_equal(got, text, tlen);
    free(got);
    kvlm_tokenizer *t = load_ok(MODEL);
    int32_t *ids;
    size_t n;
    encode_ok(t, text, tlen, 1, &ids, &n);
    char want[1024];
    size_t o = 0;
    for (size_t i = 0; i < n; i++) o += (size_t)snprintf(want + o, sizeof want - o, i ? " %d" : "%d", ids[i]);
    snprintf(want + o, sizeof want - o, "\n");
    CLI(0, want, NULL, "tokenize %s --special --file %s", m, f);
    CLI(0, want, NULL, "tokenize %s --special --file - < %s", m, f);
    free(ids);
    kvlm_tokenizer_free(t);
    free(f);
    free(g);
    th_rmtree(dir);
    free(dir);
#undef CLI
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_ids),
        cmocka_unit_test(test_fixture_ids),
        cmocka_unit_test(test_roundtrip_random),
        cmocka_unit_test(test_bpe_scan_equals_heap),
        cmocka_unit_test(test_long_runs),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_classes_match_pcre2),
        cmocka_unit_test(test_pretok_matches_pcre2),
        cmocka_unit_test(test_utf8_stream),
        cmocka_unit_test(test_decode_errors),
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests_name("tokenizer", tests, load_fixture, free_fixture);
}
