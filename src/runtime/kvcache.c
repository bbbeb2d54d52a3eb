/*
 * Paged KV cache: block pool, reference counts, the append protocol with
 * copy-on-write, the prefix index with its LRU of reusable blocks, and byte
 * accounting (see runtime/kvcache.h for the interface and design,
 * runtime/kv_layout.h for the layout and its invariants).
 */
#include "runtime/kvcache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <xxhash.h>

#include "error.h"
#include "runtime/kv_layout.h"
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

static size_t bucket_of(const kvlm_kv *kv, uint64_t h) {
    return (size_t)(h ^ (h >> 31)) & (kv->n_bucket - 1);
}

static void index_insert(kvlm_kv *kv, int b) {
    size_t i = bucket_of(kv, kv->blk[b].hash);
    kv->blk[b].next_in_bucket = kv->bucket[i];
    kv->bucket[i] = b;
}

static void index_remove(kvlm_kv *kv, int b) {
    int *p = &kv->bucket[bucket_of(kv, kv->blk[b].hash)];
    while (*p >= 0 && *p != b) p = &kv->blk[*p].next_in_bucket;
    if (*p == b) *p = kv->blk[b].next_in_bucket;
    kv->blk[b].next_in_bucket = -1;
    kv->blk[b].node = 0;
}

/* An indexed block with this hash, parent and exactly these tokens. */
static int index_find(const kvlm_kv *kv, uint64_t h, uint64_t parent, const int32_t *tokens) {
    for (int b = kv->bucket[bucket_of(kv, h)]; b >= 0; b = kv->blk[b].next_in_bucket) {
        const kv_block *k = &kv->blk[b];
        if (k->hash == h && k->parent == parent &&
            !memcmp(kv->blk_tokens + (size_t)b * kv->block_size, tokens, (size_t)kv->block_size * sizeof(int32_t)))
            return b;
    }
    return -1;
}

/* ------------------------------------------------------------ blocks */

/* A private, writable block (refcount 1): free first, else the least
 * recently used cached block. -1 when the pool is exhausted. */
static int alloc_block(kvlm_kv *kv) {
    int b = -1;
    if (kv->n_free) {
        b = kv->free_stack[--kv->n_free];
    } else if (kv->lru_head >= 0) {
        b = kv->lru_head;
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
    if (kv->blk[b].refcount++ == 0) {
        if (kv->blk[b].in_lru) lru_remove(kv, b);
        kv->n_used++;
    }
}

static void unref_block(kvlm_kv *kv, int b) {
    kv_block *k = &kv->blk[b];
    if (--k->refcount > 0) return;
    kv->n_used--;
    if (k->node) {
        lru_push_tail(kv, b); /* full and indexed: kept for reuse */
    } else {
        k->filled = 0;
        kv->free_stack[kv->n_free++] = b;
    }
}

/* Grows seq's block table to `need` blocks with fresh private ones. On
 * failure the blocks taken so far stay in the table. */
static int take_blocks(kvlm_kv *kv, kv_seq *s, int need, kvlm_error *err) {
    while (s->n_blocks < need) {
        int b = alloc_block(kv);
        if (b < 0)
            return kvlm_error_set(err, KVLM_ERR_NOMEM, "KV pool exhausted: %zu blocks of %d tokens all in use",
                                  kv->n_blocks, kv->block_size);
        s->blocks[s->n_blocks++] = b;
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
    if (o.block_size < 1 || o.block_size > 4096 || o.max_seqs < 1 || o.max_seqs > (1 << 20)) {
        kvlm_error_set(err, KVLM_ERR_ARG, "kv options out of range: block_size %d (1..4096), max_seqs %d (1..%d)",
                       o.block_size, o.max_seqs, 1 << 20);
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
    kv->window = c->sliding_window > 0 && c->sliding_window < c->n_ctx ? c->sliding_window : 0;
    /* A lookup hands a new sequence shared blocks; a reservation gives it
     * blocks of its own: the two do not mix. */
    kv->prefix_cache = !o.no_prefix_cache && o.reserve_tokens == 0;
    kv->hash = default_hash;
    kv->max_seqs = o.max_seqs;
    kv->row_bytes = kv_row_bytes(o.dtype, c->head_dim);
    kv->bytes_per_token = kvlm_kv_bytes_per_token(c, o.dtype);
    kv->head_bytes = (size_t)o.block_size * kv->row_bytes;
    kv->block_bytes = kv->bytes_per_token * o.block_size;
    kv->n_blocks = o.n_blocks ? o.n_blocks : (size_t)o.max_seqs * kv->max_blocks_per_seq;
    if (kv->n_blocks > ((size_t)1 << 28) || kv->n_blocks > SIZE_MAX / kv->block_bytes) {
        kvlm_error_set(err, KVLM_ERR_ARG, "kv pool of %zu blocks is too large", kv->n_blocks);
        free(kv);
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
    return kv;
}

void kvlm_kv_free(kvlm_kv *kv) {
    if (!kv) return;
    if (kv->seqs)
        for (int i = 0; i < kv->max_seqs; i++) {
            free(kv->seqs[i].blocks);
            free(kv->seqs[i].bhash);
            free(kv->seqs[i].bnode);
            free(kv->seqs[i].tokens);
        }
    if (kv->pool) munmap(kv->pool, kv->pool_bytes);
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

int kv_fits_model(const kvlm_kv *kv, const kvlm_config *c) {
    const int window = c->sliding_window > 0 && c->sliding_window < c->n_ctx ? c->sliding_window : 0;
    return kv->n_layer == c->n_layer && kv->n_kv_head == c->n_kv_head && kv->head_dim == c->head_dim &&
           kv->n_ctx == c->n_ctx && kv->window == window;
}

size_t kv_new_seq_blocks(const kvlm_kv *kv) { return (size_t)kv->reserve_blocks; }

const int32_t *kv_seq_tokens(const kvlm_kv *kv, int seq) {
    return kv_seq_valid(kv, seq) ? kv->seqs[seq].tokens : NULL;
}

int kv_seq_blocks(const kvlm_kv *kv, int seq, const int **table) {
    *table = kv_seq_valid(kv, seq) ? kv->seqs[seq].blocks : NULL;
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
    kv_seq *s = &kv->seqs[id];
    size_t mb = (size_t)kv->max_blocks_per_seq;
    if (!s->blocks) s->blocks = malloc(mb * sizeof(int));
    if (!s->bhash) s->bhash = malloc(mb * sizeof(uint64_t));
    if (!s->bnode) s->bnode = malloc(mb * sizeof(uint64_t));
    if (!s->tokens) s->tokens = malloc((size_t)kv->n_ctx * sizeof(int32_t));
    if (!s->blocks || !s->bhash || !s->bnode || !s->tokens) {
        return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    }
    s->live = 1;
    s->len = s->n_blocks = s->n_indexed = s->n_released = s->pend_n = s->pend_blocks = 0;
    s->pend_cow = -1;
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

int kvlm_kv_seq_new_prefixed(kvlm_kv *kv, const int32_t *prompt, int n, int *n_cached, kvlm_error *err) {
    *n_cached = 0;
    if (n < 0 || n > kv->n_ctx)
        return kvlm_error_set(err, KVLM_ERR_ARG, "prompt of %d tokens is outside the context window of %d", n,
                              kv->n_ctx);
    int id = kvlm_kv_seq_new(kv, err);
    if (id < 0 || !kv->prefix_cache) return id;
    kv_seq *s = &kv->seqs[id];
    const int bs = kv->block_size, max_blocks = n > 0 ? (n - 1) / bs : 0; /* leave a token to compute */
    uint64_t h = 0, node = 0;
    int j = 0;
    for (; j < max_blocks; j++) {
        h = kv->hash(h, prompt + (size_t)j * bs, bs);
        int b = index_find(kv, h, node, prompt + (size_t)j * bs);
        if (b < 0) break;
        ref_block(kv, b);
        node = kv->blk[b].node;
        s->blocks[s->n_blocks++] = b;
        s->bhash[j] = h;
        s->bnode[j] = node;
    }
    s->n_indexed = j;
    s->len = *n_cached = j * bs;
    memcpy(s->tokens, prompt, (size_t)s->len * sizeof(int32_t));
    kv->counters.prefix_queries++;
    kv->counters.prefix_query_tokens += (uint64_t)n;
    if (j > 0) {
        kv->counters.prefix_hits++;
        kv->counters.prefix_hit_tokens += (uint64_t)*n_cached;
    }
    return id;
}

int kvlm_kv_seq_fork(kvlm_kv *kv, int parent, kvlm_error *err) {
    if (!kv_seq_valid(kv, parent)) return kvlm_error_set(err, KVLM_ERR_ARG, "fork: no sequence %d", parent);
    if (kv->seqs[parent].pend_n)
        return kvlm_error_set(err, KVLM_ERR_ARG, "fork: sequence %d has an append in progress", parent);
    int id = kvlm_kv_seq_new(kv, err);
    if (id < 0) return id;
    const kv_seq *p = &kv->seqs[parent];
    kv_seq *s = &kv->seqs[id];
    /* The parent's blocks with tokens: copied into blocks the child already
     * holds (its reservation), shared beyond them. */
    for (int j = 0; j * kv->block_size < p->len; j++) {
        const int b = p->blocks[j];
        if (b < 0) { /* released by the window (never under a reservation) */
            s->blocks[s->n_blocks++] = -1;
            s->n_released++;
        } else if (j < s->n_blocks) {
            memcpy(kv->pool + (size_t)s->blocks[j] * kv->block_bytes, kv->pool + (size_t)b * kv->block_bytes,
                   kv->block_bytes);
            kv->blk[s->blocks[j]].filled = kv->blk[b].filled;
        } else {
            ref_block(kv, b);
            s->blocks[s->n_blocks++] = b;
        }
    }
    memcpy(s->bhash, p->bhash, (size_t)p->n_indexed * sizeof(uint64_t));
    memcpy(s->bnode, p->bnode, (size_t)p->n_indexed * sizeof(uint64_t));
    s->n_indexed = p->n_indexed;
    memcpy(s->tokens, p->tokens, (size_t)p->len * sizeof(int32_t));
    s->len = p->len;
    return id;
}

void kvlm_kv_seq_free(kvlm_kv *kv, int seq) {
    if (!kv_seq_valid(kv, seq)) return;
    kv_append_abort(kv, seq);
    kv_seq *s = &kv->seqs[seq];
    while (s->n_blocks > 0)
        if (s->blocks[--s->n_blocks] >= 0) unref_block(kv, s->blocks[s->n_blocks]);
    s->live = 0;
    s->len = s->n_indexed = s->n_released = 0;
}

/* Full blocks not yet in the chain enter the index (or join an identical
 * indexed block's chain, so later blocks still find their parent). */
static void index_full_blocks(kvlm_kv *kv, kv_seq *s) {
    const int bs = kv->block_size;
    while (s->n_indexed < s->len / bs) {
        const int j = s->n_indexed;
        const uint64_t ph = j ? s->bhash[j - 1] : 0, pn = j ? s->bnode[j - 1] : 0;
        const int32_t *toks = s->tokens + (size_t)j * bs;
        const uint64_t h = kv->hash(ph, toks, bs);
        const int b = s->blocks[j];
        uint64_t node = kv->blk[b].node;
        if (!node) {
            int same = index_find(kv, h, pn, toks);
            if (same >= 0) {
                node = kv->blk[same].node;
            } else {
                kv_block *k = &kv->blk[b];
                k->hash = h;
                k->parent = pn;
                k->node = node = ++kv->next_node;
                memcpy(kv->blk_tokens + (size_t)b * bs, toks, (size_t)bs * sizeof(int32_t));
                index_insert(kv, b);
            }
        }
        s->bhash[j] = h;
        s->bnode[j] = node;
        s->n_indexed++;
    }
}

/* The first position any later query of a sequence of len tokens reads
 * under the window (0 without one). */
static int window_start(const kvlm_kv *kv, int len) {
    return kv->window && len + 1 > kv->window ? len + 1 - kv->window : 0;
}

/* Sliding window: gives back the sequence's reference to every block whose
 * positions all lie before the window of its next query (len - W + 1 on).
 * Such a block is full, so with the prefix cache on it is already indexed
 * and, once no sequence holds it, waits on the LRU list for reuse; other
 * sequences sharing it keep it. Blocks a reservation holds are kept. */
static void release_outside_window(kvlm_kv *kv, kv_seq *s) {
    if (!kv->window || kv->reserve_blocks) return;
    const int first_needed = window_start(kv, s->len) / kv->block_size;
    while (s->n_released < first_needed) {
        unref_block(kv, s->blocks[s->n_released]);
        s->blocks[s->n_released++] = -1;
    }
}

/* ------------------------------------------------------------ appending */

/* Gives back the blocks a reservation took and puts a copied tail back. */
static void undo_reservation(kvlm_kv *kv, kv_seq *s) {
    while (s->n_blocks > s->pend_blocks) unref_block(kv, s->blocks[--s->n_blocks]);
    if (s->pend_cow >= 0) {
        const int j = s->len / kv->block_size;
        unref_block(kv, s->blocks[j]); /* the private copy: back to the free stack */
        s->blocks[j] = s->pend_cow;
    }
    s->pend_n = 0;
    s->pend_cow = -1;
}

int kv_append_reserve(kvlm_kv *kv, int seq, int n, kvlm_error *err) {
    if (!kv_seq_valid(kv, seq)) return kvlm_error_set(err, KVLM_ERR_ARG, "no sequence %d", seq);
    kv_seq *s = &kv->seqs[seq];
    if (s->pend_n)
        return kvlm_error_set(err, KVLM_ERR_ARG, "sequence %d already has %d positions reserved", seq, s->pend_n);
    if (n < 1 || n > kv->n_ctx - s->len)
        return kvlm_error_set(err, KVLM_ERR_ARG, "sequence %d of %d tokens cannot take %d more (context window %d)", seq,
                              s->len, n, kv->n_ctx);
    const int bs = kv->block_size, j = s->len / bs;
    s->pend_blocks = s->n_blocks;
    s->pend_cow = -1;
    /* A partly filled tail block that is shared or indexed is copied: the
     * sharers and the index keep the original, put back by an abort. */
    if (s->len % bs && j < s->n_blocks && (kv->blk[s->blocks[j]].refcount > 1 || kv->blk[s->blocks[j]].node)) {
        const int b = s->blocks[j], nb = alloc_block(kv);
        if (nb < 0)
            return kvlm_error_set(err, KVLM_ERR_NOMEM, "KV pool exhausted: no block for a copy-on-write (%zu blocks)",
                                  kv->n_blocks);
        memcpy(kv->pool + (size_t)nb * kv->block_bytes, kv->pool + (size_t)b * kv->block_bytes, kv->block_bytes);
        kv->blk[nb].filled = s->len % bs;
        s->blocks[j] = nb;
        s->pend_cow = b;
    }
    int rc = take_blocks(kv, s, (s->len + n + bs - 1) / bs, err);
    if (rc) undo_reservation(kv, s);
    else s->pend_n = n;
    return rc;
}

int kv_append_pending(const kvlm_kv *kv, int seq) { return kv_seq_valid(kv, seq) ? kv->seqs[seq].pend_n : 0; }

void kv_append_abort(kvlm_kv *kv, int seq) {
    if (kv_seq_valid(kv, seq) && kv->seqs[seq].pend_n) undo_reservation(kv, &kv->seqs[seq]);
}

void kv_append_commit(kvlm_kv *kv, int seq, const int32_t *tokens) {
    kv_seq *s = &kv->seqs[seq];
    const int bs = kv->block_size, old = s->len, n = s->pend_n;
    if (s->pend_cow >= 0) {
        unref_block(kv, s->pend_cow);
        kv->counters.cow_copies++;
    }
    s->pend_n = 0;
    s->pend_cow = -1;
    memcpy(s->tokens + old, tokens, (size_t)n * sizeof(int32_t));
    s->len += n;
    for (int j = old / bs; j * bs < s->len; j++) {
        int f = s->len - j * bs < bs ? s->len - j * bs : bs;
        if (kv->blk[s->blocks[j]].filled < f) kv->blk[s->blocks[j]].filled = f;
    }
    if (kv->prefix_cache) index_full_blocks(kv, s);
    release_outside_window(kv, s);
}

static void seq_truncate(kvlm_kv *kv, int seq, int len) {
    kv_seq *s = &kv->seqs[seq];
    const int bs = kv->block_size;
    if (len < s->len) s->len = len;
    if (s->n_indexed > s->len / bs) s->n_indexed = s->len / bs;
    int need = (s->len + bs - 1) / bs;
    if (need < kv->reserve_blocks) need = kv->reserve_blocks;
    while (s->n_blocks > need)
        if (s->blocks[--s->n_blocks] >= 0) unref_block(kv, s->blocks[s->n_blocks]);
    if (s->n_released > s->n_blocks) s->n_released = s->n_blocks;
    /* Blocks this sequence alone writes now hold only its remaining tokens
     * (a shared or indexed block keeps its fill for its other holders). */
    for (int j = s->len / bs; j < s->n_blocks; j++) {
        kv_block *k = &kv->blk[s->blocks[j]];
        const int f = s->len - j * bs; /* < bs here; < 0 for reserved blocks past the tokens */
        if (k->refcount == 1 && !k->node) k->filled = f > 0 ? f : 0;
    }
}

int kvlm_kv_seq_truncate(kvlm_kv *kv, int seq, int len, kvlm_error *err) {
    if (!kv_seq_valid(kv, seq)) return kvlm_error_set(err, KVLM_ERR_ARG, "no sequence %d", seq);
    if (kv->seqs[seq].pend_n) return kvlm_error_set(err, KVLM_ERR_ARG, "sequence %d has an append in progress", seq);
    if (len < 0 || len > kv->seqs[seq].len)
        return kvlm_error_set(err, KVLM_ERR_ARG, "cannot truncate sequence %d of %d tokens to %d", seq, kv->seqs[seq].len,
                              len);
    const int released = kv->seqs[seq].n_released * kv->block_size;
    if (len > 0 && window_start(kv, len) < released)
        return kvlm_error_set(err, KVLM_ERR_ARG,
                              "cannot truncate sequence %d to %d tokens: positions before %d left the sliding window of "
                              "%d and were released (truncate to 0, or to at least %d)", seq, len, released, kv->window,
                              released + kv->window - 1);
    seq_truncate(kv, seq, len);
    return KVLM_OK;
}

int kvlm_kv_seq_len(const kvlm_kv *kv, int seq, kvlm_error *err) {
    return kv_seq_valid(kv, seq) ? kv->seqs[seq].len : kvlm_error_set(err, KVLM_ERR_ARG, "no sequence %d", seq);
}

size_t kvlm_kv_available_blocks(const kvlm_kv *kv) { return kv->n_free + kv->n_lru; }

size_t kvlm_kv_blocks_needed(const kvlm_kv *kv, int seq, int len) {
    if (!kv_seq_valid(kv, seq)) return 0;
    const kv_seq *s = &kv->seqs[seq];
    const int bs = kv->block_size, j = s->len / bs;
    size_t need = (size_t)((len + bs - 1) / bs), have = (size_t)s->n_blocks, cow = 0;
    if (len > s->len && s->len % bs && j < s->n_blocks &&
        (kv->blk[s->blocks[j]].refcount > 1 || kv->blk[s->blocks[j]].node))
        cow = 1;
    return (need > have ? need - have : 0) + cow;
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
    for (size_t b = 0; b < kv->n_blocks; b++)
        if (kv->blk[b].refcount > 0) {
            st->tokens_stored += (size_t)kv->blk[b].filled;
            st->blocks_shared += kv->blk[b].refcount > 1;
        }
    for (int i = 0; i < kv->max_seqs; i++)
        if (kv->seqs[i].live) {
            st->seqs++;
            st->tokens += (size_t)kv->seqs[i].len;
        }
    st->bytes_pool = kv->pool_bytes;
    st->bytes_reserved = st->blocks_used * kv->block_bytes;
    st->bytes_live = st->tokens_stored * kv->bytes_per_token;
    st->bytes_slack = st->bytes_reserved - st->bytes_live;
    st->utilisation = st->bytes_reserved ? (double)st->bytes_live / st->bytes_reserved : 0;
}

/* ------------------------------------------------------------ invariants */

int kv_check_invariants(const kvlm_kv *kv, kvlm_error *err) {
    const size_t N = kv->n_blocks;
    int *refs = calloc(N, sizeof(int)), *place = calloc(N, sizeof(int)); /* 1 used, 2 lru, 3 free */
    int rc = KVLM_OK;
    if (!refs || !place) { rc = kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory"); goto out; }
    for (int i = 0; i < kv->max_seqs; i++) {
        const kv_seq *s = &kv->seqs[i];
        if (!s->live) continue;
        const int bs = kv->block_size;
        if (s->n_blocks * bs < s->len + s->pend_n || s->n_indexed > s->len / bs) {
            rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "seq %d: %d blocks, %d indexed for %d tokens + %d pending", i,
                                s->n_blocks, s->n_indexed, s->len, s->pend_n);
            goto out;
        }
        if (s->pend_cow >= 0) refs[s->pend_cow]++; /* held until the pending append commits */
        /* Blocks a pending append writes, and blocks past the tokens (a
         * reservation), belong to this sequence alone and are not indexed. */
        const int first_private = s->pend_n ? s->len / bs : (s->len + bs - 1) / bs;
        if (s->n_released > s->n_blocks || s->n_released * bs > window_start(kv, s->len)) {
            rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "seq %d: %d blocks released, but its window starts at %d", i,
                                s->n_released, window_start(kv, s->len));
            goto out;
        }
        for (int j = 0; j < s->n_blocks; j++) {
            int b = s->blocks[j];
            if ((b < 0) != (j < s->n_released)) {
                rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "seq %d table entry %d: block %d (%d released)", i, j, b,
                                    s->n_released);
                goto out;
            }
            if (b < 0) continue;
            refs[b]++;
            int need = s->len - j * bs;
            if (need > bs) need = bs;
            if (need > 0 && kv->blk[b].filled < need) {
                rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "seq %d block %d: filled %d < %d", i, b, kv->blk[b].filled, need);
                goto out;
            }
            if (j >= first_private && (kv->blk[b].refcount != 1 || kv->blk[b].node)) {
                rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "seq %d block %d (table entry %d) is written next but %s", i, b,
                                    j, kv->blk[b].node ? "indexed" : "shared");
                goto out;
            }
        }
    }
    size_t used = 0;
    for (size_t b = 0; b < N; b++) {
        if (kv->blk[b].filled < 0 || kv->blk[b].filled > kv->block_size) {
            rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "block %zu: filled %d is outside [0, %d]", b, kv->blk[b].filled,
                                kv->block_size);
            goto out;
        }
        if (refs[b] != kv->blk[b].refcount) {
            rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "block %zu: refcount %d but %d table references", b,
                                kv->blk[b].refcount, refs[b]);
            goto out;
        }
        if (refs[b]) place[b] = 1, used++;
    }
    size_t lru = 0;
    for (int b = kv->lru_head; b >= 0; b = kv->blk[b].lru_next, lru++) {
        if (place[b] || !kv->blk[b].node || lru > N) {
            rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "block %d: on the LRU list but used, unindexed or listed twice", b);
            goto out;
        }
        place[b] = 2;
    }
    for (size_t i = 0; i < kv->n_free; i++) {
        int b = kv->free_stack[i];
        if (place[b] || kv->blk[b].node) {
            rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "block %d: on the free list but used, cached or indexed", b);
            goto out;
        }
        place[b] = 3;
    }
    if (used != kv->n_used || lru != kv->n_lru || used + lru + kv->n_free != N) {
        rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "block counts: used %zu/%zu lru %zu/%zu free %zu, total %zu", used,
                            kv->n_used, lru, kv->n_lru, kv->n_free, N);
        goto out;
    }
    size_t indexed = 0, chained = 0;
    for (size_t b = 0; b < N; b++) {
        if (!place[b]) {
            rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "block %zu is nowhere (leaked)", b);
            goto out;
        }
        indexed += kv->blk[b].node != 0;
    }
    for (size_t i = 0; i < kv->n_bucket; i++)
        for (int b = kv->bucket[i]; b >= 0; b = kv->blk[b].next_in_bucket, chained++)
            if (!kv->blk[b].node || bucket_of(kv, kv->blk[b].hash) != i || chained > N) {
                rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "index bucket %zu holds block %d wrongly", i, b);
                goto out;
            }
    if (indexed != chained) rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "%zu blocks indexed, %zu in buckets", indexed, chained);
out:
    free(refs);
    free(place);
    return rc;
}
