/*
 * Little-endian fixed-width integers in byte buffers, for the files kvlm
 * writes itself (KV block files, the pin record): the same bytes on every
 * host, whatever its byte order. No bounds checks: callers check lengths.
 */
#ifndef KVLM_RUNTIME_LE_BYTES_H
#define KVLM_RUNTIME_LE_BYTES_H

#include <stdint.h>

static inline void le_put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline void le_put64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline uint32_t le_get32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static inline uint64_t le_get64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

#endif
