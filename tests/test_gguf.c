/*
 * GGUF reader: a small valid file built here byte by byte parses with the
 * expected metadata and tensors; then each kind of damage (bad magic or
 * version, counts beyond the file, strings longer than the file, nested
 * arrays, unknown value or tensor types, n_dims 5, zero or overflowing
 * dims, misaligned, overlapping or out-of-file tensors, duplicate names or
 * keys, bad alignment, truncation at every offset) is rejected with an
 * error that names the file and the field. Finally a fixed-seed random
 * mutation loop checks that no damaged file crashes the reader (run it
 * under `make build-san/tests/test_gguf SANITIZE=1`).
 *
 * Files are written to a temporary directory at test time; nothing here
 * needs a committed fixture.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/gguf.h"
#include "helpers.h"
#include "kernels/quant.h"
#include "tensor.h"

/* ---------------------------------------------------------------- builder */

typedef struct gb {
    unsigned char *b;
    size_t n, cap;
} gb;

static void put(gb *g, const void *p, size_t n) {
    if (g->n + n > g->cap) {
        g->cap = (g->n + n) * 2 + 64;
        g->b = realloc(g->b, g->cap);
    }
    memcpy(g->b + g->n, p, n);
    g->n += n;
}
static void u8(gb *g, uint8_t v) { put(g, &v, 1); }
static void u32(gb *g, uint32_t v) { for (int i = 0; i < 4; i++) u8(g, (uint8_t)(v >> (8 * i))); }
static void u64(gb *g, uint64_t v) { for (int i = 0; i < 8; i++) u8(g, (uint8_t)(v >> (8 * i))); }
static void str(gb *g, const char *s) { u64(g, strlen(s)), put(g, s, strlen(s)); }
static void f32v(gb *g, float f) { uint32_t b; memcpy(&b, &f, 4); u32(g, b); }
static void pad_to(gb *g, size_t a) { while (g->n % a) u8(g, 0); }

static void patch32(unsigned char *b, size_t at, uint32_t v) { for (int i = 0; i < 4; i++) b[at + i] = (uint8_t)(v >> (8 * i)); }
static void patch64(unsigned char *b, size_t at, uint64_t v) { for (int i = 0; i < 8; i++) b[at + i] = (uint8_t)(v >> (8 * i)); }

/* Byte positions of the fields the damage tests rewrite. */
typedef struct layout {
    size_t version, n_tensors, n_kv;
    size_t arch_len;          /* length of the value of general.architecture */
    size_t align_type, align_value;
    size_t bool_value;
    size_t tokens_elem_type, tokens_len, token1_len;
    size_t key_len_rms;       /* length of the key llama.attention.layer_norm_rms_epsilon */
    size_t rms_type;
    size_t key_block_count;   /* first byte of the key text "llama.block_count" */
    size_t t_ndims[5], t_ne[5][2], t_type[5], t_offset[5], t_name[5];
    uint64_t t_off[5], t_bytes[5];
    size_t data;              /* file offset of the data section */
} layout;

enum { NT = 5 };
static const char *tnames[NT] = {"token_embd.weight", "blk.0.attn_q.weight", "blk.0.ffn_up.weight", "output_norm.weight",
                                 "blk.0.attn_k.weight"};
static const uint32_t ttypes[NT] = {GGML_TYPE_F32, GGML_TYPE_Q8_0, GGML_TYPE_Q4_0, GGML_TYPE_F16, GGML_TYPE_BF16};
static const uint64_t tne[NT][2] = {{64, 4}, {64, 3}, {32, 2}, {5, 1}, {6, 2}};
static const int tdims[NT] = {2, 2, 2, 1, 2};

static uint64_t tbytes(int i) {
    const uint64_t rows = tdims[i] == 2 ? tne[i][1] : 1;
    switch (ttypes[i]) {
    case GGML_TYPE_F32: return tne[i][0] * rows * 4;
    case GGML_TYPE_Q8_0: return tne[i][0] / 32 * 34 * rows;
    case GGML_TYPE_Q4_0: return tne[i][0] / 32 * 18 * rows;
    default: return tne[i][0] * rows * 2;
    }
}

/* The valid file: 14 metadata entries covering every value type, 5 tensors
 * of the 5 supported types, alignment `align` (0: key absent, default 32).
 * Tensor data: byte j of tensor i is (i * 37 + j) & 0xff, except that the
 * F32 tensor holds 0.5 * j and the block scales are set to 1.0. */
static void build(gb *g, layout *L, uint32_t version, uint32_t align) {
    memset(L, 0, sizeof *L);
    g->n = 0;
    const uint32_t a = align ? align : 32;
    const int nkv = align ? 14 : 13;
    put(g, "GGUF", 4);
    L->version = g->n, u32(g, version);
    L->n_tensors = g->n, u64(g, NT);
    L->n_kv = g->n, u64(g, (uint64_t)nkv);
    str(g, "general.architecture"), u32(g, GGUF_TYPE_STRING);
    L->arch_len = g->n, str(g, "llama");
    if (align) {
        str(g, "general.alignment");
        L->align_type = g->n, u32(g, GGUF_TYPE_U32);
        L->align_value = g->n, u32(g, align);
    }
    L->key_block_count = g->n + 8, str(g, "llama.block_count"), u32(g, GGUF_TYPE_U32), u32(g, 2);
    L->key_len_rms = g->n, str(g, "llama.attention.layer_norm_rms_epsilon");
    L->rms_type = g->n, u32(g, GGUF_TYPE_F32), f32v(g, 1e-5f);
    str(g, "test.u8"), u32(g, GGUF_TYPE_U8), u8(g, 200);
    str(g, "test.i8"), u32(g, GGUF_TYPE_I8), u8(g, 0x80);
    str(g, "test.u16i16"), u32(g, GGUF_TYPE_ARRAY), u32(g, GGUF_TYPE_I16), u64(g, 2), u8(g, 0xff), u8(g, 0xff), u8(g, 7), u8(g, 0);
    str(g, "test.i64"), u32(g, GGUF_TYPE_I64), u64(g, (uint64_t)-5);
    str(g, "test.u64big"), u32(g, GGUF_TYPE_U64), u64(g, UINT64_MAX);
    str(g, "test.f64"), u32(g, GGUF_TYPE_F64);
    double d = 3.25;
    uint64_t db;
    memcpy(&db, &d, 8), u64(g, db);
    str(g, "tokenizer.ggml.add_bos_token"), u32(g, GGUF_TYPE_BOOL);
    L->bool_value = g->n, u8(g, 1);
    str(g, "tokenizer.ggml.tokens"), u32(g, GGUF_TYPE_ARRAY);
    L->tokens_elem_type = g->n, u32(g, GGUF_TYPE_STRING);
    L->tokens_len = g->n, u64(g, 3);
    str(g, "<s>");
    L->token1_len = g->n, str(g, "he\xc4\xa0llo");
    u64(g, 0); /* an empty string */
    str(g, "tokenizer.ggml.scores"), u32(g, GGUF_TYPE_ARRAY), u32(g, GGUF_TYPE_F32), u64(g, 3);
    f32v(g, 0), f32v(g, -1.5f), f32v(g, -2.5f);
    str(g, "tokenizer.ggml.token_type"), u32(g, GGUF_TYPE_ARRAY), u32(g, GGUF_TYPE_I32), u64(g, 3);
    u32(g, 3), u32(g, 1), u32(g, 6);
    uint64_t off = 0;
    for (int i = 0; i < NT; i++) {
        L->t_name[i] = g->n + 8, str(g, tnames[i]);
        L->t_ndims[i] = g->n, u32(g, (uint32_t)tdims[i]);
        for (int k = 0; k < tdims[i]; k++) L->t_ne[i][k] = g->n, u64(g, tne[i][k]);
        L->t_type[i] = g->n, u32(g, ttypes[i]);
        L->t_offset[i] = g->n, u64(g, off);
        L->t_off[i] = off;
        L->t_bytes[i] = tbytes(i);
        off = (off + L->t_bytes[i] + a - 1) / a * a;
    }
    pad_to(g, a);
    L->data = g->n;
    for (int i = 0; i < NT; i++) {
        while (g->n < L->data + L->t_off[i]) u8(g, 0);
        const size_t start = g->n;
        for (uint64_t j = 0; j < L->t_bytes[i]; j++) u8(g, (uint8_t)(i * 37 + j));
        if (ttypes[i] == GGML_TYPE_F32)
            for (uint64_t j = 0; j < L->t_bytes[i] / 4; j++) {
                float v = 0.5f * (float)j;
                memcpy(g->b + start + 4 * j, &v, 4);
            }
        if (ttypes[i] == GGML_TYPE_Q8_0 || ttypes[i] == GGML_TYPE_Q4_0) {
            const size_t bb = ttypes[i] == GGML_TYPE_Q8_0 ? 34 : 18;
            for (size_t b = 0; b < L->t_bytes[i] / bb; b++) g->b[start + b * bb] = 0x00, g->b[start + b * bb + 1] = 0x3c;
        }
    }
}

/* ---------------------------------------------------------------- helpers */

static char *tmpdir;
static int file_no;

static const char *write_tmp(const unsigned char *b, size_t n) {
    static char path[600];
    snprintf(path, sizeof path, "%s/f%d.gguf", tmpdir, file_no++ % 16);
    assert_int_equal(th_write_file(path, b, n), 0);
    return path;
}

/* Loads bytes; returns the status, with the error in *err. */
static int load_bytes(const unsigned char *b, size_t n, kvlm_error *err, const char **path) {
    const char *p = write_tmp(b, n);
    if (path) *path = p;
    tensor_set ts;
    gguf_meta m;
    tensor_set_init(&ts);
    int rc = gguf_load(&ts, &m, p, err);
    gguf_meta_free(&m);
    tensor_set_free(&ts);
    return rc;
}

/* The bytes must be rejected with code, and the message must name the
 * file and contain every one of the given fragments. */
static void expect_fail_(const unsigned char *b, size_t n, int code, const char *const *want, int line) {
    kvlm_error err = {0};
    const char *path;
    int rc = load_bytes(b, n, &err, &path);
    if (rc == KVLM_OK) fail_msg("line %d: damaged file was accepted", line);
    if (rc != code) fail_msg("line %d: status %d, expected %d (%s)", line, rc, code, err.msg);
    if (!strstr(err.msg, path)) fail_msg("line %d: message does not name the file: %s", line, err.msg);
    for (int i = 0; want[i]; i++)
        if (!strstr(err.msg, want[i])) fail_msg("line %d: message lacks '%s': %s", line, want[i], err.msg);
}
#define EXPECT_FAIL(b, n, code, ...) expect_fail_((b), (n), (code), (const char *const[]){__VA_ARGS__, NULL}, __LINE__)

static int group_setup(void **state) {
    (void)state;
    tmpdir = th_tempdir();
    return tmpdir ? 0 : -1;
}

static int group_teardown(void **state) {
    (void)state;
    th_rmtree(tmpdir);
    free(tmpdir);
    return 0;
}

/* ---------------------------------------------------------------- tests */

static void test_valid_file(void **state) {
    (void)state;
    gb g = {0};
    layout L;
    for (int variant = 0; variant < 3; variant++) { /* v3 align 64, v3 default alignment, v2 align 32 */
        build(&g, &L, variant == 2 ? 2 : 3, variant == 0 ? 64 : variant == 2 ? 32 : 0);
        const char *path = write_tmp(g.b, g.n);
        tensor_set ts;
        gguf_meta m;
        kvlm_error err = {0};
        tensor_set_init(&ts);
        int rc = gguf_load(&ts, &m, path, &err);
        if (rc) fail_msg("valid file rejected: %s", err.msg);
        assert_int_equal(m.version, variant == 2 ? 2 : 3);
        assert_int_equal(m.alignment, variant == 0 ? 64 : 32);
        assert_int_equal(m.data_offset, L.data);
        assert_int_equal(m.n_kv, variant == 1 ? 13 : 14);
        assert_int_equal(ts.layout, LAYOUT_OUT_IN);

        const char *s;
        int64_t v;
        double f;
        int b;
        assert_int_equal(gguf_get_string(&m, "general.architecture", &s, &err), 0);
        assert_string_equal(s, "llama");
        assert_int_equal(gguf_get_int(&m, "llama.block_count", 1, 100, &v, &err), 0);
        assert_int_equal(v, 2);
        assert_int_equal(gguf_get_float(&m, "llama.attention.layer_norm_rms_epsilon", &f, &err), 0);
        assert_true(f == (double)1e-5f);
        assert_int_equal(gguf_get_int(&m, "test.u8", 0, 255, &v, &err), 0);
        assert_int_equal(v, 200);
        assert_int_equal(gguf_get_int(&m, "test.i8", -128, 127, &v, &err), 0);
        assert_int_equal(v, -128);
        assert_int_equal(gguf_get_int(&m, "test.i64", INT64_MIN, INT64_MAX, &v, &err), 0);
        assert_int_equal(v, -5);
        assert_int_equal(gguf_get_float(&m, "test.f64", &f, &err), 0);
        assert_true(f == 3.25);
        assert_int_equal(gguf_get_bool_or(&m, "tokenizer.ggml.add_bos_token", 0, &b, &err), 0);
        assert_int_equal(b, 1);
        assert_int_equal(gguf_get_bool_or(&m, "tokenizer.ggml.add_eos_token", 7, &b, &err), 0);
        assert_int_equal(b, 7);
        assert_int_equal(gguf_get_int_or(&m, "llama.attention.head_count_kv", 1, 64, 4, &v, &err), 0);
        assert_int_equal(v, 4);
        assert_int_equal(gguf_get_float_or(&m, "llama.rope.freq_base", 10000.0, &f, &err), 0);
        assert_true(f == 10000.0);

        const gguf_kv *kv;
        assert_int_equal(gguf_get_array(&m, "tokenizer.ggml.tokens", GGUF_TYPE_STRING, &kv, &err), 0);
        assert_int_equal(kv->n, 3);
        gguf_str t1 = gguf_kv_str(kv, 1), t2 = gguf_kv_str(kv, 2);
        assert_int_equal(t1.len, 7);
        assert_memory_equal(t1.s, "he\xc4\xa0llo", 7);
        assert_int_equal(t2.len, 0);
        assert_int_equal(gguf_get_array(&m, "tokenizer.ggml.scores", GGUF_TYPE_F32, &kv, &err), 0);
        assert_true(gguf_kv_float(kv, 1) == -1.5);
        assert_int_equal(gguf_get_array(&m, "tokenizer.ggml.token_type", GGUF_TYPE_I32, &kv, &err), 0);
        assert_int_equal(gguf_kv_int(kv, 0), 3);
        assert_int_equal(gguf_kv_int(kv, 2), 6);
        assert_int_equal(gguf_get_array(&m, "test.u16i16", GGUF_TYPE_COUNT, &kv, &err), 0);
        assert_int_equal(gguf_kv_int(kv, 0), -1);
        assert_int_equal(gguf_kv_int(kv, 1), 7);

        /* wrong types, ranges and absent keys name the key */
        assert_int_equal(gguf_get_int(&m, "general.architecture", 0, 9, &v, &err), KVLM_ERR_FORMAT);
        assert_non_null(strstr(err.msg, "general.architecture"));
        assert_non_null(strstr(err.msg, "found string"));
        assert_int_equal(gguf_get_int(&m, "llama.block_count", 3, 9, &v, &err), KVLM_ERR_FORMAT);
        assert_non_null(strstr(err.msg, "outside [3, 9]"));
        assert_int_equal(gguf_get_int(&m, "test.u64big", 0, INT64_MAX, &v, &err), KVLM_ERR_FORMAT);
        assert_int_equal(gguf_get_int(&m, "llama.context_length", 1, 9, &v, &err), KVLM_ERR_FORMAT);
        assert_non_null(strstr(err.msg, "'llama.context_length' is missing"));
        assert_non_null(strstr(err.msg, path));
        assert_int_equal(gguf_get_array(&m, "tokenizer.ggml.scores", GGUF_TYPE_STRING, &kv, &err), KVLM_ERR_FORMAT);
        assert_non_null(strstr(err.msg, "found array of f32"));
        assert_int_equal(gguf_get_string(&m, "tokenizer.ggml.tokens", &s, &err), KVLM_ERR_FORMAT);
        assert_int_equal(gguf_get_bool_or(&m, "test.u8", 0, &b, &err), KVLM_ERR_FORMAT);
        assert_null(gguf_meta_find(&m, "nope"));

        /* tensors: shapes reversed to [rows, ne0], dtypes, data in place */
        assert_int_equal(ts.n_items, NT);
        const kvlm_dtype dts[NT] = {KVLM_F32, KVLM_Q8_0, KVLM_Q4_0, KVLM_F16, KVLM_BF16};
        for (int i = 0; i < NT; i++) {
            const named_tensor *nt = tensor_set_find(&ts, tnames[i], NULL);
            assert_non_null(nt);
            assert_int_equal(nt->t.dtype, dts[i]);
            assert_int_equal(nt->t.ndim, tdims[i]);
            assert_int_equal(nt->t.shape[tdims[i] - 1], tne[i][0]);
            if (tdims[i] == 2) assert_int_equal(nt->t.shape[0], tne[i][1]);
            assert_int_equal(tensor_nbytes(&nt->t), L.t_bytes[i]);
            assert_ptr_equal(nt->t.data, ts.files[0].data + L.data + L.t_off[i]);
            assert_int_equal((uintptr_t)nt->t.data % m.alignment, 0);
        }
        const named_tensor *e = tensor_set_find(&ts, "token_embd.weight", NULL);
        assert_true(dtype_load(e->t.dtype, e->t.data, 64 + 3) == 33.5f); /* row 1, column 3 */
        const named_tensor *q = tensor_set_find(&ts, "blk.0.attn_q.weight", NULL);
            /* row 1 starts with block 2: scale 1.0, code 5 is byte 2 * 34 + 2 + 5 = 75, (37 + 75) & 0xff = 112 */
        assert_true(dtype_load(q->t.dtype, q->t.data, 64 + 5) == 112.0f);
        tensor_set_free(&ts);
        gguf_meta_free(&m);
    }
    free(g.b);
}

static void test_header_damage(void **state) {
    (void)state;
    gb g = {0};
    layout L;
    build(&g, &L, 3, 32);
    unsigned char *b = malloc(g.n);
#define RESET() memcpy(b, g.b, g.n)
    RESET(), b[0] = 'X';
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "magic");
    RESET(), patch32(b, L.version, 1);
    EXPECT_FAIL(b, g.n, KVLM_ERR_UNSUPPORTED, "version", "1 is not supported");
    RESET(), patch32(b, L.version, 99);
    EXPECT_FAIL(b, g.n, KVLM_ERR_UNSUPPORTED, "version");
    RESET(), patch32(b, L.version, 0x03000000);
    EXPECT_FAIL(b, g.n, KVLM_ERR_UNSUPPORTED, "version", "big-endian");
    RESET(), patch64(b, L.n_tensors, 1ull << 40);
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "tensor_count");
    RESET(), patch64(b, L.n_tensors, UINT64_MAX);
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "tensor_count");
    RESET(), patch64(b, L.n_kv, 1ull << 33);
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "metadata_kv_count");
    RESET(), patch64(b, L.n_kv, UINT64_MAX);
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "metadata_kv_count");
    /* a count that fits the size test but not the content: runs off the end */
    RESET(), patch64(b, L.n_tensors, NT + 1);
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "tensor #5");
    /* too short for the header at all */
    EXPECT_FAIL(g.b, 10, KVLM_ERR_FORMAT, "tensor_count");
    EXPECT_FAIL(g.b, 3, KVLM_ERR_FORMAT, "magic");
    free(b), free(g.b);
}

static void test_metadata_damage(void **state) {
    (void)state;
    gb g = {0};
    layout L;
    build(&g, &L, 3, 32);
    unsigned char *b = malloc(g.n);
    RESET(), patch64(b, L.arch_len, 1ull << 40);
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "general.architecture", "string length 1099511627776", "exceeds");
    RESET(), patch64(b, L.arch_len, g.n - L.arch_len - 8 + 1);
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "general.architecture", "exceeds");
    RESET(), patch64(b, L.arch_len, UINT64_MAX);
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "general.architecture", "string length");
    RESET(), patch64(b, L.token1_len, 1ull << 50);
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "tokenizer.ggml.tokens", "string 1", "exceeds");
    RESET(), patch64(b, L.key_len_rms, 1ull << 45);
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "metadata key #3", "string length");
    RESET(), patch64(b, L.key_len_rms, 0);
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "metadata key #3", "1..65535");
    RESET(), patch32(b, L.tokens_elem_type, GGUF_TYPE_ARRAY);
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "tokenizer.ggml.tokens", "nested arrays");
    RESET(), patch32(b, L.tokens_elem_type, 13);
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "tokenizer.ggml.tokens", "unknown array element type 13");
    RESET(), patch64(b, L.tokens_len, 1ull << 61);
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "tokenizer.ggml.tokens", "array length");
    RESET(), patch32(b, L.tokens_elem_type, GGUF_TYPE_U64); /* 3 x 8 bytes is short of nothing: reinterpreted */
    patch64(b, L.tokens_len, (g.n - L.tokens_len) / 8 + 1);
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "tokenizer.ggml.tokens", "array length", "u64");
    RESET(), patch32(b, L.rms_type, 77);
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "llama.attention.layer_norm_rms_epsilon", "unknown value type 77");
    RESET(), b[L.bool_value] = 2;
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "tokenizer.ggml.add_bos_token", "bool");
    /* "llama.block_count" -> "llama.attention..." collides? make it equal to general.alignment's length-17 twin */
    RESET(), memcpy(b + L.key_block_count, "general.alignmenT", 17);
    kvlm_error err;
    assert_int_equal(load_bytes(b, g.n, &err, NULL), KVLM_OK); /* different key: fine */
    RESET(), memcpy(b + L.key_block_count, "general.alignment", 17);
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "general.alignment", "duplicate key");
    RESET(), patch32(b, L.align_value, 24);
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "general.alignment", "power of two");
    RESET(), patch32(b, L.align_value, 0);
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "general.alignment", "power of two");
    RESET(), patch32(b, L.align_type, GGUF_TYPE_F32);
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "general.alignment", "must be an integer");
    free(b), free(g.b);
}

static void test_tensor_damage(void **state) {
    (void)state;
    gb g = {0};
    layout L;
    build(&g, &L, 3, 32);
    unsigned char *b = malloc(g.n);
    RESET(), patch32(b, L.t_type[1], 22); /* IQ2_S: a type kvlm does not read */
    EXPECT_FAIL(b, g.n, KVLM_ERR_UNSUPPORTED, "blk.0.attn_q.weight", "IQ2_S");
    RESET(), patch32(b, L.t_type[1], 12); /* Q4_K is read, but 64 values are no whole 256-block */
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "blk.0.attn_q.weight", "ne[0] = 64", "q4_k block of 256");
    RESET(), patch32(b, L.t_type[0], 1000);
    EXPECT_FAIL(b, g.n, KVLM_ERR_UNSUPPORTED, "token_embd.weight", "unknown type 1000");
    RESET(), patch32(b, L.t_ndims[0], 5);
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "token_embd.weight", "n_dims 5");
    RESET(), patch32(b, L.t_ndims[0], 0);
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "token_embd.weight", "n_dims 0");
    RESET(), patch64(b, L.t_ne[0][1], 0);
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "token_embd.weight", "ne[1] = 0");
    RESET(), patch64(b, L.t_ne[0][0], 1ull << 40), patch64(b, L.t_ne[0][1], 1ull << 40);
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "token_embd.weight", "overflows");
    RESET(), patch64(b, L.t_ne[0][0], UINT64_MAX);
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "token_embd.weight", "ne[0]");
    RESET(), patch64(b, L.t_ne[0][0], 1ull << 59); /* element count fits int64, bytes do not */
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "token_embd.weight", "byte size overflows");
    RESET(), patch64(b, L.t_ne[1][0], 48);
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "blk.0.attn_q.weight", "ne[0] = 48", "block");
    RESET(), patch64(b, L.t_offset[2], L.t_off[2] + 4);
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "blk.0.ffn_up.weight", "offset", "general.alignment");
    RESET(), patch64(b, L.t_offset[2], L.t_off[1]);
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "overlap", "blk.0.attn_q.weight", "blk.0.ffn_up.weight");
    RESET(), patch64(b, L.t_offset[1], 32); /* inside token_embd's 1024 bytes */
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "overlap", "token_embd.weight");
    RESET(), patch64(b, L.t_offset[4], 1ull << 20);
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "blk.0.attn_k.weight", "beyond the end of the file");
    RESET(), patch64(b, L.t_offset[4], UINT64_MAX & ~31ull);
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "blk.0.attn_k.weight", "beyond the end of the file");
    RESET(), patch64(b, L.t_ne[4][1], 3); /* last tensor one row longer than the file */
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "blk.0.attn_k.weight", "beyond the end of the file");
    RESET(), memcpy(b + L.t_name[4], "blk.0.attn_q", 12); /* attn_k -> attn_q */
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "blk.0.attn_q.weight", "duplicate tensor name");
    RESET(), b[L.t_name[3] + 2] = 0;
    EXPECT_FAIL(b, g.n, KVLM_ERR_FORMAT, "tensor #3 name", "NUL");
    free(b), free(g.b);
}

/* Every proper prefix of the valid file is rejected (the file ends with
 * tensor data, so even a prefix that keeps all headers loses data). */
static void test_truncation(void **state) {
    (void)state;
    gb g = {0};
    layout L;
    build(&g, &L, 3, 32);
    int rejected = 0;
    for (size_t n = 0; n < g.n; n++) {
        kvlm_error err = {0};
        const char *path;
        int rc = load_bytes(g.b, n, &err, &path);
        if (rc == KVLM_OK) fail_msg("prefix of %zu of %zu bytes accepted", n, g.n);
        if (!strstr(err.msg, path)) fail_msg("prefix %zu: message does not name the file: %s", n, err.msg);
        rejected++;
    }
    assert_int_equal(rejected, (int)g.n);
    free(g.b);
}

static uint64_t rng(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* Fixed-seed random damage: no crash, no sanitizer report, and whatever
 * loads is usable (every tensor byte and metadata string is read). */
static void test_mutation_fuzz(void **state) {
    (void)state;
    gb g = {0};
    layout L;
    build(&g, &L, 3, 32);
    unsigned char *b = malloc(g.n);
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    const uint64_t specials[] = {0, 1, 31, 32, 0xff, 0xffff, 0xffffffffull, 1ull << 32, 1ull << 62, UINT64_MAX};
    int loaded = 0, rejected = 0;
    for (int it = 0; it < 3000; it++) {
        memcpy(b, g.b, g.n);
        size_t n = g.n;
        const int muts = 1 + (int)(rng(&seed) % 4);
        for (int k = 0; k < muts; k++) {
            size_t at = (size_t)(rng(&seed) % n);
            switch (rng(&seed) % 4) {
            case 0: b[at] = (uint8_t)rng(&seed); break;
            case 1: b[at] ^= (uint8_t)(1u << (rng(&seed) % 8)); break;
            case 2: /* a special integer over a (possibly) length or count field */
                if (at + 8 <= n) patch64(b, at, specials[rng(&seed) % (sizeof specials / sizeof *specials)]);
                break;
            default: n = at + 1; break; /* truncate */
            }
        }
        const char *p = write_tmp(b, n);
        tensor_set ts;
        gguf_meta m;
        kvlm_error err = {0};
        tensor_set_init(&ts);
        if (gguf_load(&ts, &m, p, &err) == KVLM_OK) {
            unsigned sum = 0;
            for (int i = 0; i < ts.n_items; i++) {
                const unsigned char *d = ts.items[i].t.data;
                size_t nb = tensor_nbytes(&ts.items[i].t);
                for (size_t j = 0; j < nb; j++) sum += d[j];
            }
            for (size_t i = 0; i < m.n_kv; i++) {
                const gguf_kv *kv = &m.kv[i];
                for (uint64_t j = 0; j < kv->n; j++) {
                    if (kv->elem == GGUF_TYPE_STRING) {
                        gguf_str s = gguf_kv_str(kv, j);
                        for (size_t c = 0; c < s.len; c++) sum += (unsigned char)s.s[c];
                    } else {
                        sum += (unsigned)gguf_kv_float(kv, j);
                    }
                }
            }
            (void)sum;
            loaded++;
        } else {
            if (!strstr(err.msg, p)) fail_msg("mutation %d: message does not name the file: %s", it, err.msg);
            rejected++;
        }
        gguf_meta_free(&m);
        tensor_set_free(&ts);
    }
    assert_true(rejected > 1000);
    assert_true(loaded > 10); /* some mutations only touch tensor data */
    free(b), free(g.b);
}

/* The committed fixtures (tools/make_gguf_fixtures.py) load, and Python's
 * writer agrees with the C code byte for byte: every matrix of the Q8_0 and
 * Q4_0 files is what quant_quantize_row makes of the F32 file's rows, and
 * the F16 / BF16 files hold the F32 values rounded to nearest even. */
#define FIX "tests/fixtures/llama_gguf/"
static void test_committed_fixtures(void **state) {
    (void)state;
    const char *files[] = {FIX "gqa_f32.gguf", FIX "gqa_f16.gguf", FIX "gqa_bf16.gguf", FIX "gqa_q8_0.gguf",
                           FIX "gqa_q4_0.gguf"};
    const kvlm_dtype dts[] = {KVLM_F32, KVLM_F16, KVLM_BF16, KVLM_Q8_0, KVLM_Q4_0};
    tensor_set ts[5];
    gguf_meta m[5];
    kvlm_error err = {0};
    for (int f = 0; f < 5; f++) {
        tensor_set_init(&ts[f]);
        if (gguf_load(&ts[f], &m[f], files[f], &err)) fail_msg("%s", err.msg);
        const char *arch;
        int64_t v;
        assert_int_equal(gguf_get_string(&m[f], "general.architecture", &arch, &err), 0);
        assert_string_equal(arch, "llama");
        assert_int_equal(gguf_get_int(&m[f], "llama.attention.head_count_kv", 1, 64, &v, &err), 0);
        assert_int_equal(v, 2);
        assert_int_equal(ts[f].n_items, 21); /* 9 per layer, embedding, final norm, untied head */
    }
    int compared = 0;
    for (int i = 0; i < ts[0].n_items; i++) {
        const named_tensor *a = &ts[0].items[i];
        for (int f = 1; f < 5; f++) {
            const named_tensor *b = tensor_set_find(&ts[f], a->name, NULL);
            assert_non_null(b);
            assert_int_equal(b->t.ndim, a->t.ndim);
            assert_memory_equal(b->t.shape, a->t.shape, sizeof a->t.shape);
            assert_int_equal(b->t.dtype, a->t.ndim == 2 ? dts[f] : KVLM_F32); /* vectors stay F32 */
            if (a->t.ndim != 2) continue;
            const int64_t rows = a->t.shape[0], cols = a->t.shape[1];
            const size_t rb = dtype_row_bytes(dts[f], cols, NULL);
            unsigned char *q = malloc(rb);
            for (int64_t r = 0; r < rows; r++) {
                const float *x = (const float *)a->t.data + r * cols;
                const unsigned char *got = (const unsigned char *)b->t.data + (size_t)r * rb;
                if (dtype_is_blocked(dts[f])) {
                    quant_quantize_row(dts[f], x, cols, q);
                } else {
                    for (int64_t k = 0; k < cols; k++) {
                        uint16_t h = dts[f] == KVLM_F16 ? f32_to_f16(x[k]) : f32_to_bf16(x[k]);
                        memcpy(q + 2 * k, &h, 2);
                    }
                }
                if (memcmp(q, got, rb)) fail_msg("%s: '%s' row %lld differs from the C conversion", files[f], a->name, (long long)r);
            }
            free(q);
            compared++;
        }
    }
    assert_int_equal(compared, 4 * 16); /* 7 matrices per layer, embedding, head */
    for (int f = 0; f < 5; f++) {
        gguf_meta_free(&m[f]);
        tensor_set_free(&ts[f]);
    }
    /* and the GPT-2 file */
    tensor_set g;
    gguf_meta gm;
    tensor_set_init(&g);
    if (gguf_load(&g, &gm, FIX "gpt2_f32.gguf", &err)) fail_msg("%s", err.msg);
    const char *arch;
    assert_int_equal(gguf_get_string(&gm, "general.architecture", &arch, &err), 0);
    assert_string_equal(arch, "gpt2");
    const named_tensor *qkv = tensor_set_find(&g, "blk.1.attn_qkv.weight", NULL);
    assert_non_null(qkv);
    assert_int_equal(qkv->t.shape[0], 192); /* [3C, C]: Conv1D transposed to [out, in] */
    assert_int_equal(qkv->t.shape[1], 64);
    assert_null(tensor_set_find(&g, "output.weight", NULL)); /* tied */
    gguf_meta_free(&gm);
    tensor_set_free(&g);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_file),     cmocka_unit_test(test_header_damage),
        cmocka_unit_test(test_metadata_damage), cmocka_unit_test(test_tensor_damage),
        cmocka_unit_test(test_truncation),     cmocka_unit_test(test_mutation_fuzz),
        cmocka_unit_test(test_committed_fixtures),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
