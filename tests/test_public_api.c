/*
 * The conventions an embedding program relies on: the version (header
 * macros agree with each other and with kvlm_version(), and `kvlm
 * --version` prints it with the ISA), kvlm_error_set (formats, returns
 * the code, truncates at KVLM_ERROR_MAX - 1 bytes, accepts NULL), the
 * values every *_default_params() gives, the return convention (a named
 * negative status with a message, never a bare -1) and the model
 * parameters taken at load (use_mmap 0 gives the same logits as the
 * mapping). Only the public headers are included: this is what an
 * installed program sees.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kvlm.h"
#include "kvlm_measure.h"

#define GPT2 "models/shakespeare-gpt2"
#define LLAMA_GGUF "models/shakespeare-llama/shakespeare-llama-q8_0.gguf"

#define STR_(x) #x
#define STR(x) STR_(x)

static void test_version(void **state) {
    (void)state;
    assert_string_equal(KVLM_VERSION,
                        STR(KVLM_VERSION_MAJOR) "." STR(KVLM_VERSION_MINOR) "." STR(KVLM_VERSION_PATCH));
    assert_string_equal(kvlm_version(), KVLM_VERSION);

    char want[128];
    snprintf(want, sizeof want, "kvlm %s (%s)\n", KVLM_VERSION, kvlm_isa_name(kvlm_isa_best()));
    char *out = NULL;
    assert_int_equal(th_run_kvlm(&out, "--version"), 0);
    assert_string_equal(out, want);
    free(out);
}

/* Exact bytes: well-formed sequences kept, each stray byte one U+FFFD. */
static void test_utf8_sanitize(void **state) {
    (void)state;
    const char in[] = "a\xC3\xA9\x80z\xE2\x82\xF0\x9F\x98\x80";
    const char want[] = "a\xC3\xA9\xEF\xBF\xBDz\xEF\xBF\xBD\xEF\xBF\xBD\xF0\x9F\x98\x80";
    char out[3 * sizeof in];
    size_t n = kvlm_utf8_sanitize(in, sizeof in - 1, out);
    assert_int_equal(n, sizeof want - 1);
    assert_memory_equal(out, want, n);
    assert_int_equal(kvlm_utf8_sanitize("", 0, out), 0);
}

static void test_error_set(void **state) {
    (void)state;
    kvlm_error err;
    memset(&err, 0x55, sizeof err);
    assert_int_equal(kvlm_error_set(&err, KVLM_ERR_ARG, "--n %d is outside [%d, %d]", 0, 1, 8), KVLM_ERR_ARG);
    assert_int_equal(err.code, KVLM_ERR_ARG);
    assert_string_equal(err.msg, "--n 0 is outside [1, 8]");

    /* NULL is allowed: only the code comes back. */
    assert_int_equal(kvlm_error_set(NULL, KVLM_ERR_SYSTEM, "cannot start %s", "a thread"), KVLM_ERR_SYSTEM);

    /* A message longer than the buffer is cut, still terminated. */
    char long_text[2 * KVLM_ERROR_MAX];
    memset(long_text, 'x', sizeof long_text - 1);
    long_text[sizeof long_text - 1] = 0;
    memset(&err, 0x55, sizeof err);
    assert_int_equal(kvlm_error_set(&err, KVLM_ERR_FORMAT, "%s", long_text), KVLM_ERR_FORMAT);
    assert_int_equal(strlen(err.msg), KVLM_ERROR_MAX - 1);
    assert_int_equal(err.msg[0], 'x');

    /* The codes stay distinct (KVLM_ERR_SYSTEM is the newest). */
    const int codes[] = {KVLM_OK,     KVLM_ERR_IO,          KVLM_ERR_FORMAT, KVLM_ERR_ARG,
                         KVLM_ERR_NOMEM, KVLM_ERR_UNSUPPORTED, KVLM_ERR_BUSY,   KVLM_ERR_SYSTEM};
    for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) assert_int_equal(codes[i], -(int)i);
}

static void test_default_params(void **state) {
    (void)state;
    const kvlm_model_params mp = kvlm_model_default_params();
    assert_int_equal(mp.isa, KVLM_ISA_AUTO);
    assert_int_equal(mp.repack, 1);
    assert_int_equal(mp.use_mmap, 1);

    const kvlm_kv_options ko = kvlm_kv_default_params();
    assert_int_equal(ko.dtype, KVLM_F32);
    assert_int_equal(ko.block_size, 16);
    assert_int_equal(ko.n_blocks, 0);
    assert_int_equal(ko.max_seqs, 1);
    assert_int_equal(ko.reserve_tokens, 0);
    assert_int_equal(ko.no_prefix_cache, 0);

    const kvlm_engine_options eo = kvlm_engine_default_params();
    assert_int_equal(eo.threads, 0);
    assert_int_equal(eo.isa, KVLM_ISA_AUTO);

    const kvlm_sampler_options so = kvlm_sampler_default_params();
    assert_true(so.temperature == 1.0f && so.top_p == 1.0f && so.repetition_penalty == 1.0f);
    assert_true(so.min_p == 0.0f && so.frequency_penalty == 0.0f && so.presence_penalty == 0.0f);
    assert_int_equal(so.top_k, 0);
    assert_int_equal(so.penalty_window, 0);
    assert_null(so.logit_bias);
    assert_int_equal(so.n_logit_bias, 0);
    assert_null(so.order);
    assert_int_equal(so.seed, 0);

    const kvlm_speculation sp = kvlm_speculation_default_params();
    assert_int_equal(sp.mode, KVLM_DRAFT_NONE);
    assert_int_equal(sp.k, 4);
    assert_int_equal(sp.ngram, 3);
    assert_int_equal(sp.fixed, 0);

    const kvlm_request_params rp = kvlm_request_default_params();
    assert_null(rp.prompt);
    assert_int_equal(rp.n_prompt, 0);
    assert_int_equal(rp.max_tokens, 16);
    assert_int_equal(rp.n_choices, 1);
    assert_int_equal(rp.n_eos, 0);
    assert_int_equal(rp.logprobs, 0);
    assert_true(rp.deadline == 0);
    assert_memory_equal(&rp.sampling, &so, sizeof so);
    assert_int_equal(rp.text, 0);
    assert_null(rp.tokenizer);
    assert_int_equal(rp.n_stops, 0);
    assert_null(rp.on_token);
    assert_null(rp.on_finish);
    assert_null(rp.on_admit);
    assert_null(rp.grammar);
    assert_int_equal(rp.entropy, 0);
    assert_memory_equal(&rp.speculation, &sp, sizeof sp);

    const kvlm_sched_options sc = kvlm_sched_default_params();
    assert_int_equal(sc.max_batch_tokens, 256);
    assert_int_equal(sc.max_waiting, 256);
    assert_int_equal(sc.recompute, 0);
    assert_int_equal(sc.max_prefill_tokens, 0);

    const kvlm_attn_bench_options ab = kvlm_attn_bench_default_params();
    assert_int_equal(ab.ctx_len, 0);
    assert_int_equal(ab.block_size, 16);
    assert_int_equal(ab.scatter, 1);
    assert_int_equal(ab.rounds, 5);
    assert_int_equal(ab.hot, 0);
    assert_int_equal(ab.isa, KVLM_ISA_AUTO);
    assert_int_equal(ab.kv_dtype, KVLM_F32);
    assert_int_equal(ab.seed, 1);
}

/* err filled with code and a message holding `part`; err was poisoned first. */
static void expect_err(const kvlm_error *err, int code, const char *part) {
    assert_int_equal(err->code, code);
    if (!strstr(err->msg, part)) fail_msg("message '%s' does not mention '%s'", err->msg, part);
}

static void test_return_codes(void **state) {
    (void)state;
    kvlm_error err;
    kvlm_dtype d = KVLM_Q4_0;
    memset(&err, 0x55, sizeof err);
    assert_int_equal(kvlm_dtype_parse("nope", &d, &err), KVLM_ERR_ARG);
    expect_err(&err, KVLM_ERR_ARG, "'nope'");
    assert_int_equal(d, KVLM_Q4_0); /* untouched on failure */
    assert_int_equal(kvlm_dtype_parse(NULL, &d, &err), KVLM_ERR_ARG);
    assert_int_equal(kvlm_dtype_parse("BF16", &d, &err), 0);
    assert_int_equal(d, KVLM_BF16);

    memset(&err, 0x55, sizeof err);
    assert_null(kvlm_model_load("models/no-such-model", NULL, &err));
    expect_err(&err, KVLM_ERR_IO, "models/no-such-model");
    assert_null(kvlm_model_load("models/no-such-model", NULL, NULL)); /* NULL err is allowed */
    kvlm_model_params mp = kvlm_model_default_params();
    mp.isa = (kvlm_isa)99;
    memset(&err, 0x55, sizeof err);
    assert_null(kvlm_model_load(GPT2, &mp, &err));
    expect_err(&err, KVLM_ERR_ARG, "isa 99");
    mp = kvlm_model_default_params();
    mp.use_mmap = 2;
    assert_null(kvlm_model_synthetic("gpt2-tiny", KVLM_F32, 1, &mp, &err));
    expect_err(&err, KVLM_ERR_ARG, "use_mmap 2");
    assert_null(kvlm_model_synthetic("gpt2-huge", KVLM_F32, 1, NULL, &err));
    expect_err(&err, KVLM_ERR_ARG, "gpt2-huge");

    kvlm_model *m = kvlm_model_synthetic("gpt2-tiny", KVLM_F32, 1, NULL, &err);
    assert_non_null(m);
    kvlm_kv_options ko = kvlm_kv_default_params();
    ko.max_seqs = 2;
    kvlm_kv *kv = kvlm_kv_create(m, &ko, &err);
    assert_non_null(kv);
    assert_int_equal(kvlm_kv_seq_new(kv, &err), 0);
    assert_int_equal(kvlm_kv_seq_new(kv, &err), 1);
    memset(&err, 0x55, sizeof err);
    assert_int_equal(kvlm_kv_seq_new(kv, &err), KVLM_ERR_NOMEM); /* both slots taken */
    expect_err(&err, KVLM_ERR_NOMEM, "all 2 sequence slots");
    assert_int_equal(kvlm_kv_seq_fork(kv, 0, &err), KVLM_ERR_NOMEM);
    kvlm_kv_seq_free(kv, 1);
    memset(&err, 0x55, sizeof err);
    assert_int_equal(kvlm_kv_seq_fork(kv, 1, &err), KVLM_ERR_ARG);
    expect_err(&err, KVLM_ERR_ARG, "no sequence 1");
    assert_int_equal(kvlm_kv_seq_len(kv, 0, &err), 0);
    memset(&err, 0x55, sizeof err);
    assert_int_equal(kvlm_kv_seq_len(kv, 7, &err), KVLM_ERR_ARG);
    expect_err(&err, KVLM_ERR_ARG, "no sequence 7");
    int n_cached = -5;
    const int32_t prompt[1] = {1};
    assert_int_equal(kvlm_kv_seq_new_prefixed(kv, prompt, 1 << 20, &n_cached, &err), KVLM_ERR_ARG);
    expect_err(&err, KVLM_ERR_ARG, "context window");
    kvlm_kv_free(kv);
    kvlm_model_free(m);

    /* Stop strings and text streams report their status through err and
     * leave it alone on success. */
    const char *stops[] = {"END"};
    kvlm_stop *st = kvlm_stop_create(stops, 1, &err);
    assert_non_null(st);
    const char *out;
    size_t n;
    memset(&err, 0x55, sizeof err);
    assert_int_equal(kvlm_stop_push(st, "abEN", 4, &out, &n, &err), 0);
    assert_int_equal(n, 2); /* "EN" may begin the stop string */
    assert_int_equal(kvlm_stop_push(st, "Dx", 2, &out, &n, &err), 1);
    assert_int_equal(n, 0);
    assert_int_equal(kvlm_stop_flush(st, &out, &n, &err), 0);
    assert_int_equal((unsigned char)err.msg[0], 0x55);
    kvlm_stop_free(st);
    kvlm_text_stream *ts = kvlm_text_stream_create(NULL, NULL, 0, &err);
    assert_non_null(ts);
    assert_int_equal(kvlm_text_stream_push(ts, 42, &out, &n, &err), 0);
    assert_int_equal(n, 3);
    assert_memory_equal(out, "42 ", 3);
    assert_int_equal(err.code, KVLM_OK);
    assert_int_equal(kvlm_text_stream_finish(ts, &out, &n, &err), 0);
    assert_int_equal(n, 0);
    kvlm_text_stream_free(ts);
}

/* The logits of a 4-token prompt in one step. */
static void prompt_logits(kvlm_model *m, float *logits) {
    kvlm_error err;
    kvlm_engine_options eo = kvlm_engine_default_params();
    eo.threads = 2;
    kvlm_kv *kv = kvlm_kv_create(m, NULL, &err);
    assert_non_null(kv);
    kvlm_engine *e = kvlm_engine_create(m, kv, &eo, &err);
    assert_non_null(e);
    const int32_t ids[4] = {11, 12, 13, 14};
    const int seq = kvlm_kv_seq_new(kv, &err);
    assert_int_equal(seq, 0);
    const kvlm_batch_item it = {.seq = seq, .tokens = ids, .n_tokens = 4, .logits_all = 0};
    assert_int_equal(kvlm_engine_step(e, &it, 1, logits, &err), 0);
    kvlm_engine_free(e);
    kvlm_kv_free(kv);
}

/* Whether the process has a mapping of a file whose path ends in `tail`. */
static int mapped(const char *tail) {
    FILE *f = fopen("/proc/self/maps", "r"); /* its size is not known in advance: read it by line */
    assert_non_null(f);
    char line[4096];
    int found = 0, lines = 0;
    while (fgets(line, sizeof line, f)) {
        lines++;
        size_t n = strcspn(line, "\n");
        line[n] = 0;
        const size_t k = strlen(tail);
        if (n >= k && !strcmp(line + n - k, tail)) found = 1;
    }
    fclose(f);
    assert_true(lines > 0);
    return found;
}

/* use_mmap 0 reads each weight file into memory (no mapping of it stays):
 * the same model, bit for bit, for safetensors and GGUF. */
static void test_model_read_into_memory(void **state) {
    (void)state;
    const char *paths[] = {GPT2, LLAMA_GGUF};
    const char *files[] = {"shakespeare-gpt2/model.safetensors", "shakespeare-llama/shakespeare-llama-q8_0.gguf"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        kvlm_error err;
        kvlm_model_params mp = kvlm_model_default_params();
        mp.use_mmap = 0;
        kvlm_model *read = kvlm_model_load(paths[i], &mp, &err);
        if (!read) fail_msg("%s: %s", paths[i], err.msg);
        assert_false(mapped(files[i]));
        mp.use_mmap = 1;
        kvlm_model *mapped_model = kvlm_model_load(paths[i], &mp, &err);
        if (!mapped_model) fail_msg("%s: %s", paths[i], err.msg);
        assert_true(mapped(files[i]));
        kvlm_model *mapped = mapped_model;
        const int V = kvlm_model_config(mapped)->vocab_size;
        assert_int_equal(kvlm_model_config(read)->vocab_size, V);
        assert_int_equal(kvlm_model_param_count(read), kvlm_model_param_count(mapped));
        assert_int_equal(kvlm_model_repacked_bytes(read), kvlm_model_repacked_bytes(mapped));
        float *a = malloc((size_t)V * sizeof(float)), *b = malloc((size_t)V * sizeof(float));
        prompt_logits(mapped, a);
        prompt_logits(read, b);
        assert_memory_equal(a, b, (size_t)V * sizeof(float));
        free(a), free(b);
        kvlm_model_free(read);
        kvlm_model_free(mapped);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_error_set),
        cmocka_unit_test(test_utf8_sanitize),
        cmocka_unit_test(test_default_params),
        cmocka_unit_test(test_return_codes),
        cmocka_unit_test(test_model_read_into_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
