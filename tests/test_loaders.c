/*
 * Bad model files: every malformed input to kvlm_model_load (missing or
 * unrecognised paths, safetensors headers, config.json, sharded indexes,
 * llm.c checkpoints) returns NULL with the expected kvlm_status and a message
 * that names the file and the field or tensor at fault; none crashes or reads
 * outside the file (run under ASan/UBSan too). Each bad input is built in a
 * scratch directory at test time, either from a valid fixture
 * (tests/fixtures/gpt2) or from scratch. The valid fixtures, and copies that
 * go through the same rewriting helpers unchanged, are loaded as controls.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "helpers.h"
#include "kvlm.h"

#define FIX "tests/fixtures/gpt2/"
#define SHARD1 "model-00001-of-00002.safetensors"
#define SHARD2 "model-00002-of-00002.safetensors"
#define INDEX "model.safetensors.index.json"
#define FORMAT KVLM_ERR_FORMAT
#define UNSUP KVLM_ERR_UNSUPPORTED

/* ------------------------------------------------------------- helpers */

typedef struct scratch {
    char *dir;
    char buf[8][1024];
    int next;
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

/* Path of `name` inside the scratch directory (a few stay valid at once). */
static const char *sp(scratch *s, const char *name) {
    char *b = s->buf[s->next++ % 8];
    snprintf(b, sizeof s->buf[0], "%s/%s", s->dir, name);
    return b;
}

static unsigned char *slurp(const char *path, size_t *n) {
    unsigned char *b = (unsigned char *)th_read_file(path, n);
    if (!b) fail_msg("cannot read %s", path);
    return b;
}

static void put_file(const char *path, const void *data, size_t n) {
    if (th_write_file(path, data, n)) fail_msg("cannot write %s", path);
}

static void put_text(const char *path, const char *text) { put_file(path, text, strlen(text)); }

static void copy_file(const char *src, const char *dst) {
    size_t n;
    unsigned char *b = slurp(src, &n);
    put_file(dst, b, n);
    free(b);
}

/* Loads path and requires failure with `code` and a message containing both
 * `file` (the file at fault) and `what` (the field or tensor). */
static void expect_error(const char *path, int code, const char *file, const char *what) {
    kvlm_error err;
    memset(&err, 0x55, sizeof err);
    kvlm_model *m = kvlm_model_load(path, NULL, &err);
    if (m) {
        kvlm_model_free(m);
        fail_msg("%s: loaded, expected status %d mentioning '%s'", path, code, what);
    }
    if (!memchr(err.msg, 0, sizeof err.msg)) fail_msg("%s: message is not terminated", path);
    printf("  %3d  %s\n", err.code, err.msg);
    if (err.code != code) fail_msg("%s: status %d, expected %d (%s)", path, err.code, code, err.msg);
    if (!strstr(err.msg, file)) fail_msg("message does not name the file '%s': %s", file, err.msg);
    if (!strstr(err.msg, what)) fail_msg("message does not name '%s': %s", what, err.msg);
}

/* Loads path and requires success with the tiny GPT-2's shapes. */
static void expect_load(const char *path, kvlm_dtype dtype) {
    kvlm_error err;
    kvlm_model *m = kvlm_model_load(path, NULL, &err);
    if (!m) fail_msg("%s: %s", path, err.msg);
    const kvlm_config *c = kvlm_model_config(m);
    assert_int_equal(c->n_layer, 2);
    assert_int_equal(c->n_head, 4);
    assert_int_equal(c->n_embd, 64);
    assert_int_equal(c->n_ctx, 32);
    assert_int_equal(c->vocab_size, 200);
    assert_int_equal(c->weight_dtype, dtype);
    kvlm_model_free(m);
}

/* Writes a safetensors file: 8-byte little-endian header length, the header
 * padded with spaces to a multiple of 8, then n data bytes (zeros if NULL). */
static void put_st(const char *path, const char *header, const void *data, size_t n) {
    size_t hl = strlen(header), pad = (8 - hl % 8) % 8, total = 8 + hl + pad + n;
    unsigned char *b = calloc(total, 1);
    assert_non_null(b);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)(hl + pad) >> (8 * i));
    memcpy(b + 8, header, hl);
    memset(b + 8 + hl, ' ', pad);
    if (data) memcpy(b + 8 + hl + pad, data, n);
    put_file(path, b, total);
    free(b);
}

/* Rewrites the safetensors file src into dst with one header change:
 * header[tensor][key] = value (JSON text), or the tensor's entry removed
 * when key is NULL, or nothing changed when tensor is NULL. Data is kept. */
static void st_edit(const char *src, const char *dst, const char *tensor, const char *key, const char *value) {
    size_t n;
    unsigned char *b = slurp(src, &n);
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | b[i];
    json_error_t je;
    json_t *hdr = json_loadb((const char *)b + 8, hl, 0, &je);
    if (!hdr) fail_msg("%s: %s", src, je.text);
    if (tensor && !key) assert_int_equal(json_object_del(hdr, tensor), 0);
    if (tensor && key) {
        json_t *v = json_loads(value, JSON_DECODE_ANY, &je);
        assert_non_null(v);
        assert_int_equal(json_object_set_new(json_object_get(hdr, tensor), key, v), 0);
    }
    char *text = json_dumps(hdr, JSON_COMPACT);
    put_st(dst, text, b + 8 + hl, n - 8 - hl);
    free(text);
    json_decref(hdr);
    free(b);
}

/* config.json of hf_f32 with config[key] = value (JSON text), or key
 * removed when value is NULL, written to dst. */
static void config_edit(const char *dst, const char *key, const char *value) {
    json_error_t je;
    json_t *cfg = json_load_file(FIX "hf_f32/config.json", 0, &je);
    assert_non_null(cfg);
    if (key && !value) assert_int_equal(json_object_del(cfg, key), 0);
    if (key && value) {
        json_t *v = json_loads(value, JSON_DECODE_ANY, &je);
        assert_non_null(v);
        assert_int_equal(json_object_set_new(cfg, key, v), 0);
    }
    assert_int_equal(json_dump_file(cfg, dst, JSON_INDENT(2)), 0);
    json_decref(cfg);
}

/* A copy of hf_bf16_sharded in the scratch dir with weight_map[tensor] set
 * to shard (JSON text), or left unchanged when tensor is NULL. */
static void sharded_copy(scratch *s, const char *tensor, const char *shard) {
    copy_file(FIX "hf_bf16_sharded/config.json", sp(s, "config.json"));
    copy_file(FIX "hf_bf16_sharded/" SHARD1, sp(s, SHARD1));
    copy_file(FIX "hf_bf16_sharded/" SHARD2, sp(s, SHARD2));
    json_error_t je;
    json_t *idx = json_load_file(FIX "hf_bf16_sharded/" INDEX, 0, &je);
    assert_non_null(idx);
    if (tensor) {
        json_t *v = json_loads(shard, JSON_DECODE_ANY, &je);
        assert_non_null(v);
        assert_int_equal(json_object_set_new(json_object_get(idx, "weight_map"), tensor, v), 0);
    }
    assert_int_equal(json_dump_file(idx, sp(s, INDEX), JSON_INDENT(2)), 0);
    json_decref(idx);
}

static void put32(unsigned char *p, int32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)((uint32_t)v >> (8 * i));
}

/* ------------------------------------------------- positive controls */

static void test_valid_fixtures_load(void **state) {
    scratch *s = *state;
    expect_load(FIX "hf_f32", KVLM_F32);
    expect_load(FIX "hf_f32/model.safetensors", KVLM_F32);
    expect_load(FIX "hf_f16", KVLM_F16);
    expect_load(FIX "hf_bf16_sharded", KVLM_BF16);
    expect_load(FIX "hf_bf16_sharded/" INDEX, KVLM_BF16);
    expect_load(FIX "llmc_f32.bin", KVLM_F32);
    expect_load(FIX "llmc_bf16.bin", KVLM_BF16);
    /* The rewriting helpers alone leave every format loadable. */
    config_edit(sp(s, "config.json"), NULL, NULL);
    st_edit(FIX "hf_f32/model.safetensors", sp(s, "model.safetensors"), NULL, NULL, NULL);
    expect_load(s->dir, KVLM_F32);
    sharded_copy(s, "transformer.ln_f.bias", "\"" SHARD2 "\"");
    expect_load(s->dir, KVLM_BF16);
    copy_file(FIX "llmc_bf16.bin", sp(s, "llmc.bin"));
    expect_load(sp(s, "llmc.bin"), KVLM_BF16);
}

/* ------------------------------------------------- paths and detection */

static void test_paths(void **state) {
    scratch *s = *state;
    expect_error(sp(s, "nope.bin"), KVLM_ERR_IO, "nope.bin", "no such file");
    config_edit(sp(s, "config.json"), NULL, NULL);
    expect_error(s->dir, KVLM_ERR_IO, s->dir, "no model.safetensors");
    put_file(sp(s, "empty.bin"), "", 0);
    expect_error(sp(s, "empty.bin"), FORMAT, "empty.bin", "empty");
    put_text(sp(s, "junk.bin"), "this is neither safetensors nor an llm.c checkpoint\n");
    expect_error(sp(s, "junk.bin"), FORMAT, "junk.bin", "unrecognised");
    put_file(sp(s, "model.safetensors"), "", 0);
    expect_error(s->dir, FORMAT, "model.safetensors", "empty");
    assert_int_equal(mkdir(sp(s, "sub"), 0700), 0);
    assert_int_equal(mkdir(sp(s, "sub/model.safetensors"), 0700), 0);
    config_edit(sp(s, "sub/config.json"), NULL, NULL);
    expect_error(sp(s, "sub"), KVLM_ERR_IO, "model.safetensors", "not a regular file");
}

/* ------------------------------------------------------- safetensors */

static void test_safetensors_raw_bytes(void **state) {
    scratch *s = *state;
    config_edit(sp(s, "config.json"), NULL, NULL);
    const char *st = sp(s, "model.safetensors");
    put_file(st, "\x10\0\0\0\0", 5);
    expect_error(s->dir, FORMAT, "model.safetensors", "shorter than the 8-byte");
    unsigned char b[16] = {0x00, 0x10, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ', ' ', ' ', ' ', ' '};
    put_file(st, b, sizeof b); /* 4096-byte header in a 16-byte file */
    expect_error(s->dir, FORMAT, "model.safetensors", "header length 4096");
    memset(b, 0xff, 8); /* 2^64 - 1: no wrap-around */
    put_file(st, b, sizeof b);
    expect_error(s->dir, FORMAT, "model.safetensors", "header length");
    memset(b, 0, 8); /* zero-length header */
    put_file(st, b, sizeof b);
    expect_error(s->dir, FORMAT, "model.safetensors", "not valid JSON");
}

#define T(body) "{\"wte.weight\":{" body "}}"

static const struct st_case {
    const char *header;
    size_t data;
    int code;
    const char *what;
} st_cases[] = {
    {"{not json", 0, FORMAT, "not valid JSON"},
    {"[1, 2]", 0, FORMAT, "not a JSON object"},
    {"{\"a\":{},\"a\":{}}", 0, FORMAT, "duplicate"},
    {"{\"wte.weight\": 3}", 0, FORMAT, "'wte.weight': header entry is not an object"},
    {T("\"shape\":[2],\"data_offsets\":[0,8]"), 8, FORMAT, "'wte.weight': missing string field 'dtype'"},
    {T("\"dtype\":32,\"shape\":[2],\"data_offsets\":[0,8]"), 8, FORMAT, "field 'dtype'"},
    {T("\"dtype\":\"F32\",\"data_offsets\":[0,8]"), 8, FORMAT, "'wte.weight': field 'shape'"},
    {T("\"dtype\":\"F32\",\"shape\":[1,1,1,1,2],\"data_offsets\":[0,8]"), 8, FORMAT, "field 'shape'"},
    {T("\"dtype\":\"F32\",\"shape\":[2]"), 8, FORMAT, "'wte.weight': field 'data_offsets'"},
    {T("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]"), 8, FORMAT, "field 'data_offsets'"},
    {T("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8.0]"), 8, FORMAT, "field 'data_offsets'"},
    {T("\"dtype\":\"I64\",\"shape\":[1],\"data_offsets\":[0,8]"), 8, UNSUP, "'wte.weight': dtype I64"},
    {T("\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]"), 8, FORMAT, "'wte.weight': shape[0]"},
    {T("\"dtype\":\"F32\",\"shape\":[2,2.5],\"data_offsets\":[0,20]"), 20, FORMAT, "'wte.weight': shape[1]"},
    {T("\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]"), 8, FORMAT, "shape[0]"},
    {T("\"dtype\":\"F32\",\"shape\":[1099511627776,1099511627776],\"data_offsets\":[0,8]"), 8, FORMAT,
     "shape is too large"},
    {T("\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]"), 8, FORMAT,
     "'wte.weight': data_offsets [0, 16] lie outside the 8-byte data section"},
    {T("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]"), 8, FORMAT, "data_offsets [-8, 0] lie outside"},
    {T("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]"), 8, FORMAT, "data_offsets [8, 0] lie outside"},
    {T("\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[9223372036854775800,9223372036854775807]"), 8, FORMAT,
     "lie outside"},
    {T("\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]"), 8, FORMAT,
     "'wte.weight': data_offsets span 8 bytes but shape x dtype needs 12"},
    {T("\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[2,6]"), 8, FORMAT, "'wte.weight' is not aligned"},
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, FORMAT, "tensors 'a' and 'b' overlap"},
    /* b lies inside a; the empty z sorts between them. */
    {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
     "\"z\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[4,4]},"
     "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 16, FORMAT, "overlap"},
    /* Control: a well-formed header gets as far as binding. */
    {T("\"dtype\":\"F32\",\"shape\":[200,64],\"data_offsets\":[0,51200]"), 51200, FORMAT,
     "missing tensor 'wpe.weight'"},
};

static void test_safetensors_header(void **state) {
    scratch *s = *state;
    config_edit(sp(s, "config.json"), NULL, NULL);
    for (size_t i = 0; i < sizeof st_cases / sizeof st_cases[0]; i++) {
        put_st(sp(s, "model.safetensors"), st_cases[i].header, NULL, st_cases[i].data);
        expect_error(s->dir, st_cases[i].code, "model.safetensors", st_cases[i].what);
    }
}

/* Corruptions of the real hf_f32 file: one header field changed. */
static const struct st_edit_case {
    const char *tensor, *key, *value;
    int code;
    const char *what;
} st_edit_cases[] = {
    {"ln_f.bias", NULL, NULL, FORMAT, "missing tensor 'ln_f.bias'"},
    {"h.1.attn.c_proj.weight", NULL, NULL, FORMAT, "missing tensor 'h.1.attn.c_proj.weight'"},
    {"h.0.ln_2.weight", "dtype", "\"I64\"", UNSUP, "'h.0.ln_2.weight': dtype I64"},
    {"wte.weight", "shape", "[200,65]", FORMAT, "'wte.weight': data_offsets span 51200 bytes"},
    {"wpe.weight", "data_offsets", "[51000,59192]", FORMAT, "'wte.weight' and 'wpe.weight' overlap"},
    {"ln_f.weight", "data_offsets", "[470000,470256]", FORMAT, "'ln_f.weight': data_offsets [470000, 470256]"},
    {"h.0.ln_1.bias", "shape", "[1,64]", FORMAT, "tensor 'h.0.ln_1.bias' has shape [1, 64], expected [64]"},
};

static void test_safetensors_edits(void **state) {
    scratch *s = *state;
    config_edit(sp(s, "config.json"), NULL, NULL);
    for (size_t i = 0; i < sizeof st_edit_cases / sizeof st_edit_cases[0]; i++) {
        const struct st_edit_case *c = &st_edit_cases[i];
        st_edit(FIX "hf_f32/model.safetensors", sp(s, "model.safetensors"), c->tensor, c->key, c->value);
        expect_error(s->dir, c->code, "model.safetensors", c->what);
    }
    /* Truncated in the middle of the data; also loaded by file name. */
    size_t n;
    unsigned char *b = slurp(FIX "hf_f32/model.safetensors", &n);
    put_file(sp(s, "model.safetensors"), b, n / 2);
    expect_error(s->dir, FORMAT, "model.safetensors", "lie outside the");
    expect_error(sp(s, "model.safetensors"), FORMAT, "model.safetensors", "data section");
    put_file(sp(s, "model.safetensors"), b, 600); /* inside the header */
    expect_error(s->dir, FORMAT, "model.safetensors", "header length");
    free(b);
}

/* ------------------------------------------------------- config.json */

static const struct config_case {
    const char *key, *value;
    int code;
    const char *file, *what;
} config_cases[] = {
    {"n_layer", NULL, FORMAT, "config.json", "missing field 'n_layer'"},
    {"n_head", NULL, FORMAT, "config.json", "missing field 'n_head'"},
    {"n_layer", "\"2\"", FORMAT, "config.json", "field 'n_layer'"},
    {"n_layer", "0", FORMAT, "config.json", "n_layer = 0"},
    {"n_layer", "99999999999", FORMAT, "config.json", "field 'n_layer'"},
    {"model_type", "\"bert\"", UNSUP, "config.json", "model_type 'bert'"},
    {"activation_function", "\"relu\"", UNSUP, "config.json", "activation_function 'relu'"},
    {"n_head", "5", FORMAT, "config.json", "n_embd = 64 is not a multiple of n_head = 5"},
    {"n_embd", "1073741824", FORMAT, "config.json", "n_embd = 1073741824"},
    {"n_inner", "-1", FORMAT, "config.json", "n_inner"},
    {"eos_token_id", "200", FORMAT, "config.json", "eos_token_id = 200"},
    {"layer_norm_epsilon", "0", FORMAT, "config.json", "layer_norm_epsilon"},
    /* Consistent configs that disagree with the tensors. */
    {"n_embd", "32", FORMAT, "model.safetensors", "tensor 'wte.weight' has shape [200, 64], expected [>= 200, 32]"},
    {"vocab_size", "201", FORMAT, "model.safetensors", "'wte.weight' has shape [200, 64], expected [>= 201, 64]"},
    {"n_positions", "64", FORMAT, "model.safetensors", "'wpe.weight' has shape [32, 64], expected [>= 64, 64]"},
    {"n_inner", "128", FORMAT, "model.safetensors",
     "'h.0.mlp.c_fc.weight' has shape [64, 256], expected [64, 128] (Conv1D [in, out])"},
    {"n_layer", "3", FORMAT, "model.safetensors", "missing tensor 'h.2.ln_1.weight'"},
};

static void test_config(void **state) {
    scratch *s = *state;
    copy_file(FIX "hf_f32/model.safetensors", sp(s, "model.safetensors"));
    for (size_t i = 0; i < sizeof config_cases / sizeof config_cases[0]; i++) {
        const struct config_case *c = &config_cases[i];
        config_edit(sp(s, "config.json"), c->key, c->value);
        expect_error(s->dir, c->code, c->file, c->what);
    }
    put_text(sp(s, "config.json"), "{\"model_type\": \"gpt2\", \"n_layer\": 2,,}");
    expect_error(s->dir, FORMAT, "config.json", "not valid JSON");
    put_text(sp(s, "config.json"), "[\"gpt2\"]");
    expect_error(s->dir, FORMAT, "config.json", "not a JSON object");
    remove(sp(s, "config.json"));
    expect_error(s->dir, KVLM_ERR_IO, "config.json", "config.json");
    expect_error(sp(s, "model.safetensors"), KVLM_ERR_IO, "config.json", "config.json");
}

/* ----------------------------------------------------------- sharded */

static const struct shard_case {
    const char *tensor, *shard;
    int code;
    const char *file, *what;
} shard_cases[] = {
    {"transformer.ln_f.bias", "\"model-00003-of-00002.safetensors\"", KVLM_ERR_IO, "model-00003-of-00002.safetensors",
     "cannot open"},
    {"transformer.h.7.ln_1.weight", "\"" SHARD1 "\"", FORMAT, INDEX,
     "tensor 'transformer.h.7.ln_1.weight' is listed in weight_map but missing from " SHARD1},
    /* Present, but in the other shard. */
    {"transformer.ln_f.bias", "\"" SHARD1 "\"", FORMAT, INDEX, "'transformer.ln_f.bias' is listed in weight_map"},
    {"transformer.ln_f.bias", "\"../hf_f32/model.safetensors\"", FORMAT, INDEX,
     "weight_map['transformer.ln_f.bias'] must be a file name"},
    {"transformer.ln_f.bias", "\"./" SHARD2 "\"", FORMAT, INDEX, "weight_map['transformer.ln_f.bias']"},
    {"transformer.ln_f.bias", "\"..\"", FORMAT, INDEX, "weight_map['transformer.ln_f.bias']"},
    {"transformer.ln_f.bias", "7", FORMAT, INDEX, "weight_map['transformer.ln_f.bias']"},
};

static void test_sharded(void **state) {
    scratch *s = *state;
    for (size_t i = 0; i < sizeof shard_cases / sizeof shard_cases[0]; i++) {
        const struct shard_case *c = &shard_cases[i];
        sharded_copy(s, c->tensor, c->shard);
        expect_error(s->dir, c->code, c->file, c->what);
    }
    sharded_copy(s, NULL, NULL);
    put_text(sp(s, INDEX), "{\"weight_map\": []}");
    expect_error(s->dir, FORMAT, INDEX, "'weight_map'");
    put_text(sp(s, INDEX), "{\"weight_map\": {}}");
    expect_error(sp(s, INDEX), FORMAT, INDEX, "'weight_map'");
    put_text(sp(s, INDEX), "{\"weight_map\": ");
    expect_error(s->dir, FORMAT, INDEX, "not valid JSON");
    /* A corrupt shard is reported under its own name. */
    sharded_copy(s, NULL, NULL);
    size_t n;
    unsigned char *b = slurp(FIX "hf_bf16_sharded/" SHARD2, &n);
    put_file(sp(s, SHARD2), b, n - 64);
    free(b);
    expect_error(s->dir, FORMAT, SHARD2, "lie outside");
}

/* ------------------------------------------------------------ llm.c */

static const struct llmc_case {
    int field; /* header int32 index */
    int32_t value;
    const char *what;
} llmc_cases[] = {
    {0, 20240325, "unrecognised"},
    {1, 7, "header field version = 7"},
    {2, 0, "max_seq_len = 0"},
    {3, -1, "vocab_size = -1"},
    {4, 0, "num_layers = 0"},
    {5, 0, "num_heads = 0"},
    {5, 5, "channels = 64 is not a multiple of num_heads = 5"},
    {6, 1 << 20, "channels = 1048576"},
    {7, 100, "padded_vocab_size = 100"},
    {7, 1 << 30, "padded_vocab_size"},
    {4, 3, "header implies"},
    {1, 5, "header implies"}, /* fp32 data declared bf16 */
};

static void test_llmc(void **state) {
    scratch *s = *state;
    const char *path = sp(s, "llmc.bin");
    size_t n;
    unsigned char *orig = slurp(FIX "llmc_f32.bin", &n);
    unsigned char *b = malloc(n + 4);
    assert_non_null(b);
    for (size_t i = 0; i < sizeof llmc_cases / sizeof llmc_cases[0]; i++) {
        memcpy(b, orig, n);
        put32(b + 4 * llmc_cases[i].field, llmc_cases[i].value);
        put_file(path, b, n);
        expect_error(path, FORMAT, "llmc.bin", llmc_cases[i].what);
    }
    memcpy(b, orig, n);
    put_file(path, b, n - 100);
    expect_error(path, FORMAT, "llmc.bin", "truncated");
    put32(b + n, 0);
    put_file(path, b, n + 4);
    expect_error(path, FORMAT, "llmc.bin", "header implies");
    put_file(path, b, 512);
    expect_error(path, FORMAT, "llmc.bin", "shorter than the 1024-byte llm.c header");
    put_file(path, b, 4);
    expect_error(path, FORMAT, "llmc.bin", "shorter than");
    put_file(path, b, 3);
    expect_error(path, FORMAT, "llmc.bin", "unrecognised");
    free(b);
    free(orig);
}

/* ------------------------------------------- field names per format */

/* The checks every format shares name the field as the file at fault
 * names it: a Llama config.json and a Llama GGUF file whose context length
 * passes their reader's range but not the loader's. */
static void test_field_names(void **state) {
    scratch *s = *state;
    json_error_t je;
    json_t *cfg = json_load_file("tests/fixtures/llama/gqa/config.json", 0, &je);
    assert_non_null(cfg);
    assert_int_equal(json_object_set_new(cfg, "max_position_embeddings", json_integer(2000000)), 0);
    assert_int_equal(json_dump_file(cfg, sp(s, "config.json"), JSON_INDENT(2)), 0);
    json_decref(cfg);
    copy_file("tests/fixtures/llama/gqa/model.safetensors", sp(s, "model.safetensors"));
    expect_error(s->dir, FORMAT, "config.json", "max_position_embeddings = 2000000 is outside [1, 1048576]");

    size_t n;
    unsigned char *b = slurp("tests/fixtures/llama_gguf/gqa_f32.gguf", &n);
    const char key[] = "llama.context_length";
    unsigned char *k = memmem(b, n, key, sizeof key - 1);
    assert_non_null(k);
    unsigned char *v = k + sizeof key - 1;
    assert_true(v + 8 <= b + n);
    assert_int_equal(v[0], 4); /* GGUF_TYPE_UINT32 */
    put32(v + 4, 2000000);
    put_file(sp(s, "ctx.gguf"), b, n);
    free(b);
    expect_error(sp(s, "ctx.gguf"), FORMAT, "ctx.gguf", "llama.context_length = 2000000 is outside [1, 1048576]");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_valid_fixtures_load, setup, teardown),
        cmocka_unit_test_setup_teardown(test_paths, setup, teardown),
        cmocka_unit_test_setup_teardown(test_safetensors_raw_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_safetensors_header, setup, teardown),
        cmocka_unit_test_setup_teardown(test_safetensors_edits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sharded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_llmc, setup, teardown),
        cmocka_unit_test_setup_teardown(test_field_names, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
