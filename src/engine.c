/*
 * The engine step: one forward pass of the model over a batch of sequences,
 * each contributing one or more new tokens (prefill chunks and decode tokens
 * mixed). All rows of the batch go through each weight matrix together, so
 * a step reads the weights once however many sequences it serves. New K/V
 * are written into the paged cache before attention, and attention reads
 * every sequence's context through its block table.
 *
 * No-cache mode recomputes: each step re-runs the whole context of every
 * sequence in the batch (its blocks are rewritten from position 0), which
 * is what generation costs without a KV cache.
 *
 * Invariant: a failed step leaves every sequence as it was.
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "kernels/kernels.h"
#include "kvcache.h"
#include "model.h"

typedef struct eng_row {
    int seq, pos, token;
} eng_row;

struct kvlm_engine {
    kvlm_model *m;
    kvlm_kv *kv;
    const kern_ops *ops;
    int threads, no_cache;
    int cap_rows;
    eng_row *rows;
    int *logit_rows;      /* indices into rows whose logits are returned */
    float *x, *h, *qkv, *att, *ff;
    float *scores;        /* per thread, n_ctx floats */
};

kvlm_engine *kvlm_engine_create(kvlm_model *m, kvlm_kv *kv, const kvlm_engine_options *opt, kvlm_error *err) {
    kvlm_engine_options o = opt ? *opt : (kvlm_engine_options){0};
    const kern_ops *ops = kern_select(o.isa);
    if (!ops) {
        kvlm_fail(err, KVLM_ERR_UNSUPPORTED, "this CPU does not support the %s kernels", kvlm_isa_name(o.isa));
        return NULL;
    }
    if (o.threads < 0 || o.threads > 1024) {
        kvlm_fail(err, KVLM_ERR_ARG, "threads = %d is outside [0, 1024]", o.threads);
        return NULL;
    }
    const kvlm_config *c = &m->cfg;
    if (kv->n_layer != c->n_layer || kv->n_kv_head != c->n_kv_head || kv->head_dim != c->head_dim) {
        kvlm_fail(err, KVLM_ERR_ARG, "the KV cache was created for a different model");
        return NULL;
    }
    kvlm_engine *e = calloc(1, sizeof *e);
    if (!e) { kvlm_fail(err, KVLM_ERR_NOMEM, "out of memory"); return NULL; }
    e->m = m;
    e->kv = kv;
    e->ops = ops;
    e->no_cache = o.no_cache;
    e->threads = o.threads ? o.threads : omp_get_num_procs();
    omp_set_num_threads(e->threads);
    e->scores = malloc((size_t)e->threads * c->n_ctx * sizeof(float));
    if (!e->scores) {
        kvlm_fail(err, KVLM_ERR_NOMEM, "out of memory");
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
}

void kvlm_engine_free(kvlm_engine *e) {
    if (!e) return;
    free_scratch(e);
    free(e->scores);
    free(e);
}

kvlm_isa kvlm_engine_isa(const kvlm_engine *e) { return e->ops->isa; }
int kvlm_engine_threads(const kvlm_engine *e) { return e->threads; }

static int ensure_rows(kvlm_engine *e, int T, kvlm_error *err) {
    if (T <= e->cap_rows) return KVLM_OK;
    const kvlm_config *c = &e->m->cfg;
    int cap = T > 2 * e->cap_rows ? T : 2 * e->cap_rows;
    free_scratch(e);
    e->cap_rows = 0;
    size_t C = (size_t)c->n_embd;
    e->rows = malloc((size_t)cap * sizeof *e->rows);
    e->logit_rows = malloc((size_t)cap * sizeof(int));
    e->x = aligned_alloc(64, (size_t)cap * C * 4);
    e->h = aligned_alloc(64, (size_t)cap * C * 4);
    e->qkv = aligned_alloc(64, (size_t)cap * 3 * C * 4);
    e->att = aligned_alloc(64, (size_t)cap * C * 4);
    e->ff = aligned_alloc(64, (size_t)cap * (size_t)c->n_ff * 4);
    if (!e->rows || !e->logit_rows || !e->x || !e->h || !e->qkv || !e->att || !e->ff) {
        free_scratch(e);
        e->rows = NULL, e->logit_rows = NULL, e->x = e->h = e->qkv = e->att = e->ff = NULL;
        return kvlm_fail(err, KVLM_ERR_NOMEM, "out of memory for %d rows of activations", T);
    }
    e->cap_rows = cap;
    return KVLM_OK;
}

static void embed(kvlm_engine *e, int T) {
    const kvlm_model *m = e->m;
    const int C = m->cfg.n_embd;
    #pragma omp parallel for if (T > 1)
    for (int t = 0; t < T; t++) {
        float *xr = e->x + (size_t)t * C;
        size_t to = (size_t)e->rows[t].token * C, po = (size_t)e->rows[t].pos * C;
        for (int i = 0; i < C; i++)
            xr[i] = dtype_load(m->wte.dtype, m->wte.data, to + i) + dtype_load(m->wpe.dtype, m->wpe.data, po + i);
    }
}

static void layernorm_rows(kvlm_engine *e, const float *in, const float *w, const float *b, float *out, int T) {
    const int C = e->m->cfg.n_embd;
    const float eps = e->m->cfg.norm_eps;
    #pragma omp parallel for if (T > 4)
    for (int t = 0; t < T; t++) e->ops->layernorm(in + (size_t)t * C, w, b, C, eps, out + (size_t)t * C);
}

static void add_rows(float *x, const float *y, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

/* Writes this step's K and V (columns C..3C of qkv) into the cache. */
static void store_kv(kvlm_engine *e, int l, int T) {
    const kvlm_config *c = &e->m->cfg;
    const int C = c->n_embd, hd = c->head_dim, kvc = c->n_kv_head * hd;
    kvlm_kv *kv = e->kv;
    for (int t = 0; t < T; t++) {
        const kv_seq *s = &kv->seqs[e->rows[t].seq];
        const float *r = e->qkv + (size_t)t * (C + 2 * kvc);
        for (int h = 0; h < c->n_kv_head; h++) {
            e->ops->store_row(kv_slot_ptr(kv, s, e->rows[t].pos, l, h, 0), kv->dtype, r + C + h * hd, hd);
            e->ops->store_row(kv_slot_ptr(kv, s, e->rows[t].pos, l, h, 1), kv->dtype, r + C + kvc + h * hd, hd);
        }
    }
}

/* Causal attention of each row's query heads over its sequence's cache. */
static void attend(kvlm_engine *e, int l, int T) {
    const kvlm_config *c = &e->m->cfg;
    const int C = c->n_embd, hd = c->head_dim, H = c->n_head, kvc = c->n_kv_head * hd;
    const int group = c->n_head / c->n_kv_head, bs = e->kv->block_size;
    const float scale = 1.0f / sqrtf((float)hd);
    const kvlm_kv *kv = e->kv;
    /* Fork only when the work outweighs waking the threads (tiny models,
     * short contexts). */
    long work = 0;
    for (int t = 0; t < T; t++) work += (long)(e->rows[t].pos + 1) * H * hd;
    #pragma omp parallel for schedule(dynamic, 1) if (work > 65536)
    for (int th = 0; th < T * H; th++) {
        const int t = th / H, h = th % H, kh = h / group;
        const eng_row *r = &e->rows[t];
        const kv_seq *s = &kv->seqs[r->seq];
        const float *q = e->qkv + (size_t)t * (C + 2 * kvc) + (size_t)h * hd;
        float *sc = e->scores + (size_t)omp_get_thread_num() * c->n_ctx;
        const int n = r->pos + 1;
        for (int b0 = 0; b0 < n; b0 += bs) {
            int cnt = n - b0 < bs ? n - b0 : bs;
            e->ops->attn_scores(q, kv_head_ptr(kv, s->blocks[b0 / bs], l, kh, 0), kv->dtype, cnt, hd, scale, sc + b0);
        }
        kern_softmax(sc, n);
        float *out = e->att + (size_t)t * C + (size_t)h * hd;
        memset(out, 0, (size_t)hd * sizeof(float));
        for (int b0 = 0; b0 < n; b0 += bs) {
            int cnt = n - b0 < bs ? n - b0 : bs;
            e->ops->attn_accum(sc + b0, kv_head_ptr(kv, s->blocks[b0 / bs], l, kh, 1), kv->dtype, cnt, hd, out);
        }
    }
}

static void forward(kvlm_engine *e, int T, int n_logits, float *logits) {
    const kvlm_model *m = e->m;
    const kvlm_config *c = &m->cfg;
    const int C = c->n_embd;
    const kern_ops *ops = e->ops;
    embed(e, T);
    for (int l = 0; l < c->n_layer; l++) {
        const gpt2_layer *L = &m->layers[l];
        layernorm_rows(e, e->x, L->ln1_w, L->ln1_b, e->h, T);
        kern_matmul(ops, e->h, T, &L->attn_qkv, L->attn_qkv_b, e->qkv, L->attn_qkv.rows);
        store_kv(e, l, T);
        attend(e, l, T);
        kern_matmul(ops, e->att, T, &L->attn_proj, L->attn_proj_b, e->h, C);
        add_rows(e->x, e->h, (size_t)T * C);
        layernorm_rows(e, e->x, L->ln2_w, L->ln2_b, e->h, T);
        kern_matmul(ops, e->h, T, &L->mlp_fc, L->mlp_fc_b, e->ff, c->n_ff);
        ops->gelu(e->ff, (size_t)T * c->n_ff);
        kern_matmul(ops, e->ff, T, &L->mlp_proj, L->mlp_proj_b, e->h, C);
        add_rows(e->x, e->h, (size_t)T * C);
    }
    /* Final norm and output head only for the rows whose logits are asked for. */
    for (int i = 0; i < n_logits; i++)
        ops->layernorm(e->x + (size_t)e->logit_rows[i] * C, m->lnf_w, m->lnf_b, C, c->norm_eps, e->h + (size_t)i * C);
    kern_matrix head = m->lm_head;
    head.rows = c->vocab_size; /* padded vocabulary rows are never computed */
    if (n_logits > 0) kern_matmul(ops, e->h, n_logits, &head, NULL, logits, c->vocab_size);
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
    if (n_items < 1) return kvlm_fail(err, KVLM_ERR_ARG, "empty batch");
    for (int i = 0; i < n_items; i++) {
        const kvlm_batch_item *it = &items[i];
        if (!kv_seq_valid(e->kv, it->seq)) return kvlm_fail(err, KVLM_ERR_ARG, "batch item %d: no sequence %d", i, it->seq);
        for (int j = 0; j < i; j++)
            if (items[j].seq == it->seq)
                return kvlm_fail(err, KVLM_ERR_ARG, "batch items %d and %d name the same sequence %d", j, i, it->seq);
        if (it->n_tokens < 1 || !it->tokens)
            return kvlm_fail(err, KVLM_ERR_ARG, "batch item %d: n_tokens = %d, need at least 1", i, it->n_tokens);
        int len = e->kv->seqs[it->seq].len;
        if ((long)len + it->n_tokens > c->n_ctx)
            return kvlm_fail(err, KVLM_ERR_ARG,
                             "sequence %d: %d cached + %d new tokens exceed the context window of %d tokens", it->seq,
                             len, it->n_tokens, c->n_ctx);
        for (int j = 0; j < it->n_tokens; j++)
            if (it->tokens[j] < 0 || it->tokens[j] >= c->vocab_size)
                return kvlm_fail(err, KVLM_ERR_ARG, "token id %d is outside the vocabulary [0, %d)", it->tokens[j],
                                 c->vocab_size);
        T += e->no_cache ? len + it->n_tokens : it->n_tokens;
    }
    *total = (int)T;
    return KVLM_OK;
}

int kvlm_engine_step(kvlm_engine *e, const kvlm_batch_item *items, int n_items, float *logits, kvlm_error *err) {
    int T = 0, rc;
    if ((rc = check_items(e, items, n_items, &T, err))) return rc;
    if ((rc = ensure_rows(e, T, err))) return rc;
    kvlm_kv *kv = e->kv;
    /* Reserve blocks for every item first, so a full pool fails cleanly.
     * Without a cache every step rewrites the whole context into fresh
     * blocks (its old ones may be shared or indexed). */
    for (int i = 0; i < n_items; i++) {
        if (e->no_cache) kv_seq_drop_blocks(kv, items[i].seq);
        if ((rc = kv_seq_reserve(kv, items[i].seq, kv->seqs[items[i].seq].len + items[i].n_tokens, err))) {
            for (int j = 0; j <= i; j++) {
                if (e->no_cache) kv_seq_drop_blocks(kv, items[j].seq);
                else kv_seq_truncate(kv, items[j].seq, kv->seqs[items[j].seq].len);
            }
            return rc;
        }
    }
    int t = 0, nl = 0;
    for (int i = 0; i < n_items; i++) {
        const kvlm_batch_item *it = &items[i];
        const kv_seq *s = &kv->seqs[it->seq];
        int start = e->no_cache ? 0 : s->len, n = s->len - start + it->n_tokens;
        for (int j = 0; j < n; j++, t++) {
            int abs = start + j;
            e->rows[t] = (eng_row){it->seq, abs, abs < s->len ? s->tokens[abs] : it->tokens[abs - s->len]};
            if (it->logits_all > 0 ? abs >= s->len : it->logits_all == 0 && j == n - 1) e->logit_rows[nl++] = t;
        }
    }
    forward(e, T, nl, logits);
    for (int i = 0; i < n_items; i++) kv_seq_append(kv, items[i].seq, items[i].tokens, items[i].n_tokens);
    return KVLM_OK;
}
