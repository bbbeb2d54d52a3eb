/* Shared helpers for kvlm's tests; see helpers.h. */
#include "helpers.h"

#include <jansson.h>
#include <math.h>

#include "kernels/kernels.h"
#include "kvlm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

char *th_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
    fclose(f);
    if (buf) { buf[n] = 0; if (len) *len = (size_t)n; }
    return buf;
}

int th_write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, len, f);
    return (fclose(f) == 0 && w == len) ? 0 : -1;
}

char *th_tempdir(void) {
    const char *base = getenv("TMPDIR");
    char tmpl[512];
    snprintf(tmpl, sizeof tmpl, "%s/kvlm-test-XXXXXX", base && *base ? base : "/tmp");
    char *d = mkdtemp(tmpl);
    return d ? strdup(d) : NULL;
}

void th_rmtree(const char *dir) {
    if (!dir || !*dir) return;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
}

const char *th_kvlm(void) {
    const char *k = getenv("KVLM");
    return k && *k ? k : "build/kvlm";
}

int th_run_kvlm(char **out, const char *fmt, ...) {
    char args[4096], cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    /* stderr joins stdout first, so an argument may still redirect it */
    snprintf(cmd, sizeof cmd, "%s 2>&1 %s", th_kvlm(), args);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t r;
    while (buf && (r = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += r;
        if (cap - n < 2) { cap *= 2; buf = realloc(buf, cap); }
    }
    if (buf) buf[n] = 0;
    int st = pclose(p);
    if (out) *out = buf; else free(buf);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static float *th_rows(json_t *a, int *vocab) {
    if (json_array_size(a) != TH_NPOS) return NULL;
    *vocab = (int)json_array_size(json_array_get(a, 0));
    float *out = malloc((size_t)TH_NPOS * *vocab * sizeof(float));
    for (int i = 0; out && i < TH_NPOS; i++)
        for (int j = 0; j < *vocab; j++)
            out[i * *vocab + j] = (float)json_number_value(json_array_get(json_array_get(a, (size_t)i), (size_t)j));
    return out;
}

int th_expected_load(const char *path, th_expected *ex) {
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    memset(ex, 0, sizeof *ex);
    if (!root) return -1;
    json_t *p = json_object_get(root, "prompt"), *d = json_object_get(root, "decode");
    for (int i = 0; i < TH_NPOS; i++) {
        ex->prompt[i] = (int32_t)json_integer_value(json_array_get(p, (size_t)i));
        ex->decode[i] = (int32_t)json_integer_value(json_array_get(d, (size_t)i));
    }
    ex->prefill = th_rows(json_object_get(root, "prefill_logits"), &ex->vocab);
    ex->dec = th_rows(json_object_get(root, "decode_logits"), &ex->vocab);
    json_decref(root);
    return ex->prefill && ex->dec ? 0 : -1;
}

void th_expected_free(th_expected *ex) {
    free(ex->prefill);
    free(ex->dec);
    memset(ex, 0, sizeof *ex);
}

double th_parity_run(kvlm_model *m, const th_expected *ex, int isa, int kv_dtype, int no_cache) {
    kvlm_error err;
    kvlm_kv_options ko = kvlm_kv_default_params();
    ko.dtype = (kvlm_dtype)kv_dtype;
    kvlm_kv *kv = kvlm_kv_create(m, &ko, &err);
    kvlm_engine_options eo = kvlm_engine_default_params();
    eo.threads = 2;
    eo.isa = (kvlm_isa)isa;
    kvlm_engine *e = kv ? kvlm_engine_create(m, kv, &eo, &err) : NULL;
    int seq = e ? kvlm_kv_seq_new(kv, &err) : -1;
    const int V = ex->vocab;
    float *lg = malloc((size_t)TH_NPOS * V * sizeof(float));
    double worst = INFINITY;
    kvlm_batch_item it = {seq, ex->prompt, TH_NPOS, 1};
    if (seq >= 0 && lg && kvlm_engine_step(e, &it, 1, lg, &err) == 0) {
        worst = 0;
        for (int i = 0; i < TH_NPOS * V; i++) worst = fmax(worst, fabs((double)lg[i] - ex->prefill[i]));
        int32_t ctx[2 * TH_NPOS];
        memcpy(ctx, ex->prompt, sizeof ex->prompt);
        memcpy(ctx + TH_NPOS, ex->decode, sizeof ex->decode);
        for (int j = 0; j < TH_NPOS && worst < INFINITY; j++) {
            it = (kvlm_batch_item){seq, &ex->decode[j], 1, 0};
            if (no_cache ? th_recompute_step(e, kv, seq, ctx, TH_NPOS + j + 1, lg, &err)
                         : kvlm_engine_step(e, &it, 1, lg, &err))
                worst = INFINITY;
            for (int i = 0; i < V && worst < INFINITY; i++)
                worst = fmax(worst, fabs((double)lg[i] - ex->dec[(size_t)j * V + i]));
        }
    }
    free(lg);
    kvlm_engine_free(e);
    kvlm_kv_free(kv);
    return worst;
}

int th_recompute_step(kvlm_engine *e, kvlm_kv *kv, int seq, const int32_t *context, int n, float *logits,
                      kvlm_error *err) {
    int rc = kvlm_kv_seq_truncate(kv, seq, 0, err);
    if (rc) return rc;
    kvlm_batch_item it = {.seq = seq, .tokens = context, .n_tokens = n, .logits_all = 0};
    return kvlm_engine_step(e, &it, 1, logits, err);
}

void th_expect_cli(const th_cli_case *cases, size_t n) {
    for (size_t i = 0; i < n; i++) {
        char *out = NULL;
        int st = th_run_kvlm(&out, "%s", cases[i].args);
        if (st != cases[i].status || !strstr(out, cases[i].needle))
            fail_msg("kvlm %s: exit %d (want %d), output: %s (want '%s')", cases[i].args, st, cases[i].status, out,
                     cases[i].needle);
        free(out);
    }
}

double th_chi2_critical(int dof) {
    const double z = 3.0902, a = 2.0 / (9.0 * dof);
    const double t = 1 - a + z * sqrt(a);
    return dof * t * t * t;
}

kvlm_isa th_best_f32_isa(void) {
    const kvlm_isa order[] = {KVLM_ISA_AVX512, KVLM_ISA_AVX2, KVLM_ISA_NEON};
    for (size_t i = 0; i < sizeof order / sizeof *order; i++)
        if (kern_cpu_supports(order[i])) return order[i];
    return KVLM_ISA_SCALAR;
}
