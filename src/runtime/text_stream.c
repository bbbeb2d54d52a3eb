/*
 * Generated tokens to text (see kvlm.h, kvlm_text_stream): the one place
 * kvlm turns ids into what a reader sees. A token's bytes are its piece
 * (special tokens print nothing, so <|endoftext|> or a chat marker never
 * shows up in output; without a tokenizer a token prints as its id and a
 * space), then the stop-string matcher (kvlm_stop) holds back what may
 * begin a stop string and cuts at a completed one, then the UTF-8 assembler
 * holds back an incomplete character. Stop strings are matched on bytes,
 * before characters are assembled, so a stop string may end inside a token.
 *
 * Invariants: out has room for what one call releases; once a stop string
 * has completed, push releases nothing more. This file does not decide
 * when a generation ends on other grounds (eos ids, lengths): the
 * scheduler does.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "kvlm.h"

struct kvlm_text_stream {
    const kvlm_tokenizer *tok;  /* NULL: ids as text */
    kvlm_stop *stop;            /* NULL: no stop strings */
    kvlm_utf8_stream utf8;
    int stopped;
    char *out;                  /* what the last call released */
    size_t cap;
};

kvlm_text_stream *kvlm_text_stream_create(const kvlm_tokenizer *tok, const char *const *stops, int n_stops,
                                          kvlm_error *err) {
    if (n_stops < 0 || (n_stops > 0 && !stops)) {
        kvlm_error_set(err, KVLM_ERR_ARG, "text stream: %d stop strings given without an array", n_stops);
        return NULL;
    }
    kvlm_text_stream *ts = calloc(1, sizeof *ts);
    if (!ts) {
        kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
        return NULL;
    }
    ts->tok = tok;
    if (tok && n_stops > 0 && !(ts->stop = kvlm_stop_create(stops, n_stops, err))) {
        free(ts);
        return NULL;
    }
    return ts;
}

void kvlm_text_stream_free(kvlm_text_stream *ts) {
    if (!ts) return;
    kvlm_stop_free(ts->stop);
    free(ts->out);
    free(ts);
}

static int reserve(kvlm_text_stream *ts, size_t n) {
    if (n <= ts->cap) return 0;
    size_t cap = ts->cap ? ts->cap : 64;
    while (cap < n) cap *= 2;
    char *p = realloc(ts->out, cap);
    if (!p) return KVLM_ERR_NOMEM;
    ts->out = p;
    ts->cap = cap;
    return 0;
}

/* Bytes cleared by the stop matcher through the UTF-8 assembler into out
 * (n + 4 bytes are always enough). */
static int assemble(kvlm_text_stream *ts, const char *bytes, size_t n, const char **text, size_t *len) {
    if (reserve(ts, n + 4)) return KVLM_ERR_NOMEM;
    *len = kvlm_utf8_push(&ts->utf8, bytes, n, ts->out);
    *text = ts->out;
    return 0;
}

static int push(kvlm_text_stream *ts, int32_t id, const char **text, size_t *len, kvlm_error *err) {
    *text = "";
    *len = 0;
    if (ts->stopped) return 1;
    char num[16];
    const char *piece;
    size_t n = 0;
    if (!ts->tok) {
        n = (size_t)snprintf(num, sizeof num, "%d ", id);
        return assemble(ts, num, n, text, len);
    }
    if (kvlm_tokenizer_is_special(ts->tok, id) || !(piece = kvlm_tokenizer_piece(ts->tok, id, &n))) return 0;
    if (!ts->stop) return assemble(ts, piece, n, text, len);
    const char *cleared;
    size_t k;
    int rc = kvlm_stop_push(ts->stop, piece, n, &cleared, &k, err);
    if (rc < 0) return rc;
    /* cleared lives in the matcher until its next call: copy it through */
    int a = assemble(ts, cleared, k, text, len);
    if (a) return a;
    ts->stopped = rc == 1;
    return rc;
}

int kvlm_text_stream_push(kvlm_text_stream *ts, int32_t id, const char **text, size_t *len, kvlm_error *err) {
    kvlm_error local;
    if (!err) err = &local;
    kvlm_error_clear(err);
    int rc = push(ts, id, text, len, err);
    if (rc < 0 && err->code == KVLM_OK) /* the assembler's buffer */
        return kvlm_error_set(err, rc, "generated text: out of memory after token %d", id);
    return rc;
}

int kvlm_text_stream_finish(kvlm_text_stream *ts, const char **text, size_t *len, kvlm_error *err) {
    *text = "";
    *len = 0;
    const char *held = "";
    size_t n = 0;
    if (ts->stop && !ts->stopped) {
        int rc = kvlm_stop_flush(ts->stop, &held, &n, err);
        if (rc) return rc;
    }
    if (reserve(ts, n + 8))
        return kvlm_error_set(err, KVLM_ERR_NOMEM, "generated text: out of memory for the last %zu bytes", n);
    size_t k = kvlm_utf8_push(&ts->utf8, held, n, ts->out);
    k += kvlm_utf8_flush(&ts->utf8, ts->out + k);
    *text = ts->out;
    *len = k;
    return 0;
}
