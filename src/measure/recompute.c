/* Generation without a KV cache by truncation and recomputation (see
 * measure/recompute.h). */
#include "measure/recompute.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"

int measure_recompute_step(kvlm_engine *e, kvlm_kv *kv, int seq, const int32_t *context, int n, float *logits,
                           kvlm_error *err) {
    int rc = kvlm_kv_seq_truncate(kv, seq, 0, err);
    if (rc) return rc;
    kvlm_batch_item it = {.seq = seq, .tokens = context, .n_tokens = n, .logits_all = 0};
    return kvlm_engine_step(e, &it, 1, logits, err);
}

static int32_t argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

int measure_recompute_generate(kvlm_engine *e, kvlm_kv *kv, int seq, int vocab, const int32_t *prompt, int n_prompt,
                               int n_new, int32_t *ids, double *seconds, kvlm_error *err) {
    if (n_prompt < 1 || n_new < 1 || vocab < 1)
        return kvlm_fail(err, KVLM_ERR_ARG, "recompute: %d prompt tokens, %d new, vocab %d (each must be >= 1)",
                         n_prompt, n_new, vocab);
    int32_t *ctx = malloc(((size_t)n_prompt + (size_t)n_new) * sizeof(int32_t));
    float *logits = malloc((size_t)vocab * sizeof(float));
    int rc = ctx && logits ? KVLM_OK : kvlm_fail(err, KVLM_ERR_NOMEM, "recompute: out of memory");
    if (!rc) memcpy(ctx, prompt, (size_t)n_prompt * sizeof(int32_t));
    const double t0 = kvlm_now();
    for (int i = 0; !rc && i < n_new; i++)
        if (!(rc = measure_recompute_step(e, kv, seq, ctx, n_prompt + i, logits, err)))
            ids[i] = ctx[n_prompt + i] = argmax(logits, vocab);
    *seconds = kvlm_now() - t0;
    free(ctx);
    free(logits);
    return rc;
}
