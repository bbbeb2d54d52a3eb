/*
 * The engine thread: the only thread that touches the scheduler, the KV
 * cache and the engine. Each turn of its loop takes the jobs the HTTP
 * thread queued (submitting each prompt as one scheduler request, or
 * rejecting the job: 429 when the waiting queue is full), cancels the jobs
 * whose clients left, runs the next-token measurements and pinned-prefix
 * operations that fit between two steps (measure_routes.h,
 * cache_routes.h), runs one batched step, publishes the
 * metrics and the live view (engine_view.h), resumes the view's event
 * streams that are due (engine_stream.h), and every 100 ms checks the
 * sockets of connections that wait for it for a hang-up (libmicrohttpd
 * cannot see one on a suspended connection), so a client that disconnects
 * gets its KV blocks back within one step.
 *
 * The scheduler's callbacks carry the tokens and their text (the scheduler
 * applies eos ids, stop strings and UTF-8 assembly, as for kvlm run) into
 * server-sent events for streaming jobs or into the final body otherwise,
 * and record the latency histograms. A job is finalised when its
 * last choice ends; it then leaves the live list and drops the engine's
 * reference. The engine never holds `mu` while calling libmicrohttpd.
 */
#include <microhttpd.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/api_stream.h"
#include "server/engine_stream.h"
#include "server/embed_routes.h"
#include "server/cache_routes.h"
#include "server/measure_routes.h"
#include "server/openai_response.h"
#include "server/srv.h"
#include "app/structured.h"
#include "server/tool_stream.h"

#define WATCH_INTERVAL 0.1

static void live_add(srv *s, job *j) {
    j->live_prev = NULL;
    j->live_next = s->live;
    if (s->live) s->live->live_prev = j;
    s->live = j;
}

static void live_remove(srv *s, job *j) {
    if (j->live_prev) j->live_prev->live_next = j->live_next;
    else if (s->live == j) s->live = j->live_next;
    if (j->live_next) j->live_next->live_prev = j->live_prev;
    j->live_prev = j->live_next = NULL;
}

static void publish(srv *s) {
    kvlm_sched_stats st;
    kvlm_kv_stats kv;
    kvlm_sched_get_stats(s->sched, &st);
    kvlm_kv_get_stats(s->kv, &kv);
    pthread_mutex_lock(&s->mu);
    const int inbox = s->inbox_len;
    pthread_mutex_unlock(&s->mu);
    metrics_publish(s->metrics, &st, &kv, inbox);
    view_update(s, &st, &kv, inbox);
}

/* Writes what the job produced for its connection and lets it go. The
 * metrics are published first, so a client that has its response sees
 * its blocks returned in /metrics. */
static void finalize(job *j) {
    if (!j->submitted || j->n_finished < j->n_expected) return;
    srv *s = j->s;
    const stream_ops *ops = stream_ops_of(j);
    live_remove(s, j);
    publish(s);
    if (ops && !j->failed && !j->cancelled) ops->done(j);
    if (j->state == JOB_ACCEPTED && j->rq.stream && ops) {
        sbuf tail = {0};
        if (j->failed) ops->error(j, &j->fail, &tail);
        else ops->end(j, &tail);
        job_send(j, tail.data ? tail.data : "", tail.len, 1);
        sbuf_free(&tail);
    } else if (j->state == JOB_ACCEPTED && j->rq.stream) {
        sbuf tail = {0};
        if (j->failed) resp_sse_error(&j->fail, &tail);
        resp_stream_end(j, &tail);
        job_send(j, tail.data ? tail.data : "", tail.len, 1);
        sbuf_free(&tail);
    } else {
        char *body = j->failed ? (j->rq.shape == API_SHAPE_ANTHROPIC ? anthropic_error_body(&j->fail)
                                                                     : resp_error_body(&j->fail))
                 : ops ? ops->final_body(j)
                       : resp_final_body(j);
        pthread_mutex_lock(&s->mu);
        if (body) sbuf_adds(&j->out, body);
        j->status = !body ? 500 : j->failed ? j->fail.status : 200;
        pthread_mutex_unlock(&s->mu);
        free(body);
    }
    pthread_mutex_lock(&s->mu);
    j->state = JOB_DONE;
    pthread_mutex_unlock(&s->mu);
    job_wake(j);
    job_unref(j);
}

/* ------------------------------------------------------------ callbacks */

static void on_admit(void *user, int n_cached) {
    prompt_run *pr = user;
    pr->cached = n_cached;
    pr->j->cached_tokens += n_cached;
    metrics_observe_queue(pr->j->s->metrics, kvlm_now() - pr->j->t_arrival);
}

static int on_token(void *user, const kvlm_token_event *ev) {
    prompt_run *pr = user;
    job *j = pr->j;
    srv *s = j->s;
    const int ci = pr->index * j->rq.n + ev->choice;
    choice_state *cs = &j->choices[ci];
    if (pr->t_first == 0) {
        pr->t_first = kvlm_now();
        metrics_observe_ttft(s->metrics, pr->t_first - j->t_arrival);
        view_observe_ttft(s->view, pr->t_first - j->t_arrival);
    }
    cs->n_tokens++;
    size_t len = 0;
    const char *piece = s->tok ? kvlm_tokenizer_piece(s->tok, ev->id, &len) : NULL;
    if (piece) {
        cs->piece_bytes += len;
        rc_token(&cs->reasoning, piece, len);
    }
    size_t text_len;
    const char *text = tool_token_text(j, ev, &text_len);
    if (j->rq.shape != API_SHAPE_OPENAI) {
        size_t plen = 0;
        const char *piece = s->tok && j->rq.n_stops ? kvlm_tokenizer_piece(s->tok, ev->id, &plen) : NULL;
        if (piece) sbuf_add(&cs->raw, piece, plen); /* which stop sequence ended it */
        if (j->rq.stream) sbuf_add(&cs->text, text, text_len); /* the final object of the stream */
    }
    if (j->rq.stream) {
        if (text_len || j->rq.logprobs) {
            sbuf out = {0};
            tool_stream_text(j, ci, text, text_len, ev, &out);
            if (out.len) job_send(j, out.data, out.len, 0);
            sbuf_free(&out);
        }
    } else {
        sbuf_add(&cs->text, text, text_len);
        if (j->rq.logprobs) resp_keep_logprobs(cs, ev, j->rq.top_logprobs);
    }
    return 0;
}

static void on_finish(void *user, const kvlm_finish_event *ev) {
    prompt_run *pr = user;
    job *j = pr->j;
    srv *s = j->s;
    const kvlm_finish why = ev->reason;
    const int n_generated = ev->n_generated;
    const int ci = pr->index * j->rq.n + ev->choice;
    choice_state *cs = &j->choices[ci];
    const double now = kvlm_now();
    cs->finish = why;
    cs->n_generated = n_generated;
    j->completion_tokens += n_generated;
    j->reasoning_tokens += rc_tokens(&cs->reasoning);
    j->drafted_tokens += ev->n_drafted;
    j->accepted_tokens += ev->n_accepted;
    if (n_generated > pr->max_gen) pr->max_gen = n_generated;
    metrics_count_finish(s->metrics, why);
    if (why == KVLM_FINISH_ERROR && !j->failed) {
        j->failed = 1;
        api_fail(&j->fail, 500, "kv_cache_too_small", NULL, "the request does not fit in the KV cache pool");
    }
    if (why != KVLM_FINISH_CANCELLED && why != KVLM_FINISH_ERROR && !j->cancelled) {
        if (j->rq.stream) {
            sbuf out = {0};
            if (j->rq.shape != API_SHAPE_OPENAI) sbuf_add(&cs->text, ev->text, ev->text_len);
            tool_stream_finish(j, ci, ev->text, ev->text_len, why, &out);
            job_send(j, out.data, out.len, 0);
            sbuf_free(&out);
        } else {
            sbuf_add(&cs->text, ev->text, ev->text_len);
        }
    }
    if (++pr->n_done == j->rq.n && pr->t_first > 0 && !j->cancelled) {
        const double tpot = pr->max_gen > 1 ? (now - pr->t_first) / (pr->max_gen - 1) : -1.0;
        metrics_observe_request(s->metrics, now - j->t_arrival, tpot);
        if (tpot >= 0) view_observe_tpot(s->view, tpot);
    }
    j->n_finished++;
    finalize(j);
}

/* ------------------------------------------------------------ jobs */

static void cancel_runs(srv *s, job *j) {
    pthread_mutex_lock(&s->mu);
    job_ref_locked(j); /* the last cancel may finalise the job */
    pthread_mutex_unlock(&s->mu);
    for (int p = 0; p < j->rq.n_prompts; p++)
        if (j->runs[p].sched_id >= 0) kvlm_sched_cancel(s->sched, j->runs[p].sched_id);
    job_unref(j);
}

static void submit(srv *s, job *j) {
    live_add(s, j);
    pthread_mutex_lock(&s->mu);
    int gone = j->cancel_requested;
    pthread_mutex_unlock(&s->mu);
    const double deadline = s->cfg.timeout > 0 ? j->t_arrival + s->cfg.timeout : 0;
    /* What ends a choice: the model's eos ids (unless ignore_eos) and the
     * chat template's end of turn (always). */
    int32_t ends[KVLM_MAX_EOS + 1 + CHAT_MAX_TURN_ENDS];
    int n_ends = j->rq.ignore_eos ? 0 : kvlm_eos_ids(s->m, s->tok, ends, KVLM_MAX_EOS + 1);
    if (n_ends > KVLM_MAX_EOS + 1) n_ends = KVLM_MAX_EOS + 1;
    for (int i = 0; i < j->rq.n_turn_ends; i++) ends[n_ends++] = j->rq.turn_ends[i];
    for (int p = 0; !gone && p < j->rq.n_prompts; p++) {
        kvlm_request_params prm = kvlm_request_default_params();
        prm.prompt = j->rq.prompts[p];
        prm.n_prompt = j->rq.n_prompt[p];
        prm.max_tokens = j->rq.max_new[p];
        prm.n_choices = j->rq.n;
        prm.eos_ids = ends;
        prm.n_eos = n_ends;
        prm.logprobs = j->rq.logprobs ? (j->rq.top_logprobs > 0 ? j->rq.top_logprobs : -1) : 0;
        prm.deadline = deadline;
        prm.sampling = j->rq.sampling;
        prm.text = 1;
        prm.tokenizer = s->tok;
        prm.stops = (const char *const *)j->rq.stops;
        prm.n_stops = j->rq.n_stops;
        prm.on_token = on_token;
        prm.on_finish = on_finish;
        prm.on_admit = on_admit;
        prm.user = &j->runs[p];
        prm.entropy = j->rq.kvlm_entropy;
        structured_attach(&prm, j->grammar);
        /* the request's speculation, else the server's */
        prm.speculation = j->rq.speculation_given ? j->rq.speculation : s->cfg.speculation;
        kvlm_error err;
        int64_t id = kvlm_sched_submit(s->sched, &prm, &err);
        if (id < 0) {
            j->failed = 1;
            if (err.code == KVLM_ERR_BUSY)
                api_fail(&j->fail, 429, "queue_full", NULL, "the server is busy (%s); retry later", err.msg);
            else
                api_fail(&j->fail, err.code == KVLM_ERR_ARG ? 400 : 500, NULL, NULL, "%s", err.msg);
            break;
        }
        j->runs[p].sched_id = id;
        view_count_request(s->view);
        j->n_expected += j->rq.n;
    }
    if (gone) j->cancelled = 1;
    if (j->failed) {
        cancel_runs(s, j);
    } else if (!gone) {
        pthread_mutex_lock(&s->mu);
        j->state = JOB_ACCEPTED;
        pthread_mutex_unlock(&s->mu);
        if (j->rq.stream && stream_ops_of(j)) {
            sbuf out = {0};
            stream_ops_of(j)->start(j, &out);
            job_send(j, out.data, out.len, 0);
            sbuf_free(&out);
        } else if (j->rq.stream && j->rq.chat) {
            sbuf out = {0};
            for (int c = 0; c < j->n_choices; c++) resp_chunk(j, c, 1, "", 0, NULL, NULL, &out);
            job_send(j, out.data, out.len, 0);
            sbuf_free(&out);
        } else if (j->rq.stream) {
            job_wake(j); /* the event stream can start */
        }
    }
    j->submitted = 1;
    finalize(j);
}

/* ------------------------------------------------------------ measurements */

/* Gives a job that never reached the scheduler its whole answer. */
static void answer(srv *s, job *j, int status, char *body) {
    pthread_mutex_lock(&s->mu);
    if (body) sbuf_adds(&j->out, body);
    j->status = body ? status : 500;
    j->state = JOB_DONE;
    pthread_mutex_unlock(&s->mu);
    free(body);
    job_wake(j);
    job_unref(j);
}

static void answer_error(srv *s, job *j, const api_error *e) { answer(s, j, e->status, resp_error_body(e)); }

/* Runs the waiting measurements and embedding slices that fit now, in
 * arrival order; with nothing running, one that does not fit never will.
 * An embeddings job with inputs left runs its next slice after the next
 * step (at once when nothing runs). */
static void run_measures(srv *s) {
    job **at = &s->measures;
    while (*at) {
        job *j = *at;
        char *body;
        api_error e;
        int status = 200;
        const int wait = j->embed ? embed_run(s, j, &body, &e)
                         : j->pin ? cache_run(s, j, &body, &status, &e)
                                  : measure_run(s, j, &body, &e);
        if (wait && kvlm_sched_has_work(s->sched)) return; /* keep the order: retry after the next step */
        if (wait == 2) continue;
        *at = j->next;
        j->next = NULL;
        if (wait)
            api_fail(&e, 503, "kv_cache_full", NULL, "no KV sequence slot or blocks for the %s",
                     j->embed ? "embeddings" : j->pin ? "warm-up" : "measurement");
        if (body) answer(s, j, status, body);
        else answer_error(s, j, &e);
    }
}

/* Embeddings wait in the measurement queue, outside the scheduler:
 * --max-waiting counts them with the scheduler's waiting sequences. */
static int embeds_full(srv *s) {
    if (s->cfg.max_waiting <= 0) return 0;
    int n = 0;
    for (const job *q = s->measures; q; q = q->next) n += q->embed != NULL;
    kvlm_sched_stats st;
    kvlm_sched_get_stats(s->sched, &st);
    return n + st.waiting >= s->cfg.max_waiting;
}

static void queue_measure(srv *s, job *j) {
    if (j->embed && embeds_full(s)) {
        api_error e;
        api_fail(&e, 429, "queue_full", NULL, "the server is busy (%d requests waiting); retry later",
                 s->cfg.max_waiting);
        answer_error(s, j, &e);
        return;
    }
    job **at = &s->measures;
    while (*at) at = &(*at)->next;
    *at = j;
}

/* Ends a job that never reached the scheduler, or every live job. */
static void reject(srv *s, job *j, int status, const char *code, const char *msg) {
    live_add(s, j);
    j->failed = 1;
    api_fail(&j->fail, status, code, NULL, "%s", msg);
    j->submitted = 1;
    finalize(j);
}

static void fail_all(srv *s, int status, const char *code, const char *msg) {
    while (s->live) {
        job *j = s->live;
        if (!j->failed) {
            j->failed = 1;
            api_fail(&j->fail, status, code, NULL, "%s", msg);
        }
        cancel_runs(s, j);
        if (s->live == j) { /* every run had already ended: finalise it here */
            j->n_finished = j->n_expected;
            j->submitted = 1;
            finalize(j);
        }
    }
}

/* Jobs whose clients left: from the HTTP thread's flag or the watchdog. */
static void process_cancels(srv *s) {
    for (;;) {
        job *hit = NULL;
        pthread_mutex_lock(&s->mu);
        for (job *j = s->live; j && !hit; j = j->live_next)
            if (j->cancel_requested && !j->cancelled) hit = j;
        pthread_mutex_unlock(&s->mu);
        if (!hit) return;
        hit->cancelled = 1;
        cancel_runs(s, hit);
    }
}

/* Suspended connections whose peer hung up: their jobs are cancelled. */
static void watchdog(srv *s) {
    enum { MAXW = 256 };
    struct pollfd fds[MAXW];
    struct MHD_Connection *conns[MAXW];
    job *who[MAXW];
    int n = 0, k = 0;
    pthread_mutex_lock(&s->mu);
    for (job *j = s->live; j && n < MAXW; j = j->live_next) {
        if (!j->suspended || !j->conn || j->cancel_requested) continue;
        conns[n] = j->conn;
        who[n++] = j;
    }
    pthread_mutex_unlock(&s->mu);
    /* Suspended connections stay valid: only this thread resumes them, and
     * live jobs hold the engine's reference. */
    for (int i = 0; i < n; i++) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conns[i], MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!ci) continue;
        fds[k] = (struct pollfd){.fd = ci->connect_fd, .events = POLLRDHUP};
        who[k++] = who[i];
    }
    n = k;
    if (n == 0 || poll(fds, (nfds_t)n, 0) <= 0) return;
    for (int i = 0; i < n; i++)
        if (fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) {
            pthread_mutex_lock(&s->mu);
            who[i]->cancel_requested = 1;
            pthread_mutex_unlock(&s->mu);
        }
    process_cancels(s);
}

static void wait_for_work(srv *s) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_nsec += (long)(WATCH_INTERVAL * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&s->wake, &s->mu, &ts);
}

static void *engine_main(void *arg) {
    srv *s = arg;
    double last_watch = kvlm_now();
    for (;;) {
        const int busy = kvlm_sched_has_work(s->sched);
        pthread_mutex_lock(&s->mu);
        if (!busy && !s->inbox_head && !s->cancel_pending && !s->stopping) wait_for_work(s);
        job *in = s->inbox_head;
        s->inbox_head = s->inbox_tail = NULL;
        s->inbox_len = 0;
        const int cancels = s->cancel_pending, stopping = s->stopping;
        s->cancel_pending = 0;
        pthread_mutex_unlock(&s->mu);
        if (cancels) process_cancels(s);
        while (in) {
            job *next = in->next;
            in->next = NULL;
            if (stopping) reject(s, in, 503, "shutting_down", "the server is shutting down");
            else if (in->measure || in->embed || in->pin) queue_measure(s, in);
            else submit(s, in);
            in = next;
        }
        if (s->measures) run_measures(s);
        if (stopping) {
            while (s->measures) {
                job *j = s->measures;
                s->measures = j->next;
                api_error e;
                api_fail(&e, 503, "shutting_down", NULL, "%s", "the server is shutting down");
                answer_error(s, j, &e);
            }
            fail_all(s, 503, "shutting_down", "the server is shutting down");
            break;
        }
        if (kvlm_sched_has_work(s->sched)) {
            kvlm_error err;
            if (kvlm_sched_step(s->sched, &err) < 0) {
                fprintf(stderr, "kvlm serve: engine step failed: %s\n", err.msg);
                fail_all(s, 500, "engine_error", err.msg);
            }
        }
        publish(s);
        const double now = kvlm_now();
        if (now - last_watch >= WATCH_INTERVAL) {
            watchdog(s);
            last_watch = now;
        }
        stream_tick(s);
    }
    publish(s);
    stream_end_all(s);
    return NULL;
}

int engine_start(srv *s, kvlm_error *err) {
    int rc = pthread_create(&s->engine, NULL, engine_main, s);
    if (rc) return kvlm_error_set(err, KVLM_ERR_SYSTEM, "cannot start the engine thread: %s", strerror(rc));
    s->engine_running = 1;
    return 0;
}

void engine_stop(srv *s) {
    if (!s->engine_running) return;
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->engine, NULL);
    s->engine_running = 0;
}

int engine_enqueue_locked(srv *s, job *j) {
    if (s->stopping) return -1;
    job_ref_locked(j);
    j->next = NULL;
    if (s->inbox_tail) s->inbox_tail->next = j;
    else s->inbox_head = j;
    s->inbox_tail = j;
    s->inbox_len++;
    pthread_cond_signal(&s->wake);
    return 0;
}

void engine_cancel_locked(srv *s, job *j) {
    if (j->cancel_requested) return;
    j->cancel_requested = 1;
    s->cancel_pending = 1;
    pthread_cond_signal(&s->wake);
}
