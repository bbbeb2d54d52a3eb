/*
 * `kvlm bench --batch B`: batched decode against one sequence. Each round
 * creates n sequences (n = B or 1) with distinct pseudo-random prompts of
 * pp tokens, computes the prompts in one step, then times tg greedy decode
 * steps in which every sequence adds one token (a step of n rows: each
 * weight matrix read once for all of them). Rounds of B and of 1
 * alternate over the repeats (1 B, B 1, ...), so drift on a shared
 * machine touches both alike. Reported per n: the median time per step
 * with its min and max and the tokens per second it gives (n / step); and
 * per repeat the ratios step(B) / step(1) (ideal for memory-bound decode:
 * near 1) and tokens/s(B) / tokens/s(1) (ideal: near B), as medians.
 * Uses the public engine API only; the greedy choice is the plain argmax
 * of each row (no sampler), which is all a timing needs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench_kv.h"
#include "cli/measure.h"

/* The pp prompt ids of sequence s: a seeded generator of its own, so every
 * sequence of a round has a prompt of its own. */
static void batch_prompt(int32_t *ids, int n, int vocab, int s) {
    uint32_t x = 12345u + 7919u * (uint32_t)s;
    for (int i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        ids[i] = (int32_t)((x >> 8) % (uint32_t)vocab);
    }
}

static int32_t argmax(const float *v, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

/* One round of n sequences: seconds per decode step (mean of the round's
 * tg steps) in *step_s. Returns 0 or -1 after a message. */
static int round_n(kvlm_engine *e, kvlm_kv *kv, const kvlm_config *c, int pp, int tg, int n, double *step_s) {
    kvlm_error err;
    int rc = -1;
    int *seqs = calloc((size_t)n, sizeof *seqs);
    int32_t *prompts = malloc((size_t)n * pp * sizeof *prompts), *next = malloc((size_t)n * sizeof *next);
    kvlm_batch_item *items = calloc((size_t)n, sizeof *items);
    float *logits = malloc((size_t)n * c->vocab_size * sizeof *logits);
    int made = 0;
    if (!seqs || !prompts || !next || !items || !logits) {
        fprintf(stderr, "kvlm bench: out of memory for a batch of %d\n", n);
        goto out;
    }
    for (; made < n; made++) {
        if ((seqs[made] = kvlm_kv_seq_new(kv, &err)) < 0) {
            fprintf(stderr, "kvlm bench: %s\n", err.msg);
            goto out;
        }
        batch_prompt(prompts + (size_t)made * pp, pp, c->vocab_size, made);
        items[made] = (kvlm_batch_item){seqs[made], prompts + (size_t)made * pp, pp, 0};
    }
    if (kvlm_engine_step(e, items, n, logits, &err)) {
        fprintf(stderr, "kvlm bench: %s\n", err.msg);
        goto out;
    }
    double t0 = kvlm_now();
    for (int s = 0; s < tg; s++) {
        for (int i = 0; i < n; i++) {
            next[i] = argmax(logits + (size_t)i * c->vocab_size, c->vocab_size);
            items[i] = (kvlm_batch_item){seqs[i], next + i, 1, 0};
        }
        if (kvlm_engine_step(e, items, n, logits, &err)) {
            fprintf(stderr, "kvlm bench: %s\n", err.msg);
            goto out;
        }
    }
    *step_s = (kvlm_now() - t0) / tg;
    rc = 0;
out:
    for (int i = 0; i < made; i++) kvlm_kv_seq_free(kv, seqs[i]);
    free(seqs), free(prompts), free(next), free(items), free(logits);
    return rc;
}

static json_t *row_json(int n, double *step, int repeats) {
    const double med = bkv_median(step, repeats); /* sorts step */
    return json_pack("{s:i,s:f,s:f,s:f,s:f}", "sequences", n, "median_ms_per_step", 1e3 * med, "min_ms_per_step",
                     1e3 * step[0], "max_ms_per_step", 1e3 * step[repeats - 1], "tokens_per_s", bkv_div(n, med));
}

json_t *measure_batch(kvlm_model *m, const bench_params *p, int B) {
    const kvlm_config *c = kvlm_model_config(m);
    kvlm_error err;
    kvlm_kv_options ko;
    kvlm_engine_options eo;
    bench_setup_options(p, &ko, &eo);
    /* B sequences of pp + tg tokens; every layer its own slice at most
     * (the pool's pages are committed only as blocks are written) */
    const int bs = ko.block_size ? ko.block_size : 16;
    ko.max_seqs = B;
    ko.n_blocks = (size_t)B * (size_t)((p->pp + p->tg + bs) / bs) * (size_t)c->n_layer;
    kvlm_kv *kv = kvlm_kv_create(m, &ko, &err);
    kvlm_engine *e = kv ? kvlm_engine_create(m, kv, &eo, &err) : NULL;
    double *s1 = calloc((size_t)p->repeats, sizeof *s1), *sb = calloc((size_t)p->repeats, sizeof *sb);
    double *r_step = calloc((size_t)p->repeats, sizeof *r_step), *r_tok = calloc((size_t)p->repeats, sizeof *r_tok);
    json_t *doc = NULL;
    if (!e || !s1 || !sb || !r_step || !r_tok) {
        fprintf(stderr, "kvlm bench: %s\n", e ? "out of memory" : err.msg);
        goto out;
    }
    double warm;
    if (round_n(e, kv, c, p->pp, 2, B, &warm)) goto out; /* pages the weights in */
    if (p->progress) fprintf(stderr, "batched decode: %d sequences vs 1, %d repeats...\n", B, p->repeats);
    for (int i = 0; i < p->repeats; i++)
        for (int k = 0; k < 2; k++) {
            const int big = (i + k) % 2; /* 1 B, B 1, ... */
            if (round_n(e, kv, c, p->pp, p->tg, big ? B : 1, big ? &sb[i] : &s1[i])) goto out;
        }
    for (int i = 0; i < p->repeats; i++) {
        r_step[i] = bkv_div(sb[i], s1[i]);
        r_tok[i] = bkv_div(B * s1[i], sb[i]);
    }
    doc = json_pack("{s:i,s:i,s:i,s:i,s:o,s:o,s:f,s:f}", "batch", B, "prompt_tokens", p->pp, "steps", p->tg,
                    "repeats", p->repeats, "one", row_json(1, s1, p->repeats), "batched",
                    row_json(B, sb, p->repeats), "step_ratio", bkv_median(r_step, p->repeats), "throughput_ratio",
                    bkv_median(r_tok, p->repeats));
out:
    free(s1), free(sb), free(r_step), free(r_tok);
    kvlm_engine_free(e);
    kvlm_kv_free(kv);
    return doc;
}
