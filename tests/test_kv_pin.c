/*
 * Pinned prefixes of the paged KV cache (kvlm_kv_pin / _unpin / _pins) on
 * the tiny GPT-2's shape, 16 blocks of 4 tokens, appends without K/V (the
 * structure only): a pinned prompt's blocks survive eviction pressure that
 * evicts an unpinned one, and a prompt starting with it hits every pinned
 * token; the bound refuses a pin that would pass it and pins nothing;
 * pinning the same prefix twice adds no block; unpinning gives the blocks
 * back to the LRU list; the invariants (kv_check_invariants, pin counts
 * included) hold after every operation.
 */
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kvlm.h"
#include "runtime/kvcache.h"

#define TINY "tests/fixtures/gpt2/hf_f32"

static void check(const kvlm_kv *kv) {
    kvlm_error err;
    if (kv_check_invariants(kv, &err)) fail_msg("%s", err.msg);
}

/* A sequence holding toks (committed, so its whole blocks are indexed), freed. */
static void run_and_free(kvlm_kv *kv, const int32_t *toks, int n) {
    kvlm_error err;
    int cached, seq = kvlm_kv_seq_new_prefixed(kv, toks, n, &cached, &err);
    if (seq < 0) fail_msg("%s", err.msg);
    if (kv_append_reserve(kv, seq, n - cached, &err)) fail_msg("%s", err.msg);
    kv_append_commit(kv, seq, toks + cached);
    kvlm_kv_seq_free(kv, seq);
    check(kv);
}

static int hit(kvlm_kv *kv, const int32_t *toks, int n) {
    kvlm_error err;
    int cached, seq = kvlm_kv_seq_new_prefixed(kv, toks, n, &cached, &err);
    assert_true(seq >= 0);
    kvlm_kv_seq_free(kv, seq);
    return cached;
}

static void test_pins(void **state) {
    (void)state;
    kvlm_error err;
    kvlm_model *m = kvlm_model_load(TINY, NULL, &err);
    assert_non_null(m);
    kvlm_kv_options o = kvlm_kv_default_params();
    o.block_size = 4;
    o.n_blocks = 16;
    o.max_seqs = 2;
    kvlm_kv *kv = kvlm_kv_create(m, &o, &err);
    assert_non_null(kv);
    int32_t a[14], b[10], c[9];
    for (int i = 0; i < 14; i++) a[i] = 10 + i;
    for (int i = 0; i < 10; i++) b[i] = 50 + i;
    for (int i = 0; i < 9; i++) c[i] = 90 + i;
    int tokens;
    /* nothing cached yet */
    assert_int_equal(kvlm_kv_pin(kv, a, 12, 8, &tokens, &err), KVLM_ERR_ARG);
    assert_non_null(strstr(err.msg, "holds no whole block"));
    run_and_free(kv, a, 12); /* 3 whole blocks cached */
    run_and_free(kv, b, 10); /* 2 */
    const int p1 = kvlm_kv_pin(kv, a, 12, 8, &tokens, &err);
    assert_int_equal(p1, 1);
    assert_int_equal(tokens, 12);
    check(kv);
    kvlm_kv_stats st;
    kvlm_kv_get_stats(kv, &st);
    assert_int_equal(st.blocks_pinned, 3);
    assert_int_equal(st.blocks_used, 3);
    assert_int_equal(st.blocks_cached, 2);
    assert_int_equal(kvlm_kv_available_blocks(kv), 13);
    /* the same prefix again: no new block, so even a bound of 3 allows it */
    const int p2 = kvlm_kv_pin(kv, a, 14, 3, &tokens, &err);
    assert_int_equal(p2, 2);
    assert_int_equal(tokens, 12);
    /* the bound: b's 2 blocks would make 5 pinned */
    assert_int_equal(kvlm_kv_pin(kv, b, 10, 4, &tokens, &err), KVLM_ERR_NOMEM);
    assert_non_null(strstr(err.msg, "over the bound of 4"));
    assert_int_equal(tokens, 0);
    kvlm_kv_get_stats(kv, &st);
    assert_int_equal(st.blocks_pinned, 3);
    check(kv);
    /* eviction pressure: sequences of 28 new tokens (7 blocks each), 42
     * blocks in all, through the 13 not pinned */
    const uint64_t ev0 = st.evictions;
    for (int r = 0; r < 6; r++) {
        int32_t x[28];
        for (int i = 0; i < 28; i++) x[i] = 120 + r * 28 + i;
        run_and_free(kv, x, 28);
    }
    kvlm_kv_get_stats(kv, &st);
    assert_true(st.evictions > ev0 + 10);
    assert_int_equal(hit(kv, b, 10), 0); /* the unpinned prompt was evicted */
    int32_t longer[20];
    memcpy(longer, a, sizeof a);
    for (int i = 14; i < 20; i++) longer[i] = 3 + i;
    assert_int_equal(hit(kv, longer, 20), 12); /* the pinned one hits in full */
    /* pinned blocks are never available to an allocation */
    assert_int_equal(kvlm_kv_available_blocks(kv), 13);
    /* list, unpin */
    kvlm_kv_pin_info pins[4];
    assert_int_equal(kvlm_kv_pins(kv, pins, 4), 2);
    assert_int_equal(pins[0].id, 1);
    assert_int_equal(pins[0].tokens, 12);
    assert_int_equal(pins[0].blocks, 3);
    assert_int_equal(pins[1].id, 2);
    assert_int_equal(kvlm_kv_unpin(kv, p1, &err), 0);
    check(kv);
    kvlm_kv_get_stats(kv, &st);
    assert_int_equal(st.blocks_pinned, 3); /* still held by pin 2 */
    assert_int_equal(kvlm_kv_unpin(kv, p2, &err), 0);
    check(kv);
    kvlm_kv_get_stats(kv, &st);
    assert_int_equal(st.blocks_pinned, 0);
    assert_int_equal(st.blocks_used, 0);
    assert_int_equal(kvlm_kv_available_blocks(kv), 16);
    assert_int_equal(kvlm_kv_unpin(kv, p2, &err), KVLM_ERR_ARG);
    assert_int_equal(kvlm_kv_pins(kv, pins, 4), 0);
    /* unpinned, a's blocks are evictable again */
    run_and_free(kv, c, 9);
    for (int r = 0; r < 3; r++) {
        int32_t x[28];
        for (int i = 0; i < 28; i++) x[i] = 1 + r * 28 + i + (r * 28 + i >= 9 ? 100 : 0);
        run_and_free(kv, x, 28);
    }
    assert_int_equal(hit(kv, longer, 20), 0);
    kvlm_kv_free(kv);
    kvlm_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_pins)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
