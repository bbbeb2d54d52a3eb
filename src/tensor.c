/* Tensor view helpers, dtype names and byte sizes (see tensor.h). */
#include "tensor.h"

#include <stdio.h>
#include <strings.h>

const int8_t iq4nl_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
const int8_t mxfp4_levels[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

const char *kvlm_dtype_name(kvlm_dtype t) {
    switch (t) {
    case KVLM_F32: return "f32";
    case KVLM_F16: return "f16";
    case KVLM_BF16: return "bf16";
    case KVLM_Q8_0: return "q8_0";
    case KVLM_Q4_0: return "q4_0";
    case KVLM_Q4_1: return "q4_1";
    case KVLM_Q5_0: return "q5_0";
    case KVLM_Q5_1: return "q5_1";
    case KVLM_Q2_K: return "q2_k";
    case KVLM_Q3_K: return "q3_k";
    case KVLM_Q4_K: return "q4_k";
    case KVLM_Q5_K: return "q5_k";
    case KVLM_Q6_K: return "q6_k";
    case KVLM_IQ4_NL: return "iq4_nl";
    case KVLM_MXFP4: return "mxfp4";
    case KVLM_IQ4_XS: return "iq4_xs";
    }
    return "?";
}

size_t kvlm_dtype_size(kvlm_dtype t) {
    switch (t) {
    case KVLM_F32: return 4;
    case KVLM_F16: case KVLM_BF16: return 2;
    default: return 0; /* blocked: no per-element size (or not a dtype) */
    }
}

size_t dtype_block_bytes(kvlm_dtype t) {
    switch (t) {
    case KVLM_Q8_0: return sizeof(blk_q8_0);
    case KVLM_Q4_0: return sizeof(blk_q4_0);
    case KVLM_Q4_1: return sizeof(blk_q4_1);
    case KVLM_Q5_0: return sizeof(blk_q5_0);
    case KVLM_Q5_1: return sizeof(blk_q5_1);
    case KVLM_Q2_K: return sizeof(blk_q2_k);
    case KVLM_Q3_K: return sizeof(blk_q3_k);
    case KVLM_Q4_K: return sizeof(blk_q4_k);
    case KVLM_Q5_K: return sizeof(blk_q5_k);
    case KVLM_Q6_K: return sizeof(blk_q6_k);
    case KVLM_IQ4_NL: return sizeof(blk_iq4_nl);
    case KVLM_MXFP4: return sizeof(blk_mxfp4);
    case KVLM_IQ4_XS: return sizeof(blk_iq4_xs);
    default: return kvlm_dtype_size(t);
    }
}

size_t kvlm_dtype_block(kvlm_dtype t, int *values) {
    const size_t bytes = dtype_is_valid(t) ? dtype_block_bytes(t) : 0;
    if (values) *values = bytes ? dtype_block_len(t) : 0;
    return bytes;
}

size_t dtype_row_bytes(kvlm_dtype t, int64_t n, int *ok) {
    const int64_t bl = dtype_block_len(t);
    const size_t bb = dtype_block_bytes(t);
    size_t bytes;
    int good = n >= 0 && bb > 0 && n % bl == 0 && !__builtin_mul_overflow((uint64_t)(n / bl), bb, &bytes) &&
               bytes <= (size_t)INT64_MAX;
    if (ok) *ok = good;
    return good ? bytes : 0;
}

int kvlm_dtype_parse(const char *s, kvlm_dtype *out, kvlm_error *err) {
    if (!s) return kvlm_error_set(err, KVLM_ERR_ARG, "dtype: no name given");
    if (!strcasecmp(s, "f32") || !strcasecmp(s, "float32")) *out = KVLM_F32;
    else if (!strcasecmp(s, "f16") || !strcasecmp(s, "float16")) *out = KVLM_F16;
    else if (!strcasecmp(s, "bf16") || !strcasecmp(s, "bfloat16")) *out = KVLM_BF16;
    else {
        for (int t = KVLM_Q8_0; t <= KVLM_IQ4_XS; t++)
            if (!strcasecmp(s, kvlm_dtype_name((kvlm_dtype)t))) {
                *out = (kvlm_dtype)t;
                return KVLM_OK;
            }
        return kvlm_error_set(err, KVLM_ERR_ARG,
                              "dtype '%.64s' is not one of f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, "
                              "q4_k, q5_k, q6_k, iq4_nl, mxfp4, iq4_xs (or float32, float16, bfloat16)", s);
    }
    return KVLM_OK;
}

int64_t tensor_numel(const tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

int tensor_nbytes_checked(const tensor *t, size_t *out) {
    if (t->ndim < 0 || t->ndim > TENSOR_MAX_DIMS) return -1;
    int ok = 1;
    /* a 0-d tensor is one value; only meaningful for per-element dtypes */
    size_t bytes = dtype_row_bytes(t->dtype, t->ndim ? t->shape[t->ndim - 1] : 1, &ok);
    if (!ok) return -1;
    for (int i = 0; i + 1 < t->ndim; i++)
        if (t->shape[i] < 0 || __builtin_mul_overflow(bytes, (size_t)t->shape[i], &bytes) ||
            bytes > (size_t)INT64_MAX)
            return -1;
    *out = bytes;
    return 0;
}

size_t tensor_nbytes(const tensor *t) {
    size_t n;
    return tensor_nbytes_checked(t, &n) ? 0 : n;
}

char *tensor_shape_str(const tensor *t, char *buf, size_t cap) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, cap - o, "[");
    for (int i = 0; i < t->ndim && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
    return buf;
}
