/*
 * The paged KV cache under sharing: a randomized property test of create /
 * append / fork / free with prefix reuse and eviction (no leaked block, no
 * block freed while referenced, no shared block written, exact byte
 * accounting, and every sequence reads back exactly the states its own
 * tokens produced); then, through the engine, batched decode against single
 * decode, a fork against an independent run, a prefix-cache hit against a
 * cold run, and a colliding hash that must not hand out another prompt's KV.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "runtime/kvcache.h"
#include "kvlm.h"

#define TINY "tests/fixtures/gpt2/hf_f32"

/* ---------------------------------------------------------- property test */

/* The state a position holds: a hash of the tokens up to and including it,
 * written into the first 8 bytes of its layer-0, head-0 key. */
static uint64_t prefix_sig(const int32_t *t, int p) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i <= p; i++) h = (h ^ (uint32_t)t[i]) * 1099511628211ull;
    return h;
}

static void check_contents(const kvlm_kv *kv) {
    for (int i = 0; i < kv->max_seqs; i++) {
        const kv_seq *s = &kv->seqs[i];
        if (!s->live) continue;
        for (int p = 0; p < s->len; p++) {
            uint64_t got;
            memcpy(&got, kv_slot_ptr(kv, s, p, 0, 0, 0), 8);
            if (got != prefix_sig(s->tokens, p)) fail_msg("seq %d position %d holds another sequence's state", i, p);
        }
    }
}

/* Tokens stored, recomputed from the block tables. */
static size_t expected_stored(const kvlm_kv *kv) {
    int *fill = calloc(kv->n_blocks, sizeof(int));
    for (int i = 0; i < kv->max_seqs; i++) {
        const kv_seq *s = &kv->seqs[i];
        if (!s->live) continue;
        for (int j = 0; j < s->n_blocks; j++) {
            int f = s->len - j * kv->block_size;
            f = f < 0 ? 0 : f > kv->block_size ? kv->block_size : f;
            if (fill[s->blocks[j]] < f) fill[s->blocks[j]] = f;
        }
    }
    size_t sum = 0;
    for (size_t b = 0; b < kv->n_blocks; b++) sum += (size_t)fill[b];
    free(fill);
    return sum;
}

/* Appends n tokens to seq the way the engine does: reserve, write, record. */
static int append(kvlm_kv *kv, int seq, const int32_t *toks, int n) {
    kvlm_error err;
    kv_seq *s = &kv->seqs[seq];
    if (kv_seq_reserve(kv, seq, s->len + n, &err)) {
        kv_seq_truncate(kv, seq, s->len);
        return -1;
    }
    int32_t all[64];
    memcpy(all, s->tokens, (size_t)s->len * 4);
    memcpy(all + s->len, toks, (size_t)n * 4);
    for (int p = s->len; p < s->len + n; p++) {
        const kv_block *k = &kv->blk[s->blocks[p / kv->block_size]];
        if (k->refcount != 1 || k->node) fail_msg("seq %d writes position %d into a shared or indexed block", seq, p);
        uint64_t sig = prefix_sig(all, p);
        memcpy(kv_slot_ptr(kv, s, p, 0, 0, 0), &sig, 8);
    }
    kv_seq_append(kv, seq, toks, n);
    return 0;
}

static void test_property(void **state) {
    (void)state;
    kvlm_error err;
    kvlm_model *m = kvlm_model_synthetic("gpt2-tiny", KVLM_F32, 1, &err); /* n_ctx 32 */
    assert_non_null(m);
    for (uint32_t seed = 1; seed <= 4; seed++) {
        kvlm_kv_options o = {.dtype = KVLM_F32, .block_size = 4, .n_blocks = 20, .max_seqs = 8};
        kvlm_kv *kv = kvlm_kv_create(m, &o, &err);
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
                    if (append(kv, id, prompt + cached, n - cached)) kvlm_kv_seq_free(kv, id);
                    else live[n_live++] = id;
                }
            } else if (op < 6 && n_live) { /* append */
                int i = RND(n_live), n = 1 + RND(5);
                int32_t t[8];
                for (int k = 0; k < n; k++) t[k] = RND(3);
                if (kv->seqs[live[i]].len + n <= 32) append(kv, live[i], t, n);
            } else if (op < 8 && n_live && n_live < 8) { /* fork */
                int id = kvlm_kv_seq_fork(kv, live[RND(n_live)], &err);
                if (id >= 0) live[n_live++] = id;
            } else if (n_live) { /* free */
                int i = RND(n_live);
                kvlm_kv_seq_free(kv, live[i]);
                live[i] = live[--n_live];
            }
            if (kv_check_invariants(kv, &err)) fail_msg("seed %u step %d: %s", seed, step, err.msg);
            kvlm_kv_stats st;
            kvlm_kv_get_stats(kv, &st);
            assert_int_equal(st.tokens_stored, expected_stored(kv));
            assert_int_equal(st.bytes_live, st.tokens_stored * st.bytes_per_token);
            assert_int_equal(st.bytes_reserved, st.blocks_used * st.block_bytes);
            assert_int_equal(st.blocks_used + st.blocks_cached + st.blocks_free, 20);
            check_contents(kv);
        }
        kvlm_kv_stats st;
        kvlm_kv_get_stats(kv, &st);
        assert_true(st.prefix_hits > 0 && st.evictions > 0 && st.cow_copies > 0); /* every path was exercised */
        while (n_live) kvlm_kv_seq_free(kv, live[--n_live]);
        kvlm_kv_get_stats(kv, &st);
        assert_int_equal(st.blocks_used, 0);
        assert_int_equal(kv_check_invariants(kv, &err), 0);
        kvlm_kv_free(kv);
    }
    kvlm_model_free(m);
}

/* ---------------------------------------------------------- through the engine */

typedef struct rig {
    kvlm_model *m;
    kvlm_kv *kv;
    kvlm_engine *e;
    int V;
} rig;

static rig rig_open(kvlm_block_hash_fn hash) {
    kvlm_error err;
    rig r = {0};
    r.m = kvlm_model_load(TINY, &err);
    assert_non_null(r.m);
    r.V = kvlm_model_config(r.m)->vocab_size;
    kvlm_kv_options o = {.dtype = KVLM_F32, .block_size = 4, .max_seqs = 6, .hash = hash};
    r.kv = kvlm_kv_create(r.m, &o, &err);
    kvlm_engine_options eo = {.threads = 2};
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
    kvlm_sampler_options so = kvlm_sampler_options_default();
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
    kvlm_kv_options o = {.dtype = KVLM_F32, .block_size = 4, .no_prefix_cache = 1};
    kvlm_error err;
    kvlm_kv *kv2 = kvlm_kv_create(r.m, &o, &err);
    kvlm_engine *e2 = kvlm_engine_create(r.m, kv2, &(kvlm_engine_options){.threads = 2}, &err);
    sc = kvlm_kv_seq_new(kv2, &err);
    kvlm_batch_item it = {sc, b, 14, 0};
    assert_int_equal(kvlm_engine_step(e2, &it, 1, cold, &err), 0);
    assert_true(maxdiff(lb, cold, r.V) < 1e-6);
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
    assert_true(maxdiff(lb, lb2, r.V) < 1e-6);
    kvlm_error err;
    assert_int_equal(kv_check_invariants(r.kv, &err), 0);
    free(la), free(lb), free(lb2);
    rig_close(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_property),
        cmocka_unit_test(test_batched_equals_single),
        cmocka_unit_test(test_fork_equals_independent),
        cmocka_unit_test(test_prefix_hit_equals_cold),
        cmocka_unit_test(test_hash_collision),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
