/*
 * The public views the programs (kvlm serve's GET /kvlm/engine, kvlm kv,
 * chat templates) build on, through kvlm.h and kvlm_tokenizer.h only:
 * kvlm_kv_get_info, kvlm_kv_block_states and kvlm_kv_seq_blocks against
 * the statistics and lengths of a cache driven by a scheduler,
 * kvlm_sched_list_choices against what was submitted, kvlm_dtype_block,
 * kvlm_gguf_chat_load on the shipped GGUF, and their refusals.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kvlm.h"

#define TINY "tests/fixtures/gpt2/hf_f32"
#define GGUF "models/shakespeare-llama/shakespeare-llama-q8_0.gguf"

static void test_dtype_block(void **state) {
    (void)state;
    int v = -1;
    assert_int_equal(kvlm_dtype_block(KVLM_F32, &v), 4);
    assert_int_equal(v, 1);
    assert_int_equal(kvlm_dtype_block(KVLM_BF16, &v), 2);
    assert_int_equal(v, 1);
    assert_int_equal(kvlm_dtype_block(KVLM_Q8_0, &v), 34);
    assert_int_equal(v, 32);
    assert_int_equal(kvlm_dtype_block(KVLM_Q6_K, &v), 210);
    assert_int_equal(v, 256);
    assert_int_equal(kvlm_dtype_block((kvlm_dtype)77, &v), 0);
    assert_int_equal(v, 0);
    assert_int_equal(kvlm_dtype_block(KVLM_Q4_0, NULL), 18);
    assert_true(kvlm_kv_dtype_supported(KVLM_F16));
    assert_false(kvlm_kv_dtype_supported(KVLM_Q4_0));
}

/* Two requests on the tiny GPT-2 (2 layers, context 32), a 4-token
 * block pool of 12 blocks: the views agree with the statistics. */
static void test_kv_and_sched_views(void **state) {
    (void)state;
    kvlm_error err;
    kvlm_model *m = kvlm_model_load(TINY, NULL, &err);
    if (!m) fail_msg("%s", err.msg);
    kvlm_kv_options ko = kvlm_kv_default_params();
    ko.dtype = KVLM_F16;
    ko.block_size = 4;
    ko.n_blocks = 12;
    ko.max_seqs = 2;
    kvlm_kv *kv = kvlm_kv_create(m, &ko, &err);
    if (!kv) fail_msg("%s", err.msg);
    kvlm_kv_info info;
    kvlm_kv_get_info(kv, &info);
    assert_int_equal(info.dtype, KVLM_F16);
    assert_int_equal(info.block_size, 4);
    assert_int_equal(info.max_seqs, 2);
    assert_int_equal(info.n_ctx, 32);
    assert_int_equal(info.n_blocks, 12);

    kvlm_engine_options eo = kvlm_engine_default_params();
    eo.threads = 1;
    kvlm_engine *e = kvlm_engine_create(m, kv, &eo, &err);
    if (!e) fail_msg("%s", err.msg);
    kvlm_sched *s = kvlm_sched_create(e, kv, kvlm_model_config(m)->vocab_size, NULL, &err);
    if (!s) fail_msg("%s", err.msg);
    static const int32_t p0[] = {199, 17, 42, 103, 0, 150}, p1[] = {5, 6, 7};
    int users[2];
    kvlm_request_params rp = kvlm_request_default_params();
    rp.prompt = p0;
    rp.n_prompt = 6;
    rp.max_tokens = 3;
    rp.n_choices = 1;
    rp.user = &users[0];
    const int64_t id0 = kvlm_sched_submit(s, &rp, &err);
    if (id0 < 0) fail_msg("%s", err.msg);
    rp.prompt = p1, rp.n_prompt = 3, rp.user = &users[1];
    const int64_t id1 = kvlm_sched_submit(s, &rp, &err);
    if (id1 < 0) fail_msg("%s", err.msg);
    assert_true(id1 > id0);
    /* before any step both wait */
    kvlm_sched_choice_info ch[4];
    assert_int_equal(kvlm_sched_list_choices(s, NULL, 0), 2);
    assert_int_equal(kvlm_sched_list_choices(s, ch, 4), 2);
    assert_int_equal(ch[0].request, id0);
    assert_ptr_equal(ch[0].user, &users[0]);
    assert_int_equal(ch[0].running, 0);
    assert_int_equal(ch[0].seq, -1);
    assert_int_equal(ch[0].n_prompt, 6);
    assert_int_equal(ch[1].request, id1);
    assert_int_equal(ch[1].max_tokens, 3);

    assert_int_equal(kvlm_sched_step(s, &err) >= 0, 1);
    assert_int_equal(kvlm_sched_list_choices(s, ch, 1), 2); /* cap 1: one written, two counted */
    assert_int_equal(kvlm_sched_list_choices(s, ch, 4), 2);
    int refs[12];
    unsigned char cached[12];
    assert_int_equal(kvlm_kv_block_states(kv, refs, cached, 11, &err), KVLM_ERR_ARG); /* too small */
    assert_non_null(strstr(err.msg, "12"));
    assert_int_equal(kvlm_kv_block_states(kv, refs, cached, 12, &err), 0);
    kvlm_kv_stats st;
    kvlm_kv_get_stats(kv, &st);
    size_t used = 0;
    for (int b = 0; b < 12; b++) used += refs[b] > 0;
    assert_int_equal(used, st.blocks_used);
    size_t table_blocks = 0;
    for (int c = 0; c < 2; c++) {
        assert_int_equal(ch[c].running, 1);
        assert_int_equal(ch[c].n_computed, ch[c].n_prompt); /* both prompts fit the first step */
        const int *table;
        const int nb = kvlm_kv_seq_blocks(kv, ch[c].seq, &table, &err);
        const int len = kvlm_kv_seq_len(kv, ch[c].seq, NULL);
        assert_int_equal(nb, (len + 3) / 4);
        for (int b = 0; b < nb; b++) {
            assert_true(table[b] >= 0 && table[b] < 12);
            assert_true(refs[table[b]] >= 1);
        }
        table_blocks += (size_t)nb;
    }
    assert_int_equal(table_blocks, st.blocks_used); /* nothing shared between the two */
    const int *table = (const int *)&err;
    assert_int_equal(kvlm_kv_seq_blocks(kv, 7, &table, &err), KVLM_ERR_ARG);
    assert_null(table);
    assert_non_null(strstr(err.msg, "no sequence 7"));

    kvlm_sched_free(s);
    kvlm_engine_free(e);
    kvlm_kv_free(kv);
    kvlm_model_free(m);
}

static void test_gguf_chat(void **state) {
    (void)state;
    kvlm_error err;
    kvlm_gguf_chat c;
    assert_int_equal(kvlm_gguf_chat_load(GGUF, &c, &err), 0);
    assert_null(c.chat_template); /* the shipped model has none */
    assert_null(c.tool_use_template);
    kvlm_tokenizer *t = kvlm_tokenizer_load(GGUF, &err);
    if (!t) fail_msg("%s", err.msg);
    /* the token texts are the vocabulary's own */
    size_t n;
    const int32_t eos = kvlm_tokenizer_eos_id(t);
    assert_true(eos >= 0);
    assert_non_null(c.eos_token);
    const char *piece = kvlm_tokenizer_piece(t, eos, &n);
    assert_int_equal(strlen(c.eos_token), n);
    assert_memory_equal(c.eos_token, piece, n);
    kvlm_tokenizer_free(t);
    kvlm_gguf_chat_free(&c);
    assert_null(c.eos_token);
    kvlm_gguf_chat_free(&c); /* twice is fine */
    assert_true(kvlm_gguf_chat_load(TINY "/config.json", &c, &err) < 0);
    assert_non_null(strstr(err.msg, "config.json"));
    assert_null(c.bos_token);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_block),
        cmocka_unit_test(test_kv_and_sched_views),
        cmocka_unit_test(test_gguf_chat),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
