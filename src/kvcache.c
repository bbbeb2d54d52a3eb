/* Paged KV cache: block pool, block tables, free list, accounting (see kvcache.h). */
#include "kvcache.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "error.h"

static int pop_block(kvlm_kv *kv) { return kv->n_free ? kv->free_stack[--kv->n_free] : -1; }
static void push_block(kvlm_kv *kv, int b) { kv->free_stack[kv->n_free++] = b; }

kvlm_kv *kvlm_kv_create(const kvlm_model *m, const kvlm_kv_options *opt, kvlm_error *err) {
    const kvlm_config *c = kvlm_model_config(m);
    kvlm_kv_options o = opt ? *opt : (kvlm_kv_options){0};
    if (o.block_size == 0) o.block_size = 16;
    if (o.max_seqs == 0) o.max_seqs = 1;
    if (o.dtype != KVLM_F32 && o.dtype != KVLM_F16) {
        kvlm_fail(err, KVLM_ERR_ARG, "kv dtype %s is not supported (f32, f16)", kvlm_dtype_name(o.dtype));
        return NULL;
    }
    if (o.block_size < 1 || o.block_size > 4096 || o.max_seqs < 1 || o.max_seqs > (1 << 20)) {
        kvlm_fail(err, KVLM_ERR_ARG, "kv options out of range: block_size %d (1..4096), max_seqs %d (1..%d)",
                  o.block_size, o.max_seqs, 1 << 20);
        return NULL;
    }
    kvlm_kv *kv = calloc(1, sizeof *kv);
    if (!kv) { kvlm_fail(err, KVLM_ERR_NOMEM, "out of memory"); return NULL; }
    kv->n_layer = c->n_layer;
    kv->n_kv_head = c->n_kv_head;
    kv->head_dim = c->head_dim;
    kv->n_ctx = c->n_ctx;
    kv->block_size = o.block_size;
    kv->max_blocks_per_seq = (c->n_ctx + o.block_size - 1) / o.block_size;
    kv->dtype = o.dtype;
    kv->policy = o.policy;
    kv->max_seqs = o.max_seqs;
    size_t es = kvlm_dtype_size(o.dtype);
    kv->bytes_per_token = 2 * (size_t)c->n_layer * c->n_kv_head * c->head_dim * es;
    kv->head_bytes = (size_t)o.block_size * c->head_dim * es;
    kv->block_bytes = kv->bytes_per_token * o.block_size;
    kv->n_blocks = o.n_blocks ? o.n_blocks : (size_t)o.max_seqs * kv->max_blocks_per_seq;
    if (kv->n_blocks > (size_t)1 << 30 || kv->n_blocks > SIZE_MAX / kv->block_bytes) {
        kvlm_fail(err, KVLM_ERR_ARG, "kv pool of %zu blocks is too large", kv->n_blocks);
        free(kv);
        return NULL;
    }
    kv->pool_bytes = kv->n_blocks * kv->block_bytes;
    /* Anonymous mapping: pages are committed only when a block is written. */
    void *pool = mmap(NULL, kv->pool_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                      -1, 0);
    kv->pool = pool == MAP_FAILED ? NULL : pool;
    kv->free_stack = malloc(kv->n_blocks * sizeof(int));
    kv->seqs = calloc((size_t)o.max_seqs, sizeof(kv_seq));
    if (!kv->pool || !kv->free_stack || !kv->seqs) {
        kvlm_fail(err, KVLM_ERR_NOMEM, "cannot allocate a KV pool of %zu bytes", kv->pool_bytes);
        kvlm_kv_free(kv);
        return NULL;
    }
    for (size_t i = 0; i < kv->n_blocks; i++) kv->free_stack[i] = (int)(kv->n_blocks - 1 - i);
    kv->n_free = kv->n_blocks;
    return kv;
}

void kvlm_kv_free(kvlm_kv *kv) {
    if (!kv) return;
    if (kv->seqs)
        for (int i = 0; i < kv->max_seqs; i++) {
            free(kv->seqs[i].blocks);
            free(kv->seqs[i].tokens);
        }
    if (kv->pool) munmap(kv->pool, kv->pool_bytes);
    free(kv->free_stack);
    free(kv->seqs);
    free(kv);
}

int kv_seq_valid(const kvlm_kv *kv, int seq) { return seq >= 0 && seq < kv->max_seqs && kv->seqs[seq].live; }

int kv_seq_reserve(kvlm_kv *kv, int seq, int new_len, kvlm_error *err) {
    kv_seq *s = &kv->seqs[seq];
    if (new_len > kv->n_ctx)
        return kvlm_fail(err, KVLM_ERR_ARG, "sequence %d would hold %d tokens, beyond the context window of %d", seq,
                         new_len, kv->n_ctx);
    int need = (new_len + kv->block_size - 1) / kv->block_size;
    while (s->n_blocks < need) {
        int b = pop_block(kv);
        if (b < 0)
            return kvlm_fail(err, KVLM_ERR_NOMEM, "KV pool exhausted: %zu blocks of %d tokens all in use",
                             kv->n_blocks, kv->block_size);
        s->blocks[s->n_blocks++] = b;
    }
    return KVLM_OK;
}

int kvlm_kv_seq_new(kvlm_kv *kv, kvlm_error *err) {
    int id = -1;
    for (int i = 0; i < kv->max_seqs && id < 0; i++)
        if (!kv->seqs[i].live) id = i;
    if (id < 0) {
        kvlm_fail(err, KVLM_ERR_NOMEM, "all %d sequence slots are in use", kv->max_seqs);
        return -1;
    }
    kv_seq *s = &kv->seqs[id];
    if (!s->blocks) s->blocks = malloc((size_t)kv->max_blocks_per_seq * sizeof(int));
    if (!s->tokens) s->tokens = malloc((size_t)kv->n_ctx * sizeof(int32_t));
    if (!s->blocks || !s->tokens) {
        kvlm_fail(err, KVLM_ERR_NOMEM, "out of memory");
        return -1;
    }
    s->live = 1;
    s->len = 0;
    s->n_blocks = 0;
    if (kv->policy == KVLM_ALLOC_RESERVE_MAX && kv_seq_reserve(kv, id, kv->n_ctx, err) != KVLM_OK) {
        kvlm_kv_seq_free(kv, id);
        return -1;
    }
    return id;
}

void kvlm_kv_seq_free(kvlm_kv *kv, int seq) {
    if (!kv_seq_valid(kv, seq)) return;
    kv_seq *s = &kv->seqs[seq];
    while (s->n_blocks > 0) push_block(kv, s->blocks[--s->n_blocks]);
    s->live = 0;
    s->len = 0;
}

void kv_seq_append(kvlm_kv *kv, int seq, const int32_t *tokens, int n) {
    kv_seq *s = &kv->seqs[seq];
    memcpy(s->tokens + s->len, tokens, (size_t)n * sizeof(int32_t));
    s->len += n;
}

void kv_seq_truncate(kvlm_kv *kv, int seq, int len) {
    kv_seq *s = &kv->seqs[seq];
    if (len < s->len) s->len = len;
    if (kv->policy == KVLM_ALLOC_RESERVE_MAX) return;
    int need = (len + kv->block_size - 1) / kv->block_size;
    while (s->n_blocks > need) push_block(kv, s->blocks[--s->n_blocks]);
}

int kvlm_kv_seq_len(const kvlm_kv *kv, int seq) { return kv_seq_valid(kv, seq) ? kv->seqs[seq].len : -1; }

void kvlm_kv_get_stats(const kvlm_kv *kv, kvlm_kv_stats *st) {
    memset(st, 0, sizeof *st);
    st->bytes_per_token = kv->bytes_per_token;
    st->block_bytes = kv->block_bytes;
    st->blocks_total = kv->n_blocks;
    st->blocks_used = kv->n_blocks - kv->n_free;
    for (int i = 0; i < kv->max_seqs; i++)
        if (kv->seqs[i].live) {
            st->seqs++;
            st->tokens += (size_t)kv->seqs[i].len;
        }
    st->bytes_pool = kv->pool_bytes;
    st->bytes_reserved = st->blocks_used * kv->block_bytes;
    st->bytes_live = st->tokens * kv->bytes_per_token;
}
