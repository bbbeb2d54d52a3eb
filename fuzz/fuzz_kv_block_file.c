/*
 * libFuzzer target: a KV tier block file (runtime/kv_block_file.h) through
 * kv_block_file_check, as read (whose checksum the fuzzer cannot forge)
 * and once more with its checksum stamped, against the layout its own
 * header names and against a fixed one, with and without the token check.
 * Every input must be accepted or refused with a status; an accepted one's
 * payload must lie inside the input.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "runtime/kv_block_file.h"

static void check(const unsigned char *buf, size_t n, const kv_block_file_head *want, const int32_t *tokens) {
    const unsigned char *payload;
    if (kv_block_file_check(buf, n, want, tokens, &payload) == KV_BLOCK_FILE_OK) {
        if (!payload || payload < buf || payload > buf + n) abort();
        if (want && (size_t)(buf + n - payload) != want->payload_bytes) abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    check(data, size, NULL, NULL);
    unsigned char *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    kv_block_file_stamp(buf, size);
    check(buf, size, NULL, NULL);
    kv_block_file_head want = {.block_size = 2, .n_slices = 1, .slice_bytes = 16, .payload_bytes = 16};
    check(buf, size, &want, NULL);
    if (size >= KV_BLOCK_HEADER_BYTES) { /* the layout the header names */
        memcpy(want.fp.bytes, buf + 16, 16);
        memcpy(&want.hash, buf + 32, 8), memcpy(&want.parent, buf + 40, 8);
        uint32_t bs, ns;
        memcpy(&bs, buf + 48, 4), memcpy(&ns, buf + 52, 4);
        memcpy(&want.slice_bytes, buf + 56, 8), memcpy(&want.payload_bytes, buf + 64, 8);
        want.block_size = (int)(bs & 0xffff), want.n_slices = (int)(ns & 0xfff);
        check(buf, size, &want, NULL);
        if ((size_t)want.block_size * 4 <= size - KV_BLOCK_HEADER_BYTES) {
            int32_t *tokens = malloc((size_t)want.block_size * 4 + 4);
            if (tokens) {
                memcpy(tokens, buf + KV_BLOCK_HEADER_BYTES, (size_t)want.block_size * 4);
                check(buf, size, &want, tokens);
                free(tokens);
            }
        }
    }
    free(buf);
    return 0;
}
