/*
 * The attention kernel's speed through a block table against the same
 * context stored contiguously (kvlm_measure_attention, see kvlm.h).
 *
 * Both layouts are real KV pools built by kvlm_kv_create for the model, so
 * the bytes sit exactly where the engine puts them: the contiguous one is a
 * single block of ctx_len tokens (each head's keys are one run of memory),
 * the paged one is ctx_len / block_size blocks taken, when scattered, in
 * random order from a pool four times larger. Both hold the same numbers,
 * and one pass is what the engine's decode does for the query heads of one
 * KV group: the selected kernels' attn_scores_heads per block, one softmax
 * per head over the context, attn_accum_heads per block (times are per
 * query head). A sweep visits every layer and KV head in turn, so a long
 * context streams from memory as in a decode step; the hot
 * variant repeats layer 0, head 0, whose context then stays in the CPU
 * caches and only the cost of walking the table remains.
 *
 * Rounds alternate the two layouts (and which goes first) so that noise on a
 * shared machine hits both alike; the best and the median round are kept,
 * and the median over rounds of paged / contiguous within the same round
 * (a paired ratio, robust to slow drift in the machine's load).
 * Runs on the calling thread only and counts that thread's CPU time. The
 * outputs of the two layouts are compared, so a wrong block table cannot
 * produce a flattering figure.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "error.h"
#include "kernels/kernels.h"
#include "kvlm_measure.h"
#include "runtime/attention.h"

#define SCATTER_SPREAD 4        /* paged pool = blocks needed x this, when scattered */
#define MAX_ROUNDS 1000
#define ROUND_TARGET_S 0.010    /* a timed round lasts at least this long */

typedef struct attn_layout {
    kvlm_kv *kv;
    int *table;                 /* block of each block_size tokens */
    int block_size, n_blocks;
} attn_layout;

static uint64_t next_rand(uint64_t *s) {
    uint64_t x = (*s += 0x9e3779b97f4a7c15ull);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static float rand_unit(uint64_t *s) { return (float)((next_rand(s) >> 40) * (1.0 / 16777216.0)) - 0.5f; }

/* A pool for ctx_len tokens in blocks of bs, the table scattered or in order. */
static int layout_open(attn_layout *a, const kvlm_model *m, const kvlm_attn_bench_options *o, int bs,
                       int scatter, kvlm_error *err) {
    const int nb = (o->ctx_len + bs - 1) / bs;
    const size_t pool = (size_t)nb * (scatter ? SCATTER_SPREAD : 1);
    kvlm_kv_options ko = kvlm_kv_default_params();
    ko.dtype = o->kv_dtype;
    ko.block_size = bs;
    ko.n_blocks = pool;
    ko.max_seqs = 1;
    ko.no_prefix_cache = 1;
    memset(a, 0, sizeof *a);
    a->block_size = bs;
    a->n_blocks = nb;
    if (!(a->kv = kvlm_kv_create(m, &ko, err))) return err->code;
    int *perm = malloc(pool * sizeof(int));
    if (!perm) return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < pool; i++) perm[i] = (int)i;
    uint64_t s = o->seed ^ 0x5eedu;
    for (size_t i = pool; scatter && i > 1; i--) { /* Fisher-Yates */
        size_t j = (size_t)(next_rand(&s) % i);
        int t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
    a->table = perm; /* the first nb entries are the table */
    return KVLM_OK;
}

static void layout_close(attn_layout *a) {
    kvlm_kv_free(a->kv);
    free(a->table);
    memset(a, 0, sizeof *a);
}

/* Writes the same pseudo-random K and V into a layout for every position,
 * layer and KV head (the generator runs in one fixed order). */
static void layout_fill(attn_layout *a, const kern_ops *ops, const kvlm_config *c, const kvlm_attn_bench_options *o,
                        float *row) {
    const int hd = c->head_dim;
    uint64_t s = o->seed;
    for (int p = 0; p < o->ctx_len; p++)
        for (int l = 0; l < c->n_layer; l++)
            for (int h = 0; h < c->n_kv_head; h++)
                for (int v = 0; v < 2; v++) {
                    for (int i = 0; i < hd; i++) row[i] = rand_unit(&s);
                    attn_store_at(ops, a->kv, a->table, p, l, h, v, row);
                }
}

/* One pass per layer and KV head over the query heads of its group, as
 * the engine's decode walks a block table (hot: one query head of layer
 * 0, the same K/V every time); out receives n_layer x n_head x head_dim
 * floats, scores holds group x n. */
static void sweep(const attn_layout *a, const kern_ops *ops, const kvlm_config *c, int hot, int n, const float *q,
                  float *scores, float *out) {
    const kvlm_kv *kv = a->kv;
    const int hd = c->head_dim, group = hot ? 1 : c->n_head / c->n_kv_head;
    const int layers = hot ? 1 : c->n_layer, kv_heads = hot ? 1 : c->n_kv_head;
    const float scale = 1.0f / sqrtf((float)hd);
    for (int l = 0; l < layers; l++)
        for (int kh = 0; kh < kv_heads; kh++) {
            const size_t h0 = (size_t)l * c->n_head + (size_t)kh * group;
            attn_heads(ops, kv, a->table, l, kh, group, q + h0 * hd, n, scale, scores, out + h0 * hd);
        }
}

/* CPU time of the calling thread: on a shared machine the time slices
 * other processes take are not counted, only the kernel's own work (and
 * whatever they did to the caches). */
static double thread_cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double timed_sweeps(const attn_layout *a, const kern_ops *ops, const kvlm_config *c, int hot, int n,
                           int reps, const float *q, float *scores, float *out) {
    double t0 = thread_cpu_now();
    for (int r = 0; r < reps; r++) sweep(a, ops, c, hot, n, q, scores, out);
    return thread_cpu_now() - t0;
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int check_options(const kvlm_config *c, const kvlm_attn_bench_options *o, kvlm_error *err) {
    if (o->ctx_len < 1 || o->ctx_len > c->n_ctx)
        return kvlm_error_set(err, KVLM_ERR_ARG, "attention benchmark: ctx_len %d is outside [1, %d] (the context window)",
                              o->ctx_len, c->n_ctx);
    if (o->block_size < 1 || o->block_size > 4096)
        return kvlm_error_set(err, KVLM_ERR_ARG, "attention benchmark: block_size %d is outside [1, 4096]", o->block_size);
    if (o->rounds < 1 || o->rounds > MAX_ROUNDS)
        return kvlm_error_set(err, KVLM_ERR_ARG, "attention benchmark: rounds %d is outside [1, %d]", o->rounds,
                              MAX_ROUNDS);
    if (o->kv_dtype != KVLM_F32 && o->kv_dtype != KVLM_F16 && o->kv_dtype != KVLM_Q8_0)
        return kvlm_error_set(err, KVLM_ERR_ARG, "attention benchmark: kv dtype %s is not f32, f16 or q8_0",
                              kvlm_dtype_name(o->kv_dtype));
    return KVLM_OK;
}

kvlm_attn_bench_options kvlm_attn_bench_default_params(void) {
    return (kvlm_attn_bench_options){
        .ctx_len = 0, .block_size = 16, .scatter = 1, .rounds = 5, .hot = 0, .isa = KVLM_ISA_AUTO, .kv_dtype = KVLM_F32,
        .seed = 1};
}

int kvlm_measure_attention(const kvlm_model *m, const kvlm_attn_bench_options *opt, kvlm_attn_bench_result *res,
                           kvlm_error *err) {
    const kvlm_config *c = kvlm_model_config(m);
    kvlm_attn_bench_options o = *opt;
    if (o.block_size == 0) o.block_size = 16;
    if (o.rounds == 0) o.rounds = 5;
    if (o.ctx_len == 0) o.ctx_len = c->n_ctx;
    int rc = check_options(c, &o, err);
    if (rc) return rc;
    const kern_ops *ops = kern_select(o.isa);
    if (!ops)
        return kvlm_error_set(err, KVLM_ERR_UNSUPPORTED, "this CPU does not support the %s kernels", kvlm_isa_name(o.isa));
    memset(res, 0, sizeof *res);
    const size_t all_heads = (size_t)c->n_layer * c->n_head, hd = (size_t)c->head_dim;
    const size_t heads = o.hot ? 1 : all_heads; /* passes per sweep */
    attn_layout lay[2] = {{0}}; /* 0 contiguous, 1 paged */
    float *q = malloc(all_heads * hd * sizeof(float)), *scores = malloc((size_t)o.ctx_len * (size_t)(c->n_head / c->n_kv_head) * sizeof(float));
    float *row = malloc(hd * sizeof(float));
    float *out[2] = {calloc(all_heads * hd, sizeof(float)), calloc(all_heads * hd, sizeof(float))};
    double *t[2] = {malloc((size_t)o.rounds * sizeof(double)), malloc((size_t)o.rounds * sizeof(double))};
    if (!q || !scores || !row || !out[0] || !out[1] || !t[0] || !t[1]) {
        rc = kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
        goto done;
    }
    if ((rc = layout_open(&lay[0], m, &o, o.ctx_len, 0, err)) ||
        (rc = layout_open(&lay[1], m, &o, o.block_size, o.scatter, err)))
        goto done;
    layout_fill(&lay[0], ops, c, &o, row);
    layout_fill(&lay[1], ops, c, &o, row);
    uint64_t s = o.seed + 99;
    for (size_t i = 0; i < all_heads * hd; i++) q[i] = 4.0f * rand_unit(&s);
    /* Warm-up and calibration: enough sweeps per round to outlast the clock's noise. */
    double one = timed_sweeps(&lay[0], ops, c, o.hot, o.ctx_len, 1, q, scores, out[0]);
    timed_sweeps(&lay[1], ops, c, o.hot, o.ctx_len, 1, q, scores, out[1]);
    int reps = one >= ROUND_TARGET_S ? 1 : (int)ceil(ROUND_TARGET_S / (one > 1e-9 ? one : 1e-9));
    if (reps > 100000) reps = 100000;
    for (int r = 0; r < o.rounds; r++)
        for (int k = 0; k < 2; k++) {
            int which = (r + k) % 2; /* alternate which layout goes first */
            double dt = timed_sweeps(&lay[which], ops, c, o.hot, o.ctx_len, reps, q, scores, out[which]);
            t[which][r] = dt / (reps * (double)heads);
        }
    float diff = 0;
    for (size_t i = 0; i < all_heads * hd; i++) diff = fmaxf(diff, fabsf(out[0][i] - out[1][i]));
    if (!(diff <= 1e-5f)) {
        rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "attention benchmark: paged and contiguous outputs differ by %g", diff);
        goto done;
    }
    res->passes_per_round = (long)reps * (long)heads;
    res->max_abs_diff = diff;
    double ratio[MAX_ROUNDS];
    for (int r = 0; r < o.rounds; r++) ratio[r] = t[1][r] / t[0][r];
    res->paired_ratio = median(ratio, o.rounds);
    for (int k = 0; k < 2; k++) {
        double best = t[k][0];
        for (int r = 1; r < o.rounds; r++) best = fmin(best, t[k][r]);
        double med = median(t[k], o.rounds);
        if (k == 0) res->contiguous_s = best, res->contiguous_median_s = med;
        else res->paged_s = best, res->paged_median_s = med;
    }
done:
    layout_close(&lay[0]);
    layout_close(&lay[1]);
    free(q);
    free(scores);
    free(row);
    free(out[0]);
    free(out[1]);
    free(t[0]);
    free(t[1]);
    return rc;
}
