/*
 * The paged KV cache under sharing: a randomized property test of create /
 * append (reserve, write, commit, with aborts) / fork / free with prefix
 * reuse and eviction (no leaked block, no block freed while referenced, no
 * shared block written, an abort changes nothing, exact byte accounting,
 * and every sequence reads back exactly the states its own tokens
 * produced); the append protocol's abort on a copied tail; then, through the engine, batched decode against single
 * decode, a fork against an independent run, a prefix-cache hit against a
 * cold run, and a colliding hash that must not hand out another prompt's KV.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kvlm.h"
#include "runtime/attention.h"
#include "runtime/kvcache.h"

#define TINY "tests/fixtures/gpt2/hf_f32"

/* ---------------------------------------------------------- property test */

/* The state a position holds: a hash of the tokens up to and including it,
 * written as four exact 16-bit pieces into the first floats of its layer-0,
 * head-0 key (the rest of the K/V stays zero). */
static uint64_t prefix_sig(const int32_t *t, int p) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i <= p; i++) h = (h ^ (uint32_t)t[i]) * 1099511628211ull;
    return h;
}

#define KV_W (4 * 16) /* gpt2-tiny: 4 KV heads x head dim 16 */

static void check_contents(const kvlm_kv *kv) {
    for (int i = 0; i < kv_max_seqs(kv); i++) {
        if (!kv_seq_valid(kv, i)) continue;
        const int32_t *toks = kv_seq_tokens(kv, i);
        for (int p = 0; p < kvlm_kv_seq_len(kv, i, NULL); p++) {
            float k[16];
            attn_load_kv(kv, i, p, 0, 0, 0, k);
            uint64_t got = 0;
            for (int q = 0; q < 4; q++) got |= (uint64_t)k[q] << (16 * q);
            if (got != prefix_sig(toks, p)) fail_msg("seq %d position %d holds another sequence's state", i, p);
        }
    }
}

/* Tokens stored, recomputed from the block tables. */
static size_t expected_stored(const kvlm_kv *kv, size_t n_blocks) {
    int *fill = calloc(n_blocks, sizeof(int));
    const int bs = kv_block_size(kv);
    for (int i = 0; i < kv_max_seqs(kv); i++) {
        const int *table;
        const int nb = kv_seq_blocks(kv, i, &table), len = kvlm_kv_seq_len(kv, i, NULL);
        for (int j = 0; j < nb; j++) {
            int f = len - j * bs;
            f = f < 0 ? 0 : f > bs ? bs : f;
            if (fill[table[j]] < f) fill[table[j]] = f;
        }
    }
    size_t sum = 0;
    for (size_t b = 0; b < n_blocks; b++) sum += (size_t)fill[b];
    free(fill);
    return sum;
}

/* Appends n tokens to seq as the engine does: reserve the slots, write
 * their K/V, commit. Between reserve and commit the invariant check
 * verifies that every reserved slot is in a private, unindexed block (no
 * shared block is ever written). Every other append is aborted once first,
 * which must leave the cache exactly as it was. */
static int append(kvlm_kv *kv, int seq, const int32_t *toks, int n, int abort_first) {
    kvlm_error err;
    const int len = kvlm_kv_seq_len(kv, seq, NULL);
    kvlm_kv_stats before, after;
    kvlm_kv_get_stats(kv, &before);
    if (abort_first && kv_append_reserve(kv, seq, n, &err) == KVLM_OK) {
        kv_append_abort(kv, seq);
        kvlm_kv_get_stats(kv, &after);
        assert_int_equal(kvlm_kv_seq_len(kv, seq, NULL), len);
        assert_int_equal(kv_append_pending(kv, seq), 0);
        assert_int_equal(after.tokens_stored, before.tokens_stored);
        assert_int_equal(after.blocks_used, before.blocks_used);
        assert_int_equal(after.blocks_shared, before.blocks_shared);
        if (kv_check_invariants(kv, &err)) fail_msg("after an abort: %s", err.msg);
    }
    if (kv_append_reserve(kv, seq, n, &err)) {
        assert_int_equal(kvlm_kv_seq_len(kv, seq, NULL), len); /* a failed reservation changes nothing */
        return -1;
    }
    assert_int_equal(kv_append_pending(kv, seq), n);
    if (kv_check_invariants(kv, &err)) fail_msg("seq %d with %d positions reserved: %s", seq, n, err.msg);
    int32_t all[64];
    memcpy(all, kv_seq_tokens(kv, seq), (size_t)len * 4);
    memcpy(all + len, toks, (size_t)n * 4);
    const kern_ops *ops = kern_select(KVLM_ISA_SCALAR);
    for (int p = len; p < len + n; p++) {
        float k[KV_W] = {0}, v[KV_W] = {0};
        uint64_t sig = prefix_sig(all, p);
        for (int q = 0; q < 4; q++) k[q] = (float)((sig >> (16 * q)) & 0xFFFF);
        attn_store_kv(ops, kv, seq, p, 0, k, v);
    }
    kv_append_commit(kv, seq, toks);
    assert_int_equal(kvlm_kv_seq_len(kv, seq, NULL), len + n);
    return 0;
}

/* reserve: kvlm_kv_options.reserve_tokens (0: paged with prefix caching;
 * 6: every sequence holds 2 blocks of its own from creation, forks copy
 * into them and share the rest). */
static void property_run(int reserve) {
    kvlm_error err;
    kvlm_model *m = kvlm_model_synthetic("gpt2-tiny", KVLM_F32, 1, NULL, &err); /* n_ctx 32 */
    assert_non_null(m);
    for (uint32_t seed = 1; seed <= 4; seed++) {
        kvlm_kv_options o = kvlm_kv_default_params();
        o.dtype = KVLM_F32;
        o.block_size = 4;
        o.n_blocks = 20;
        o.max_seqs = 8;
        o.reserve_tokens = reserve;
        kvlm_kv *kv = kvlm_kv_create(m, &o, &err);
        assert_non_null(kv);
        assert_int_equal(kv_new_seq_blocks(kv), (size_t)(reserve + 3) / 4);
        int live[8], n_live = 0;
        uint32_t r = seed * 2654435761u;
#define RND(n) ((r = r * 1664525u + 1013904223u), (int)((r >> 8) % (uint32_t)(n)))
        for (int step = 0; step < 3000; step++) {
            int op = RND(10);
            if (op < 3 && n_live < 8) { /* new sequence with a prompt from a small alphabet: prefix hits */
                int32_t prompt[32];
                int n = 1 + RND(16);
                for (int i = 0; i < n; i++) prompt[i] = RND(3);
                int cached, id = kvlm_kv_seq_new_prefixed(kv, prompt, n, &cached, &err);
                if (id >= 0) {
                    assert_true(cached < n && cached % 4 == 0);
                    if (append(kv, id, prompt + cached, n - cached, step % 2)) kvlm_kv_seq_free(kv, id);
                    else live[n_live++] = id;
                }
            } else if (op < 6 && n_live) { /* append */
                int i = RND(n_live), n = 1 + RND(5);
                int32_t t[8];
                for (int k = 0; k < n; k++) t[k] = RND(3);
                if (kvlm_kv_seq_len(kv, live[i], NULL) + n <= 32) append(kv, live[i], t, n, step % 2);
            } else if (op < 8 && n_live && n_live < 8) { /* fork */
                int id = kvlm_kv_seq_fork(kv, live[RND(n_live)], &err);
                if (id >= 0) live[n_live++] = id;
            } else if (op == 8 && n_live) { /* truncate to a block boundary (0: recompute from scratch) */
                int i = RND(n_live), len = kvlm_kv_seq_len(kv, live[i], NULL);
                assert_int_equal(kvlm_kv_seq_truncate(kv, live[i], RND(len / 4 + 1) * 4, &err), 0);
            } else if (n_live) { /* free */
                int i = RND(n_live);
                kvlm_kv_seq_free(kv, live[i]);
                live[i] = live[--n_live];
            }
            if (kv_check_invariants(kv, &err)) fail_msg("seed %u step %d: %s", seed, step, err.msg);
            kvlm_kv_stats st;
            kvlm_kv_get_stats(kv, &st);
            assert_int_equal(st.tokens_stored, expected_stored(kv, 20));
            assert_int_equal(st.bytes_live, st.tokens_stored * st.bytes_per_token);
            assert_int_equal(st.bytes_reserved, st.blocks_used * st.block_bytes);
            assert_int_equal(st.blocks_used + st.blocks_cached + st.blocks_free, 20);
            check_contents(kv);
        }
        kvlm_kv_stats st;
        kvlm_kv_get_stats(kv, &st);
        /* every path was exercised (a reservation turns the prefix cache off) */
        assert_true(st.cow_copies > 0);
        assert_true(reserve ? st.prefix_queries == 0 : st.prefix_hits > 0 && st.evictions > 0);
        while (n_live) kvlm_kv_seq_free(kv, live[--n_live]);
        kvlm_kv_get_stats(kv, &st);
        assert_int_equal(st.blocks_used, 0);
        assert_int_equal(kv_check_invariants(kv, &err), 0);
        kvlm_kv_free(kv);
    }
    kvlm_model_free(m);
}

static void test_property(void **state) {
    (void)state;
    property_run(0);
}

static void test_property_reserved(void **state) {
    (void)state;
    property_run(6);
}

/* The append protocol on its own: a reservation that had to copy a shared
 * tail block, then aborted, leaves the block table exactly as it was; a
 * pending append blocks fork and truncate; a reservation the pool cannot
 * hold fails without changing the sequence. */
static void test_append_abort_restores(void **state) {
    (void)state;
    kvlm_error err;
    kvlm_model *m = kvlm_model_synthetic("gpt2-tiny", KVLM_F32, 1, NULL, &err); /* n_ctx 32 */
    assert_non_null(m);
    kvlm_kv_options o = kvlm_kv_default_params();
    o.dtype = KVLM_F32;
    o.block_size = 4;
    o.n_blocks = 5;
    o.max_seqs = 3;
    kvlm_kv *kv = kvlm_kv_create(m, &o, &err);
    assert_non_null(kv);
    const int32_t toks[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int a = kvlm_kv_seq_new(kv, &err);
    assert_int_equal(append(kv, a, toks, 6, 0), 0); /* blocks: one full, one with 2 of 4 slots */
    int b = kvlm_kv_seq_fork(kv, a, &err);
    assert_true(b >= 0);
    const int *ta, *tb;
    int before[8];
    assert_int_equal(kv_seq_blocks(kv, b, &tb), 2);
    memcpy(before, tb, 2 * sizeof(int));
    kvlm_kv_stats st0, st;
    kvlm_kv_get_stats(kv, &st0);
    assert_int_equal(st0.blocks_shared, 2);

    assert_int_equal(kv_append_reserve(kv, b, 3, &err), 0); /* copies the shared tail, takes one more block */
    assert_int_equal(kv_seq_blocks(kv, b, &tb), 3);
    assert_int_not_equal(tb[1], before[1]);
    assert_int_equal(kv_check_invariants(kv, &err), 0);
    assert_int_equal(kvlm_kv_seq_fork(kv, b, &err), KVLM_ERR_ARG); /* an append in progress */
    assert_int_equal(kvlm_kv_seq_truncate(kv, b, 2, &err), KVLM_ERR_ARG);
    assert_int_equal(kv_append_reserve(kv, b, 1, &err), KVLM_ERR_ARG); /* one pending append at a time */
    kv_append_abort(kv, b);
    assert_int_equal(kv_seq_blocks(kv, b, &tb), 2);
    assert_memory_equal(tb, before, 2 * sizeof(int));
    kvlm_kv_get_stats(kv, &st);
    assert_int_equal(st.blocks_used, st0.blocks_used);
    assert_int_equal(st.blocks_shared, 2);
    assert_int_equal(st.cow_copies, 0);
    assert_int_equal(kv_check_invariants(kv, &err), 0);

    /* 5 blocks: 2 shared, so b can copy its tail and take at most 2 more. */
    assert_int_equal(kv_append_reserve(kv, b, 26, &err), KVLM_ERR_NOMEM);
    assert_int_equal(kv_seq_blocks(kv, b, &tb), 2);
    assert_memory_equal(tb, before, 2 * sizeof(int));
    assert_int_equal(kvlm_kv_seq_len(kv, b, NULL), 6);
    assert_int_equal(kv_append_reserve(kv, b, 27, &err), KVLM_ERR_ARG); /* past the 32-token window */

    assert_int_equal(append(kv, b, toks, 3, 1), 0); /* now for real: the copy is counted once */
    kvlm_kv_get_stats(kv, &st);
    assert_int_equal(st.cow_copies, 1);
    assert_int_equal(st.blocks_shared, 1);
    assert_int_equal(kv_seq_blocks(kv, a, &ta), 2);
    assert_memory_equal(ta, before, 2 * sizeof(int)); /* the parent kept the original */
    check_contents(kv);
    assert_int_equal(kv_check_invariants(kv, &err), 0);

    /* Rolled back into an indexed block: the next append copies it, and the
     * indexed original stays cached for prefix reuse. */
    kvlm_kv_seq_free(kv, a);
    kvlm_kv_seq_free(kv, b);
    kvlm_kv_get_stats(kv, &st);
    assert_int_equal(st.blocks_cached, 2); /* [1 2 3 4] and [5 6 1 2] */
    int c = kvlm_kv_seq_new(kv, &err);
    assert_int_equal(append(kv, c, toks, 8, 0), 0); /* [1 2 3 4] joins the cached twin, [5 6 7 8] is indexed */
    assert_int_equal(kvlm_kv_seq_truncate(kv, c, 6, &err), 0);
    const int *tc;
    assert_int_equal(kv_seq_blocks(kv, c, &tc), 2);
    const int indexed = tc[1];
    assert_int_equal(kv_append_reserve(kv, c, 1, &err), 0);
    assert_int_equal(kv_seq_blocks(kv, c, &tc), 2);
    assert_int_not_equal(tc[1], indexed);
    assert_int_equal(kv_check_invariants(kv, &err), 0);
    kv_append_abort(kv, c);
    assert_int_equal(kv_seq_blocks(kv, c, &tc), 2);
    assert_int_equal(tc[1], indexed);
    assert_int_equal(append(kv, c, toks + 7, 1, 0), 0);
    kvlm_kv_get_stats(kv, &st);
    assert_int_equal(st.blocks_cached, 3);
    assert_int_equal(st.blocks_free, 0);
    assert_int_equal(st.cow_copies, 2);
    check_contents(kv);
    assert_int_equal(kv_check_invariants(kv, &err), 0);
    kvlm_kv_free(kv);
    kvlm_model_free(m);
}

/* ---------------------------------------------------------- through the engine */

typedef struct rig {
    kvlm_model *m;
    kvlm_kv *kv;
    kvlm_engine *e;
    int V;
} rig;

static rig rig_open(kv_block_hash_fn hash) {
    kvlm_error err;
    rig r = {0};
    r.m = kvlm_model_load(TINY, NULL, &err);
    assert_non_null(r.m);
    r.V = kvlm_model_config(r.m)->vocab_size;
    kvlm_kv_options o = kvlm_kv_default_params();
    o.dtype = KVLM_F32;
    o.block_size = 4;
    o.max_seqs = 6;
    r.kv = kvlm_kv_create(r.m, &o, &err);
    assert_non_null(r.kv);
    assert_int_equal(kv_set_block_hash(r.kv, hash, &err), 0);
    kvlm_engine_options eo = kvlm_engine_default_params();
    eo.threads = 2;
    r.e = kvlm_engine_create(r.m, r.kv, &eo, &err);
    assert_non_null(r.e);
    return r;
}

static void rig_close(rig *r) {
    kvlm_engine_free(r->e);
    kvlm_kv_free(r->kv);
    kvlm_model_free(r->m);
}

static double maxdiff(const float *a, const float *b, int n) {
    double d = 0;
    for (int i = 0; i < n; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    return d;
}

static void step1(rig *r, int seq, const int32_t *t, int n, float *logits) {
    kvlm_error err;
    kvlm_batch_item it = {seq, t, n, 0};
    if (kvlm_engine_step(r->e, &it, 1, logits, &err)) fail_msg("%s", err.msg);
}

static void test_batched_equals_single(void **state) {
    (void)state;
    rig r = rig_open(NULL);
    kvlm_error err;
    const int32_t p[3][9] = {{5, 9, 13, 2, 7}, {11, 3, 8, 1, 4, 6, 10, 12, 14}, {20}};
    const int len[3] = {5, 9, 1};
    int a[3], b[3];
    float *lb = malloc((size_t)3 * r.V * 4), *ls = malloc((size_t)r.V * 4);
    for (int i = 0; i < 3; i++) a[i] = kvlm_kv_seq_new(r.kv, &err), b[i] = kvlm_kv_seq_new(r.kv, &err);
    kvlm_batch_item items[3];
    for (int i = 0; i < 3; i++) items[i] = (kvlm_batch_item){a[i], p[i], len[i], 0};
    assert_int_equal(kvlm_engine_step(r.e, items, 3, lb, &err), 0); /* mixed prefill lengths in one step */
    for (int i = 0; i < 3; i++) {
        step1(&r, b[i], p[i], len[i], ls);
        assert_true(maxdiff(lb + (size_t)i * r.V, ls, r.V) < 1e-5);
    }
    for (int s = 0; s < 6; s++) { /* batched decode of 3 against one at a time */
        int32_t tok[3] = {(int32_t)(30 + s), (int32_t)(40 + s), (int32_t)(50 + s)};
        for (int i = 0; i < 3; i++) items[i] = (kvlm_batch_item){a[i], &tok[i], 1, 0};
        assert_int_equal(kvlm_engine_step(r.e, items, 3, lb, &err), 0);
        for (int i = 0; i < 3; i++) {
            step1(&r, b[i], &tok[i], 1, ls);
            double d = maxdiff(lb + (size_t)i * r.V, ls, r.V);
            if (d >= 1e-5) fail_msg("decode step %d seq %d: %g", s, i, d);
        }
    }
    free(lb);
    free(ls);
    rig_close(&r);
}

/* Greedy-free sampled continuation of `seq` with a seeded sampler. */
static void sample_run(rig *r, int seq, const float *first_logits, uint64_t seed, int n, int32_t *out) {
    kvlm_error err;
    kvlm_sampler_options so = kvlm_sampler_default_params();
    so.temperature = 1.0f, so.seed = seed;
    kvlm_sampler *smp = kvlm_sampler_create(&so, r->V, &err);
    float *lg = malloc((size_t)r->V * 4);
    memcpy(lg, first_logits, (size_t)r->V * 4);
    for (int i = 0; i < n; i++) {
        out[i] = kvlm_sampler_next(smp, lg);
        step1(r, seq, &out[i], 1, lg);
    }
    free(lg);
    kvlm_sampler_free(smp);
}

static void test_fork_equals_independent(void **state) {
    (void)state;
    rig r = rig_open(NULL);
    kvlm_error err;
    const int32_t prompt[6] = {3, 1, 4, 1, 5, 9}; /* 6 tokens: the last block is partly filled */
    float *lg = malloc((size_t)r.V * 4);
    int parent = kvlm_kv_seq_new(r.kv, &err);
    step1(&r, parent, prompt, 6, lg);
    int child = kvlm_kv_seq_fork(r.kv, parent, &err);
    assert_true(child >= 0);
    int32_t from_child[10], from_parent[10], independent[10];
    sample_run(&r, child, lg, 77, 10, from_child);    /* child writes first: copy-on-write */
    sample_run(&r, parent, lg, 78, 10, from_parent);  /* parent's own continuation is intact */
    int solo = kvlm_kv_seq_new(r.kv, &err);
    float *lg2 = malloc((size_t)r.V * 4);
    step1(&r, solo, prompt, 6, lg2);
    sample_run(&r, solo, lg2, 77, 10, independent);
    assert_memory_equal(from_child, independent, sizeof independent);
    kvlm_kv_seq_free(r.kv, solo);
    solo = kvlm_kv_seq_new(r.kv, &err);
    step1(&r, solo, prompt, 6, lg2);
    sample_run(&r, solo, lg2, 78, 10, independent);
    assert_memory_equal(from_parent, independent, sizeof independent);
    kvlm_kv_stats st;
    kvlm_kv_get_stats(r.kv, &st);
    assert_true(st.cow_copies >= 1);
    assert_int_equal(kv_check_invariants(r.kv, &err), 0);
    free(lg);
    free(lg2);
    rig_close(&r);
}

/* Runs prompt on a prefixed sequence; returns n_cached and the logits. */
static int prefixed_run(rig *r, const int32_t *prompt, int n, float *logits, int *seq_out) {
    kvlm_error err;
    int cached, seq = kvlm_kv_seq_new_prefixed(r->kv, prompt, n, &cached, &err);
    assert_true(seq >= 0);
    step1(r, seq, prompt + cached, n - cached, logits);
    *seq_out = seq;
    return cached;
}

static void test_prefix_hit_equals_cold(void **state) {
    (void)state;
    rig r = rig_open(NULL);
    const int32_t a[14] = {7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 1, 2};
    int32_t b[14];
    memcpy(b, a, sizeof b);
    b[12] = 3, b[13] = 4; /* same 12-token prefix, different suffix */
    float *la = malloc((size_t)r.V * 4), *lb = malloc((size_t)r.V * 4), *cold = malloc((size_t)r.V * 4);
    int sa, sb, sc;
    assert_int_equal(prefixed_run(&r, a, 14, la, &sa), 0);
    kvlm_kv_seq_free(r.kv, sa); /* its full blocks stay cached */
    assert_int_equal(prefixed_run(&r, b, 14, lb, &sb), 12);
    kvlm_kv_options o = kvlm_kv_default_params();
    o.dtype = KVLM_F32;
    o.block_size = 4;
    o.no_prefix_cache = 1;
    kvlm_error err;
    kvlm_kv *kv2 = kvlm_kv_create(r.m, &o, &err);
    kvlm_engine *e2 = kvlm_engine_create(r.m, kv2, &(kvlm_engine_options){.threads = 2}, &err);
    sc = kvlm_kv_seq_new(kv2, &err);
    kvlm_batch_item it = {sc, b, 14, 0};
    assert_int_equal(kvlm_engine_step(e2, &it, 1, cold, &err), 0);
    /* 1e-5 as for batched vs single: the cold run attends its last row in
     * a prefill tile (runtime/attention.c attn_tile_at), the hit as a lone
     * row (attn_seq_head): the same sums in another float order. */
    assert_true(maxdiff(lb, cold, r.V) < 1e-5);
    kvlm_kv_stats st;
    kvlm_kv_get_stats(r.kv, &st);
    assert_int_equal(st.prefix_queries, 2);
    assert_int_equal(st.prefix_hits, 1);
    assert_int_equal(st.prefix_hit_tokens, 12);
    kvlm_engine_free(e2);
    kvlm_kv_free(kv2);
    free(la), free(lb), free(cold);
    rig_close(&r);
}

/* Every block hashes alike: the token comparison must still refuse. */
static uint64_t colliding_hash(uint64_t parent, const int32_t *tokens, int n) {
    (void)parent, (void)tokens, (void)n;
    return 42;
}

static void test_hash_collision(void **state) {
    (void)state;
    rig r = rig_open(colliding_hash);
    const int32_t a[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, b[9] = {9, 8, 7, 6, 5, 4, 3, 2, 1};
    float *la = malloc((size_t)r.V * 4), *lb = malloc((size_t)r.V * 4), *lb2 = malloc((size_t)r.V * 4);
    int sa, sb;
    prefixed_run(&r, a, 9, la, &sa);
    kvlm_kv_seq_free(r.kv, sa);
    assert_int_equal(prefixed_run(&r, b, 9, lb, &sb), 0); /* same hashes, other tokens: no hit */
    kvlm_kv_seq_free(r.kv, sb);
    assert_int_equal(prefixed_run(&r, b, 9, lb2, &sb), 8); /* its own blocks do hit */
    assert_true(maxdiff(lb, lb2, r.V) < 1e-5); /* tile vs lone row, as above */
    kvlm_error err;
    assert_int_equal(kv_check_invariants(r.kv, &err), 0);
    free(la), free(lb), free(lb2);
    rig_close(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_property),
        cmocka_unit_test(test_property_reserved),
        cmocka_unit_test(test_append_abort_restores),
        cmocka_unit_test(test_batched_equals_single),
        cmocka_unit_test(test_fork_equals_independent),
        cmocka_unit_test(test_prefix_hit_equals_cold),
        cmocka_unit_test(test_hash_collision),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
