/*
 * Jobs: creation, reference counting, and handing bytes to a waiting
 * connection (see srv.h for the threading rules). A job's choices and
 * prompt runs are allocated up front, so the engine's callbacks never
 * allocate anything but text.
 */
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/embed_routes.h"
#include "server/srv.h"
#include "app/structured.h"
#include "app/tool_calls.h"

job *job_new(srv *s, api_request *rq, kvlm_error *err) {
    job *j = calloc(1, sizeof *j);
    int nc = rq->n_prompts * rq->n;
    if (j) {
        j->runs = calloc((size_t)rq->n_prompts, sizeof *j->runs);
        j->choices = calloc((size_t)nc, sizeof *j->choices);
    }
    if (!j || !j->runs || !j->choices) goto nomem;
    j->s = s;
    j->rq = *rq;
    memset(rq, 0, sizeof *rq);
    j->n_choices = nc;
    j->created = (long long)time(NULL);
    j->t_arrival = kvlm_now();
    j->refs = 1;
    for (int c = 0; c < nc && j->rq.chat && j->rq.stream && j->rq.parse_calls; c++)
        if (!(j->choices[c].tools = tc_parser_new((tc_family)j->rq.tool_family))) {
            *rq = j->rq; /* the caller still owns the request */
            for (int k = 0; k < c; k++) tc_parser_free(j->choices[k].tools);
            goto nomem;
        }
    for (int c = 0; c < nc && j->rq.stream && j->rq.reasoning &&
                        (j->rq.shape == API_SHAPE_ANTHROPIC || j->rq.shape == API_SHAPE_RESPONSES); c++) {
        rs_init(&j->choices[c].reason, j->rq.reasoning == 2);
        j->choices[c].reason_on = 1;
    }
    /* every chat choice counts its reasoning tokens, streamed or not, in
     * the model's format whatever the response format (the counter's
     * failure to allocate only leaves the count at 0) */
    const rc_format rf = j->rq.chat ? rc_format_of(&s->tpl, j->rq.reasoning) : RC_NONE;
    for (int c = 0; c < nc; c++) (void)rc_init(&j->choices[c].reasoning, rf, j->rq.reasoning == 2);
    for (int p = 0; p < j->rq.n_prompts; p++) {
        j->runs[p] = (prompt_run){.j = j, .index = p, .sched_id = -1};
        j->prompt_tokens += j->rq.n_prompt[p];
    }
    /* ids are unique across the models of one server: a model counts
     * with its front's counter (models.h) */
    srv *ids = s->parent ? s->parent : s;
    pthread_mutex_lock(&ids->mu);
    const unsigned long long created = (unsigned long long)ids->created, n = (unsigned long long)++ids->counter;
    pthread_mutex_unlock(&ids->mu);
    pthread_mutex_lock(&s->mu);
    snprintf(j->id, sizeof j->id, "%s-%016llx%08llx", j->rq.chat ? "chatcmpl" : "cmpl", created, n);
    s->n_jobs++;
    pthread_mutex_unlock(&s->mu);
    return j;
nomem:
    if (j) {
        free(j->runs);
        free(j->choices);
        free(j);
    }
    kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    return NULL;
}

job *job_for_ids(srv *s, int32_t *ids, size_t n, api_error *e) {
    api_request rq = {.n_prompts = 1, .n = 1};
    rq.prompts = calloc(1, sizeof *rq.prompts);
    rq.n_prompt = calloc(1, sizeof *rq.n_prompt);
    rq.max_new = calloc(1, sizeof *rq.max_new);
    job *j = NULL;
    if (!rq.prompts || !rq.n_prompt || !rq.max_new) {
        api_fail(e, 500, NULL, NULL, "out of memory");
    } else {
        kvlm_error err;
        rq.prompts[0] = ids;
        rq.n_prompt[0] = (int)n;
        ids = NULL;
        if (!(j = job_new(s, &rq, &err))) api_fail(e, 500, NULL, NULL, "%s", err.msg);
    }
    free(ids);
    api_request_free(&rq);
    return j;
}

void job_ref_locked(job *j) { j->refs++; }

static void job_free(job *j) {
    for (int c = 0; c < j->n_choices; c++) {
        choice_state *cs = &j->choices[c];
        sbuf_free(&cs->text);
        sbuf_free(&cs->raw);
        sbuf_free(&cs->sh_item);
        rs_free(&cs->reason);
        rc_free(&cs->reasoning);
        free(cs->lp_ids);
        free(cs->lp_vals);
        free(cs->lp_top_ids);
        free(cs->lp_top_vals);
        free(cs->lp_entropy);
        tc_parser_free(cs->tools);
    }
    free(j->choices);
    free(j->runs);
    structured_free(j->grammar);
    free(j->measure);
    embed_job_free(j->embed);
    free(j->pin);
    sbuf_free(&j->out);
    api_request_free(&j->rq);
    free(j);
}

void job_unref(job *j) {
    srv *s = j->s;
    pthread_mutex_lock(&s->mu);
    int last = --j->refs == 0;
    int counted = j->id[0] != 0;
    if (last && counted) s->n_jobs--;
    pthread_mutex_unlock(&s->mu);
    if (last) job_free(j);
}

void job_wake(job *j) {
    struct MHD_Connection *c = NULL;
    pthread_mutex_lock(&j->s->mu);
    if (j->suspended && j->conn) {
        j->suspended = 0;
        c = j->conn;
    }
    pthread_mutex_unlock(&j->s->mu);
    /* Still suspended in libmicrohttpd (only this thread resumes), so the
     * connection cannot have been freed. */
    if (c) MHD_resume_connection(c);
}

void job_send(job *j, const char *bytes, size_t n, int last) {
    pthread_mutex_lock(&j->s->mu);
    if (j->conn && !j->cancel_requested) sbuf_add(&j->out, bytes, n);
    if (last) j->out_done = 1;
    pthread_mutex_unlock(&j->s->mu);
    job_wake(j);
}
