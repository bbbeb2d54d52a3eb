/*
 * `kvlm bench --draft MODEL | --draft-ngram N`: speculative decoding against
 * plain decoding on one prompt, at temperature 0 and 0.8. Each repeat runs
 * both generations of tg tokens (no end-of-sequence stop) with the same
 * seed, alternating which goes first, so drift on a shared machine touches
 * both alike. Reported per temperature: the acceptance rate (drafts kept /
 * drafted), tokens per target decode step (1 without speculation), the
 * median end-to-end time of each (prefill, first token and decode) and the
 * speed-up, plain / speculative.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench_kv.h"
#include "cli/generate.h"
#include "cli/measure.h"

/* One generation; its end-to-end seconds, tokens after the first, decode
 * steps, drafted and kept tokens added to the sums. */
typedef struct spec_sums {
    double e2e[BENCH_MAX_REPEATS];
    long decoded, steps, drafted, accepted;
} spec_sums;

static int one(kvlm_engine *e, kvlm_kv *kv, const kvlm_config *c, const int32_t *prompt, int n_prompt, int tg,
               float temp, uint64_t seed, const cli_draft *d, spec_sums *s, int i) {
    kvlm_error err;
    gen_request rq = {.prompt = prompt, .n_prompt = n_prompt, .max_new = tg, .sampling = kvlm_sampler_options_default(),
                      .speculation = d ? d->spec : (kvlm_speculation){0}, .draft = d};
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

json_t *measure_spec(kvlm_model *m, const bench_params *p, const cli_draft *d, const int32_t *prompt, int n_prompt) {
    const kvlm_config *c = kvlm_model_config(m);
    kvlm_error err;
    kvlm_kv_options ko = {.dtype = p->kv_dtype, .block_size = p->block_size, .max_seqs = 1, .no_prefix_cache = 1};
    kvlm_engine_options eo = {.threads = p->threads, .isa = p->isa};
    kvlm_kv *kv = kvlm_kv_create(m, &ko, &err);
    kvlm_engine *e = kv ? kvlm_engine_create(m, kv, &eo, &err) : NULL;
    spec_sums *s = calloc(2, sizeof *s);
    json_t *doc = NULL, *runs = json_array();
    if (!e || !s) {
        fprintf(stderr, "kvlm bench: %s\n", s ? err.msg : "out of memory");
        goto out;
    }
    const int tg = n_prompt + p->tg > c->n_ctx ? c->n_ctx - n_prompt : p->tg;
    spec_sums warm = {0};
    if (tg < 2 || one(e, kv, c, prompt, n_prompt, 2, 0, 1, d, &warm, 0)) { /* pages in both models */
        if (tg < 2) fprintf(stderr, "kvlm bench: the prompt leaves no room to generate\n");
        goto out;
    }
    static const float temps[2] = {0.0f, 0.8f};
    for (int t = 0; t < 2; t++) {
        memset(s, 0, 2 * sizeof *s);
        if (p->progress) fprintf(stderr, "speculative decoding at temperature %g...\n", temps[t]);
        for (int i = 0; i < p->repeats; i++)
            for (int k = 0; k < 2; k++) {
                const int spec = (i + k) % 2; /* alternate which runs first */
                if (one(e, kv, c, prompt, n_prompt, tg, temps[t], 1 + (uint64_t)i, spec ? d : NULL, &s[spec], i))
                    goto out;
            }
        const double plain = bkv_median(s[0].e2e, p->repeats), sp = bkv_median(s[1].e2e, p->repeats);
        json_array_append_new(
            runs, json_pack("{s:f,s:f,s:f,s:f,s:f,s:f,s:I,s:I}", "temperature", (double)temps[t], "acceptance",
                            s[1].drafted ? (double)s[1].accepted / (double)s[1].drafted : 0.0,
                            "tokens_per_target_step", s[1].steps ? (double)s[1].decoded / (double)s[1].steps : 0.0,
                            "plain_s", plain, "speculative_s", sp, "speedup", plain / sp, "drafted",
                            (json_int_t)s[1].drafted, "accepted", (json_int_t)s[1].accepted));
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
