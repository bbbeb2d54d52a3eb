/*
 * A growable byte buffer for building response bodies, server-sent event
 * streams and rendered prompts. Always NUL-terminated after len bytes; the
 * bytes themselves may contain NULs. An allocation failure sets `failed`
 * and later appends become no-ops, so callers check once at the end.
 */
#ifndef KVLM_APP_SBUF_H
#define KVLM_APP_SBUF_H

#include <stddef.h>

typedef struct sbuf {
    char *data;
    size_t len, cap;
    int failed;
} sbuf;

void sbuf_add(sbuf *b, const void *bytes, size_t n);
void sbuf_adds(sbuf *b, const char *s);
void sbuf_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Drops the first n bytes. */
void sbuf_consume(sbuf *b, size_t n);
void sbuf_free(sbuf *b);

#endif
