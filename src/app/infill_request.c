/*
 * Fill-in-the-middle prompts and the /infill body (see infill_request.h).
 * The assembly works on token ids only: every piece of text is encoded on
 * its own, then the pieces are cut to the room and joined with the
 * model's FIM tokens, so the ids match llama-server's for the same file.
 */
#include "app/infill_request.h"

#include <stdlib.h>
#include <string.h>

typedef struct ids {
    int32_t *v;
    size_t n, cap;
} ids;

static int ids_add(ids *a, const int32_t *v, size_t n) {
    if (a->n + n > a->cap) {
        size_t cap = a->cap ? a->cap : 64;
        while (cap < a->n + n) cap *= 2;
        int32_t *p = realloc(a->v, cap * sizeof *p);
        if (!p) return -1;
        a->v = p;
        a->cap = cap;
    }
    if (n) memcpy(a->v + a->n, v, n * sizeof *v);
    a->n += n;
    return 0;
}

static int ids_one(ids *a, int32_t id) { return ids_add(a, &id, 1); }

/* Appends the encoding of text (special tokens matched when special). */
static int ids_text(ids *a, const kvlm_tokenizer *tok, const char *text, size_t len, int special, const char *param,
                    api_error *e) {
    int32_t *v = NULL;
    size_t n = 0;
    kvlm_error err;
    if (len && kvlm_tokenizer_encode(tok, text, len, special, &v, &n, &err))
        return api_fail(e, 400, "invalid_prompt", param, "'%s' could not be encoded: %s", param, err.msg);
    int rc = ids_add(a, v, n);
    free(v);
    return rc ? api_fail(e, 500, NULL, NULL, "out of memory") : 0;
}

int fim_check(const kvlm_tokenizer *tok, const char *param, api_error *e) {
    if (!tok) return api_fail(e, 400, "fim_not_supported", param, "fill-in-the-middle needs a tokenizer; this model has none");
    static const char *const names[3] = {"prefix (tokenizer.ggml.fim_pre_token_id, <|fim_prefix|>)",
                                         "suffix (tokenizer.ggml.fim_suf_token_id, <|fim_suffix|>)",
                                         "middle (tokenizer.ggml.fim_mid_token_id, <|fim_middle|>)"};
    char missing[400] = "";
    int n_missing = 0;
    for (int k = 0; k < 3; k++) {
        if (kvlm_tokenizer_fim_id(tok, (kvlm_fim_token)k) >= 0) continue;
        size_t at = strlen(missing);
        snprintf(missing + at, sizeof missing - at, "%s%s", n_missing++ ? ", " : "", names[k]);
    }
    if (!n_missing) return 0;
    return api_fail(e, 400, "fim_not_supported", param,
                    "fill-in-the-middle is not supported by this model: its tokenizer names no %s token%s", missing,
                    n_missing > 1 ? "s" : "");
}

static int min_i(int a, int b) { return a < b ? a : b; }
static int max_i(int a, int b) { return a > b ? a : b; }

int fim_assemble(const kvlm_tokenizer *tok, const fim_input *in, int room, int spm, int32_t **out, int *n_out,
                 api_error *e) {
    *out = NULL;
    *n_out = 0;
    e->status = 0;
    if (fim_check(tok, "input_prefix", e)) return -1;
    const int32_t pre = kvlm_tokenizer_fim_id(tok, KVLM_FIM_PRE), suf = kvlm_tokenizer_fim_id(tok, KVLM_FIM_SUF),
                  mid = kvlm_tokenizer_fim_id(tok, KVLM_FIM_MID), rep = kvlm_tokenizer_fim_id(tok, KVLM_FIM_REP),
                  sep = kvlm_tokenizer_fim_id(tok, KVLM_FIM_SEP), bos = kvlm_tokenizer_bos_id(tok);
    const int add_bos = kvlm_tokenizer_add_bos(tok) && bos >= 0;
    ids p = {0}, s = {0}, q = {0}, x = {0}, all = {0};
    int rc = ids_text(&p, tok, in->prefix, in->prefix_len, 0, "input_prefix", e);
    if (!rc) rc = ids_text(&s, tok, in->suffix, in->suffix_len, 0, "input_suffix", e);
    if (!rc && in->prompt) rc = ids_text(&q, tok, in->prompt, in->prompt_len, 1, "prompt", e);
    /* the extra context, as a repository of files */
    if (!rc && rep >= 0 && (ids_one(&x, rep) || ids_text(&x, tok, "myproject\n", 10, 0, "input_extra", e)))
        rc = -1;
    for (int i = 0; !rc && i < in->n_extra; i++) {
        const fim_chunk *c = &in->extra[i];
        if (sep >= 0) {
            rc = ids_one(&x, sep);
            if (!rc) rc = ids_text(&x, tok, c->filename ? c->filename : "tmp", c->filename ? c->filename_len : 3, 0,
                                   "input_extra", e);
            if (!rc) rc = ids_text(&x, tok, "\n", 1, 0, "input_extra", e);
        } else {
            rc = ids_text(&x, tok, "\n\n--- snippet ---\n\n", 19, 0, "input_extra", e);
        }
        if (!rc) rc = ids_text(&x, tok, c->text, c->text_len, 0, "input_extra", e);
    }
    if (!rc && sep >= 0 && (ids_one(&x, sep) || ids_text(&x, tok, "filename\n", 9, 0, "input_extra", e))) rc = -1;
    if (rc) {
        if (e->status == 0) api_fail(e, 500, NULL, NULL, "out of memory");
        goto done;
    }
    /* cut to the room: prefix up to 3/4 of it, suffix up to 1/4 less the prompt */
    const int markers = 3 + add_bos;
    int n_pre = min_i((int)p.n, 3 * (room / 4)), n_suf = min_i((int)s.n, max_i(0, room / 4 - (2 + (int)q.n)));
    int core = markers + n_pre + (int)q.n + n_suf;
    if (core > room) {
        n_pre = max_i(0, n_pre - (core - room));
        core = markers + n_pre + (int)q.n + n_suf;
    }
    if (core > room) {
        rc = api_fail(e, 400, "context_length_exceeded", "prompt",
                      "the fill-in-the-middle prompt needs %d tokens (%zu in 'prompt'); the context window leaves %d "
                      "beside the completion", core, q.n, room);
        goto done;
    }
    const int n_extra = min_i((int)x.n, room - core);
    /* the kept ends (an empty list has no array: NULL, read 0 from) */
    const int32_t *pv = p.v ? p.v + (p.n - (size_t)n_pre) : NULL, *xv = x.v ? x.v + (x.n - (size_t)n_extra) : NULL;
    rc = ids_add(&all, xv, (size_t)n_extra);
    if (!rc && add_bos) rc = ids_one(&all, bos);
    for (int part = 0; !rc && part < 2; part++) {
        if ((part == 0) != (spm != 0)) { /* prefix block */
            rc = ids_one(&all, pre);
            if (!rc) rc = ids_add(&all, pv, (size_t)n_pre);
            if (!rc) rc = ids_add(&all, q.v, q.n);
        } else {
            rc = ids_one(&all, suf);
            if (!rc) rc = ids_add(&all, s.v, (size_t)n_suf);
        }
    }
    if (!rc) rc = ids_one(&all, mid);
    if (rc) {
        rc = api_fail(e, 500, NULL, NULL, "out of memory");
        goto done;
    }
    *out = all.v;
    *n_out = (int)all.n;
    all.v = NULL;
done:
    free(p.v);
    free(s.v);
    free(q.v);
    free(x.v);
    free(all.v);
    return rc;
}

/* ------------------------------------------------------------ POST /infill */

static int text_field(json_t *root, const char *key, int required, const char **s, size_t *n, api_error *e) {
    json_t *v = json_object_get(root, key);
    *s = "";
    *n = 0;
    if (!v || json_is_null(v)) {
        return required ? api_fail(e, 400, "missing_parameter", key, "'%s' is required (a string)", key) : 0;
    }
    if (!json_is_string(v)) return api_fail(e, 400, "invalid_type", key, "'%s' must be a string", key);
    *s = json_string_value(v);
    *n = json_string_length(v);
    return 0;
}

static int parse_extra(json_t *arr, fim_chunk **out, int *n, api_error *e) {
    *out = NULL;
    *n = 0;
    if (!arr || json_is_null(arr)) return 0;
    if (!json_is_array(arr))
        return api_fail(e, 400, "invalid_type", "input_extra",
                        "'input_extra' must be a list of {\"filename\": string, \"text\": string}");
    size_t k = json_array_size(arr);
    if (k > 4096) return api_fail(e, 400, "invalid_value", "input_extra", "'input_extra' has %zu chunks; at most 4096", k);
    if (k && !(*out = calloc(k, sizeof **out))) return api_fail(e, 500, NULL, NULL, "out of memory");
    for (size_t i = 0; i < k; i++) {
        json_t *c = json_array_get(arr, i), *t = json_object_get(c, "text"), *f = json_object_get(c, "filename");
        const char *key;
        json_t *v;
        if (!json_is_object(c) || !json_is_string(t))
            return api_fail(e, 400, "invalid_type", "input_extra", "'input_extra[%zu]' must be an object with a "
                            "string \"text\"", i);
        if (f && !json_is_null(f) && !json_is_string(f))
            return api_fail(e, 400, "invalid_type", "input_extra", "'input_extra[%zu].filename' must be a string", i);
        json_object_foreach(c, key, v) if (strcmp(key, "text") && strcmp(key, "filename"))
            return api_fail(e, 400, "unknown_parameter", "input_extra", "'input_extra[%zu]' has an unknown field "
                            "'%.40s' (text, filename)", i, key);
        (*out)[i].text = json_string_value(t);
        (*out)[i].text_len = json_string_length(t);
        if (json_is_string(f)) {
            (*out)[i].filename = json_string_value(f);
            (*out)[i].filename_len = json_string_length(f);
        }
    }
    *n = (int)k;
    return 0;
}

int fim_room(json_t *root, const api_limits *lim) {
    json_t *mt = json_object_get(root, "max_tokens");
    long long want = 16;
    if (json_is_integer(mt) && json_integer_value(mt) >= 1) want = json_integer_value(mt);
    else if (json_is_real(mt) && json_real_value(mt) >= 1 && json_real_value(mt) < 1e9) want = (long long)json_real_value(mt);
    if (want >= lim->n_ctx) want = lim->n_ctx / 2; /* check_lengths names the field */
    return lim->n_ctx - (int)want;
}

int api_parse_infill(const char *body, size_t len, const api_limits *lim, api_request *rq, api_error *e) {
    memset(rq, 0, sizeof *rq);
    json_t *root = api_load_body(body, len, lim, e);
    if (!root) return -1;
    fim_input in = {0};
    fim_chunk *extra = NULL;
    int32_t *ids = NULL;
    int n = 0;
    json_t *m = json_object_get(root, "model");
    int rc = 0;
    /* the model first: a request for another model is a 404 whatever it holds */
    if (m && !json_is_null(m) && (!json_is_string(m) || strcmp(json_string_value(m), lim->model_name)))
        rc = json_is_string(m) ? api_fail(e, 404, "model_not_found", "model",
                                          "The model '%s' does not exist; this server serves '%s'",
                                          json_string_value(m), lim->model_name)
                               : api_fail(e, 400, "invalid_type", "model", "'model' must be a string");
    if (!rc) rc = fim_check(lim->tok, NULL, e);
    static const char *const refused[] = {"samplers", "n_indent", "input_suffix_tokens", "id_slot", NULL};
    for (int k = 0; !rc && refused[k]; k++)
        if (json_object_get(root, refused[k]))
            rc = api_fail(e, 400, "unsupported_parameter", refused[k], "'%s' is not supported by this server",
                          refused[k]);
    json_t *np = json_object_get(root, "n_predict");
    if (!rc && np && !json_is_null(np)) {
        if (json_object_get(root, "max_tokens"))
            rc = api_fail(e, 400, "invalid_value", "n_predict", "give 'n_predict' or 'max_tokens', not both");
        else if (json_is_integer(np) && json_integer_value(np) < 0)
            json_object_del(root, "n_predict"); /* -1: the default */
        else
            json_object_set(root, "max_tokens", np);
    }
    json_object_del(root, "n_predict");
    if (!rc) rc = text_field(root, "input_prefix", 1, &in.prefix, &in.prefix_len, e);
    if (!rc) rc = text_field(root, "input_suffix", 1, &in.suffix, &in.suffix_len, e);
    if (!rc) rc = text_field(root, "prompt", 0, &in.prompt, &in.prompt_len, e);
    if (!rc) rc = parse_extra(json_object_get(root, "input_extra"), &extra, &in.n_extra, e);
    in.extra = extra;
    if (!rc) rc = fim_assemble(lim->tok, &in, fim_room(root, lim), 0, &ids, &n, e);
    if (!rc) {
        static const char *const drop[] = {"input_prefix", "input_suffix", "input_extra", "prompt", "cache_prompt",
                                           "t_max_prompt_ms", "t_max_predict_ms", "response_fields", NULL};
        for (int k = 0; drop[k]; k++) json_object_del(root, drop[k]);
        json_t *arr = json_array();
        for (int i = 0; i < n; i++) json_array_append_new(arr, json_integer(ids[i]));
        json_object_set_new(root, "prompt", arr);
        rc = api_parse_completion_root(root, lim, rq, e);
        if (!rc) rq->infill = 1;
    }
    free(ids);
    free(extra);
    json_decref(root);
    return rc;
}
