/*
 * libFuzzer target: the grammar compilers and the matcher (src/grammar/).
 * The first byte picks the source syntax (0 GBNF, 1 JSON Schema, 2 regular
 * expression, 3 GBNF wrapped in fixed text); the rest is the source,
 * optionally "\n#####\n" and a text. A grammar that compiles is run over
 * the text byte by byte; at every position the token mask of a small
 * vocabulary (every single byte, and a few multi-byte and partial UTF-8
 * pieces) must agree with stepping the state through each piece, and
 * kvlm_grammar_match must agree with the matcher at the end.
 */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_common.h"
#include "grammar/grammar.h"

static const char *const extra[] = {"{\"", "\":", "\xc3\xa9", "\xe2\x82", "\xac\"", "ab", "\n\n", "true", "\\u00"};
#define N_EXTRA (int)(sizeof extra / sizeof extra[0])
#define N_VOCAB (256 + N_EXTRA)

static gr_trie *vocab(void) {
    static gr_trie *t;
    static char bytes[256];
    if (t) return t;
    const char *pieces[N_VOCAB];
    size_t lens[N_VOCAB];
    for (int i = 0; i < 256; i++) {
        bytes[i] = (char)i;
        pieces[i] = &bytes[i];
        lens[i] = 1;
    }
    for (int i = 0; i < N_EXTRA; i++) {
        pieces[256 + i] = extra[i];
        lens[256 + i] = strlen(extra[i]);
    }
    kvlm_error err;
    t = gr_trie_from_pieces(pieces, lens, N_VOCAB, &err);
    if (!t) abort();
    return t;
}

/* Can the state consume the whole piece? (the definition the mask must meet) */
static int consumes(gr_matcher *m, gr_state st, const char *p, size_t n) {
    int32_t a[512], b[512];
    if (st.n > 512) return -1;
    memcpy(a, st.ids, (size_t)st.n * sizeof *a);
    int k = st.n;
    for (size_t i = 0; i < n; i++) {
        int need;
        k = gr_state_step(m, (gr_state){a, k}, (unsigned char)p[i], b, 512, &need);
        if (k < 0) return -1; /* too many stacks to check here */
        if (k == 0) return 0;
        memcpy(a, b, (size_t)k * sizeof *a);
    }
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint8_t *src, *text;
    size_t ns, nt;
    static const char sep[] = "\n#####\n";
    fuzz_split(data + 1, size - 1, sep, sizeof sep - 1, &src, &ns, &text, &nt);
    kvlm_error err;
    kvlm_grammar *g = NULL;
    switch (data[0] & 3) {
    case 0: g = kvlm_grammar_from_gbnf((const char *)src, ns, &err); break;
    case 1: g = kvlm_grammar_from_json_schema((const char *)src, ns, &err); break;
    case 2: g = kvlm_grammar_from_regex((const char *)src, ns, &err); break;
    default: {
        kvlm_grammar *inner = kvlm_grammar_from_gbnf((const char *)src, ns, &err);
        if (inner) g = kvlm_grammar_wrap(inner, "<w>", "</w>", &err);
        kvlm_grammar_free(inner);
    }
    }
    if (!g) {
        if (!err.msg[0]) abort(); /* every refusal says why */
        return 0;
    }
    gr_trie *t = vocab();
    gr_matcher *m = gr_matcher_new(g, &err);
    if (!m) abort();
    uint64_t bits[(N_VOCAB + 63) / 64];
    size_t i = 0;
    for (; i <= nt && i < 256; i++) {
        int count = gr_token_mask(m, t, bits);
        if (count < 0) abort();
        gr_state st = gr_matcher_state(m);
        for (int id = 0; id < N_VOCAB; id++) {
            char one = (char)id;
            const char *p = id < 256 ? &one : extra[id - 256];
            int want = consumes(m, st, p, id < 256 ? 1 : strlen(p));
            if (want >= 0 && want != (int)((bits[id >> 6] >> (id & 63)) & 1)) abort();
        }
        if (i == nt) break;
        if (gr_matcher_advance(m, text + i, 1) != 0) break;
    }
    if (i == nt && nt < 256) {
        int whole = kvlm_grammar_match(g, (const char *)text, nt, &err);
        if (whole != gr_matcher_accepting(m)) abort();
    }
    gr_matcher_free(m);
    kvlm_grammar_free(g);
    return 0;
}
