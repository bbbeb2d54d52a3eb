/* One request on a one-request scheduler, with what its events report (see generate.h). */
#include "cli/generate.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kvlm_tokenizer.h"

typedef struct gen_ctx {
    const gen_request *rq;
    gen_result *r;
    const kvlm_kv *kv;
    int cap;            /* ids the result has room for */
    int prefill_only;   /* max_new 0: the one token drawn is not kept */
    int nomem;
    size_t text_cap;
    double t_first;     /* kvlm_now() at the first token, 0 before */
} gen_ctx;

static void add_text(gen_ctx *g, const char *b, size_t n, float logprob) {
    gen_result *r = g->r;
    if (g->rq->on_text && n) g->rq->on_text(g->rq->user, b, n, logprob);
    else if (g->rq->stream && n) {
        fwrite(b, 1, n, g->rq->stream);
        fflush(g->rq->stream);
    }
    if (r->text_len + n + 1 > g->text_cap) {
        size_t cap = g->text_cap ? g->text_cap : 256;
        while (cap < r->text_len + n + 1) cap *= 2;
        char *t = realloc(r->text, cap);
        if (!t) {
            g->nomem = 1;
            return;
        }
        r->text = t;
        g->text_cap = cap;
    }
    memcpy(r->text + r->text_len, b, n);
    r->text_len += n;
    r->text[r->text_len] = 0;
}

static int on_token(void *user, const kvlm_token_event *ev) {
    gen_ctx *g = user;
    gen_result *r = g->r;
    if (g->t_first == 0) g->t_first = kvlm_now();
    /* the sequence still holds the whole context but this token */
    kvlm_kv_get_stats(g->kv, &r->kv);
    if (g->prefill_only) return 1;
    const int k = g->rq->logprobs, i = r->n_ids;
    if (i >= g->cap) return 1; /* cannot happen: max_tokens is the capacity */
    r->ids[i] = ev->id;
    if (k != 0) r->chosen_lp[i] = ev->logprob;
    if (k > 0) {
        for (int a = 0; a < k; a++) {
            r->lp_ids[(size_t)i * k + a] = a < ev->top_n ? ev->top_ids[a] : -1;
            r->lp_vals[(size_t)i * k + a] = a < ev->top_n ? ev->top_logprobs[a] : 0;
        }
    }
    r->n_ids++;
    if (!g->rq->text) return 0;
    const char *text = ev->text;
    size_t n = ev->text_len;
    if (!n && g->rq->special_text && g->rq->tok && kvlm_tokenizer_is_special(g->rq->tok, ev->id)) {
        size_t pn = 0;
        const char *p = kvlm_tokenizer_piece(g->rq->tok, ev->id, &pn);
        if (p && g->rq->special_text(p, pn)) text = p, n = pn;
    }
    add_text(g, text, n, k != 0 ? ev->logprob : NAN);
    return 0;
}

static void on_admit(void *user, int n_cached) { ((gen_ctx *)user)->r->cached = n_cached; }

static void on_finish(void *user, const kvlm_finish_event *ev) {
    gen_ctx *g = user;
    g->r->finish = ev->reason;
    g->r->drafted = ev->n_drafted;
    g->r->accepted = ev->n_accepted;
    if (g->rq->text && !g->prefill_only) add_text(g, ev->text, ev->text_len, NAN);
}

int gen_run(kvlm_engine *e, kvlm_kv *kv, int vocab, const gen_request *rq, gen_result *r, kvlm_error *err) {
    memset(r, 0, sizeof *r);
    if (rq->max_new < 0 || rq->n_prompt < 1)
        return kvlm_error_set(err, KVLM_ERR_ARG, "generate: %d prompt tokens, %d to generate", rq->n_prompt,
                             rq->max_new);
    gen_ctx g = {.rq = rq, .r = r, .kv = kv, .prefill_only = rq->max_new == 0};
    g.cap = rq->max_new > 0 ? rq->max_new : 1;
    const int k = rq->logprobs;
    r->ids = malloc((size_t)g.cap * sizeof(int32_t));
    r->chosen_lp = malloc((size_t)g.cap * sizeof(float));
    if (k > 0) {
        r->lp_ids = malloc((size_t)g.cap * k * sizeof(int32_t));
        r->lp_vals = malloc((size_t)g.cap * k * sizeof(float));
    }
    if (!r->ids || !r->chosen_lp || (k > 0 && (!r->lp_ids || !r->lp_vals)))
        return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    if (rq->text) add_text(&g, "", 0, NAN);
    /* The whole context fits one step: the prompt is prefilled at once,
     * and under recompute every step holds the whole context. */
    kvlm_sched_options so = kvlm_sched_default_params();
    so.max_batch_tokens = rq->n_prompt + g.cap;
    so.max_waiting = 1;
    so.recompute = rq->recompute;
    kvlm_sched *s = kvlm_sched_create(e, kv, vocab, &so, err);
    if (!s) return err->code;
    if (draft_attach(rq->draft, s, err)) {
        kvlm_sched_free(s);
        return err->code;
    }
    kvlm_request_params p = kvlm_request_default_params();
    p.prompt = rq->prompt;
    p.n_prompt = rq->n_prompt;
    p.max_tokens = g.cap;
    p.eos_ids = rq->eos_ids;
    p.n_eos = rq->n_eos;
    p.logprobs = k;
    p.sampling = rq->sampling;
    p.text = rq->text && !g.prefill_only;
    p.tokenizer = rq->tok;
    p.stops = rq->stops;
    p.n_stops = rq->n_stops;
    p.on_token = on_token;
    p.on_finish = on_finish;
    p.on_admit = on_admit;
    p.user = &g;
    p.grammar = rq->grammar;
    p.speculation = rq->speculation;
    int rc = 0;
    const double t_submit = kvlm_now();
    const int64_t id = kvlm_sched_submit(s, &p, err);
    if (id < 0) rc = err->code;
    double t_start = 0;
    while (!rc && kvlm_sched_has_work(s)) {
        if (rq->interrupt && *rq->interrupt) {
            kvlm_sched_cancel(s, id); /* finishes it with what it has generated */
            break;
        }
        const double t0 = kvlm_now();
        const int had_first = g.t_first != 0;
        const int n = kvlm_sched_step(s, err);
        const double t1 = kvlm_now();
        if (n < 0) {
            rc = n;
            break;
        }
        if (t_start == 0) t_start = t0;
        if (!had_first && g.t_first != 0) {
            r->prefill_s = t1 - t_start;
            r->ttft_s = g.t_first - t_submit;
        } else if (had_first && n > 0) {
            r->decode_s += t1 - t0;
            r->decode_steps++;
        }
    }
    kvlm_sched_free(s);
    if (!rc && r->finish == KVLM_FINISH_ERROR)
        rc = kvlm_error_set(err, KVLM_ERR_NOMEM, "generate: the request does not fit the KV cache, or memory ran out");
    if (!rc && g.nomem) rc = kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    return rc;
}

void gen_result_free(gen_result *r) {
    free(r->ids);
    free(r->lp_ids);
    free(r->lp_vals);
    free(r->chosen_lp);
    free(r->text);
    memset(r, 0, sizeof *r);
}

const char *gen_finish_name(kvlm_finish f) {
    switch (f) {
    case KVLM_FINISH_STOP: return "stop";
    case KVLM_FINISH_LENGTH: return "length";
    case KVLM_FINISH_TIMEOUT: return "timeout";
    case KVLM_FINISH_CANCELLED: return "cancelled";
    default: return "error";
    }
}
