/*
 * Saved KV of one sequence (kvlm_kv_seq_save / kvlm_kv_seq_restore) on the
 * tiny GPT-2 with f16 KV:
 *   - the record is exactly 64 + 4 x tokens + 2 x layers x KV heads x
 *     tokens x row bytes + 8 bytes;
 *   - a restored sequence (same block size, and another one) gives the
 *     same next-token logits as the sequence that was saved (bit-identical
 *     at the same block size) and the same greedy continuation, and its
 *     full blocks are found by the prefix index;
 *   - every truncation, a bit flip in each part of the record, another KV
 *     dtype, another model shape and another fingerprint (with a valid
 *     checksum) are refused with a message naming the cause, and leave the
 *     cache exactly as it was (no sequence, no block, invariants hold).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "helpers.h"
#include "kvlm.h"
#include "runtime/kvcache.h"

#define TINY "tests/fixtures/gpt2/hf_f32"
#define LLAMA_GGUF "models/shakespeare-llama/shakespeare-llama-q8_0.gguf"
#define N_PROMPT 14

typedef struct rig {
    kvlm_model *m;
    kvlm_kv *kv;
    kvlm_engine *e;
    int V;
} rig;

static void rig_open_kv(rig *r, kvlm_model *m, kvlm_dtype dt, int block_size) {
    kvlm_error err;
    r->m = m;
    r->V = kvlm_model_config(m)->vocab_size;
    kvlm_kv_options o = kvlm_kv_default_params();
    o.dtype = dt;
    o.block_size = block_size;
    o.max_seqs = 2;
    r->kv = kvlm_kv_create(m, &o, &err);
    if (!r->kv) fail_msg("%s", err.msg);
    kvlm_engine_options eo = kvlm_engine_default_params();
    eo.threads = 2;
    r->e = kvlm_engine_create(m, r->kv, &eo, &err);
    if (!r->e) fail_msg("%s", err.msg);
}

static void rig_close_kv(rig *r) {
    kvlm_engine_free(r->e);
    kvlm_kv_free(r->kv);
}

static void step(rig *r, int seq, const int32_t *t, int n, float *logits) {
    kvlm_error err;
    kvlm_batch_item it = {seq, t, n, 0};
    if (kvlm_engine_step(r->e, &it, 1, logits, &err)) fail_msg("%s", err.msg);
}

static int32_t argmax(const float *x, int n) {
    int32_t b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Greedy continuation of seq for n tokens from the logits of its last step. */
static void greedy(rig *r, int seq, float *logits, int n, int32_t *out) {
    for (int i = 0; i < n; i++) {
        out[i] = argmax(logits, r->V);
        step(r, seq, &out[i], 1, logits);
    }
}

static const int32_t PROMPT[N_PROMPT] = {46, 20, 75, 21, 180, 62, 26, 169, 32, 13, 83, 20, 31, 57};

/* The record of a sequence that ran PROMPT in r (malloc'ed, *len bytes);
 * *seq_out the live sequence and logits its last step's logits. */
static unsigned char *saved_record(rig *r, size_t *len, int *seq_out, float *logits) {
    kvlm_error err;
    int seq = kvlm_kv_seq_new(r->kv, &err);
    assert_true(seq >= 0);
    step(r, seq, PROMPT, N_PROMPT, logits);
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    assert_non_null(f);
    if (kvlm_kv_seq_save(r->kv, r->m, seq, f, &err)) fail_msg("%s", err.msg);
    assert_int_equal(fclose(f), 0);
    *len = n;
    *seq_out = seq;
    return (unsigned char *)buf;
}

/* Restores rec into r; returns the status (and the message in msg). */
static int restore(rig *r, const unsigned char *rec, size_t len, int *seq, char *msg) {
    FILE *f = fmemopen((void *)rec, len ? len : 1, "rb");
    assert_non_null(f);
    if (!len) fgetc(f); /* an empty record: the stream starts at its end */
    kvlm_error err = {0};
    int rc = kvlm_kv_seq_restore(r->kv, r->m, f, seq, &err);
    fclose(f);
    if (msg) strcpy(msg, rc ? err.msg : "");
    return rc;
}

/* The cache holds nothing and is consistent. */
static void assert_empty(const rig *r) {
    kvlm_kv_stats st;
    kvlm_kv_get_stats(r->kv, &st);
    assert_int_equal(st.seqs, 0);
    assert_int_equal(st.blocks_used, 0);
    assert_int_equal(st.blocks_cached, 0);
    kvlm_error err;
    if (kv_check_invariants(r->kv, &err)) fail_msg("%s", err.msg);
}

static void test_round_trip(void **state) {
    (void)state;
    kvlm_error err;
    kvlm_model *m = kvlm_model_load(TINY, NULL, &err);
    assert_non_null(m);
    const kvlm_config *c = kvlm_model_config(m);
    rig a, b, b8;
    rig_open_kv(&a, m, KVLM_F16, 4);
    rig_open_kv(&b, m, KVLM_F16, 4);
    rig_open_kv(&b8, m, KVLM_F16, 8);
    float *la = malloc((size_t)a.V * 4), *lb = malloc((size_t)a.V * 4), *l8 = malloc((size_t)a.V * 4);
    size_t len;
    int sa, sb, s8;
    unsigned char *rec = saved_record(&a, &len, &sa, la);
    const size_t row = (size_t)c->head_dim * 2; /* f16 */
    assert_int_equal(len, 64 + 4 * N_PROMPT + 2 * (size_t)c->n_layer * c->n_kv_head * N_PROMPT * row + 8);
    char msg[512];
    if (restore(&b, rec, len, &sb, msg)) fail_msg("%s", msg);
    if (restore(&b8, rec, len, &s8, msg)) fail_msg("%s", msg);
    assert_int_equal(kvlm_kv_seq_len(b.kv, sb, NULL), N_PROMPT);
    const int32_t *toks;
    assert_int_equal(kvlm_kv_seq_tokens(b.kv, sb, &toks, NULL), N_PROMPT);
    assert_memory_equal(toks, PROMPT, sizeof PROMPT);
    /* The next token: the saved sequence's own step against the restored ones. */
    const int32_t next = argmax(la, a.V);
    step(&a, sa, &next, 1, la);
    step(&b, sb, &next, 1, lb);
    step(&b8, s8, &next, 1, l8);
    assert_memory_equal(la, lb, (size_t)a.V * 4); /* same block size: the same sums in the same order */
    double d = 0;
    for (int i = 0; i < a.V; i++) d = fmax(d, fabs((double)la[i] - l8[i]));
    assert_true(d < 1e-5);
    int32_t ga[8], gb[8], g8[8];
    greedy(&a, sa, la, 8, ga);
    greedy(&b, sb, lb, 8, gb);
    greedy(&b8, s8, l8, 8, g8);
    assert_memory_equal(ga, gb, sizeof ga);
    assert_memory_equal(ga, g8, sizeof ga);
    /* The restored blocks are in the prefix index: the prompt's 3 whole blocks of 4 hit. */
    kvlm_kv_seq_free(b.kv, sb);
    int cached, s2 = kvlm_kv_seq_new_prefixed(b.kv, PROMPT, N_PROMPT, &cached, &err);
    assert_true(s2 >= 0);
    assert_int_equal(cached, 12);
    kvlm_kv_seq_free(b.kv, s2);
    if (kv_check_invariants(b.kv, &err)) fail_msg("%s", err.msg);
    free(rec);
    free(la), free(lb), free(l8);
    rig_close_kv(&a), rig_close_kv(&b), rig_close_kv(&b8);
    kvlm_model_free(m);
}

/* Overwrites the record's fingerprint and recomputes its checksum. */
static void refingerprint(unsigned char *rec, size_t len) {
    rec[16] ^= 0x5a;
    const uint64_t sum = XXH3_64bits(rec, len - 8);
    memcpy(rec + len - 8, &sum, 8);
}

static void test_refused(void **state) {
    (void)state;
    kvlm_error err;
    kvlm_model *m = kvlm_model_load(TINY, NULL, &err);
    assert_non_null(m);
    rig a, b;
    rig_open_kv(&a, m, KVLM_F16, 4);
    rig_open_kv(&b, m, KVLM_F16, 4);
    float *la = malloc((size_t)a.V * 4);
    size_t len;
    int sa, sb;
    unsigned char *rec = saved_record(&a, &len, &sa, la);
    char msg[512];
    /* every truncation */
    for (size_t n = 0; n < len; n++) {
        assert_int_equal(restore(&b, rec, n, &sb, msg), KVLM_ERR_FORMAT);
        assert_int_equal(sb, -1);
        if (n >= 64 && n < len - 8 && !strstr(msg, "ends inside")) fail_msg("truncated at %zu: %s", n, msg);
    }
    assert_empty(&b);
    /* a bit flip in the header's magic, a field, a token, a row, the checksum */
    const size_t at[] = {0, 40, 64 + 4, 64 + 4 * N_PROMPT + 37, len - 60, len - 1};
    const char *want[] = {"bad magic", "KV has", "checksum", "checksum", "checksum", "checksum"};
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        unsigned char *c = malloc(len);
        memcpy(c, rec, len);
        c[at[i]] ^= 0x10;
        assert_int_equal(restore(&b, c, len, &sb, msg), KVLM_ERR_FORMAT);
        if (!strstr(msg, want[i])) fail_msg("flip at %zu: %s", at[i], msg);
        free(c);
        assert_empty(&b);
    }
    /* another fingerprint with a valid checksum */
    unsigned char *c = malloc(len);
    memcpy(c, rec, len);
    refingerprint(c, len);
    assert_int_equal(restore(&b, c, len, &sb, msg), KVLM_ERR_FORMAT);
    assert_non_null(strstr(msg, "another model file or setting"));
    free(c);
    assert_empty(&b);
    /* another KV dtype */
    rig f32;
    rig_open_kv(&f32, m, KVLM_F32, 4);
    assert_int_equal(restore(&f32, rec, len, &sb, msg), KVLM_ERR_FORMAT);
    assert_non_null(strstr(msg, "saved as f16, the cache holds f32"));
    assert_empty(&f32);
    rig_close_kv(&f32);
    /* another model */
    kvlm_model *lm = kvlm_model_load(LLAMA_GGUF, NULL, &err);
    assert_non_null(lm);
    rig other;
    rig_open_kv(&other, lm, KVLM_F16, 4);
    assert_int_equal(restore(&other, rec, len, &sb, msg), KVLM_ERR_FORMAT);
    assert_non_null(strstr(msg, "this model has"));
    assert_empty(&other);
    rig_close_kv(&other);
    kvlm_model_free(lm);
    /* the intact record still restores after all that */
    assert_int_equal(restore(&b, rec, len, &sb, msg), 0);
    assert_int_equal(kvlm_kv_seq_len(b.kv, sb, NULL), N_PROMPT);
    free(rec);
    free(la);
    rig_close_kv(&a), rig_close_kv(&b);
    kvlm_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_round_trip), cmocka_unit_test(test_refused)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
