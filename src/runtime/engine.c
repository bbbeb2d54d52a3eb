/*
 * The engine step: one forward pass of the model over a batch of sequences,
 * each contributing one or more new tokens (prefill chunks and decode tokens
 * mixed). All rows of the batch go through each weight matrix together, so
 * a step reads the weights once however many sequences it serves. Each
 * item's new positions are reserved in the paged cache first
 * (kv_append_reserve: a full pool fails the step before any work), their K/V
 * written before attention (attn_store_kv), attention reads every
 * sequence's context through its block table (attn_tile_seq for tiles of
 * prefill positions, attn_seq_head for a lone decode row), and the
 * appends are committed after the forward pass. The engine never sees the
 * cache's layout (runtime/kv_layout.h). The engine has one mode: generation
 * without a cache is the caller truncating a sequence to 0 and stepping its
 * whole context again (the scheduler's recompute option).
 *
 * Threads: the engine owns its threads, a pool of its own (kern_team,
 * kernels/team.h) started once at creation: threads - 1 workers plus the
 * thread that calls kvlm_engine_step. Every parallel region, here and in
 * the kernels, is a list of items handed out one at a time, so a worker
 * descheduled by another process loses its share to the others; when
 * workers keep arriving late the pool runs the next regions with fewer
 * threads and probes the larger team again now and then (team.c). Waits
 * spin for at most tens of microseconds, then sleep: an idle engine uses no
 * CPU. Nothing process-wide is read or set (no OpenMP here), so neither
 * another engine nor a host setting changes how many threads a step uses.
 * Items write only their own outputs, so results do not depend on the
 * thread count. Per-thread scratch (attention scores and tiles) is sized for
 * `threads`, the largest worker number + 1. The largest team that actually
 * ran is kept (kvlm_engine_threads_used).
 *
 * Each layer runs as the model's description says (model_layer_attn:
 * window, rotated dimensions and rotary table, query scale, soft-cap,
 * sinks; the model's multipliers, extra norms, MLP activation and final
 * soft-cap); no architecture name is read here.
 *
 * The same step without the output head (engine_step_hidden,
 * runtime/engine_hidden.h) returns every new row's final-normed hidden
 * state instead of logits, for embeddings (runtime/embed.c).
 *
 * Invariant: a failed step leaves every sequence as it was.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/attention.h"
#include "runtime/engine_hidden.h"
#include "error.h"
#include "kernels/cores.h"
#include "kernels/kernels.h"
#include "kernels/quant.h"
#include "kernels/team.h"
#include "runtime/kvcache.h"
#include "runtime/moe_ffn.h"
#include "model/model.h"

typedef struct eng_row {
    int seq, pos, token;
} eng_row;

/* Consecutive positions of one sequence attended together (rows t0 ..
 * t0 + np - 1 of the step); cost: keys the tile reads, to order items. */
typedef struct eng_tile {
    int t0, np;
    long cost;
} eng_tile;

struct kvlm_engine {
    kvlm_model *m;
    kvlm_kv *kv;
    const kern_ops *ops;
    const attn_tile_ops *tops; /* prefill attention kernels of the same ISA */
    kern_team team;       /* the engine's pool, lent to every parallel region of a step */
    int cap_rows;
    eng_row *rows;
    int *logit_rows;      /* indices into rows whose logits are returned */
    int q_dim, kv_dim, qkv_dim, ff_dim, act_dim; /* widths of the activations (ff, act: 1 with no dense MLP) */
    float *x, *h, *qkv, *att, *ff, *act;
    float *rope;          /* per row and rotary table (MODEL_MAX_ROPE x head_dim floats): cos then sin of its angles */
    float *scores;        /* per thread (team.threads of them), n_head / n_kv_head * n_ctx floats */
    eng_tile *tiles;      /* cap_rows of them */
    int tile_pos;         /* positions per attention tile */
    size_t tile_bytes;    /* tile scratch per thread */
    unsigned char *tile_scratch; /* team.threads x tile_bytes */
    float *part_buf;      /* decode attention cut into parts: part_cap items of part_floats */
    int part_cap;
    size_t part_floats;   /* group x (head_dim + 2): a part's outputs, largest scores, sums */
    moe_work moe;         /* a mixture of experts' scratch (runtime/moe_ffn.h) */
};

/* The default thread count: one per physical core the process may run on
 * (its affinity mask, so taskset and cpusets bound it; SMT siblings not
 * counted, kernels/cores.c). Measured on a 2-core machine, 2 threads beat
 * 1 for prefill and decode of GPT-2 and Llama 1B shapes; when another
 * process holds a core, the pool itself runs fewer threads (kernels/team.c). */
int kvlm_default_threads(char *why, size_t why_size) { return kern_default_threads(why, why_size); }

kvlm_engine_options kvlm_engine_default_params(void) {
    return (kvlm_engine_options){.threads = 0, .isa = KVLM_ISA_AUTO};
}

kvlm_engine *kvlm_engine_create(kvlm_model *m, kvlm_kv *kv, const kvlm_engine_options *opt, kvlm_error *err) {
    kvlm_engine_options o = opt ? *opt : kvlm_engine_default_params();
    const kern_ops *ops = kern_select(o.isa);
    if (!ops) {
        kvlm_error_set(err, KVLM_ERR_UNSUPPORTED, "this CPU does not support the %s kernels", kvlm_isa_name(o.isa));
        return NULL;
    }
    if (o.threads < 0 || o.threads > 1024) {
        kvlm_error_set(err, KVLM_ERR_ARG, "threads = %d is outside [0, 1024]", o.threads);
        return NULL;
    }
    const kvlm_config *c = &m->cfg;
    if (!kv_fits_model(kv, m)) {
        kvlm_error_set(err, KVLM_ERR_ARG, "the KV cache was created for a different model");
        return NULL;
    }
    kvlm_engine *e = calloc(1, sizeof *e);
    if (!e) { kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory"); return NULL; }
    e->m = m;
    e->kv = kv;
    e->q_dim = c->n_head * c->head_dim;
    e->kv_dim = c->n_kv_head * c->head_dim;
    e->qkv_dim = e->q_dim + 2 * e->kv_dim;
    e->ff_dim = m->layers[0].w_gate.data || m->layers[0].w_gate_up.data ? 2 * c->n_ff : c->n_ff; /* gate | up */
    e->act_dim = c->n_ff;
    int dense = 0; /* a layer with a dense MLP: a mixture of experts keeps its activations in moe_work */
    for (int l = 0; l < c->n_layer; l++) dense |= !m->layers[l].moe;
    if (!dense) e->ff_dim = e->act_dim = 1;
    e->ops = ops;
    const int threads = o.threads ? o.threads : kern_default_threads(NULL, 0);
    if (kern_team_open(&e->team, threads)) {
        kvlm_error_set(err, KVLM_ERR_NOMEM, "could not start %d engine threads", threads);
        kvlm_engine_free(e);
        return NULL;
    }
    e->scores = malloc((size_t)e->team.threads * (c->n_head / c->n_kv_head) * c->n_ctx * sizeof(float));
    /* Tiles of about 64 query rows (positions x the query heads of a KV
     * group): the tile's outputs and queries stay in L1/L2 while each KV
     * chunk is widened once for all of them. */
    const int group = c->n_head / c->n_kv_head;
    e->tops = attn_tile_select(ops->isa);
    e->tile_pos = group >= 64 ? 1 : 64 / group;
    e->tile_bytes = (attn_tile_scratch_bytes(e->tile_pos * group, c->head_dim) + 63) & ~(size_t)63;
    e->tile_scratch = aligned_alloc(64, (size_t)e->team.threads * e->tile_bytes);
    e->part_cap = 3 * e->team.threads;
    e->part_floats = (size_t)group * ((size_t)c->head_dim + 2);
    e->part_buf = malloc((size_t)e->part_cap * e->part_floats * sizeof(float));
    if (!e->scores || !e->tops || !e->tile_scratch || !e->part_buf) {
        kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
        kvlm_engine_free(e);
        return NULL;
    }
    return e;
}

static void free_scratch(kvlm_engine *e) {
    free(e->rows);
    free(e->logit_rows);
    free(e->x);
    free(e->h);
    free(e->qkv);
    free(e->att);
    free(e->ff);
    free(e->act);
    free(e->rope);
    free(e->tiles);
    moe_work_free(&e->moe);
}

void kvlm_engine_free(kvlm_engine *e) {
    if (!e) return;
    kern_team_close(&e->team);
    free_scratch(e);
    free(e->scores);
    free(e->tile_scratch);
    free(e->part_buf);
    free(e);
}

kvlm_isa kvlm_engine_isa(const kvlm_engine *e) { return e->ops->isa; }
int kvlm_engine_threads(const kvlm_engine *e) { return e->team.threads; }
int kvlm_engine_threads_used(const kvlm_engine *e) { return e->team.peak; }

/* Activations are 64-byte aligned for the SIMD kernels; aligned_alloc wants
 * a size that is a multiple of the alignment. */
static float *alloc_rows(size_t rows, size_t width) {
    const size_t bytes = rows * width * sizeof(float);
    return aligned_alloc(64, (bytes + 63) & ~(size_t)63);
}

static int ensure_rows(kvlm_engine *e, int T, kvlm_error *err) {
    if (T <= e->cap_rows) return KVLM_OK;
    const kvlm_config *c = &e->m->cfg;
    int cap = T > 2 * e->cap_rows ? T : 2 * e->cap_rows;
    free_scratch(e);
    e->cap_rows = 0;
    const size_t C = (size_t)c->n_embd, n = (size_t)cap;
    e->rows = malloc(n * sizeof *e->rows);
    e->logit_rows = malloc(n * sizeof(int));
    e->x = alloc_rows(n, C);
    e->h = alloc_rows(n, C);
    e->qkv = alloc_rows(n, (size_t)e->qkv_dim);
    e->att = alloc_rows(n, (size_t)e->q_dim);
    e->ff = alloc_rows(n, (size_t)e->ff_dim);
    e->act = alloc_rows(n, (size_t)e->act_dim);
    e->rope = alloc_rows(n, (size_t)MODEL_MAX_ROPE * c->head_dim);
    e->tiles = malloc(n * sizeof *e->tiles);
    if (!e->rows || !e->logit_rows || !e->x || !e->h || !e->qkv || !e->att || !e->ff || !e->act || !e->rope ||
        !e->tiles) {
        free_scratch(e);
        e->rows = NULL, e->logit_rows = NULL, e->x = e->h = e->qkv = e->att = e->ff = e->act = e->rope = NULL;
        e->tiles = NULL;
        return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory for %d rows of activations", T);
    }
    if (moe_work_reserve(&e->moe, c, cap, err)) {
        free_scratch(e);
        e->rows = NULL, e->logit_rows = NULL, e->x = e->h = e->qkv = e->att = e->ff = e->act = e->rope = NULL;
        e->tiles = NULL;
        return KVLM_ERR_NOMEM;
    }
    e->cap_rows = cap;
    return KVLM_OK;
}

/* A region of n items on the engine's team, or on the caller alone when
 * the work is too small to be worth waking a thread. */
static void region(kvlm_engine *e, int parallel, int n, kern_task fn, void *ctx) {
    if (parallel) {
        kern_team_run(&e->team, n, fn, ctx);
        return;
    }
    kern_team_note(&e->team);
    for (int i = 0; i < n; i++) fn(ctx, i, 0);
}

static void embed_row(void *ctx, int t, int worker) {
    (void)worker;
    kvlm_engine *e = ctx;
    const kvlm_model *m = e->m;
    const int C = m->cfg.n_embd;
    float *xr = e->x + (size_t)t * C;
    if (dtype_is_blocked(m->wte.dtype)) /* rows are whole blocks: dequantise the token's row */
        quant_dequantize_row(m->wte.dtype,
                             (const char *)m->wte.data + (size_t)e->rows[t].token * dtype_row_bytes(m->wte.dtype, C, NULL),
                             C, xr);
    else
        dtype_row_f32(m->wte.dtype, m->wte.data, e->rows[t].token, C, xr);
    if (m->wpe.data) {
        const size_t po = (size_t)e->rows[t].pos * C;
        for (int i = 0; i < C; i++) xr[i] += dtype_load(m->wpe.dtype, m->wpe.data, po + i);
    }
    if (m->embed_scale > 0)
        for (int i = 0; i < C; i++) xr[i] *= m->embed_scale;
}

static void embed(kvlm_engine *e, int T) { region(e, T > 1, T, embed_row, e); }

/* LayerNorm when the norm has a bias (GPT-2), RMSNorm otherwise (Llama). */
typedef struct norm_job {
    kvlm_engine *e;
    const float *in, *w, *b;
    float *out;
} norm_job;

static void norm_row(void *ctx, int t, int worker) {
    (void)worker;
    const norm_job *j = ctx;
    const int C = j->e->m->cfg.n_embd;
    const float eps = j->e->m->cfg.norm_eps;
    if (j->b) j->e->ops->layernorm(j->in + (size_t)t * C, j->w, j->b, C, eps, j->out + (size_t)t * C);
    else j->e->ops->rmsnorm(j->in + (size_t)t * C, j->w, C, eps, j->out + (size_t)t * C);
}

static void norm_rows(kvlm_engine *e, const float *in, const float *w, const float *b, float *out, int T) {
    norm_job j = {e, in, w, b, out};
    region(e, T > 4, T, norm_row, &j);
}

/* cos and sin of pos x freq[i] for each row and rotary table (times the
 * table's mscale), once per step. */
static void rope_tables(kvlm_engine *e, int T) {
    const kvlm_model *m = e->m;
    for (int t = 0; t < T; t++)
        for (int k = 0; k < m->n_rope; k++) {
            const int half = m->rope_freq_n[k];
            const double ms = m->rope_mscale[k];
            float *r = e->rope + ((size_t)t * MODEL_MAX_ROPE + k) * m->cfg.head_dim;
            for (int i = 0; i < half; i++) {
                double a = (double)e->rows[t].pos * m->rope_freq[k][i];
                r[i] = (float)(ms * cos(a));
                r[half + i] = (float)(ms * sin(a));
            }
        }
}

/* Rotates the first a->rope_dims dimensions of the query and key heads of
 * every row with the layer's table (rotate-half pairs (i, i + r/2), or
 * interleaved pairs (2i, 2i + 1)); the rest of each head is left as is. */
static void apply_rope(kvlm_engine *e, const model_attn_layer *a, int T) {
    const kvlm_config *c = &e->m->cfg;
    const int hd = c->head_dim, half = a->rope_dims / 2, heads = c->n_head + c->n_kv_head, inter = c->rope_interleaved;
    for (int t = 0; t < T; t++) {
        const float *cs = e->rope + ((size_t)t * MODEL_MAX_ROPE + a->rope_table) * hd, *sn = cs + half;
        float *row = e->qkv + (size_t)t * e->qkv_dim;
        for (int h = 0; h < heads; h++) {
            float *v = row + (size_t)h * hd;
            for (int i = 0; i < half; i++) {
                const int a = inter ? 2 * i : i, b = inter ? 2 * i + 1 : i + half;
                const float x0 = v[a], x1 = v[b];
                v[a] = x0 * cs[i] - x1 * sn[i];
                v[b] = x1 * cs[i] + x0 * sn[i];
            }
        }
    }
}

/* x += s * y (s 0: 1). */
static void add_rows(float *x, const float *y, size_t n, float s) {
    if (s > 0)
        for (size_t i = 0; i < n; i++) x[i] += s * y[i];
    else
        for (size_t i = 0; i < n; i++) x[i] += y[i];
}

/* Writes this step's K and V (the columns after the queries) into the
 * slots the step reserved. */
static void store_kv(kvlm_engine *e, int l, int T) {
    for (int t = 0; t < T; t++) {
        const float *r = e->qkv + (size_t)t * e->qkv_dim;
        attn_store_kv(e->ops, e->kv, e->rows[t].seq, e->rows[t].pos, l, r + e->q_dim, r + e->q_dim + e->kv_dim);
    }
}

/* Causal attention of each row's query heads over its sequence's cache:
 * the query at position p reads keys 0..p, or p - W + 1..p with the
 * layer's sliding window of W (Hugging Face's convention: W keys, its own
 * included), scores scaled, capped and sunk as the layer says.
 * Rows are cut into tiles of consecutive positions of one sequence; an
 * item is one tile x one KV head (all the query heads of its group). A
 * tile of one row (decode) goes through the per-head path (attn_seq_head),
 * longer tiles through the tiled kernels (attn_tile_seq).
 *
 * When every row is a decode row and there are fewer (row, KV head) items
 * than threads (one sequence of a model with one KV head, as Gemma 3 1B),
 * each row's context is cut into `parts` ranges of at least PART_MIN
 * positions, one item each (attn_seq_heads_part), and the parts merged
 * after the region (attn_merge_parts), so every thread reads a share of
 * the keys and values instead of one thread reading them all. */
#define PART_MIN 256
#define PART_MAX 8

typedef struct attend_job {
    kvlm_engine *e;
    int l;
    model_attn_layer a;   /* the layer's window, scale, soft-cap, sinks */
    int parts;            /* parts per (row, KV head); 1: not cut */
} attend_job;

/* One (tile, KV head); the worker number picks its scratch (worker <
 * team.threads, the count the scratch was sized for). */
static void attend_tile(void *ctx, int item, int worker) {
    const attend_job *j = ctx;
    const kvlm_engine *e = j->e;
    const kvlm_config *c = &e->m->cfg;
    const int hd = c->head_dim, W = j->a.window, nkv = c->n_kv_head;
    const int group = c->n_head / nkv;
    const float scale = j->a.scale;
    const int base = item / j->parts, part = item % j->parts;
    const eng_tile *tl = &e->tiles[base / nkv];
    const int kh = base % nkv;
    const eng_row *r = &e->rows[tl->t0];
    const float *q = e->qkv + (size_t)tl->t0 * e->qkv_dim + (size_t)kh * group * hd;
    float *out = e->att + (size_t)tl->t0 * e->q_dim + (size_t)kh * group * hd;
    const attn_extra x = {j->a.softcap, j->a.sinks ? j->a.sinks + (size_t)kh * group : NULL};
    if (tl->np == 1) {
        float *sc = e->scores + (size_t)worker * group * c->n_ctx;
        const int lo = W && r->pos + 1 > W ? r->pos + 1 - W : 0;
        if (j->parts > 1) {
            const long len = r->pos + 1 - lo;
            const int a = lo + (int)(len * part / j->parts), b = lo + (int)(len * (part + 1) / j->parts);
            float *o = e->part_buf + (size_t)base * j->parts * e->part_floats;
            float *mx = o + (size_t)j->parts * group * hd, *sum = mx + (size_t)j->parts * group;
            attn_seq_heads_part(e->ops, e->kv, r->seq, j->l, kh, group, q, a, b, scale, j->a.softcap, sc,
                                o + (size_t)part * group * hd, mx + part * group, sum + part * group);
            return;
        }
        attn_seq_heads_x(e->ops, e->kv, r->seq, j->l, kh, group, q, lo, r->pos + 1, scale, &x, sc, out);
        return;
    }
    attn_tile_seq_x(e->tops, e->kv, r->seq, j->l, kh, group, q, (size_t)e->qkv_dim, r->pos, tl->np, W, scale, &x, out,
                    (size_t)e->q_dim, e->tile_scratch + (size_t)worker * e->tile_bytes);
}

/* Costlier tiles first (later positions read more keys), so the last items
 * handed out are the short ones and the threads finish together. */
static int tile_cmp(const void *a, const void *b) {
    const eng_tile *x = a, *y = b;
    if (x->cost != y->cost) return x->cost > y->cost ? -1 : 1;
    return x->t0 - y->t0;
}

/* Cuts the step's rows into tiles; returns how many. */
static int make_tiles(kvlm_engine *e, int W, int T, long *work) {
    int n = 0;
    *work = 0;
    for (int t = 0; t < T;) {
        int np = 1;
        while (t + np < T && np < e->tile_pos && e->rows[t + np].seq == e->rows[t].seq &&
               e->rows[t + np].pos == e->rows[t].pos + np)
            np++;
        const int p0 = e->rows[t].pos, last = p0 + np - 1;
        const int klo = W && p0 + 1 > W ? p0 + 1 - W : 0;
        const long cost = (long)np * (last + 1 - klo);
        e->tiles[n++] = (eng_tile){t, np, cost};
        *work += cost;
        t += np;
    }
    qsort(e->tiles, (size_t)n, sizeof *e->tiles, tile_cmp);
    return n;
}

static void attend(kvlm_engine *e, int l, const model_attn_layer *a, int T) {
    const kvlm_config *c = &e->m->cfg;
    long work;
    const int n = make_tiles(e, a->window, T, &work);
    /* Fork only when the work outweighs waking the threads (tiny models,
     * short contexts). */
    const int nkv = c->n_kv_head, group = c->n_head / nkv, hd = c->head_dim, items = n * nkv;
    int parts = 1;
    if (n == T && items < e->team.threads) {
        int shortest = c->n_ctx;
        for (int i = 0; i < n; i++) {
            const int p = e->rows[e->tiles[i].t0].pos, lo = a->window && p + 1 > a->window ? p + 1 - a->window : 0;
            shortest = p + 1 - lo < shortest ? p + 1 - lo : shortest;
        }
        parts = (2 * e->team.threads + items - 1) / items;
        if (parts > PART_MAX) parts = PART_MAX;
        if (parts > shortest / PART_MIN) parts = shortest / PART_MIN;
        if (parts < 2 || items * parts > e->part_cap) parts = 1;
    }
    attend_job j = {e, l, *a, parts};
    region(e, work * c->n_head * c->head_dim > 65536, items * parts, attend_tile, &j);
    if (parts > 1)
        for (int b = 0; b < items; b++) {
            const float *o = e->part_buf + (size_t)b * parts * e->part_floats;
            const float *mx = o + (size_t)parts * group * hd, *sum = mx + (size_t)parts * group;
            const int kh = b % nkv;
            attn_merge_parts(parts, group, hd, o, mx, sum, a->sinks ? a->sinks + (size_t)kh * group : NULL,
                             e->att + (size_t)e->tiles[b / nkv].t0 * e->q_dim + (size_t)kh * group * hd);
        }
}

/* Qwen3: RMSNorm of every query and key head (weights of head_dim), in
 * place, before the rotary embedding. */
typedef struct qk_norm_job {
    kvlm_engine *e;
    const model_layer *L;
} qk_norm_job;

static void qk_norm_row(void *ctx, int t, int worker) {
    (void)worker;
    const qk_norm_job *j = ctx;
    const kvlm_engine *e = j->e;
    const kvlm_config *c = &e->m->cfg;
    const int hd = c->head_dim, heads = c->n_head + c->n_kv_head;
    for (int h = 0; h < heads; h++) {
        float *v = e->qkv + (size_t)t * e->qkv_dim + (size_t)h * hd;
        e->ops->rmsnorm(v, h < c->n_head ? j->L->q_norm : j->L->k_norm, hd, c->norm_eps, v);
    }
}

static void qk_norm(kvlm_engine *e, const model_layer *L, int T) {
    qk_norm_job j = {e, L};
    region(e, T > 4, T, qk_norm_row, &j);
}

/* Q, K and V for every row: one fused matmul (GPT-2, Phi-3) or three
 * writing side by side into the same rows (Llama), then Qwen3's q/k norms
 * and the rotary embedding. */
static void project_qkv(kvlm_engine *e, const model_layer *L, const model_attn_layer *a, int T) {
    const kern_ops *ops = e->ops;
    if (L->wqkv.data) {
        kern_matmul(ops, &e->team, e->h, T, &L->wqkv, L->bqkv, e->qkv, e->qkv_dim);
    } else {
        const float *b = L->bqkv;
        kern_matmul(ops, &e->team, e->h, T, &L->wq, b, e->qkv, e->qkv_dim);
        kern_matmul(ops, &e->team, e->h, T, &L->wk, b ? b + e->q_dim : NULL, e->qkv + e->q_dim, e->qkv_dim);
        kern_matmul(ops, &e->team, e->h, T, &L->wv, b ? b + e->q_dim + e->kv_dim : NULL, e->qkv + e->q_dim + e->kv_dim,
                    e->qkv_dim);
    }
    if (L->q_norm) qk_norm(e, L, T);
    if (a->rope_dims) apply_rope(e, a, T);
}

/* act = silu(gate) * up, or gelu_tanh(gate) * up (GeGLU). */
static void swiglu_row(void *ctx, int t, int worker) {
    (void)worker;
    const kvlm_engine *e = ctx;
    const int F = e->m->cfg.n_ff;
    const float *gate = e->ff + (size_t)t * 2 * F, *up = gate + F;
    float *act = e->act + (size_t)t * F;
    if (e->m->mlp_act == MLP_GELU_TANH) e->ops->geglu(gate, up, act, (size_t)F);
    else e->ops->swiglu(gate, up, act, (size_t)F);
}

/* GELU MLP (GPT-2) or SwiGLU: down(silu(gate(h)) * up(h)) (Llama); gate
 * and up from one matmul when the file fuses them (Phi-3's [gate; up]
 * rows give exactly the gate | up halves of each ff row). */
static void mlp(kvlm_engine *e, const model_layer *L, int T) {
    const kern_ops *ops = e->ops;
    const int F = e->m->cfg.n_ff, C = e->m->cfg.n_embd;
    if (!L->w_gate.data && !L->w_gate_up.data) {
        kern_matmul(ops, &e->team, e->h, T, &L->w_up, L->b_up, e->ff, F);
        ops->gelu(e->ff, (size_t)T * F);
        kern_matmul(ops, &e->team, e->ff, T, &L->w_down, L->b_down, e->h, C);
        return;
    }
    if (L->w_gate_up.data) {
        kern_matmul(ops, &e->team, e->h, T, &L->w_gate_up, NULL, e->ff, 2 * F);
    } else {
        kern_matmul(ops, &e->team, e->h, T, &L->w_gate, NULL, e->ff, 2 * F);
        kern_matmul(ops, &e->team, e->h, T, &L->w_up, NULL, e->ff + F, 2 * F);
    }
    region(e, T > 4, T, swiglu_row, e);
    kern_matmul(ops, &e->team, e->act, T, &L->w_down, L->b_down, e->h, C);
}

/* hidden non-NULL: the final-normed hidden state of every row goes there
 * (T x n_embd) and no logits are computed. */
static void forward(kvlm_engine *e, int T, int n_logits, float *logits, float *hidden) {
    const kvlm_model *m = e->m;
    const kvlm_config *c = &m->cfg;
    const int C = c->n_embd;
    const kern_ops *ops = e->ops;
    embed(e, T);
    if (m->n_rope) rope_tables(e, T);
    for (int l = 0; l < c->n_layer; l++) {
        const model_layer *L = &m->layers[l];
        const model_attn_layer a = model_layer_attn(m, l);
        norm_rows(e, e->x, L->norm1_w, L->norm1_b, e->h, T);
        project_qkv(e, L, &a, T);
        store_kv(e, l, T);
        attend(e, l, &a, T);
        kern_matmul(ops, &e->team, e->att, T, &L->wo, L->bo, e->h, C);
        if (L->post_attn_norm) norm_rows(e, e->h, L->post_attn_norm, NULL, e->h, T);
        add_rows(e->x, e->h, (size_t)T * C, m->residual_scale);
        norm_rows(e, e->x, L->norm2_w, L->norm2_b, e->h, T);
        if (L->moe) moe_ffn(ops, &e->team, &e->moe, c, L->moe, e->h, T, e->h);
        else mlp(e, L, T);
        if (L->post_ffn_norm) norm_rows(e, e->h, L->post_ffn_norm, NULL, e->h, T);
        add_rows(e->x, e->h, (size_t)T * C, m->residual_scale);
    }
    if (hidden) {
        norm_rows(e, e->x, m->normf_w, m->normf_b, hidden, T);
        return;
    }
    /* Final norm and output head only for the rows whose logits are asked for. */
    for (int i = 0; i < n_logits; i++) {
        const float *xr = e->x + (size_t)e->logit_rows[i] * C;
        if (m->normf_b) ops->layernorm(xr, m->normf_w, m->normf_b, C, c->norm_eps, e->h + (size_t)i * C);
        else ops->rmsnorm(xr, m->normf_w, C, c->norm_eps, e->h + (size_t)i * C);
    }
    kern_matrix head = m->lm_head;
    head.rows = c->vocab_size; /* padded vocabulary rows are never computed */
    if (n_logits > 0) kern_matmul(ops, &e->team, e->h, n_logits, &head, NULL, logits, c->vocab_size);
    const size_t nl = (size_t)n_logits * c->vocab_size;
    if (m->logit_scale > 0)
        for (size_t i = 0; i < nl; i++) logits[i] *= m->logit_scale;
    if (m->final_softcap > 0) ops->softcap(logits, nl, m->final_softcap);
}

size_t kvlm_engine_logits_size(const kvlm_engine *e, const kvlm_batch_item *items, int n_items) {
    size_t n = 0;
    for (int i = 0; i < n_items; i++)
        n += items[i].logits_all > 0 ? (size_t)items[i].n_tokens : items[i].logits_all == 0 ? 1 : 0;
    return n * (size_t)e->m->cfg.vocab_size;
}

static int check_items(const kvlm_engine *e, const kvlm_batch_item *items, int n_items, int *total,
                       kvlm_error *err) {
    const kvlm_config *c = &e->m->cfg;
    long T = 0;
    if (n_items < 1) return kvlm_error_set(err, KVLM_ERR_ARG, "empty batch");
    for (int i = 0; i < n_items; i++) {
        const kvlm_batch_item *it = &items[i];
        if (!kv_seq_valid(e->kv, it->seq)) return kvlm_error_set(err, KVLM_ERR_ARG, "batch item %d: no sequence %d", i, it->seq);
        for (int j = 0; j < i; j++)
            if (items[j].seq == it->seq)
                return kvlm_error_set(err, KVLM_ERR_ARG, "batch items %d and %d name the same sequence %d", j, i, it->seq);
        if (it->n_tokens < 1 || !it->tokens)
            return kvlm_error_set(err, KVLM_ERR_ARG, "batch item %d: n_tokens = %d, need at least 1", i, it->n_tokens);
        int len = kvlm_kv_seq_len(e->kv, it->seq, NULL);
        if ((long)len + it->n_tokens > c->n_ctx)
            return kvlm_error_set(err, KVLM_ERR_ARG,
                                  "sequence %d: %d cached + %d new tokens exceed the context window of %d tokens", it->seq,
                                  len, it->n_tokens, c->n_ctx);
        for (int j = 0; j < it->n_tokens; j++)
            if (it->tokens[j] < 0 || it->tokens[j] >= c->vocab_size)
                return kvlm_error_set(err, KVLM_ERR_ARG, "token id %d is outside the vocabulary [0, %d)", it->tokens[j],
                                 c->vocab_size);
        T += it->n_tokens;
    }
    *total = (int)T;
    return KVLM_OK;
}

static int step(kvlm_engine *e, const kvlm_batch_item *items, int n_items, float *logits, float *hidden,
                kvlm_error *err) {
    int T = 0, rc;
    if ((rc = check_items(e, items, n_items, &T, err))) return rc;
    if ((rc = ensure_rows(e, T, err))) return rc;
    kvlm_kv *kv = e->kv;
    /* Reserve every item's new positions first, so a full pool fails the
     * step before any work, leaving every sequence as it was. */
    for (int i = 0; i < n_items; i++)
        if ((rc = kv_append_reserve(kv, items[i].seq, items[i].n_tokens, err))) {
            for (int j = 0; j < i; j++) kv_append_abort(kv, items[j].seq);
            return rc;
        }
    int t = 0, nl = 0;
    for (int i = 0; i < n_items; i++) {
        const kvlm_batch_item *it = &items[i];
        const int len = kvlm_kv_seq_len(kv, it->seq, NULL);
        for (int j = 0; j < it->n_tokens; j++, t++) {
            e->rows[t] = (eng_row){it->seq, len + j, it->tokens[j]};
            if (it->logits_all > 0 || (it->logits_all == 0 && j == it->n_tokens - 1)) e->logit_rows[nl++] = t;
        }
    }
    forward(e, T, nl, logits, hidden);
    for (int i = 0; i < n_items; i++) kv_append_commit(kv, items[i].seq, items[i].tokens);
    return KVLM_OK;
}

int kvlm_engine_step(kvlm_engine *e, const kvlm_batch_item *items, int n_items, float *logits, kvlm_error *err) {
    return step(e, items, n_items, logits, NULL, err);
}

int engine_step_hidden(kvlm_engine *e, const kvlm_batch_item *items, int n_items, float *hidden, kvlm_error *err) {
    return step(e, items, n_items, NULL, hidden, err);
}

const kvlm_model *engine_model(const kvlm_engine *e) { return e->m; }
kvlm_kv *engine_kv(const kvlm_engine *e) { return e->kv; }
