/* Named tensor views over memory-mapped files (see tensor_set.h). */
#include "formats/tensor_set.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tensor_set_init(tensor_set *ts) { memset(ts, 0, sizeof *ts); }

int tensor_set_open(const tensor_set *ts, mapped_file *f, const char *path, kvlm_error *err) {
    return ts->read_files ? mapped_file_read(f, path, err) : mapped_file_open(f, path, err);
}

void tensor_set_free(tensor_set *ts) {
    for (int i = 0; i < ts->n_items; i++) free(ts->items[i].name);
    for (int i = 0; i < ts->n_files; i++) mapped_file_close(&ts->files[i]);
    free(ts->items);
    free(ts->files);
    memset(ts, 0, sizeof *ts);
}

int tensor_set_add_file(tensor_set *ts, mapped_file *f) {
    mapped_file *nf = realloc(ts->files, (size_t)(ts->n_files + 1) * sizeof *nf);
    if (!nf) return -1;
    ts->files = nf;
    ts->files[ts->n_files] = *f;
    memset(f, 0, sizeof *f);
    return ts->n_files++;
}

int tensor_set_add(tensor_set *ts, const char *name, const char *file, const tensor *t) {
    if (ts->n_items == ts->cap_items) {
        int cap = ts->cap_items ? ts->cap_items * 2 : 64;
        named_tensor *ni = realloc(ts->items, (size_t)cap * sizeof *ni);
        if (!ni) return -1;
        ts->items = ni;
        ts->cap_items = cap;
    }
    named_tensor *nt = &ts->items[ts->n_items];
    nt->name = strdup(name);
    if (!nt->name) return -1;
    nt->file = file;
    nt->t = *t;
    ts->n_items++;
    return 0;
}

const named_tensor *tensor_set_find(const tensor_set *ts, const char *name, const char *prefix) {
    char full[256];
    if (prefix) snprintf(full, sizeof full, "%s%s", prefix, name);
    for (int i = 0; i < ts->n_items; i++) {
        if (!strcmp(ts->items[i].name, name)) return &ts->items[i];
        if (prefix && !strcmp(ts->items[i].name, full)) return &ts->items[i];
    }
    return NULL;
}
