/*
 * libFuzzer target: a KV directory's pin record (runtime/kv_pin_file.h)
 * through kv_pin_file_decode, as read (whose checksum the fuzzer cannot
 * forge) and once more with its checksum stamped, against the fingerprint
 * its own header names and against a fixed one. Every input must be
 * accepted or refused with a reason; an accepted one must hold pins of 1
 * to KV_PIN_FILE_MAX_TOKENS tokens and encode back to the very same bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "runtime/kv_pin_file.h"

static void check(const unsigned char *buf, size_t n, const kv_fingerprint *fp) {
    kv_pin_list l;
    if (kv_pin_file_decode(buf, n, fp, &l)) {
        if (l.n || l.ids || l.lens) abort(); /* refused: nothing kept */
        return;
    }
    for (int i = 0; i < l.n; i++)
        if (l.lens[i] < 1 || l.lens[i] > KV_PIN_FILE_MAX_TOKENS) abort();
    size_t size;
    unsigned char *again = kv_pin_file_encode(fp, &l, &size);
    if (again && (size != n || memcmp(again, buf, n))) abort();
    free(again);
    kv_pin_list_free(&l);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kv_fingerprint fixed;
    for (int i = 0; i < 16; i++) fixed.bytes[i] = (unsigned char)i;
    check(data, size, &fixed);
    unsigned char *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    kv_pin_file_stamp(buf, size);
    check(buf, size, &fixed);
    if (size >= KV_PIN_FILE_HEADER) { /* the fingerprint the header names */
        kv_fingerprint own;
        memcpy(own.bytes, buf + 16, 16);
        check(buf, size, &own);
    }
    free(buf);
    return 0;
}
