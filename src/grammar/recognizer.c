/*
 * The grammar matcher: a pushdown recogniser over bytes whose state is a
 * sorted, duplicate-free set of stacks.
 *
 * A stack is a node of a persistent tree: (position, parent). Nodes are
 * hash-consed, so equal stacks are the same id, a state is a short array
 * of ints and copying it is cheap. Node 0 is the empty stack: a state that
 * holds it has accepted. Every stack in a state has a GR_BYTES element on
 * top; a stack never holds a GR_END position (returning pops instead), and
 * a reference that ends its alternative pushes no return position (a tail
 * call), so right recursion (repetition) does not deepen stacks.
 *
 * Per node, one memo: for a stack whose top is GR_BYTES, the stacks that
 * follow once its byte is consumed (expanded until each has a byte on
 * top); for a stack whose top is GR_RULE, its expansion. A node's meaning
 * never changes, so memos never go stale: once warm, a step costs a few
 * lookups per stack. Nodes and memos grow with the distinct stacks a
 * generation visits and are freed with the matcher.
 *
 * Per node also its closing distance (grammar.h): the fewest bytes that
 * empty the stack, the rest of its top alternative plus its parent's.
 * A parent is made before its children, so it is set once, at creation.
 */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"

static uint64_t node_hash(int32_t pos, int32_t parent) {
    uint64_t h = ((uint64_t)(uint32_t)pos << 32 | (uint32_t)parent) * 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 31);
}

static int ensure_nodes(gr_matcher *m) {
    if (m->n_nodes < m->cap_nodes) return 0;
    size_t cap = m->cap_nodes ? (size_t)m->cap_nodes * 2 : 1024;
    if (cap > (1u << 30)) return -1;
    int32_t *pos = realloc(m->pos, cap * sizeof *pos);
    if (!pos) return -1;
    m->pos = pos;
    int32_t *par = realloc(m->parent, cap * sizeof *par);
    if (!par) return -1;
    m->parent = par;
    int32_t *mo = realloc(m->memo_off, cap * sizeof *mo);
    if (!mo) return -1;
    m->memo_off = mo;
    int32_t *ml = realloc(m->memo_len, cap * sizeof *ml);
    if (!ml) return -1;
    m->memo_len = ml;
    int32_t *d = realloc(m->dist, cap * sizeof *d);
    if (!d) return -1;
    m->dist = d;
    m->cap_nodes = (int32_t)cap;
    /* the hash table keeps a load under one half */
    size_t slots = cap * 2;
    int32_t *h = malloc(slots * sizeof *h);
    if (!h) return -1;
    memset(h, 0xff, slots * sizeof *h);
    for (int32_t i = 1; i < m->n_nodes; i++) {
        size_t k = node_hash(m->pos[i], m->parent[i]) & (slots - 1);
        while (h[k] >= 0) k = (k + 1) & (slots - 1);
        h[k] = i;
    }
    free(m->slots);
    m->slots = h;
    m->slot_mask = slots - 1;
    return 0;
}

/* The stack (pos on top of parent); -1 when memory ran out. */
static int32_t push_node(gr_matcher *m, int32_t parent, int32_t pos) {
    size_t k = node_hash(pos, parent) & m->slot_mask;
    for (int32_t id; (id = m->slots[k]) >= 0; k = (k + 1) & m->slot_mask)
        if (m->pos[id] == pos && m->parent[id] == parent) return id;
    if (m->n_nodes == m->cap_nodes) {
        if (ensure_nodes(m)) return -1;
        k = node_hash(pos, parent) & m->slot_mask;
        while (m->slots[k] >= 0) k = (k + 1) & m->slot_mask;
    }
    int32_t id = m->n_nodes++;
    m->pos[id] = pos;
    m->parent[id] = parent;
    m->memo_off[id] = -1;
    m->memo_len[id] = 0;
    const int64_t dist = (int64_t)m->suffix[pos] + m->dist[parent];
    m->dist[id] = dist < GR_NO_CLOSE ? (int32_t)dist : GR_NO_CLOSE;
    m->slots[k] = id;
    return id;
}

static int vec_push(gr_vec *v, int32_t x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        int32_t *p = realloc(v->a, cap * sizeof *p);
        if (!p) return -1;
        v->a = p;
        v->cap = cap;
    }
    v->a[v->n++] = x;
    return 0;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* Sorts a[0..n) and drops duplicates; returns the new length. */
static size_t sort_unique(int32_t *a, size_t n) {
    if (n < 2) return n;
    if (n <= 16) { /* insertion sort: states are small */
        for (size_t i = 1; i < n; i++) {
            int32_t x = a[i];
            size_t j = i;
            while (j > 0 && a[j - 1] > x) {
                a[j] = a[j - 1];
                j--;
            }
            a[j] = x;
        }
    } else {
        qsort(a, n, sizeof *a, cmp_i32);
    }
    size_t k = 1;
    for (size_t i = 1; i < n; i++)
        if (a[i] != a[k - 1]) a[k++] = a[i];
    return k;
}

static int memo_of(gr_matcher *m, int32_t node, const int32_t **list, int *n);

/* Appends to out the stacks with a byte on top (or the empty stack) that
 * the stack `node` stands for. */
static int expand_into(gr_matcher *m, int32_t node, gr_vec *out) {
    if (node == 0) return vec_push(out, 0);
    const gr_elem *e = &m->g->elems[m->pos[node]];
    if (e->type == GR_BYTES) return vec_push(out, node);
    const int32_t *l;
    int n;
    if (memo_of(m, node, &l, &n)) return -1;
    for (int i = 0; i < n; i++)
        if (vec_push(out, l[i])) return -1;
    return 0;
}

/* The stack that continues after the element at pos of stack `rest`
 * (pos + 1 pushed unless it closes the alternative). */
static int32_t continue_after(gr_matcher *m, int32_t rest, int32_t pos) {
    return m->g->elems[pos + 1].type == GR_END ? rest : push_node(m, rest, pos + 1);
}

static int compute_memo(gr_matcher *m, int32_t node, gr_vec *out) {
    const kvlm_grammar *g = m->g;
    int32_t pos = m->pos[node], rest = m->parent[node];
    if (g->elems[pos].type == GR_BYTES) {
        int32_t next = continue_after(m, rest, pos);
        return next < 0 ? -1 : expand_into(m, next, out);
    }
    /* GR_RULE: each alternative of the rule, returning to what follows */
    int32_t ret = continue_after(m, rest, pos);
    if (ret < 0) return -1;
    int r = g->elems[pos].arg;
    for (int32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) {
        int32_t start = g->alts[a];
        int32_t s = g->elems[start].type == GR_END ? ret : push_node(m, ret, start);
        if (s < 0 || expand_into(m, s, out)) return -1;
    }
    return 0;
}

static int memo_of(gr_matcher *m, int32_t node, const int32_t **list, int *n) {
    if (m->memo_off[node] < 0) {
        if (++m->depth > 100000) return -1; /* cannot happen without left recursion */
        gr_vec tmp = {0};
        int rc = compute_memo(m, node, &tmp);
        m->depth--;
        if (rc) {
            free(tmp.a);
            return -1;
        }
        size_t k = sort_unique(tmp.a, tmp.n);
        if (m->memo.n + k > (size_t)INT32_MAX) {
            free(tmp.a);
            return -1;
        }
        int32_t off = (int32_t)m->memo.n;
        for (size_t i = 0; i < k; i++)
            if (vec_push(&m->memo, tmp.a[i])) {
                free(tmp.a);
                return -1;
            }
        free(tmp.a);
        m->memo_off[node] = off;
        m->memo_len[node] = (int32_t)k;
    }
    *list = m->memo.a + m->memo_off[node];
    *n = m->memo_len[node];
    return 0;
}

static int32_t add_close(int32_t a, int32_t b) { return a >= GR_NO_CLOSE - b ? GR_NO_CLOSE : a + b; }

/* The fewest bytes from each element position to the end of its
 * alternative. Rule minima first, by a fixed point: start every rule at
 * GR_NO_CLOSE and lower each to its best alternative's sum until nothing
 * changes (each round fixes at least the rules whose shortest derivation
 * is one level deeper, so at most n_rules + 1 rounds). */
static int32_t *close_suffixes(const kvlm_grammar *g) {
    int32_t *rmin = malloc(((size_t)g->n_rules + 1) * sizeof *rmin);
    int32_t *suf = malloc(((size_t)g->n_elems + 1) * sizeof *suf);
    if (!rmin || !suf) {
        free(rmin);
        free(suf);
        return NULL;
    }
    for (int r = 0; r < g->n_rules; r++) rmin[r] = GR_NO_CLOSE;
    for (int changed = 1, round = 0; changed && round <= g->n_rules; round++) {
        changed = 0;
        for (int r = 0; r < g->n_rules; r++)
            for (int32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++) {
                int32_t sum = 0;
                for (int32_t p = g->alts[a]; g->elems[p].type != GR_END; p++)
                    sum = add_close(sum, g->elems[p].type == GR_BYTES ? 1 : rmin[g->elems[p].arg]);
                if (sum < rmin[r]) {
                    rmin[r] = sum;
                    changed = 1;
                }
            }
    }
    for (int32_t i = 0; i < g->n_elems; i++) suf[i] = 0;
    for (int32_t a = 0; a < g->rule_alt[g->n_rules]; a++) {
        int32_t e = g->alts[a];
        while (g->elems[e].type != GR_END) e++;
        for (int32_t p = e - 1; p >= g->alts[a]; p--)
            suf[p] = add_close(suf[p + 1], g->elems[p].type == GR_BYTES ? 1 : rmin[g->elems[p].arg]);
    }
    free(rmin);
    return suf;
}

gr_matcher *gr_matcher_new(const kvlm_grammar *g, kvlm_error *err) {
    gr_matcher *m = g ? calloc(1, sizeof *m) : NULL;
    if (!m) {
        kvlm_error_set(err, g ? KVLM_ERR_NOMEM : KVLM_ERR_ARG, g ? "out of memory" : "no grammar");
        return NULL;
    }
    m->g = g;
    if (!(m->suffix = close_suffixes(g)) || ensure_nodes(m)) goto oom;
    m->pos[0] = -1; /* node 0: the empty stack */
    m->parent[0] = -1;
    m->memo_off[0] = -1;
    m->dist[0] = 0;
    m->n_nodes = 1;
    gr_vec init = {0};
    for (int32_t a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1]; a++) {
        int32_t start = g->alts[a];
        int32_t s = g->elems[start].type == GR_END ? 0 : push_node(m, 0, start);
        if (s < 0 || expand_into(m, s, &init)) {
            free(init.a);
            goto oom;
        }
    }
    init.n = sort_unique(init.a, init.n);
    m->init = init;
    if (gr_matcher_reset_state(m)) goto oom;
    return m;
oom:
    gr_matcher_free(m);
    kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    return NULL;
}

int gr_matcher_reset_state(gr_matcher *m) {
    m->cur.n = 0;
    for (size_t i = 0; i < m->init.n; i++)
        if (vec_push(&m->cur, m->init.a[i])) return -1;
    return 0;
}

void gr_matcher_free(gr_matcher *m) {
    if (!m) return;
    free(m->pos);
    free(m->parent);
    free(m->memo_off);
    free(m->memo_len);
    free(m->dist);
    free(m->suffix);
    free(m->slots);
    free(m->memo.a);
    free(m->init.a);
    free(m->cur.a);
    free(m->tmp.a);
    gr_mask_cache_free(m);
    free(m);
}

gr_state gr_matcher_state(const gr_matcher *m) { return (gr_state){m->cur.a, (int)m->cur.n}; }

int gr_state_min_close(const gr_matcher *m, gr_state st) {
    int32_t d = GR_NO_CLOSE;
    for (int i = 0; i < st.n; i++)
        if (m->dist[st.ids[i]] < d) d = m->dist[st.ids[i]];
    return d;
}

int gr_matcher_min_close(const gr_matcher *m) { return gr_state_min_close(m, gr_matcher_state(m)); }
size_t gr_matcher_nodes(const gr_matcher *m) { return (size_t)m->n_nodes; }

int gr_state_step(gr_matcher *m, gr_state st, unsigned b, int32_t *out, int cap, int *need) {
    int n = 0;
    for (int i = 0; i < st.n; i++) {
        int32_t s = st.ids[i];
        if (s == 0) continue;
        const gr_elem *e = &m->g->elems[m->pos[s]];
        if (!gr_set_has(&m->g->sets[e->arg], b)) continue;
        const int32_t *l;
        int k;
        if (memo_of(m, s, &l, &k)) return KVLM_ERR_NOMEM;
        for (int j = 0; j < k; j++) {
            if (n < cap) out[n] = l[j];
            n++;
        }
    }
    if (n > cap) {
        *need = n;
        return -1;
    }
    return (int)sort_unique(out, (size_t)n);
}

int gr_matcher_advance(gr_matcher *m, const void *bytes, size_t n) {
    const unsigned char *p = bytes;
    gr_vec a = {0}, b = {0};
    for (size_t i = 0; i < m->cur.n; i++)
        if (vec_push(&a, m->cur.a[i])) goto oom;
    for (size_t i = 0; i < n; i++) {
        int need = 0, k;
        for (;;) {
            gr_state st = {a.a, (int)a.n};
            k = gr_state_step(m, st, p[i], b.a, (int)b.cap, &need);
            if (k != -1) break;
            int32_t *q = realloc(b.a, (size_t)need * sizeof *q);
            if (!q) goto oom;
            b.a = q;
            b.cap = (size_t)need;
        }
        if (k < 0) goto oom;
        if (k == 0) {
            free(a.a);
            free(b.a);
            return -1;
        }
        b.n = (size_t)k;
        gr_vec t = a;
        a = b;
        b = t;
    }
    free(m->cur.a);
    free(b.a);
    m->cur = a;
    return 0;
oom:
    free(a.a);
    free(b.a);
    return KVLM_ERR_NOMEM;
}

int gr_matcher_accepting(const gr_matcher *m) { return m->cur.n > 0 && m->cur.a[0] == 0; }
