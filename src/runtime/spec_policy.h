/*
 * The adaptive speculation policy (spec_policy.c): whether a choice drafts
 * at its next decode step, decided from what drafting has yielded for that
 * choice and what a verification step costs on this machine, this model
 * and this batch. Everything here is a pure function of counters and
 * costs passed in; the scheduler measures (it times its engine steps into
 * a spec_costs table) and feeds it, so the rules are tested without
 * timing (tests/test_spec_policy.c).
 *
 * The rule: with G = (tokens per verification step) / (what that step
 * costs, in the choice's plain decode steps), a choice drafts while
 * G > 1 + margin and stops otherwise.
 *
 * - Tokens: each verification step that carried n drafts and kept m of
 *   them yielded m + 1 tokens. The policy keeps, per draft count n, a
 *   decayed count of such steps and of their tokens (recent steps weigh
 *   most, so text that turns repetitive or stops repeating moves it in a
 *   few steps).
 * - Shadow steps: prompt lookup is free to compute, and with a point-mass
 *   draft verification keeps a draft exactly when plain decoding would
 *   have drawn it (runtime/speculative.c), so while a choice does not
 *   draft the scheduler still looks its drafts up and compares them with
 *   the tokens plain decoding draws: the same observation a verification
 *   step would have made, at no cost. A prompt-lookup choice therefore
 *   stops and starts again by measurement alone, never by guessing.
 * - Probes: a draft model's drafts cost draft steps, so there are no
 *   shadow steps; a choice that stopped waits `wait` plain decode steps,
 *   then drafts for probe_steps verification steps and is judged again.
 *   A probe that does not pay doubles the next wait (up to backoff_max),
 *   so a sequence that never repeats pays a few probes in total; a choice
 *   that paid for a while and then stopped starts again from backoff_min.
 * - Cost: cost[n] is what a step carrying n drafts costs in the choice's
 *   plain steps, 1 + P (T(R + n) / T(R) - 1) for a step of R rows without
 *   those drafts, P of them drawing tokens: the drafts' rows slow every
 *   sequence of the step, so under load they must yield more. T comes
 *   from spec_costs, the engine step times measured by rows (plus, for a
 *   draft model, its measured drafting time).
 */
#ifndef KVLM_RUNTIME_SPEC_POLICY_H
#define KVLM_RUNTIME_SPEC_POLICY_H

#include "runtime/speculative.h"

typedef struct spec_policy_params {
    double margin;     /* G must exceed 1 + margin to draft (0.1) */
    double decay;      /* weight an observation keeps per later one (0.8) */
    double min_weight; /* decayed observations needed before a judgement (1.5) */
    int probe_steps;   /* probes: verification steps before the first judgement (2) */
    int backoff_min;   /* probes: plain steps before the first re-probe (32) */
    int backoff_max;   /* probes: the longest wait (1024) */
} spec_policy_params;

/* The defaults above. */
spec_policy_params spec_policy_defaults(void);

typedef struct spec_policy {
    float tok[SPEC_MAX_K + 1]; /* decayed tokens of observations that carried n drafts */
    float cnt[SPEC_MAX_K + 1]; /* decayed number of such observations */
    int shadow;        /* 1: observations keep coming while off (prompt lookup) */
    int on;            /* drafting */
    int probe;         /* probes: verification steps left before a judgement (0: none) */
    int paid;          /* the current drafting run has been judged worth it */
    int wait;          /* probes: plain steps left before the next probe */
    int backoff;       /* probes: the wait after the next probe that does not pay */
    int episodes;      /* times drafting stopped */
} spec_policy;

/* A choice's state at its start: a shadowed choice (prompt lookup) starts
 * off and turns on once its observations say drafting pays; a probed one
 * (draft model) starts with a probe. */
void spec_policy_init(spec_policy *p, const spec_policy_params *prm, int shadow);

/* G for costs cost[1..k] (cost[n]: a step with n drafts in plain steps;
 * entries of draft counts never observed are not read); 0 before any
 * observation. */
double spec_policy_gain(const spec_policy *p, const double *cost, int k);

/* One observation: a step (real or shadow) that carried n >= 1 drafts and
 * kept m of them. A real one (a verification step) then judges: drafting
 * stops when G <= 1 + margin once the observations weigh min_weight and no
 * probe is under way. */
void spec_policy_observe(spec_policy *p, const spec_policy_params *prm, int n, int m, int real, const double *cost,
                         int k);

/* Before a decode step: 1 when the choice drafts at it. A shadowed choice
 * that is off turns on when G > 1 + margin; a probed one counts the step
 * towards its wait and starts a probe when it is over. */
int spec_policy_wants(spec_policy *p, const spec_policy_params *prm, const double *cost, int k);

/* A shadow draft shadow[0..n) that predicted tokens[at..]: the drafts a
 * verification step would have kept (the leading ones plain decoding drew)
 * once that is decided, i.e. once the first token that differs, or the one
 * after all n, has been drawn (tokens holds n_tokens); -1 before. */
int spec_shadow_kept(const int32_t *tokens, int n_tokens, int at, const int32_t *shadow, int n);

/* ------------------------------------------------------------ step costs */

#define SPEC_COST_ROWS 256

/* Engine step times by rows, for steps whose every row was a decode or a
 * draft (each row with its logits): per row count a running estimate that
 * follows faster samples quickly and slower ones slowly (interference
 * only slows a step). A row count not sampled among the last
 * SPEC_COST_HORIZON samples counts as unmeasured: a time measured once
 * (perhaps a cold or descheduled step) cannot keep a scheduler from
 * drafting for good; the drafts that follow the prior measure it again. */
#define SPEC_COST_HORIZON 256
typedef struct spec_costs {
    double t[SPEC_COST_ROWS + 1]; /* seconds; 0: never measured */
    long when[SPEC_COST_ROWS + 1]; /* the sample count at the last sample of each row count */
    long samples;
    double draft_s;    /* a draft model's drafting time per job (0: none measured) */
} spec_costs;

/* Records one step of `rows` rows (at most SPEC_COST_ROWS; more are not
 * recorded) that took `seconds`. */
void spec_costs_record(spec_costs *c, int rows, double seconds);
/* Records one draft-model call that drafted for `jobs` choices. */
void spec_costs_record_draft(spec_costs *c, int jobs, double seconds);
/* The estimated time of a step of `rows` rows: measured (within the
 * horizon), else interpolated between the nearest measured row counts; past the largest measured, that
 * one's time and a quarter of it per row more (a prior that only gates
 * the first drafts: they measure the real time); below the smallest, that
 * one's; 0 when nothing is measured. */
double spec_costs_time(const spec_costs *c, int rows);
/* 1 when a step of `rows` rows has no sample among the last `horizon`
 * (or none at all): the scheduler then plans a step without drafts, so
 * the cost of drafts is measured against a current plain step. */
int spec_costs_stale(const spec_costs *c, int rows, long horizon);
/* cost[n] for n = 1..k of a choice whose drafts join a step of `rows`
 * rows without them, `tokens` of which draw a token (the cost definition
 * above; draft_model adds the drafting time). A ratio below 1 (noise) is
 * taken as 1; with nothing measured the cost is 1 (the first steps
 * measure it). */
void spec_costs_fill(const spec_costs *c, int rows, int tokens, int draft_model, int k, double *cost);

/* Tests and measurements: the scheduler uses c as its step times from now
 * on, no step changing them (NULL: measure again, from nothing), so the
 * policy's decisions depend on the tokens alone (runtime/scheduler.c). */
void sched_pin_costs(kvlm_sched *s, const spec_costs *c);

#endif
