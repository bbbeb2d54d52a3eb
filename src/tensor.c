/* Tensor view helpers and dtype names (see tensor.h). */
#include "tensor.h"

#include <stdio.h>
#include <strings.h>

const char *kvlm_dtype_name(kvlm_dtype t) {
    switch (t) {
    case KVLM_F32: return "f32";
    case KVLM_F16: return "f16";
    case KVLM_BF16: return "bf16";
    }
    return "?";
}

size_t kvlm_dtype_size(kvlm_dtype t) { return t == KVLM_F32 ? 4 : 2; }

int kvlm_dtype_parse(const char *s, kvlm_dtype *out) {
    if (!s) return -1;
    if (!strcasecmp(s, "f32") || !strcasecmp(s, "float32")) *out = KVLM_F32;
    else if (!strcasecmp(s, "f16") || !strcasecmp(s, "float16")) *out = KVLM_F16;
    else if (!strcasecmp(s, "bf16") || !strcasecmp(s, "bfloat16")) *out = KVLM_BF16;
    else return -1;
    return 0;
}

int64_t tensor_numel(const tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

size_t tensor_nbytes(const tensor *t) {
    return (size_t)tensor_numel(t) * kvlm_dtype_size(t->dtype);
}

char *tensor_shape_str(const tensor *t, char *buf, size_t cap) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, cap - o, "[");
    for (int i = 0; i < t->ndim && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (o < cap) snprintf(buf + o, cap - o, "]");
    return buf;
}
