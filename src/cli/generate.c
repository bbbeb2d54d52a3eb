/* Prefill + decode loop with per-phase timing (see generate.h). */
#include "cli/generate.h"

#include <stdlib.h>
#include <string.h>

/* Returns non-zero when the callback asks to stop. */
static int record(const gen_request *rq, gen_result *r, kvlm_sampler *smp, const float *logits, int vocab,
                  int32_t id) {
    r->ids[r->n_ids] = id;
    if (rq->logprobs_k > 0) {
        kvlm_top_logprobs(logits, vocab, rq->logprobs_k, r->lp_ids + (size_t)r->n_ids * rq->logprobs_k,
                          r->lp_vals + (size_t)r->n_ids * rq->logprobs_k);
        r->chosen_lp[r->n_ids] = kvlm_token_logprob(logits, vocab, id);
    }
    r->n_ids++;
    kvlm_sampler_accept(smp, &id, 1);
    return rq->on_token && (r->stopped_callback = rq->on_token(id, rq->ctx));
}

int gen_run(kvlm_engine *e, int seq, kvlm_sampler *smp, int vocab, int eos_id,
            const gen_request *rq, gen_result *r, kvlm_error *err) {
    memset(r, 0, sizeof *r);
    int cap = rq->max_new > 0 ? rq->max_new : 1, k = rq->logprobs_k;
    r->ids = malloc((size_t)cap * sizeof(int32_t));
    r->chosen_lp = malloc((size_t)cap * sizeof(float));
    if (k > 0) {
        r->lp_ids = malloc((size_t)cap * k * sizeof(int32_t));
        r->lp_vals = malloc((size_t)cap * k * sizeof(float));
    }
    float *logits = malloc((size_t)vocab * sizeof(float));
    if (!r->ids || !r->chosen_lp || !logits || (k > 0 && (!r->lp_ids || !r->lp_vals))) {
        free(logits);
        return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    }
    int rc;
    double t0 = kvlm_now();
    kvlm_batch_item it = {.seq = seq, .tokens = rq->prompt, .n_tokens = rq->n_prompt};
    if ((rc = kvlm_engine_step(e, &it, 1, logits, err))) goto done;
    r->prefill_s = kvlm_now() - t0;
    kvlm_sampler_accept(smp, rq->prompt, rq->n_prompt);
    if (rq->max_new <= 0) {
        r->ttft_s = r->prefill_s;
        goto done;
    }
    int32_t tok = kvlm_sampler_next(smp, logits);
    int stop = record(rq, r, smp, logits, vocab, tok);
    r->ttft_s = kvlm_now() - t0;
    double t1 = kvlm_now();
    while (!stop && r->n_ids < rq->max_new && !(rq->stop_at_eos && tok == eos_id)) {
        it = (kvlm_batch_item){.seq = seq, .tokens = &tok, .n_tokens = 1};
        if ((rc = kvlm_engine_step(e, &it, 1, logits, err))) goto done;
        tok = kvlm_sampler_next(smp, logits);
        stop = record(rq, r, smp, logits, vocab, tok);
        r->decode_steps++;
    }
    r->decode_s = kvlm_now() - t1;
    r->stopped_eos = rq->stop_at_eos && tok == eos_id;
done:
    free(logits);
    return rc;
}

void gen_result_free(gen_result *r) {
    free(r->ids);
    free(r->lp_ids);
    free(r->lp_vals);
    free(r->chosen_lp);
    memset(r, 0, sizeof *r);
}
