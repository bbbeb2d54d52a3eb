/*
 * Building a byte grammar: named and anonymous rules, alternatives of
 * GR_BYTES / GR_RULE elements, deduplicated byte sets, code point classes
 * compiled to UTF-8 byte sequences, and the final flattening into an
 * immutable kvlm_grammar with its checks (every referenced rule defined,
 * no left recursion, so the matcher's expansion always terminates).
 *
 * The builder records an allocation failure in `oom` and ignores later
 * calls, so callers check once, at gr_builder_finish.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "grammar/grammar.h"

void gr_builder_init(gr_builder *b) { memset(b, 0, sizeof *b); }

void gr_builder_free(gr_builder *b) {
    for (int i = 0; i < b->n_rules; i++) {
        for (int a = 0; a < b->rules[i].n_alts; a++) free(b->rules[i].alts[a].e);
        free(b->rules[i].alts);
        free(b->rules[i].name);
    }
    free(b->rules);
    free(b->sets);
    free(b->set_slots);
    memset(b, 0, sizeof *b);
}

static int grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return 0;
    int c = *cap ? *cap * 2 : 8;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

int gr_rule_new(gr_builder *b) {
    if (b->oom || grow((void **)&b->rules, &b->cap_rules, b->n_rules + 1, sizeof *b->rules)) {
        b->oom = 1;
        return 0;
    }
    memset(&b->rules[b->n_rules], 0, sizeof *b->rules);
    return b->n_rules++;
}

int gr_rule_named(gr_builder *b, const char *name, size_t len, int line) {
    for (int i = 0; i < b->n_rules; i++)
        if (b->rules[i].name && strlen(b->rules[i].name) == len && !memcmp(b->rules[i].name, name, len)) return i;
    int r = gr_rule_new(b);
    if (b->oom) return 0;
    char *s = malloc(len + 1);
    if (!s) {
        b->oom = 1;
        return 0;
    }
    memcpy(s, name, len);
    s[len] = 0;
    b->rules[r].name = s;
    b->rules[r].line = line;
    return r;
}

gr_seq *gr_alt_new(gr_builder *b, int r) {
    static gr_seq dummy;
    if (b->oom) return &dummy;
    gr_brule *rule = &b->rules[r];
    if (grow((void **)&rule->alts, &rule->cap_alts, rule->n_alts + 1, sizeof *rule->alts)) {
        b->oom = 1;
        return &dummy;
    }
    gr_seq *s = &rule->alts[rule->n_alts++];
    memset(s, 0, sizeof *s);
    return s;
}

void gr_seq_push(gr_builder *b, gr_seq *s, int type, int arg) {
    if (b->oom) return;
    if (grow((void **)&s->e, &s->cap, s->n + 1, sizeof *s->e)) {
        b->oom = 1;
        return;
    }
    s->e[s->n++] = (gr_elem){type, arg};
}

static size_t set_hash(const gr_set *s) {
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 4; i++) h = (h ^ s->w[i]) * 0x100000001b3ull + (h >> 29);
    return (size_t)h;
}

int gr_set_id(gr_builder *b, const gr_set *set) {
    if (b->oom) return 0;
    if ((size_t)b->n_sets * 2 >= b->set_mask) { /* rehash at half load */
        size_t cap = b->set_mask ? (b->set_mask + 1) * 2 : 256;
        int32_t *slots = malloc(cap * sizeof *slots);
        if (!slots) {
            b->oom = 1;
            return 0;
        }
        memset(slots, 0xff, cap * sizeof *slots);
        for (int i = 0; i < b->n_sets; i++) {
            size_t h = set_hash(&b->sets[i]) & (cap - 1);
            while (slots[h] >= 0) h = (h + 1) & (cap - 1);
            slots[h] = i;
        }
        free(b->set_slots);
        b->set_slots = slots;
        b->set_mask = cap - 1;
    }
    size_t h = set_hash(set) & b->set_mask;
    while (b->set_slots[h] >= 0) {
        if (!memcmp(&b->sets[b->set_slots[h]], set, sizeof *set)) return b->set_slots[h];
        h = (h + 1) & b->set_mask;
    }
    if (grow((void **)&b->sets, &b->cap_sets, b->n_sets + 1, sizeof *b->sets)) {
        b->oom = 1;
        return 0;
    }
    b->sets[b->n_sets] = *set;
    b->set_slots[h] = b->n_sets;
    return b->n_sets++;
}

static void push_byte_range(gr_builder *b, gr_seq *s, unsigned lo, unsigned hi) {
    gr_set set = {{0}};
    for (unsigned c = lo; c <= hi; c++) gr_set_add(&set, c);
    gr_seq_push(b, s, GR_BYTES, gr_set_id(b, &set));
}

void gr_push_literal(gr_builder *b, int r, int alt, const char *s, size_t n) {
    for (size_t i = 0; i < n && !b->oom; i++) {
        unsigned c = (unsigned char)s[i];
        push_byte_range(b, &b->rules[r].alts[alt], c, c);
    }
}

static int utf8_encode(uint32_t cp, unsigned char *o) {
    if (cp < 0x80) { o[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) { o[0] = (unsigned char)(0xC0 | cp >> 6); o[1] = (unsigned char)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | cp >> 12);
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 63));
        o[2] = (unsigned char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | cp >> 18);
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 63));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 63));
    o[3] = (unsigned char)(0x80 | (cp & 63));
    return 4;
}

/* Adds to rule r one alternative per run of UTF-8 byte ranges covering the
 * code points lo..hi: the range is split at the encoding-length boundaries
 * and then until, position by position, every byte varies over a whole
 * continuation range or not at all. */
static void utf8_range(gr_builder *b, int r, uint32_t lo, uint32_t hi) {
    static const uint32_t bound[] = {0x7F, 0x7FF, 0xFFFF};
    if (b->oom || lo > hi) return;
    for (int i = 0; i < 3; i++)
        if (lo <= bound[i] && hi > bound[i]) {
            utf8_range(b, r, lo, bound[i]);
            utf8_range(b, r, bound[i] + 1, hi);
            return;
        }
    unsigned char a[4], z[4];
    int n = utf8_encode(lo, a);
    utf8_encode(hi, z);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                utf8_range(b, r, lo, lo | m);
                utf8_range(b, r, (lo | m) + 1, hi);
                return;
            }
            if ((hi & m) != m) {
                utf8_range(b, r, lo, (hi & ~m) - 1);
                utf8_range(b, r, hi & ~m, hi);
                return;
            }
        }
    }
    gr_seq *s = gr_alt_new(b, r);
    for (int i = 0; i < n; i++) push_byte_range(b, s, a[i], z[i]);
}

void gr_push_codepoints(gr_builder *b, int r, int alt, const uint32_t (*ranges)[2], int n) {
    if (b->oom) return;
    int ascii = 1;
    for (int i = 0; i < n; i++)
        if (ranges[i][1] >= 0x80) ascii = 0;
    if (ascii) {
        gr_set set = {{0}};
        for (int i = 0; i < n; i++)
            for (uint32_t c = ranges[i][0]; c <= ranges[i][1]; c++) gr_set_add(&set, c);
        gr_seq_push(b, &b->rules[r].alts[alt], GR_BYTES, gr_set_id(b, &set));
        return;
    }
    /* the ASCII part is one byte set (one alternative), so a state inside
     * the class treats all its ASCII bytes alike */
    int cls = gr_rule_new(b);
    gr_set ascii_set = {{0}};
    int has_ascii = 0;
    for (int i = 0; i < n; i++)
        for (uint32_t c = ranges[i][0]; c <= ranges[i][1] && c < 0x80; c++) {
            gr_set_add(&ascii_set, c);
            has_ascii = 1;
        }
    if (has_ascii) {
        gr_seq *s = gr_alt_new(b, cls);
        gr_seq_push(b, s, GR_BYTES, gr_set_id(b, &ascii_set));
    }
    for (int i = 0; i < n && !b->oom; i++) {
        uint32_t lo = ranges[i][0] < 0x80 ? 0x80 : ranges[i][0], hi = ranges[i][1] > 0x10FFFF ? 0x10FFFF : ranges[i][1];
        if (lo > hi) continue;
        if (lo <= 0xD7FF) utf8_range(b, cls, lo, hi < 0xD7FF ? hi : 0xD7FF);
        if (hi >= 0xE000) utf8_range(b, cls, lo > 0xE000 ? lo : 0xE000, hi);
    }
    if (!b->oom) gr_seq_push(b, &b->rules[r].alts[alt], GR_RULE, cls);
}

/* --------------------------------------------------------- finishing */

static const char *rule_label(const gr_builder *b, int r) { return b->rules[r].name ? b->rules[r].name : "(group)"; }

/* Left recursion: rule A reaches itself through leftmost positions (those
 * after only nullable elements). Nullability is a fixpoint; then a depth
 * first search over the "leftmost reference" graph finds a cycle. */
static int find_left_cycle(const gr_builder *b, char *nullable, int *color, int *stack) {
    int changed = 1;
    while (changed) {
        changed = 0;
        for (int r = 0; r < b->n_rules; r++) {
            if (nullable[r]) continue;
            for (int a = 0; a < b->rules[r].n_alts && !nullable[r]; a++) {
                const gr_seq *s = &b->rules[r].alts[a];
                int all = 1;
                for (int i = 0; i < s->n && all; i++) all = s->e[i].type == GR_RULE && nullable[s->e[i].arg];
                if (all) nullable[r] = changed = 1;
            }
        }
    }
    for (int start = 0; start < b->n_rules; start++) {
        if (color[start]) continue;
        /* iterative DFS: stack of rules; color 1 on the path, 2 done */
        int sp = 0;
        stack[sp++] = start;
        color[start] = 1;
        while (sp > 0) {
            int r = stack[sp - 1], next = -1;
            for (int a = 0; a < b->rules[r].n_alts && next < 0; a++) {
                const gr_seq *s = &b->rules[r].alts[a];
                for (int i = 0; i < s->n; i++) {
                    if (s->e[i].type != GR_RULE) break;
                    int t = s->e[i].arg;
                    if (color[t] == 1) return t;
                    if (color[t] == 0) {
                        next = t;
                        break;
                    }
                    if (!nullable[t]) break;
                }
            }
            if (next >= 0) {
                color[next] = 1;
                stack[sp++] = next;
            } else {
                color[r] = 2;
                sp--;
            }
        }
    }
    return -1;
}

kvlm_grammar *gr_builder_finish(gr_builder *b, int root, const char *what, kvlm_error *err) {
    if (b->oom) {
        kvlm_error_set(err, KVLM_ERR_NOMEM, "%s: out of memory", what);
        return NULL;
    }
    for (int r = 0; r < b->n_rules; r++)
        if (b->rules[r].name && !b->rules[r].defined) {
            kvlm_error_set(err, KVLM_ERR_ARG, "%s: rule \"%s\" is used (line %d) but never defined", what,
                           b->rules[r].name, b->rules[r].line);
            return NULL;
        }
    char *nullable = calloc((size_t)b->n_rules + 1, 1);
    int *color = calloc((size_t)b->n_rules + 1, sizeof *color), *stack = malloc(((size_t)b->n_rules + 1) * sizeof *stack);
    int cyc = nullable && color && stack ? find_left_cycle(b, nullable, color, stack) : -2;
    free(nullable);
    free(color);
    free(stack);
    if (cyc == -2) {
        kvlm_error_set(err, KVLM_ERR_NOMEM, "%s: out of memory", what);
        return NULL;
    }
    if (cyc >= 0) {
        kvlm_error_set(err, KVLM_ERR_ARG, "%s: rule \"%s\" is left-recursive (it can begin with itself); rewrite it "
                       "with repetition", what, rule_label(b, cyc));
        return NULL;
    }
    size_t n_elems = 0, n_alts = 0;
    for (int r = 0; r < b->n_rules; r++) {
        n_alts += (size_t)b->rules[r].n_alts;
        for (int a = 0; a < b->rules[r].n_alts; a++) n_elems += (size_t)b->rules[r].alts[a].n + 1;
    }
    if (n_elems > (1u << 30)) {
        kvlm_error_set(err, KVLM_ERR_ARG, "%s: the grammar has %zu elements (at most 2^30)", what, n_elems);
        return NULL;
    }
    kvlm_grammar *g = calloc(1, sizeof *g);
    if (g) {
        g->elems = malloc((n_elems + 1) * sizeof *g->elems);
        g->sets = malloc(((size_t)b->n_sets + 1) * sizeof *g->sets);
        g->alts = malloc((n_alts + 1) * sizeof *g->alts);
        g->rule_alt = malloc(((size_t)b->n_rules + 1) * sizeof *g->rule_alt);
    }
    if (!g || !g->elems || !g->sets || !g->alts || !g->rule_alt) {
        kvlm_grammar_free(g);
        kvlm_error_set(err, KVLM_ERR_NOMEM, "%s: out of memory", what);
        return NULL;
    }
    if (b->n_sets) memcpy(g->sets, b->sets, (size_t)b->n_sets * sizeof *g->sets);
    g->n_sets = b->n_sets;
    int32_t pos = 0, alt = 0;
    for (int r = 0; r < b->n_rules; r++) {
        g->rule_alt[r] = alt;
        for (int a = 0; a < b->rules[r].n_alts; a++) {
            g->alts[alt++] = pos;
            const gr_seq *s = &b->rules[r].alts[a];
            for (int i = 0; i < s->n; i++) g->elems[pos++] = s->e[i];
            g->elems[pos++] = (gr_elem){GR_END, 0};
        }
    }
    g->rule_alt[b->n_rules] = alt;
    g->n_elems = pos;
    g->n_rules = b->n_rules;
    g->root = root;
    return g;
}

void kvlm_grammar_free(kvlm_grammar *g) {
    if (!g) return;
    free(g->elems);
    free(g->sets);
    free(g->alts);
    free(g->rule_alt);
    free(g);
}

/* ------------------------------------------------------------ gr_text */

void gr_text_add(gr_text *t, const char *s, size_t n) {
    if (t->oom) return;
    if (t->n + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->n + n + 1) cap *= 2;
        char *p = realloc(t->s, cap);
        if (!p) {
            t->oom = 1;
            return;
        }
        t->s = p;
        t->cap = cap;
    }
    memcpy(t->s + t->n, s, n);
    t->n += n;
    t->s[t->n] = 0;
}

void gr_text_printf(gr_text *t, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof buf) {
        t->oom = 1;
        return;
    }
    gr_text_add(t, buf, (size_t)n);
}

void gr_text_literal(gr_text *t, const char *s, size_t n) {
    gr_text_add(t, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned c = (unsigned char)s[i];
        if ((c >= 0x20 && c != 0x7F && c != '"' && c != '\\')) gr_text_add(t, (const char *)&s[i], 1);
        else gr_text_printf(t, "\\x%02X", c);
    }
    gr_text_add(t, "\"", 1);
}
