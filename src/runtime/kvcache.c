/*
 * Paged KV cache: block pool, layer slices with a block table each,
 * reference counts, the append protocol with copy-on-write, the prefix
 * index with its LRU of reusable blocks, window slices giving back what
 * their window left, and byte accounting (see runtime/kvcache.h for the
 * interface and design, runtime/kv_layout.h for the layout; the invariants
 * are checked in runtime/kv_check.c).
 */
#include "runtime/kvcache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <xxhash.h>

#include "error.h"
#include "model/model.h"
#include "runtime/kv_layout.h"
#include "runtime/kv_tiers.h"
#include "tensor.h"

static uint64_t default_hash(uint64_t parent, const int32_t *tokens, int n) {
    return XXH3_64bits_withSeed(tokens, (size_t)n * sizeof(int32_t), parent);
}

/* ------------------------------------------------------------ lists */

static void lru_remove(kvlm_kv *kv, int b) {
    kv_block *k = &kv->blk[b];
    if (k->lru_prev >= 0) kv->blk[k->lru_prev].lru_next = k->lru_next;
    else kv->lru_head = k->lru_next;
    if (k->lru_next >= 0) kv->blk[k->lru_next].lru_prev = k->lru_prev;
    else kv->lru_tail = k->lru_prev;
    k->lru_prev = k->lru_next = -1;
    k->in_lru = 0;
    kv->n_lru--;
}

static void lru_push_tail(kvlm_kv *kv, int b) {
    kv_block *k = &kv->blk[b];
    k->lru_prev = kv->lru_tail;
    k->lru_next = -1;
    if (kv->lru_tail >= 0) kv->blk[kv->lru_tail].lru_next = b;
    else kv->lru_head = b;
    kv->lru_tail = b;
    k->in_lru = 1;
    kv->n_lru++;
}

static void index_insert(kvlm_kv *kv, int b) {
    size_t i = kv_bucket_of(kv, kv->blk[b].hash);
    kv->blk[b].next_in_bucket = kv->bucket[i];
    kv->bucket[i] = b;
}

static void index_remove(kvlm_kv *kv, int b) {
    int *p = &kv->bucket[kv_bucket_of(kv, kv->blk[b].hash)];
    while (*p >= 0 && *p != b) p = &kv->blk[*p].next_in_bucket;
    if (*p == b) *p = kv->blk[b].next_in_bucket;
    kv->blk[b].next_in_bucket = -1;
    kv->blk[b].node = 0;
}

int kv_index_find(const kvlm_kv *kv, uint64_t h, uint64_t parent, const int32_t *tokens) {
    for (int b = kv->bucket[kv_bucket_of(kv, h)]; b >= 0; b = kv->blk[b].next_in_bucket) {
        const kv_block *k = &kv->blk[b];
        if (k->hash == h && k->parent == parent && k->slice == kv->anchor &&
            !memcmp(kv->blk_tokens + (size_t)b * kv->block_size, tokens, (size_t)kv->block_size * sizeof(int32_t)))
            return b;
    }
    return -1;
}

/* The key of slice s's block for the prefix the anchor registered as node. */
static uint64_t slice_key(uint64_t node, int s) {
    uint64_t x = node * 0x9e3779b97f4a7c15ull ^ ((uint64_t)s + 1) * 0xbf58476d1ce4e5b9ull;
    return x ^ (x >> 29);
}

int kv_index_find_slice(const kvlm_kv *kv, uint64_t node, int s) {
    const uint64_t h = slice_key(node, s);
    for (int b = kv->bucket[kv_bucket_of(kv, h)]; b >= 0; b = kv->blk[b].next_in_bucket) {
        const kv_block *k = &kv->blk[b];
        if (k->hash == h && k->parent == node && k->slice == s) return b;
    }
    return -1;
}

/* ------------------------------------------------------------ blocks */

/* A private, writable block (refcount 1): free first, else the least
 * recently used cached block. -1 when the pool is exhausted. */
int kv_alloc_block(kvlm_kv *kv) {
    int b = -1;
    if (kv->n_free) {
        b = kv->free_stack[--kv->n_free];
    } else if (kv->lru_head >= 0) {
        b = kv->lru_head;
        if (kv->tiers) kv_tier_on_evict(kv, b);
        lru_remove(kv, b);
        index_remove(kv, b);
        kv->counters.evictions++;
    }
    if (b >= 0) {
        kv->blk[b].refcount = 1;
        kv->blk[b].filled = 0;
        kv->n_used++;
    }
    return b;
}

static void ref_block(kvlm_kv *kv, int b) {
    if (kv->blk[b].refcount++ == 0 && !kv->blk[b].pins) {
        if (kv->blk[b].in_lru) lru_remove(kv, b);
        kv->n_used++;
    }
}

void kv_unref_block(kvlm_kv *kv, int b) {
    kv_block *k = &kv->blk[b];
    if (--k->refcount > 0 || k->pins) return;
    kv->n_used--;
    if (k->node) {
        lru_push_tail(kv, b); /* full and indexed: kept for reuse */
    } else {
        k->filled = 0;
        kv->free_stack[kv->n_free++] = b;
    }
}

void kv_block_pin(kvlm_kv *kv, int b) {
    kv_block *k = &kv->blk[b];
    if (k->pins++) return;
    kv->n_pinned++;
    if (k->refcount) return;
    if (k->in_lru) lru_remove(kv, b);
    kv->n_used++;
}

void kv_block_unpin(kvlm_kv *kv, int b) {
    kv_block *k = &kv->blk[b];
    if (--k->pins) return;
    kv->n_pinned--;
    if (k->refcount) return;
    k->refcount = 1; /* back to the LRU list (or the free stack) as a sequence's last reference would */
    kv_unref_block(kv, b);
}

/* Drops the last table entry of every slice (a released -1 is skipped). */
static void pop_row(kvlm_kv *kv, kv_seq *q) {
    const int j = --q->n_blocks;
    for (int s = 0; s < kv->n_slices; s++) {
        const int b = kv_tab(kv, q, s)[j];
        if (b >= 0) kv_unref_block(kv, b);
        if (q->n_released[s] > q->n_blocks) q->n_released[s] = q->n_blocks;
    }
}

/* Grows every slice's block table to `need` entries with fresh private
 * blocks, a row (one block per slice) at a time. On failure the rows taken
 * so far stay in the tables, a partial row is given back. */
static int take_blocks(kvlm_kv *kv, kv_seq *q, int need, kvlm_error *err) {
    while (q->n_blocks < need) {
        for (int s = 0; s < kv->n_slices; s++) {
            const int b = kv_alloc_block(kv);
            if (b < 0) {
                while (s-- > 0) kv_unref_block(kv, kv_tab(kv, q, s)[q->n_blocks]);
                return kvlm_error_set(err, KVLM_ERR_NOMEM, "KV pool exhausted: %zu blocks of %d tokens all in use",
                                      kv->n_blocks, kv->block_size);
            }
            kv_tab(kv, q, s)[q->n_blocks] = b;
        }
        q->n_blocks++;
    }
    return KVLM_OK;
}

/* ------------------------------------------------------------ create */

size_t kv_row_bytes(kvlm_dtype t, int head_dim) {
    if (head_dim <= 0) return 0;
    switch (t) {
    case KVLM_F32: case KVLM_F16: return (size_t)head_dim * kvlm_dtype_size(t);
    case KVLM_Q8_0: return head_dim % QK ? 0 : (size_t)(head_dim / QK) * sizeof(blk_q8_0);
    default: return 0;
    }
}

size_t kvlm_kv_bytes_per_token(const kvlm_config *c, kvlm_dtype t) {
    if (c->n_layer <= 0 || c->n_kv_head <= 0) return 0;
    size_t v;
    if (__builtin_mul_overflow(2 * (size_t)c->n_layer, (size_t)c->n_kv_head, &v) ||
        __builtin_mul_overflow(v, kv_row_bytes(t, c->head_dim), &v))
        return 0; /* a shape beyond the address space has no cache either */
    return v;
}

kvlm_kv_options kvlm_kv_default_params(void) {
    return (kvlm_kv_options){.dtype = KVLM_F32, .block_size = 16, .n_blocks = 0, .max_seqs = 1};
}

static int gcd(int a, int b) {
    while (b) {
        const int t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* Groups m's layers by window and cuts the groups into slices of the
 * greatest common divisor of their sizes: layer_slice, layer_pos,
 * slice_window, the anchor (the first global slice, else slice 0). */
static int plan_slices(kvlm_kv *kv, const kvlm_model *m) {
    const int L = kv->n_layer;
    kv->layer_slice = malloc((size_t)L * sizeof(int));
    kv->layer_pos = malloc((size_t)L * sizeof(int));
    kv->layer_window = malloc((size_t)L * sizeof(int));
    kv->slice_window = malloc((size_t)L * sizeof(int));
    kv->slice_release = malloc((size_t)L * sizeof(int));
    int *done = calloc((size_t)L, sizeof(int));
    if (!kv->layer_slice || !kv->layer_pos || !kv->layer_window || !kv->slice_window || !kv->slice_release || !done) {
        free(done);
        return -1;
    }
    for (int l = 0; l < L; l++) kv->layer_window[l] = model_layer_window(m, l);
    int u = 0;
    for (int l = 0; l < L; l++) {
        if (done[l]) continue;
        int n = 0;
        for (int k = l; k < L; k++)
            if (kv->layer_window[k] == kv->layer_window[l]) done[k] = 1, n++;
        u = gcd(u, n);
    }
    kv->slice_layers = u;
    kv->n_slices = 0;
    kv->anchor = -1;
    memset(done, 0, (size_t)L * sizeof(int));
    for (int l = 0; l < L; l++) {
        if (done[l]) continue;
        int n = 0;
        for (int k = l; k < L; k++) {
            if (kv->layer_window[k] != kv->layer_window[l]) continue;
            if (n % u == 0) {
                kv->slice_window[kv->n_slices] = kv->layer_window[l];
                if (kv->anchor < 0 && !kv->layer_window[l]) kv->anchor = kv->n_slices;
                kv->n_slices++;
            }
            done[k] = 1;
            kv->layer_slice[k] = kv->n_slices - 1;
            kv->layer_pos[k] = n % u;
            n++;
        }
    }
    if (kv->anchor < 0) kv->anchor = 0;
    for (int s = 0; s < kv->n_slices; s++)
        kv->slice_release[s] = kv->keep_whole || kv->reserve_blocks ? 0 : kv->slice_window[s];
    free(done);
    return 0;
}

kvlm_kv *kvlm_kv_create(const kvlm_model *m, const kvlm_kv_options *opt, kvlm_error *err) {
    const kvlm_config *c = kvlm_model_config(m);
    kvlm_kv_options o = opt ? *opt : kvlm_kv_default_params();
    if (o.block_size == 0) o.block_size = 16;
    if (o.max_seqs == 0) o.max_seqs = 1;
    if (!kvlm_kv_dtype_supported(o.dtype)) {
        kvlm_error_set(err, KVLM_ERR_ARG, "kv dtype %s is not supported (f32, f16, q8_0)", kvlm_dtype_name(o.dtype));
        return NULL;
    }
    if (!kvlm_kv_bytes_per_token(c, o.dtype)) {
        if (o.dtype == KVLM_Q8_0 && c->head_dim > 0)
            kvlm_error_set(err, KVLM_ERR_ARG, "kv dtype q8_0 needs a head dim that is a multiple of %d (this model's "
                           "is %d)", QK, c->head_dim);
        else
            kvlm_error_set(err, KVLM_ERR_ARG, "a model of %d layers, %d KV heads of %d has no KV cache", c->n_layer,
                           c->n_kv_head, c->head_dim);
        return NULL;
    }
    if (o.reserve_tokens < 0 || o.reserve_tokens > c->n_ctx) {
        kvlm_error_set(err, KVLM_ERR_ARG, "kv option reserve_tokens %d is outside [0, %d] (the context window)",
                       o.reserve_tokens, c->n_ctx);
        return NULL;
    }
    if (o.block_size < 1 || o.block_size > 4096 || o.max_seqs < 1 || o.max_seqs > (1 << 20) || o.keep_whole < 0 ||
        o.keep_whole > 1) {
        kvlm_error_set(err, KVLM_ERR_ARG, "kv options out of range: block_size %d (1..4096), max_seqs %d (1..%d), "
                       "keep_whole %d (0, 1)", o.block_size, o.max_seqs, 1 << 20, o.keep_whole);
        return NULL;
    }
    kvlm_kv *kv = calloc(1, sizeof *kv);
    if (!kv) { kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory"); return NULL; }
    kv->n_layer = c->n_layer;
    kv->n_kv_head = c->n_kv_head;
    kv->head_dim = c->head_dim;
    kv->n_ctx = c->n_ctx;
    kv->block_size = o.block_size;
    kv->max_blocks_per_seq = (c->n_ctx + o.block_size - 1) / o.block_size;
    kv->dtype = o.dtype;
    kv->reserve_blocks = (o.reserve_tokens + o.block_size - 1) / o.block_size;
    kv->keep_whole = o.keep_whole;
    if (plan_slices(kv, m)) {
        kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
        kvlm_kv_free(kv);
        return NULL;
    }
    /* A lookup hands a new sequence shared blocks; a reservation gives it
     * blocks of its own: the two do not mix. */
    kv->prefix_cache = !o.no_prefix_cache && o.reserve_tokens == 0;
    kv->hash = default_hash;
    kv->max_seqs = o.max_seqs;
    kv->row_bytes = kv_row_bytes(o.dtype, c->head_dim);
    kv->bytes_per_token = kvlm_kv_bytes_per_token(c, o.dtype);
    kv->slice_bytes_per_token = kv->bytes_per_token / (size_t)kv->n_layer * (size_t)kv->slice_layers;
    kv->head_bytes = (size_t)o.block_size * kv->row_bytes;
    kv->block_bytes = kv->slice_bytes_per_token * o.block_size;
    kv->n_blocks = o.n_blocks ? o.n_blocks : (size_t)o.max_seqs * kv->max_blocks_per_seq * kv->n_slices;
    if (kv->n_blocks > ((size_t)1 << 28) || kv->n_blocks > SIZE_MAX / kv->block_bytes) {
        kvlm_error_set(err, KVLM_ERR_ARG, "kv pool of %zu blocks is too large", kv->n_blocks);
        kvlm_kv_free(kv);
        return NULL;
    }
    kv->pool_bytes = kv->n_blocks * kv->block_bytes;
    /* Anonymous mapping: pages are committed only when a block is written. */
    void *pool = mmap(NULL, kv->pool_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                      -1, 0);
    kv->pool = pool == MAP_FAILED ? NULL : pool;
    for (kv->n_bucket = 16; kv->n_bucket < 2 * kv->n_blocks;) kv->n_bucket <<= 1;
    kv->blk = calloc(kv->n_blocks, sizeof *kv->blk);
    kv->blk_tokens = kv->prefix_cache ? malloc(kv->n_blocks * (size_t)o.block_size * sizeof(int32_t)) : NULL;
    kv->bucket = malloc(kv->n_bucket * sizeof(int));
    kv->free_stack = malloc(kv->n_blocks * sizeof(int));
    kv->seqs = calloc((size_t)o.max_seqs, sizeof(kv_seq));
    if (!kv->pool || !kv->blk || (kv->prefix_cache && !kv->blk_tokens) || !kv->bucket || !kv->free_stack ||
        !kv->seqs) {
        kvlm_error_set(err, KVLM_ERR_NOMEM, "cannot allocate a KV pool of %zu bytes", kv->pool_bytes);
        kvlm_kv_free(kv);
        return NULL;
    }
    memset(kv->bucket, -1, kv->n_bucket * sizeof(int));
    for (size_t i = 0; i < kv->n_blocks; i++) {
        kv->free_stack[i] = (int)(kv->n_blocks - 1 - i);
        kv->blk[i].next_in_bucket = kv->blk[i].lru_prev = kv->blk[i].lru_next = -1;
    }
    kv->n_free = kv->n_blocks;
    kv->lru_head = kv->lru_tail = -1;
    if (kv->prefix_cache && (o.tier_ram_bytes || (o.tier_dir && o.tier_dir[0]))) {
        kv_block_file_head layout = {.block_size = kv->block_size, .n_slices = kv->n_slices,
                                     .slice_bytes = kv->block_bytes};
        if (kv_fingerprint_for_cache(m, kv, &layout.fp, err) ||
            !(kv->tiers = kv_tiers_create(&layout, o.tier_ram_bytes, o.tier_dir, o.tier_disk_bytes, err)) ||
            kv_pins_load(kv, err)) {
            kvlm_kv_free(kv);
            return NULL;
        }
    }
    return kv;
}

void kvlm_kv_free(kvlm_kv *kv) {
    if (!kv) return;
    kv_pins_free(kv);
    kv_tiers_free(kv->tiers);
    if (kv->seqs)
        for (int i = 0; i < kv->max_seqs; i++) {
            free(kv->seqs[i].blocks);
            free(kv->seqs[i].n_released);
            free(kv->seqs[i].pend_cow);
            free(kv->seqs[i].bhash);
            free(kv->seqs[i].bnode);
            free(kv->seqs[i].tokens);
        }
    if (kv->pool) munmap(kv->pool, kv->pool_bytes);
    free(kv->layer_slice);
    free(kv->layer_pos);
    free(kv->layer_window);
    free(kv->slice_window);
    free(kv->slice_release);
    free(kv->blk);
    free(kv->blk_tokens);
    free(kv->bucket);
    free(kv->free_stack);
    free(kv->seqs);
    free(kv);
}

int kv_seq_valid(const kvlm_kv *kv, int seq) { return seq >= 0 && seq < kv->max_seqs && kv->seqs[seq].live; }

/* ------------------------------------------------------------ accessors */

int kv_block_size(const kvlm_kv *kv) { return kv->block_size; }
int kv_max_seqs(const kvlm_kv *kv) { return kv->max_seqs; }
int kv_n_ctx(const kvlm_kv *kv) { return kv->n_ctx; }
kvlm_dtype kv_dtype(const kvlm_kv *kv) { return kv->dtype; }
size_t kv_n_blocks(const kvlm_kv *kv) { return kv->n_blocks; }
int kv_n_slices(const kvlm_kv *kv) { return kv->n_slices; }

int kv_fits_model(const kvlm_kv *kv, const kvlm_model *m) {
    const kvlm_config *c = kvlm_model_config(m);
    if (kv->n_layer != c->n_layer || kv->n_kv_head != c->n_kv_head || kv->head_dim != c->head_dim ||
        kv->n_ctx != c->n_ctx)
        return 0;
    for (int l = 0; l < c->n_layer; l++)
        if (kv->layer_window[l] != model_layer_window(m, l)) return 0;
    return 1;
}

size_t kv_new_seq_blocks(const kvlm_kv *kv) { return (size_t)kv->reserve_blocks * kv->n_slices; }

const int32_t *kv_seq_tokens(const kvlm_kv *kv, int seq) {
    return kv_seq_valid(kv, seq) ? kv->seqs[seq].tokens : NULL;
}

int kv_seq_blocks(const kvlm_kv *kv, int seq, const int **table) {
    *table = kv_seq_valid(kv, seq) ? kv->seqs[seq].blocks : NULL;
    return *table ? kv->seqs[seq].n_blocks : 0;
}

int kv_seq_slice_blocks(const kvlm_kv *kv, int seq, int slice, const int **table) {
    *table = kv_seq_valid(kv, seq) && slice >= 0 && slice < kv->n_slices ? kv_tab(kv, &kv->seqs[seq], slice) : NULL;
    return *table ? kv->seqs[seq].n_blocks : 0;
}

void kv_block_states(const kvlm_kv *kv, int *refs, unsigned char *cached) {
    for (size_t b = 0; b < kv->n_blocks; b++) {
        refs[b] = kv->blk[b].refcount;
        cached[b] = (unsigned char)(kv->blk[b].refcount == 0 && kv->blk[b].in_lru);
    }
}

int kv_set_block_hash(kvlm_kv *kv, kv_block_hash_fn fn, kvlm_error *err) {
    if (kv->next_node) return kvlm_error_set(err, KVLM_ERR_ARG, "the prefix index already holds blocks");
    kv->hash = fn ? fn : default_hash;
    return KVLM_OK;
}

/* ------------------------------------------------------------ sequences */

static int seq_alloc(kvlm_kv *kv, kvlm_error *err) {
    int id = -1;
    for (int i = 0; i < kv->max_seqs && id < 0; i++)
        if (!kv->seqs[i].live) id = i;
    if (id < 0) return kvlm_error_set(err, KVLM_ERR_NOMEM, "all %d sequence slots are in use", kv->max_seqs);
    kv_seq *q = &kv->seqs[id];
    size_t mb = (size_t)kv->max_blocks_per_seq, ns = (size_t)kv->n_slices;
    if (!q->blocks) q->blocks = malloc(mb * ns * sizeof(int));
    if (!q->n_released) q->n_released = malloc(ns * sizeof(int));
    if (!q->pend_cow) q->pend_cow = malloc(ns * sizeof(int));
    if (!q->bhash) q->bhash = malloc(mb * sizeof(uint64_t));
    if (!q->bnode) q->bnode = malloc(mb * sizeof(uint64_t));
    if (!q->tokens) q->tokens = malloc((size_t)kv->n_ctx * sizeof(int32_t));
    if (!q->blocks || !q->n_released || !q->pend_cow || !q->bhash || !q->bnode || !q->tokens)
        return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    q->live = 1;
    q->len = q->n_blocks = q->n_indexed = q->pend_n = q->pend_blocks = 0;
    for (int s = 0; s < kv->n_slices; s++) {
        q->n_released[s] = 0;
        q->pend_cow[s] = -1;
    }
    return id;
}

int kvlm_kv_seq_new(kvlm_kv *kv, kvlm_error *err) {
    int id = seq_alloc(kv, err);
    if (id < 0) return id;
    int rc = take_blocks(kv, &kv->seqs[id], kv->reserve_blocks, err);
    if (rc < 0) {
        kvlm_kv_seq_free(kv, id);
        return rc;
    }
    return id;
}

static void index_full_blocks(kvlm_kv *kv, kv_seq *q);

/* The longest prefix of the J anchor-matched blocks every slice can serve:
 * a global slice needs blocks 0 .. J' - 1, a window slice only those its
 * window still reads at J' x block_size tokens. found[s * J + j]: slice
 * s's indexed block for block j, or -1. */
static int servable_blocks(const kvlm_kv *kv, const int *found, int J) {
    for (int n = J; n > 0; n--) {
        int ok = 1;
        for (int s = 0; s < kv->n_slices && ok; s++) {
            const int lo = kv_window_start(kv->slice_release[s], n * kv->block_size) / kv->block_size;
            for (int j = lo; j < n && ok; j++) ok = found[(size_t)s * J + j] >= 0;
        }
        if (ok) return n;
    }
    return 0;
}

/* whole: every whole block of the n tokens may come from the cache (else
 * one token is left to compute) and no prefix query is counted. */
static int seq_new_lookup(kvlm_kv *kv, const int32_t *prompt, int n, int whole, int *n_cached, kvlm_error *err) {
    *n_cached = 0;
    if (n < 0 || n > kv->n_ctx)
        return kvlm_error_set(err, KVLM_ERR_ARG, "prompt of %d tokens is outside the context window of %d", n,
                              kv->n_ctx);
    int id = kvlm_kv_seq_new(kv, err);
    if (id < 0 || !kv->prefix_cache) return id;
    kv_seq *q = &kv->seqs[id];
    const int bs = kv->block_size, max_blocks = whole ? n / bs : n > 0 ? (n - 1) / bs : 0; /* leave a token to compute */
    int *found = max_blocks ? malloc((size_t)max_blocks * kv->n_slices * sizeof(int)) : NULL;
    uint64_t h = 0, node = 0;
    int J = 0;
    /* The anchor's chain verifies every token id; each other slice's block
     * is looked up under the anchor's registration number. */
    for (; found && J < max_blocks; J++) {
        h = kv->hash(h, prompt + (size_t)J * bs, bs);
        int b = kv_index_find(kv, h, node, prompt + (size_t)J * bs);
        if (b < 0) break;
        node = kv->blk[b].node;
        q->bhash[J] = h;
        q->bnode[J] = node;
    }
    for (int s = 0; s < kv->n_slices; s++)
        for (int j = 0; j < J; j++)
            found[(size_t)s * J + j] = s == kv->anchor ? kv_index_find(kv, q->bhash[j], j ? q->bnode[j - 1] : 0,
                                                                   prompt + (size_t)j * bs)
                                                       : kv_index_find_slice(kv, q->bnode[j], s);
    const int M = J; /* found[] rows */
    J = servable_blocks(kv, found, M);
    for (int s = 0; s < kv->n_slices; s++) {
        const int lo = kv_window_start(kv->slice_release[s], J * bs) / bs;
        int *t = kv_tab(kv, q, s);
        for (int j = 0; j < J; j++) {
            t[j] = j < lo ? -1 : found[(size_t)s * M + j];
            if (j >= lo) ref_block(kv, t[j]);
        }
        q->n_released[s] = lo;
    }
    free(found);
    q->n_blocks = q->n_indexed = J;
    const int pool_hits = J;
    if (kv->tiers && J == M) J = kv_tier_restore(kv, q, prompt, J, max_blocks); /* memory, then disk */
    q->len = *n_cached = J * bs;
    memcpy(q->tokens, prompt, (size_t)q->len * sizeof(int32_t));
    if (J > pool_hits) index_full_blocks(kv, q);
    if (whole) return id;
    kv->counters.prefix_queries++;
    kv->counters.prefix_query_tokens += (uint64_t)n;
    if (J > 0) {
        kv->counters.prefix_hits++;
        kv->counters.prefix_hit_tokens += (uint64_t)*n_cached;
    }
    return id;
}

int kvlm_kv_seq_new_prefixed(kvlm_kv *kv, const int32_t *prompt, int n, int *n_cached, kvlm_error *err) {
    return seq_new_lookup(kv, prompt, n, 0, n_cached, err);
}

int kv_seq_new_cached(kvlm_kv *kv, const int32_t *prompt, int n, int *n_cached, kvlm_error *err) {
    return seq_new_lookup(kv, prompt, n, 1, n_cached, err);
}

int kvlm_kv_seq_fork(kvlm_kv *kv, int parent, kvlm_error *err) {
    if (!kv_seq_valid(kv, parent)) return kvlm_error_set(err, KVLM_ERR_ARG, "fork: no sequence %d", parent);
    if (kv->seqs[parent].pend_n)
        return kvlm_error_set(err, KVLM_ERR_ARG, "fork: sequence %d has an append in progress", parent);
    int id = kvlm_kv_seq_new(kv, err);
    if (id < 0) return id;
    const kv_seq *p = &kv->seqs[parent];
    kv_seq *q = &kv->seqs[id];
    /* The parent's blocks with tokens: copied into blocks the child already
     * holds (its reservation), shared beyond them. */
    const int rows = (p->len + kv->block_size - 1) / kv->block_size, held = q->n_blocks;
    for (int s = 0; s < kv->n_slices; s++) {
        const int *pt = kv_tab(kv, p, s);
        int *t = kv_tab(kv, q, s);
        for (int j = 0; j < rows; j++) {
            const int b = pt[j];
            if (b < 0) { /* released by the window (never under a reservation) */
                t[j] = -1;
                q->n_released[s]++;
            } else if (j < held) {
                memcpy(kv->pool + (size_t)t[j] * kv->block_bytes, kv->pool + (size_t)b * kv->block_bytes,
                       kv->block_bytes);
                kv->blk[t[j]].filled = kv->blk[b].filled;
            } else {
                ref_block(kv, b);
                t[j] = b;
            }
        }
    }
    if (rows > q->n_blocks) q->n_blocks = rows;
    memcpy(q->bhash, p->bhash, (size_t)p->n_indexed * sizeof(uint64_t));
    memcpy(q->bnode, p->bnode, (size_t)p->n_indexed * sizeof(uint64_t));
    q->n_indexed = p->n_indexed;
    memcpy(q->tokens, p->tokens, (size_t)p->len * sizeof(int32_t));
    q->len = p->len;
    return id;
}

void kvlm_kv_seq_free(kvlm_kv *kv, int seq) {
    if (!kv_seq_valid(kv, seq)) return;
    kv_append_abort(kv, seq);
    kv_seq *q = &kv->seqs[seq];
    while (q->n_blocks > 0) pop_row(kv, q);
    q->live = 0;
    q->len = q->n_indexed = 0;
}

/* Full blocks not yet in the chain enter the index: the anchor's block
 * under its chain hash (or, when an identical block is indexed already,
 * its registration number is taken so later blocks still find their
 * parent), then each other slice's block under that number. */
static void index_full_blocks(kvlm_kv *kv, kv_seq *q) {
    const int bs = kv->block_size;
    while (q->n_indexed < q->len / bs) {
        const int j = q->n_indexed;
        const uint64_t ph = j ? q->bhash[j - 1] : 0, pn = j ? q->bnode[j - 1] : 0;
        const int32_t *toks = q->tokens + (size_t)j * bs;
        const uint64_t h = kv->hash(ph, toks, bs);
        const int b = kv_tab(kv, q, kv->anchor)[j];
        uint64_t node = b >= 0 && kv->blk[b].node ? kv->blk[b].node : 0;
        int fresh = 0;
        if (!node) {
            int same = kv_index_find(kv, h, pn, toks);
            if (same >= 0) {
                node = kv->blk[same].node;
            } else if (b >= 0) {
                kv_block *k = &kv->blk[b];
                k->hash = h;
                k->phash = ph;
                k->parent = pn;
                k->slice = kv->anchor;
                k->node = node = ++kv->next_node;
                memcpy(kv->blk_tokens + (size_t)b * bs, toks, (size_t)bs * sizeof(int32_t));
                index_insert(kv, b);
                fresh = 1;
            } else {
                node = ++kv->next_node; /* a released anchor block: the chain goes on, unreachable */
            }
        }
        for (int s = 0; s < kv->n_slices; s++) {
            const int bb = kv_tab(kv, q, s)[j];
            if (s == kv->anchor || bb < 0 || kv->blk[bb].node || kv_index_find_slice(kv, node, s) >= 0) continue;
            kv_block *k = &kv->blk[bb];
            k->hash = slice_key(node, s);
            k->parent = node;
            k->slice = s;
            k->node = ++kv->next_node;
            index_insert(kv, bb);
        }
        if (fresh && kv->tiers) kv_tier_on_index(kv, q, j, h, ph);
        q->bhash[j] = h;
        q->bnode[j] = node;
        q->n_indexed++;
    }
}

/* Window slices: gives back the sequence's reference to every block whose
 * positions all lie before the slice's window at its next query (len - W +
 * 1 on). Such a block is full, so with the prefix cache on it is already
 * indexed and, once no sequence holds it, waits on the LRU list for reuse;
 * other sequences sharing it keep it. Global slices, keep_whole and
 * reservations keep every block. */
static void release_outside_window(kvlm_kv *kv, kv_seq *q) {
    for (int s = 0; s < kv->n_slices; s++) {
        if (!kv->slice_release[s]) continue;
        const int first_needed = kv_window_start(kv->slice_release[s], q->len) / kv->block_size;
        int *t = kv_tab(kv, q, s);
        while (q->n_released[s] < first_needed) {
            kv_unref_block(kv, t[q->n_released[s]]);
            t[q->n_released[s]++] = -1;
        }
    }
}

/* ------------------------------------------------------------ appending */

/* Gives back the blocks a reservation took and puts copied tails back. */
static void undo_reservation(kvlm_kv *kv, kv_seq *q) {
    while (q->n_blocks > q->pend_blocks) pop_row(kv, q);
    const int j = q->len / kv->block_size;
    for (int s = 0; s < kv->n_slices; s++)
        if (q->pend_cow[s] >= 0) {
            int *t = kv_tab(kv, q, s);
            kv_unref_block(kv, t[j]); /* the private copy: back to the free stack */
            t[j] = q->pend_cow[s];
            q->pend_cow[s] = -1;
        }
    q->pend_n = 0;
}

int kv_append_reserve(kvlm_kv *kv, int seq, int n, kvlm_error *err) {
    if (!kv_seq_valid(kv, seq)) return kvlm_error_set(err, KVLM_ERR_ARG, "no sequence %d", seq);
    kv_seq *q = &kv->seqs[seq];
    if (q->pend_n)
        return kvlm_error_set(err, KVLM_ERR_ARG, "sequence %d already has %d positions reserved", seq, q->pend_n);
    if (n < 1 || n > kv->n_ctx - q->len)
        return kvlm_error_set(err, KVLM_ERR_ARG, "sequence %d of %d tokens cannot take %d more (context window %d)", seq,
                              q->len, n, kv->n_ctx);
    const int bs = kv->block_size, j = q->len / bs;
    q->pend_blocks = q->n_blocks;
    /* A partly filled tail block that is shared or indexed is copied: the
     * sharers and the index keep the original, put back by an abort. */
    for (int s = 0; s < kv->n_slices && q->len % bs && j < q->n_blocks; s++) {
        int *t = kv_tab(kv, q, s);
        const int b = t[j];
        if (b < 0 || (kv->blk[b].refcount == 1 && !kv->blk[b].node)) continue;
        const int nb = kv_alloc_block(kv);
        if (nb < 0) {
            undo_reservation(kv, q);
            return kvlm_error_set(err, KVLM_ERR_NOMEM, "KV pool exhausted: no block for a copy-on-write (%zu blocks)",
                                  kv->n_blocks);
        }
        memcpy(kv->pool + (size_t)nb * kv->block_bytes, kv->pool + (size_t)b * kv->block_bytes, kv->block_bytes);
        kv->blk[nb].filled = q->len % bs;
        t[j] = nb;
        q->pend_cow[s] = b;
    }
    int rc = take_blocks(kv, q, (q->len + n + bs - 1) / bs, err);
    if (rc) undo_reservation(kv, q);
    else q->pend_n = n;
    return rc;
}

int kv_append_pending(const kvlm_kv *kv, int seq) { return kv_seq_valid(kv, seq) ? kv->seqs[seq].pend_n : 0; }

void kv_append_abort(kvlm_kv *kv, int seq) {
    if (kv_seq_valid(kv, seq) && kv->seqs[seq].pend_n) undo_reservation(kv, &kv->seqs[seq]);
}

void kv_append_commit(kvlm_kv *kv, int seq, const int32_t *tokens) {
    kv_seq *q = &kv->seqs[seq];
    const int bs = kv->block_size, old = q->len, n = q->pend_n;
    for (int s = 0; s < kv->n_slices; s++)
        if (q->pend_cow[s] >= 0) {
            kv_unref_block(kv, q->pend_cow[s]);
            q->pend_cow[s] = -1;
            kv->counters.cow_copies++;
        }
    q->pend_n = 0;
    memcpy(q->tokens + old, tokens, (size_t)n * sizeof(int32_t));
    q->len += n;
    for (int s = 0; s < kv->n_slices; s++) {
        const int *t = kv_tab(kv, q, s);
        for (int j = old / bs; j * bs < q->len; j++) {
            int f = q->len - j * bs < bs ? q->len - j * bs : bs;
            if (t[j] >= 0 && kv->blk[t[j]].filled < f) kv->blk[t[j]].filled = f;
        }
    }
    if (kv->prefix_cache) index_full_blocks(kv, q);
    release_outside_window(kv, q);
}

static void seq_truncate(kvlm_kv *kv, int seq, int len) {
    kv_seq *q = &kv->seqs[seq];
    const int bs = kv->block_size;
    if (len < q->len) q->len = len;
    if (q->n_indexed > q->len / bs) q->n_indexed = q->len / bs;
    int need = (q->len + bs - 1) / bs;
    if (need < kv->reserve_blocks) need = kv->reserve_blocks;
    while (q->n_blocks > need) pop_row(kv, q);
    /* Blocks this sequence alone writes now hold only its remaining tokens
     * (a shared or indexed block keeps its fill for its other holders). */
    for (int s = 0; s < kv->n_slices; s++) {
        const int *t = kv_tab(kv, q, s);
        for (int j = q->len / bs; j < q->n_blocks; j++) {
            if (t[j] < 0) continue;
            kv_block *k = &kv->blk[t[j]];
            const int f = q->len - j * bs; /* < bs here; < 0 for reserved blocks past the tokens */
            if (k->refcount == 1 && !k->node) k->filled = f > 0 ? f : 0;
        }
    }
}

int kvlm_kv_seq_truncate(kvlm_kv *kv, int seq, int len, kvlm_error *err) {
    if (!kv_seq_valid(kv, seq)) return kvlm_error_set(err, KVLM_ERR_ARG, "no sequence %d", seq);
    const kv_seq *q = &kv->seqs[seq];
    if (q->pend_n) return kvlm_error_set(err, KVLM_ERR_ARG, "sequence %d has an append in progress", seq);
    if (len < 0 || len > q->len)
        return kvlm_error_set(err, KVLM_ERR_ARG, "cannot truncate sequence %d of %d tokens to %d", seq, q->len, len);
    for (int s = 0; s < kv->n_slices && len > 0; s++) {
        const int released = q->n_released[s] * kv->block_size, W = kv->slice_release[s];
        if (kv_window_start(W, len) < released)
            return kvlm_error_set(err, KVLM_ERR_ARG,
                                  "cannot truncate sequence %d to %d tokens: positions before %d left the sliding "
                                  "window of %d and were released (truncate to 0, or to at least %d)", seq, len,
                                  released, W, released + W - 1);
    }
    seq_truncate(kv, seq, len);
    return KVLM_OK;
}

int kvlm_kv_seq_len(const kvlm_kv *kv, int seq, kvlm_error *err) {
    return kv_seq_valid(kv, seq) ? kv->seqs[seq].len : kvlm_error_set(err, KVLM_ERR_ARG, "no sequence %d", seq);
}

size_t kvlm_kv_available_blocks(const kvlm_kv *kv) { return kv->n_free + kv->n_lru; }

size_t kvlm_kv_blocks_needed(const kvlm_kv *kv, int seq, int len) {
    if (!kv_seq_valid(kv, seq)) return 0;
    const kv_seq *q = &kv->seqs[seq];
    const int bs = kv->block_size, j = q->len / bs;
    const size_t need = (size_t)((len + bs - 1) / bs), have = (size_t)q->n_blocks;
    size_t total = (need > have ? need - have : 0) * (size_t)kv->n_slices;
    for (int s = 0; s < kv->n_slices; s++) {
        const int b = j < q->n_blocks ? kv_tab(kv, q, s)[j] : -1;
        if (len > q->len && q->len % bs && b >= 0 && (kv->blk[b].refcount > 1 || kv->blk[b].node)) total++;
    }
    return total;
}

/* ------------------------------------------------------------ accounting */

void kvlm_kv_get_stats(const kvlm_kv *kv, kvlm_kv_stats *st) {
    *st = kv->counters;
    st->bytes_per_token = kv->bytes_per_token;
    st->block_bytes = kv->block_bytes;
    st->blocks_total = kv->n_blocks;
    st->blocks_used = kv->n_used;
    st->blocks_cached = kv->n_lru;
    st->blocks_free = kv->n_free;
    size_t slots = 0;
    for (size_t b = 0; b < kv->n_blocks; b++)
        if (kv->blk[b].refcount > 0 || kv->blk[b].pins > 0) {
            slots += (size_t)kv->blk[b].filled;
            st->blocks_shared += kv->blk[b].refcount > 1;
        }
    st->blocks_pinned = kv->n_pinned;
    for (int i = 0; i < kv->max_seqs; i++)
        if (kv->seqs[i].live) {
            st->seqs++;
            st->tokens += (size_t)kv->seqs[i].len;
        }
    st->tokens_stored = slots / (size_t)kv->n_slices;
    st->bytes_pool = kv->pool_bytes;
    st->bytes_reserved = st->blocks_used * kv->block_bytes;
    st->bytes_live = slots * kv->slice_bytes_per_token;
    st->bytes_slack = st->bytes_reserved - st->bytes_live;
    st->utilisation = st->bytes_reserved ? (double)st->bytes_live / st->bytes_reserved : 0;
    kv_tiers_stats(kv->tiers, st);
}
