/*
 * The repacked Q4_0 layout replaces the file's bytes instead of adding to
 * them (model/repack.c): a Llama GGUF file written here, whose Q4_0
 * matrices fill whole pages (general.alignment 4096), is loaded with and
 * without repack, run through a prefill of 9 tokens (the int8 prefill
 * kernels) and 3 decode steps (the packed decode kernel), and the resident
 * bytes of the file's mapping (Rss in /proc/self/smaps) are compared with
 * the file's byte counts: with the packed copies, none of the Q4_0 pages
 * is resident after load, prefill or decode (at most the bytes before
 * them are); without them, all are after the prefill. The logits agree to 1e-3 of their largest magnitude (the
 * packed decode kernel sums in another order than the row-major one).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "kernels/kernels.h"
#include "kvlm.h"
#include "tensor.h"

enum { C = 1024, F = 4096, V = 256, ALIGN = 4096 };

typedef struct gw {
    unsigned char *b;
    size_t n, cap;
} gw;

static void put(gw *g, const void *p, size_t n) {
    if (g->n + n > g->cap) {
        g->cap = (g->n + n) * 2;
        g->b = realloc(g->b, g->cap);
        assert_non_null(g->b);
    }
    memcpy(g->b + g->n, p, n), g->n += n;
}
static void u32(gw *g, uint32_t v) { put(g, &v, 4); }
static void u64(gw *g, uint64_t v) { put(g, &v, 8); }
static void str(gw *g, const char *s) { u64(g, strlen(s)), put(g, s, strlen(s)); }
static void kv_u32(gw *g, const char *k, uint32_t v) { str(g, k), u32(g, 4 /* u32 */), u32(g, v); }
static void kv_f32(gw *g, const char *k, float v) { str(g, k), u32(g, 6 /* f32 */), put(g, &v, 4); }

typedef struct tdesc {
    const char *name;
    uint64_t ne0, ne1; /* ne1 0: a vector */
    int q4;            /* Q4_0 (else F32) */
} tdesc;

/* The F32 tensors first, then the Q4_0 ones from a 2 MiB boundary of the
 * file on: the kernel maps a file's pages into a process a folio at a
 * time (page-cache folios of up to 2 MiB, aligned in the file), so a read
 * of an F32 vector next to a Q4_0 matrix would make the matrix's pages in
 * the same folio resident too. */
static const tdesc tensors[] = {
    {"token_embd.weight", C, V, 0},     {"blk.0.attn_norm.weight", C, 0, 0}, {"blk.0.ffn_norm.weight", C, 0, 0},
    {"output_norm.weight", C, 0, 0},    {"blk.0.attn_q.weight", C, C, 1},    {"blk.0.attn_k.weight", C, C, 1},
    {"blk.0.attn_v.weight", C, C, 1},   {"blk.0.attn_output.weight", C, C, 1}, {"blk.0.ffn_gate.weight", C, F, 1},
    {"blk.0.ffn_up.weight", C, F, 1},   {"blk.0.ffn_down.weight", F, C, 1},  {"output.weight", C, V, 1},
};
#define FOLIO ((uint64_t)2 << 20)
#define NT (sizeof tensors / sizeof tensors[0])

static size_t tbytes(const tdesc *t) {
    const uint64_t rows = t->ne1 ? t->ne1 : 1;
    return t->q4 ? (size_t)(rows * (t->ne0 / 32) * 18) : (size_t)(rows * t->ne0 * 4);
}

static uint32_t rnd(uint32_t *s) {
    *s ^= *s << 13, *s ^= *s >> 17, *s ^= *s << 5;
    return *s;
}

/* The file, the bytes of its Q4_0 tensors (all whole pages) and the file
 * offset where they start (a multiple of 2 MiB). */
static size_t write_model(const char *path, size_t *q4_bytes, size_t *q4_start) {
    gw g = {0};
    put(&g, "GGUF", 4), u32(&g, 3), u64(&g, NT), u64(&g, 9);
    str(&g, "general.architecture"), u32(&g, 8 /* string */), str(&g, "llama");
    kv_u32(&g, "general.alignment", ALIGN);
    kv_u32(&g, "llama.context_length", 64);
    kv_u32(&g, "llama.embedding_length", C);
    kv_u32(&g, "llama.block_count", 1);
    kv_u32(&g, "llama.feed_forward_length", F);
    kv_u32(&g, "llama.attention.head_count", 8);
    kv_f32(&g, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    kv_f32(&g, "llama.rope.freq_base", 10000.0f);
    size_t at[NT]; /* where each offset field is, filled in below */
    for (size_t i = 0; i < NT; i++) {
        str(&g, tensors[i].name);
        u32(&g, tensors[i].ne1 ? 2 : 1), u64(&g, tensors[i].ne0);
        if (tensors[i].ne1) u64(&g, tensors[i].ne1);
        u32(&g, tensors[i].q4 ? 2 /* Q4_0 */ : 0 /* F32 */);
        at[i] = g.n;
        u64(&g, 0);
    }
    const unsigned char zero[ALIGN] = {0};
    put(&g, zero, (ALIGN - g.n % ALIGN) % ALIGN);
    const uint64_t data = g.n;
    uint64_t off = 0;
    *q4_bytes = 0;
    for (size_t i = 0; i < NT; i++) {
        if (tensors[i].q4 && !*q4_bytes) { /* the first Q4_0 tensor: at the next 2 MiB of the file */
            off = (data + off + FOLIO - 1) / FOLIO * FOLIO - data;
            *q4_start = data + off;
        }
        memcpy(g.b + at[i], &off, 8);
        off += (tbytes(&tensors[i]) + ALIGN - 1) / ALIGN * ALIGN;
        if (tensors[i].q4) *q4_bytes += tbytes(&tensors[i]);
    }
    uint32_t seed = 2026;
    for (size_t i = 0; i < NT; i++) {
        if (tensors[i].q4 && g.n < *q4_start) /* zeros up to the Q4_0 tensors */
            while (g.n < *q4_start) put(&g, zero, *q4_start - g.n < ALIGN ? *q4_start - g.n : ALIGN);
        const size_t nb = tbytes(&tensors[i]);
        unsigned char *d = malloc(nb);
        if (tensors[i].q4) {
            const uint16_t h = f32_to_f16(0.02f);
            for (size_t b = 0; b < nb; b += 18) {
                memcpy(d + b, &h, 2);
                for (int j = 2; j < 18; j++) d[b + j] = (unsigned char)rnd(&seed);
            }
        } else {
            for (size_t k = 0; k < nb / 4; k++) {
                const float v = tensors[i].ne1 ? (float)(rnd(&seed) % 2001) / 1000.0f - 1.0f : 1.0f;
                memcpy(d + 4 * k, &v, 4);
            }
        }
        put(&g, d, nb);
        put(&g, zero, (ALIGN - nb % ALIGN) % ALIGN);
        free(d);
    }
    assert_int_equal(th_write_file(path, g.b, g.n), 0);
    const size_t n = g.n;
    free(g.b);
    return n;
}

/* Resident bytes of this process's mappings of path. */
static size_t mapped_rss(const char *path) {
    FILE *f = fopen("/proc/self/smaps", "r");
    assert_non_null(f);
    char line[4608];
    int in = 0;
    size_t kb = 0, total = 0;
    unsigned long a, b;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%lx-%lx ", &a, &b) == 2) in = strstr(line, path) != NULL; /* a mapping's first line */
        else if (in && sscanf(line, "Rss: %zu kB", &kb) == 1) total += kb * 1024;
    }
    fclose(f);
    return total;
}

/* Loads path with or without repack, runs 9 prompt tokens and 3 decode
 * steps, writes the last logits and the mapping's Rss after load and after
 * the run. */
static void run(const char *path, int repack, float *logits, size_t *rss_load, size_t *rss_run) {
    kvlm_error err;
    kvlm_model_params mp = kvlm_model_default_params();
    mp.repack = repack;
    kvlm_model *m = kvlm_model_load(path, &mp, &err);
    if (!m) fail_msg("%s", err.msg);
    assert_true(repack ? kvlm_model_repacked_bytes(m) > 0 : kvlm_model_repacked_bytes(m) == 0);
    *rss_load = mapped_rss(path);
    kvlm_kv_options ko = kvlm_kv_default_params();
    kvlm_engine_options eo = kvlm_engine_default_params();
    eo.threads = 2;
    kvlm_kv *kv = kvlm_kv_create(m, &ko, &err);
    kvlm_engine *e = kv ? kvlm_engine_create(m, kv, &eo, &err) : NULL;
    if (!e) fail_msg("%s", err.msg);
    const int s = kvlm_kv_seq_new(kv, &err);
    assert_true(s >= 0);
    const int32_t prompt[9] = {1, 17, 200, 3, 99, 42, 7, 255, 128};
    kvlm_batch_item it = {s, prompt, 9, 0};
    if (kvlm_engine_step(e, &it, 1, logits, &err)) fail_msg("%s", err.msg);
    for (int t = 0; t < 3; t++) {
        const int32_t tok = (int32_t)(10 + 20 * t);
        kvlm_batch_item d = {s, &tok, 1, 0};
        if (kvlm_engine_step(e, &d, 1, logits, &err)) fail_msg("%s", err.msg);
    }
    *rss_run = mapped_rss(path);
    kvlm_engine_free(e);
    kvlm_kv_free(kv);
    kvlm_model_free(m);
}

static void test_packed_replaces_file_pages(void **state) {
    (void)state;
    if (!kern_cpu_supports(KVLM_ISA_AVX512_VNNI)) skip(); /* the only level that repacks */
    char *dir = th_tempdir();
    assert_non_null(dir);
    char path[600];
    snprintf(path, sizeof path, "%s/q4_0-pages.gguf", dir);
    size_t q4 = 0, q4_start = 0;
    const size_t file = write_model(path, &q4, &q4_start);
    assert_int_equal(q4_start % FOLIO, 0);
    assert_int_equal(file, q4_start + q4);
    assert_int_equal(q4, 4 * 589824 + 3 * 2359296 + 147456); /* 9,584,640 bytes, 2340 whole pages */
    float *with = malloc(V * sizeof(float)), *without = malloc(V * sizeof(float));
    size_t load_with, run_with, load_without, run_without;
    run(path, 0, without, &load_without, &run_without);
    run(path, 1, with, &load_with, &run_with);
    /* without the copies the run reads every Q4_0 page of the file */
    if (run_without < q4 + 4096) fail_msg("no repack: %zu bytes of the file resident, fewer than its Q4_0 %zu", run_without, q4);
    /* with them, none is read: what is resident lies before the Q4_0 tensors */
    if (load_with > q4_start || run_with > q4_start)
        fail_msg("repack: %zu bytes of the file resident after load, %zu after the run; %zu bytes precede its Q4_0 "
                 "tensors", load_with, run_with, q4_start);
    float mx = 0;
    for (int i = 0; i < V; i++) mx = fabsf(without[i]) > mx ? fabsf(without[i]) : mx;
    assert_true(mx > 0.01f);
    for (int i = 0; i < V; i++)
        if (!(fabsf(with[i] - without[i]) <= 1e-3f * mx)) fail_msg("logit %d: %.9g with repack, %.9g without", i, with[i], without[i]);
    free(with), free(without);
    th_rmtree(dir);
    free(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_packed_replaces_file_pages),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
