/*
 * What a speculative verification step costs: one engine step of T rows
 * of one sequence (T = 1 .. 9, logits for every row, as the verification
 * of T - 1 drafts computes them) after a context of 32 cached tokens,
 * best of a few runs, and its ratio to the one-row decode step. With k
 * drafts, speculation gains only when the tokens a step yields (1 + the
 * drafts kept) exceed that ratio plus the drafting cost in decode steps
 * (docs/speculative.md). `make bench-verify MODEL=PATH [THREADS=N]`; never
 * part of `make test`.
 *
 * usage: verify_step_bench MODEL [threads] [runs]
 */
#include <stdio.h>
#include <stdlib.h>

#include "kvlm.h"

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: verify_step_bench MODEL [threads] [runs]\n");
        return 2;
    }
    const int threads = argc > 2 ? atoi(argv[2]) : 0, runs = argc > 3 ? atoi(argv[3]) : 8;
    kvlm_error err;
    kvlm_model *m = kvlm_model_load(argv[1], NULL, &err);
    if (!m) {
        fprintf(stderr, "verify_step_bench: %s\n", err.msg);
        return 1;
    }
    const kvlm_config *c = kvlm_model_config(m);
    enum { CTX = 32, MAX_T = 9 };
    if (c->n_ctx < CTX + MAX_T || runs < 1) {
        fprintf(stderr, "verify_step_bench: needs a context window of %d (has %d) and runs >= 1\n", CTX + MAX_T,
                c->n_ctx);
        kvlm_model_free(m);
        return 1;
    }
    kvlm_kv_options ko = kvlm_kv_default_params(); /* one sequence */
    ko.dtype = KVLM_F32;
    kvlm_kv *kv = kvlm_kv_create(m, &ko, &err);
    kvlm_engine_options eo = kvlm_engine_default_params();
    eo.threads = threads;
    kvlm_engine *e = kv ? kvlm_engine_create(m, kv, &eo, &err) : NULL;
    float *logits = malloc((size_t)MAX_T * c->vocab_size * sizeof *logits);
    int seq = e ? kvlm_kv_seq_new(kv, &err) : -1;
    if (seq < 0 || !logits) {
        fprintf(stderr, "verify_step_bench: %s\n", logits ? err.msg : "out of memory");
        return 1;
    }
    int32_t toks[CTX + MAX_T];
    for (int i = 0; i < CTX + MAX_T; i++) toks[i] = (int32_t)((100 + 37 * i) % c->vocab_size);
    kvlm_batch_item ctx = {seq, toks, CTX, 0};
    if (kvlm_engine_step(e, &ctx, 1, logits, &err)) {
        fprintf(stderr, "verify_step_bench: %s\n", err.msg);
        return 1;
    }
    printf("%s, %d threads, %s kernels: one step of T rows after %d cached tokens (best of %d)\n",
           kvlm_model_source(m), kvlm_engine_threads(e), kvlm_isa_name(kvlm_engine_isa(e)), CTX, runs);
    printf("%3s %10s %12s\n", "T", "ms", "x T=1 step");
    double one = 0;
    for (int T = 1; T <= MAX_T; T++) {
        double best = 1e9;
        for (int r = 0; r < runs + 1; r++) { /* the first run warms up */
            kvlm_batch_item it = {seq, toks + CTX, T, 1};
            const double t0 = kvlm_now();
            if (kvlm_engine_step(e, &it, 1, logits, &err)) {
                fprintf(stderr, "verify_step_bench: %s\n", err.msg);
                return 1;
            }
            const double t = kvlm_now() - t0;
            if (r > 0 && t < best) best = t;
            kvlm_kv_seq_truncate(kv, seq, CTX, &err);
        }
        if (T == 1) one = best;
        printf("%3d %10.3f %12.2f\n", T, best * 1e3, best / one);
    }
    free(logits);
    kvlm_engine_free(e);
    kvlm_kv_free(kv);
    kvlm_model_free(m);
    return 0;
}
