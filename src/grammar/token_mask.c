/*
 * Token masks: which tokens' byte strings a matcher state can consume.
 *
 * The vocabulary is a trie of the bytes decode prints for each token, in
 * preorder: node i's subtree is nodes i .. end[i]-1 and its tokens are the
 * contiguous run tokens[tok_begin[i] .. tok_begin[end[i]]), those ending
 * exactly at i first. The mask walks the trie depth first from the state,
 * stepping the state by each edge's byte and pruning a subtree at the first
 * byte the grammar refuses.
 *
 * Three shortcuts make the common JSON states cheap:
 * - self-loops: the ASCII bytes b with step(S, b) == S are computed for the
 *   start state S (the characters of a string body, the digits of a
 *   number), and, for a state that loops on most of ASCII, whether it also
 *   loops on every well-formed multi-byte UTF-8 character (checked over
 *   all of them, byte ranges deduplicated by the state they reach).
 *   Wherever the walk is back in S, a child subtree whose ASCII bytes (the
 *   union kept per node) all loop, and whose other bytes are none or (when
 *   S loops on every character) well-formed UTF-8 per the node's `clean`
 *   bits, is accepted whole without a visit. A token may end inside a
 *   character there: from S every prefix of a character can be completed.
 *   When S loops on every character a JSON string holds unescaped, the
 *   mask starts as the trie's precomputed set of such "plain" tokens and
 *   the walk skips plain subtrees, visiting only the paths to tokens with
 *   a quote, backslash, control byte or broken UTF-8.
 * - counted runs: in a state from which every PLAIN byte leads to one
 *   state, and from that to one state, and so on (a string of bounded
 *   length: each character spends one of the count), that chain is
 *   computed once per mask, one step per level; a subtree of PLAIN-only
 *   tokens no longer than the chain is accepted whole, and PLAIN children
 *   take their state from the chain instead of a step.
 * - a cache of recent states' masks in the matcher (states repeat: every
 *   token inside a string starts from the same state).
 * A closing limit (gr_token_mask_within) leaves out the tokens after which
 * the state needs more bytes to close than the limit: each token allowed
 * is checked by the distance of the state it reaches, and a shortcut is
 * taken only when the distance of every state it stands for (S, S part
 * way through a character: at most 3 bytes more, the chain's states) is
 * within it, else the walk visits that subtree token by token.
 * Special tokens and tokens that print nothing are not in the trie, so no
 * mask ever allows them; the end-of-sequence decision is the caller's.
 */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "grammar/grammar.h"
#include "grammar/matcher.h"

struct gr_trie {
    int vocab;
    int32_t n_nodes, n_tokens;
    uint8_t *byte;         /* edge into the node (root: unused) */
    uint8_t *high;         /* the subtree holds a byte >= 0x80 */
    uint8_t *clean;        /* bit s: every token below reads as well-formed UTF-8 (the last
                              character possibly cut short) from this node's byte on, when
                              the decoder enters it in state s (see utf8_next) */
    int32_t *end;          /* one past the subtree */
    int32_t *tok_begin;    /* n_nodes + 1 entries */
    uint64_t (*ascii)[2];  /* ASCII bytes of the subtree (root excluded) */
    uint16_t *deep;        /* length of the longest token in the subtree (0: none) */
    int max_len;           /* of any token, at most 65535 */
    int32_t *tokens;
    uint64_t *plain;       /* tokens whose bytes are well-formed UTF-8 (the last character possibly
                              cut short) with ASCII only from PLAIN: a JSON string body takes them all */
};

/* The ASCII bytes a JSON string holds unescaped: 0x20..0x7E but '"' and '\\'. */
static const uint64_t PLAIN[2] = {0xFFFFFFFB00000000ull, 0x7FFFFFFFEFFFFFFFull};

static int plain_ascii(unsigned b) { return b < 0x80 && ((PLAIN[b >> 6] >> (b & 63)) & 1); }

typedef struct piece_ref {
    const unsigned char *s;
    size_t n;
    int32_t id;
} piece_ref;

static int cmp_piece(const void *a, const void *b) {
    const piece_ref *x = a, *y = b;
    size_t n = x->n < y->n ? x->n : y->n;
    int c = memcmp(x->s, y->s, n);
    if (c) return c;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

void gr_trie_free(gr_trie *t) {
    if (!t) return;
    free(t->byte);
    free(t->high);
    free(t->clean);
    free(t->deep);
    free(t->end);
    free(t->tok_begin);
    free(t->ascii);
    free(t->tokens);
    free(t->plain);
    free(t);
}

/* UTF-8 decoder states: 0 at a character boundary, 1..3 that many
 * continuation bytes due, 4..7 the restricted second byte after E0, ED,
 * F0 and F4 (no overlong forms, surrogates or code points past U+10FFFF).
 * Returns the state after byte b, or -1 when b cannot come here. */
static int utf8_next(int s, unsigned b) {
    const int cont = b >= 0x80 && b <= 0xBF;
    switch (s) {
    case 0:
        if (b < 0x80) return 0;
        if (b >= 0xC2 && b <= 0xDF) return 1;
        if (b == 0xE0) return 4;
        if (b == 0xED) return 5;
        if (b >= 0xE1 && b <= 0xEF) return 2;
        if (b == 0xF0) return 6;
        if (b >= 0xF1 && b <= 0xF3) return 3;
        if (b == 0xF4) return 7;
        return -1;
    case 1: case 2: case 3: return cont ? s - 1 : -1;
    case 4: return b >= 0xA0 && b <= 0xBF ? 1 : -1;
    case 5: return b >= 0x80 && b <= 0x9F ? 1 : -1;
    case 6: return b >= 0x90 && b <= 0xBF ? 2 : -1;
    default: return b >= 0x80 && b <= 0x8F ? 2 : -1;
    }
}

static gr_trie *build(piece_ref *p, int32_t n, int vocab, kvlm_error *err) {
    qsort(p, (size_t)n, sizeof *p, cmp_piece);
    size_t total = 1, maxlen = 0;
    for (int32_t i = 0; i < n; i++) {
        total += p[i].n;
        if (p[i].n > maxlen) maxlen = p[i].n;
    }
    if (total > (1u << 30)) {
        kvlm_error_set(err, KVLM_ERR_ARG, "token trie: the vocabulary holds %zu bytes (at most 2^30)", total);
        return NULL;
    }
    gr_trie *t = calloc(1, sizeof *t);
    int32_t *parent = malloc(total * sizeof *parent), *path = malloc((maxlen + 1) * sizeof *path);
    if (t) {
        t->byte = malloc(total);
        t->high = calloc(total, 1);
        t->clean = calloc(total, 1);
        t->deep = calloc(total, sizeof *t->deep);
        t->end = malloc(total * sizeof *t->end);
        t->tok_begin = malloc((total + 1) * sizeof *t->tok_begin);
        t->ascii = calloc(total, sizeof *t->ascii);
        t->tokens = malloc(((size_t)n + 1) * sizeof *t->tokens);
        t->plain = calloc(((size_t)vocab + 63) / 64, sizeof *t->plain);
    }
    if (!t || !parent || !path || !t->byte || !t->high || !t->clean || !t->deep || !t->end || !t->tok_begin || !t->ascii || !t->tokens || !t->plain) {
        free(parent);
        free(path);
        gr_trie_free(t);
        kvlm_error_set(err, KVLM_ERR_NOMEM, "token trie: out of memory");
        return NULL;
    }
    t->vocab = vocab;
    int32_t nn = 1, nt = 0;
    size_t depth = 0; /* path[0..depth] are the open nodes, path[0] the root */
    path[0] = 0;
    t->byte[0] = 0;
    t->tok_begin[0] = 0;
    parent[0] = -1;
    const piece_ref *prev = NULL;
    for (int32_t i = 0; i < n; i++) {
        size_t l = 0;
        if (prev)
            while (l < prev->n && l < p[i].n && prev->s[l] == p[i].s[l]) l++;
        while (depth > l) t->end[path[depth--]] = nn;
        for (size_t k = l; k < p[i].n; k++) {
            int32_t id = nn++;
            t->byte[id] = p[i].s[k];
            t->tok_begin[id] = nt;
            parent[id] = path[depth];
            path[++depth] = id;
        }
        t->deep[path[depth]] = (uint16_t)(depth < 65535 ? depth : 65535);
        if ((int)t->deep[path[depth]] > t->max_len) t->max_len = t->deep[path[depth]];
        t->tokens[nt++] = p[i].id;
        prev = &p[i];
    }
    while (depth > 0) t->end[path[depth--]] = nn;
    t->end[0] = nn;
    t->tok_begin[nn] = nt;
    for (int32_t i = nn - 1; i >= 1; i--) {
        unsigned b = t->byte[i];
        if (b >= 0x80) t->high[i] = 1;
        else t->ascii[i][b >> 6] |= 1ull << (b & 63);
        int32_t q = parent[i];
        if (q >= 0 && t->deep[i] > t->deep[q]) t->deep[q] = t->deep[i];
        if (q > 0) {
            t->high[q] |= t->high[i];
            t->ascii[q][0] |= t->ascii[i][0];
            t->ascii[q][1] |= t->ascii[i][1];
        }
    }
    for (int32_t i = 0; i < n; i++) {
        int st = 0;
        for (size_t k = 0; k < p[i].n && st >= 0; k++) {
            unsigned b = p[i].s[k];
            st = b < 0x80 && !plain_ascii(b) ? -1 : utf8_next(st, b);
        }
        if (st >= 0) t->plain[p[i].id >> 6] |= 1ull << (p[i].id & 63);
    }
    for (int32_t i = nn - 1; i >= 1; i--) { /* children come after their parent */
        uint8_t bits = 0;
        for (int st = 0; st < 8; st++) {
            int next = utf8_next(st, t->byte[i]);
            if (next < 0) continue;
            int ok = 1;
            for (int32_t c = i + 1; c < t->end[i] && ok; c = t->end[c]) ok = (t->clean[c] >> next) & 1;
            if (ok) bits |= (uint8_t)(1u << st);
        }
        t->clean[i] = bits;
    }
    t->n_nodes = nn;
    t->n_tokens = nt;
    free(parent);
    free(path);
    return t;
}

gr_trie *gr_trie_from_pieces(const char *const *pieces, const size_t *lens, int n_vocab, kvlm_error *err) {
    if (n_vocab < 1) {
        kvlm_error_set(err, KVLM_ERR_ARG, "token trie: empty vocabulary");
        return NULL;
    }
    piece_ref *p = malloc((size_t)n_vocab * sizeof *p);
    if (!p) {
        kvlm_error_set(err, KVLM_ERR_NOMEM, "token trie: out of memory");
        return NULL;
    }
    int32_t n = 0;
    for (int i = 0; i < n_vocab; i++)
        if (pieces[i] && lens[i] > 0) p[n++] = (piece_ref){(const unsigned char *)pieces[i], lens[i], i};
    gr_trie *t = build(p, n, n_vocab, err);
    free(p);
    return t;
}

gr_trie *gr_trie_build(const kvlm_tokenizer *tok, kvlm_error *err) {
    if (!tok) {
        kvlm_error_set(err, KVLM_ERR_ARG, "a grammar needs the request's tokenizer");
        return NULL;
    }
    const int v = kvlm_tokenizer_vocab_size(tok);
    if (v < 1) {
        kvlm_error_set(err, KVLM_ERR_ARG, "token trie: empty vocabulary");
        return NULL;
    }
    piece_ref *p = malloc((size_t)v * sizeof *p);
    if (!p) {
        kvlm_error_set(err, KVLM_ERR_NOMEM, "token trie: out of memory");
        return NULL;
    }
    int32_t n = 0;
    for (int32_t i = 0; i < v; i++) {
        size_t len = 0;
        const char *s = kvlm_tokenizer_piece(tok, i, &len);
        if (s && len > 0 && !kvlm_tokenizer_is_special(tok, i)) p[n++] = (piece_ref){(const unsigned char *)s, len, i};
    }
    gr_trie *t = build(p, n, v, err);
    free(p);
    return t;
}

int gr_trie_vocab(const gr_trie *t) { return t->vocab; }
void gr_matcher_mask_cache(gr_matcher *m, int on) { m->cache_off = !on; }
size_t gr_trie_nodes(const gr_trie *t) { return (size_t)t->n_nodes; }

/* ------------------------------------------------------------------ walk */

typedef struct walk {
    gr_matcher *m;
    const gr_trie *t;
    uint64_t *bits;
    uint64_t loop[2];
    int utf8_loop;         /* the start state also loops on every well-formed multi-byte character */
    int plain_on;          /* ... and on PLAIN: the trie's plain tokens are in the mask already */
    /* counted runs (a string of bounded length): X_0 = S and X_j+1 the one
     * state every PLAIN byte leads X_j to, for j < chain_len; X_j is
     * chain[chain_off[j] .. chain_off[j + 1]) */
    int32_t *chain;
    size_t *chain_off;
    int chain_len;
    int32_t *buf;          /* states of the open trie nodes, back to back */
    size_t cap;
    size_t root_n;         /* the start state is buf[0 .. root_n) */
    /* closing limit (gr_token_mask_within): a token is allowed only when
     * the state after it closes in at most `limit` bytes; d_root is the
     * start state's distance, max_close the most seen (or bounded) over
     * the allowed tokens, cut 1 once a token was left out for it */
    int limit, d_root, max_close, cut;
} walk;

/* 1 when tokens whose states close within d bytes may be allowed (noted
 * in max_close); 0 (noted in cut) when d is over the limit. */
static int fits(walk *w, int d) {
    if (w->limit >= GR_NO_CLOSE) return 1;
    if (d > w->limit) {
        w->cut = 1;
        return 0;
    }
    if (d > w->max_close) w->max_close = d;
    return 1;
}

/* Whether a whole subtree whose tokens end in the start state (d_root),
 * or at most `partial` bytes short of a character after it, stays within
 * the limit; the shortcuts that accept subtrees unvisited ask first. */
static int bound_fits(walk *w, int partial) {
    if (w->limit >= GR_NO_CLOSE) return 1;
    const int d = w->d_root + (partial ? 3 : 0);
    if (d > w->limit) return 0;
    if (d > w->max_close) w->max_close = d;
    return 1;
}

static void allow(walk *w, int32_t from, int32_t to) {
    for (int32_t i = from; i < to; i++) {
        int32_t id = w->t->tokens[i];
        w->bits[id >> 6] |= 1ull << (id & 63);
    }
}

/* The state stepped from buf[off .. off+n) by byte b, written at off+n;
 * returns its size (0: refused) or a negative status. */
static int step_at(walk *w, size_t off, int n, unsigned b) {
    for (;;) {
        int need = 0;
        gr_state st = {w->buf + off, n};
        int k = gr_state_step(w->m, st, b, w->buf + off + (size_t)n, (int)(w->cap - off - (size_t)n), &need);
        if (k != -1) return k;
        size_t cap = (w->cap + (size_t)need) * 2;
        int32_t *q = realloc(w->buf, cap * sizeof *q);
        if (!q) return KVLM_ERR_NOMEM;
        w->buf = q;
        w->cap = cap;
    }
}

static int is_root_state(const walk *w, size_t off, int n) {
    return (size_t)n == w->root_n && !memcmp(w->buf + off, w->buf, (size_t)n * sizeof *w->buf);
}

/* rel: where the walk stands relative to the start state S: 0 at S itself,
 * 1..7 (only when S loops on every character) S followed by part of a
 * character, in that UTF-8 decoder state; -1 elsewhere. path_plain: the
 * bytes from the trie root to node are well-formed UTF-8 with PLAIN ASCII
 * only, so a plain subtree below holds only plain tokens. */
static int walk_node(walk *w, int32_t node, size_t off, int n, int rel, int path_plain, int chain) {
    const gr_trie *t = w->t;
    if (rel < 0 && is_root_state(w, off, n)) rel = 0;
    const int skip_plain = w->plain_on && rel >= 0 && path_plain;
    for (int32_t c = node + 1; c < t->end[node]; c = t->end[c]) {
        const int plain_below = !t->high[c] && !(t->ascii[c][0] & ~PLAIN[0]) && !(t->ascii[c][1] & ~PLAIN[1]);
        if (chain >= 0 && plain_below && t->deep[c] <= w->chain_len) { /* chain states fit (compute) */
            /* at X_chain after PLAIN bytes only: PLAIN tokens no longer than the run */
            allow(w, t->tok_begin[c], t->tok_begin[t->end[c]]);
            continue;
        }
        if (rel >= 0 && bound_fits(w, rel > 0 || t->high[c])) {
            const int utf8_ok = w->utf8_loop ? (t->clean[c] >> rel) & 1 : rel == 0 && !t->high[c];
            if (skip_plain && utf8_ok && !(t->ascii[c][0] & ~PLAIN[0]) && !(t->ascii[c][1] & ~PLAIN[1]))
                continue; /* all in the mask from t->plain */
            if (utf8_ok && !(t->ascii[c][0] & ~w->loop[0]) && !(t->ascii[c][1] & ~w->loop[1])) {
                allow(w, t->tok_begin[c], t->tok_begin[t->end[c]]);
                continue;
            }
        }
        const unsigned b = t->byte[c];
        if (rel == 0 && b < 0x80 && ((w->loop[b >> 6] >> (b & 63)) & 1)) {
            /* a loop byte: the state stays S, no step to take */
            if (fits(w, w->d_root)) allow(w, t->tok_begin[c], t->tok_begin[c + 1]);
            int rc = t->end[c] > c + 1 ? walk_node(w, c, off, n, 0, path_plain && plain_ascii(b), -1) : 0;
            if (rc) return rc;
            continue;
        }
        int k, next_chain = -1;
        if (chain >= 0 && chain < w->chain_len && plain_ascii(b)) { /* X_chain+1, known */
            const size_t from = w->chain_off[chain + 1], to = w->chain_off[chain + 2];
            k = (int)(to - from);
            if (off + (size_t)n + (size_t)k > w->cap) {
                size_t cap = (w->cap + (size_t)k) * 2;
                int32_t *q = realloc(w->buf, cap * sizeof *q);
                if (!q) return KVLM_ERR_NOMEM;
                w->buf = q;
                w->cap = cap;
            }
            memcpy(w->buf + off + n, w->chain + from, (size_t)k * sizeof *w->buf);
            next_chain = chain + 1;
        } else {
            k = step_at(w, off, n, b);
        }
        if (k < 0) return k;
        if (k == 0) continue;
        if (t->tok_begin[c + 1] > t->tok_begin[c] &&
            (w->limit >= GR_NO_CLOSE || fits(w, gr_state_min_close(w->m, (gr_state){w->buf + off + n, k}))))
            allow(w, t->tok_begin[c], t->tok_begin[c + 1]);
        if (t->end[c] > c + 1) {
            /* a loop byte keeps S, a character byte moves the decoder (S loops on
             * whole characters); anything else: only is_root_state can tell */
            const int loops = b < 0x80 && ((w->loop[b >> 6] >> (b & 63)) & 1);
            const int next = rel < 0 ? -1 : b < 0x80 ? (rel == 0 && loops ? 0 : -1) : w->utf8_loop ? utf8_next(rel, b) : -1;
            const int plain = path_plain && next >= 0 && (b >= 0x80 || plain_ascii(b));
            int rc = walk_node(w, c, off + (size_t)n, k, next, plain, next_chain);
            if (rc) return rc;
        }
    }
    return 0;
}

/* 1 when from the state buf[off .. off+n), every run of `need` continuation
 * bytes, the first in lo..hi and the rest in 80..BF, leads back to the
 * start state; 0 when one does not; a negative status on failure. Bytes
 * whose state equals the previous byte's are not explored again. */
static int conts_lead_home(walk *w, size_t off, int n, int need, unsigned lo, unsigned hi) {
    int32_t prev[64];
    int n_prev = -1;
    for (unsigned b = lo; b <= hi; b++) {
        int k = step_at(w, off, n, b);
        if (k <= 0) return k;
        const int32_t *st = w->buf + off + (size_t)n;
        if (need == 1) {
            if (!is_root_state(w, off + (size_t)n, k)) return 0;
            continue;
        }
        if (k == n_prev && !memcmp(prev, st, (size_t)k * sizeof *st)) continue;
        n_prev = k <= 64 ? k : -1;
        if (k <= 64) memcpy(prev, st, (size_t)k * sizeof *st);
        int r = conts_lead_home(w, off + (size_t)n, k, need - 1, 0x80, 0xBF);
        if (r != 1) return r;
    }
    return 1;
}

/* 1 when the start state loops on every well-formed multi-byte character. */
static int loops_on_utf8(walk *w, int n) {
    static const struct { unsigned lo, hi, need, clo, chi; } lead[] = {
        {0xC2, 0xDF, 1, 0x80, 0xBF}, {0xE0, 0xE0, 2, 0xA0, 0xBF}, {0xE1, 0xEC, 2, 0x80, 0xBF},
        {0xED, 0xED, 2, 0x80, 0x9F}, {0xEE, 0xEF, 2, 0x80, 0xBF}, {0xF0, 0xF0, 3, 0x90, 0xBF},
        {0xF1, 0xF3, 3, 0x80, 0xBF}, {0xF4, 0xF4, 3, 0x80, 0x8F},
    };
    for (size_t i = 0; i < sizeof lead / sizeof lead[0]; i++) {
        int32_t prev[64];
        int n_prev = -1;
        for (unsigned b = lead[i].lo; b <= lead[i].hi; b++) {
            int k = step_at(w, 0, n, b);
            if (k <= 0) return k;
            const int32_t *st = w->buf + n;
            if (k == n_prev && !memcmp(prev, st, (size_t)k * sizeof *st)) continue;
            n_prev = k <= 64 ? k : -1;
            if (k <= 64) memcpy(prev, st, (size_t)k * sizeof *st);
            int r = conts_lead_home(w, (size_t)n, k, (int)lead[i].need, lead[i].clo, lead[i].chi);
            if (r != 1) return r;
        }
    }
    return 1;
}

static uint64_t state_hash(gr_state st) {
    uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)st.n;
    for (int i = 0; i < st.n; i++) h = (h ^ (uint32_t)st.ids[i]) * 0x100000001b3ull;
    return h;
}

void gr_mask_cache_free(gr_matcher *m) {
    for (int i = 0; i < GR_MASK_CACHE; i++) {
        free(m->cache[i].ids);
        free(m->cache[i].bits);
        m->cache[i].ids = NULL;
        m->cache[i].bits = NULL;
    }
}

/* 1 when every PLAIN byte leads the state to the same state: each stack's
 * byte set holds all of PLAIN or none of it, and some stack holds it. */
static int plain_uniform(const gr_matcher *m, const int32_t *ids, size_t n) {
    int any = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] == 0) continue;
        const gr_set *set = &m->g->sets[m->g->elems[m->pos[ids[i]]].arg];
        const uint64_t lo = set->w[0] & PLAIN[0], hi = set->w[1] & PLAIN[1];
        if (!lo && !hi) continue;
        if (lo != PLAIN[0] || hi != PLAIN[1]) return 0;
        any = 1;
    }
    return any;
}

/* The chain X_0 = S, X_1, ... of a counted run (see walk), as long as
 * each state is PLAIN-uniform, its successor is not empty and differs
 * from S (a loop is the self-loop shortcut's), up to the longest token. */
static int build_chain(walk *w, gr_state st) {
    size_t cap = (size_t)st.n * 4 + 64, n = (size_t)st.n;
    const int max = w->t->max_len;
    w->chain = malloc(cap * sizeof *w->chain);
    w->chain_off = malloc(((size_t)max + 2) * sizeof *w->chain_off);
    if (!w->chain || !w->chain_off) return KVLM_ERR_NOMEM;
    memcpy(w->chain, st.ids, n * sizeof *w->chain);
    w->chain_off[0] = 0;
    w->chain_off[1] = n;
    for (int j = 0; j < max; j++) {
        const size_t from = w->chain_off[j], len = w->chain_off[j + 1] - from;
        if (!plain_uniform(w->m, w->chain + from, len)) break;
        int need = 0, k;
        for (;;) {
            k = gr_state_step(w->m, (gr_state){w->chain + from, (int)len}, 'a', w->chain + n, (int)(cap - n), &need);
            if (k != -1) break;
            cap = (cap + (size_t)need) * 2;
            int32_t *q = realloc(w->chain, cap * sizeof *q);
            if (!q) return KVLM_ERR_NOMEM;
            w->chain = q;
        }
        if (k < 0) return k;
        if (k == 0 || ((size_t)k == w->chain_off[1] && !memcmp(w->chain + n, w->chain, (size_t)k * sizeof *w->chain)))
            break;
        n += (size_t)k;
        w->chain_off[j + 2] = n;
        w->chain_len = j + 1;
    }
    return 0;
}

static int compute(gr_matcher *m, const gr_trie *t, gr_state st, int limit, uint64_t *bits, int *max_close, int *cut) {
    walk w = {.m = m, .t = t, .bits = bits, .limit = limit, .d_root = gr_state_min_close(m, st)};
    w.cap = (size_t)st.n * 8 + 1024;
    w.buf = malloc(w.cap * sizeof *w.buf);
    if (!w.buf) return KVLM_ERR_NOMEM;
    memcpy(w.buf, st.ids, (size_t)st.n * sizeof *w.buf);
    w.root_n = (size_t)st.n;
    int rc = 0;
    for (unsigned b = 0; b < 128 && !rc; b++) {
        int k = step_at(&w, 0, st.n, b);
        if (k < 0) rc = k;
        else if (is_root_state(&w, (size_t)st.n, k)) w.loop[b >> 6] |= 1ull << (b & 63);
    }
    /* only a state that loops on most of ASCII (a string body) can loop on
     * every character; the check costs about a thousand steps */
    if (!rc && __builtin_popcountll(w.loop[0]) + __builtin_popcountll(w.loop[1]) >= 64) {
        int r = loops_on_utf8(&w, st.n);
        if (r < 0) rc = r;
        else w.utf8_loop = r;
    }
    if (!rc && w.utf8_loop && !(PLAIN[0] & ~w.loop[0]) && !(PLAIN[1] & ~w.loop[1]) && bound_fits(&w, 1)) {
        memcpy(bits, t->plain, ((size_t)t->vocab + 63) / 64 * sizeof *bits);
        w.plain_on = 1;
    }
    if (!rc && !w.plain_on) rc = build_chain(&w, st);
    if (!rc && w.chain_len > 0 && limit < GR_NO_CLOSE) { /* the run's tokens end in X_1 .. X_chain_len */
        int d = 0;
        for (int j = 1; j <= w.chain_len; j++) {
            const size_t from = w.chain_off[j];
            const int dj = gr_state_min_close(m, (gr_state){w.chain + from, (int)(w.chain_off[j + 1] - from)});
            if (dj > d) d = dj;
        }
        if (d > w.limit) w.chain_len = 0;
        else if (d > w.max_close) w.max_close = d;
    }
    if (!rc) rc = walk_node(&w, 0, 0, st.n, 0, 1, w.chain_len > 0 ? 0 : -1);
    free(w.buf);
    free(w.chain);
    free(w.chain_off);
    if (rc) return rc;
    *max_close = limit < GR_NO_CLOSE ? w.max_close : GR_NO_CLOSE; /* unlimited masks answer only unlimited */
    *cut = w.cut;
    int count = 0;
    for (size_t i = 0; i < ((size_t)t->vocab + 63) / 64; i++) count += __builtin_popcountll(bits[i]);
    return count;
}

int gr_token_mask(gr_matcher *m, const gr_trie *t, uint64_t *bits) { return gr_token_mask_within(m, t, GR_NO_CLOSE, bits); }

int gr_token_mask_within(gr_matcher *m, const gr_trie *t, int limit, uint64_t *bits) {
    const size_t words = ((size_t)t->vocab + 63) / 64;
    int max_close = 0, cut = 0;
    if (limit > GR_NO_CLOSE) limit = GR_NO_CLOSE;
    gr_state st = gr_matcher_state(m);
    if (m->cache_trie != t) {
        gr_mask_cache_free(m);
        m->cache_trie = t;
    }
    const uint64_t h = state_hash(st);
    if (m->cache_off) {
        memset(bits, 0, words * sizeof *bits);
        return compute(m, t, st, limit, bits, &max_close, &cut);
    }
    for (int i = 0; i < GR_MASK_CACHE; i++) {
        gr_mask_entry *e = &m->cache[i];
        if (e->ids && e->hash == h && e->n_ids == st.n && (e->cut ? e->limit == limit : limit >= e->max_close) &&
            !memcmp(e->ids, st.ids, (size_t)st.n * sizeof *st.ids)) {
            memcpy(bits, e->bits, words * sizeof *bits);
            m->cache_hits++;
            return e->count;
        }
    }
    m->cache_misses++;
    memset(bits, 0, words * sizeof *bits);
    int count = compute(m, t, st, limit, bits, &max_close, &cut);
    if (count < 0) return count;
    gr_mask_entry *e = &m->cache[m->cache_next];
    int32_t *ids = malloc(((size_t)st.n + 1) * sizeof *ids);
    uint64_t *copy = e->bits ? e->bits : malloc(words * sizeof *copy);
    if (!ids || !copy) { /* the mask is right; it is just not cached */
        free(ids);
        if (!e->bits) free(copy);
        return count;
    }
    free(e->ids);
    memcpy(ids, st.ids, (size_t)st.n * sizeof *ids);
    memcpy(copy, bits, words * sizeof *bits);
    *e = (gr_mask_entry){.hash = h, .ids = ids, .n_ids = st.n, .bits = copy, .count = count,
                         .limit = limit, .max_close = max_close, .cut = cut};
    m->cache_next = (m->cache_next + 1) % GR_MASK_CACHE;
    return count;
}
