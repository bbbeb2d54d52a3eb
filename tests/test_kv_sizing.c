/*
 * KV cache sizing: the formula on the built-in presets (exact byte counts
 * and the article's human strings), the unit formatting and size parsing
 * helpers, kvlm_config_load on the GPT-2 fixtures and on Llama-style
 * config.json files written here (grouped-query heads sized exactly),
 * capacity planning on a hand-computed case, and `kvlm kv` end to end
 * (JSON and the human table), bad input included with its exit status.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "app/kv_sizing.h"
#include "kvlm.h"

#define TINY "tests/fixtures/gpt2/hf_f32"

#define KiB 1024ull
#define MiB (1024ull * KiB)
#define GiB (1024ull * MiB)

/* The article's f16 table: bytes per token, at 4,096 and at 131,072. */
static const struct preset_case {
    const char *name;
    uint64_t bpt, at4k, at128k;
    const char *h_bpt, *h_4k, *h_128k;
} preset_cases[] = {
    {"gpt2-124m", 36 * KiB, 144 * MiB, 4608 * MiB, "36 KiB", "144 MiB", "4.5 GiB"},
    {"llama-3.1-8b", 128 * KiB, 512 * MiB, 16 * GiB, "128 KiB", "512 MiB", "16 GiB"},
    {"mistral-7b", 128 * KiB, 512 * MiB, 16 * GiB, "128 KiB", "512 MiB", "16 GiB"},
    {"qwen2.5-7b", 56 * KiB, 224 * MiB, 7 * GiB, "56 KiB", "224 MiB", "7 GiB"},
    {"llama-2-70b", 320 * KiB, 1280 * MiB, 40 * GiB, "320 KiB", "1.25 GiB", "40 GiB"},
    {"llama-2-7b", 512 * KiB, 2 * GiB, 64 * GiB, "512 KiB", "2 GiB", "64 GiB"},
    {"qwen3-30b-a3b", 96 * KiB, 384 * MiB, 12 * GiB, "96 KiB", "384 MiB", "12 GiB"},
};
#define N_CASES (sizeof preset_cases / sizeof preset_cases[0])

/* ----------------------------------------------------------- library */

static void test_preset_bytes(void **state) {
    (void)state;
    size_t n;
    kvs_presets(&n);
    assert_int_equal(n, N_CASES + 1); /* and gemma-3-1b, with windows: test_window_preset */
    for (size_t i = 0; i < N_CASES; i++) {
        const struct preset_case *c = &preset_cases[i];
        const kvs_model *m = kvs_preset_find(c->name);
        assert_non_null(m);
        uint64_t bpt, t;
        char h[48];
        assert_int_equal(kvs_bytes_per_token(m, KVLM_F16, &bpt), 0);
        assert_int_equal(bpt, c->bpt);
        assert_string_equal(kvs_human_bytes(bpt, h, sizeof h), c->h_bpt);
        assert_int_equal(kvs_mul(bpt, 4096, &t), 0);
        assert_int_equal(t, c->at4k);
        assert_string_equal(kvs_human_bytes(t, h, sizeof h), c->h_4k);
        assert_int_equal(kvs_mul(bpt, 131072, &t), 0);
        assert_int_equal(t, c->at128k);
        assert_string_equal(kvs_human_bytes(t, h, sizeof h), c->h_128k);
    }
    const kvs_model *g = kvs_preset_find("GPT2-124M"); /* names are case-insensitive */
    uint64_t v;
    assert_int_equal(kvs_bytes_per_token(g, KVLM_F32, &v), 0);
    assert_int_equal(v, 73728);
    assert_int_equal(kvs_bytes_per_token(g, KVLM_F16, &v), 0);
    assert_int_equal(v, 36864);
    /* the library's own figure, one source for sizing and the cache */
    kvlm_config gc = {.n_layer = 12, .n_head = 12, .n_kv_head = 12, .head_dim = 64, .n_ctx = 1024};
    assert_int_equal(kvlm_kv_bytes_per_token(&gc, KVLM_F32), 73728);
    /* bf16 is no KV dtype: no size, the same answer kvlm_kv_create gives */
    assert_int_equal(kvs_bytes_per_token(g, KVLM_BF16, &v), -1);
    assert_false(kvlm_kv_dtype_supported(KVLM_BF16));
    kvlm_dtype kt = KVLM_F32;
    kvlm_error kerr;
    assert_int_equal(kvlm_kv_dtype_parse("bf16", &kt, &kerr), KVLM_ERR_ARG);
    assert_string_equal(kerr.msg, "'bf16' is not a KV cache dtype (f32, f16 or q8_0)");
    assert_int_equal(kvlm_kv_dtype_parse("Q8_0", &kt, &kerr), 0);
    assert_int_equal(kt, KVLM_Q8_0);
    /* q8_0: 2 x 12 layers x 12 KV heads x (64 int8 + 2 f16 scales of 2 B) */
    assert_int_equal(kvs_bytes_per_token(g, KVLM_Q8_0, &v), 0);
    assert_int_equal(v, 2 * 12 * 12 * (64 + 2 * 2));
    assert_int_equal(v, 19584);
    /* a head dim that is not whole blocks of 32 has no q8_0 size */
    kvs_model odd = *g;
    odd.head_dim = 48;
    assert_int_equal(kvs_bytes_per_token(&odd, KVLM_Q8_0, &v), -1);
    assert_int_equal(kvs_bytes_per_token(&odd, KVLM_F16, &v), 0);
    assert_int_equal(v, 2 * 12 * 12 * 48 * 2);
    /* bytes of numbers: whole blocks */
    assert_int_equal(kvs_numbers_bytes(KVLM_Q8_0, 64, &v), 0);
    assert_int_equal(v, 68);
    assert_int_equal(kvs_numbers_bytes(KVLM_Q8_0, 33, &v), 0);
    assert_int_equal(v, 68);
    assert_int_equal(kvs_numbers_bytes(KVLM_F32, 33, &v), 0);
    assert_int_equal(v, 132);
    assert_true(kvs_dtype_bytes(KVLM_Q8_0) == 1.0625);
    /* weights may be any dtype: Q4_K's 256-value blocks of 144 bytes */
    assert_int_equal(kvs_numbers_bytes(KVLM_Q4_K, 257, &v), 0);
    assert_int_equal(v, 288);
    assert_int_equal(kvs_numbers_bytes((kvlm_dtype)99, 1, &v), -1);
    /* Llama 2 70B: 64 query heads over 8 KV heads, an MHA twin is 8x. */
    const kvs_model *l70 = kvs_preset_find("llama-2-70b");
    assert_int_equal(kvs_mha_bytes_per_token(l70, KVLM_F16, &v), 0);
    assert_int_equal(v * 4096, 10 * GiB);
    assert_int_equal(l70->params, 68976648192ull);
    assert_null(kvs_preset_find("llama-4"));
}

static void test_human_and_parse(void **state) {
    (void)state;
    static const struct { uint64_t v; const char *s; } h[] = {
        {0, "0 B"},          {1023, "1023 B"},          {1024, "1 KiB"},         {1536, "1.5 KiB"},
        {1280, "1.25 KiB"},  {1048575, "1 MiB"},        {1043333, "1018.88 KiB"}, {5 * GiB / 4, "1.25 GiB"},
        {UINT64_MAX, "16 EiB"}, {3 * GiB + GiB / 3, "3.33 GiB"},
    };
    char b[48];
    for (size_t i = 0; i < sizeof h / sizeof h[0]; i++) assert_string_equal(kvs_human_bytes(h[i].v, b, sizeof b), h[i].s);
    assert_string_equal(kvs_thousands(131072, b, sizeof b), "131,072");
    assert_string_equal(kvs_thousands(999, b, sizeof b), "999");
    assert_string_equal(kvs_thousands(68976648192ull, b, sizeof b), "68,976,648,192");

    static const struct { const char *s; uint64_t v; } ok[] = {
        {"24GiB", 24 * GiB}, {"24gib", 24 * GiB}, {"80GB", 80000000000ull}, {"1.5TiB", 1536 * GiB},
        {"512", 512},        {"512B", 512},       {"2KB", 2000},            {"2KiB", 2048},
        {"0.5MiB", MiB / 2}, {"1TB", 1000000000000ull}, {"0", 0},           {"1.0000001KiB", 1024},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        uint64_t v = 1;
        if (kvs_parse_size(ok[i].s, &v)) fail_msg("'%s' rejected", ok[i].s);
        assert_int_equal(v, ok[i].v);
    }
    static const char *bad[] = {"", "GiB", "-1GiB", "24 GiB", "24GiBs", "24G", "1.GiB", ".5GiB", "1e9",
                                "+5", "99999999999999999999", "20000000TiB", "0x10", "24GiB ", NULL};
    for (int i = 0; bad[i]; i++) {
        uint64_t v;
        if (!kvs_parse_size(bad[i], &v)) fail_msg("'%s' accepted as %llu", bad[i], (unsigned long long)v);
    }
    assert_int_not_equal(kvs_parse_size(NULL, &(uint64_t){0}), 0);
}

/* 24 GiB, 16 GiB of weights, Llama 3.1 8B in f16 (128 KiB/token),
 * L = 8,192, M = 1,000, B = 16:
 *   KV memory  = 8 GiB = 8,589,934,592 B
 *   contiguous = floor(8 GiB / (8,192 x 128 KiB = 1 GiB)) = 8, util 1000/8192
 *   paged      = ceil(1000/16) = 63 blocks = 1,008 tokens = 132,120,576 B;
 *                floor(8,589,934,592 / 132,120,576) = 65, util 1000/1008 */
static void test_plan_hand_computed(void **state) {
    (void)state;
    kvs_plan_in in = {.memory = 24 * GiB, .weights = 16 * GiB, .bytes_per_token = 128 * KiB, .ctx_len = 8192,
                      .mean_len = 1000, .block_size = 16};
    kvs_plan p;
    kvlm_error err;
    assert_int_equal(kvs_plan_compute(&in, &p, &err), 0);
    assert_true(p.weights_fit);
    assert_int_equal(p.kv_memory, 8589934592ull);
    assert_int_equal(p.contig_bytes, GiB);
    assert_int_equal(p.contig_requests, 8);
    assert_int_equal(p.paged_blocks, 63);
    assert_int_equal(p.paged_bytes, 132120576ull);
    assert_int_equal(p.paged_requests, 65);
    assert_float_equal(p.contig_util, 1000.0 / 8192, 1e-12);
    assert_float_equal(p.paged_util, 1000.0 / 1008, 1e-12);
    /* A mean length that fills whole blocks wastes nothing. */
    in.mean_len = 1024;
    assert_int_equal(kvs_plan_compute(&in, &p, &err), 0);
    assert_int_equal(p.paged_requests, 64);
    assert_float_equal(p.paged_util, 1.0, 0);
    /* Weights beyond memory: reported, not an error here. */
    in.weights = 25 * GiB;
    assert_int_equal(kvs_plan_compute(&in, &p, &err), 0);
    assert_false(p.weights_fit);
    assert_int_equal(p.paged_requests, 0);
    /* Bad inputs name what is wrong. */
    in.weights = 0;
    in.mean_len = 9000;
    assert_int_equal(kvs_plan_compute(&in, &p, &err), KVLM_ERR_ARG);
    assert_non_null(strstr(err.msg, "mean-len"));
    in.mean_len = 10;
    in.block_size = 0;
    assert_int_equal(kvs_plan_compute(&in, &p, &err), KVLM_ERR_ARG);
    assert_non_null(strstr(err.msg, "block-size"));
    in.block_size = 16;
    in.ctx_len = 0;
    assert_int_equal(kvs_plan_compute(&in, &p, &err), KVLM_ERR_ARG);
    in.ctx_len = UINT64_MAX / 2;
    in.mean_len = 10;
    assert_int_equal(kvs_plan_compute(&in, &p, &err), KVLM_ERR_ARG);
    assert_non_null(strstr(err.msg, "64 bits"));
}

/* ---------------------------------------------------- kvlm_config_load */

typedef struct scratch {
    char *dir;
    char path[1024];
} scratch;

static int setup(void **state) {
    scratch *s = calloc(1, sizeof *s);
    if (!s || !(s->dir = th_tempdir())) return -1;
    *state = s;
    return 0;
}

static int teardown(void **state) {
    scratch *s = *state;
    th_rmtree(s->dir);
    free(s->dir);
    free(s);
    return 0;
}

/* Writes dir/sub/config.json (sub created) and returns its directory. */
static const char *put_config(scratch *s, const char *sub, const char *json) {
    char cmd[1200];
    snprintf(s->path, sizeof s->path, "%s/%s", s->dir, sub);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", s->path);
    if (system(cmd)) fail_msg("mkdir %s", s->path);
    char file[1100];
    snprintf(file, sizeof file, "%s/config.json", s->path);
    if (th_write_file(file, json, strlen(json))) fail_msg("cannot write %s", file);
    return s->path;
}

/* A Llama-family config.json: 4 layers, 8 query heads, hidden 256 (head
 * dim 32); kv_heads 0 leaves num_key_value_heads out. */
static char *llama_json(const char *type, int kv_heads, const char *extra) {
    char kv[64] = "";
    if (kv_heads) snprintf(kv, sizeof kv, "\"num_key_value_heads\": %d, ", kv_heads);
    char *b = malloc(1024);
    assert_non_null(b);
    snprintf(b, 1024,
             "{\"model_type\": \"%s\", \"num_hidden_layers\": 4, \"num_attention_heads\": 8, %s"
             "\"hidden_size\": 256, \"intermediate_size\": 688, \"max_position_embeddings\": 2048, "
             "\"vocab_size\": 1000, \"rms_norm_eps\": 1e-05, \"eos_token_id\": [7, 9], "
             "\"torch_dtype\": \"bfloat16\"%s}",
             type, kv, extra);
    return b;
}

static void test_config_load(void **state) {
    scratch *s = *state;
    kvlm_config c;
    kvlm_error err;
    /* GPT-2 fixture: directory, config.json, .safetensors, llm.c header. */
    const char *paths[] = {TINY, TINY "/config.json", TINY "/model.safetensors", "tests/fixtures/gpt2/llmc_f32.bin",
                           "tests/fixtures/gpt2/llmc_bf16.bin", "tests/fixtures/gpt2/hf_bf16_sharded"};
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        if (kvlm_config_load(paths[i], &c, &err)) fail_msg("%s: %s", paths[i], err.msg);
        assert_string_equal(c.arch, "gpt2");
        assert_int_equal(c.n_layer, 2);
        assert_int_equal(c.n_head, 4);
        assert_int_equal(c.n_kv_head, 4);
        assert_int_equal(c.head_dim, 16);
        assert_int_equal(c.n_ctx, 32);
    }
    /* Llama: 8 query heads over 2 KV heads, head_dim = 256 / 8 = 32. */
    char *j = llama_json("llama", 2, "");
    const char *dir = put_config(s, "llama-gqa", j);
    free(j);
    assert_int_equal(kvlm_config_load(dir, &c, &err), 0);
    assert_string_equal(c.arch, "llama");
    assert_int_equal(c.n_layer, 4);
    assert_int_equal(c.n_head, 8);
    assert_int_equal(c.n_kv_head, 2);
    assert_int_equal(c.head_dim, 32);
    assert_int_equal(c.n_ff, 688);
    assert_int_equal(c.n_ctx, 2048);
    assert_int_equal(c.vocab_size, 1000);
    assert_int_equal(c.eos_id, 7); /* first of the list */
    assert_int_equal(c.weight_dtype, KVLM_BF16);
    assert_float_equal(c.norm_eps, 1e-5, 1e-12);
    /* The model loader reads the same config, then the weights: a one-byte
     * weight file is refused naming that file. */
    char st[1100];
    snprintf(st, sizeof st, "%s/model.safetensors", dir);
    assert_int_equal(th_write_file(st, "x", 1), 0);
    assert_null(kvlm_model_load(dir, NULL, &err));
    assert_int_equal(err.code, KVLM_ERR_FORMAT);
    assert_non_null(strstr(err.msg, "model.safetensors"));
    /* num_key_value_heads absent: one KV head per query head. */
    j = llama_json("qwen2", 0, "");
    dir = put_config(s, "qwen-mha", j);
    free(j);
    assert_int_equal(kvlm_config_load(dir, &c, &err), 0);
    assert_string_equal(c.arch, "qwen2");
    assert_int_equal(c.n_kv_head, 8);
    /* An explicit head_dim wins over hidden_size / heads. */
    j = llama_json("mistral", 4, ", \"head_dim\": 128");
    dir = put_config(s, "mistral-hd", j);
    free(j);
    assert_int_equal(kvlm_config_load(dir, &c, &err), 0);
    assert_string_equal(c.arch, "mistral");
    assert_int_equal(c.head_dim, 128);
    /* Architecture from "architectures" when model_type is missing. */
    dir = put_config(s, "by-class", "{\"architectures\": [\"LlamaForCausalLM\"], \"num_hidden_layers\": 2, "
                                    "\"num_attention_heads\": 4, \"hidden_size\": 64, \"intermediate_size\": 128, "
                                    "\"max_position_embeddings\": 64, \"vocab_size\": 10}");
    assert_int_equal(kvlm_config_load(dir, &c, &err), 0);
    assert_string_equal(c.arch, "llama");
    assert_int_equal(c.eos_id, -1);
}

static const struct bad_config {
    const char *json, *what;
    int code;
} bad_configs[] = {
    {"{\"model_type\": \"llama\", \"num_attention_heads\": 8}", "missing field 'num_hidden_layers'", KVLM_ERR_FORMAT},
    {"{\"model_type\": \"bert\"}", "model_type 'bert'", KVLM_ERR_UNSUPPORTED},
    {"{\"model_type\": \"llama\", \"num_hidden_layers\": 4, \"num_attention_heads\": 8, \"num_key_value_heads\": 3, "
     "\"hidden_size\": 256, \"intermediate_size\": 688, \"max_position_embeddings\": 2048, \"vocab_size\": 1000}",
     "not a multiple of num_key_value_heads = 3", KVLM_ERR_FORMAT},
    {"{\"model_type\": \"llama\", \"num_hidden_layers\": 4, \"num_attention_heads\": 8, \"num_key_value_heads\": 16, "
     "\"hidden_size\": 256, \"intermediate_size\": 688, \"max_position_embeddings\": 2048, \"vocab_size\": 1000}",
     "num_key_value_heads = 16", KVLM_ERR_FORMAT},
    {"{\"model_type\": \"llama\", \"num_hidden_layers\": 0, \"num_attention_heads\": 8, "
     "\"hidden_size\": 256, \"intermediate_size\": 688, \"max_position_embeddings\": 2048, \"vocab_size\": 1000}",
     "num_hidden_layers = 0", KVLM_ERR_FORMAT},
    {"{\"model_type\": \"llama\", \"num_hidden_layers\": 2, \"num_attention_heads\": 6, "
     "\"hidden_size\": 256, \"intermediate_size\": 688, \"max_position_embeddings\": 2048, \"vocab_size\": 1000}",
     "hidden_size = 256 is not a multiple of num_attention_heads = 6", KVLM_ERR_FORMAT},
    {"{\"model_type\": \"llama\", \"num_hidden_layers\": 2, \"num_attention_heads\": 8, \"eos_token_id\": [\"x\"], "
     "\"hidden_size\": 256, \"intermediate_size\": 688, \"max_position_embeddings\": 2048, \"vocab_size\": 1000}",
     "eos_token_id", KVLM_ERR_FORMAT},
    {"{\"model_type\": \"llama\", \"num_hidden_layers\": 2, \"num_attention_heads\": 8, \"rms_norm_eps\": 0, "
     "\"hidden_size\": 256, \"intermediate_size\": 688, \"max_position_embeddings\": 2048, \"vocab_size\": 1000}",
     "rms_norm_eps", KVLM_ERR_FORMAT},
    {"{\"model_type\": \"gpt2\", \"n_layer\": 0, \"n_head\": 4, \"n_embd\": 64, \"vocab_size\": 10}", "n_layer = 0",
     KVLM_ERR_FORMAT},
    {"{\"model_type\": \"llama\", ", "not valid JSON", KVLM_ERR_FORMAT},
};

static void test_config_load_bad(void **state) {
    scratch *s = *state;
    kvlm_config c;
    kvlm_error err;
    for (size_t i = 0; i < sizeof bad_configs / sizeof bad_configs[0]; i++) {
        const char *dir = put_config(s, "bad", bad_configs[i].json);
        memset(&c, 0x55, sizeof c);
        int rc = kvlm_config_load(dir, &c, &err);
        printf("  %3d  %s\n", rc, err.msg);
        assert_int_equal(rc, bad_configs[i].code);
        if (!strstr(err.msg, bad_configs[i].what)) fail_msg("'%s' not in: %s", bad_configs[i].what, err.msg);
        assert_non_null(strstr(err.msg, "config.json"));
        assert_int_equal(c.n_layer, 0); /* cleared on failure */
    }
    assert_int_equal(kvlm_config_load("tests/fixtures/no-such-model", &c, &err), KVLM_ERR_IO);
    assert_non_null(strstr(err.msg, "no-such-model"));
    assert_int_equal(kvlm_config_load("tests/fixtures/gpt2/README.md", &c, &err), KVLM_ERR_FORMAT);
    assert_int_equal(kvlm_config_load("", &c, &err), KVLM_ERR_ARG);
    char cmd[1100];
    snprintf(s->path, sizeof s->path, "%s/empty", s->dir);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", s->path);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(kvlm_config_load(s->path, &c, &err), KVLM_ERR_IO); /* directory without config.json */
    assert_non_null(strstr(err.msg, "config.json"));
}

/* The tiny GPT-2 has 114,944 parameters (head tied to wte); its f32 file
 * also stores two 32 x 32 causal masks, which are not weights. */
static void test_weight_bytes(void **state) {
    (void)state;
    uint64_t b, p;
    kvlm_error err;
    kvlm_model *m = kvlm_model_load(TINY, NULL, &err);
    if (!m) fail_msg("%s", err.msg);
    assert_int_equal(kvlm_model_param_count(m), 114944);
    kvlm_model_free(m);
    assert_int_equal(kvlm_weight_bytes(TINY, &b, &p, &err), 0);
    assert_int_equal(p, 114944);
    assert_int_equal(b, 4 * 114944);
    assert_int_equal(kvlm_weight_bytes(TINY "/config.json", &b, NULL, &err), 0);
    assert_int_equal(b, 4 * 114944);
    assert_int_equal(kvlm_weight_bytes(TINY "/model.safetensors", &b, NULL, &err), 0);
    assert_int_equal(b, 4 * 114944);
    assert_int_equal(kvlm_weight_bytes("tests/fixtures/gpt2/hf_f16", &b, &p, &err), 0);
    assert_int_equal(p, 114944);
    assert_int_equal(b, 2 * 114944);
    assert_int_equal(kvlm_weight_bytes("tests/fixtures/gpt2/hf_bf16_sharded", &b, &p, &err), 0);
    assert_int_equal(b, 2 * p);
    assert_int_equal(kvlm_weight_bytes("tests/fixtures/no-such-model", &b, &p, &err), KVLM_ERR_IO);
    assert_non_null(strstr(err.msg, "no-such-model"));
}

/* ------------------------------------------------------------- the CLI */

static json_t *kv_json(const char *args) {
    char *out = NULL;
    int st = th_run_kvlm(&out, "kv %s --json", args);
    if (st != 0) fail_msg("kvlm kv %s: exit %d: %s", args, st, out);
    json_error_t je;
    json_t *j = json_loads(out, 0, &je);
    if (!j) fail_msg("kvlm kv %s: output is not JSON: %s\n%s", args, je.text, out);
    free(out);
    return j;
}

static json_int_t jint(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v)) fail_msg("'%s' is not an integer", key);
    return json_integer_value(v);
}

static json_t *model0(json_t *j) { return json_array_get(json_object_get(j, "models"), 0); }

static void test_cli_presets(void **state) {
    (void)state;
    json_t *j = kv_json("");
    json_t *models = json_object_get(j, "models");
    assert_int_equal(json_array_size(models), N_CASES + 1);
    assert_string_equal(json_string_value(json_object_get(j, "kv_dtype")), "f16");
    for (size_t i = 0; i < N_CASES; i++) {
        const struct preset_case *c = &preset_cases[i];
        json_t *m = json_array_get(models, i);
        assert_string_equal(json_string_value(json_object_get(m, "name")), c->name);
        assert_int_equal(jint(m, "bytes_per_token"), c->bpt);
        assert_string_equal(json_string_value(json_object_get(m, "bytes_per_token_human")), c->h_bpt);
        json_t *t = json_object_get(m, "totals");
        assert_int_equal(jint(json_array_get(t, 0), "tokens"), 4096);
        assert_int_equal(jint(json_array_get(t, 0), "bytes"), c->at4k);
        assert_string_equal(json_string_value(json_object_get(json_array_get(t, 0), "human")), c->h_4k);
        assert_int_equal(jint(json_array_get(t, 1), "tokens"), 131072);
        assert_int_equal(jint(json_array_get(t, 1), "bytes"), c->at128k);
        assert_string_equal(json_string_value(json_object_get(json_array_get(t, 1), "human")), c->h_128k);
        /* a total past the model's context is marked */
        for (size_t k = 0; k < 2; k++)
            assert_int_equal(json_is_true(json_object_get(json_array_get(t, k), "beyond_max_context")),
                             jint(json_array_get(t, k), "tokens") > jint(m, "max_context"));
        /* MHA twin = bytes per token x query heads / KV heads */
        assert_int_equal(jint(m, "mha_bytes_per_token") * jint(m, "kv_heads"), c->bpt * jint(m, "query_heads"));
    }
    json_t *l70 = json_array_get(models, 4);
    assert_int_equal(jint(l70, "query_heads"), 64);
    assert_float_equal(json_real_value(json_object_get(l70, "gqa_ratio")), 8.0, 0);
    assert_int_equal(jint(l70, "params"), 68976648192ll);
    assert_int_equal(jint(l70, "weight_bytes"), 2 * 68976648192ll);
    assert_int_equal(jint(l70, "max_context"), 4096);
    /* the mixture of experts: 30.5 B parameters, 3.35 B of them active per token */
    json_t *moe = json_array_get(models, 6);
    assert_int_equal(jint(moe, "params"), 30532122624ll);
    assert_int_equal(jint(moe, "active_params"), 3353032704ll);
    assert_true(json_is_null(json_object_get(l70, "active_params")) ||
                jint(l70, "active_params") == 68976648192ll);
    json_decref(j);

    /* The human table: each row carries the article's strings in order. */
    char *out = NULL;
    assert_int_equal(th_run_kvlm(&out, "kv"), 0);
    const char *labels[] = {"GPT-2 124M", "Llama 3.1 8B", "Mistral 7B", "Qwen2.5 7B", "Llama 2 70B", "Llama 2 7B",
                            "Qwen3 30B-A3B"};
    for (size_t i = 0; i < N_CASES; i++) {
        char *row = strstr(out, labels[i]);
        if (!row) fail_msg("no row for %s:\n%s", labels[i], out);
        char *eol = strchr(row, '\n');
        *eol = 0;
        char *a = strstr(row, preset_cases[i].h_bpt), *b = a ? strstr(a + 1, preset_cases[i].h_4k) : NULL;
        char *c = b ? strstr(b + 1, preset_cases[i].h_128k) : NULL;
        if (!c) fail_msg("row '%s' lacks %s, %s, %s", row, preset_cases[i].h_bpt, preset_cases[i].h_4k,
                         preset_cases[i].h_128k);
        *eol = '\n';
    }
    assert_non_null(strstr(out, "4,096 tokens"));
    assert_non_null(strstr(out, "131,072 tokens"));
    free(out);
}

static void test_cli_dtypes_and_ctx(void **state) {
    (void)state;
    json_t *j = kv_json("--preset gpt2-124m --kv-dtype f32");
    assert_int_equal(json_array_size(json_object_get(j, "models")), 1);
    assert_int_equal(jint(model0(j), "bytes_per_token"), 73728);
    assert_int_equal(jint(j, "bytes_per_number"), 4);
    json_decref(j);
    /* q8_0: 2 x 32 layers x 8 KV heads x (128 + 4 scales x 2 B) = 68 KiB */
    j = kv_json("--preset llama-3.1-8b --kv-dtype q8_0 --ctx 1,1000,32768");
    assert_int_equal(jint(model0(j), "bytes_per_token"), 2 * 32 * 8 * (128 + 4 * 2));
    assert_int_equal(jint(model0(j), "bytes_per_token"), 68 * 1024);
    json_t *t = json_object_get(model0(j), "totals");
    assert_int_equal(json_array_size(t), 3);
    assert_int_equal(jint(json_array_get(t, 1), "bytes"), 1000 * 69632ll);
    assert_string_equal(json_string_value(json_object_get(json_array_get(t, 2), "human")), "2.13 GiB");
    assert_false(json_is_true(json_object_get(json_array_get(t, 2), "beyond_max_context"))); /* 32,768 of 131,072 */
    assert_true(json_real_value(json_object_get(j, "bytes_per_number")) == 1.0625);
    assert_string_equal(json_string_value(json_object_get(j, "kv_dtype")), "q8_0");
    json_decref(j);
    j = kv_json("--preset qwen2.5-7b --kv-dtype f16");
    assert_int_equal(jint(model0(j), "bytes_per_token"), 57344);
    json_decref(j);
}

/* The tiny GPT-2: 2 layers x 4 heads x head dim 16 -> 1024 B/token in f32. */
static void test_cli_model(void **state) {
    scratch *s = *state;
    const char *paths[] = {TINY, TINY "/config.json", "tests/fixtures/gpt2/llmc_f32.bin"};
    for (size_t i = 0; i < 3; i++) {
        char args[256];
        snprintf(args, sizeof args, "-m %s --kv-dtype f32 --ctx 32", paths[i]);
        json_t *j = kv_json(args);
        json_t *m = model0(j);
        assert_string_equal(json_string_value(json_object_get(m, "source")), "model");
        assert_int_equal(jint(m, "layers"), 2);
        assert_int_equal(jint(m, "kv_heads"), 4);
        assert_int_equal(jint(m, "head_dim"), 16);
        assert_int_equal(jint(m, "bytes_per_token"), 1024);
        assert_int_equal(jint(json_array_get(json_object_get(m, "totals"), 0), "bytes"), 32 * 1024);
        assert_int_equal(jint(m, "max_context"), 32);
        json_decref(j);
    }
    json_t *j = kv_json("-m " TINY);
    assert_int_equal(jint(model0(j), "bytes_per_token"), 512);
    assert_int_equal(jint(model0(j), "weight_bytes"), 4 * 114944);
    assert_int_equal(jint(model0(j), "params"), 114944);
    json_decref(j);

    /* Llama-style configs: 4 layers, head dim 32; 2 KV heads vs 8. */
    uint64_t bpt[2];
    const int kvh[2] = {2, 8};
    for (int i = 0; i < 2; i++) {
        char *cfg = llama_json("llama", kvh[i], "");
        char sub[32], args[1200];
        snprintf(sub, sizeof sub, "llama-kv%d", kvh[i]);
        const char *dir = put_config(s, sub, cfg);
        free(cfg);
        snprintf(args, sizeof args, "-m '%s'", dir);
        j = kv_json(args);
        bpt[i] = (uint64_t)jint(model0(j), "bytes_per_token");
        assert_string_equal(json_string_value(json_object_get(model0(j), "arch")), "llama");
        assert_int_equal(jint(model0(j), "query_heads"), 8);
        assert_int_equal(jint(model0(j), "kv_heads"), kvh[i]);
        assert_int_equal(jint(model0(j), "mha_bytes_per_token"), 4096);
        assert_true(json_is_null(json_object_get(model0(j), "weight_bytes"))); /* no weight files */
        json_decref(j);
    }
    assert_int_equal(bpt[0], 2 * 4 * 2 * 32 * 2); /* 1,024 B in f16 */
    assert_int_equal(bpt[1], 4 * bpt[0]);
}

static void test_cli_plan(void **state) {
    scratch *s = *state;
    json_t *j = kv_json("--preset llama-3.1-8b --memory 24GiB --weights-bytes 16GiB --ctx-len 8192 --mean-len 1000");
    json_t *p = json_object_get(model0(j), "plan");
    assert_non_null(p);
    assert_int_equal(jint(p, "memory_bytes"), 24 * GiB);
    assert_int_equal(jint(p, "weight_bytes"), 16 * GiB);
    assert_int_equal(jint(p, "kv_memory_bytes"), 8589934592ll);
    assert_int_equal(jint(p, "block_size"), 16);
    json_t *c = json_object_get(p, "contiguous"), *g = json_object_get(p, "paged");
    assert_int_equal(jint(c, "bytes_per_request"), GiB);
    assert_int_equal(jint(c, "requests"), 8);
    assert_int_equal(jint(g, "blocks_per_request"), 63);
    assert_int_equal(jint(g, "bytes_per_request"), 132120576);
    assert_int_equal(jint(g, "requests"), 65);
    assert_float_equal(json_real_value(json_object_get(c, "utilization")), 1000.0 / 8192, 1e-9);
    assert_float_equal(json_real_value(json_object_get(g, "utilization")), 1000.0 / 1008, 1e-9);
    json_decref(j);

    /* Defaults: weights = params x f16, L = max context, M = L / 4. GPT-2
     * 124M in 1 GiB: 1,073,741,824 - 248,879,616 = 824,862,208 B of KV;
     * contiguous 1,024 x 36 KiB = 36 MiB -> 21; paged 256 tokens = 9 MiB -> 87. */
    j = kv_json("--preset gpt2-124m --memory 1GiB");
    p = json_object_get(model0(j), "plan");
    assert_int_equal(jint(p, "weight_bytes"), 248879616);
    assert_int_equal(jint(p, "kv_memory_bytes"), 824862208);
    assert_int_equal(jint(p, "ctx_len"), 1024);
    assert_int_equal(jint(p, "mean_len"), 256);
    assert_int_equal(jint(json_object_get(p, "contiguous"), "requests"), 21);
    assert_int_equal(jint(json_object_get(p, "paged"), "requests"), 87);
    json_decref(j);
    /* --weight-dtype and --block-size: 124,439,808 parameters in q8_0 are
     * 3,888,744 blocks of 34 B; M = 100 with blocks of 64 reserves 128
     * tokens (4.5 MiB) per request. */
    j = kv_json("--preset gpt2-124m --memory 1GiB --weight-dtype q8_0 --mean-len 100 --block-size 64");
    p = json_object_get(model0(j), "plan");
    assert_int_equal(jint(p, "weight_bytes"), 124439808ll / 32 * 34);
    assert_int_equal(jint(json_object_get(p, "paged"), "bytes_per_request"), 128 * 36864);
    assert_int_equal(jint(json_object_get(p, "paged"), "requests"),
                     (1073741824ll - 124439808ll / 32 * 34) / (128 * 36864));
    json_decref(j);
    /* -m: the weights are the tensors of the model's files. */
    j = kv_json("-m " TINY " --memory 1MiB --ctx-len 32 --mean-len 20");
    p = json_object_get(model0(j), "plan");
    assert_int_equal(jint(p, "weight_bytes"), 459776);
    assert_int_equal(jint(json_object_get(p, "contiguous"), "requests"), (1048576 - 459776) / (32 * 512));
    assert_int_equal(jint(json_object_get(p, "paged"), "requests"), (1048576 - 459776) / (32 * 512));
    json_decref(j);
    /* ... or its parameters at another dtype. */
    j = kv_json("-m " TINY " --memory 1MiB --weight-dtype bf16");
    p = json_object_get(model0(j), "plan");
    assert_int_equal(jint(p, "weight_bytes"), 2 * 114944);
    json_decref(j);
    /* Every preset at once: a model whose weights do not fit is marked. */
    j = kv_json("--memory 80GiB");
    json_t *l70 = json_array_get(json_object_get(j, "models"), 4);
    assert_false(json_is_true(json_object_get(json_object_get(l70, "plan"), "weights_fit")));
    json_t *l8 = json_array_get(json_object_get(j, "models"), 1);
    assert_true(json_is_true(json_object_get(json_object_get(l8, "plan"), "weights_fit")));
    json_decref(j);
    /* The human plan prints its formulas and the worked numbers. */
    char *out = NULL;
    assert_int_equal(th_run_kvlm(&out, "kv --preset llama-3.1-8b --memory 24GiB --weights-bytes 16GiB "
                                       "--ctx-len 8192 --mean-len 1000"),
                     0);
    assert_non_null(strstr(out, "floor(KV memory / (ctx-len x bytes per token))"));
    assert_non_null(strstr(out, "= 8 requests"));
    assert_non_null(strstr(out, "63 blocks x 16 x 128 KiB = 126 MiB)) = 65 requests"));
    assert_non_null(strstr(out, "1,000 / 1,008 = 99.2%"));
    free(out);
    /* A config without weight files needs --weights-bytes for a plan. */
    char *cfg = llama_json("llama", 2, "");
    const char *dir = put_config(s, "plan-llama", cfg);
    free(cfg);
    assert_int_equal(th_run_kvlm(&out, "kv -m '%s' --memory 1GiB", dir), 2);
    assert_non_null(strstr(out, "--weights-bytes"));
    free(out);
    char args[1200];
    snprintf(args, sizeof args, "-m '%s' --memory 1GiB --weights-bytes 512MiB --ctx-len 2048 --mean-len 512", dir);
    j = kv_json(args);
    p = json_object_get(model0(j), "plan");
    assert_int_equal(jint(json_object_get(p, "contiguous"), "requests"), 512 * MiB / (2048 * 1024));
    assert_int_equal(jint(json_object_get(p, "paged"), "requests"), 512 * MiB / (512 * 1024));
    json_decref(j);
}

static const struct bad_cli {
    const char *args, *needle;
    int status;
} bad_cli[] = {
    {"--preset llama-4", "--preset", 2},
    {"--kv-dtype f8", "--kv-dtype", 2},
    {"--kv-dtype", "needs a value", 2},
    {"--ctx 0", "--ctx", 2},
    {"--ctx -5", "--ctx", 2},
    {"--ctx 4096,,8", "--ctx", 2},
    {"--ctx 4096,", "--ctx", 2},
    {"--ctx 12x", "--ctx", 2},
    {"--memory 24GiBs", "--memory", 2},
    {"--memory -24GiB", "--memory", 2},
    {"--memory lots", "--memory", 2},
    {"--preset llama-2-70b --memory 24GiB", "--memory", 2},
    {"--preset llama-3.1-8b --memory 24GiB --weights-bytes 25GiB", "--memory", 2},
    {"--preset gpt2-124m --memory 1GiB --ctx-len 0", "--ctx-len", 2},
    {"--preset gpt2-124m --memory 1GiB --ctx-len -1", "--ctx-len", 2},
    {"--preset gpt2-124m --memory 1GiB --mean-len -3", "--mean-len", 2},
    {"--preset gpt2-124m --memory 1GiB --ctx-len 100 --mean-len 200", "--mean-len", 2},
    {"--preset gpt2-124m --memory 1GiB --mean-len 2000", "--mean-len", 2},
    {"--preset gpt2-124m --memory 1GiB --block-size 0", "--block-size", 2},
    {"--preset gpt2-124m --memory 1GiB --weight-dtype int4", "--weight-dtype", 2},
    {"--preset gpt2-124m --ctx-len 100", "--memory", 2},
    {"--memory 1GiB --weights-bytes 1GiB", "--weights-bytes", 2},
    {"--preset gpt2-124m -m " TINY, "--preset", 2},
    {"--frobnicate", "--frobnicate", 2},
    {"-m tests/fixtures/no-such-model", "no-such-model", 1},
    {"-m " TINY " --kv-dtype q8_0", "multiple of 32", 2},
    {"-m tests/fixtures/gpt2/README.md", "unrecognised", 1},
};

static void test_cli_bad_input(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof bad_cli / sizeof bad_cli[0]; i++) {
        char *out = NULL;
        int st = th_run_kvlm(&out, "kv %s", bad_cli[i].args);
        printf("  %d  kv %s: %s", st, bad_cli[i].args, out);
        if (st != bad_cli[i].status) fail_msg("kv %s: exit %d, expected %d", bad_cli[i].args, st, bad_cli[i].status);
        if (!strstr(out, bad_cli[i].needle)) fail_msg("kv %s: message lacks '%s': %s", bad_cli[i].args,
                                                      bad_cli[i].needle, out);
        free(out);
    }
}

/* Gemma 3 1B: 22 window layers (512) and 4 global; a window layer keeps
 * its last 512 tokens, the paged plan counts its blocks from (M + 1 - W)
 * / B on. At 32k context: 4 / 26 of the whole plus the windows, 16.7%. */
static void test_window_preset(void **state) {
    (void)state;
    const kvs_model *g = kvs_preset_find("gemma-3-1b");
    assert_non_null(g);
    uint64_t all, glob, win, t;
    assert_int_equal(kvs_bytes_per_token(g, KVLM_F16, &all), 0);
    assert_int_equal(all, 26624);
    assert_int_equal(kvs_split_bytes_per_token(g, KVLM_F16, &glob, &win), 0);
    assert_int_equal(glob, 4 * 1024), assert_int_equal(win, 22 * 1024);
    assert_int_equal(kvs_context_bytes(g, KVLM_F16, 100, &t), 0);
    assert_int_equal(t, 100 * all); /* shorter than the window: every layer whole */
    assert_int_equal(kvs_context_bytes(g, KVLM_F16, 4096, &t), 0);
    assert_int_equal(t, 4096ull * 4096 + 512ull * 22528);
    assert_int_equal(kvs_context_bytes(g, KVLM_F16, 32768, &t), 0);
    assert_int_equal(t, 145752064ull);
    assert_true((double)t / (double)(32768 * all) < 0.1671 && (double)t / (double)(32768 * all) > 1.0 / 6);
    kvs_plan_in in = {.memory = 4 * GiB, .weights = 2 * 999885952ull, .bytes_per_token = all, .ctx_len = 32768,
                      .mean_len = 8192, .block_size = 16, .window = 512, .window_bytes_per_token = win};
    kvs_plan p;
    kvlm_error err;
    assert_int_equal(kvs_plan_compute(&in, &p, &err), 0);
    assert_int_equal(p.contig_bytes, 32768 * all);                        /* the reservation keeps every layer */
    assert_int_equal(p.paged_bytes, 512ull * 16 * 4096 + 32ull * 16 * 22528); /* blocks 480..511 of the window */
    assert_int_equal(p.paged_requests, (4 * GiB - 2 * 999885952ull) / p.paged_bytes);
    /* A config's one sliding window covers every layer. */
    kvlm_config c = {.n_layer = 4, .n_head = 4, .n_kv_head = 2, .head_dim = 16, .n_ctx = 64, .sliding_window = 8};
    kvs_model m;
    kvs_model_from_config(&m, &c, NULL, "x");
    assert_int_equal(m.window, 8), assert_int_equal(m.window_layers, 4);
    assert_int_equal(kvs_split_bytes_per_token(&m, KVLM_F32, &glob, &win), 0);
    assert_int_equal(glob, 0), assert_int_equal(win, 2 * 4 * 2 * 16 * 4);
    /* per-layer windows: the window layers only */
    const int wins[4] = {8, 0, 8, 100};
    kvs_model_from_config(&m, &c, wins, "x");
    assert_int_equal(m.window, 8), assert_int_equal(m.window_layers, 2); /* 100 >= n_ctx: global */
    assert_int_equal(kvs_split_bytes_per_token(&m, KVLM_F32, &glob, &win), 0);
    assert_int_equal(glob, 2 * 2 * 2 * 16 * 4), assert_int_equal(win, 2 * 2 * 2 * 16 * 4);
    /* kvlm kv --json carries the split and the windowed totals */
    json_t *j = kv_json("--preset gemma-3-1b --ctx 32768");
    json_t *g0 = model0(j);
    assert_int_equal(jint(g0, "window"), 512);
    assert_int_equal(jint(g0, "window_layers"), 22);
    assert_int_equal(jint(g0, "bytes_per_token_global"), 4096);
    assert_int_equal(jint(g0, "bytes_per_token_window"), 22528);
    assert_int_equal(jint(json_array_get(json_object_get(g0, "totals"), 0), "bytes"), 145752064);
    assert_int_equal(jint(g0, "max_context_bytes"), 145752064);
    json_decref(j);
}

/* kvlm kv -m reads each layer's window from the model's files: Gemma 3's
 * fixture (6 layers, window 5 on layers 0-4, layer 5 global; 1 KV head of
 * 16) as a config.json and as llama.cpp's GGUF. f32: 2 x 16 x 4 = 128
 * bytes per token and layer; at 64 tokens 64 x 128 + 5 x 5 x 128. */
static void test_model_windows(void **state) {
    (void)state;
    const char *paths[] = {"tests/fixtures/layers/gemma3", "tests/fixtures/layers_gguf/gemma3-q8_0.gguf"};
    for (int i = 0; i < 2; i++) {
        int w[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
        kvlm_error err;
        assert_int_equal(kvlm_config_layer_windows(paths[i], w, 8, &err), 6);
        for (int l = 0; l < 5; l++) assert_int_equal(w[l], 5);
        assert_int_equal(w[5], 0), assert_int_equal(w[6], -1);
        assert_int_equal(kvlm_config_layer_windows(paths[i], NULL, 0, &err), 6);
        char args[160];
        snprintf(args, sizeof args, "-m %s --kv-dtype f32 --ctx 64", paths[i]);
        json_t *j = kv_json(args);
        json_t *g0 = model0(j);
        assert_int_equal(jint(g0, "window"), 5);
        assert_int_equal(jint(g0, "window_layers"), 5);
        assert_int_equal(jint(g0, "bytes_per_token_global"), 128);
        assert_int_equal(jint(g0, "bytes_per_token_window"), 640);
        assert_int_equal(jint(json_array_get(json_object_get(g0, "totals"), 0), "bytes"), 64 * 128 + 5 * 640);
        json_decref(j);
    }
    /* one window on every layer, or none: GPT-2 has none */
    int w[12];
    kvlm_error err;
    assert_int_equal(kvlm_config_layer_windows(TINY, w, 12, &err), 2);
    assert_int_equal(w[0], 0), assert_int_equal(w[1], 0);
    assert_true(kvlm_config_layer_windows("tests/fixtures/no-such-model", w, 12, &err) < 0);
    assert_int_equal(kvlm_config_layer_windows(TINY, NULL, 3, &err), KVLM_ERR_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_preset_bytes),
        cmocka_unit_test(test_human_and_parse),
        cmocka_unit_test(test_plan_hand_computed),
        cmocka_unit_test(test_weight_bytes),
        cmocka_unit_test_setup_teardown(test_config_load, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config_load_bad, setup, teardown),
        cmocka_unit_test(test_cli_presets),
        cmocka_unit_test(test_window_preset),
        cmocka_unit_test(test_model_windows),
        cmocka_unit_test(test_cli_dtypes_and_ctx),
        cmocka_unit_test_setup_teardown(test_cli_model, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cli_plan, setup, teardown),
        cmocka_unit_test(test_cli_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
