/*
 * Reading a tokenizer's files whole: the bytes of a file, and a JSON file
 * whose top level must be an object (duplicate keys refused). Shared by the
 * format readers (tokenizer/load.c, tokenizer/hf_json.c); errors name the
 * file and, for JSON, the line and column.
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "tokenizer/tokenizer.h"

int tok_read_file(const char *path, char **buf, size_t *len, kvlm_error *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return kvlm_error_set(err, KVLM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    while (b) {
        n += fread(b + n, 1, cap - n, f);
        if (n < cap) break;
        char *nb = cap < SIZE_MAX / 2 ? realloc(b, cap * 2) : NULL;
        if (!nb) { free(b); b = NULL; break; }
        b = nb;
        cap *= 2;
    }
    int bad = ferror(f);
    fclose(f);
    if (!b) return kvlm_error_set(err, KVLM_ERR_NOMEM, "%s: out of memory reading the file", path);
    if (bad) {
        free(b);
        return kvlm_error_set(err, KVLM_ERR_IO, "%s: read error", path);
    }
    *buf = b;
    *len = n;
    return 0;
}

json_t *tok_load_json(const char *path, kvlm_error *err) {
    char *buf;
    size_t len;
    if (tok_read_file(path, &buf, &len, err) != 0) return NULL;
    json_error_t je;
    json_t *root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
    free(buf);
    if (!root) {
        kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: invalid JSON at line %d, column %d: %s", path,
                       je.line, je.column, je.text);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: expected a JSON object at the top level", path);
        return NULL;
    }
    return root;
}
