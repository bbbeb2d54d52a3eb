/*
 * Continuous batching (see kvlm.h for the contract).
 *
 * Every choice of a request is a sequence of tokens (prompt + generated)
 * of which the first n_computed have K/V in the cache. A step feeds each
 * running choice its next uncomputed tokens: one for a decoding choice, a
 * chunk for one that is prefilling (or recomputing after preemption), all
 * within the per-step token budget, decoding choices first so long prompts
 * never stall running streams; prefill chunks and admissions also stay
 * within the prefill budget (max_prefill_tokens), which decodes do not
 * use, so arrivals are fed a few per step. A choice whose tokens are all
 * computed after the step samples its next token. One rule covers
 * prefill, decode and recomputation.
 *
 * Admission is FIFO from the waiting queue while the KV pool has blocks for
 * the choice's tokens. Before each step the blocks the plan needs are
 * counted; while they exceed what the pool can give, the most recently
 * admitted running choice is preempted: its blocks are released and it
 * goes back to the front of the queue with its tokens and sampler intact,
 * to be recomputed (prefix-cache hits make that cheap).
 *
 * Choices after the first of an n > 1 request wait until the first has
 * computed the prompt, then fork its blocks and sample from the same
 * logits with their own seeds.
 *
 * A token is chosen in one place, dec_token (runtime/decide.c), for a
 * plain decode step and for every verified draft alike: the choice's
 * grammar masks the row, the sampler draws (or verifies a draft against
 * the masked row), and the token is emitted: added to the penalty history,
 * its log-probabilities taken, its text released through the choice's
 * kvlm_text_stream (stop strings, UTF-8), the grammar matcher advanced by
 * its bytes. It returns why the choice ends: an eos id or a completed stop
 * string with STOP, max_tokens or the context window with LENGTH, a
 * complete grammar with STOP; the scheduler then ends it (finish).
 * on_token sees every token, the ending one included; on_finish gets the
 * text still held back. A request with a grammar gives each choice a
 * matcher; preemption keeps it, as it keeps the tokens.
 *
 * Under the recompute policy a choice keeps no KV between tokens: before a
 * step, one that has drawn a token since its KV was last dropped is
 * truncated to 0 and computes its whole context again (in chunks under the
 * budget, like a prefill), which is what the cache saves.
 *
 * Speculative decoding (runtime/speculative.h): before planning, each
 * decoding choice of a request that asks for it gets up to k drafted
 * tokens (prompt lookup over its own tokens, or the draft model, whose
 * steps are batched across choices); the plan gives it 1 + drafts rows
 * and logits for each; after the step each row goes through dec_token in
 * order (verifying draft j against row j, masked by the grammar as it
 * stands after the drafts kept before it; the row after the last kept
 * draft draws), and the cache is truncated back to the tokens kept. So a
 * batch can hold drafted and plain decodes and prefills together, and a
 * grammar holds with speculation as without. Unless a request asks for
 * fixed speculation, each choice drafts only when its adaptive policy
 * (runtime/spec_policy.h) says drafting pays, from the choice's own
 * observations and the step times measured here (steps of decodes only,
 * by rows). Drafts never cost a request its place: a plan that does not
 * fit the pool drops them before preempting anyone.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "runtime/constrain.h"
#include "runtime/decide.h"
#include "runtime/kvcache.h"
#include "runtime/sched_choice.h"
#include "runtime/sched_view.h"
#include "runtime/spec_policy.h"
#include "runtime/speculative.h"

struct kvlm_sched {
    kvlm_engine *e;
    kvlm_kv *kv;
    int vocab;
    kvlm_sched_options o;
    sched_req **reqs;
    int n_reqs, cap_reqs;
    sched_choice **wait, **run;
    int n_wait, n_run, cap_choices;
    int n_live;            /* choices not finished, in a list or waiting to fork */
    kvlm_batch_item *items;
    sched_choice **item_choice;
    float *logits;
    dec_ctx dec;           /* the token decision's sizes and scratch rows */
    cst_tries tries;       /* vocabulary tries of grammar requests */
    uint64_t admit_counter;
    int64_t next_id;
    kvlm_sched_stats st;
    size_t logits_cap;     /* floats s->logits holds */
    kvlm_engine *draft_e;  /* the draft model (kvlm_sched_set_draft), NULL: none */
    kvlm_kv *draft_kv;
    spec_job *jobs;        /* one draft-model job per running choice */
    sched_choice **job_choice;
    /* the adaptive speculation policy (runtime/spec_policy.h) */
    spec_policy_params pp;
    spec_costs costs;      /* engine step times by rows, measured here */
    double cost[SPEC_MAX_K + 1]; /* scratch: a choice's cost of n drafts */
    int step_rows, step_draws; /* the last step: its rows, and the items that drew a token */
    int costs_pinned;      /* sched_pin_costs: the table is given, not measured */
};

void sched_pin_costs(kvlm_sched *s, const spec_costs *c) {
    if (c) s->costs = *c;
    else memset(&s->costs, 0, sizeof s->costs);
    s->costs_pinned = c != NULL;
}

kvlm_sched *kvlm_sched_create(kvlm_engine *e, kvlm_kv *kv, int vocab, const kvlm_sched_options *opt,
                              kvlm_error *err) {
    if (!e || !kv || vocab < 1) {
        kvlm_error_set(err, KVLM_ERR_ARG, "kvlm_sched_create: engine, KV cache and a vocabulary of at least 1 are needed");
        return NULL;
    }
    kvlm_sched *s = calloc(1, sizeof *s);
    if (!s) { kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory"); return NULL; }
    s->e = e;
    s->kv = kv;
    s->vocab = vocab;
    s->o = opt ? *opt : kvlm_sched_default_params();
    s->pp = spec_policy_defaults();
    if (s->o.max_batch_tokens <= 0) s->o.max_batch_tokens = 256;
    if (s->o.max_waiting <= 0) s->o.max_waiting = 256;
    const int m = kv_max_seqs(kv);
    s->items = malloc((size_t)m * sizeof *s->items);
    s->item_choice = malloc((size_t)m * sizeof *s->item_choice);
    s->logits_cap = (size_t)m * vocab;
    s->logits = malloc(s->logits_cap * sizeof(float));
    s->dec = (dec_ctx){.vocab = vocab, .n_ctx = kv_n_ctx(kv), .recompute = s->o.recompute,
                       .top_ids = malloc(100 * sizeof(int32_t)), .top_lps = malloc(100 * sizeof(float)), .st = &s->st};
    if (!s->items || !s->item_choice || !s->logits || !s->dec.top_ids || !s->dec.top_lps) {
        kvlm_sched_free(s);
        kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
        return NULL;
    }
    return s;
}

static void free_req(kvlm_sched *s, sched_req *r) {
    for (int i = 0; i < r->p.n_choices; i++) {
        gr_matcher_free(r->choices[i].gm);
        cst_trie_release(&s->tries, r->choices[i].trie);
        free(r->choices[i].tokens);
        kvlm_sampler_free(r->choices[i].smp);
        kvlm_text_stream_free(r->choices[i].text);
        kvlm_sampler_free(r->choices[i].dsmp);
        free(r->choices[i].q);
    }
    free(r->choices);
    free((void *)r->p.prompt);
    free((void *)r->p.eos_ids);
    free(r);
}

void kvlm_sched_free(kvlm_sched *s) {
    if (!s) return;
    for (int i = 0; i < s->n_reqs; i++) free_req(s, s->reqs[i]);
    cst_tries_free(&s->tries);
    free(s->dec.masked);
    free(s->dec.mask_bits);
    free(s->dec.p);
    free(s->dec.top_ids);
    free(s->dec.top_lps);
    free(s->reqs);
    free(s->wait);
    free(s->run);
    free(s->items);
    free(s->item_choice);
    free(s->logits);
    free(s->jobs);
    free(s->job_choice);
    free(s);
}

int kvlm_sched_set_draft(kvlm_sched *s, kvlm_engine *draft, kvlm_kv *draft_kv, int draft_vocab, kvlm_error *err) {
    if (!draft || !draft_kv)
        return kvlm_error_set(err, KVLM_ERR_ARG, "a draft model needs its engine and KV cache");
    if (draft_vocab != s->vocab)
        return kvlm_error_set(err, KVLM_ERR_ARG, "the draft model's vocabulary has %d tokens, the target's %d: "
                              "they must share one tokenizer", draft_vocab, s->vocab);
    if (kv_max_seqs(draft_kv) < kv_max_seqs(s->kv))
        return kvlm_error_set(err, KVLM_ERR_ARG, "the draft KV cache holds %d sequences, the target's %d",
                              kv_max_seqs(draft_kv), kv_max_seqs(s->kv));
    const int m = kv_max_seqs(s->kv);
    spec_job *jobs = malloc((size_t)m * sizeof *jobs);
    sched_choice **jc = malloc((size_t)m * sizeof *jc);
    if (!jobs || !jc) {
        free(jobs);
        free(jc);
        return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    }
    free(s->jobs);
    free(s->job_choice);
    s->jobs = jobs;
    s->job_choice = jc;
    s->draft_e = draft;
    s->draft_kv = draft_kv;
    return KVLM_OK;
}

/* Checks a request's speculation and fills in its defaults. */
static int check_speculation(kvlm_sched *s, const kvlm_request_params *p, kvlm_speculation *sp, kvlm_error *err) {
    *sp = p->speculation;
    if (sp->mode == KVLM_DRAFT_NONE) return KVLM_OK;
    if (sp->mode != KVLM_DRAFT_NGRAM && sp->mode != KVLM_DRAFT_MODEL)
        return kvlm_error_set(err, KVLM_ERR_ARG, "speculation: unknown draft mode %d", (int)sp->mode);
    if (sp->k < 0 || sp->k > SPEC_MAX_K || sp->ngram < 0 || sp->ngram > SPEC_MAX_NGRAM)
        return kvlm_error_set(err, KVLM_ERR_ARG, "speculation: k %d (1..%d), ngram %d (1..%d)", sp->k, SPEC_MAX_K,
                              sp->ngram, SPEC_MAX_NGRAM);
    if (s->o.recompute)
        return kvlm_error_set(err, KVLM_ERR_UNSUPPORTED, "speculative decoding needs the KV cache (not with recompute)");
    if (sp->mode == KVLM_DRAFT_MODEL && !s->draft_e)
        return kvlm_error_set(err, KVLM_ERR_ARG, "speculation: no draft model is loaded");
    if (!s->dec.p && !(s->dec.p = malloc((size_t)s->vocab * sizeof *s->dec.p)))
        return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    if (sp->k == 0) sp->k = 4;
    if (sp->ngram == 0) sp->ngram = 3;
    return KVLM_OK;
}

/* The draft model's chain for a choice: the request's temperature, bias and
 * filters without the penalties (which would need the draft's history), on a
 * generator of its own. */
static int draft_chain(kvlm_sched *s, sched_choice *c, const kvlm_sampler_options *so, int k, kvlm_error *err) {
    kvlm_sampler_options d = *so;
    d.repetition_penalty = 1;
    d.frequency_penalty = 0;
    d.presence_penalty = 0;
    d.seed = so->seed ^ 0x9e3779b97f4a7c15ull;
    c->q = malloc((size_t)k * s->vocab * sizeof *c->q);
    if (!c->q) return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    c->dsmp = kvlm_sampler_create(&d, s->vocab, err);
    return c->dsmp ? KVLM_OK : err->code;
}

/* Both lists can hold every live choice: choices waiting to fork are in
 * neither list yet but join one later. cap_choices is only raised once
 * both lists have grown, so a failure leaves it true of both. */
static int grow_lists(kvlm_sched *s, int extra) {
    if (s->n_live + extra <= s->cap_choices) return 0;
    int cap = 2 * (s->n_live + extra);
    sched_choice **w = realloc(s->wait, (size_t)cap * sizeof *w);
    if (!w) return -1;
    s->wait = w;
    sched_choice **r = realloc(s->run, (size_t)cap * sizeof *r);
    if (!r) return -1;
    s->run = r;
    s->cap_choices = cap;
    return 0;
}

/* Room for one more request; on failure the old array and its requests
 * stay as they were. */
static int grow_reqs(kvlm_sched *s) {
    if (s->n_reqs < s->cap_reqs) return 0;
    int cap = 2 * s->cap_reqs + 8;
    sched_req **r = realloc(s->reqs, (size_t)cap * sizeof *r);
    if (!r) return -1;
    s->reqs = r;
    s->cap_reqs = cap;
    return 0;
}

/* Refuses a grammar request whose budget cannot hold the grammar's
 * shortest sentence, counted one token per byte (what decide.c's closing
 * guarantees): max_tokens or the context window after the prompt. */
static int close_refused(const gr_matcher *gm, const kvlm_request_params *p, int n_ctx, kvlm_error *err) {
    const int need = gr_matcher_min_close(gm), room = n_ctx - p->n_prompt;
    if (need >= GR_NO_CLOSE)
        return kvlm_error_set(err, KVLM_ERR_ARG, "the grammar accepts no finite output");
    if (need > p->max_tokens)
        return kvlm_error_set(err, KVLM_ERR_ARG,
                              "max_tokens %d is below the shortest output the grammar accepts: %d bytes, so max_tokens "
                              "must be at least %d (one token per byte)", p->max_tokens, need, need);
    if (need > room)
        return kvlm_error_set(err, KVLM_ERR_ARG,
                              "the context window leaves %d tokens after the prompt, below the %d the grammar's shortest "
                              "output needs (one token per byte)", room, need);
    return 0;
}

int64_t kvlm_sched_submit(kvlm_sched *s, const kvlm_request_params *p, kvlm_error *err) {
    const int n_ctx = kv_n_ctx(s->kv), nc = p->n_choices ? p->n_choices : 1;
    if (p->n_prompt < 1 || p->n_prompt >= n_ctx)
        return kvlm_error_set(err, KVLM_ERR_ARG, "prompt of %d tokens: must be 1 to %d (context window %d)", p->n_prompt,
                              n_ctx - 1, n_ctx);
    for (int i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= s->vocab)
            return kvlm_error_set(err, KVLM_ERR_ARG, "token id %d is outside the vocabulary [0, %d)", p->prompt[i], s->vocab);
    if (p->max_tokens < 1 || nc < 1 || nc > kv_max_seqs(s->kv) || nc > 64 || p->logprobs < -1 || p->logprobs > 100)
        return kvlm_error_set(err, KVLM_ERR_ARG, "max_tokens %d (>= 1), n %d (1..%d), logprobs %d (-1..100)", p->max_tokens,
                              nc, kv_max_seqs(s->kv), p->logprobs);
    if (p->n_eos < 0 || p->n_eos > 1024 || (p->n_eos > 0 && !p->eos_ids) || p->n_stops < 0 ||
        (p->n_stops > 0 && (!p->stops || !p->text)))
        return kvlm_error_set(err, KVLM_ERR_ARG, "n_eos %d (0..1024, with eos_ids), n_stops %d (with stops and text)",
                              p->n_eos, p->n_stops);
    if (p->grammar && !p->tokenizer)
        return kvlm_error_set(err, KVLM_ERR_ARG, "a grammar needs the request's tokenizer (the bytes of each token)");
    kvlm_speculation spec;
    int src = check_speculation(s, p, &spec, err);
    if (src) return src;
    if (p->grammar && !s->dec.masked) {
        s->dec.masked = malloc((size_t)s->vocab * sizeof *s->dec.masked);
        s->dec.mask_bits = malloc(((size_t)s->vocab + 63) / 64 * sizeof *s->dec.mask_bits);
        if (!s->dec.masked || !s->dec.mask_bits) {
            free(s->dec.masked);
            free(s->dec.mask_bits);
            s->dec.masked = NULL;
            s->dec.mask_bits = NULL;
            return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
        }
    }
    if (s->n_wait >= s->o.max_waiting)
        return kvlm_error_set(err, KVLM_ERR_BUSY, "the waiting queue is full (%d requests)", s->o.max_waiting);
    sched_req *r = calloc(1, sizeof *r);
    int32_t *prompt = malloc((size_t)p->n_prompt * sizeof(int32_t));
    int32_t *eos = p->n_eos > 0 ? malloc((size_t)p->n_eos * sizeof(int32_t)) : NULL;
    if (!r || !prompt || (p->n_eos > 0 && !eos) || grow_lists(s, nc) || grow_reqs(s)) {
        free(r);
        free(prompt);
        free(eos);
        return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    }
    memcpy(prompt, p->prompt, (size_t)p->n_prompt * sizeof(int32_t));
    if (eos) memcpy(eos, p->eos_ids, (size_t)p->n_eos * sizeof(int32_t));
    r->p = *p;
    r->p.prompt = prompt;
    r->p.eos_ids = eos;
    r->p.stops = NULL; /* copied into each choice's text stream */
    r->p.n_choices = nc;
    r->p.speculation = spec;
    r->id = s->next_id++;
    r->choices = calloc((size_t)nc, sizeof *r->choices);
    int rc = r->choices ? KVLM_OK : kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    for (int i = 0; !rc && i < nc; i++) {
        sched_choice *c = &r->choices[i];
        kvlm_sampler_options so = p->sampling;
        so.seed += (uint64_t)i;
        c->req = r;
        c->index = i;
        c->seq = -1;
        c->dseq = -1;
        c->state = i == 0 ? CS_WAITING : CS_FORKWAIT;
        c->tokens = malloc((size_t)n_ctx * sizeof(int32_t));
        c->smp = kvlm_sampler_create(&so, s->vocab, err);
        if (c->smp && p->text && !(c->text = kvlm_text_stream_create(p->tokenizer, p->stops, p->n_stops, err)))
            rc = err->code;
        else if (!c->tokens || !c->smp) rc = c->smp ? kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory") : err->code;
        else if (spec.mode == KVLM_DRAFT_MODEL && draft_chain(s, c, &so, spec.k, err))
            rc = err->code;
        else if (p->grammar && (!(c->trie = cst_trie_acquire(&s->tries, p->tokenizer, s->vocab, err)) ||
                                !(c->gm = gr_matcher_new(p->grammar, err))))
            rc = err->code;
        else if (p->grammar && close_refused(c->gm, p, n_ctx, err))
            rc = err->code;
        else {
            memcpy(c->tokens, prompt, (size_t)p->n_prompt * sizeof(int32_t));
            c->n_tokens = p->n_prompt;
            spec_policy_init(&c->pol, &s->pp, spec.mode == KVLM_DRAFT_NGRAM);
            kvlm_sampler_accept(c->smp, prompt, p->n_prompt);
        }
    }
    if (rc) {
        if (!r->choices) r->p.n_choices = 0;
        free_req(s, r);
        return rc;
    }
    if (!s->o.recompute) kvlm_kv_prefetch(s->kv, prompt, p->n_prompt); /* disk reads start now */
    s->reqs[s->n_reqs++] = r;
    s->wait[s->n_wait++] = &r->choices[0];
    s->n_live += nc;
    return r->id;
}

static void list_remove(sched_choice **list, int *n, const sched_choice *c) {
    for (int i = 0; i < *n; i++)
        if (list[i] == c) {
            memmove(list + i, list + i + 1, (size_t)(*n - i - 1) * sizeof *list);
            (*n)--;
            return;
        }
}

static void remove_req(kvlm_sched *s, sched_req *r) {
    for (int i = 0; i < s->n_reqs; i++)
        if (s->reqs[i] == r) {
            s->reqs[i] = s->reqs[--s->n_reqs];
            break;
        }
    free_req(s, r);
}

/* Returns a choice's draft-cache sequence. */
static void drop_draft(kvlm_sched *s, sched_choice *c) {
    if (c->dseq >= 0) kvlm_kv_seq_free(s->draft_kv, c->dseq);
    c->dseq = -1;
    c->dlen = 0;
    c->n_draft = 0;
}

/* Ends a choice; frees the request once all its choices have ended. */
static void finish(kvlm_sched *s, sched_choice *c, kvlm_finish why) {
    if (c->state == CS_DONE) return;
    if (c->state == CS_RUNNING) list_remove(s->run, &s->n_run, c);
    if (c->state == CS_WAITING) list_remove(s->wait, &s->n_wait, c);
    if (c->seq >= 0) kvlm_kv_seq_free(s->kv, c->seq);
    drop_draft(s, c);
    c->seq = -1;
    c->state = CS_DONE;
    s->n_live--;
    sched_req *r = c->req;
    kvlm_finish_event ev = {.choice = c->index, .reason = why, .n_generated = c->generated, .text = "",
                            .n_drafted = c->drafted, .n_accepted = c->accepted};
    if (c->text && kvlm_text_stream_finish(c->text, &ev.text, &ev.text_len, NULL)) ev.reason = KVLM_FINISH_ERROR;
    if (ev.reason == KVLM_FINISH_CANCELLED) s->st.cancelled++;
    if (ev.reason == KVLM_FINISH_TIMEOUT) s->st.timed_out++;
    s->st.finished++;
    if (r->p.on_finish) r->p.on_finish(r->p.user, &ev);
    if (++r->n_done == r->p.n_choices) remove_req(s, r);
}

static void finish_req(kvlm_sched *s, sched_req *r, kvlm_finish why) {
    const int n = r->p.n_choices;
    for (int i = 0; i < n && r->n_done < n; i++) {
        int last = r->n_done == n - 1 && r->choices[i].state != CS_DONE;
        finish(s, &r->choices[i], why);
        if (last) return; /* r has been freed */
    }
}

void kvlm_sched_cancel(kvlm_sched *s, int64_t id) {
    for (int i = 0; i < s->n_reqs; i++)
        if (s->reqs[i]->id == id) {
            finish_req(s, s->reqs[i], KVLM_FINISH_CANCELLED);
            return;
        }
}

int kvlm_sched_has_work(const kvlm_sched *s) { return s->n_wait + s->n_run > 0; }

void kvlm_sched_get_stats(const kvlm_sched *s, kvlm_sched_stats *st) {
    *st = s->st;
    st->running = s->n_run;
    st->waiting = s->n_wait;
}

static void choice_info(const sched_choice *c, sched_choice_info *out) {
    *out = (sched_choice_info){.user = c->req->p.user, .request = c->req->id, .choice = c->index,
                               .running = c->state == CS_RUNNING, .seq = c->seq, .n_prompt = c->req->p.n_prompt,
                               .n_tokens = c->n_tokens, .n_computed = c->n_computed, .generated = c->generated,
                               .max_tokens = c->req->p.max_tokens};
}

int sched_list_choices(const kvlm_sched *s, sched_choice_info *out, int cap) {
    int n = 0;
    for (int i = 0; i < s->n_run; i++, n++)
        if (n < cap) choice_info(s->run[i], &out[n]);
    for (int i = 0; i < s->n_wait; i++, n++)
        if (n < cap) choice_info(s->wait[i], &out[n]);
    return n;
}

/* Releases a running choice's blocks and requeues it at the front. */
static void preempt(kvlm_sched *s, sched_choice *c) {
    list_remove(s->run, &s->n_run, c);
    kvlm_kv_seq_free(s->kv, c->seq);
    drop_draft(s, c);
    c->seq = -1;
    c->n_computed = 0;
    c->stale = 0;
    c->state = CS_WAITING;
    memmove(s->wait + 1, s->wait, (size_t)s->n_wait * sizeof *s->wait);
    s->wait[0] = c;
    s->n_wait++;
    s->st.preemptions++;
}

static int admit(kvlm_sched *s, sched_choice *c) {
    kvlm_error err;
    /* Paged admission counts the blocks the prompt holds at its peak (a
     * layer slice with a window only its window's and one chunk's, the
     * real figure of kv_blocks_for) and keeps one free row of blocks per
     * running sequence in hand (each may cross into a new block on its next
     * step), so admitting a request does not immediately force a
     * preemption. */
    size_t need = kv_new_seq_blocks(s->kv) ? kv_new_seq_blocks(s->kv)
                                           : kv_blocks_for(s->kv, c->n_tokens + 1, s->o.max_batch_tokens) +
                                                 (size_t)s->n_run * (size_t)kv_n_slices(s->kv);
    if (kvlm_kv_available_blocks(s->kv) < need) return 0;
    int cached = 0;
    int seq = s->o.recompute ? kvlm_kv_seq_new(s->kv, &err)
                             : kvlm_kv_seq_new_prefixed(s->kv, c->tokens, c->n_tokens, &cached, &err);
    if (seq < 0) return 0;
    c->seq = seq;
    c->n_computed = cached;
    c->state = CS_RUNNING;
    c->admitted = ++s->admit_counter;
    if (!c->req->counted) {
        c->req->counted = 1;
        s->st.prompt_tokens += (uint64_t)c->req->p.n_prompt;
        s->st.cached_prompt_tokens += (uint64_t)(cached < c->req->p.n_prompt ? cached : c->req->p.n_prompt);
        if (c->req->p.on_admit) c->req->p.on_admit(c->req->p.user, cached < c->req->p.n_prompt ? cached : c->req->p.n_prompt);
    }
    list_remove(s->wait, &s->n_wait, c);
    s->run[s->n_run++] = c;
    return 1;
}

/* A decode goes without its drafts this step (the caller sets its chunk);
 * the draft model's cache goes back to the tokens it shares with the target. */
static void shed_drafts(kvlm_sched *s, sched_choice *c) {
    c->n_draft = 0;
    if (c->dseq >= 0 && c->dlen > c->n_computed) {
        kvlm_error derr;
        if (kvlm_kv_seq_truncate(s->draft_kv, c->dseq, c->n_computed, &derr)) drop_draft(s, c);
        else c->dlen = c->n_computed;
    }
}

/* Decide each running choice's chunk within the token budget, admitting
 * waiting choices with what is left. */
static int plan(kvlm_sched *s) {
    int budget = s->o.max_batch_tokens;
    /* prefill tokens still allowed this step (decodes do not count) */
    int pbudget = s->o.max_prefill_tokens > 0 ? s->o.max_prefill_tokens : budget;
    for (int pass = 0; pass < 2; pass++) /* decoding choices first, then prefills */
        for (int i = 0; i < s->n_run; i++) {
            sched_choice *c = s->run[i];
            int left = c->n_tokens - c->n_computed;
            if ((pass == 0) != (left == 1)) continue;
            const int cap = pass == 0 ? budget : budget < pbudget ? budget : pbudget;
            const int want = pass == 0 ? 1 + c->n_draft : left; /* a decode carries its drafts */
            c->chunk = want < cap ? want : cap;
            if (pass == 0 && c->chunk > 1) c->n_draft = c->chunk - 1;
            else if (pass == 0 && c->n_draft > 0) shed_drafts(s, c); /* no room for any */
            budget -= c->chunk;
            if (pass == 1) pbudget -= c->chunk;
        }
    for (;;) {
        while (s->n_wait > 0 && budget > 0 && pbudget > 0 && s->n_run < kv_max_seqs(s->kv) && admit(s, s->wait[0])) {
            sched_choice *c = s->run[s->n_run - 1];
            const int left = c->n_tokens - c->n_computed, cap = budget < pbudget ? budget : pbudget;
            c->chunk = left < cap ? left : cap;
            budget -= c->chunk;
            pbudget -= c->chunk;
        }
        /* With nothing running, every block the scheduler could ever free
         * is free or evictable already: a choice that cannot be admitted
         * now never will be, and waiting for it would keep has_work true
         * forever. */
        if (s->n_run > 0 || s->n_wait == 0) break;
        finish(s, s->wait[0], KVLM_FINISH_ERROR);
    }
    return s->o.max_batch_tokens - budget;
}

/* Blocks the plan's chunks need beyond what their sequences hold. */
static size_t plan_blocks(const kvlm_sched *s) {
    size_t need = 0;
    for (int i = 0; i < s->n_run; i++)
        if (s->run[i]->chunk > 0)
            need += kvlm_kv_blocks_needed(s->kv, s->run[i]->seq, s->run[i]->n_computed + s->run[i]->chunk);
    return need;
}

/* Fits the plan's blocks into the pool: drafts go first (a decode keeps
 * its one token), then the latest admitted choices are preempted. Drafts
 * can need a block more than their sequence: after a rollback into a block
 * the drafts completed (so indexed), the next write copies it while the
 * drafts may spill into the next; a pool of one context lacks that one. */
static void fit_blocks(kvlm_sched *s) {
    if (plan_blocks(s) > kvlm_kv_available_blocks(s->kv))
        for (int i = 0; i < s->n_run; i++)
            if (s->run[i]->n_draft > 0) {
                shed_drafts(s, s->run[i]);
                s->run[i]->chunk = 1;
            }
    for (;;) {
        if (plan_blocks(s) <= kvlm_kv_available_blocks(s->kv) || s->n_run == 0) return;
        sched_choice *victim = s->run[0];
        for (int i = 1; i < s->n_run; i++)
            if (s->run[i]->admitted > victim->admitted) victim = s->run[i];
        if (s->n_run == 1) { /* alone and still too big: it can never fit */
            finish(s, victim, KVLM_FINISH_ERROR);
            return;
        }
        preempt(s, victim);
    }
}

/* Forks the waiting siblings of a choice that has just computed its prompt;
 * the forked ones are appended to group (they sample the same logits). */
static void fork_siblings(kvlm_sched *s, sched_choice *first, sched_choice **group, int *n_group) {
    sched_req *r = first->req;
    for (int i = 1; i < r->p.n_choices; i++) {
        sched_choice *c = &r->choices[i];
        if (c->state != CS_FORKWAIT) continue;
        kvlm_error err;
        int seq = s->n_run < kv_max_seqs(s->kv) ? kvlm_kv_seq_fork(s->kv, first->seq, &err) : -1;
        if (seq >= 0) {
            c->seq = seq;
            c->n_computed = first->n_computed;
            c->state = CS_RUNNING;
            c->admitted = ++s->admit_counter;
            s->run[s->n_run++] = c;
            group[(*n_group)++] = c;
        } else { /* no slot or block: it computes the prompt itself later */
            c->state = CS_WAITING;
            s->wait[s->n_wait++] = c;
        }
    }
}

/* Draws the next token of a choice whose tokens are all computed from the
 * logits row of its next position (dec_token: mask, sample, emit) and
 * ends the choice when it is done. Returns 1 when it has ended (c may be
 * freed). */
static int next_token(kvlm_sched *s, sched_choice *c, const float *logits) {
    const kvlm_finish why = dec_token(&s->dec, c, logits, -1, NULL, NULL);
    if (why == KVLM_FINISH_NONE) return 0;
    finish(s, c, why);
    return 1;
}

/* A prompt-lookup choice's pending shadow draft, once decided, is an
 * observation for its policy (spec_shadow_kept). */
static void shadow_resolve(kvlm_sched *s, sched_choice *c, int k) {
    const int m = spec_shadow_kept(c->tokens, c->n_tokens, c->shadow_at, c->shadow, c->n_shadow);
    if (m < 0) return;
    spec_policy_observe(&c->pol, &s->pp, c->n_shadow, m, 0, s->cost, k);
    c->n_shadow = 0;
}

/* Drafts for every decoding choice of a speculating request, at most k
 * and no more than max_tokens and the context window can take after the
 * token the step itself will draw. Unless fixed, a choice drafts only when
 * its policy says it pays at the cost its drafts add to this step; a
 * prompt-lookup choice that does not looks them up anyway, as a shadow.
 * A step whose plain row count has no recent time carries no adaptive
 * drafts, so drafts are measured against a current plain step. */
static void propose(kvlm_sched *s) {
    int nj = 0, draws = 0;
    for (int i = 0; i < s->n_run; i++) draws += s->run[i]->n_tokens - s->run[i]->n_computed == 1;
    const int refresh = !s->costs_pinned && spec_costs_stale(&s->costs, draws, 64);
    int rows = draws; /* this step's rows so far: the decodes and the drafts given out */
    for (int i = 0; i < s->n_run; i++) {
        sched_choice *c = s->run[i];
        const kvlm_speculation *sp = &c->req->p.speculation;
        c->n_draft = 0;
        if (sp->mode == KVLM_DRAFT_NONE || c->no_spec || c->n_tokens - c->n_computed != 1) continue;
        int k = sp->k;
        const int room = c->req->p.max_tokens - c->generated - 1, ctx_room = kv_n_ctx(s->kv) - 1 - c->n_tokens;
        if (k > room) k = room;
        if (k > ctx_room) k = ctx_room;
        if (k <= 0) continue;
        if (!sp->fixed) {
            spec_costs_fill(&s->costs, rows, draws, sp->mode == KVLM_DRAFT_MODEL, sp->k, s->cost);
            if (sp->mode == KVLM_DRAFT_NGRAM) shadow_resolve(s, c, sp->k);
            if (refresh || !spec_policy_wants(&c->pol, &s->pp, s->cost, sp->k)) {
                if (sp->mode == KVLM_DRAFT_NGRAM && c->n_shadow == 0) {
                    c->n_shadow = spec_draft_ngram(c->tokens, c->n_tokens, sp->ngram, k, c->shadow);
                    c->shadow_at = c->n_tokens;
                }
                continue;
            }
            c->n_shadow = 0;
        }
        if (sp->mode == KVLM_DRAFT_NGRAM) {
            c->n_draft = spec_draft_ngram(c->tokens, c->n_tokens, sp->ngram, k, c->draft);
            rows += c->n_draft;
            continue;
        }
        s->jobs[nj] = (spec_job){.tokens = c->tokens, .n_tokens = c->n_tokens, .dseq = &c->dseq, .dlen = &c->dlen,
                                 .dsmp = c->dsmp, .k = k, .draft = c->draft, .q = c->q};
        s->job_choice[nj++] = c;
        rows += k;
    }
    if (nj == 0) return;
    kvlm_error err; /* a failed draft step only means fewer drafts */
    const double t0 = kvlm_now();
    spec_draft_model(s->draft_e, s->draft_kv, s->vocab, s->jobs, nj, &err);
    if (!s->costs_pinned) spec_costs_record_draft(&s->costs, nj, kvlm_now() - t0);
    for (int i = 0; i < nj; i++) s->job_choice[i]->n_draft = s->jobs[i].n_draft;
}

/* After a step that computed a choice's last token and its n_draft drafts
 * (rows: a logits row for each): keeps the drafts the target accepts, draws
 * the token after them, and truncates both caches to the tokens kept.
 * Returns 0, or a negative status when the cache could not be rolled back. */
static int verify(kvlm_sched *s, sched_choice *c, const float *rows, kvlm_error *err) {
    const int nd = c->n_draft;
    c->n_computed = c->n_tokens; /* the last drawn token; the drafts follow in the cache */
    c->drafted += nd;
    s->st.drafted_tokens += (uint64_t)nd;
    s->st.spec_items++;
    /* Row j decides the token after j kept drafts: draft j verified, or
     * (after the last draft) a plain draw. The first token not kept from a
     * draft ends the loop. */
    int m = 0; /* drafts kept */
    for (int j = 0; j <= nd; j++) {
        const float *row = rows + (size_t)j * s->vocab;
        const float *q = j < nd && c->q ? c->q + (size_t)j * s->vocab : NULL;
        int kept = 0;
        const kvlm_finish why = dec_token(&s->dec, c, row, j < nd ? c->draft[j] : -1, q, &kept);
        if (why != KVLM_FINISH_NONE) {
            finish(s, c, why);
            return 0;
        }
        if (!kept) break;
        m++;
        c->n_computed++; /* the draft kept is this token, its K/V already written */
    }
    c->n_draft = 0;
    const kvlm_speculation *sp = &c->req->p.speculation;
    if (!sp->fixed) {
        /* the cost of these drafts in this step (whose time is measured) */
        spec_costs_fill(&s->costs, s->step_rows - nd, s->step_draws, sp->mode == KVLM_DRAFT_MODEL, sp->k, s->cost);
        spec_policy_observe(&c->pol, &s->pp, nd, m, 1, s->cost, sp->k);
    }
    kvlm_error terr;
    if (kvlm_kv_seq_truncate(s->kv, c->seq, c->n_computed, &terr)) {
        /* A sliding window gave back blocks the kept tokens' window still
         * reads: the choice computes its context again (as after a
         * preemption) and drafts no more. Truncating to 0 always works. */
        int rc = kvlm_kv_seq_truncate(s->kv, c->seq, 0, err);
        if (rc) return rc;
        c->n_computed = 0;
        c->no_spec = 1;
        drop_draft(s, c);
        return KVLM_OK;
    }
    if (c->dseq >= 0 && c->dlen > c->n_computed) {
        kvlm_error derr;
        if (kvlm_kv_seq_truncate(s->draft_kv, c->dseq, c->n_computed, &derr)) drop_draft(s, c);
        else c->dlen = c->n_computed;
    }
    return KVLM_OK;
}

static void expire(kvlm_sched *s) {
    const double now = kvlm_now();
    for (int i = 0; i < s->n_reqs;) {
        sched_req *r = s->reqs[i];
        if (r->p.deadline > 0 && now > r->p.deadline) finish_req(s, r, KVLM_FINISH_TIMEOUT); /* reqs[i] replaced */
        else i++;
    }
}

/* Recompute policy: a choice that has drawn a token since its KV was last
 * dropped drops it and computes its whole context again (in chunks when
 * it exceeds the budget; it is not dropped again before it draws). */
static int drop_computed(kvlm_sched *s, kvlm_error *err) {
    for (int i = 0; i < s->n_run; i++) {
        sched_choice *c = s->run[i];
        if (!c->stale) continue;
        int rc = kvlm_kv_seq_truncate(s->kv, c->seq, 0, err);
        if (rc) return rc;
        c->n_computed = 0;
        c->stale = 0;
    }
    return 0;
}

int kvlm_sched_step(kvlm_sched *s, kvlm_error *err) {
    expire(s);
    if (s->o.recompute) {
        int rc = drop_computed(s, err);
        if (rc) return rc;
    }
    for (int i = 0; i < s->n_run; i++) s->run[i]->chunk = 0;
    propose(s);
    plan(s);
    fit_blocks(s);
    int n = 0;
    for (int i = 0; i < s->n_run; i++) {
        sched_choice *c = s->run[i];
        if (c->chunk <= 0) continue;
        /* drafts ride after the last drawn token, logits for every row */
        if (c->n_draft > 0) memcpy(c->tokens + c->n_tokens, c->draft, (size_t)c->n_draft * sizeof *c->draft);
        int ends = c->n_computed + c->chunk == c->n_tokens + c->n_draft;
        s->items[n] = (kvlm_batch_item){c->seq, c->tokens + c->n_computed, c->chunk,
                                        c->n_draft > 0 ? 1 : ends ? 0 : -1};
        s->item_choice[n++] = c;
    }
    if (n == 0) return 0;
    const size_t need = kvlm_engine_logits_size(s->e, s->items, n);
    if (need > s->logits_cap) {
        float *l = realloc(s->logits, need * sizeof *l);
        if (!l) return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory for %zu logits", need);
        s->logits = l;
        s->logits_cap = need;
    }
    /* A step of decodes only (each row a decode or a draft, with logits)
     * is timed into the cost table, by its rows. */
    int rows = 0, draws = 0, decode_only = 1;
    for (int i = 0; i < n; i++) {
        const int dec = s->items[i].logits_all == 1 || (s->items[i].n_tokens == 1 && s->items[i].logits_all == 0);
        rows += dec ? s->items[i].n_tokens : 0;
        draws += s->items[i].logits_all >= 0;
        decode_only &= dec;
    }
    const double t0 = kvlm_now();
    int rc = kvlm_engine_step(s->e, s->items, n, s->logits, err);
    if (rc) return rc;
    if (decode_only && !s->costs_pinned) spec_costs_record(&s->costs, rows, kvlm_now() - t0);
    s->step_rows = rows; /* decode and draft rows (a prefill chunk's are not counted) */
    s->step_draws = draws;
    s->st.steps++;
    const float *row = s->logits;
    for (int i = 0; i < n; i++) {
        sched_choice *c = s->item_choice[i];
        if (s->items[i].logits_all == 1) {
            const int rows = s->items[i].n_tokens;
            if ((rc = verify(s, c, row, err))) return rc;
            row += (size_t)rows * s->vocab;
            continue;
        }
        c->n_computed += c->chunk;
        if (s->items[i].logits_all < 0) continue;
        sched_choice *group[64 + 1];
        int g = 0;
        group[g++] = c;
        if (c->index == 0 && c->generated == 0 && c->req->p.n_choices > 1) fork_siblings(s, c, group, &g);
        /* The request is freed when its last choice finishes, which can
         * only be the last member of the group processed here. */
        for (int k = 0; k < g; k++) next_token(s, group[k], row);
        row += s->vocab;
    }
    return n;
}
