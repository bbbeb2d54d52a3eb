/* The saved conversation file of kvlm chat (see chat_file.h). */
#include "cli/chat_file.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/saved_chat.h"

/* Writes the KV the prefix cache holds for ids to f; out->tokens 0 with
 * out->why when there is none. Returns -1 only when writing f failed. */
static int write_kv(FILE *f, kvlm_kv *kv, const kvlm_model *m, const int32_t *ids, int n_ids, chat_file_kv *out) {
    kvlm_error err;
    int cached = 0;
    const double t0 = kvlm_now();
    int seq = ids && n_ids > 1 ? kvlm_kv_seq_new_prefixed(kv, ids, n_ids, &cached, &err) : -1;
    if (!ids || n_ids <= 1) snprintf(out->why, sizeof out->why, "no reply has run yet");
    else if (seq < 0) snprintf(out->why, sizeof out->why, "%s", err.msg);
    else if (!cached) snprintf(out->why, sizeof out->why, "the KV cache holds no whole block of the conversation");
    int rc = 0;
    if (seq >= 0 && cached) {
        long at = ftell(f);
        if (kvlm_kv_seq_save(kv, m, seq, f, &err) == 0) {
            out->tokens = cached;
        } else if (err.code == KVLM_ERR_IO || at < 0 || fseek(f, at, SEEK_SET)) {
            rc = -1;
        } else {
            snprintf(out->why, sizeof out->why, "%s", err.msg);
        }
    }
    if (seq >= 0) kvlm_kv_seq_free(kv, seq);
    out->ms = (kvlm_now() - t0) * 1e3;
    return rc;
}

int chat_file_save(const char *path, const chat_conv *cv, const char *template_origin, kvlm_kv *kv,
                   const kvlm_model *m, const int32_t *ids, int n_ids, chat_file_kv *out, char *msg,
                   size_t msg_size) {
    memset(out, 0, sizeof *out);
    kvlm_kv_info info;
    kvlm_kv_get_info(kv, &info);
    json_t *doc = json_pack("{sOssss}", "messages", cv->messages, "chat_template", template_origin, "kv_dtype",
                            kvlm_dtype_name(info.dtype));
    char *text = doc ? json_dumps(doc, JSON_INDENT(1)) : NULL;
    json_decref(doc);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = text ? fopen(tmp, "wb") : NULL;
    if (!f) {
        snprintf(msg, msg_size, "cannot write %s: %s", tmp, text ? strerror(errno) : "out of memory");
        free(text);
        return -1;
    }
    int bad = saved_chat_write_head(f, text, strlen(text), 1);
    free(text);
    if (!bad) bad = write_kv(f, kv, m, ids, n_ids, out);
    if (!bad && !out->tokens) bad = saved_chat_mark_no_kv(f); /* no KV after all: say so in the header */
    if (!bad) bad = fflush(f) || fsync(fileno(f));
    const int err_no = errno;
    if (fclose(f)) bad = 1;
    if (!bad && rename(tmp, path)) bad = 1;
    if (bad) {
        snprintf(msg, msg_size, "cannot write %s: %s", path, strerror(err_no ? err_no : errno));
        unlink(tmp);
        return -1;
    }
    return 0;
}

int chat_file_load(const char *path, chat_conv *cv, kvlm_kv *kv, const kvlm_model *m, int32_t **ids, int *n_ids,
                   chat_file_kv *out, char *msg, size_t msg_size) {
    memset(out, 0, sizeof *out);
    *ids = NULL;
    *n_ids = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(msg, msg_size, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    json_t *doc;
    int has_kv;
    char why[400];
    if (saved_chat_read_text(f, &doc, &has_kv, why, sizeof why)) {
        snprintf(msg, msg_size, "cannot load %s: %s", path, why);
        fclose(f);
        return -1;
    }
    json_t *msgs = json_object_get(doc, "messages");
    json_incref(msgs);
    json_decref(cv->messages);
    cv->messages = msgs;
    const char *origin = json_string_value(json_object_get(doc, "chat_template"));
    snprintf(out->template_origin, sizeof out->template_origin, "%s", origin ? origin : "");
    json_decref(doc);
    if (!has_kv) {
        snprintf(out->why, sizeof out->why, "the file holds no KV");
    } else {
        kvlm_error err;
        int seq;
        const double t0 = kvlm_now();
        if (kvlm_kv_seq_restore(kv, m, f, &seq, &err)) {
            snprintf(out->why, sizeof out->why, "%s", err.msg);
        } else {
            const int32_t *t;
            const int n = kvlm_kv_seq_tokens(kv, seq, &t, &err);
            *ids = n > 0 ? malloc((size_t)n * sizeof(int32_t)) : NULL;
            if (*ids) {
                memcpy(*ids, t, (size_t)n * sizeof(int32_t));
                *n_ids = n;
            }
            out->tokens = n > 0 ? n : 0;
            kvlm_kv_seq_free(kv, seq); /* its blocks stay in the prefix cache */
        }
        out->ms = (kvlm_now() - t0) * 1e3;
    }
    fclose(f);
    return 0;
}
