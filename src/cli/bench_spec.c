/*
 * `kvlm bench --draft MODEL | --draft-ngram N`: speculative decoding against
 * plain decoding on one prompt, at temperature 0 and 0.8, in three rows:
 * plain, fixed speculation (drafts at every step) and the adaptive policy
 * (drafts where its measurements say they pay; docs/speculative.md). Each
 * repeat runs the three generations of tg tokens (no end-of-sequence stop)
 * with the same seed, rotating which goes first (A B C, B C A, C A B, ...),
 * so drift on a shared machine touches all alike. Reported per temperature
 * and row: the median end-to-end time (prefill, first token and decode)
 * with its min and max, acceptance (drafts kept / drafted), tokens per
 * target decode step, and the speed-up as the median (min, max) of the
 * per-repeat ratios plain / speculative. Each generation starts a new
 * scheduler, so the adaptive row measures its costs from scratch every
 * time, as a fresh server would.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench_kv.h"
#include "cli/generate.h"
#include "cli/measure.h"

enum { ROW_PLAIN, ROW_FIXED, ROW_ADAPTIVE, N_ROWS };

/* One row's generations: end-to-end seconds per repeat, tokens after the
 * first, decode steps, drafted and kept tokens. */
typedef struct spec_sums {
    double e2e[BENCH_MAX_REPEATS];
    long decoded, steps, drafted, accepted;
} spec_sums;

static int one(kvlm_engine *e, kvlm_kv *kv, const kvlm_config *c, const int32_t *prompt, int n_prompt, int tg,
               float temp, uint64_t seed, const cli_draft *d, int row, spec_sums *s, int i) {
    kvlm_error err;
    gen_request rq = {.prompt = prompt, .n_prompt = n_prompt, .max_new = tg, .sampling = kvlm_sampler_default_params(),
                      .speculation = row == ROW_PLAIN ? kvlm_speculation_default_params() : d->spec, .draft = d};
    rq.speculation.fixed = row == ROW_FIXED;
    rq.sampling.temperature = temp;
    rq.sampling.seed = seed;
    gen_result g;
    if (gen_run(e, kv, c->vocab_size, &rq, &g, &err)) {
        fprintf(stderr, "kvlm bench: %s\n", err.msg);
        gen_result_free(&g);
        return -1;
    }
    s->e2e[i] = g.ttft_s + g.decode_s;
    s->decoded += g.n_ids - 1;
    s->steps += g.decode_steps;
    s->drafted += g.drafted;
    s->accepted += g.accepted;
    gen_result_free(&g);
    return 0;
}

/* min, median and max of v[0..n) (sorted in place) */
static void spread(double *v, int n, double out[3]) {
    out[1] = bkv_median(v, n);
    out[0] = v[0];
    out[2] = v[n - 1];
}

/* One speculative row's figures against the plain row. */
static json_t *row_json(const spec_sums *plain, const spec_sums *r, int repeats) {
    double ratio[BENCH_MAX_REPEATS], t[BENCH_MAX_REPEATS], sp[3], tm[3];
    for (int i = 0; i < repeats; i++) {
        ratio[i] = bkv_div(plain->e2e[i], r->e2e[i]);
        t[i] = r->e2e[i];
    }
    spread(ratio, repeats, sp);
    spread(t, repeats, tm);
    return json_pack("{s:f,s:f,s:I,s:I,s:f,s:f,s:f,s:f,s:f,s:f}", "acceptance",
                     r->drafted ? (double)r->accepted / (double)r->drafted : 0.0, "tokens_per_target_step",
                     r->steps ? (double)r->decoded / (double)r->steps : 0.0, "drafted", (json_int_t)r->drafted,
                     "accepted", (json_int_t)r->accepted, "median_s", tm[1], "min_s", tm[0], "max_s", tm[2], "speedup",
                     sp[1], "speedup_min", sp[0], "speedup_max", sp[2]);
}

json_t *measure_spec(kvlm_model *m, const bench_params *p, const cli_draft *d, const int32_t *prompt, int n_prompt) {
    const kvlm_config *c = kvlm_model_config(m);
    kvlm_error err;
    kvlm_kv_options ko;
    kvlm_engine_options eo;
    bench_setup_options(p, &ko, &eo);
    kvlm_kv *kv = kvlm_kv_create(m, &ko, &err);
    kvlm_engine *e = kv ? kvlm_engine_create(m, kv, &eo, &err) : NULL;
    spec_sums *s = calloc(N_ROWS, sizeof *s);
    json_t *doc = NULL, *runs = json_array();
    if (!e || !s) {
        fprintf(stderr, "kvlm bench: %s\n", s ? err.msg : "out of memory");
        goto out;
    }
    const int tg = n_prompt + p->tg > c->n_ctx ? c->n_ctx - n_prompt : p->tg;
    spec_sums warm = {0};
    if (tg < 2 || one(e, kv, c, prompt, n_prompt, 2, 0, 1, d, ROW_FIXED, &warm, 0)) { /* pages in both models */
        if (tg < 2) fprintf(stderr, "kvlm bench: the prompt leaves no room to generate\n");
        goto out;
    }
    static const float temps[2] = {0.0f, 0.8f};
    for (int t = 0; t < 2; t++) {
        memset(s, 0, N_ROWS * sizeof *s);
        if (p->progress) fprintf(stderr, "speculative decoding at temperature %g...\n", temps[t]);
        for (int i = 0; i < p->repeats; i++)
            for (int k = 0; k < N_ROWS; k++) {
                const int row = (i + k) % N_ROWS; /* rotate which runs first */
                if (one(e, kv, c, prompt, n_prompt, tg, temps[t], 1 + (uint64_t)i, d, row, &s[row], i)) goto out;
            }
        json_t *fixed = row_json(&s[ROW_PLAIN], &s[ROW_FIXED], p->repeats);
        json_t *adaptive = row_json(&s[ROW_PLAIN], &s[ROW_ADAPTIVE], p->repeats);
        double pt[BENCH_MAX_REPEATS], ps[3];
        memcpy(pt, s[ROW_PLAIN].e2e, (size_t)p->repeats * sizeof *pt);
        spread(pt, p->repeats, ps);
        json_t *run = json_pack("{s:f,s:f,s:f,s:f,s:o,s:o}", "temperature", (double)temps[t], "plain_s", ps[1],
                                "plain_min_s", ps[0], "plain_max_s", ps[2], "fixed", fixed, "adaptive", adaptive);
        /* the fixed row's figures at the top level too, as before the adaptive row */
        static const char *const keep[] = {"acceptance", "tokens_per_target_step", "speedup", "drafted", "accepted"};
        for (size_t j = 0; j < sizeof keep / sizeof *keep; j++)
            json_object_set(run, keep[j], json_object_get(fixed, keep[j]));
        json_object_set(run, "speculative_s", json_object_get(fixed, "median_s"));
        json_array_append_new(runs, run);
    }
    const char *mode = d->spec.mode == KVLM_DRAFT_MODEL ? "model" : "ngram";
    doc = json_pack("{s:s,s:s?,s:i,s:i,s:i,s:i,s:i,s:O}", "draft", mode,
                    "draft_model", d->m ? kvlm_model_source(d->m) : NULL, "k", d->spec.k, "ngram", d->spec.ngram,
                    "prompt_tokens", n_prompt, "new_tokens", tg, "repeats", p->repeats, "runs", runs);
out:
    json_decref(runs);
    free(s);
    kvlm_engine_free(e);
    kvlm_kv_free(kv);
    return doc;
}
