/* The messages of a chat, their prompt and their JSON file (see chat_conversation.h). */
#include "cli/chat_conversation.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/json_text.h"
#include "app/tool_calls.h"

static int has_system(const chat_conv *cv) {
    const char *role = json_string_value(json_object_get(json_array_get(cv->messages, 0), "role"));
    return role && !strcmp(role, "system");
}

static json_t *message(const char *role, const char *content, size_t n) {
    json_t *c = ts_json_string(content, n);
    if (json_is_null(c)) return NULL;
    return json_pack("{ssso}", "role", role, "content", c);
}

int chat_conv_init(chat_conv *cv, const chat_template *tpl, const kvlm_tokenizer *tok, const char *system) {
    const char *ends[CHAT_MAX_TURN_ENDS];
    const int n_ends = chat_turn_ends(tpl, ends);
    *cv = (chat_conv){.messages = json_array(), .tpl = tpl, .tok = tok};
    for (int i = 0; i < n_ends; i++) {
        const int32_t id = kvlm_tokenizer_token_id(tok, ends[i], strlen(ends[i]));
        if (id >= 0) cv->turn_ends[cv->n_turn_ends++] = id;
    }
    if (!cv->messages) return -1;
    return chat_conv_set_system(cv, system);
}

void chat_conv_retarget(chat_conv *cv, const chat_template *tpl, const kvlm_tokenizer *tok) {
    const char *ends[CHAT_MAX_TURN_ENDS];
    const int n_ends = chat_turn_ends(tpl, ends);
    cv->tpl = tpl;
    cv->tok = tok;
    cv->n_turn_ends = 0;
    for (int i = 0; i < n_ends; i++) {
        const int32_t id = kvlm_tokenizer_token_id(tok, ends[i], strlen(ends[i]));
        if (id >= 0) cv->turn_ends[cv->n_turn_ends++] = id;
    }
}

void chat_conv_free(chat_conv *cv) {
    json_decref(cv->messages);
    cv->messages = NULL;
}

void chat_conv_reset(chat_conv *cv) {
    while (json_array_size(cv->messages) > (size_t)has_system(cv)) chat_conv_pop(cv);
}

int chat_conv_set_system(chat_conv *cv, const char *text) {
    if (has_system(cv)) json_array_remove(cv->messages, 0);
    if (!text || !*text) return 0;
    json_t *m = message("system", text, strlen(text));
    return m ? json_array_insert_new(cv->messages, 0, m) : -1;
}

int chat_conv_add(chat_conv *cv, const char *role, const char *content, size_t n) {
    json_t *m = message(role, content, n);
    return m ? json_array_append_new(cv->messages, m) : -1;
}

int chat_conv_add_reply(chat_conv *cv, const char *answer, size_t n, const char *reasoning, size_t rn) {
    json_t *m = message("assistant", answer, n);
    if (m && rn) {
        json_t *r = ts_json_string(reasoning, rn);
        if (json_is_null(r) || json_object_set(m, "reasoning_content", r) ||
            (cv->tpl->tool_family == TC_FAMILY_HARMONY && json_object_set(m, "thinking", r))) {
            json_decref(r);
            json_decref(m);
            return -1;
        }
        json_decref(r);
    }
    return m ? json_array_append_new(cv->messages, m) : -1;
}

void chat_conv_pop(chat_conv *cv) {
    size_t n = json_array_size(cv->messages);
    if (n) json_array_remove(cv->messages, n - 1);
}

size_t chat_conv_len(const chat_conv *cv) { return json_array_size(cv->messages); }

int chat_conv_prompt(const chat_conv *cv, sbuf *rendered, int32_t **ids, size_t *n, char *msg, size_t msg_size) {
    int raised = 0;
    char why[500];
    *ids = NULL;
    *n = 0;
    if (chat_render(cv->tpl, cv->messages, NULL, 1, rendered, why, sizeof why, &raised)) {
        snprintf(msg, msg_size, "the chat template %s: %s", raised ? "refused the conversation" : "failed", why);
        return -1;
    }
    if (rendered->failed) {
        snprintf(msg, msg_size, "out of memory");
        return -1;
    }
    kvlm_error err;
    if (kvlm_tokenizer_encode_prompt(cv->tok, rendered->data ? rendered->data : "", rendered->len,
                                     chat_uses_special(cv->tpl), ids, n, &err)) {
        snprintf(msg, msg_size, "%s", err.msg);
        return -1;
    }
    if (*n == 0) {
        snprintf(msg, msg_size, "the chat template rendered an empty prompt");
        return -1;
    }
    return 0;
}

int chat_conv_save(const chat_conv *cv, const char *path, char *msg, size_t msg_size) {
    json_t *doc = json_pack("{sO}", "messages", cv->messages);
    FILE *f = doc ? fopen(path, "w") : NULL;
    int rc = 0;
    if (!f) {
        snprintf(msg, msg_size, "cannot write %s: %s", path, doc ? strerror(errno) : "out of memory");
        rc = -1;
    } else {
        if (json_dumpf(doc, f, JSON_INDENT(2)) || fputc('\n', f) == EOF) rc = -1;
        if (fclose(f) || rc) {
            snprintf(msg, msg_size, "cannot write %s: %s", path, strerror(errno));
            rc = -1;
        }
    }
    json_decref(doc);
    return rc;
}
