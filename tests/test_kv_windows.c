/*
 * The KV cache of a model whose layers have different windows (Gemma 3's
 * five window layers to one global): layer slices with a block table each,
 * window slices giving back the blocks their window left while global
 * slices keep theirs.
 *
 * Checked on the synthetic gemma3-tiny (12 layers, window 8 on layers
 * 0-4 and 6-10, global 5 and 11: 6 slices of 2 layers):
 * - the slices, layer types and bytes per token, exactly;
 * - logits bit for bit equal to the same model with every block kept
 *   (keep_whole), in prefill chunks and decode past the window, for a
 *   fork, and for a prefix hit whose window blocks were released and
 *   partly evicted; the exact block counts of each;
 * - a random sequence of new / prefixed / append (with aborts) / fork /
 *   truncate / free keeps every invariant, and every position a layer's
 *   window still reads holds its own prefix's state;
 * - at 32k context, a Gemma-3-1B-shaped cache holds 4 / 26 of the whole
 *   plus the window layers' last blocks: about a sixth, exact in bytes.
 */
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kvlm.h"
#include "model/model.h"
#include "runtime/attention.h"
#include "runtime/kvcache.h"

#define W 8          /* gemma3-tiny's window */
#define NL 12        /* its layers */
#define HD 32        /* head dim, one KV head */

static int layer_window(int l) { return (l + 1) % 6 ? W : 0; }

static void check_invariants(const kvlm_kv *kv) {
    kvlm_error err;
    if (kv_check_invariants(kv, &err)) fail_msg("invariants: %s", err.msg);
}

/* The public view of every slice's table (kvlm_kv_seq_slice_blocks, what
 * kvlm serve's engine view lists): the same tables as the cache's own, and
 * over all of them a block's reference count is the number of tables that
 * list it. */
static void check_slice_views(const kvlm_kv *kv, const int *live, int n_live) {
    kvlm_kv_info info;
    kvlm_kv_get_info(kv, &info);
    int *listed = calloc(info.n_blocks, sizeof *listed), *refs = calloc(info.n_blocks, sizeof *refs);
    unsigned char *cached = calloc(info.n_blocks, 1);
    kvlm_error err;
    for (int i = 0; i < n_live; i++)
        for (int sl = 0; sl < info.n_slices; sl++) {
            const int *pub, *own;
            const int n = kvlm_kv_seq_slice_blocks(kv, live[i], sl, &pub, &err);
            assert_int_equal(n, kv_seq_slice_blocks(kv, live[i], sl, &own));
            assert_ptr_equal(pub, own);
            for (int b = 0; b < n; b++)
                if (pub[b] >= 0) listed[pub[b]]++;
        }
    assert_int_equal(kvlm_kv_block_states(kv, refs, cached, info.n_blocks, &err), 0);
    for (size_t b = 0; b < info.n_blocks; b++) assert_int_equal(listed[b], refs[b]);
    if (n_live) {
        const int *t;
        assert_int_equal(kvlm_kv_seq_slice_blocks(kv, live[0], info.n_slices, &t, &err), KVLM_ERR_ARG);
        assert_null(t);
        assert_int_equal(kvlm_kv_seq_slice_blocks(kv, live[0], -1, &t, &err), KVLM_ERR_ARG);
    }
    free(listed), free(refs), free(cached);
}

static kvlm_kv_stats stats(const kvlm_kv *kv) {
    kvlm_kv_stats st;
    kvlm_kv_get_stats(kv, &st);
    return st;
}

static kvlm_model *tiny(void) {
    kvlm_error err;
    kvlm_model *m = kvlm_model_synthetic("gemma3-tiny", KVLM_F32, 7, NULL, &err);
    if (!m) fail_msg("%s", err.msg);
    return m;
}

static kvlm_kv *cache(const kvlm_model *m, int bs, size_t n_blocks, int max_seqs, int keep_whole) {
    kvlm_error err;
    kvlm_kv_options o = kvlm_kv_default_params();
    o.block_size = bs;
    o.n_blocks = n_blocks;
    o.max_seqs = max_seqs;
    o.keep_whole = keep_whole;
    kvlm_kv *kv = kvlm_kv_create(m, &o, &err);
    if (!kv) fail_msg("%s", err.msg);
    return kv;
}

static void test_shape(void **state) {
    (void)state;
    kvlm_model *m = tiny();
    kvlm_kv *kv = cache(m, 4, 0, 2, 0);
    kvlm_kv_info info;
    kvlm_kv_get_info(kv, &info);
    assert_int_equal(info.n_slices, 6);
    assert_int_equal(info.slice_layers, 2);
    assert_int_equal(info.bytes_per_token, 2 * NL * HD * 4);    /* 3072 */
    assert_int_equal(info.block_bytes, 4 * 2 * 2 * HD * 4);     /* 4 tokens x 2 layers x K,V x 32 x f32 */
    assert_int_equal(info.n_blocks, 2 * (128 / 4) * 6);
    assert_int_equal(info.n_layer_types, 2);
    kvlm_kv_layer_type t[3];
    assert_int_equal(kvlm_kv_layer_types(kv, t, 3), 2);
    assert_int_equal(t[0].window, 0), assert_int_equal(t[0].n_layers, 2);
    assert_int_equal(t[0].bytes_per_token, 2 * 2 * HD * 4), assert_int_equal(t[0].releases, 0);
    assert_int_equal(t[1].window, W), assert_int_equal(t[1].n_layers, 10);
    assert_int_equal(t[1].bytes_per_token, 10 * 2 * HD * 4), assert_int_equal(t[1].releases, 1);
    /* 100 tokens: 25 blocks of the global slice; a window slice keeps
     * blocks from (100 + 1 - 8) / 4 = 23 on: 2 of them. */
    assert_int_equal(kvlm_kv_seq_bytes(kv, 100), (25 + 5 * 2) * info.block_bytes);
    assert_int_equal(kvlm_kv_seq_bytes(kv, 0), 0);
    assert_int_equal(kvlm_kv_seq_bytes(kv, 7), 2 * 6 * info.block_bytes);
    /* Grown by appends of 13, a window slice holds at most ceil((8 - 1 +
     * 13) / 4) + 1 = 6 blocks while an append is pending: the peak
     * admission counts is reached and never passed. */
    assert_int_equal(kv_blocks_for(kv, 100, 13), 25 + 5 * 6);
    assert_int_equal(kv_blocks_for(kv, 100, 0), 25 + 5 * 2);
    kvlm_error err;
    const int seq = kvlm_kv_seq_new(kv, &err);
    int32_t toks[13] = {0};
    size_t peak = 0;
    for (int len = 0; len + 13 <= 128; len += 13) {
        assert_int_equal(kv_append_reserve(kv, seq, 13, &err), 0);
        const size_t used = stats(kv).blocks_used;
        assert_true(used <= kv_blocks_for(kv, len + 13, 13));
        if (used > peak) peak = used;
        kv_append_commit(kv, seq, toks);
        check_invariants(kv);
    }
    /* the global slice's 30 blocks at 117 tokens and 6 of each window slice */
    assert_int_equal(peak, 30 + 5 * 6);
    assert_int_equal(kv_blocks_for(kv, 117, 13), peak);
    kvlm_kv_free(kv);
    kv = cache(m, 4, 0, 2, 1); /* keep_whole: every slice keeps every block */
    assert_int_equal(kvlm_kv_seq_bytes(kv, 100), 25 * 6 * info.block_bytes);
    assert_int_equal(kvlm_kv_layer_types(kv, t, 3), 2);
    assert_int_equal(t[1].releases, 0);
    kvlm_kv_free(kv);
    kvlm_model_free(m);
}

static void step(kvlm_engine *e, int seq, const int32_t *toks, int n, float *logits) {
    kvlm_error err;
    kvlm_batch_item it = {seq, toks, n, 0};
    if (kvlm_engine_step(e, &it, 1, logits, &err)) fail_msg("step: %s", err.msg);
}

#define NTOK 100

/* Prefill in chunks of 13 then decode to NTOK tokens on a windowed and a
 * whole cache side by side; every step's logits must be the same bits. */
static void test_logits_equal_whole(void **state) {
    (void)state;
    kvlm_error err;
    kvlm_model *m = tiny();
    const int V = kvlm_model_config(m)->vocab_size;
    kvlm_kv *kw = cache(m, 4, 0, 2, 0), *kf = cache(m, 4, 0, 2, 1);
    kvlm_engine *ew = kvlm_engine_create(m, kw, &(kvlm_engine_options){.threads = 1}, &err);
    kvlm_engine *ef = kvlm_engine_create(m, kf, &(kvlm_engine_options){.threads = 1}, &err);
    assert_non_null(ew), assert_non_null(ef);
    float *a = malloc((size_t)V * sizeof(float)), *b = malloc((size_t)V * sizeof(float));
    int32_t toks[NTOK];
    for (int i = 0; i < NTOK; i++) toks[i] = (int32_t)((i * 37 + 11) % V);
    const int sw = kvlm_kv_seq_new(kw, &err), sf = kvlm_kv_seq_new(kf, &err);
    int len = 0;
    while (len < NTOK) {
        const int n = len < 52 ? 13 : 1;
        step(ew, sw, toks + len, n, a);
        step(ef, sf, toks + len, n, b);
        len += n;
        if (memcmp(a, b, (size_t)V * sizeof(float))) fail_msg("logits differ after %d tokens", len);
        check_invariants(kw);
        /* whole blocks: 6 slices' full tables vs the global one plus each
         * window slice's blocks from its window's start */
        const size_t rows = (size_t)(len + 3) / 4, lo = (size_t)(len + 1 > W ? len + 1 - W : 0) / 4;
        assert_int_equal(stats(kf).blocks_used, 6 * rows);
        assert_int_equal(stats(kw).blocks_used, rows + 5 * (rows - lo));
        assert_int_equal(stats(kw).bytes_reserved, kvlm_kv_seq_bytes(kw, len));
    }
    /* A fork goes on from the released state as the original would. */
    const int fw = kvlm_kv_seq_fork(kw, sw, &err), ff = kvlm_kv_seq_fork(kf, sf, &err);
    assert_true(fw >= 0 && ff >= 0);
    kvlm_kv_seq_free(kw, sw);
    kvlm_kv_seq_free(kf, sf);
    const int32_t more[3] = {5, 9, 13};
    for (int i = 0; i < 3; i++) {
        step(ew, fw, more + i, 1, a);
        step(ef, ff, more + i, 1, b);
        if (memcmp(a, b, (size_t)V * sizeof(float))) fail_msg("fork: logits differ at %d", i);
    }
    check_invariants(kw);
    /* Truncating into released blocks is refused and names the window. */
    assert_int_equal(kvlm_kv_seq_truncate(kw, fw, 50, &err), KVLM_ERR_ARG);
    assert_non_null(strstr(err.msg, "sliding window of 8"));
    assert_int_equal(kvlm_kv_seq_truncate(kf, ff, 50, &err), 0);
    assert_int_equal(kvlm_kv_seq_truncate(kw, fw, 0, &err), 0);
    check_invariants(kw);
    free(a);
    free(b);
    kvlm_engine_free(ew);
    kvlm_engine_free(ef);
    kvlm_kv_free(kw);
    kvlm_kv_free(kf);
    kvlm_model_free(m);
}

/* A prompt of 60 tokens served, freed, then the pool pressed so that the
 * oldest cached blocks (the window slices' earliest, released first) are
 * evicted: a prompt extending it still hits all 60 tokens, takes of each
 * window slice only blocks 13 and 14, and its logits are those of the
 * whole cache run cold. */
static void test_prefix_hit_after_release(void **state) {
    (void)state;
    kvlm_error err;
    kvlm_model *m = tiny();
    const int V = kvlm_model_config(m)->vocab_size;
    const size_t NB = 120;
    kvlm_kv *kw = cache(m, 4, NB, 2, 0), *kf = cache(m, 4, 0, 1, 1);
    kvlm_engine *ew = kvlm_engine_create(m, kw, &(kvlm_engine_options){.threads = 1}, &err);
    kvlm_engine *ef = kvlm_engine_create(m, kf, &(kvlm_engine_options){.threads = 1}, &err);
    assert_non_null(ew), assert_non_null(ef);
    float *a = malloc((size_t)V * sizeof(float)), *b = malloc((size_t)V * sizeof(float));
    int32_t toks[70];
    for (int i = 0; i < 70; i++) toks[i] = (int32_t)((i * 53 + 3) % V);
    int s = kvlm_kv_seq_new(kw, &err);
    step(ew, s, toks, 30, a);
    step(ew, s, toks + 30, 30, a);
    kvlm_kv_seq_free(kw, s);
    /* 15 full blocks of the global slice, and of each window slice the 13
     * released during the run and the 2 kept to the end: all cached. */
    assert_int_equal(stats(kw).blocks_cached, 15 * 6);
    assert_int_equal(stats(kw).blocks_free, NB - 90);
    check_invariants(kw);
    /* Another sequence takes the 30 free blocks and 30 cached ones, the
     * oldest: blocks 0..4 of the five window slices (released at 30
     * tokens), then blocks 5..9 of the first window slice. */
    s = kvlm_kv_seq_new(kw, &err);
    assert_int_equal(kv_append_reserve(kw, s, 4 * 10, &err), 0); /* 10 rows x 6 slices = 60 blocks */
    assert_int_equal(stats(kw).evictions, 60 - (NB - 90));
    kv_append_abort(kw, s);
    kvlm_kv_seq_free(kw, s);
    check_invariants(kw);
    int cached = -1;
    s = kvlm_kv_seq_new_prefixed(kw, toks, 70, &cached, &err);
    assert_true(s >= 0);
    assert_int_equal(cached, 60);
    /* the global slice's 15 blocks, two per window slice (window from 53) */
    assert_int_equal(stats(kw).blocks_used, 15 + 5 * 2);
    check_invariants(kw);
    step(ew, s, toks + 60, 10, a);
    const int sf = kvlm_kv_seq_new(kf, &err);
    step(ef, sf, toks, 70, b);
    if (memcmp(a, b, (size_t)V * sizeof(float))) fail_msg("prefix hit: logits differ from the cold whole run");
    check_invariants(kw);
    /* A prompt whose global blocks are there but whose window blocks were
     * evicted hits only as far as every window slice's blocks reach: the
     * first window slice lost blocks 0..9, so a 33-token prompt (at 32
     * tokens its window starts at 25: blocks 6 and 7) ... */
    kvlm_kv_seq_free(kw, s);
    int c2 = -1, s2 = kvlm_kv_seq_new_prefixed(kw, toks, 33, &c2, &err);
    assert_true(s2 >= 0);
    /* ... finds no length it can serve: every shorter prefix needs an
     * earlier block of that slice, all evicted. */
    assert_int_equal(c2, 0);
    check_invariants(kw);
    free(a);
    free(b);
    kvlm_engine_free(ew);
    kvlm_engine_free(ef);
    kvlm_kv_free(kw);
    kvlm_kv_free(kf);
    kvlm_model_free(m);
}

/* ---------------------------------------------------------- property test */

static uint64_t prefix_sig(const int32_t *t, int p) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i <= p; i++) h = (h ^ (uint32_t)t[i]) * 1099511628211ull;
    return h;
}

/* Every position each layer's window still reads holds its prefix's state. */
static void check_contents(const kvlm_kv *kv) {
    for (int i = 0; i < kv_max_seqs(kv); i++) {
        if (!kv_seq_valid(kv, i)) continue;
        const int32_t *toks = kv_seq_tokens(kv, i);
        const int len = kvlm_kv_seq_len(kv, i, NULL);
        for (int l = 0; l < NL; l++) {
            const int lw = layer_window(l), lo = len + 1 > lw && lw ? len + 1 - lw : 0;
            for (int p = lo; p < len; p++) {
                float k[HD];
                attn_load_kv(kv, i, p, l, 0, 0, k);
                uint64_t got = 0;
                for (int q = 0; q < 4; q++) got |= (uint64_t)k[q] << (16 * q);
                if (got != (prefix_sig(toks, p) ^ (uint64_t)l))
                    fail_msg("seq %d layer %d position %d holds another state", i, l, p);
            }
        }
    }
}

static int append(kvlm_kv *kv, int seq, const int32_t *toks, int n, int abort_first) {
    kvlm_error err;
    const int len = kvlm_kv_seq_len(kv, seq, NULL);
    if (abort_first && kv_append_reserve(kv, seq, n, &err) == KVLM_OK) {
        const kvlm_kv_stats before = stats(kv);
        kv_append_abort(kv, seq);
        assert_int_equal(kvlm_kv_seq_len(kv, seq, NULL), len);
        assert_true(stats(kv).blocks_used <= before.blocks_used);
        check_invariants(kv);
    }
    if (kv_append_reserve(kv, seq, n, &err)) {
        assert_int_equal(kvlm_kv_seq_len(kv, seq, NULL), len);
        return -1;
    }
    check_invariants(kv);
    int32_t all[128];
    memcpy(all, kv_seq_tokens(kv, seq), (size_t)len * 4);
    memcpy(all + len, toks, (size_t)n * 4);
    const kern_ops *ops = kern_select(KVLM_ISA_SCALAR);
    for (int p = len; p < len + n; p++)
        for (int l = 0; l < NL; l++) {
            float k[HD] = {0}, v[HD] = {0};
            const uint64_t sig = prefix_sig(all, p) ^ (uint64_t)l;
            for (int q = 0; q < 4; q++) k[q] = (float)((sig >> (16 * q)) & 0xFFFF);
            attn_store_kv(ops, kv, seq, p, l, k, v);
        }
    kv_append_commit(kv, seq, toks);
    return 0;
}

static void test_property(void **state) {
    (void)state;
    kvlm_error err;
    kvlm_model *m = tiny();
    for (uint32_t seed = 1; seed <= 3; seed++) {
        const size_t NB = 160;
        kvlm_kv *kv = cache(m, 4, NB, 8, 0);
        int live[8], n_live = 0;
        uint32_t r = seed * 2654435761u;
#define RND(n) ((r = r * 1664525u + 1013904223u), (int)((r >> 8) % (uint32_t)(n)))
        for (int step = 0; step < 1500; step++) {
            const int op = RND(10);
            if (op < 3 && n_live < 8) {
                int32_t prompt[64];
                const int n = 1 + RND(40);
                for (int i = 0; i < n; i++) prompt[i] = RND(2);
                int cached, id = kvlm_kv_seq_new_prefixed(kv, prompt, n, &cached, &err);
                if (id >= 0) {
                    assert_true(cached < n && cached % 4 == 0);
                    if (append(kv, id, prompt + cached, n - cached, step % 2)) kvlm_kv_seq_free(kv, id);
                    else live[n_live++] = id;
                }
            } else if (op < 6 && n_live) {
                const int i = RND(n_live), n = 1 + RND(9);
                int32_t t[16];
                for (int k = 0; k < n; k++) t[k] = RND(2);
                if (kvlm_kv_seq_len(kv, live[i], NULL) + n <= 128) append(kv, live[i], t, n, step % 2);
            } else if (op < 8 && n_live && n_live < 8) {
                const int id = kvlm_kv_seq_fork(kv, live[RND(n_live)], &err);
                if (id >= 0) live[n_live++] = id;
            } else if (op == 8 && n_live) { /* truncate: refused exactly when the window released what it needs */
                const int i = RND(n_live), len = kvlm_kv_seq_len(kv, live[i], NULL), to = RND(len + 1);
                const int *t;
                kv_seq_slice_blocks(kv, live[i], 0, &t); /* slice 0: layers 0, 1 (window) */
                int released = 0;
                while (released * 4 < len && t[released] < 0) released++;
                const int ok = to == 0 || (to + 1 > W ? to + 1 - W : 0) >= released * 4;
                assert_int_equal(kvlm_kv_seq_truncate(kv, live[i], to, &err), ok ? 0 : KVLM_ERR_ARG);
            } else if (n_live) {
                const int i = RND(n_live);
                kvlm_kv_seq_free(kv, live[i]);
                live[i] = live[--n_live];
            }
            check_invariants(kv);
            check_slice_views(kv, live, n_live);
            const kvlm_kv_stats st = stats(kv);
            assert_int_equal(st.bytes_reserved, st.blocks_used * st.block_bytes);
            assert_int_equal(st.blocks_used + st.blocks_cached + st.blocks_free, NB);
            check_contents(kv);
        }
        const kvlm_kv_stats st = stats(kv);
        assert_true(st.cow_copies > 0 && st.prefix_hits > 0 && st.evictions > 0);
        while (n_live) kvlm_kv_seq_free(kv, live[--n_live]);
        assert_int_equal(stats(kv).blocks_used, 0);
        check_invariants(kv);
        kvlm_kv_free(kv);
    }
    kvlm_model_free(m);
}

/* Gemma 3 1B's KV at 32k: a model struct with its shape and windows (no
 * weights: the cache reads only the configuration and the windows). */
static void test_gemma3_1b_at_32k(void **state) {
    (void)state;
    kvlm_error err;
    kvlm_model *m = calloc(1, sizeof *m);
    int windows[26];
    for (int l = 0; l < 26; l++) windows[l] = (l + 1) % 6 ? 512 : 0;
    m->cfg = (kvlm_config){.n_layer = 26, .n_head = 4, .n_kv_head = 1, .n_embd = 1152, .head_dim = 256,
                           .n_ctx = 32768, .vocab_size = 32768};
    m->layer_window = windows;
    kvlm_kv_options o = kvlm_kv_default_params();
    o.dtype = KVLM_F16;
    o.n_blocks = 64;
    kvlm_kv *kv = kvlm_kv_create(m, &o, &err), *whole;
    o.keep_whole = 1;
    whole = kvlm_kv_create(m, &o, &err);
    assert_non_null(kv), assert_non_null(whole);
    kvlm_kv_info info;
    kvlm_kv_get_info(kv, &info);
    assert_int_equal(info.n_slices, 13); /* 22 window and 4 global layers: slices of 2 */
    assert_int_equal(info.bytes_per_token, 26 * 2 * 256 * 2);
    const size_t all = kvlm_kv_seq_bytes(whole, 32768), some = kvlm_kv_seq_bytes(kv, 32768);
    assert_int_equal(all, (size_t)32768 * 26 * 1024);
    /* global: 4 layers x 32768 tokens; window: 22 layers x 32 blocks of 16
     * (the window from position 32257 starts in block 2016: 2016..2047) */
    assert_int_equal(some, (size_t)4 * 32768 * 1024 + (size_t)22 * 32 * 16 * 1024);
    const double ratio = (double)some / (double)all;
    assert_true(ratio > 1.0 / 6.0 && ratio < 0.17); /* 0.1667.. */
    kvlm_kv_free(kv);
    kvlm_kv_free(whole);
    free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shape),
        cmocka_unit_test(test_logits_equal_whole),
        cmocka_unit_test(test_prefix_hit_after_release),
        cmocka_unit_test(test_property),
        cmocka_unit_test(test_gemma3_1b_at_32k),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
