/*
 * Embeddings (kvlm_embed): token sequences through the model to their
 * final-normed hidden states (runtime/engine_hidden.h), pooled per input
 * (mean, first token, last token, or every token) and L2-normalised.
 *
 * Each input is a KV sequence of its own, created for the step and freed
 * right after it, so attention stays causal within an input and never
 * reads another's keys; as many inputs as fit the token budget, the free
 * sequence slots and the free blocks share one engine step. The blocks
 * of sequences other callers hold are never touched (only free and
 * evictable prefix-cache blocks are taken), so this may run between two
 * scheduler steps on the scheduler's own engine and cache. Pooling and
 * the norm are computed in double precision, the vectors stored as float.
 *
 * Does not: run encoder (bidirectional) models, reuse cached prefixes
 * (every token's state is computed, as mean pooling needs them all), or
 * keep anything between calls.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "runtime/engine_hidden.h"

#define DEFAULT_BATCH_TOKENS 512

kvlm_embed_params kvlm_embed_default_params(void) {
    return (kvlm_embed_params){.pooling = KVLM_POOLING_UNSPECIFIED, .raw = 0, .max_batch_tokens = 0};
}

/* The pooling p asks for, or the model's; -1 when neither is computable. */
static int resolve(const kvlm_engine *e, const kvlm_embed_params *p, const char **src) {
    *src = "the request";
    if (p->pooling != KVLM_POOLING_UNSPECIFIED) return p->pooling;
    return kvlm_model_pooling(engine_model(e), src);
}

size_t kvlm_embed_size(const kvlm_engine *e, const int *n_tokens, int n_inputs, const kvlm_embed_params *p) {
    const kvlm_embed_params d = p ? *p : kvlm_embed_default_params();
    const char *src;
    const int pool = resolve(e, &d, &src);
    const size_t C = (size_t)kvlm_model_config(engine_model(e))->n_embd;
    if (pool < KVLM_POOLING_NONE || pool > KVLM_POOLING_LAST || n_inputs < 0) return 0;
    if (pool != KVLM_POOLING_NONE) return (size_t)n_inputs * C;
    size_t rows = 0;
    for (int i = 0; i < n_inputs; i++) {
        if (n_tokens[i] < 0) return 0;
        rows += (size_t)n_tokens[i];
    }
    return rows * C;
}

static int check(const kvlm_engine *e, const int32_t *const *inputs, const int *n_tokens, int n_inputs,
                 const kvlm_embed_params *p, int *pool, kvlm_error *err) {
    const kvlm_config *c = kvlm_model_config(engine_model(e));
    if ((int)p->pooling < KVLM_POOLING_UNSPECIFIED || (int)p->pooling > KVLM_POOLING_LAST)
        return kvlm_error_set(err, KVLM_ERR_ARG, "embed params: pooling %d is not a kvlm_pooling", (int)p->pooling);
    if (p->raw != 0 && p->raw != 1)
        return kvlm_error_set(err, KVLM_ERR_ARG, "embed params: raw %d is neither 0 nor 1", p->raw);
    if (p->max_batch_tokens < 0)
        return kvlm_error_set(err, KVLM_ERR_ARG, "embed params: max_batch_tokens %d is negative", p->max_batch_tokens);
    const char *src;
    *pool = resolve(e, p, &src);
    if (*pool < 0)
        return kvlm_error_set(err, KVLM_ERR_ARG,
                              "the model's files name a pooling kvlm does not compute (%s); choose mean, cls or last",
                              src);
    if (n_inputs < 1 || !inputs || !n_tokens)
        return kvlm_error_set(err, KVLM_ERR_ARG, "embed: %d inputs, need at least 1", n_inputs);
    for (int i = 0; i < n_inputs; i++) {
        if (n_tokens[i] < 1 || !inputs[i])
            return kvlm_error_set(err, KVLM_ERR_ARG, "embed: input %d is empty; it needs at least 1 token", i);
        if (n_tokens[i] > c->n_ctx)
            return kvlm_error_set(err, KVLM_ERR_ARG, "embed: input %d has %d tokens; the context window is %d", i,
                                  n_tokens[i], c->n_ctx);
        for (int j = 0; j < n_tokens[i]; j++)
            if (inputs[i][j] < 0 || inputs[i][j] >= c->vocab_size)
                return kvlm_error_set(err, KVLM_ERR_ARG, "embed: input %d, token %d: id %d is outside the vocabulary [0, %d)",
                                      i, j, inputs[i][j], c->vocab_size);
    }
    return KVLM_OK;
}

/* Dimension i of the pooled vector of rows h (n x C), in double. */
static double pooled(const float *h, int n, int C, int pool, int i) {
    if (pool == KVLM_POOLING_CLS) return h[i];
    if (pool == KVLM_POOLING_LAST) return h[(size_t)(n - 1) * C + i];
    double v = 0;
    for (int t = 0; t < n; t++) v += h[(size_t)t * C + i];
    return v / n;
}

/* Pools an input's rows h (n x C) into out (C floats; n x C for none),
 * scaled to norm 1 unless raw. */
static void pool_rows(const float *h, int n, int C, int pool, int raw, float *out) {
    if (pool == KVLM_POOLING_NONE) {
        for (int t = 0; t < n; t++) pool_rows(h + (size_t)t * C, 1, C, KVLM_POOLING_CLS, raw, out + (size_t)t * C);
        return;
    }
    double ss = 0;
    for (int i = 0; i < C; i++) {
        const double v = pooled(h, n, C, pool, i);
        ss += v * v;
    }
    const double s = raw || !(ss > 0) ? 1.0 : 1.0 / sqrt(ss);
    for (int i = 0; i < C; i++) out[i] = (float)(pooled(h, n, C, pool, i) * s);
}

int kvlm_embed(kvlm_engine *e, const int32_t *const *inputs, const int *n_tokens, int n_inputs,
               const kvlm_embed_params *p, float *out, size_t cap, kvlm_error *err) {
    const kvlm_embed_params prm = p ? *p : kvlm_embed_default_params();
    int pool = -1, rc;
    if ((rc = check(e, inputs, n_tokens, n_inputs, &prm, &pool, err))) return rc;
    const size_t need = kvlm_embed_size(e, n_tokens, n_inputs, &prm);
    if (!out || cap < need)
        return kvlm_error_set(err, KVLM_ERR_ARG, "embed: the output holds %zu floats; these inputs need %zu", out ? cap : 0,
                              need);
    const int C = kvlm_model_config(engine_model(e))->n_embd;
    const int budget = prm.max_batch_tokens ? prm.max_batch_tokens : DEFAULT_BATCH_TOKENS;
    int longest = 0;
    for (int i = 0; i < n_inputs; i++)
        if (n_tokens[i] > longest) longest = n_tokens[i];
    const int rows = longest > budget ? longest : budget;
    kvlm_kv *kv = engine_kv(e);
    float *hidden = malloc((size_t)rows * C * sizeof *hidden);
    kvlm_batch_item *items = malloc((size_t)n_inputs * sizeof *items);
    if (!hidden || !items) {
        free(hidden);
        free(items);
        return kvlm_error_set(err, KVLM_ERR_NOMEM, "embed: out of memory for %d rows of %d floats", rows, C);
    }
    size_t at = 0; /* floats of out written */
    for (int i = 0; i < n_inputs && !rc;) {
        int g = 0, tokens = 0;
        size_t blocks = 0;
        while (i + g < n_inputs) {
            const int n = n_tokens[i + g];
            if (g > 0 && tokens + n > budget) break;
            kvlm_error lerr;
            const int seq = kvlm_kv_seq_new(kv, &lerr);
            if (seq < 0) {
                if (!g) rc = kvlm_error_set(err, lerr.code, "embed: input %d: %s", i, lerr.msg);
                break;
            }
            const size_t more = kvlm_kv_blocks_needed(kv, seq, n);
            if (blocks + more > kvlm_kv_available_blocks(kv)) {
                kvlm_kv_seq_free(kv, seq);
                if (!g)
                    rc = kvlm_error_set(err, KVLM_ERR_NOMEM, "embed: input %d needs %zu KV blocks; %zu are free now", i,
                                        more, kvlm_kv_available_blocks(kv));
                break;
            }
            items[g] = (kvlm_batch_item){.seq = seq, .tokens = inputs[i + g], .n_tokens = n, .logits_all = -1};
            g++;
            blocks += more;
            tokens += n;
        }
        if (rc) break;
        rc = engine_step_hidden(e, items, g, hidden, err);
        for (int k = 0; k < g; k++) kvlm_kv_seq_free(kv, items[k].seq);
        size_t row = 0;
        for (int k = 0; !rc && k < g; k++) {
            pool_rows(hidden + row * C, items[k].n_tokens, C, pool, prm.raw, out + at);
            row += (size_t)items[k].n_tokens;
            at += pool == KVLM_POOLING_NONE ? (size_t)items[k].n_tokens * C : (size_t)C;
        }
        i += g;
    }
    free(hidden);
    free(items);
    return rc;
}
