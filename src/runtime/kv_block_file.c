/*
 * Encoding and checking of one block file (runtime/kv_block_file.h). The
 * checksum covers every byte of the file (the checksum field read as 0),
 * so a flipped bit anywhere is caught before any field past the fixed
 * header is trusted. No I/O and no allocation.
 */
#include <string.h>
#include <xxhash.h>

#include "runtime/kv_block_file.h"
#include "runtime/le_bytes.h"

static const unsigned char MAGIC[8] = {'K', 'V', 'L', 'M', 'B', 'L', 'K', 0};

size_t kv_block_file_size(const kv_block_file_head *h) {
    if (h->block_size < 1 || h->block_size > (1 << 20) || h->payload_bytes > SIZE_MAX / 2) return 0;
    return KV_BLOCK_HEADER_BYTES + (size_t)h->block_size * 4 + (size_t)h->payload_bytes;
}

static uint64_t checksum(const unsigned char *buf, size_t n) {
    XXH3_state_t *st = XXH3_createState();
    static const unsigned char zero[8] = {0};
    uint64_t h;
    if (!st) return 0; /* never equal to a real checksum by more than chance; callers see a mismatch */
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, buf, 72);
    XXH3_64bits_update(st, zero, 8);
    XXH3_64bits_update(st, buf + 80, n - 80);
    h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

unsigned char *kv_block_file_encode_head(const kv_block_file_head *h, const int32_t *tokens, unsigned char *out) {
    memcpy(out, MAGIC, 8);
    le_put32(out + 8, KV_BLOCK_FILE_VERSION);
    le_put32(out + 12, KV_BLOCK_HEADER_BYTES);
    memcpy(out + 16, h->fp.bytes, 16);
    le_put64(out + 32, h->hash);
    le_put64(out + 40, h->parent);
    le_put32(out + 48, (uint32_t)h->block_size);
    le_put32(out + 52, (uint32_t)h->n_slices);
    le_put64(out + 56, h->slice_bytes);
    le_put64(out + 64, h->payload_bytes);
    le_put64(out + 72, 0);
    unsigned char *t = out + KV_BLOCK_HEADER_BYTES;
    for (int i = 0; i < h->block_size; i++) le_put32(t + 4 * i, (uint32_t)tokens[i]);
    return t + (size_t)h->block_size * 4;
}

void kv_block_file_encode(const kv_block_file_head *h, const int32_t *tokens, const void *payload, unsigned char *out) {
    memcpy(kv_block_file_encode_head(h, tokens, out), payload, h->payload_bytes);
    le_put64(out + 72, checksum(out, kv_block_file_size(h)));
}

void kv_block_file_stamp(unsigned char *buf, size_t n) {
    if (n >= KV_BLOCK_HEADER_BYTES) le_put64(buf + 72, checksum(buf, n));
}

kv_block_file_status kv_block_file_check(const unsigned char *buf, size_t n, const kv_block_file_head *want,
                                         const int32_t *tokens, const unsigned char **payload) {
    if (payload) *payload = NULL;
    if (n < KV_BLOCK_HEADER_BYTES) return KV_BLOCK_FILE_TRUNCATED;
    if (memcmp(buf, MAGIC, 8)) return KV_BLOCK_FILE_CORRUPT;
    if (le_get32(buf + 8) != KV_BLOCK_FILE_VERSION || le_get32(buf + 12) != KV_BLOCK_HEADER_BYTES)
        return KV_BLOCK_FILE_VERSION_;
    kv_block_file_head h;
    memcpy(h.fp.bytes, buf + 16, 16);
    h.hash = le_get64(buf + 32);
    h.parent = le_get64(buf + 40);
    const uint32_t bs = le_get32(buf + 48), ns = le_get32(buf + 52);
    h.slice_bytes = le_get64(buf + 56);
    h.payload_bytes = le_get64(buf + 64);
    if (bs < 1 || bs > (1u << 20) || ns < 1 || ns > 4096) return KV_BLOCK_FILE_CORRUPT;
    h.block_size = (int)bs, h.n_slices = (int)ns;
    if (h.slice_bytes == 0 || h.payload_bytes / ns != h.slice_bytes || h.payload_bytes % ns)
        return KV_BLOCK_FILE_CORRUPT;
    const size_t size = kv_block_file_size(&h);
    if (!size || n != size) return KV_BLOCK_FILE_TRUNCATED;
    if (le_get64(buf + 72) != checksum(buf, n)) return KV_BLOCK_FILE_CORRUPT;
    if (want) {
        if (!kv_fingerprint_equal(&h.fp, &want->fp) || h.block_size != want->block_size ||
            h.n_slices != want->n_slices || h.slice_bytes != want->slice_bytes)
            return KV_BLOCK_FILE_FOREIGN;
        if (h.hash != want->hash || h.parent != want->parent) return KV_BLOCK_FILE_MISMATCH;
    }
    const unsigned char *t = buf + KV_BLOCK_HEADER_BYTES;
    if (tokens)
        for (int i = 0; i < h.block_size; i++)
            if (le_get32(t + 4 * i) != (uint32_t)tokens[i]) return KV_BLOCK_FILE_MISMATCH;
    if (payload) *payload = t + (size_t)h.block_size * 4;
    return KV_BLOCK_FILE_OK;
}

const char *kv_block_file_status_name(kv_block_file_status s) {
    switch (s) {
    case KV_BLOCK_FILE_OK: return "ok";
    case KV_BLOCK_FILE_TRUNCATED: return "truncated";
    case KV_BLOCK_FILE_CORRUPT: return "corrupt";
    case KV_BLOCK_FILE_VERSION_: return "foreign version";
    case KV_BLOCK_FILE_FOREIGN: return "foreign fingerprint";
    case KV_BLOCK_FILE_MISMATCH: return "another block";
    }
    return "?";
}
