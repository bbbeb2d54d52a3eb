/*
 * The mixture-of-experts FFN of one layer over a step's rows (moe_ffn.c):
 * route each row to its experts, group the rows by expert so that every
 * selected expert's weights are read once per step, run each expert over
 * its rows with the ordinary matmul kernels, and sum the weighted outputs
 * (plus Qwen2-MoE's gated shared expert). Scratch lives in a moe_work the
 * engine owns and sizes for its largest step.
 */
#ifndef KVLM_RUNTIME_MOE_FFN_H
#define KVLM_RUNTIME_MOE_FFN_H

#include "kernels/kernels.h"
#include "model/model.h"

typedef struct moe_work {
    int cap_rows;             /* step rows the buffers hold */
    float *logits;            /* [rows, n_expert] router outputs, then probabilities */
    int *sel;                 /* [rows * k] chosen experts of each row, in rank order */
    float *wts;               /* [rows * k] their weights */
    int *slot;                /* [rows * k] the grouped row each (row, rank) went to */
    int *start;               /* [n_expert + 1] first grouped row of each expert */
    int *fill;                /* [n_expert] */
    float *g;                 /* [rows * k, C] gathered inputs, then expert outputs */
    float *ff;                /* [rows * k, 2 F_e] gate | up */
    float *act;               /* [rows * k, F_e] */
    float *sh_ff, *sh_act, *sh_out; /* shared expert: [rows, 2 S], [rows, S], [rows, C] */
    long long routed;         /* (row, expert) pairs run since creation */
    long long expert_runs;    /* expert weight passes since creation (one per selected expert per step) */
} moe_work;

/* Buffers for steps of up to rows rows; 0 or KVLM_ERR_NOMEM (work is then
 * empty but valid). */
int moe_work_reserve(moe_work *w, const kvlm_config *c, int rows, kvlm_error *err);
void moe_work_free(moe_work *w);

/* out[t] = sum over row t's chosen experts of weight x expert(h[t]) (+ the
 * gated shared expert), for rows 0..T-1 of h ([T, C]); out may be h. */
void moe_ffn(const kern_ops *ops, kern_team *team, moe_work *w, const kvlm_config *c, const model_moe *moe,
             const float *h, int T, float *out);

#endif
