/* The saved conversation's header and text (see saved_chat.h). */
#include "app/saved_chat.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define CHAT_MAGIC "KVLMCHAT"
#define CHAT_VERSION 1u

typedef struct chat_header {
    char magic[8];
    uint32_t version, has_kv;
    uint64_t text_bytes, text_sum;
} chat_header;
_Static_assert(sizeof(chat_header) == 32, "the conversation header is 32 bytes");

static int messages_ok(const json_t *msgs, char *msg, size_t msg_size) {
    if (!json_is_array(msgs)) {
        snprintf(msg, msg_size, "\"messages\" is not an array");
        return -1;
    }
    size_t i;
    const json_t *m;
    json_array_foreach(msgs, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!role || (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant"))) {
            snprintf(msg, msg_size, "message %zu has no role of system, user or assistant", i);
            return -1;
        }
        if (!json_is_string(json_object_get(m, "content"))) {
            snprintf(msg, msg_size, "message %zu has no string content", i);
            return -1;
        }
        static const char *const reasoning[] = {"reasoning_content", "thinking"};
        for (int k = 0; k < 2; k++) {
            const json_t *r = json_object_get(m, reasoning[k]);
            if (r && (!json_is_string(r) || strcmp(role, "assistant"))) {
                snprintf(msg, msg_size, "message %zu: \"%s\" is a string of an assistant message only", i,
                         reasoning[k]);
                return -1;
            }
        }
        if (!strcmp(role, "system") && i) {
            snprintf(msg, msg_size, "message %zu: a system message comes first only", i);
            return -1;
        }
    }
    return 0;
}

int saved_chat_read_text(FILE *f, json_t **doc, int *has_kv, char *msg, size_t msg_size) {
    *doc = NULL;
    *has_kv = 0;
    chat_header hd;
    if (fread(&hd, sizeof hd, 1, f) != 1 || memcmp(hd.magic, CHAT_MAGIC, 8)) {
        snprintf(msg, msg_size, "not a saved kvlm conversation (no KVLMCHAT header)");
        return -1;
    }
    if (hd.version != CHAT_VERSION || hd.has_kv > 1) {
        snprintf(msg, msg_size, "a saved conversation of version %u; this kvlm reads version %u", hd.version,
                 CHAT_VERSION);
        return -1;
    }
    if (hd.text_bytes == 0 || hd.text_bytes > SAVED_CHAT_MAX_TEXT) {
        snprintf(msg, msg_size, "its text of %llu bytes is outside 1..%zu", (unsigned long long)hd.text_bytes,
                 SAVED_CHAT_MAX_TEXT);
        return -1;
    }
    char *text = malloc(hd.text_bytes);
    if (!text) {
        snprintf(msg, msg_size, "out of memory");
        return -1;
    }
    int rc = -1;
    if (fread(text, 1, hd.text_bytes, f) != hd.text_bytes) {
        snprintf(msg, msg_size, "the file ends inside its text (truncated)");
    } else if (XXH3_64bits(text, hd.text_bytes) != hd.text_sum) {
        snprintf(msg, msg_size, "its text does not match its checksum (corrupted)");
    } else {
        json_error_t je;
        *doc = json_loadb(text, hd.text_bytes, JSON_REJECT_DUPLICATES, &je);
        if (!*doc) snprintf(msg, msg_size, "its text is not JSON: %s", je.text);
        else if (!messages_ok(json_object_get(*doc, "messages"), msg, msg_size)) rc = 0;
        if (rc) {
            json_decref(*doc);
            *doc = NULL;
        }
    }
    free(text);
    *has_kv = rc == 0 && hd.has_kv;
    return rc;
}

int saved_chat_write_head(FILE *f, const char *text, size_t n, int has_kv) {
    chat_header hd = {.version = CHAT_VERSION, .has_kv = has_kv ? 1 : 0, .text_bytes = n,
                      .text_sum = XXH3_64bits(text, n)};
    memcpy(hd.magic, CHAT_MAGIC, 8);
    return fwrite(&hd, sizeof hd, 1, f) == 1 && fwrite(text, 1, n, f) == n ? 0 : -1;
}

int saved_chat_mark_no_kv(FILE *f) {
    const uint32_t zero = 0;
    return fseek(f, 12, SEEK_SET) || fwrite(&zero, sizeof zero, 1, f) != 1 ? -1 : 0;
}
