/*
 * The pin record's encoding, checks and file I/O (runtime/kv_pin_file.h).
 * Knows token ids and a fingerprint only; which pins exist is
 * runtime/kv_pin.c's.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "runtime/kv_pin_file.h"
#include "runtime/le_bytes.h"

static const unsigned char MAGIC[8] = {'K', 'V', 'L', 'M', 'P', 'I', 'N', 'S'};

/* XXH3-64 of n >= header bytes at buf, the checksum field read as 0. */
static uint64_t checksum(const unsigned char *buf, size_t n) {
    unsigned char head[KV_PIN_FILE_HEADER];
    memcpy(head, buf, sizeof head);
    memset(head + 40, 0, 8);
    XXH3_state_t *st = XXH3_createState();
    if (!st) return 0;
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, head, sizeof head);
    XXH3_64bits_update(st, buf + KV_PIN_FILE_HEADER, n - KV_PIN_FILE_HEADER);
    const uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

void kv_pin_file_stamp(unsigned char *buf, size_t n) {
    if (n >= KV_PIN_FILE_HEADER) le_put64(buf + 40, checksum(buf, n));
}

void kv_pin_list_free(kv_pin_list *l) {
    for (int i = 0; i < l->n; i++) free(l->ids[i]);
    free(l->ids), free(l->lens);
    *l = (kv_pin_list){0};
}

unsigned char *kv_pin_file_encode(const kv_fingerprint *fp, const kv_pin_list *l, size_t *size) {
    size_t body = 0;
    for (int i = 0; i < l->n; i++) body += 4 + 4 * (size_t)l->lens[i];
    unsigned char *buf = malloc(KV_PIN_FILE_HEADER + body);
    if (!buf) return NULL;
    memcpy(buf, MAGIC, 8);
    le_put32(buf + 8, KV_PIN_FILE_VERSION);
    le_put32(buf + 12, (uint32_t)l->n);
    memcpy(buf + 16, fp->bytes, 16);
    le_put64(buf + 32, body);
    le_put64(buf + 40, 0);
    unsigned char *p = buf + KV_PIN_FILE_HEADER;
    for (int i = 0; i < l->n; i++) {
        le_put32(p, (uint32_t)l->lens[i]);
        for (int k = 0; k < l->lens[i]; k++) le_put32(p + 4 + 4 * (size_t)k, (uint32_t)l->ids[i][k]);
        p += 4 + 4 * (size_t)l->lens[i];
    }
    *size = KV_PIN_FILE_HEADER + body;
    le_put64(buf + 40, checksum(buf, *size));
    return buf;
}

const char *kv_pin_file_decode(const unsigned char *buf, size_t n, const kv_fingerprint *fp, kv_pin_list *l) {
    *l = (kv_pin_list){0};
    if (n < KV_PIN_FILE_HEADER) return "truncated";
    if (memcmp(buf, MAGIC, 8)) return "corrupt";
    if (le_get32(buf + 8) != KV_PIN_FILE_VERSION) return "foreign version";
    if (le_get64(buf + 32) != n - KV_PIN_FILE_HEADER) return "truncated";
    if (le_get64(buf + 40) != checksum(buf, n)) return "corrupt";
    kv_fingerprint f;
    memcpy(f.bytes, buf + 16, 16);
    if (!kv_fingerprint_equal(&f, fp)) return "foreign fingerprint";
    const uint32_t count = le_get32(buf + 12);
    if (count > (n - KV_PIN_FILE_HEADER) / 4) return "corrupt";
    if (count && (!(l->ids = calloc(count, sizeof *l->ids)) || !(l->lens = calloc(count, sizeof *l->lens)))) {
        kv_pin_list_free(l);
        return "out of memory";
    }
    const unsigned char *p = buf + KV_PIN_FILE_HEADER, *end = buf + n;
    for (uint32_t i = 0; i < count; i++) {
        const uint32_t len = (size_t)(end - p) >= 4 ? le_get32(p) : 0;
        if (len < 1 || len > KV_PIN_FILE_MAX_TOKENS || (size_t)(end - p - 4) / 4 < len) {
            kv_pin_list_free(l);
            return "corrupt";
        }
        if (!(l->ids[i] = malloc((size_t)len * sizeof(int32_t)))) {
            kv_pin_list_free(l);
            return "out of memory";
        }
        l->n = (int)i + 1;
        l->lens[i] = (int)len;
        for (uint32_t k = 0; k < len; k++) l->ids[i][k] = (int32_t)le_get32(p + 4 + 4 * (size_t)k);
        p += 4 + 4 * (size_t)len;
    }
    if (p != end) {
        kv_pin_list_free(l);
        return "corrupt";
    }
    return NULL;
}

void kv_pin_file_path(const char *dir, const char *prefix, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s.pins", dir, prefix);
}

int kv_pin_file_write(const char *dir, const char *path, const kv_fingerprint *fp, const kv_pin_list *l) {
    size_t n;
    unsigned char *buf = kv_pin_file_encode(fp, l, &n);
    if (!buf) return ENOMEM;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s/.tmp-%ld-pins", dir, (long)getpid());
    int e = 0;
    const int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) e = errno;
    for (size_t done = 0; !e && done < n;) {
        const ssize_t w = write(fd, buf + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) e = w < 0 ? errno : ENOSPC;
        else done += (size_t)w;
    }
    if (fd >= 0 && close(fd) && !e) e = errno;
    if (!e && rename(tmp, path)) e = errno;
    if (e && fd >= 0) unlink(tmp);
    free(buf);
    return e;
}

const char *kv_pin_file_read(const char *path, const kv_fingerprint *fp, kv_pin_list *l) {
    *l = (kv_pin_list){0};
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? NULL : "unreadable";
    struct stat sb;
    unsigned char *buf = NULL;
    size_t got = 0;
    const char *why = NULL;
    if (fstat(fd, &sb) || sb.st_size < 0 || !(buf = malloc((size_t)sb.st_size + 1))) why = "unreadable";
    while (!why && got < (size_t)sb.st_size) {
        const ssize_t r = read(fd, buf + got, (size_t)sb.st_size - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) why = "unreadable";
        if (r <= 0) break;
        got += (size_t)r;
    }
    close(fd);
    if (!why) why = kv_pin_file_decode(buf, got, fp, l);
    free(buf);
    return why;
}
