/*
 * Token masks on real vocabularies: GPT-2's (models/gpt2-tokenizer) and
 * llama.cpp's test vocabularies unpacked by `make test` into the build
 * directory's tests/vocab (Llama 3 and Qwen2 byte-level BPE, Llama 2
 * SentencePiece with byte fallback, ...). JSON
 * documents are tokenized and replayed; at every position the mask, with
 * and without the per-state cache, is compared token by token with a brute
 * force check that steps the grammar state through each token's bytes. So
 * every shortcut of the mask walk (self-loops, UTF-8 tracking, the plain
 * token set) is checked against the plain definition on vocabularies with
 * multi-byte and partial-character tokens. The same for the masks with a
 * closing limit (gr_token_mask_within) at limits around the state's own
 * closing distance, where a token is allowed when the state it reaches
 * closes within the limit, cached masks answering other limits included.
 */
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "helpers.h"

static char vocab_dir[4096]; /* <build>/tests/vocab, next to this binary (the Makefile unpacks them there) */

static const char *SCHEMA =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\",\"minimum\":-20,"
    "\"maximum\":5000},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"x\",\"y z\"]}},\"s\":{\"type\":\"string\","
    "\"pattern\":\"^[a-c]+\\\\.$\"},\"t\":{\"type\":\"string\",\"maxLength\":6},\"u\":{\"type\":\"string\","
    "\"minLength\":3,\"maxLength\":40},\"v\":{\"type\":\"string\",\"minLength\":20}},\"required\":[\"name\",\"n\"]}";

static const char *DOCS[] = {
    "{\"name\": \"Caf\xc3\xa9 \\\"x\\\" \\u00e9\\n \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x98\x80!\", \"n\": -17,"
    " \"tags\": [\"y z\", \"x\"], \"s\": \"abc.\", \"t\": \"\xd0\xbf\xd1\x80\xd0\xb8\", \"u\": \"a counted string, "
    "caf\xc3\xa9 \\\"ok\\\"\", \"v\": \"at least twenty characters, then more of them\"}",
    "{\"name\":\"  leading spaces and\\ttab\",\n \"n\":4999}",
};

/* The brute force: the closing distance of the state after all of piece,
 * -1 when the state cannot consume it. */
static int consumes(gr_matcher *m, gr_state st, const char *p, size_t n, int32_t *a, int32_t *b, int cap) {
    int32_t *cur = a, *nxt = b;
    memcpy(cur, st.ids, (size_t)st.n * sizeof *cur);
    int k = st.n;
    for (size_t i = 0; i < n; i++) {
        int need;
        gr_state s = {cur, k};
        k = gr_state_step(m, s, (unsigned char)p[i], nxt, cap, &need);
        assert_true(k >= 0); /* cap is ample for these grammars */
        if (k == 0) return -1;
        int32_t *t = cur;
        cur = nxt;
        nxt = t;
    }
    return gr_state_min_close(m, (gr_state){cur, k});
}

/* The document's tokens whose bytes are exactly doc, from *skip on. A
 * SentencePiece vocabulary puts a space ("\xe2\x96\x81") in front of the
 * text, so the document is then encoded after a newline, and the tokens up
 * to the newline are skipped. */
static int32_t *doc_tokens(const kvlm_tokenizer *tok, const char *doc, size_t *n, size_t *skip) {
    kvlm_error err;
    int32_t *ids;
    char buf[1024];
    for (int pass = 0; pass < 2; pass++) {
        snprintf(buf, sizeof buf, "%s%s", pass ? "\n" : "", doc);
        assert_int_equal(kvlm_tokenizer_encode(tok, buf, strlen(buf), 0, &ids, n, &err), 0);
        char text[2048];
        size_t t = 0, start = 0;
        *skip = 0;
        for (size_t i = 0; i < *n; i++) {
            size_t len;
            const char *p = kvlm_tokenizer_piece(tok, ids[i], &len);
            assert_true(t + len < sizeof text);
            memcpy(text + t, p, len);
            t += len;
            if (pass && !*skip && t > 0 && text[t - 1] == '\n') {
                *skip = i + 1;
                start = t;
            }
        }
        if (t - start == strlen(doc) && !memcmp(text + start, doc, t - start)) return ids;
        free(ids);
    }
    fail_msg("no tokenization of the document decodes to it");
    return NULL;
}

static void check_vocab(const char *path, const kvlm_grammar *g) {
    kvlm_error err;
    kvlm_tokenizer *tok = kvlm_tokenizer_load(path, &err);
    if (!tok) fail_msg("%s: %s", path, err.msg);
    gr_trie *trie = gr_trie_build(tok, &err);
    assert_non_null(trie);
    const int v = kvlm_tokenizer_vocab_size(tok);
    const size_t words = ((size_t)v + 63) / 64;
    uint64_t *bits = malloc(words * sizeof *bits), *cold = malloc(words * sizeof *cold);
    uint64_t *lim[4], *limc[4];
    int *dist = malloc((size_t)v * sizeof *dist), cut = 0;
    for (int l = 0; l < 4; l++) {
        lim[l] = malloc(words * sizeof **lim);
        limc[l] = malloc(words * sizeof **limc);
    }
    enum { CAP = 4096 };
    int32_t *sa = malloc(CAP * sizeof *sa), *sb = malloc(CAP * sizeof *sb);
    int positions = 0;
    for (size_t d = 0; d < sizeof DOCS / sizeof DOCS[0]; d++) {
        size_t n, skip;
        int32_t *ids = doc_tokens(tok, DOCS[d], &n, &skip);
        gr_matcher *m = gr_matcher_new(g, &err), *mc = gr_matcher_new(g, &err);
        gr_matcher_mask_cache(mc, 0);
        for (size_t i = skip; i <= n; i++) {
            int c = gr_token_mask(m, trie, bits), cc = gr_token_mask(mc, trie, cold);
            assert_int_equal(c, cc);
            assert_memory_equal(bits, cold, ((size_t)v + 63) / 64 * sizeof *bits);
            gr_state st = gr_matcher_state(m);
            const int d0 = gr_matcher_min_close(m), limits[4] = {d0 - 1, d0, d0 + 1, d0 + 3};
            int lc[4];
            for (int l = 0; l < 4; l++) {
                lc[l] = gr_token_mask_within(m, trie, limits[l], lim[l]);
                assert_int_equal(gr_token_mask_within(mc, trie, limits[l], limc[l]), lc[l]);
                assert_memory_equal(lim[l], limc[l], words * sizeof *bits);
            }
            assert_int_equal(gr_token_mask(m, trie, cold), c); /* the limited masks left the cache right */
            assert_memory_equal(bits, cold, words * sizeof *bits);
            st = gr_matcher_state(m);
            int count = 0, lcount[4] = {0};
            for (int32_t id = 0; id < v; id++) {
                size_t len = 0;
                const char *p = kvlm_tokenizer_piece(tok, id, &len);
                dist[id] = p && len > 0 && !kvlm_tokenizer_is_special(tok, id) ? consumes(m, st, p, len, sa, sb, CAP) : -1;
                int want = dist[id] >= 0;
                for (int l = 0; l < 4; l++) {
                    const int lw = want && dist[id] <= limits[l], lg = (int)((lim[l][id >> 6] >> (id & 63)) & 1);
                    if (lw != lg)
                        fail_msg("%s doc %zu position %zu: token %d closing %d, limit %d: mask %d, brute force %d", path,
                                 d, i, id, dist[id], limits[l], lg, lw);
                    lcount[l] += lw;
                    cut += want && !lw;
                }
                int got = (int)((bits[id >> 6] >> (id & 63)) & 1);
                if (want != got) fail_msg("%s doc %zu position %zu: token %d (%zu bytes) mask %d, brute force %d", path, d, i, id, len, got, want);
                count += want;
            }
            assert_int_equal(count, c);
            for (int l = 0; l < 4; l++) assert_int_equal(lcount[l], lc[l]);
            positions++;
            if (i == n) break;
            size_t len;
            const char *p = kvlm_tokenizer_piece(tok, ids[i], &len);
            assert_true((bits[ids[i] >> 6] >> (ids[i] & 63)) & 1); /* the document's own token is allowed */
            assert_int_equal(gr_matcher_advance(m, p, len), 0);
            assert_int_equal(gr_matcher_advance(mc, p, len), 0);
        }
        assert_true(gr_matcher_accepting(m));
        gr_matcher_free(m);
        gr_matcher_free(mc);
        free(ids);
    }
    print_message("%s: %d positions x %d tokens checked (%d left out by the limits)\n", path, positions, v, cut);
    assert_true(cut > 0);
    free(dist);
    for (int l = 0; l < 4; l++) {
        free(lim[l]);
        free(limc[l]);
    }
    free(sa);
    free(sb);
    free(bits);
    free(cold);
    gr_trie_free(trie);
    kvlm_tokenizer_free(tok);
}

static void test_vocabularies(void **st) {
    (void)st;
    kvlm_error err;
    kvlm_grammar *g = kvlm_grammar_from_json_schema(SCHEMA, strlen(SCHEMA), &err);
    if (!g) fail_msg("%s", err.msg);
    check_vocab("models/gpt2-tokenizer", g);
    static const char *const ggufs[] = {"llama-spm", "llama-bpe", "qwen2"};
    for (size_t i = 0; i < sizeof ggufs / sizeof ggufs[0]; i++) {
        char path[4096 + 32];
        snprintf(path, sizeof path, "%s/ggml-vocab-%s.gguf", vocab_dir, ggufs[i]);
        FILE *f = fopen(path, "rb");
        if (!f) fail_msg("%s is missing (make test unpacks it)", path);
        fclose(f);
        check_vocab(path, g);
    }
    kvlm_grammar_free(g);
}

int main(int argc, char **argv) {
    (void)argc;
    char self[4096];
    snprintf(self, sizeof self, "%s", argv[0]);
    snprintf(vocab_dir, sizeof vocab_dir, "%s/vocab", dirname(self));
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_vocabularies)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
