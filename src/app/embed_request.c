/*
 * The /v1/embeddings body (see embed_request.h) and the base64 form of a
 * vector.
 */
#include "app/embed_request.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

void embed_request_free(embed_request *rq) {
    for (int i = 0; rq->ids && i < rq->n_inputs; i++) free(rq->ids[i]);
    free(rq->ids);
    free(rq->n_ids);
    memset(rq, 0, sizeof *rq);
}

/* A token id list (of a list of lists when idx >= 0). */
static int id_list(json_t *a, int idx, const api_limits *lim, int32_t **out, int *n, api_error *e) {
    char name[40];
    if (idx >= 0) snprintf(name, sizeof name, "input[%d]", idx);
    else snprintf(name, sizeof name, "input");
    const size_t k = json_array_size(a);
    if (!k) return api_fail(e, 400, "invalid_value", name, "'%s' is an empty list of token ids", name);
    if (k > (size_t)lim->n_ctx)
        return api_fail(e, 400, "context_length_exceeded", name,
                        "'%s' has %zu tokens; this model's context window is %d tokens", name, k, lim->n_ctx);
    if (!(*out = malloc(k * sizeof **out))) return api_fail(e, 500, NULL, NULL, "out of memory");
    for (size_t j = 0; j < k; j++) {
        json_t *x = json_array_get(a, j);
        if (!json_is_integer(x))
            return api_fail(e, 400, "invalid_type", name, "'%s[%zu]' must be a token id (an integer)", name, j);
        const json_int_t v = json_integer_value(x);
        if (v < 0 || v >= lim->vocab)
            return api_fail(e, 400, "invalid_token", name, "'%s[%zu]' = %lld is outside the model's vocabulary [0, %d)",
                            name, j, (long long)v, lim->vocab);
        (*out)[j] = (int32_t)v;
    }
    *n = (int)k;
    return 0;
}

static int text(json_t *s, int idx, const api_limits *lim, int32_t **out, int *n, api_error *e) {
    char name[40];
    if (idx >= 0) snprintf(name, sizeof name, "input[%d]", idx);
    else snprintf(name, sizeof name, "input");
    if (!json_string_length(s)) return api_fail(e, 400, "invalid_value", name, "'%s' is an empty string", name);
    if (!lim->tok)
        return api_fail(e, 400, "no_tokenizer", name, "this model has no tokenizer: send token ids");
    size_t k = 0;
    kvlm_error err;
    if (kvlm_tokenizer_encode_prompt(lim->tok, json_string_value(s), json_string_length(s), 1, out, &k, &err))
        return api_fail(e, 400, "invalid_prompt", name, "'%s': %s", name, err.msg);
    if (!k) return api_fail(e, 400, "invalid_value", name, "'%s' encodes to no token", name);
    if (k > (size_t)lim->n_ctx)
        return api_fail(e, 400, "context_length_exceeded", name,
                        "'%s' has %zu tokens; this model's context window is %d tokens", name, k, lim->n_ctx);
    for (size_t j = 0; j < k; j++)
        if ((*out)[j] < 0 || (*out)[j] >= lim->vocab)
            return api_fail(e, 400, "invalid_token", name, "'%s' encodes to token %d, outside the model's vocabulary", name,
                            (*out)[j]);
    *n = (int)k;
    return 0;
}

static int alloc_inputs(embed_request *rq, size_t n, api_error *e) {
    rq->ids = calloc(n, sizeof *rq->ids);
    rq->n_ids = calloc(n, sizeof *rq->n_ids);
    if (!rq->ids || !rq->n_ids) return api_fail(e, 500, NULL, NULL, "out of memory");
    rq->n_inputs = (int)n;
    return 0;
}

static int parse_input(json_t *in, const api_limits *lim, embed_request *rq, api_error *e) {
    if (!in || json_is_null(in)) return api_fail(e, 400, "missing_parameter", "input", "'input' is required");
    if (json_is_string(in)) {
        if (alloc_inputs(rq, 1, e)) return -1;
        return text(in, -1, lim, &rq->ids[0], &rq->n_ids[0], e);
    }
    if (!json_is_array(in))
        return api_fail(e, 400, "invalid_type", "input",
                        "'input' must be a string, a list of strings, a list of token ids or a list of such lists");
    const size_t n = json_array_size(in);
    if (!n) return api_fail(e, 400, "invalid_value", "input", "'input' is an empty list");
    json_t *first = json_array_get(in, 0);
    if (json_is_integer(first)) { /* one input of token ids */
        if (alloc_inputs(rq, 1, e)) return -1;
        return id_list(in, -1, lim, &rq->ids[0], &rq->n_ids[0], e);
    }
    if (n > EMBED_MAX_INPUTS)
        return api_fail(e, 400, "invalid_value", "input", "'input' has %zu items; at most %d are taken", n,
                        EMBED_MAX_INPUTS);
    if (alloc_inputs(rq, n, e)) return -1;
    for (size_t i = 0; i < n; i++) {
        json_t *x = json_array_get(in, i);
        int rc;
        if (json_is_string(x)) rc = text(x, (int)i, lim, &rq->ids[i], &rq->n_ids[i], e);
        else if (json_is_array(x)) rc = id_list(x, (int)i, lim, &rq->ids[i], &rq->n_ids[i], e);
        else rc = api_fail(e, 400, "invalid_type", "input", "'input[%zu]' must be a string or a list of token ids", i);
        if (rc) return rc;
    }
    return 0;
}

int api_parse_embeddings(const char *body, size_t len, const api_limits *lim, int width, embed_request *rq,
                         api_error *e) {
    static const char *const keys[] = {"model", "input", "encoding_format", "dimensions", "user", NULL};
    memset(rq, 0, sizeof *rq);
    json_t *root = api_parse_object(body, len, keys, lim, e);
    if (!root) return -1;
    int rc = 0;
    json_t *fmt = json_object_get(root, "encoding_format");
    if (fmt && !json_is_null(fmt)) {
        if (!json_is_string(fmt) || (strcmp(json_string_value(fmt), "float") && strcmp(json_string_value(fmt), "base64")))
            rc = api_fail(e, 400, "invalid_value", "encoding_format", "'encoding_format' must be \"float\" or \"base64\"");
        else rq->base64 = !strcmp(json_string_value(fmt), "base64");
    }
    json_t *dim = json_object_get(root, "dimensions");
    if (!rc && dim && !json_is_null(dim)) {
        if (!json_is_integer(dim) || json_integer_value(dim) < 1 || json_integer_value(dim) > width)
            rc = api_fail(e, 400, "invalid_value", "dimensions",
                          "'dimensions' must be a whole number from 1 to %d, this model's embedding width", width);
        else rq->dimensions = (int)json_integer_value(dim);
    }
    json_t *user = json_object_get(root, "user");
    if (!rc && user && !json_is_null(user) && !json_is_string(user))
        rc = api_fail(e, 400, "invalid_type", "user", "'user' must be a string");
    if (!rc) rc = parse_input(json_object_get(root, "input"), lim, rq, e);
    for (int i = 0; !rc && i < rq->n_inputs; i++) {
        rq->total_tokens += rq->n_ids[i];
        if (rq->total_tokens > EMBED_MAX_TOKENS)
            rc = api_fail(e, 400, "invalid_value", "input", "the inputs have more than %d tokens in all; send fewer",
                          EMBED_MAX_TOKENS);
    }
    json_decref(root);
    return rc;
}

char *embed_base64(const float *v, size_t n) {
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const size_t bytes = n * 4;
    char *out = malloc((bytes + 2) / 3 * 4 + 1);
    if (!out) return NULL;
    size_t o = 0;
    unsigned char grp[3];
    int g = 0;
    for (size_t i = 0; i < bytes; i++) {
        uint32_t u;
        memcpy(&u, &v[i / 4], 4);
        grp[g++] = (unsigned char)(u >> (8 * (i % 4))); /* little-endian on every host */
        if (g == 3 || i + 1 == bytes) {
            const uint32_t w = (uint32_t)grp[0] << 16 | (g > 1 ? (uint32_t)grp[1] << 8 : 0) | (g > 2 ? grp[2] : 0);
            out[o++] = tab[w >> 18 & 63];
            out[o++] = tab[w >> 12 & 63];
            out[o++] = g > 1 ? tab[w >> 6 & 63] : '=';
            out[o++] = g > 2 ? tab[w & 63] : '=';
            g = 0;
        }
    }
    out[o] = 0;
    return out;
}
