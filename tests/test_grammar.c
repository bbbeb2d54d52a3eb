/*
 * Grammar engine: the recogniser per construct (GBNF literals, classes,
 * UTF-8, groups, repetition, recursion), GBNF and regex errors, JSON Schema
 * keyword errors and what schemas accept and refuse, wrapping, and exact
 * token masks on hand-made vocabularies (multi-byte characters, tokens that
 * hold part of a character, tokens spanning several grammar symbols).
 * llama.cpp's own grammar files parse when /tmp/peer/llama.cpp is there.
 */
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "helpers.h"

static kvlm_grammar *gbnf(const char *text) {
    kvlm_error err = {0};
    kvlm_grammar *g = kvlm_grammar_from_gbnf(text, strlen(text), &err);
    if (!g) fail_msg("gbnf: %s\n%s", err.msg, text);
    return g;
}

static int match(const kvlm_grammar *g, const char *s) {
    kvlm_error err;
    int r = kvlm_grammar_match(g, s, strlen(s), &err);
    assert_true(r == 0 || r == 1);
    return r;
}

static void expect(const kvlm_grammar *g, const char *const *yes, const char *const *no) {
    for (; yes && *yes; yes++)
        if (!match(g, *yes)) fail_msg("should match: \"%s\"", *yes);
    for (; no && *no; no++)
        if (match(g, *no)) fail_msg("should not match: \"%s\"", *no);
}

static void test_literals_classes(void **st) {
    (void)st;
    kvlm_grammar *g = gbnf("root ::= \"ab\" [0-9x-z]+ \"\\n\" # comment\n");
    expect(g, (const char *[]){"ab0\n", "abx9y\n", NULL}, (const char *[]){"ab\n", "ab0", "abw\n", "a", "", NULL});
    kvlm_grammar_free(g);
    g = gbnf("root ::= [^a-c\\n]{2}");
    expect(g, (const char *[]){"dd", "\xc3\xa9z", "\xe2\x82\xac\xf0\x9f\x98\x80", NULL},
           (const char *[]){"ad", "d", "ddd", "d\n", "\xc3", "\xc3\xa9\xa9", "\xed\xa0\x80x", NULL});
    kvlm_grammar_free(g);
    /* code points in literals and classes are UTF-8 byte sequences */
    g = gbnf("root ::= \"\\u00e9\" [\\u4e00-\\u9fff] \"\\xe9\" .");
    expect(g, (const char *[]){"\xc3\xa9\xe4\xb8\xad\xc3\xa9\n", "\xc3\xa9\xe9\xbf\xbf\xc3\xa9\xf4\x8f\xbf\xbf", NULL},
           (const char *[]){"\xe9\xe4\xb8\xad\xe9x", "\xc3\xa9\xe3\x80\x80\xc3\xa9x", NULL});
    kvlm_grammar_free(g);
}

static void test_groups_repetition_recursion(void **st) {
    (void)st;
    kvlm_grammar *g = gbnf("root ::= (\"a\" | \"bc\")* \"d\"? x{2,3}\nx ::= \"x\"");
    expect(g, (const char *[]){"xx", "abcaxxx", "bcdxx", NULL}, (const char *[]){"x", "xxxx", "ab", "dd xx", NULL});
    kvlm_grammar_free(g);
    g = gbnf("root ::= e\ne ::= t (\"+\" t)*\nt ::= \"(\" e \")\" | [0-9]+");
    expect(g, (const char *[]){"1", "1+2", "((1)+(2+33))", NULL}, (const char *[]){"(1", "1+", "()", "(1))", NULL});
    kvlm_grammar_free(g);
    g = gbnf("root ::= \"a\"{3} \"b\"{0,} \"c\"{1,2}");
    expect(g, (const char *[]){"aaac", "aaabbbcc", NULL}, (const char *[]){"aac", "aaaccc", NULL});
    kvlm_grammar_free(g);
    /* empty alternatives, nullable rules in the middle */
    g = gbnf("root ::= a b \"!\"\na ::= | \"a\"\nb ::= \"b\" |");
    expect(g, (const char *[]){"!", "a!", "b!", "ab!", NULL}, (const char *[]){"ba!", "", NULL});
    kvlm_grammar_free(g);
    /* a long repetition runs in constant stack depth (tail calls) */
    g = gbnf("root ::= \"x\"*");
    char buf[20001];
    memset(buf, 'x', 20000);
    buf[20000] = 0;
    assert_int_equal(match(g, buf), 1);
    gr_matcher *m = gr_matcher_new(g, NULL);
    assert_int_equal(gr_matcher_advance(m, buf, 20000), 0);
    assert_true(gr_matcher_nodes(m) < 10);
    assert_int_equal(gr_matcher_advance(m, "y", 1), -1);
    assert_true(gr_matcher_accepting(m)); /* a refused byte leaves the state as it was */
    gr_matcher_free(m);
    kvlm_grammar_free(g);
}

static void gbnf_error(const char *text, const char *needle) {
    kvlm_error err = {0};
    kvlm_grammar *g = kvlm_grammar_from_gbnf(text, strlen(text), &err);
    if (g) fail_msg("accepted: %s", text);
    if (!strstr(err.msg, needle)) fail_msg("error \"%s\" lacks \"%s\"", err.msg, needle);
}

static void test_gbnf_errors(void **st) {
    (void)st;
    gbnf_error("root ::= foo", "rule \"foo\" is used (line 1) but never defined");
    gbnf_error("start ::= \"a\"", "no rule named \"root\"");
    gbnf_error("root ::= \"a", "line 1 column 10: string literal is not closed");
    gbnf_error("root ::= [a-", "character class is not closed");
    gbnf_error("root ::= [z-a]", "runs backwards");
    gbnf_error("root ::= (\"a\"", "group is not closed");
    gbnf_error("root ::= \"a\"\n\nroot ::= \"b\"", "line 3 column 1: rule defined twice");
    gbnf_error("root ::= root \"a\" | \"b\"", "rule \"root\" is left-recursive");
    gbnf_error("root ::= x\nx ::= y? root \"a\"\ny ::= \"b\"", "left-recursive");
    gbnf_error("root ::= \"a\"{3,2}", "n below m");
    gbnf_error("root ::= \"a\"{20000}", "above 10000");
    gbnf_error("root ::= <[1000]>", "token references");
    gbnf_error("root ::= \"\\q\"", "unknown escape");
    gbnf_error("root ::= \"\\ud800\"", "not a Unicode scalar value");
    gbnf_error("root ::= \"a\" ) ", "unbalanced )");
    gbnf_error("= \"a\"", "expected a rule definition");
    gbnf_error("root ::= \"\xff\"", "invalid UTF-8");
}

/* llama.cpp's example grammars (read, never copied): each must parse. */
static void test_llamacpp_grammars(void **st) {
    (void)st;
    glob_t gl;
    if (glob("/tmp/peer/llama.cpp/grammars/*.gbnf", 0, NULL, &gl) != 0) {
        skip();
        return;
    }
    int parsed = 0;
    for (size_t i = 0; i < gl.gl_pathc; i++) {
        size_t len;
        char *text = th_read_file(gl.gl_pathv[i], &len);
        assert_non_null(text);
        kvlm_error err = {0};
        kvlm_grammar *g = kvlm_grammar_from_gbnf(text, len, &err);
        if (!g) fail_msg("%s: %s", gl.gl_pathv[i], err.msg);
        if (strstr(gl.gl_pathv[i], "/json.gbnf")) {
            expect(g, (const char *[]){"{\"a\": [1, 2.5e3, \"x\\n\", true, null]}", "{}", NULL},
                   (const char *[]){"{\"a\" 1}", "[1]", "{\"a\": tru}", NULL});
        }
        if (strstr(gl.gl_pathv[i], "/arithmetic.gbnf"))
            expect(g, (const char *[]){"1+2*(3-4)=5\n", NULL}, (const char *[]){"1+\n", NULL});
        kvlm_grammar_free(g);
        free(text);
        parsed++;
    }
    globfree(&gl);
    assert_true(parsed >= 5);
}

static kvlm_grammar *regex(const char *re) {
    kvlm_error err = {0};
    kvlm_grammar *g = kvlm_grammar_from_regex(re, strlen(re), &err);
    if (!g) fail_msg("regex %s: %s", re, err.msg);
    return g;
}

static void test_regex(void **st) {
    (void)st;
    kvlm_grammar *g = regex("^(\\d{3}-)?\\d{4}$");
    expect(g, (const char *[]){"555-1234", "1234", NULL}, (const char *[]){"55-1234", "123", "1234-", NULL});
    kvlm_grammar_free(g);
    g = regex("[A-Z][a-z]*(?: [A-Z][a-z]*)+|\\w+@\\w+\\.com");
    expect(g, (const char *[]){"New York", "Ab Cd Ef", "me_1@site.com", NULL},
           (const char *[]){"New", "new york", "a@b.org", NULL});
    kvlm_grammar_free(g);
    g = regex("[^0-9\\s]+?\\.\\*[.]x");
    expect(g, (const char *[]){"\xc3\xa9t\xc3\xa9.*.x", NULL}, (const char *[]){"a1.*.x", "a .*.x", "a.*ax", NULL});
    kvlm_grammar_free(g);
    g = regex(".\\S\\D\\W");
    expect(g, (const char *[]){"\xe2\x82\xac" "a" "b" "!", NULL}, (const char *[]){"\na b!", "aa1!", "aaba", NULL});
    kvlm_grammar_free(g);
    static const char *bad[][2] = {
        {"(ab", "group is not closed"}, {"a)", "unbalanced )"},      {"*a", "nothing to repeat"},
        {"(?=a)", "lookaround"},         {"(a)\\1", "backreferences"}, {"a^b", "anchors"},
        {"[b-a]", "backwards"},          {"a{2,1}", "n below m"},      {"a**", "cannot follow a quantifier"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kvlm_error err = {0};
        assert_null(kvlm_grammar_from_regex(bad[i][0], strlen(bad[i][0]), &err));
        if (!strstr(err.msg, bad[i][1]) || strncmp(err.msg, "regex: ", 7)) fail_msg("%s: %s", bad[i][0], err.msg);
    }
}

static kvlm_grammar *schema(const char *s) {
    kvlm_error err = {0};
    kvlm_grammar *g = kvlm_grammar_from_json_schema(s, strlen(s), &err);
    if (!g) fail_msg("schema %s: %s", s, err.msg);
    return g;
}

static void test_json_schema_accepts(void **st) {
    (void)st;
    kvlm_grammar *g = schema("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":3},"
                             "\"age\":{\"type\":\"integer\",\"minimum\":-5,\"maximum\":120},\"ok\":{\"type\":\"boolean\"}},"
                             "\"required\":[\"age\"],\"additionalProperties\":false}");
    expect(g, (const char *[]){"{\"age\":7}", "{\"name\":\"\xc3\xa9t\xc3\xa9\", \"age\": -5 ,\"ok\":true}",
                               "{\n \"name\":\"a\\\"\",\"age\":120}", NULL},
           (const char *[]){"{}", "{\"name\":\"abcd\",\"age\":1}", "{\"age\":121}", "{\"age\":-6}", "{\"age\":1.5}",
                            "{\"age\":07}", "{\"ok\":true,\"age\":1}", "{\"age\":1,}", " {\"age\":1}",
                            "{\"age\":1,\"x\":2}", "{\"name\":\"\\ud83d\\ude00\",\"age\":1}", NULL});
    kvlm_grammar_free(g);
    g = schema("{\"type\":\"array\",\"items\":{\"enum\":[\"a\",1,null,{\"k\":[true]}]},\"minItems\":1,\"maxItems\":3}");
    expect(g, (const char *[]){"[\"a\"]", "[1, null,{\"k\":[true]}]", NULL},
           (const char *[]){"[]", "[1,1,1,1]", "[2]", "[{\"k\": [true]}]", NULL});
    kvlm_grammar_free(g);
    g = schema("{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"number\",\"minimum\":0.5,"
               "\"exclusiveMaximum\":3},\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/node\"},{\"type\":\"null\"}]}},"
               "\"required\":[\"v\",\"next\"]}},\"$ref\":\"#/$defs/node\"}");
    expect(g, (const char *[]){"{\"v\":1,\"next\":{\"v\":2.999,\"next\":null}}", "{\"v\":1.25,\"next\":null}", NULL},
           (const char *[]){"{\"v\":3,\"next\":null}", "{\"v\":0,\"next\":null}", "{\"v\":1}", NULL});
    kvlm_grammar_free(g);
    g = schema("{\"type\":[\"string\",\"null\"],\"pattern\":\"^[a-c]+x$\"}");
    expect(g, (const char *[]){"\"abx\"", "null", NULL}, (const char *[]){"\"x\"", "\"abxa\"", NULL});
    kvlm_grammar_free(g);
    g = schema("{\"type\":\"string\",\"pattern\":\"ab?c\"}"); /* unanchored: anywhere in the string */
    expect(g, (const char *[]){"\"ac\"", "\"zzabc\\\"\"", "\"\xc3\xa9" "ac\"", NULL}, (const char *[]){"\"abbc\"", "\"a\"", NULL});
    kvlm_grammar_free(g);
    g = schema("{\"type\":\"string\",\"format\":\"date\"}");
    expect(g, (const char *[]){"\"2024-02-28\"", "\"1999-12-31\"", "\"2000-04-30\"", NULL},
           (const char *[]){"\"2024-02-30\"", "\"2024-04-31\"", "\"2024-13-01\"", "\"2024-1-01\"", NULL});
    kvlm_grammar_free(g);
    g = schema("{\"type\":\"integer\",\"minimum\":95,\"maximum\":1203}");
    expect(g, (const char *[]){"95", "99", "100", "999", "1000", "1199", "1203", NULL},
           (const char *[]){"94", "1204", "1300", "0", "-100", "095", NULL});
    kvlm_grammar_free(g);
    g = schema("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}");
    expect(g, (const char *[]){"{}", "{\"x\":1,\"y\":2}", NULL}, (const char *[]){"{\"x\":\"1\"}", NULL});
    kvlm_grammar_free(g);
    kvlm_error err;
    g = kvlm_grammar_json_object(&err);
    expect(g, (const char *[]){"{\"a\":[1,{\"b\":\"\"}]}", NULL}, (const char *[]){"[1]", "\"a\"", NULL});
    kvlm_grammar_free(g);
}

static void schema_error(const char *s, const char *needle) {
    kvlm_error err = {0};
    kvlm_grammar *g = kvlm_grammar_from_json_schema(s, strlen(s), &err);
    if (g) fail_msg("accepted: %s", s);
    if (!strstr(err.msg, needle)) fail_msg("error \"%s\" lacks \"%s\"", err.msg, needle);
}

static void test_json_schema_errors(void **st) {
    (void)st;
    schema_error("{\"type\":\"object\",\"properties\":{\"a\":{\"patternProperties\":{}}}}",
                 "json schema: unsupported keyword \"patternProperties\" at /properties/a");
    schema_error("{\"type\":\"array\",\"items\":{\"type\":\"strin\"}}", "unknown type \"strin\" at /items");
    schema_error("{\"anyOf\":[{\"type\":\"string\",\"format\":\"email\"}]}", "unsupported format \"email\" at /anyOf/0");
    schema_error("{\"$ref\":\"#/components/x\"}", "$ref \"#/components/x\"");
    schema_error("{\"$ref\":\"#/$defs/missing\",\"$defs\":{}}", "$ref \"#/$defs/missing\"");
    schema_error("{\"type\":\"string\",\"pattern\":\"(a\"}", "pattern: regex: group is not closed");
    schema_error("{\"type\":\"string\",\"pattern\":\"a\\\"\"}", "quote, backslash or control");
    schema_error("{\"allOf\":[{},{}]}", "allOf with more than one schema at the root");
    schema_error("{\"type\":\"integer\",\"minimum\":3,\"maximum\":2}", "no integer");
    schema_error("{\"type\":\"array\",\"minItems\":-1}", "\"minItems\" must be an integer");
    schema_error("{\"type\":", "not valid JSON (line 1");
    schema_error("false", "accepts nothing");
    schema_error("{\"$ref\":\"#\"}", "left-recursive");
}

static void test_wrap(void **st) {
    (void)st;
    kvlm_grammar *g = schema("{\"type\":\"object\",\"properties\":{\"a\":{\"const\":1}},\"required\":[\"a\"]}");
    kvlm_error err;
    kvlm_grammar *w = kvlm_grammar_wrap(g, "<tool_call>\n", "\n</tool_call>", &err);
    assert_non_null(w);
    kvlm_grammar_free(g); /* the wrapped grammar owns a copy */
    expect(w, (const char *[]){"<tool_call>\n{\"a\":1}\n</tool_call>", NULL},
           (const char *[]){"{\"a\":1}", "<tool_call>\n{\"a\":1}\n", "<tool_call>\n{\"a\":2}\n</tool_call>", NULL});
    kvlm_grammar_free(w);
}

/* The union of two wrapped schemas and a GBNF grammar: each one's
 * sentences, nothing of one wrapper with the other's body. */
static void test_any(void **st) {
    (void)st;
    kvlm_error err;
    kvlm_grammar *a = schema("{\"type\":\"object\",\"properties\":{\"a\":{\"const\":1}},\"required\":[\"a\"]}");
    kvlm_grammar *b = schema("{\"type\":\"object\",\"properties\":{\"b\":{\"enum\":[\"x\",\"y\"]}},\"required\":[\"b\"]}");
    kvlm_grammar *wa = kvlm_grammar_wrap(a, "A:", ";", &err), *wb = kvlm_grammar_wrap(b, "B:", ";", &err);
    static const char gbnf[] = "root ::= \"C\" [0-9]+\n";
    kvlm_grammar *c = kvlm_grammar_from_gbnf(gbnf, sizeof gbnf - 1, &err);
    assert_non_null(wa);
    assert_non_null(wb);
    assert_non_null(c);
    const kvlm_grammar *const gs[] = {wa, wb, c};
    kvlm_grammar *u = kvlm_grammar_any(gs, 3, &err);
    assert_non_null(u);
    kvlm_grammar_free(a), kvlm_grammar_free(b), kvlm_grammar_free(wa), kvlm_grammar_free(wb), kvlm_grammar_free(c);
    expect(u, (const char *[]){"A:{\"a\":1};", "B:{\"b\":\"y\"};", "C42", NULL},
           (const char *[]){"A:{\"b\":\"x\"};", "B:{\"a\":1};", "A:{\"a\":1}", "C", "", NULL});
    assert_int_equal(kvlm_grammar_min_bytes(u, &err), 2); /* "C0" */
    kvlm_grammar_free(u);
    assert_null(kvlm_grammar_any(gs, 0, &err));
    assert_int_equal(err.code, KVLM_ERR_ARG);
}

/* ------------------------------------------------------------ masks */

static gr_trie *trie_of(const char *const *pieces, int n) {
    size_t lens[64];
    for (int i = 0; i < n; i++) lens[i] = pieces[i] ? strlen(pieces[i]) : 0;
    kvlm_error err;
    gr_trie *t = gr_trie_from_pieces(pieces, lens, n, &err);
    assert_non_null(t);
    return t;
}

/* The ids a mask allows, as a string of '1'/'0' per token. */
static void mask_str(gr_matcher *m, gr_trie *t, int n, char *out) {
    uint64_t bits[2] = {0, 0};
    int c = gr_token_mask(m, t, bits);
    int k = 0;
    for (int i = 0; i < n; i++) {
        out[i] = (bits[i >> 6] >> (i & 63)) & 1 ? '1' : '0';
        k += out[i] == '1';
    }
    out[n] = 0;
    assert_int_equal(c, k);
}

static void test_mask_exact(void **st) {
    (void)st;
    /* ids:            0     1      2       3         4            5       6      7    8     9      10    11  */
    const char *v[] = {"{", "{\"", "\"a", "\":", "\xc3", "\xa9\"", "\xc3\xa9", "1", "12", "}", "\"}", NULL, " ",
                       /* 13: a partial 3-byte character; 14: its end; 15: a whole one; 16: bad UTF-8 */
                       "\xe2\x82", "\xac", "\xe2\x82\xac", "\x80", "\":1}", "a\"", "\""};
    const int n = 20;
    gr_trie *t = trie_of(v, n);
    kvlm_grammar *g = schema("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"}}}");
    kvlm_error err;
    gr_matcher *m = gr_matcher_new(g, &err);
    char s[64];
    mask_str(m, t, n, s);
    assert_string_equal(s, "11000000000000000000"); /* "{" and "{\"" */
    assert_int_equal(gr_matcher_advance(m, "{", 1), 0);
    mask_str(m, t, n, s);
    /* after "{": a space (ws), the quote of "a", "\"a", "}" and "\"}"? no: "\"}" is not a key */
    assert_string_equal(s, "00100000010010000001"); /* " ", "\"a", "}", "\"" */
    assert_int_equal(gr_matcher_advance(m, "\"a\":", 4), 0);
    mask_str(m, t, n, s);
    /* a string value: the opening quote alone or with string characters after it */
    assert_string_equal(s, "00110000001010000101");
    assert_int_equal(gr_matcher_advance(m, "\"", 1), 0);
    mask_str(m, t, n, s);
    /* inside the string: characters, whole or partial (13: first two bytes of a euro sign), the closing
       quote with what may follow it ("\"}"), never a lone continuation byte (5, 14, 16) */
    assert_string_equal(s, "11001011111011010011");
    assert_int_equal(gr_matcher_advance(m, "\xc3", 1), 0); /* a token that ends inside a character */
    mask_str(m, t, n, s);
    assert_string_equal(s, "00000100000000101000"); /* only tokens that begin with a continuation byte */
    gr_matcher_free(m);
    kvlm_grammar_free(g);
    gr_trie_free(t);
}

/* Many tokens through the self-loop shortcut: a string body accepts every
 * ASCII token without quote/backslash/control, walked or not the same. */
static void test_mask_string_loop(void **st) {
    (void)st;
    enum { N = 300 };
    static char buf[N][8];
    const char *v[N];
    for (int i = 0; i < N; i++) {
        int len = 1 + i % 5;
        for (int k = 0; k < len; k++) buf[i][k] = (char)(0x20 + (i * 7 + k * 13) % 95);
        buf[i][len] = 0;
        v[i] = buf[i];
    }
    size_t lens[N];
    for (int i = 0; i < N; i++) lens[i] = strlen(v[i]);
    kvlm_error err;
    gr_trie *t = gr_trie_from_pieces(v, lens, N, &err);
    kvlm_grammar *g = gbnf("root ::= \"\\\"\" [^\"\\\\\\x00-\\x1F]* \"\\\"\"");
    gr_matcher *m = gr_matcher_new(g, &err);
    assert_int_equal(gr_matcher_advance(m, "\"", 1), 0);
    uint64_t bits[(N + 63) / 64];
    int c = gr_token_mask(m, t, bits);
    int expect_n = 0;
    for (int i = 0; i < N; i++) {
        /* allowed: no backslash, and a quote only as the last byte */
        const char *q = strchr(v[i], '"');
        int ok = !strchr(v[i], '\\') && (!q || q[1] == 0);
        expect_n += ok;
        if (ok != (int)((bits[i >> 6] >> (i & 63)) & 1)) fail_msg("token %d \"%s\": allowed %d", i, v[i], !ok);
        assert_int_equal(kvlm_grammar_match(g, v[i], 0, &err), 0);
    }
    assert_int_equal(c, expect_n);
    /* the cached answer is the same */
    uint64_t again[(N + 63) / 64];
    assert_int_equal(gr_token_mask(m, t, again), c);
    assert_memory_equal(bits, again, sizeof bits);
    gr_matcher_free(m);
    kvlm_grammar_free(g);
    gr_trie_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_literals_classes),   cmocka_unit_test(test_groups_repetition_recursion),
        cmocka_unit_test(test_gbnf_errors),        cmocka_unit_test(test_llamacpp_grammars),
        cmocka_unit_test(test_regex),              cmocka_unit_test(test_json_schema_accepts),
        cmocka_unit_test(test_json_schema_errors), cmocka_unit_test(test_wrap), cmocka_unit_test(test_any),
        cmocka_unit_test(test_mask_exact),         cmocka_unit_test(test_mask_string_loop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
