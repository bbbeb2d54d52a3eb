/*
 * Mixture-of-experts FFN (see moe_ffn.h). One step, T rows of h:
 *
 * 1. Router: logits = h x router^T (+ bias) ([T, n_expert], one matmul),
 *    then per row (a parallel region when the step is large) softmax over
 *    all experts, the k = n_expert_used largest kept in rank order (ties to
 *    the lower expert id), renormalised to sum 1 when expert_norm_topk; or
 *    (moe->topk_softmax, gpt-oss) the k largest logits, then a softmax over
 *    those k.
 * 2. Grouping: the (row, rank) pairs are counted per expert and laid out
 *    expert by expert (a counting sort, serial: T x k integers), and each
 *    pair's input row is copied into its expert's contiguous segment of g.
 * 3. Experts: for each expert with at least one row, gate and up over its
 *    segment (+ the expert's biases), SwiGLU (or the clamped one of
 *    moe->limit), down (+ bias): the expert's bytes stream once per step however
 *    many rows chose it (what llama.cpp's MUL_MAT_ID does), and an expert no
 *    row chose is never read, so decode reads only the k selected experts.
 *    Every weight dtype and ISA of kern_matmul works. Two schedules, the
 *    same arithmetic per output: when some expert has more than
 *    SMALL_ROWS rows (prefill), each matmul is one kern_matmul over the
 *    segment with the whole team (its prepared activations and panels pay
 *    off); otherwise (decode, small batches) every selected expert's work
 *    goes into two regions, gate|up|SwiGLU by chunks of F_e rows, then down
 *    by chunks of C rows, each item a one-thread product on a row view of
 *    the expert: 2 regions per layer instead of 3 per expert, so waking
 *    the team does not cost more than the small matmuls themselves. Both
 *    are stealable (staged: the inputs copied into the stage, or where the
 *    ISA prepares its activations, int8 codes on the -vnni levels, each
 *    expert's prepared rows, made once per region on the caller and
 *    shared by gate and up, instead of once per item and matrix), as the
 *    dense products of decode are, so a descheduled worker costs the step
 *    one item's time, not the OS's time slice.
 * 4. Sum: out[t] = sum over ranks j of wts[t, j] x g[slot(t, j)], in rank
 *    order, so the result does not depend on how rows were grouped; plus
 *    sigmoid(h[t] . sh_router) x shared(h[t]) when there is a shared expert.
 *
 * out may alias h: h is last read before the sum writes out.
 */
#include "runtime/moe_ffn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "kernels/team.h"

static float *alloc_f(size_t n) {
    const size_t bytes = (n * sizeof(float) + 63) & ~(size_t)63;
    return aligned_alloc(64, bytes ? bytes : 64);
}

void moe_work_free(moe_work *w) {
    free(w->logits);
    free(w->sel);
    free(w->wts);
    free(w->slot);
    free(w->start);
    free(w->fill);
    free(w->g);
    free(w->ff);
    free(w->act);
    free(w->sh_ff);
    free(w->sh_act);
    free(w->sh_out);
    const long long routed = w->routed, runs = w->expert_runs;
    memset(w, 0, sizeof *w);
    w->routed = routed, w->expert_runs = runs;
}

int moe_work_reserve(moe_work *w, const kvlm_config *c, int rows, kvlm_error *err) {
    if (!c->n_expert || rows <= w->cap_rows) return KVLM_OK;
    moe_work_free(w);
    const size_t T = (size_t)rows, E = (size_t)c->n_expert, k = (size_t)c->n_expert_used, C = (size_t)c->n_embd;
    const size_t F = (size_t)c->n_ff_expert, S = (size_t)c->n_ff_shared;
    w->logits = alloc_f(T * E);
    w->sel = malloc(T * k * sizeof(int));
    w->wts = malloc(T * k * sizeof(float));
    w->slot = malloc(T * k * sizeof(int));
    w->start = malloc((E + 1) * sizeof(int));
    w->fill = malloc(E * sizeof(int));
    w->g = alloc_f(T * k * C);
    w->ff = alloc_f(T * k * 2 * F);
    w->act = alloc_f(T * k * F);
    int ok = w->logits && w->sel && w->wts && w->slot && w->start && w->fill && w->g && w->ff && w->act;
    if (S) {
        w->sh_ff = alloc_f(T * 2 * S);
        w->sh_act = alloc_f(T * S);
        w->sh_out = alloc_f(T * C);
        ok = ok && w->sh_ff && w->sh_act && w->sh_out;
    }
    if (!ok) {
        moe_work_free(w);
        return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory for the experts' activations of %d rows", rows);
    }
    w->cap_rows = rows;
    return KVLM_OK;
}

typedef struct route_job {
    const kern_ops *ops;
    moe_work *w;
    const kvlm_config *c;
    const model_moe *moe;
} route_job;

/* Softmax, top k in rank order, optional renormalisation: row t. */
static void route_row(void *ctx, int t, int worker) {
    (void)worker;
    const route_job *j = ctx;
    const int E = j->c->n_expert, k = j->c->n_expert_used;
    float *p = j->w->logits + (size_t)t * E;
    int *sel = j->w->sel + (size_t)t * k;
    float *wt = j->w->wts + (size_t)t * k;
    const int after = j->moe->topk_softmax;
    if (!after) kern_softmax(j->ops, p, E);
    double sum = 0;
    for (int r = 0; r < k; r++) {
        int best = -1;
        for (int e = 0; e < E; e++) {
            if (best >= 0 && !(p[e] > p[best])) continue;
            int taken = 0;
            for (int q = 0; q < r && !taken; q++) taken = sel[q] == e;
            if (!taken) best = e;
        }
        sel[r] = best;
        wt[r] = p[best];
        sum += p[best];
    }
    if (after) { /* wt holds the k logits, largest first */
        const double top = wt[0];
        sum = 0;
        for (int r = 0; r < k; r++) sum += exp((double)wt[r] - top);
        for (int r = 0; r < k; r++) wt[r] = (float)(exp((double)wt[r] - top) / sum);
    } else if (j->c->expert_norm_topk) {
        for (int r = 0; r < k; r++) wt[r] = (float)(wt[r] / sum);
    }
}

/* The experts' activation over n values: SwiGLU, or gpt-oss's clamped
 * form (llama.cpp's swiglu_oai), g sigmoid(alpha g) (u + 1) with g clamped
 * above and u on both sides at the limit. The clamped form runs on the ISA's
 * SwiGLU: g sigmoid(alpha g) = silu(alpha g) / alpha, so gate and up are
 * rewritten in place (alpha g, u + 1; the caller no longer needs them) and
 * the product scaled by 1 / alpha. */
static void expert_act(const kern_ops *ops, const model_moe *moe, float *gate, float *up, float *act, size_t n) {
    if (!(moe->limit > 0)) {
        ops->swiglu(gate, up, act, n);
        return;
    }
    const float lim = moe->limit, alpha = moe->alpha, inv = 1.0f / alpha;
    for (size_t i = 0; i < n; i++) {
        const float g = gate[i] < lim ? gate[i] : lim;
        const float u = up[i] < -lim ? -lim : up[i] > lim ? lim : up[i];
        gate[i] = alpha * g;
        up[i] = u + 1.0f;
    }
    ops->swiglu(gate, up, act, n);
    if (alpha != 1.0f)
        for (size_t i = 0; i < n; i++) act[i] *= inv;
}

/* Expert e's bias vector of len values from offset off, or NULL. */
static const float *ebias(const float *b, int e, int len, int off) {
    return b ? b + (size_t)e * len + off : NULL;
}

/* Per-row work of a step: gathering a row's inputs into its experts'
 * segments, or summing its experts' outputs (a region when T is large). */
typedef struct row_job {
    moe_work *w;
    const kvlm_config *c;
    const model_moe *moe;
    const float *h;
    float *out;
} row_job;

static void gather_row(void *ctx, int t, int worker) {
    (void)worker;
    const row_job *j = ctx;
    const int k = j->c->n_expert_used, C = j->c->n_embd;
    for (int r = 0; r < k; r++)
        memcpy(j->w->g + (size_t)j->w->slot[t * k + r] * C, j->h + (size_t)t * C, (size_t)C * sizeof(float));
}

/* Counting sort of the (row, rank) pairs by expert (serial: T x k
 * integers), then each pair's input row copied into its expert's segment
 * of g. */
static void group_rows(kern_team *team, moe_work *w, const kvlm_config *c, const float *h, int T) {
    const int E = c->n_expert, k = c->n_expert_used;
    memset(w->fill, 0, (size_t)E * sizeof(int));
    for (int i = 0; i < T * k; i++) w->fill[w->sel[i]]++;
    w->start[0] = 0;
    for (int e = 0; e < E; e++) w->start[e + 1] = w->start[e] + w->fill[e], w->fill[e] = 0;
    for (int i = 0; i < T * k; i++) w->slot[i] = w->start[w->sel[i]] + w->fill[w->sel[i]]++;
    row_job j = {w, c, NULL, h, NULL};
    if (T >= 8) kern_team_run(team, T, gather_row, &j);
    else
        for (int t = 0; t < T; t++) gather_row(&j, t, 0);
}

/* out[t]: the weighted expert outputs in rank order, plus the gated
 * shared expert's. */
static void sum_row(void *ctx, int t, int worker) {
    (void)worker;
    const row_job *j = ctx;
    const moe_work *w = j->w;
    const int k = j->c->n_expert_used, C = j->c->n_embd;
    float *o = j->out + (size_t)t * C;
    const float *y0 = w->g + (size_t)w->slot[t * k] * C;
    const float w0 = w->wts[t * k];
    for (int i = 0; i < C; i++) o[i] = w0 * y0[i];
    for (int r = 1; r < k; r++) {
        const float *y = w->g + (size_t)w->slot[t * k + r] * C;
        const float wr = w->wts[t * k + r];
        for (int i = 0; i < C; i++) o[i] += wr * y[i];
    }
    if (j->moe->sh_router) {
        const float *so = w->sh_out + (size_t)t * C;
        for (int i = 0; i < C; i++) o[i] += so[i];
    }
}

#define SMALL_ROWS 8
#define CHUNK_F 64   /* gate/up rows per item of the small schedule */
#define CHUNK_C 128  /* down rows per item */

/* Rows r0 .. r1 - 1 of w, in place. */
static kern_matrix row_view(const kern_matrix *w, int r0, int r1) {
    kern_matrix v = *w;
    v.data = (const char *)w->data + (size_t)r0 * dtype_row_bytes(w->dtype, w->cols, NULL);
    v.rows = r1 - r0;
    v.packed = NULL;
    return v;
}

/* The small schedule runs as two stealable regions (kern_team_stage): a
 * worker the OS deschedules while it holds an item does not hold the step
 * up, the caller computes the item itself. The stage holds the region's
 * context and a copy of its inputs (the gathered rows, then the
 * activations); the weights and biases are the model's, immutable. A
 * worker's item goes to its private buffer (rows of the item's width) and
 * is committed by copy; the caller's straight to the destination. */
typedef struct small_stage {
    const kern_ops *ops;
    const model_moe *moe;
    float *dst;              /* w->act (gate|up region) or w->g (down) */
    int C, F;
    int chunks, width, ld;   /* items per expert, output columns per item, dst's row length */
    int n_active;
    const int *ex;           /* [n_active] the active experts, in expert order */
    const int *start;        /* [n_expert + 1] first gathered row of each expert */
    const float *x;          /* [rows, K] the inputs: the active experts' segments from row 0 */
    const unsigned char *prep; /* or NULL: x's prepared form (kern_ops.matmul_prep), expert by expert */
    const size_t *poff;      /* [n_active] where each active expert's prepared rows start in prep */
} small_stage;

/* The item's expert, its first gathered row and row count, and its output
 * columns o0 .. o1. */
static int small_item(const small_stage *j, int item, int *s0, int *n, int *o0, int *o1) {
    const int e = j->ex[item / j->chunks];
    *s0 = j->start[e], *n = j->start[e + 1] - *s0;
    *o0 = (item % j->chunks) * j->width;
    *o1 = *o0 + j->width < j->ld ? *o0 + j->width : j->ld;
    return e;
}

/* One item's product on one thread: the n gathered rows from s0 (K
 * values each) against the row view w, from x's prepared form when the
 * region has one (made once per region, not once per item), else from x. */
static void small_matmul(const small_stage *j, int item, int s0, int n, int K, const kern_matrix *w,
                         const float *bias, float *y, int ldy) {
    if (j->prep) {
        j->ops->matmul_rows_prep(j->prep + j->poff[item / j->chunks], NULL, w, 0, w->rows, bias, y, ldy);
        return;
    }
    kern_team solo = {.threads = 1};
    kern_matmul(j->ops, &solo, j->x + (size_t)s0 * K, n, w, bias, y, ldy);
}

static void small_gate_up(const void *ctx, int item, int worker, void *out) {
    (void)worker;
    const small_stage *j = ctx;
    int s0, n, f0, f1;
    const int e = small_item(j, item, &s0, &n, &f0, &f1), C = j->C, F = j->F;
    const kern_matrix g = row_view(&j->moe->gate[e], f0, f1), u = row_view(&j->moe->up[e], f0, f1);
    float ff[SMALL_ROWS * 2 * CHUNK_F];
    small_matmul(j, item, s0, n, C, &g, ebias(j->moe->gate_b, e, F, f0), ff, 2 * CHUNK_F);
    small_matmul(j, item, s0, n, C, &u, ebias(j->moe->up_b, e, F, f0), ff + CHUNK_F, 2 * CHUNK_F);
    float *act = out ? (float *)out : j->dst + (size_t)s0 * F + f0;
    const size_t lda = out ? CHUNK_F : (size_t)F;
    for (int r = 0; r < n; r++)
        expert_act(j->ops, j->moe, ff + (size_t)r * 2 * CHUNK_F, ff + (size_t)r * 2 * CHUNK_F + CHUNK_F,
                   act + (size_t)r * lda, (size_t)(f1 - f0));
}

/* Down rows c0 .. c1 of the item's expert into its segment of g. */
static void small_down(const void *ctx, int item, int worker, void *out) {
    (void)worker;
    const small_stage *j = ctx;
    int s0, n, c0, c1;
    const int e = small_item(j, item, &s0, &n, &c0, &c1), C = j->C;
    const kern_matrix d = row_view(&j->moe->down[e], c0, c1);
    float *y = out ? (float *)out : j->dst + (size_t)s0 * C + c0;
    small_matmul(j, item, s0, n, j->F, &d, ebias(j->moe->down_b, e, C, c0), y, out ? CHUNK_C : C);
}

/* A worker's item from its private rows (width apart) to the destination. */
static void small_commit(const void *ctx, int item, const void *out) {
    const small_stage *j = ctx;
    int s0, n, o0, o1;
    small_item(j, item, &s0, &n, &o0, &o1);
    for (int r = 0; r < n; r++)
        memcpy(j->dst + (size_t)(s0 + r) * j->ld + o0, (const float *)out + (size_t)r * j->width,
               (size_t)(o1 - o0) * sizeof(float));
}

typedef struct unstaged {
    const small_stage *j;
    kern_steal_task fn;
} unstaged;

static void unstaged_item(void *ctx, int item, int worker) {
    const unstaged *u = ctx;
    u->fn(u->j, item, worker, NULL);
}

/* Expert e's matrix as the items see it (row_view: the file's layout). */
static kern_matrix unpacked(const kern_matrix *mats, int e) {
    kern_matrix m = mats[e];
    m.packed = NULL;
    return m;
}

/* The bytes of the active experts' prepared inputs (each expert's rows of
 * x against its matrix mats[e], and also[e] when not NULL: one prepared
 * form for both, kern_ops.matmul_prep), their offsets in poff; 0 when
 * some expert's product has no prepared form or needs a panel, or also's
 * type or width differs (the items then run kern_matmul on the rows of x). */
static size_t small_prep_bytes(const small_stage *j, const kern_matrix *mats, const kern_matrix *also, size_t *poff) {
    if (!j->ops->matmul_prep_bytes) return 0;
    size_t total = 0;
    for (int i = 0; i < j->n_active; i++) {
        const int e = j->ex[i];
        if (also && (also[e].dtype != mats[e].dtype || also[e].cols != mats[e].cols)) return 0;
        size_t panel = 0;
        const kern_matrix m = unpacked(mats, e);
        const size_t b = j->ops->matmul_prep_bytes(j->start[e + 1] - j->start[e], &m, &panel);
        if (!b || panel) return 0;
        poff[i] = total;
        total += (b + 63) & ~(size_t)63;
    }
    return total;
}

/* One region of the small schedule: the context, the active list, the
 * segment table and the inputs in the stage: x's prepared form for the
 * matrices mats (and also) when the ISA has one (each expert's rows
 * prepared once here, on the caller), else x ([rows, K], the active experts' segments)
 * copied; an unstaged region on the caller's buffers (same items, same
 * bits) when the team has no pool or no memory for the stage. */
static void small_region(kern_team *team, const small_stage *proto, int n_expert, const kern_matrix *mats,
                         const kern_matrix *also, const float *x, int K, kern_steal_task fn) {
    const int na = proto->n_active, items = na * proto->chunks, rows = proto->start[n_expert];
    const size_t head = (sizeof(small_stage) + 63) & ~(size_t)63;
    const size_t tab = (((size_t)na + n_expert + 1) * sizeof(int) + 63) & ~(size_t)63;
    const size_t offs = ((size_t)na * sizeof(size_t) + 63) & ~(size_t)63;
    size_t poff[SMALL_ROWS * 16];
    const size_t pre = na <= SMALL_ROWS * 16 ? small_prep_bytes(proto, mats, also, poff) : 0;
    const size_t xb = pre ? pre : (size_t)rows * K * sizeof(float);
    unsigned char *st = kern_team_stage(team, items, head + tab + offs + xb,
                                        (size_t)SMALL_ROWS * proto->width * sizeof(float));
    if (st) {
        small_stage *j = (small_stage *)st;
        int *ex = (int *)(st + head), *start = ex + na;
        size_t *po = (size_t *)(st + head + tab);
        unsigned char *in = st + head + tab + offs;
        *j = *proto;
        memcpy(ex, proto->ex, (size_t)na * sizeof(int));
        memcpy(start, proto->start, ((size_t)n_expert + 1) * sizeof(int));
        if (pre) {
            memcpy(po, poff, (size_t)na * sizeof(size_t));
            for (int i = 0; i < na; i++) {
                const int e = ex[i], s0 = start[e], n = start[e + 1] - s0;
                const kern_matrix m = unpacked(mats, e);
                proto->ops->matmul_prep(x + (size_t)s0 * K, n, &m, 0, n, in + poff[i]);
            }
            j->prep = in, j->poff = po, j->x = NULL;
        } else {
            memcpy(in, x, xb);
            j->x = (const float *)in;
        }
        j->ex = ex, j->start = start;
        if (kern_team_run_staged(team, items, fn, small_commit) == 0) return;
    }
    small_stage j = *proto;
    j.x = x, j.prep = NULL;
    unstaged u = {&j, fn};
    kern_team_run(team, items, unstaged_item, &u);
}

/* The small schedule over the n_active experts listed in active (in
 * expert order, so their segments of g are contiguous from row 0). */
static void run_small(const kern_ops *ops, kern_team *team, moe_work *w, const kvlm_config *c, const model_moe *moe,
                      const int *active, int n_active) {
    if (!n_active) return;
    const int C = c->n_embd, F = c->n_ff_expert;
    small_stage j = {ops,     moe,    w->act,   C,    F,   (F + CHUNK_F - 1) / CHUNK_F, CHUNK_F, F, n_active,
                     active, w->start, NULL, NULL, NULL};
    small_region(team, &j, c->n_expert, moe->gate, moe->up, w->g, C, small_gate_up);
    j.dst = w->g, j.chunks = (C + CHUNK_C - 1) / CHUNK_C, j.width = CHUNK_C, j.ld = C;
    small_region(team, &j, c->n_expert, moe->down, NULL, w->act, F, small_down);
}

/* down(act(gate(x), up(x))) for n rows of x into y (ldy C); b: the three
 * biases (NULL each when none). */
static void swiglu_mlp(const kern_ops *ops, kern_team *team, const model_moe *moe, const kern_matrix *gate,
                       const kern_matrix *up, const kern_matrix *down, const float *const b[3], const float *x, int n,
                       float *ff, float *act, float *y) {
    const int F = gate->rows;
    kern_matmul(ops, team, x, n, gate, b[0], ff, 2 * F);
    kern_matmul(ops, team, x, n, up, b[1], ff + F, 2 * F);
    for (int r = 0; r < n; r++)
        expert_act(ops, moe, ff + (size_t)r * 2 * F, ff + (size_t)r * 2 * F + F, act + (size_t)r * F, (size_t)F);
    kern_matmul(ops, team, act, n, down, b[2], y, down->rows);
}

void moe_ffn(const kern_ops *ops, kern_team *team, moe_work *w, const kvlm_config *c, const model_moe *moe,
             const float *h, int T, float *out) {
    const int E = c->n_expert, k = c->n_expert_used, C = c->n_embd, F = c->n_ff_expert;
    kern_matmul(ops, team, h, T, &moe->router, moe->router_b, w->logits, E);
    route_job rj = {ops, w, c, moe};
    if (T >= 8) kern_team_run(team, T, route_row, &rj);
    else
        for (int t = 0; t < T; t++) route_row(&rj, t, 0);
    group_rows(team, w, c, h, T);
    int n_active = 0, most = 0;
    for (int e = 0; e < E; e++) {
        const int n = w->start[e + 1] - w->start[e];
        if (n) w->fill[n_active++] = e; /* fill is free after grouping: the active experts */
        if (n > most) most = n;
    }
    w->expert_runs += n_active;
    if (most <= SMALL_ROWS) {
        run_small(ops, team, w, c, moe, w->fill, n_active);
    } else {
        for (int i = 0; i < n_active; i++) {
            const int e = w->fill[i], s0 = w->start[e], n = w->start[e + 1] - s0;
            float *g = w->g + (size_t)s0 * C;
            const float *const b[3] = {ebias(moe->gate_b, e, F, 0), ebias(moe->up_b, e, F, 0), ebias(moe->down_b, e, C, 0)};
            swiglu_mlp(ops, team, moe, &moe->gate[e], &moe->up[e], &moe->down[e], b, g, n, w->ff + (size_t)s0 * 2 * F,
                       w->act + (size_t)s0 * F, g);
        }
    }
    w->routed += (long long)T * k;
    if (moe->sh_router) {
        const float *const none[3] = {NULL, NULL, NULL};
        swiglu_mlp(ops, team, moe, &moe->sh_gate, &moe->sh_up, &moe->sh_down, none, h, T, w->sh_ff, w->sh_act, w->sh_out);
        for (int t = 0; t < T; t++) {
            const float *x = h + (size_t)t * C;
            double z = 0;
            for (int i = 0; i < C; i++) z += (double)x[i] * moe->sh_router[i];
            const float gate = (float)(1.0 / (1.0 + exp(-z)));
            float *so = w->sh_out + (size_t)t * C;
            for (int i = 0; i < C; i++) so[i] *= gate;
        }
    }
    row_job sj = {w, c, moe, h, out};
    if (T >= 8) kern_team_run(team, T, sum_row, &sj);
    else
        for (int t = 0; t < T; t++) sum_row(&sj, t, 0);
}
