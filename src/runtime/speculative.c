/* Speculative decoding: verification of drafted tokens, prompt-lookup and
 * draft-model drafters (see speculative.h). */
#include "runtime/speculative.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "runtime/kvcache.h"
#include "runtime/sampler.h"

int spec_verify(kvlm_sampler *s, const float *logits, int32_t draft, const float *q, float *p, int32_t *out) {
    if (!q) {
        /* A point mass: draw as plain decoding draws (one uniform, the
         * same code) and keep the draft when the draw is the draft. It is
         * kept with probability p(d), and a rejection leaves the draw
         * distributed as p without d, normalised: the residual. So the
         * tokens are plain decoding's for the same seed, whatever was
         * drafted. */
        *out = kvlm_sampler_next(s, logits);
        return *out == draft;
    }
    const int greedy = smp_probs(s, logits, p);
    const double pd = p[draft], qd = q[draft];
    /* qd > 0: draft was drawn from q. No draw when the ratio is 1 or 0, so a
     * greedy target consumes nothing from the generator. */
    const double ratio = qd > 0 ? pd / qd : 0;
    if (ratio >= 1 || (ratio > 0 && smp_uniform(s) < ratio)) {
        *out = draft;
        return 1;
    }
    const int vocab = smp_vocab(s);
    if (greedy) { /* p is a point mass elsewhere: the argmax */
        for (int i = 0; i < vocab; i++)
            if (p[i] > 0) { *out = i; return 0; }
    }
    for (int i = 0; i < vocab; i++) p[i] = p[i] > q[i] ? p[i] - q[i] : 0;
    int32_t id = smp_draw(s, p);
    if (id < 0) { /* p - q vanished in rounding (p == q): the target's own draw */
        smp_probs(s, logits, p);
        id = smp_draw(s, p);
    }
    *out = id < 0 ? draft : id;
    return 0;
}

int spec_draft_ngram(const int32_t *tokens, int n_tokens, int max_ngram, int k, int32_t *out) {
    for (int n = max_ngram < n_tokens - 1 ? max_ngram : n_tokens - 1; n >= 1; n--) {
        const int32_t *tail = tokens + n_tokens - n;
        /* the latest earlier start j with tokens[j .. j + n) == tail and at
         * least one token after it */
        for (int j = n_tokens - n - 1; j >= 0; j--) {
            if (memcmp(tokens + j, tail, (size_t)n * sizeof *tokens) != 0) continue;
            int m = 0;
            while (m < k && j + n + m < n_tokens) {
                out[m] = tokens[j + n + m];
                m++;
            }
            return m;
        }
    }
    return 0;
}

/* Draws job's next draft token from its draft chain over one logits row. */
static void draw_draft(spec_job *j, const float *row, int vocab) {
    float *q = j->q + (size_t)j->n_draft * vocab;
    smp_probs(j->dsmp, row, q);
    int32_t id = smp_draw(j->dsmp, q);
    j->draft[j->n_draft++] = id < 0 ? 0 : id;
}

int spec_draft_model(kvlm_engine *de, kvlm_kv *dkv, int vocab, spec_job *jobs, int n, kvlm_error *err) {
    const int dctx = kv_n_ctx(dkv);
    kvlm_batch_item *items = malloc((size_t)(n > 0 ? n : 1) * sizeof *items);
    int *who = malloc((size_t)(n > 0 ? n : 1) * sizeof *who);
    float *logits = malloc((size_t)(n > 0 ? n : 1) * vocab * sizeof *logits);
    int rc = items && who && logits ? KVLM_OK : kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    int kmax = 0;
    for (int i = 0; i < n; i++) {
        spec_job *j = &jobs[i];
        j->n_draft = 0;
        /* positions n_tokens .. n_tokens + k - 2 are written */
        if (j->k > dctx - j->n_tokens) j->k = dctx - j->n_tokens;
        if (rc || j->k <= 0) continue;
        if (*j->dseq < 0) {
            int cached = 0;
            kvlm_error e2;
            *j->dseq = kvlm_kv_seq_new_prefixed(dkv, j->tokens, j->n_tokens, &cached, &e2);
            *j->dlen = *j->dseq < 0 ? 0 : cached;
        }
        if (*j->dseq < 0) { j->k = 0; continue; }
        /* at least the last token is fed, for the row that drafts */
        if (*j->dlen >= j->n_tokens) {
            kvlm_error e2;
            if (kvlm_kv_seq_truncate(dkv, *j->dseq, j->n_tokens - 1, &e2)) {
                kvlm_kv_seq_free(dkv, *j->dseq);
                *j->dseq = -1;
                *j->dlen = 0;
                j->k = 0;
                continue;
            }
            *j->dlen = j->n_tokens - 1;
        }
        if (j->k > kmax) kmax = j->k;
    }
    for (int r = 0; !rc && r < kmax; r++) {
        int m = 0;
        for (int i = 0; i < n; i++) {
            spec_job *j = &jobs[i];
            if (j->k <= r || *j->dseq < 0 || j->n_draft != r) continue;
            if (r == 0)
                items[m] = (kvlm_batch_item){*j->dseq, j->tokens + *j->dlen, j->n_tokens - *j->dlen, 0};
            else
                items[m] = (kvlm_batch_item){*j->dseq, &j->draft[r - 1], 1, 0};
            who[m++] = i;
        }
        if (m == 0) break;
        rc = kvlm_engine_step(de, items, m, logits, err);
        if (rc) break;
        for (int t = 0; t < m; t++) {
            spec_job *j = &jobs[who[t]];
            *j->dlen += items[t].n_tokens;
            draw_draft(j, logits + (size_t)t * vocab, vocab);
        }
    }
    free(items);
    free(who);
    free(logits);
    return rc;
}
