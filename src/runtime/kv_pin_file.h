/*
 * The record of a cache's pinned prefixes in its disk tier's directory:
 * DIR/<fingerprint, 16 hex>.pins, so a process started again on DIR pins
 * them again (the server does, at start). Layout, little-endian:
 *   0   8  magic "KVLMPINS"
 *   8   4  version (KV_PIN_FILE_VERSION)
 *   12  4  pins
 *   16  16 the cache's fingerprint (runtime/kv_fingerprint.h)
 *   32  8  bytes after the header
 *   40  8  XXH3-64 of the whole file, this field read as 0
 *   48     per pin: its token count (4 bytes), then its ids (4 bytes each)
 * Written whole to a tmp file and renamed into place; a file that fails
 * any check is refused as a whole (never half used).
 */
#ifndef KVLM_KV_PIN_FILE_H
#define KVLM_KV_PIN_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "runtime/kv_fingerprint.h"

#define KV_PIN_FILE_VERSION 1
#define KV_PIN_FILE_HEADER 48
#define KV_PIN_FILE_MAX_TOKENS (1 << 24)

/* The pins of a record: n of them, ids[i] of lens[i] tokens. */
typedef struct kv_pin_list {
    int n;
    int32_t **ids;
    int *lens;
} kv_pin_list;

void kv_pin_list_free(kv_pin_list *l);

/* The file's bytes for l (malloc'ed, *size), or NULL without memory. */
unsigned char *kv_pin_file_encode(const kv_fingerprint *fp, const kv_pin_list *l, size_t *size);
/* Checks n bytes against fp and fills *l (freed by kv_pin_list_free).
 * NULL when good, else why not ("truncated", "corrupt", "foreign
 * version", "foreign fingerprint", "out of memory"); *l is then empty. */
const char *kv_pin_file_decode(const unsigned char *buf, size_t n, const kv_fingerprint *fp, kv_pin_list *l);
/* Writes the checksum of n >= KV_PIN_FILE_HEADER bytes at buf into its
 * field (the fuzz target stamps inputs so the checks past it run). */
void kv_pin_file_stamp(unsigned char *buf, size_t n);

/* DIR/<prefix>.pins into path. */
void kv_pin_file_path(const char *dir, const char *prefix, char *path, size_t cap);
/* Writes l to path through a tmp file in dir and a rename; 0 or an errno. */
int kv_pin_file_write(const char *dir, const char *path, const kv_fingerprint *fp, const kv_pin_list *l);
/* Reads path: 0 and *l when good or absent (empty *l), else the reason
 * (as kv_pin_file_decode; "unreadable" for a read error). */
const char *kv_pin_file_read(const char *path, const kv_fingerprint *fp, kv_pin_list *l);

#endif
