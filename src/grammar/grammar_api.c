/*
 * The public grammar constructors that are not a syntax of their own:
 * a regular expression (through regex.c's GBNF), a grammar wrapped in
 * fixed text (prefix G suffix) and the union of grammars (G1 | G2 | ...),
 * built on the compiled form directly; the
 * length of a grammar's shortest sentence and whether a text is one.
 */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "grammar/grammar.h"

kvlm_grammar *kvlm_grammar_from_regex(const char *re, size_t len, kvlm_error *err) {
    if (!re) {
        kvlm_error_set(err, KVLM_ERR_ARG, "regex: no expression");
        return NULL;
    }
    gr_text t = {0};
    gr_text_add(&t, "root ::= ", 9);
    if (gr_regex_to_gbnf(re, len, 0, &t, err)) {
        free(t.s);
        return NULL;
    }
    gr_text_add(&t, "\n", 1);
    if (t.oom) {
        free(t.s);
        kvlm_error_set(err, KVLM_ERR_NOMEM, "regex: out of memory");
        return NULL;
    }
    kvlm_grammar *g = gr_parse_gbnf(t.s, t.n, "regex", err);
    free(t.s);
    return g;
}

kvlm_grammar *kvlm_grammar_wrap(const kvlm_grammar *g, const char *prefix, const char *suffix, kvlm_error *err) {
    if (!g) {
        kvlm_error_set(err, KVLM_ERR_ARG, "kvlm_grammar_wrap: no grammar");
        return NULL;
    }
    const size_t np = prefix ? strlen(prefix) : 0, ns = suffix ? strlen(suffix) : 0;
    if (np + ns > (1u << 20)) {
        kvlm_error_set(err, KVLM_ERR_ARG, "kvlm_grammar_wrap: prefix and suffix of %zu bytes (at most 1 MiB)", np + ns);
        return NULL;
    }
    /* the old elements, then one new rule: prefix bytes, old root, suffix bytes, END */
    const size_t n_elems = (size_t)g->n_elems + np + ns + 2;
    kvlm_grammar *w = calloc(1, sizeof *w);
    if (w) {
        w->elems = malloc(n_elems * sizeof *w->elems);
        w->sets = malloc(((size_t)g->n_sets + 256) * sizeof *w->sets);
        w->alts = malloc(((size_t)g->rule_alt[g->n_rules] + 1) * sizeof *w->alts);
        w->rule_alt = malloc(((size_t)g->n_rules + 2) * sizeof *w->rule_alt);
    }
    if (!w || !w->elems || !w->sets || !w->alts || !w->rule_alt) {
        kvlm_grammar_free(w);
        kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
        return NULL;
    }
    memcpy(w->elems, g->elems, (size_t)g->n_elems * sizeof *w->elems);
    memcpy(w->sets, g->sets, (size_t)g->n_sets * sizeof *w->sets);
    memcpy(w->alts, g->alts, (size_t)g->rule_alt[g->n_rules] * sizeof *w->alts);
    memcpy(w->rule_alt, g->rule_alt, ((size_t)g->n_rules + 1) * sizeof *w->rule_alt);
    /* one set per byte value, appended after the grammar's own */
    for (int b = 0; b < 256; b++) {
        gr_set s = {{0}};
        gr_set_add(&s, (unsigned)b);
        w->sets[g->n_sets + b] = s;
    }
    int32_t pos = g->n_elems;
    const int32_t start = pos;
    for (size_t i = 0; i < np; i++) w->elems[pos++] = (gr_elem){GR_BYTES, g->n_sets + (unsigned char)prefix[i]};
    w->elems[pos++] = (gr_elem){GR_RULE, g->root};
    for (size_t i = 0; i < ns; i++) w->elems[pos++] = (gr_elem){GR_BYTES, g->n_sets + (unsigned char)suffix[i]};
    w->elems[pos++] = (gr_elem){GR_END, 0};
    const int32_t n_alts = g->rule_alt[g->n_rules];
    w->alts[n_alts] = start;
    w->rule_alt[g->n_rules + 1] = n_alts + 1;
    w->n_elems = pos;
    w->n_sets = g->n_sets + 256;
    w->n_rules = g->n_rules + 1;
    w->root = g->n_rules;
    return w;
}

kvlm_grammar *kvlm_grammar_any(const kvlm_grammar *const *gs, int n, kvlm_error *err) {
    if (!gs || n < 1) {
        kvlm_error_set(err, KVLM_ERR_ARG, "kvlm_grammar_any: no grammar");
        return NULL;
    }
    /* each grammar's elements, sets, alternatives and rules after the
     * previous ones' (references shifted), then one new root rule with an
     * alternative per grammar: its root, END */
    size_t n_elems = 2 * (size_t)n, n_sets = 0, n_alts = (size_t)n, n_rules = 1;
    for (int i = 0; i < n; i++) {
        if (!gs[i]) {
            kvlm_error_set(err, KVLM_ERR_ARG, "kvlm_grammar_any: grammar %d is NULL", i);
            return NULL;
        }
        n_elems += (size_t)gs[i]->n_elems;
        n_sets += (size_t)gs[i]->n_sets;
        n_alts += (size_t)gs[i]->rule_alt[gs[i]->n_rules];
        n_rules += (size_t)gs[i]->n_rules;
    }
    if (n_elems > INT32_MAX || n_alts > INT32_MAX || n_rules > INT32_MAX) {
        kvlm_error_set(err, KVLM_ERR_ARG, "kvlm_grammar_any: the grammars are too large together");
        return NULL;
    }
    kvlm_grammar *w = calloc(1, sizeof *w);
    if (w) {
        w->elems = malloc(n_elems * sizeof *w->elems);
        w->sets = malloc((n_sets ? n_sets : 1) * sizeof *w->sets);
        w->alts = malloc(n_alts * sizeof *w->alts);
        w->rule_alt = malloc((n_rules + 1) * sizeof *w->rule_alt);
    }
    if (!w || !w->elems || !w->sets || !w->alts || !w->rule_alt) {
        kvlm_grammar_free(w);
        kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
        return NULL;
    }
    int32_t e0 = 0, s0 = 0, a0 = 0, r0 = 0;
    int32_t *roots = malloc((size_t)n * sizeof *roots);
    if (!roots) {
        kvlm_grammar_free(w);
        kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        const kvlm_grammar *g = gs[i];
        for (int32_t k = 0; k < g->n_elems; k++) {
            gr_elem x = g->elems[k];
            if (x.type == GR_BYTES) x.arg += s0;
            else if (x.type == GR_RULE) x.arg += r0;
            w->elems[e0 + k] = x;
        }
        if (g->n_sets) memcpy(w->sets + s0, g->sets, (size_t)g->n_sets * sizeof *w->sets);
        const int32_t na = g->rule_alt[g->n_rules];
        for (int32_t k = 0; k < na; k++) w->alts[a0 + k] = g->alts[k] + e0;
        for (int32_t r = 0; r < g->n_rules; r++) w->rule_alt[r0 + r] = g->rule_alt[r] + a0;
        roots[i] = g->root + r0;
        e0 += g->n_elems, s0 += g->n_sets, a0 += na, r0 += g->n_rules;
    }
    w->rule_alt[r0] = a0;
    for (int i = 0; i < n; i++) {
        w->alts[a0 + i] = e0;
        w->elems[e0++] = (gr_elem){GR_RULE, roots[i]};
        w->elems[e0++] = (gr_elem){GR_END, 0};
    }
    w->rule_alt[r0 + 1] = a0 + n;
    free(roots);
    w->n_elems = e0;
    w->n_sets = s0;
    w->n_rules = r0 + 1;
    w->root = r0;
    return w;
}

int kvlm_grammar_min_bytes(const kvlm_grammar *g, kvlm_error *err) {
    gr_matcher *m = gr_matcher_new(g, err);
    if (!m) return err ? err->code : KVLM_ERR_NOMEM;
    const int d = gr_matcher_min_close(m);
    gr_matcher_free(m);
    return d < GR_NO_CLOSE ? d : kvlm_error_set(err, KVLM_ERR_ARG, "the grammar has no finite sentence");
}

int kvlm_grammar_match(const kvlm_grammar *g, const char *text, size_t len, kvlm_error *err) {
    gr_matcher *m = gr_matcher_new(g, err);
    if (!m) return err ? err->code : KVLM_ERR_NOMEM;
    int rc = gr_matcher_advance(m, text, len);
    int out = rc == 0 ? gr_matcher_accepting(m) : rc == -1 ? 0 : kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    gr_matcher_free(m);
    return out;
}
