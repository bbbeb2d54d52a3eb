/* Generated tokens to client text: stop strings, UTF-8 assembly (see text_stream.h). */
#include "server/text_stream.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ts_init(text_stream *ts, const kvlm_tokenizer *tok, char *const *stops, int n_stops, kvlm_error *err) {
    memset(ts, 0, sizeof *ts);
    ts->tok = tok;
    if (n_stops > 0 && !(ts->stop = kvlm_stop_create((const char *const *)stops, n_stops, err))) return -1;
    return 0;
}

/* Bytes cleared by the stop matcher go through the UTF-8 assembler. */
static void emit(text_stream *ts, const char *b, size_t n, sbuf *delta) {
    while (n > 0) {
        char buf[260];
        size_t chunk = n < 256 ? n : 256;
        size_t k = kvlm_utf8_push(&ts->utf8, b, chunk, buf);
        sbuf_add(delta, buf, k);
        b += chunk;
        n -= chunk;
    }
}

int ts_push(text_stream *ts, int32_t id, sbuf *delta) {
    if (ts->stopped) return 1;
    if (!ts->tok) {
        sbuf_printf(delta, "%d ", id);
        return 0;
    }
    if (kvlm_tokenizer_is_special(ts->tok, id)) return 0;
    size_t len = 0;
    const char *piece = kvlm_tokenizer_piece(ts->tok, id, &len);
    if (!piece) return 0;
    if (!ts->stop) {
        emit(ts, piece, len, delta);
        return 0;
    }
    const char *out;
    size_t out_len;
    ts->stopped = kvlm_stop_push(ts->stop, piece, len, &out, &out_len);
    emit(ts, out, out_len, delta);
    return ts->stopped;
}

void ts_finish(text_stream *ts, sbuf *delta) {
    if (ts->stop && !ts->stopped) {
        const char *out;
        size_t out_len;
        kvlm_stop_flush(ts->stop, &out, &out_len);
        emit(ts, out, out_len, delta);
    }
    char tail[8];
    size_t k = kvlm_utf8_flush(&ts->utf8, tail);
    sbuf_add(delta, tail, k);
}

void ts_free(text_stream *ts) {
    kvlm_stop_free(ts->stop);
    memset(ts, 0, sizeof *ts);
}

int ts_utf8_valid(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = kvlm_utf8_char_len((const char *)p + i, n - i);
        if (!k) return 0;
        i += k;
    }
    return 1;
}

json_t *ts_json_string(const char *s, size_t n) {
    if (ts_utf8_valid(s, n)) return json_stringn(s ? s : "", n);
    sbuf clean = {0};
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = kvlm_utf8_char_len((const char *)p + i, n - i);
        if (k) {
            sbuf_add(&clean, p + i, k);
            i += k;
        } else {
            sbuf_add(&clean, "\xEF\xBF\xBD", 3); /* U+FFFD */
            i++;
        }
    }
    json_t *j = clean.failed ? NULL : json_stringn(clean.data ? clean.data : "", clean.len);
    sbuf_free(&clean);
    return j;
}
