/* safetensors and sharded safetensors reader (see safetensors.h). */
#include "formats/safetensors.h"

#include <jansson.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

#define ST_MAX_HEADER (100u << 20) /* the format's own limit: 100 MB */

typedef struct st_span {
    uint64_t begin, end;
    const char *name;
} st_span;

static int span_cmp(const void *a, const void *b) {
    const st_span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

static int parse_dtype(const char *s, kvlm_dtype *out) {
    if (!strcmp(s, "F32")) *out = KVLM_F32;
    else if (!strcmp(s, "F16")) *out = KVLM_F16;
    else if (!strcmp(s, "BF16")) *out = KVLM_BF16;
    else return -1;
    return 0;
}

/* Validates one header entry and fills t (data pointer excluded). */
static int parse_entry(const char *path, const char *name, json_t *e, uint64_t data_size,
                       tensor *t, st_span *span, kvlm_error *err) {
    if (!json_is_object(e))
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: tensor '%s': header entry is not an object", path, name);
    json_t *jd = json_object_get(e, "dtype"), *js = json_object_get(e, "shape"),
           *jo = json_object_get(e, "data_offsets");
    if (!json_is_string(jd))
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: tensor '%s': missing string field 'dtype'", path, name);
    if (parse_dtype(json_string_value(jd), &t->dtype))
        return kvlm_error_set(err, KVLM_ERR_UNSUPPORTED, "%s: tensor '%s': dtype %s is not supported (F32, F16, BF16)",
                              path, name, json_string_value(jd));
    if (!json_is_array(js) || json_array_size(js) > TENSOR_MAX_DIMS)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: tensor '%s': field 'shape' must be an array of at most %d integers",
                              path, name, TENSOR_MAX_DIMS);
    t->ndim = (int)json_array_size(js);
    uint64_t numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        json_t *d = json_array_get(js, (size_t)i);
        if (!json_is_integer(d) || json_integer_value(d) < 0 || json_integer_value(d) > (1ll << 40))
            return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: tensor '%s': shape[%d] is not a valid dimension", path, name, i);
        t->shape[i] = json_integer_value(d);
        if (__builtin_mul_overflow(numel, (uint64_t)t->shape[i], &numel) || numel > (1ull << 40))
            return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: tensor '%s': shape is too large", path, name);
    }
    if (!json_is_array(jo) || json_array_size(jo) != 2 || !json_is_integer(json_array_get(jo, 0)) ||
        !json_is_integer(json_array_get(jo, 1)))
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: tensor '%s': field 'data_offsets' must be [begin, end]", path, name);
    json_int_t b = json_integer_value(json_array_get(jo, 0)), en = json_integer_value(json_array_get(jo, 1));
    if (b < 0 || en < b || (uint64_t)en > data_size)
        return kvlm_error_set(err, KVLM_ERR_FORMAT,
                              "%s: tensor '%s': data_offsets [%lld, %lld] lie outside the %llu-byte data section",
                              path, name, (long long)b, (long long)en, (unsigned long long)data_size);
    uint64_t want = numel * kvlm_dtype_size(t->dtype);
    if ((uint64_t)(en - b) != want)
        return kvlm_error_set(err, KVLM_ERR_FORMAT,
                              "%s: tensor '%s': data_offsets span %lld bytes but shape x dtype needs %llu", path, name,
                              (long long)(en - b), (unsigned long long)want);
    span->begin = (uint64_t)b;
    span->end = (uint64_t)en;
    span->name = name;
    return KVLM_OK;
}

/* Empty tensors overlap nothing; every other span is compared with the
 * furthest-reaching span before it, not only its neighbour. */
static int check_overlaps(const char *path, st_span *spans, size_t n, kvlm_error *err) {
    qsort(spans, n, sizeof *spans, span_cmp);
    const st_span *reach = NULL;
    for (size_t i = 0; i < n; i++) {
        if (spans[i].end == spans[i].begin) continue;
        if (reach && spans[i].begin < reach->end)
            return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap", path, reach->name,
                                  spans[i].name);
        if (!reach || spans[i].end > reach->end) reach = &spans[i];
    }
    return KVLM_OK;
}

static int parse_header(tensor_set *ts, int fi, kvlm_error *err) {
    const mapped_file *f = &ts->files[fi];
    if (f->size < 8) return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: file is shorter than the 8-byte header length", f->path);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | f->data[i];
    if (hlen > ST_MAX_HEADER || hlen > f->size - 8)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: header length %llu exceeds the file size %zu", f->path,
                              (unsigned long long)hlen, f->size);
    const unsigned char *data = f->data + 8 + hlen;
    uint64_t data_size = f->size - 8 - hlen;
    json_error_t je;
    json_t *root = json_loadb((const char *)f->data + 8, hlen, JSON_REJECT_DUPLICATES, &je);
    if (!root) return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: header is not valid JSON: %s", f->path, je.text);
    int rc = KVLM_OK;
    st_span *spans = NULL;
    if (!json_is_object(root)) {
        rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: header is not a JSON object", f->path);
        goto done;
    }
    spans = calloc(json_object_size(root) + 1, sizeof *spans);
    if (!spans) {
        rc = kvlm_error_set(err, KVLM_ERR_NOMEM, "%s: out of memory", f->path);
        goto done;
    }
    size_t n_spans = 0;
    const char *name;
    json_t *e;
    json_object_foreach(root, name, e) {
        if (!strcmp(name, "__metadata__")) continue;
        tensor t = {0};
        rc = parse_entry(f->path, name, e, data_size, &t, &spans[n_spans], err);
        if (rc) goto done;
        const unsigned char *p = data + spans[n_spans].begin;
        if ((uintptr_t)p % kvlm_dtype_size(t.dtype)) {
            rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: tensor '%s' is not aligned to its %zu-byte elements", f->path,
                                name, kvlm_dtype_size(t.dtype));
            goto done;
        }
        t.data = p;
        if (tensor_set_add(ts, name, f->path, &t)) {
            rc = kvlm_error_set(err, KVLM_ERR_NOMEM, "%s: out of memory", f->path);
            goto done;
        }
        n_spans++;
    }
    rc = check_overlaps(f->path, spans, n_spans, err);
done:
    free(spans);
    json_decref(root);
    return rc;
}

int safetensors_load(tensor_set *ts, const char *path, kvlm_error *err) {
    mapped_file f;
    int rc = tensor_set_open(ts, &f, path, err);
    if (rc) return rc;
    int fi = tensor_set_add_file(ts, &f);
    if (fi < 0) {
        mapped_file_close(&f);
        return kvlm_error_set(err, KVLM_ERR_NOMEM, "%s: out of memory", path);
    }
    return parse_header(ts, fi, err);
}

/* 1 if the shard at path holds a tensor called name. */
static int shard_has(const tensor_set *ts, const char *path, const char *name) {
    for (int i = 0; i < ts->n_items; i++)
        if (!strcmp(ts->items[i].name, name) && !strcmp(ts->items[i].file, path)) return 1;
    return 0;
}

int safetensors_load_index(tensor_set *ts, const char *index_path, kvlm_error *err) {
    json_error_t je;
    json_t *root = json_load_file(index_path, JSON_REJECT_DUPLICATES, &je);
    if (!root) return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: not valid JSON: %s (line %d)", index_path, je.text, je.line);
    int rc = KVLM_OK;
    json_t *wm = json_object_get(root, "weight_map");
    char *dup = strdup(index_path);
    const char *dir = dirname(dup);
    if (!json_is_object(wm) || json_object_size(wm) == 0) {
        rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: missing or empty object 'weight_map'", index_path);
        goto done;
    }
    /* Load each distinct shard once, then check every mapped name exists. */
    const char *name;
    json_t *v;
    json_object_foreach(wm, name, v) {
        if (!json_is_string(v) || strchr(json_string_value(v), '/') || !strcmp(json_string_value(v), "..")) {
            rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: weight_map['%s'] must be a file name in the same directory",
                                index_path, name);
            goto done;
        }
        char shard[4096];
        snprintf(shard, sizeof shard, "%s/%s", dir, json_string_value(v));
        int seen = 0;
        for (int i = 0; i < ts->n_files; i++) seen |= !strcmp(ts->files[i].path, shard);
        if (!seen && (rc = safetensors_load(ts, shard, err))) goto done;
    }
    json_object_foreach(wm, name, v) {
        char shard[4096];
        snprintf(shard, sizeof shard, "%s/%s", dir, json_string_value(v));
        if (!shard_has(ts, shard, name)) {
            rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: tensor '%s' is listed in weight_map but missing from %s",
                                index_path, name, json_string_value(v));
            goto done;
        }
    }
done:
    free(dup);
    json_decref(root);
    return rc;
}
