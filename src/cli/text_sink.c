/* Generated tokens to text: stop strings, UTF-8 assembly, output (see text_sink.h). */
#include "cli/text_sink.h"

#include <stdlib.h>
#include <string.h>

void sink_init(text_sink *s, const kvlm_tokenizer *tok, kvlm_stop *stop, FILE *stream) {
    memset(s, 0, sizeof *s);
    s->tok = tok;
    s->stop = stop;
    s->stream = stream;
}

static void append(text_sink *s, const char *b, size_t n) {
    if (s->len + n + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 256;
        while (cap < s->len + n + 1) cap *= 2;
        char *nt = realloc(s->text, cap);
        if (!nt) return;
        s->text = nt;
        s->cap = cap;
    }
    memcpy(s->text + s->len, b, n);
    s->len += n;
    s->text[s->len] = 0;
}

/* Bytes cleared by the stop matcher: assemble characters, then emit. */
static void emit(text_sink *s, const char *b, size_t n) {
    while (n > 0) {
        char buf[260];
        size_t chunk = n < 256 ? n : 256;
        size_t k = kvlm_utf8_push(&s->utf8, b, chunk, buf);
        if (s->stream) fwrite(buf, 1, k, s->stream);
        append(s, buf, k);
        b += chunk;
        n -= chunk;
    }
    if (s->stream) fflush(s->stream);
}

int sink_token(int32_t id, void *ctx) {
    text_sink *s = ctx;
    if (s->stopped) return 1;
    if (!s->tok) {
        char num[16];
        int k = snprintf(num, sizeof num, "%d ", id);
        if (s->stream) fputs(num, s->stream);
        append(s, num, (size_t)k);
        return 0;
    }
    size_t len = 0;
    const char *piece = kvlm_tokenizer_piece(s->tok, id, &len);
    if (!piece) return 0;
    if (!s->stop) {
        emit(s, piece, len);
        return 0;
    }
    const char *out;
    size_t out_len;
    s->stopped = kvlm_stop_push(s->stop, piece, len, &out, &out_len);
    emit(s, out, out_len);
    return s->stopped;
}

void sink_finish(text_sink *s) {
    if (s->stop) {
        const char *out;
        size_t out_len;
        kvlm_stop_flush(s->stop, &out, &out_len);
        emit(s, out, out_len);
    }
    char tail[8];
    size_t k = kvlm_utf8_flush(&s->utf8, tail);
    if (s->stream) fwrite(tail, 1, k, s->stream);
    append(s, tail, k);
}

void sink_free(text_sink *s) {
    free(s->text);
    memset(s, 0, sizeof *s);
}

json_t *sink_json_text(const text_sink *s) {
    json_t *j = json_stringn(s->text ? s->text : "", s->len);
    if (j) return j;
    char *clean = malloc(s->len * 3 + 1);
    if (!clean) return json_null();
    size_t o = 0;
    const unsigned char *p = (const unsigned char *)s->text;
    for (size_t i = 0; i < s->len;) {
        size_t k = kvlm_utf8_char_len((const char *)p + i, s->len - i);
        if (k) {
            memcpy(clean + o, p + i, k);
            o += k, i += k;
        } else {
            memcpy(clean + o, "\xEF\xBF\xBD", 3); /* U+FFFD */
            o += 3, i++;
        }
    }
    j = json_stringn(clean, o);
    free(clean);
    return j ? j : json_null();
}
