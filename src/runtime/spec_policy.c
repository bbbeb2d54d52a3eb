/*
 * The adaptive speculation policy and the step-time table it reads (see
 * spec_policy.h for the rule and why). Pure functions of their inputs:
 * nothing here reads a clock, a model or the scheduler.
 *
 * Invariants: tok[n] >= cnt[n] >= 0 (a step yields at least one token);
 * a probed choice that is off has wait > 0 or starts a probe at its next
 * decode step; backoff stays within [backoff_min, backoff_max].
 */
#include "runtime/spec_policy.h"

#include <string.h>

spec_policy_params spec_policy_defaults(void) {
    return (spec_policy_params){.margin = 0.1, .decay = 0.8, .min_weight = 1.5, .probe_steps = 2,
                                .backoff_min = 32, .backoff_max = 1024};
}

void spec_policy_init(spec_policy *p, const spec_policy_params *prm, int shadow) {
    memset(p, 0, sizeof *p);
    p->shadow = shadow;
    p->backoff = prm->backoff_min;
    if (!shadow) {
        p->on = 1;
        p->probe = prm->probe_steps;
    }
}

static double weight(const spec_policy *p, int k) {
    double w = 0;
    for (int n = 1; n <= k; n++) w += p->cnt[n];
    return w;
}

double spec_policy_gain(const spec_policy *p, const double *cost, int k) {
    double tokens = 0, steps = 0;
    for (int n = 1; n <= k; n++) {
        if (p->cnt[n] <= 0) continue;
        tokens += p->tok[n];
        steps += p->cnt[n] * (cost[n] > 1 ? cost[n] : 1);
    }
    return steps > 0 ? tokens / steps : 0;
}

/* Drafting stops: a probed choice waits, longer after each probe that did
 * not pay (a run that paid starts over from the shortest wait). */
static void stop(spec_policy *p, const spec_policy_params *prm) {
    p->on = 0;
    p->probe = 0;
    p->episodes++;
    if (p->shadow) return;
    if (p->paid) p->backoff = prm->backoff_min;
    p->wait = p->backoff;
    p->backoff = p->backoff * 2 < prm->backoff_max ? p->backoff * 2 : prm->backoff_max;
    p->paid = 0;
}

void spec_policy_observe(spec_policy *p, const spec_policy_params *prm, int n, int m, int real, const double *cost,
                         int k) {
    if (n < 1 || n > SPEC_MAX_K || m < 0 || m > n) return;
    for (int i = 1; i <= SPEC_MAX_K; i++) {
        p->tok[i] *= (float)prm->decay;
        p->cnt[i] *= (float)prm->decay;
    }
    p->tok[n] += (float)(m + 1);
    p->cnt[n] += 1;
    if (!real || !p->on) return;
    if (p->probe > 0 && --p->probe > 0) return;
    if (weight(p, k) < prm->min_weight) return;
    if (spec_policy_gain(p, cost, k) > 1 + prm->margin) p->paid = 1;
    else stop(p, prm);
}

int spec_policy_wants(spec_policy *p, const spec_policy_params *prm, const double *cost, int k) {
    if (p->on) return 1;
    if (p->shadow) {
        if (weight(p, k) >= prm->min_weight && spec_policy_gain(p, cost, k) > 1 + prm->margin) p->on = 1;
        return p->on;
    }
    if (p->wait > 0) {
        p->wait--;
        return 0;
    }
    p->on = 1;
    p->probe = prm->probe_steps;
    return 1;
}

int spec_shadow_kept(const int32_t *tokens, int n_tokens, int at, const int32_t *shadow, int n) {
    const int seen = n_tokens - at;
    int m = 0;
    while (m < n && m < seen && tokens[at + m] == shadow[m]) m++;
    return n > 0 && seen >= m + 1 ? m : -1;
}

/* ------------------------------------------------------------ step costs */

void spec_costs_record(spec_costs *c, int rows, double seconds) {
    if (rows < 1 || rows > SPEC_COST_ROWS || !(seconds > 0)) return;
    double *t = &c->t[rows];
    /* Interference on a shared machine only ever slows a step: a faster
     * sample moves the estimate half way, a slower one a tenth of the way
     * and by at most its own size, so a cold first step or a descheduled
     * one fades in a few samples. */
    if (*t > 0 && c->samples - c->when[rows] <= SPEC_COST_HORIZON)
        *t += seconds < *t ? 0.5 * (seconds - *t) : 0.1 * ((seconds < 2 * *t ? seconds : 2 * *t) - *t);
    else
        *t = seconds;
    c->when[rows] = ++c->samples;
}

/* A row count's time, if it was measured within the horizon. */
static double fresh(const spec_costs *c, int rows) {
    return c->t[rows] > 0 && c->samples - c->when[rows] <= SPEC_COST_HORIZON ? c->t[rows] : 0;
}

void spec_costs_record_draft(spec_costs *c, int jobs, double seconds) {
    if (jobs < 1 || !(seconds > 0)) return;
    const double x = seconds / jobs;
    c->draft_s = c->draft_s > 0 ? c->draft_s + 0.25 * (x - c->draft_s) : x;
}

double spec_costs_time(const spec_costs *c, int rows) {
    if (rows < 1) rows = 1;
    if (rows > SPEC_COST_ROWS) rows = SPEC_COST_ROWS;
    if (fresh(c, rows) > 0) return c->t[rows];
    int lo = rows - 1, hi = rows + 1;
    while (lo >= 1 && !(fresh(c, lo) > 0)) lo--;
    while (hi <= SPEC_COST_ROWS && !(fresh(c, hi) > 0)) hi++;
    if (lo >= 1 && hi <= SPEC_COST_ROWS) return c->t[lo] + (c->t[hi] - c->t[lo]) * (rows - lo) / (double)(hi - lo);
    /* past the largest row count measured: a quarter of that step per row
     * more, until a step of this many rows measures it */
    if (lo >= 1) return c->t[lo] * (1 + 0.25 * (rows - lo));
    return hi <= SPEC_COST_ROWS ? c->t[hi] : 0;
}

int spec_costs_stale(const spec_costs *c, int rows, long horizon) {
    if (rows < 1 || rows > SPEC_COST_ROWS) return 0;
    return !(fresh(c, rows) > 0) || c->samples - c->when[rows] > horizon;
}

void spec_costs_fill(const spec_costs *c, int rows, int tokens, int draft_model, int k, double *cost) {
    const double t0 = spec_costs_time(c, rows);
    for (int n = 1; n <= k; n++) {
        double x = 1;
        if (t0 > 0) {
            const double r = spec_costs_time(c, rows + n) / t0;
            x = 1 + tokens * (r > 1 ? r - 1 : 0) + (draft_model ? tokens * c->draft_s / t0 : 0);
        }
        cost[n] = x;
    }
}
