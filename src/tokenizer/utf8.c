/*
 * Streaming UTF-8 assembler (kvlm_utf8_push / kvlm_utf8_flush): lets a
 * caller print decoded tokens one at a time without ever printing half a
 * character, since a token may end in the middle of one.
 *
 * Invariant: pending holds a proper prefix of a well-formed UTF-8 sequence
 * (1 to 3 bytes) or nothing. Every byte is written out exactly once and in
 * order: bytes that can never be part of a well-formed sequence (stray
 * continuation bytes, C0, C1, F5..FF, an interrupted sequence) go out as
 * they are, immediately, so nothing is held forever. kvlm_utf8_sanitize
 * replaces those bytes with U+FFFD instead, for text bound for JSON. It
 * knows nothing about tokens.
 */
#include <string.h>

#include "kvlm_tokenizer.h"

/* Length of the sequence a lead byte starts, or 0 if it cannot start one. */
static int seq_len(unsigned char c) {
    if (c < 0x80) return 1;
    if (c < 0xC2) return 0;
    if (c < 0xE0) return 2;
    if (c < 0xF0) return 3;
    if (c < 0xF5) return 4;
    return 0;
}

/* May c follow the prefix p[0..n) (n >= 1) in a well-formed sequence? */
static int fits(const unsigned char *p, int n, unsigned char c) {
    if (n == 1) {
        unsigned char lo = 0x80, hi = 0xBF;
        if (p[0] == 0xE0) lo = 0xA0;
        else if (p[0] == 0xED) hi = 0x9F;
        else if (p[0] == 0xF0) lo = 0x90;
        else if (p[0] == 0xF4) hi = 0x8F;
        return c >= lo && c <= hi;
    }
    return (c & 0xC0) == 0x80;
}

size_t kvlm_utf8_push(kvlm_utf8_stream *s, const char *bytes, size_t n, char *out) {
    size_t o = 0;
    if (s->n_pending < 0 || s->n_pending > 3) s->n_pending = 0;   /* not initialised */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)bytes[i];
        if (s->n_pending > 0) {
            if (fits(s->pending, s->n_pending, c)) {
                s->pending[s->n_pending++] = c;
                if (s->n_pending == seq_len(s->pending[0])) {
                    for (int k = 0; k < s->n_pending; k++) out[o++] = (char)s->pending[k];
                    s->n_pending = 0;
                }
                continue;
            }
            /* Interrupted: the held bytes were never going to be valid. */
            for (int k = 0; k < s->n_pending; k++) out[o++] = (char)s->pending[k];
            s->n_pending = 0;
        }
        int len = seq_len(c);
        if (len <= 1) out[o++] = (char)c;   /* ASCII, or a byte no sequence starts with */
        else s->pending[s->n_pending++] = c;
    }
    return o;
}

size_t kvlm_utf8_flush(kvlm_utf8_stream *s, char *out) {
    size_t o = 0;
    if (s->n_pending < 0 || s->n_pending > 3) s->n_pending = 0;
    for (int k = 0; k < s->n_pending; k++) out[o++] = (char)s->pending[k];
    s->n_pending = 0;
    return o;
}

size_t kvlm_utf8_char_len(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    if (n == 0) return 0;
    const size_t len = (size_t)seq_len(p[0]);
    if (len == 0 || len > n) return 0;
    for (size_t i = 1; i < len; i++)
        if (!fits(p, (int)i, p[i])) return 0;
    return len;
}

size_t kvlm_utf8_sanitize(const char *in, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        const size_t k = kvlm_utf8_char_len(in + i, n - i);
        if (k) {
            memcpy(out + o, in + i, k);
            o += k, i += k;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3); /* U+FFFD */
            o += 3, i++;
        }
    }
    return o;
}
