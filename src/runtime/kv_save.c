/*
 * Saved KV of one sequence (kvlm_kv_seq_save / kvlm_kv_seq_restore in
 * kvlm.h): the record is
 *   header (64 bytes): magic "KVLMKVS1", u32 version 1, u32 header bytes 64,
 *     16-byte fingerprint (runtime/kv_fingerprint.h), u32 KV dtype, layers,
 *     KV heads, head dim, tokens, row bytes, u64 payload bytes
 *   payload: the token ids (int32), then for each layer, K then V, each KV
 *     head, every position in order: one row (kv_row_bytes) as stored
 *   trailer: u64 XXH3-64 of header and payload
 * in the byte order of the host (little-endian on every kvlm target).
 * The layout is independent of the pool's block size and slices.
 *
 * Restore checks every field against the cache and the model before it
 * takes a block, reads the rows straight into a pending append (runtime/
 * kvcache.h) and commits it only when the checksum matches; any failure
 * aborts the append and frees the sequence, so a corrupted, truncated or
 * foreign record never leaves KV behind. A sequence whose sliding window
 * has released its oldest blocks cannot be saved (its rows are gone).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "error.h"
#include "runtime/kv_fingerprint.h"
#include "runtime/kv_layout.h"
#include "runtime/kvcache.h"

#define SAVE_MAGIC "KVLMKVS1"
#define SAVE_VERSION 1u
#define SAVE_HEADER 64u

typedef struct save_header {
    char magic[8];
    uint32_t version, header_bytes;
    uint8_t fingerprint[16];
    uint32_t dtype, n_layer, n_kv_head, head_dim, n_tokens, row_bytes;
    uint64_t payload_bytes;
} save_header;
_Static_assert(sizeof(save_header) == SAVE_HEADER, "the saved KV header is 64 bytes");

/* Payload bytes of n tokens: ids plus 2 x layers x heads x n rows. */
static uint64_t payload_bytes(const kvlm_kv *kv, int n) {
    return (uint64_t)n * sizeof(int32_t) + 2ull * kv->n_layer * kv->n_kv_head * (uint64_t)n * kv->row_bytes;
}

typedef struct stream {
    FILE *f;
    XXH3_state_t *h;
} stream;

static int put(stream *s, const void *p, size_t n) {
    XXH3_64bits_update(s->h, p, n);
    return fwrite(p, 1, n, s->f) == n ? 0 : -1;
}

static int get(stream *s, void *p, size_t n) {
    if (fread(p, 1, n, s->f) != n) return -1;
    XXH3_64bits_update(s->h, p, n);
    return 0;
}

/* Every row of positions [0, n) of seq, layer by layer, K then V, head by
 * head, in position order: one run per block. put_rows writes them,
 * otherwise they are read into the slots. */
static int rows(const kvlm_kv *kv, int seq, int n, stream *s, int writing) {
    const int bs = kv->block_size;
    for (int l = 0; l < kv->n_layer; l++) {
        const int *t = kv_layer_table(kv, seq, l);
        for (int v = 0; v < 2; v++)
            for (int h = 0; h < kv->n_kv_head; h++)
                for (int p = 0; p < n; p += bs) {
                    const int cnt = n - p < bs ? n - p : bs;
                    unsigned char *dst = kv_head_ptr(kv, t[p / bs], l, h, v);
                    const size_t bytes = (size_t)cnt * kv->row_bytes;
                    if (writing ? put(s, dst, bytes) : get(s, dst, bytes)) return -1;
                }
    }
    return 0;
}

static int fingerprint(const kvlm_kv *kv, const kvlm_model *m, kv_fingerprint *fp, kvlm_error *err) {
    if (!kv_fits_model(kv, m))
        return kvlm_error_set(err, KVLM_ERR_ARG, "the KV cache was not made for this model's shape");
    return kv_fingerprint_of(m, kv->dtype, fp, err);
}

int kvlm_kv_seq_save(const kvlm_kv *kv, const kvlm_model *m, int seq, FILE *f, kvlm_error *err) {
    if (!kv_seq_valid(kv, seq)) return kvlm_error_set(err, KVLM_ERR_ARG, "save: no sequence %d", seq);
    const kv_seq *q = &kv->seqs[seq];
    for (int s = 0; s < kv->n_slices; s++)
        if (q->n_released[s])
            return kvlm_error_set(err, KVLM_ERR_ARG,
                                  "save: sequence %d released its first %d positions to the sliding window of "
                                  "%d; saved KV needs every position", seq, q->n_released[s] * kv->block_size,
                                  kv->slice_window[s]);
    kv_fingerprint fp;
    int rc = fingerprint(kv, m, &fp, err);
    if (rc) return rc;
    save_header hd = {.version = SAVE_VERSION, .header_bytes = SAVE_HEADER, .dtype = (uint32_t)kv->dtype,
                      .n_layer = (uint32_t)kv->n_layer, .n_kv_head = (uint32_t)kv->n_kv_head,
                      .head_dim = (uint32_t)kv->head_dim, .n_tokens = (uint32_t)q->len,
                      .row_bytes = (uint32_t)kv->row_bytes, .payload_bytes = payload_bytes(kv, q->len)};
    memcpy(hd.magic, SAVE_MAGIC, 8);
    memcpy(hd.fingerprint, fp.bytes, 16);
    XXH3_state_t *h = XXH3_createState();
    if (!h) return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    XXH3_64bits_reset(h);
    stream s = {f, h};
    int bad = put(&s, &hd, sizeof hd) || put(&s, q->tokens, (size_t)q->len * sizeof(int32_t)) ||
              rows(kv, seq, q->len, &s, 1);
    const uint64_t sum = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    if (bad || fwrite(&sum, sizeof sum, 1, f) != 1)
        return kvlm_error_set(err, KVLM_ERR_IO, "save: cannot write the KV of sequence %d", seq);
    return KVLM_OK;
}

/* A saved dtype's name, without trusting its number. */
static const char *dtype_words(uint32_t d) {
    static const kvlm_dtype kv_types[] = {KVLM_F32, KVLM_F16, KVLM_Q8_0};
    for (size_t i = 0; i < sizeof kv_types / sizeof kv_types[0]; i++)
        if (d == (uint32_t)kv_types[i]) return kvlm_dtype_name(kv_types[i]);
    return "an unknown dtype";
}

int kvlm_kv_seq_tokens(const kvlm_kv *kv, int seq, const int32_t **tokens, kvlm_error *err) {
    *tokens = NULL;
    if (!kv_seq_valid(kv, seq)) return kvlm_error_set(err, KVLM_ERR_ARG, "no sequence %d", seq);
    *tokens = kv->seqs[seq].tokens;
    return kv->seqs[seq].len;
}

/* The header's fields against the cache: 0, or an error naming the first
 * that differs. */
static int check_header(const kvlm_kv *kv, const save_header *hd, const kv_fingerprint *fp, kvlm_error *err) {
    if (memcmp(hd->magic, SAVE_MAGIC, 8))
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "restore: not a saved KV record (bad magic)");
    if (hd->version != SAVE_VERSION || hd->header_bytes != SAVE_HEADER)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "restore: saved KV version %u (header %u bytes); this kvlm reads "
                              "version %u", hd->version, hd->header_bytes, SAVE_VERSION);
    if (hd->dtype != (uint32_t)kv->dtype)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "restore: the KV was saved as %s, the cache holds %s",
                              dtype_words(hd->dtype),
                              kvlm_dtype_name(kv->dtype));
    if (hd->n_layer != (uint32_t)kv->n_layer || hd->n_kv_head != (uint32_t)kv->n_kv_head ||
        hd->head_dim != (uint32_t)kv->head_dim || hd->row_bytes != (uint32_t)kv->row_bytes)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "restore: the KV has %u layers, %u KV heads of %u (rows of %u "
                              "bytes); this model has %d, %d of %d (%zu)", hd->n_layer, hd->n_kv_head, hd->head_dim,
                              hd->row_bytes, kv->n_layer, kv->n_kv_head, kv->head_dim, kv->row_bytes);
    if (memcmp(hd->fingerprint, fp->bytes, 16))
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "restore: the KV was saved from another model file or setting "
                              "(fingerprint differs)");
    if (hd->n_tokens < 1 || hd->n_tokens > (uint32_t)kv->n_ctx)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "restore: %u saved tokens is outside 1..%d (the context window)",
                              hd->n_tokens, kv->n_ctx);
    if (hd->payload_bytes != payload_bytes(kv, (int)hd->n_tokens))
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "restore: payload of %llu bytes; %u tokens need %llu",
                              (unsigned long long)hd->payload_bytes, hd->n_tokens,
                              (unsigned long long)payload_bytes(kv, (int)hd->n_tokens));
    return KVLM_OK;
}

int kvlm_kv_seq_restore(kvlm_kv *kv, const kvlm_model *m, FILE *f, int *seq_out, kvlm_error *err) {
    *seq_out = -1;
    kv_fingerprint fp;
    int rc = fingerprint(kv, m, &fp, err);
    if (rc) return rc;
    XXH3_state_t *h = XXH3_createState();
    if (!h) return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    XXH3_64bits_reset(h);
    stream s = {f, h};
    save_header hd;
    int32_t *tokens = NULL;
    int seq = -1;
    if (get(&s, &hd, sizeof hd)) {
        rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "restore: the record ends inside its header");
        goto out;
    }
    if ((rc = check_header(kv, &hd, &fp, err))) goto out;
    const int n = (int)hd.n_tokens;
    tokens = malloc((size_t)n * sizeof(int32_t));
    if (!tokens) {
        rc = kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
        goto out;
    }
    if (get(&s, tokens, (size_t)n * sizeof(int32_t))) {
        rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "restore: the record ends inside its token ids");
        goto out;
    }
    if ((seq = kvlm_kv_seq_new(kv, err)) < 0) {
        rc = seq;
        goto out;
    }
    if ((rc = kv_append_reserve(kv, seq, n, err))) goto out;
    uint64_t sum;
    if (rows(kv, seq, n, &s, 0) || fread(&sum, sizeof sum, 1, f) != 1) {
        rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "restore: the record ends inside its KV rows (truncated)");
        goto out;
    }
    if (sum != XXH3_64bits_digest(h)) {
        rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "restore: checksum mismatch (the record is corrupted)");
        goto out;
    }
    kv_append_commit(kv, seq, tokens);
    *seq_out = seq;
    seq = -1;
out:
    if (seq >= 0) kvlm_kv_seq_free(kv, seq); /* aborts the pending append */
    free(tokens);
    XXH3_freeState(h);
    return rc;
}
