/*
 * Attention of one query head, or of the query heads of one KV group
 * together (decode), over a context read through a block table: scores
 * block by block, one softmax per head, then the weighted sum of V block
 * by block; a group's heads share each read of a block. The context is a
 * range of positions [lo, n): lo > 0 is a sliding
 * window, whose earlier blocks may already be released (never read). The engine and the attention benchmark both call it, so what is
 * measured is what runs. Blocks are scattered in the pool, where the
 * hardware prefetcher cannot follow, so the next block's keys (or values)
 * are prefetched while the current one is used.
 *
 * Prefill goes through attn_tile_at instead: a tile of query positions
 * times the query heads of one KV group walks the keys once, chunk by
 * chunk (at most ATTN_TILE_KEYS positions of one block), each chunk
 * widened to floats once for every row of the tile, with an online
 * softmax (kernels/attn_tile.h), so K/V are read once per tile instead of
 * once per query row and head.
 *
 * A layer's soft-cap (tanh of the scaled scores) is applied to the scores
 * before the softmax in both paths; its sinks join the denominator: in
 * the softmax of the per-row path, and at the tile's final normalisation
 * (exp(sink - running max) added to the running sum).
 *
 * A decode row's context can also be cut into parts attended separately
 * (attn_seq_heads_part: each part's softmax with its largest score and
 * denominator) and merged by their weights (attn_merge_parts, where the
 * sinks join), so that the threads share one long context when there are
 * fewer (row, KV head) items than threads.
 *
 * Also the writes of new K/V into the slots an append reserved: the layout
 * (runtime/kv_layout.h) stays between this file and runtime/kvcache.c.
 * Each layer reads and writes through the block table of its layer slice
 * (kv_layer_table): a window layer's table has -1 before its window.
 */
#include <math.h>
#include <string.h>

#include "runtime/attention.h"
#include "runtime/kv_layout.h"
#include "tensor.h"

static inline void prefetch(const void *p, size_t bytes) {
    for (size_t o = 0; o < bytes; o += 64) __builtin_prefetch((const char *)p + o, 0, 1);
}

/* Attention of the `heads` query heads of one KV group over positions
 * [lo, n): block by block from the block holding lo (its first lo %
 * block_size slots skipped), each block's keys (then values) read once for
 * all the heads; head h's query is q + h * head_dim, its scores
 * scores + h * (n - lo) (position lo + i at i), its output out + h * head_dim. */
/* Softmax of n scores with a sink logit in the denominator only. */
static void softmax_sink(float *s, int n, float sink) {
    float mx = sink;
    for (int i = 0; i < n; i++) mx = s[i] > mx ? s[i] : mx;
    double sum = exp((double)sink - mx);
    for (int i = 0; i < n; i++) {
        s[i] = expf(s[i] - mx);
        sum += s[i];
    }
    const float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) s[i] *= inv;
}

/* With mx and sum (a part of a split context: x's sinks not used), also
 * each head's largest score mx[h] and its softmax denominator in that
 * scale, sum[h] = 1 / (the normalised weight of that score). */
static void attn_range(const kern_ops *ops, const kvlm_kv *kv, const int *table, int layer, int kv_head, int heads,
                       const float *q, int lo, int n, float scale, const attn_extra *x, float *scores, float *out,
                       float *mx, float *sum) {
    const int bs = kv->block_size, hd = kv->head_dim;
    const size_t row = kv->row_bytes, lds = (size_t)(n - lo);
    for (int p = lo; p < n;) {
        const int j = p / bs, off = p % bs, cnt = (j + 1) * bs < n ? (j + 1) * bs - p : n - p;
        if ((j + 1) * bs < n) prefetch(kv_head_ptr(kv, table[j + 1], layer, kv_head, 0), kv->head_bytes);
        else prefetch(kv_head_ptr(kv, table[lo / bs], layer, kv_head, 1), kv->head_bytes);
        ops->attn_scores_heads(q, heads, kv_head_ptr(kv, table[j], layer, kv_head, 0) + off * row, kv->dtype, cnt,
                               hd, scale, scores + (p - lo), lds);
        p += cnt;
    }
    if (x && x->softcap > 0) ops->softcap(scores, (size_t)heads * lds, x->softcap);
    for (int h = 0; h < heads; h++) {
        float *s = scores + h * lds;
        if (mx) {
            int k = 0;
            for (int i = 1; i < n - lo; i++) k = s[i] > s[k] ? i : k;
            mx[h] = s[k];
            kern_softmax(ops, s, n - lo);
            sum[h] = 1.0f / s[k];
        } else if (x && x->sinks) softmax_sink(s, n - lo, x->sinks[h]);
        else kern_softmax(ops, s, n - lo);
    }
    memset(out, 0, (size_t)heads * hd * sizeof(float));
    for (int p = lo; p < n;) {
        const int j = p / bs, off = p % bs, cnt = (j + 1) * bs < n ? (j + 1) * bs - p : n - p;
        if ((j + 1) * bs < n) prefetch(kv_head_ptr(kv, table[j + 1], layer, kv_head, 1), kv->head_bytes);
        ops->attn_accum_heads(scores + (p - lo), lds, heads, kv_head_ptr(kv, table[j], layer, kv_head, 1) + off * row,
                              kv->dtype, cnt, hd, out);
        p += cnt;
    }
}

void attn_heads(const kern_ops *ops, const kvlm_kv *kv, const int *table, int layer, int kv_head, int heads,
                const float *q, int n, float scale, float *scores, float *out) {
    attn_range(ops, kv, table, layer, kv_head, heads, q, 0, n, scale, NULL, scores, out, NULL, NULL);
}

void attn_seq_head(const kern_ops *ops, const kvlm_kv *kv, int seq, int layer, int kv_head, const float *q, int lo,
                   int n, float scale, float *scores, float *out) {
    attn_range(ops, kv, kv_layer_table(kv, seq, layer), layer, kv_head, 1, q, lo, n, scale, NULL, scores, out, NULL, NULL);
}

void attn_seq_heads(const kern_ops *ops, const kvlm_kv *kv, int seq, int layer, int kv_head, int heads,
                    const float *q, int lo, int n, float scale, float *scores, float *out) {
    attn_range(ops, kv, kv_layer_table(kv, seq, layer), layer, kv_head, heads, q, lo, n, scale, NULL, scores, out, NULL, NULL);
}

void attn_seq_heads_x(const kern_ops *ops, const kvlm_kv *kv, int seq, int layer, int kv_head, int heads,
                      const float *q, int lo, int n, float scale, const attn_extra *x, float *scores, float *out) {
    attn_range(ops, kv, kv_layer_table(kv, seq, layer), layer, kv_head, heads, q, lo, n, scale, x, scores, out, NULL, NULL);
}

void attn_seq_heads_part(const kern_ops *ops, const kvlm_kv *kv, int seq, int layer, int kv_head, int heads,
                         const float *q, int lo, int n, float scale, float softcap, float *scores, float *out, float *mx,
                         float *sum) {
    const attn_extra x = {softcap, NULL};
    attn_range(ops, kv, kv_layer_table(kv, seq, layer), layer, kv_head, heads, q, lo, n, scale, &x, scores, out, mx,
               sum);
}

void attn_merge_parts(int parts, int heads, int head_dim, const float *outs, const float *mx, const float *sum,
                      const float *sinks, float *out) {
    for (int h = 0; h < heads; h++) {
        float top = sinks ? sinks[h] : -INFINITY;
        for (int p = 0; p < parts; p++) top = mx[p * heads + h] > top ? mx[p * heads + h] : top;
        double den = sinks ? exp((double)sinks[h] - top) : 0.0;
        for (int p = 0; p < parts; p++) den += sum[p * heads + h] * exp((double)mx[p * heads + h] - top);
        float *o = out + (size_t)h * head_dim;
        memset(o, 0, (size_t)head_dim * sizeof(float));
        for (int p = 0; p < parts; p++) {
            const float w = (float)(sum[p * heads + h] * exp((double)mx[p * heads + h] - top) / den);
            const float *op = outs + ((size_t)p * heads + h) * head_dim;
            for (int i = 0; i < head_dim; i++) o[i] += w * op[i];
        }
    }
}

#define ALIGN64(x) (((x) + 63) & ~(size_t)63)

/* The tile's scratch, carved from one buffer. */
typedef struct tile_mem {
    float *qt, *acc, *kf, *vf, *sbuf, *pbuf, *mx, *l;
    int *lo, *hi;
} tile_mem;

static size_t tile_carve(int rows, int d, void *base, tile_mem *m) {
    const size_t mp = (size_t)(rows + ATTN_TILE_MAX_LANES - 1) / ATTN_TILE_MAX_LANES * ATTN_TILE_MAX_LANES;
    const size_t dp = (size_t)(d + ATTN_TILE_DPAD - 1) / ATTN_TILE_DPAD * ATTN_TILE_DPAD;
    const size_t sz[10] = {mp * d * 4, mp * dp * 4, ATTN_TILE_KEYS * (size_t)d * 4, ATTN_TILE_KEYS * dp * 4,
                           ATTN_TILE_KEYS * ATTN_TILE_MAX_LANES * 4, ATTN_TILE_KEYS * ATTN_TILE_MAX_LANES * 4,
                           mp * 4, mp * 4, mp * sizeof(int), mp * sizeof(int)};
    size_t off = 0;
    void *p[10];
    for (int i = 0; i < 10; i++) {
        p[i] = base ? (char *)base + off : NULL;
        off += ALIGN64(sz[i]);
    }
    if (m) *m = (tile_mem){p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8], p[9]};
    return off;
}

size_t attn_tile_scratch_bytes(int rows, int head_dim) { return tile_carve(rows, head_dim, NULL, NULL); }

void attn_tile_at(const attn_tile_ops *t, const kvlm_kv *kv, const int *table, int layer, int kv_head, int group,
                  const float *q, size_t ldq, int p0, int np, int window, float scale, const attn_extra *x, float *out,
                  size_t ldo, void *scratch) {
    const int d = kv->head_dim, bs = kv->block_size, lanes = t->lanes;
    const int dp = (d + ATTN_TILE_DPAD - 1) / ATTN_TILE_DPAD * ATTN_TILE_DPAD;
    const int rows = np * group, groups = (rows + lanes - 1) / lanes, mp = groups * lanes;
    const size_t row = kv->row_bytes;
    tile_mem m;
    tile_carve(rows, d, scratch, &m);
    /* Row r = i * group + g: position p0 + i, group head g. Padding rows
     * have zero queries and see every key (finite, never read back). */
    for (int r = 0; r < mp; r++) {
        const int gi = r / lanes, ln = r % lanes;
        float *qt = m.qt + (size_t)gi * d * lanes + ln;
        if (r < rows) {
            const int i = r / group, g = r % group, p = p0 + i;
            const float *qr = q + (size_t)i * ldq + (size_t)g * d;
            for (int k = 0; k < d; k++) qt[(size_t)k * lanes] = qr[k] * scale;
            m.lo[r] = window && p + 1 > window ? p + 1 - window : 0;
            m.hi[r] = p;
        } else {
            for (int k = 0; k < d; k++) qt[(size_t)k * lanes] = 0.0f;
            m.lo[r] = 0;
            m.hi[r] = p0 + np - 1;
        }
        m.mx[r] = -INFINITY;
        m.l[r] = 0.0f;
        memset(m.acc + (size_t)r * dp, 0, (size_t)dp * sizeof(float));
    }
    if (dp > d)
        for (int j = 0; j < ATTN_TILE_KEYS; j++) memset(m.vf + (size_t)j * dp + d, 0, (size_t)(dp - d) * sizeof(float));
    const int klo = m.lo[0], khi = p0 + np;
    for (int p = klo; p < khi;) {
        const int j = p / bs, off = p % bs;
        int cnt = bs - off < khi - p ? bs - off : khi - p;
        if (cnt > ATTN_TILE_KEYS) cnt = ATTN_TILE_KEYS;
        if (p == klo || off == 0) { /* a new block: fetch the next one while this one is used */
            if ((j + 1) * bs < khi) {
                prefetch(kv_head_ptr(kv, table[j + 1], layer, kv_head, 0), kv->head_bytes);
                prefetch(kv_head_ptr(kv, table[j + 1], layer, kv_head, 1), kv->head_bytes);
            }
        }
        const unsigned char *kp = kv_head_ptr(kv, table[j], layer, kv_head, 0) + off * row;
        const unsigned char *vp = kv_head_ptr(kv, table[j], layer, kv_head, 1) + off * row;
        t->widen(kp, kv->dtype, (size_t)cnt * d, m.kf);
        if (dp == d) t->widen(vp, kv->dtype, (size_t)cnt * d, m.vf);
        else
            for (int jj = 0; jj < cnt; jj++) t->widen(vp + jj * row, kv->dtype, (size_t)d, m.vf + (size_t)jj * dp);
        t->update(groups, d, dp, m.qt, m.kf, m.vf, p, cnt, m.lo, m.hi, m.mx, m.l, m.acc, m.sbuf, m.pbuf,
                  x ? x->softcap : 0.0f);
        p += cnt;
    }
    for (int r = 0; r < rows; r++) {
        const int i = r / group, g = r % group;
        /* A sink adds exp(sink) to the denominator, in the row's running
         * scale exp(-mx) (mx is finite: every row sees its own key). */
        const float den = x && x->sinks ? m.l[r] + expf(x->sinks[g] - m.mx[r]) : m.l[r];
        const float inv = 1.0f / den, *a = m.acc + (size_t)r * dp;
        float *o = out + (size_t)i * ldo + (size_t)g * d;
        for (int k = 0; k < d; k++) o[k] = a[k] * inv;
    }
}

void attn_tile_seq(const attn_tile_ops *t, const kvlm_kv *kv, int seq, int layer, int kv_head, int group,
                   const float *q, size_t ldq, int p0, int np, int window, float scale, float *out, size_t ldo,
                   void *scratch) {
    attn_tile_at(t, kv, kv_layer_table(kv, seq, layer), layer, kv_head, group, q, ldq, p0, np, window, scale, NULL, out, ldo,
                 scratch);
}

void attn_tile_seq_x(const attn_tile_ops *t, const kvlm_kv *kv, int seq, int layer, int kv_head, int group,
                     const float *q, size_t ldq, int p0, int np, int window, float scale, const attn_extra *x,
                     float *out, size_t ldo, void *scratch) {
    attn_tile_at(t, kv, kv_layer_table(kv, seq, layer), layer, kv_head, group, q, ldq, p0, np, window, scale, x, out, ldo,
                 scratch);
}

void attn_store_at(const kern_ops *ops, kvlm_kv *kv, const int *table, int pos, int layer, int kv_head, int is_v,
                   const float *x) {
    ops->store_row(kv_table_slot_ptr(kv, table, pos, layer, kv_head, is_v), kv->dtype, x, kv->head_dim);
}

void attn_store_kv(const kern_ops *ops, kvlm_kv *kv, int seq, int pos, int layer, const float *k, const float *v) {
    const int *table = kv_layer_table(kv, seq, layer), hd = kv->head_dim;
    for (int h = 0; h < kv->n_kv_head; h++) {
        ops->store_row(kv_table_slot_ptr(kv, table, pos, layer, h, 0), kv->dtype, k + (size_t)h * hd, hd);
        ops->store_row(kv_table_slot_ptr(kv, table, pos, layer, h, 1), kv->dtype, v + (size_t)h * hd, hd);
    }
}

void attn_load_kv(const kvlm_kv *kv, int seq, int pos, int layer, int kv_head, int is_v, float *out) {
    const unsigned char *p = kv_table_slot_ptr(kv, kv_layer_table(kv, seq, layer), pos, layer, kv_head, is_v);
    for (int i = 0; i < kv->head_dim; i++) out[i] = dtype_load(kv->dtype, p, (size_t)i);
}
