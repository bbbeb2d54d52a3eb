/*
 * GGUF reader (see gguf.h). A bounds-checked cursor walks the header,
 * metadata and tensor infos; every read states what it is reading so that
 * a short or inconsistent file is reported by field. Arrays grow as
 * entries are parsed (never sized from a count in the file alone), string
 * arrays are walked once to validate before their index is allocated, and
 * tensor spans are checked against the file, the alignment and each other
 * before any view is handed out.
 */
#include "formats/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

#define GGUF_MAGIC 0x46554747u /* "GGUF" read as a little-endian u32 */
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_KEY 65535      /* the specification's limit */
#define GGUF_MAX_NAME 255       /* tensor names (tensor_set_find's buffer) */
#define GGUF_MSG_KEY 256        /* room for a key inside a field description */
/* Smallest encodings, used to bound the counts by the file size. */
#define MIN_KV_BYTES 14     /* u64 key length, 1-byte key, u32 type, 1-byte value */
#define MIN_TENSOR_BYTES 33 /* u64 name length, 1-byte name, u32 n_dims, one u64 ne, u32 type, u64 offset */

typedef struct cur {
    const unsigned char *p;
    size_t off, size;
    const char *path;
    kvlm_error *err;
} cur;

static size_t left(const cur *c) { return c->size - c->off; }

/* Fails unless n more bytes exist; what names the field being read. */
static int need(cur *c, uint64_t n, const char *what) {
    if (n > left(c))
        return kvlm_error_set(c->err, KVLM_ERR_FORMAT, "%s: %s: needs %llu bytes at offset %zu but the file ends after %zu",
                              c->path, what, (unsigned long long)n, c->off, left(c));
    return KVLM_OK;
}

static uint64_t le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static int rd_u32(cur *c, uint32_t *v, const char *what) {
    int rc = need(c, 4, what);
    if (rc) return rc;
    *v = (uint32_t)le(c->p + c->off, 4);
    c->off += 4;
    return KVLM_OK;
}

static int rd_u64(cur *c, uint64_t *v, const char *what) {
    int rc = need(c, 8, what);
    if (rc) return rc;
    *v = le(c->p + c->off, 8);
    c->off += 8;
    return KVLM_OK;
}

static int rd_str(cur *c, gguf_str *s, const char *what) {
    uint64_t len;
    int rc = rd_u64(c, &len, what);
    if (rc) return rc;
    if (len > left(c))
        return kvlm_error_set(c->err, KVLM_ERR_FORMAT,
                              "%s: %s: string length %llu at offset %zu exceeds the %zu bytes left in the file", c->path,
                              what, (unsigned long long)len, c->off - 8, left(c));
    s->s = (const char *)c->p + c->off;
    s->len = (size_t)len;
    c->off += (size_t)len;
    return KVLM_OK;
}

static size_t scalar_size(gguf_type t) {
    static const unsigned char sz[GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return (unsigned)t < GGUF_TYPE_COUNT ? sz[t] : 0;
}

const char *gguf_type_name(gguf_type t) {
    static const char *names[GGUF_TYPE_COUNT] = {"u8",  "i8",     "u16",   "i16", "u32", "i32", "f32",
                                                 "bool", "string", "array", "u64", "i64", "f64"};
    return (unsigned)t < GGUF_TYPE_COUNT ? names[t] : "unknown";
}

const char *gguf_ggml_type_name(uint32_t t) {
    static const char *names[] = {"F32",     "F16",    "Q4_0",    "Q4_1",  "Q4_2",   "Q4_3",  "Q5_0",  "Q5_1",
                                  "Q8_0",    "Q8_1",   "Q2_K",    "Q3_K",  "Q4_K",   "Q5_K",  "Q6_K",  "Q8_K",
                                  "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
                                  "I8",      "I16",    "I32",     "I64",   "F64",    "IQ1_M", "BF16",  "Q4_0_4_4",
                                  "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0", NULL,    NULL,    NULL,    "MXFP4"};
    return t < sizeof names / sizeof *names ? names[t] : NULL;
}

int gguf_type_is_int(gguf_type t) {
    return t <= GGUF_TYPE_I32 || t == GGUF_TYPE_U64 || t == GGUF_TYPE_I64;
}

static int has_nul(gguf_str s) { return memchr(s.s, 0, s.len) != NULL; }

/* ---------------------------------------------------------------- metadata */

/* Reads the value of kv (its type already read) and fills kv. */
static int parse_value(cur *c, gguf_kv *kv, uint32_t type) {
    const char *key = kv->key;
    char what[GGUF_MSG_KEY + 64];
    if (type >= GGUF_TYPE_COUNT)
        return kvlm_error_set(c->err, KVLM_ERR_FORMAT, "%s: metadata '%s': unknown value type %u", c->path, key, type);
    kv->type = kv->elem = (gguf_type)type;
    kv->n = 1;
    int rc;
    if (type == GGUF_TYPE_ARRAY) {
        uint32_t et;
        snprintf(what, sizeof what, "metadata '%s': array element type", key);
        if ((rc = rd_u32(c, &et, what))) return rc;
        if (et == GGUF_TYPE_ARRAY)
            return kvlm_error_set(c->err, KVLM_ERR_FORMAT, "%s: metadata '%s': nested arrays (array of array) are not supported",
                                  c->path, key);
        if (et >= GGUF_TYPE_COUNT)
            return kvlm_error_set(c->err, KVLM_ERR_FORMAT, "%s: metadata '%s': unknown array element type %u", c->path, key, et);
        kv->elem = (gguf_type)et;
        snprintf(what, sizeof what, "metadata '%s': array length", key);
        if ((rc = rd_u64(c, &kv->n, what))) return rc;
    }
    kv->data = c->p + c->off;
    if (kv->elem == GGUF_TYPE_STRING) {
        /* each string takes at least its 8-byte length */
        if (kv->n > left(c) / 8)
            return kvlm_error_set(c->err, KVLM_ERR_FORMAT,
                                  "%s: metadata '%s': array length %llu of strings exceeds what the %zu bytes left can hold",
                                  c->path, key, (unsigned long long)kv->n, left(c));
        const size_t start = c->off;
        gguf_str s;
        for (uint64_t i = 0; i < kv->n; i++) {
            snprintf(what, sizeof what, "metadata '%s': string %llu", key, (unsigned long long)i);
            if ((rc = rd_str(c, &s, what))) return rc;
        }
        kv->strs = malloc((size_t)(kv->n ? kv->n : 1) * sizeof *kv->strs);
        if (!kv->strs) return kvlm_error_set(c->err, KVLM_ERR_NOMEM, "%s: metadata '%s': out of memory", c->path, key);
        c->off = start;
        for (uint64_t i = 0; i < kv->n; i++) rd_str(c, &kv->strs[i], "string"); /* validated above */
        if (kv->type == GGUF_TYPE_STRING) {
            kv->str = strndup(kv->strs[0].s, kv->strs[0].len);
            if (!kv->str) return kvlm_error_set(c->err, KVLM_ERR_NOMEM, "%s: metadata '%s': out of memory", c->path, key);
        }
        return KVLM_OK;
    }
    const size_t es = scalar_size(kv->elem);
    if (kv->n > left(c) / es)
        return kvlm_error_set(c->err, KVLM_ERR_FORMAT,
                              "%s: metadata '%s': %s of %llu x %s needs more than the %zu bytes left in the file", c->path,
                              key, kv->type == GGUF_TYPE_ARRAY ? "array length" : "value", (unsigned long long)kv->n,
                              gguf_type_name(kv->elem), left(c));
    if (kv->elem == GGUF_TYPE_BOOL)
        for (uint64_t i = 0; i < kv->n; i++)
            if (kv->data[i] > 1)
                return kvlm_error_set(c->err, KVLM_ERR_FORMAT, "%s: metadata '%s': bool value %u is neither 0 nor 1",
                                      c->path, key, kv->data[i]);
    c->off += (size_t)(kv->n * es);
    return KVLM_OK;
}

static int parse_kv(cur *c, gguf_kv *kv, uint64_t idx) {
    char what[64];
    snprintf(what, sizeof what, "metadata key #%llu", (unsigned long long)idx);
    gguf_str k;
    int rc = rd_str(c, &k, what);
    if (rc) return rc;
    if (k.len == 0 || k.len > GGUF_MAX_KEY || has_nul(k))
        return kvlm_error_set(c->err, KVLM_ERR_FORMAT, "%s: %s: key must be 1..%d bytes without NUL (length %zu)", c->path,
                              what, GGUF_MAX_KEY, k.len);
    kv->key = strndup(k.s, k.len);
    if (!kv->key) return kvlm_error_set(c->err, KVLM_ERR_NOMEM, "%s: out of memory", c->path);
    char twhat[GGUF_MSG_KEY + 64];
    snprintf(twhat, sizeof twhat, "metadata '%s': value type", kv->key);
    uint32_t type;
    if ((rc = rd_u32(c, &type, twhat))) return rc;
    return parse_value(c, kv, type);
}

static int kv_cmp(const void *a, const void *b) {
    return strcmp(((const gguf_kv *)a)->key, ((const gguf_kv *)b)->key);
}

static int parse_metadata(cur *c, gguf_meta *m, uint64_t n_kv) {
    size_t cap = 0;
    for (uint64_t i = 0; i < n_kv; i++) {
        if (m->n_kv == cap) {
            cap = cap ? cap * 2 : 32;
            gguf_kv *nk = realloc(m->kv, cap * sizeof *nk);
            if (!nk) return kvlm_error_set(c->err, KVLM_ERR_NOMEM, "%s: out of memory", c->path);
            m->kv = nk;
        }
        memset(&m->kv[m->n_kv], 0, sizeof *m->kv);
        m->n_kv++; /* counted first so a failure frees the partial entry */
        int rc = parse_kv(c, &m->kv[m->n_kv - 1], i);
        if (rc) return rc;
    }
    if (m->n_kv) qsort(m->kv, m->n_kv, sizeof *m->kv, kv_cmp);
    for (size_t i = 1; i < m->n_kv; i++)
        if (!strcmp(m->kv[i - 1].key, m->kv[i].key))
            return kvlm_error_set(c->err, KVLM_ERR_FORMAT, "%s: metadata '%s': duplicate key", c->path, m->kv[i].key);
    return KVLM_OK;
}

/* ---------------------------------------------------------------- tensors */

typedef struct tinfo {
    char *name;
    tensor t;
    uint64_t offset, nbytes;
} tinfo;

#define GGUF_SUPPORTED_TYPES "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4"

static int map_type(cur *c, const char *name, uint32_t type, kvlm_dtype *dt) {
    switch (type) {
    case GGML_TYPE_F32: *dt = KVLM_F32; return KVLM_OK;
    case GGML_TYPE_F16: *dt = KVLM_F16; return KVLM_OK;
    case GGML_TYPE_BF16: *dt = KVLM_BF16; return KVLM_OK;
    case GGML_TYPE_Q8_0: *dt = KVLM_Q8_0; return KVLM_OK;
    case GGML_TYPE_Q4_0: *dt = KVLM_Q4_0; return KVLM_OK;
    case GGML_TYPE_Q4_1: *dt = KVLM_Q4_1; return KVLM_OK;
    case GGML_TYPE_Q5_0: *dt = KVLM_Q5_0; return KVLM_OK;
    case GGML_TYPE_Q5_1: *dt = KVLM_Q5_1; return KVLM_OK;
    case GGML_TYPE_Q2_K: *dt = KVLM_Q2_K; return KVLM_OK;
    case GGML_TYPE_Q3_K: *dt = KVLM_Q3_K; return KVLM_OK;
    case GGML_TYPE_Q4_K: *dt = KVLM_Q4_K; return KVLM_OK;
    case GGML_TYPE_Q5_K: *dt = KVLM_Q5_K; return KVLM_OK;
    case GGML_TYPE_Q6_K: *dt = KVLM_Q6_K; return KVLM_OK;
    case GGML_TYPE_IQ4_NL: *dt = KVLM_IQ4_NL; return KVLM_OK;
    case GGML_TYPE_IQ4_XS: *dt = KVLM_IQ4_XS; return KVLM_OK;
    case GGML_TYPE_MXFP4: *dt = KVLM_MXFP4; return KVLM_OK;
    }
    const char *tn = gguf_ggml_type_name(type);
    if (tn)
        return kvlm_error_set(c->err, KVLM_ERR_UNSUPPORTED,
                              "%s: tensor '%s': type %s (%u) is not supported (" GGUF_SUPPORTED_TYPES ")", c->path, name,
                              tn, type);
    return kvlm_error_set(c->err, KVLM_ERR_UNSUPPORTED,
                          "%s: tensor '%s': unknown type %u (supported: " GGUF_SUPPORTED_TYPES ")", c->path, name, type);
}

static int parse_tensor_info(cur *c, tinfo *ti, uint64_t idx) {
    char what[GGUF_MAX_NAME + 64];
    snprintf(what, sizeof what, "tensor #%llu name", (unsigned long long)idx);
    gguf_str s;
    int rc = rd_str(c, &s, what);
    if (rc) return rc;
    if (s.len == 0 || s.len > GGUF_MAX_NAME || has_nul(s))
        return kvlm_error_set(c->err, KVLM_ERR_FORMAT, "%s: %s: name must be 1..%d bytes without NUL (length %zu)", c->path,
                              what, GGUF_MAX_NAME, s.len);
    ti->name = strndup(s.s, s.len);
    if (!ti->name) return kvlm_error_set(c->err, KVLM_ERR_NOMEM, "%s: out of memory", c->path);
    const char *nm = ti->name;
    uint32_t nd;
    snprintf(what, sizeof what, "tensor '%s': n_dims", nm);
    if ((rc = rd_u32(c, &nd, what))) return rc;
    if (nd < 1 || nd > TENSOR_MAX_DIMS)
        return kvlm_error_set(c->err, KVLM_ERR_FORMAT, "%s: tensor '%s': n_dims %u is not in 1..%d", c->path, nm, nd,
                              TENSOR_MAX_DIMS);
    ti->t.ndim = (int)nd;
    uint64_t numel = 1;
    for (uint32_t i = 0; i < nd; i++) {
        uint64_t ne;
        snprintf(what, sizeof what, "tensor '%s': ne[%u]", nm, i);
        if ((rc = rd_u64(c, &ne, what))) return rc;
        if (ne == 0 || ne > (uint64_t)INT64_MAX)
            return kvlm_error_set(c->err, KVLM_ERR_FORMAT, "%s: tensor '%s': ne[%u] = %llu must be positive", c->path, nm, i,
                                  (unsigned long long)ne);
        if (__builtin_mul_overflow(numel, ne, &numel) || numel > (uint64_t)INT64_MAX)
            return kvlm_error_set(c->err, KVLM_ERR_FORMAT, "%s: tensor '%s': element count overflows at ne[%u]", c->path, nm,
                                  i);
        ti->t.shape[nd - 1 - i] = (int64_t)ne; /* ne[0] (contiguous) is the last view dimension */
    }
    uint32_t type;
    snprintf(what, sizeof what, "tensor '%s': type", nm);
    if ((rc = rd_u32(c, &type, what))) return rc;
    snprintf(what, sizeof what, "tensor '%s': offset", nm);
    if ((rc = rd_u64(c, &ti->offset, what))) return rc;
    if ((rc = map_type(c, nm, type, &ti->t.dtype))) return rc;
    const int64_t row = ti->t.shape[nd - 1];
    if (row % dtype_block_len(ti->t.dtype))
        return kvlm_error_set(c->err, KVLM_ERR_FORMAT, "%s: tensor '%s': ne[0] = %lld is not a multiple of the %s block of %d",
                              c->path, nm, (long long)row, kvlm_dtype_name(ti->t.dtype), dtype_block_len(ti->t.dtype));
    size_t nb;
    if (tensor_nbytes_checked(&ti->t, &nb))
        return kvlm_error_set(c->err, KVLM_ERR_FORMAT, "%s: tensor '%s': byte size overflows", c->path, nm);
    ti->nbytes = nb;
    return KVLM_OK;
}

static int name_cmp(const void *a, const void *b) {
    return strcmp((*(const tinfo *const *)a)->name, (*(const tinfo *const *)b)->name);
}

static int off_cmp(const void *a, const void *b) {
    const tinfo *x = *(const tinfo *const *)a, *y = *(const tinfo *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* An MXFP4 tensor's scale bytes (the first of each 17-byte block) are
 * E8M0 exponents; 0xFF is NaN, which no weight can be. Notes the smallest
 * (tensor.e8m0_min, for the decode kernel's integer form of the scales). */
static int check_mxfp4(cur *c, const gguf_meta *m, tinfo *ti) {
    const unsigned char *p = c->p + m->data_offset + ti->offset;
    const uint64_t nblocks = ti->nbytes / sizeof(blk_mxfp4);
    unsigned char least = 0xFF;
    for (uint64_t b = 0; b < nblocks; b++) {
        const unsigned char e = p[b * sizeof(blk_mxfp4)];
        if (e == 0xFF)
            return kvlm_error_set(c->err, KVLM_ERR_FORMAT,
                                  "%s: tensor '%s': MXFP4 block %llu has scale byte 0xFF (E8M0 NaN); valid scales "
                                  "are 0x00..0xFE",
                                  c->path, ti->name, (unsigned long long)b);
        if (e < least) least = e;
    }
    ti->t.e8m0_min = nblocks ? least : 0;
    return KVLM_OK;
}

/* Offsets aligned, data inside the file, no duplicates, no overlaps. */
static int check_spans(cur *c, const gguf_meta *m, tinfo *ti, size_t n) {
    const uint64_t data_size = c->size - m->data_offset;
    for (size_t i = 0; i < n; i++) {
        if (ti[i].offset % m->alignment)
            return kvlm_error_set(c->err, KVLM_ERR_FORMAT,
                                  "%s: tensor '%s': offset %llu is not a multiple of general.alignment %u", c->path,
                                  ti[i].name, (unsigned long long)ti[i].offset, m->alignment);
        if (ti[i].offset > data_size || ti[i].nbytes > data_size - ti[i].offset)
            return kvlm_error_set(c->err, KVLM_ERR_FORMAT,
                                  "%s: tensor '%s': data [%llu, +%llu) at offset lies beyond the end of the file "
                             "(data section of %llu bytes at file offset %llu)",
                             c->path, ti[i].name, (unsigned long long)ti[i].offset, (unsigned long long)ti[i].nbytes,
                             (unsigned long long)data_size, (unsigned long long)m->data_offset);
        if ((m->data_offset + ti[i].offset) % dtype_align(ti[i].t.dtype))
            return kvlm_error_set(c->err, KVLM_ERR_FORMAT, "%s: tensor '%s': offset is not aligned to its %zu-byte values",
                                  c->path, ti[i].name, dtype_align(ti[i].t.dtype));
        int rc = ti[i].t.dtype == KVLM_MXFP4 ? check_mxfp4(c, m, &ti[i]) : KVLM_OK;
        if (rc) return rc;
    }
    if (n < 2) return KVLM_OK;
    tinfo **ord = malloc(n * sizeof *ord);
    if (!ord) return kvlm_error_set(c->err, KVLM_ERR_NOMEM, "%s: out of memory", c->path);
    for (size_t i = 0; i < n; i++) ord[i] = &ti[i];
    int rc = KVLM_OK;
    qsort(ord, n, sizeof *ord, name_cmp);
    for (size_t i = 1; i < n && !rc; i++)
        if (!strcmp(ord[i - 1]->name, ord[i]->name))
            rc = kvlm_error_set(c->err, KVLM_ERR_FORMAT, "%s: tensor '%s': duplicate tensor name", c->path, ord[i]->name);
    if (!rc) {
        /* every tensor is non-empty; compare with the furthest-reaching one before it */
        qsort(ord, n, sizeof *ord, off_cmp);
        const tinfo *reach = ord[0];
        for (size_t i = 1; i < n && !rc; i++) {
            if (ord[i]->offset < reach->offset + reach->nbytes)
                rc = kvlm_error_set(c->err, KVLM_ERR_FORMAT, "%s: tensors '%s' and '%s' overlap (offsets %llu and %llu)",
                                    c->path, reach->name, ord[i]->name, (unsigned long long)reach->offset,
                                    (unsigned long long)ord[i]->offset);
            if (ord[i]->offset + ord[i]->nbytes > reach->offset + reach->nbytes) reach = ord[i];
        }
    }
    free(ord);
    return rc;
}

/* general.alignment: an integer power of two (absent: 32). */
static int read_alignment(cur *c, gguf_meta *m) {
    m->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *kv = gguf_meta_find(m, "general.alignment");
    if (!kv) return KVLM_OK;
    if (kv->type == GGUF_TYPE_ARRAY || !gguf_type_is_int(kv->elem))
        return kvlm_error_set(c->err, KVLM_ERR_FORMAT, "%s: general.alignment: must be an integer (u32), not %s", c->path,
                              gguf_type_name(kv->type));
    int64_t a = gguf_kv_int(kv, 0);
    if (a <= 0 || a > (1ll << 30) || (a & (a - 1)))
        return kvlm_error_set(c->err, KVLM_ERR_FORMAT, "%s: general.alignment: %lld is not a power of two in 1..2^30",
                              c->path, (long long)a);
    m->alignment = (uint32_t)a;
    return KVLM_OK;
}

static int parse_header(cur *c, gguf_meta *m, uint64_t *n_tensors, uint64_t *n_kv) {
    uint32_t magic;
    int rc = need(c, 4, "magic");
    if (rc) return rc;
    magic = (uint32_t)le(c->p, 4);
    if (magic != GGUF_MAGIC)
        return kvlm_error_set(c->err, KVLM_ERR_FORMAT, "%s: magic: expected \"GGUF\", found bytes %02x %02x %02x %02x", c->path,
                              c->p[0], c->p[1], c->p[2], c->p[3]);
    c->off = 4;
    if ((rc = rd_u32(c, &m->version, "version"))) return rc;
    if (m->version == 0x03000000u || m->version == 0x02000000u)
        return kvlm_error_set(c->err, KVLM_ERR_UNSUPPORTED, "%s: version: big-endian GGUF files are not supported", c->path);
    if (m->version != 2 && m->version != 3)
        return kvlm_error_set(c->err, KVLM_ERR_UNSUPPORTED, "%s: version: %u is not supported (2 or 3)", c->path, m->version);
    if ((rc = rd_u64(c, n_tensors, "tensor_count")) || (rc = rd_u64(c, n_kv, "metadata_kv_count"))) return rc;
    if (*n_kv > left(c) / MIN_KV_BYTES)
        return kvlm_error_set(c->err, KVLM_ERR_FORMAT,
                              "%s: metadata_kv_count %llu cannot fit in the %zu bytes after the header (%d bytes each at least)",
                              c->path, (unsigned long long)*n_kv, left(c), MIN_KV_BYTES);
    if (*n_tensors > (left(c) - *n_kv * MIN_KV_BYTES) / MIN_TENSOR_BYTES)
        return kvlm_error_set(c->err, KVLM_ERR_FORMAT,
                              "%s: tensor_count %llu cannot fit in the %zu bytes after the header (%d bytes each at least)",
                              c->path, (unsigned long long)*n_tensors, left(c), MIN_TENSOR_BYTES);
    return KVLM_OK;
}

static int parse_file(cur *c, tensor_set *ts, gguf_meta *m) {
    uint64_t nt = 0, nkv = 0;
    int rc = parse_header(c, m, &nt, &nkv);
    if (rc || (rc = parse_metadata(c, m, nkv)) || (rc = read_alignment(c, m))) return rc;
    m->n_tensors = nt;
    tinfo *ti = NULL;
    size_t n = 0, cap = 0;
    for (uint64_t i = 0; i < nt && !rc; i++) {
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            tinfo *nti = realloc(ti, cap * sizeof *nti);
            if (!nti) {
                rc = kvlm_error_set(c->err, KVLM_ERR_NOMEM, "%s: out of memory", c->path);
                break;
            }
            ti = nti;
        }
        memset(&ti[n], 0, sizeof *ti);
        rc = parse_tensor_info(c, &ti[n++], i);
    }
    if (!rc) {
        /* the data section starts at the next multiple of the alignment */
        uint64_t pad = (m->alignment - c->off % m->alignment) % m->alignment;
        if (nt > 0 && pad > left(c))
            rc = kvlm_error_set(c->err, KVLM_ERR_FORMAT,
                                "%s: tensor data: the file ends inside the alignment padding after the tensor infos", c->path);
        m->data_offset = nt > 0 ? c->off + pad : c->off;
    }
    if (!rc) rc = check_spans(c, m, ti, n);
    for (size_t i = 0; i < n && !rc; i++) {
        ti[i].t.data = c->p + m->data_offset + ti[i].offset;
        if (tensor_set_add(ts, ti[i].name, ts->files[ts->n_files - 1].path, &ti[i].t))
            rc = kvlm_error_set(c->err, KVLM_ERR_NOMEM, "%s: out of memory", c->path);
    }
    for (size_t i = 0; i < n; i++) free(ti[i].name);
    free(ti);
    return rc;
}

int gguf_load(tensor_set *ts, gguf_meta *meta, const char *path, kvlm_error *err) {
    memset(meta, 0, sizeof *meta);
    mapped_file f;
    int rc = tensor_set_open(ts, &f, path, err);
    if (rc) return rc;
    int fi = tensor_set_add_file(ts, &f);
    if (fi < 0) {
        mapped_file_close(&f);
        return kvlm_error_set(err, KVLM_ERR_NOMEM, "%s: out of memory", path);
    }
    ts->layout = LAYOUT_OUT_IN;
    meta->path = strdup(path);
    if (!meta->path) return kvlm_error_set(err, KVLM_ERR_NOMEM, "%s: out of memory", path);
    cur c = {.p = ts->files[fi].data, .off = 0, .size = ts->files[fi].size, .path = path, .err = err};
    rc = parse_file(&c, ts, meta);
    if (rc) gguf_meta_free(meta);
    return rc;
}

void gguf_meta_free(gguf_meta *meta) {
    for (size_t i = 0; i < meta->n_kv; i++) {
        free(meta->kv[i].key);
        free(meta->kv[i].str);
        free(meta->kv[i].strs);
    }
    free(meta->kv);
    free(meta->path);
    memset(meta, 0, sizeof *meta);
}

/* ---------------------------------------------------------------- lookups */

const gguf_kv *gguf_meta_find(const gguf_meta *m, const char *key) {
    size_t lo = 0, hi = m->n_kv;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(m->kv[mid].key, key);
        if (!c) return &m->kv[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

int64_t gguf_kv_int(const gguf_kv *kv, uint64_t i) {
    const unsigned char *p = kv->data + i * scalar_size(kv->elem);
    switch (kv->elem) {
    case GGUF_TYPE_U8: case GGUF_TYPE_BOOL: return p[0];
    case GGUF_TYPE_I8: return (int8_t)p[0];
    case GGUF_TYPE_U16: return (uint16_t)le(p, 2);
    case GGUF_TYPE_I16: return (int16_t)(uint16_t)le(p, 2);
    case GGUF_TYPE_U32: return (uint32_t)le(p, 4);
    case GGUF_TYPE_I32: return (int32_t)(uint32_t)le(p, 4);
    case GGUF_TYPE_U64: { uint64_t v = le(p, 8); return v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v; }
    case GGUF_TYPE_I64: return (int64_t)le(p, 8);
    default: return 0;
    }
}

double gguf_kv_float(const gguf_kv *kv, uint64_t i) {
    const unsigned char *p = kv->data + i * scalar_size(kv->elem);
    if (kv->elem == GGUF_TYPE_F32) {
        uint32_t b = (uint32_t)le(p, 4);
        float f;
        memcpy(&f, &b, 4);
        return f;
    }
    if (kv->elem == GGUF_TYPE_F64) {
        uint64_t b = le(p, 8);
        double d;
        memcpy(&d, &b, 8);
        return d;
    }
    if (kv->elem == GGUF_TYPE_U64) return (double)le(p, 8);
    return (double)gguf_kv_int(kv, i);
}

gguf_str gguf_kv_str(const gguf_kv *kv, uint64_t i) {
    if (kv->elem != GGUF_TYPE_STRING || i >= kv->n) return (gguf_str){"", 0};
    return kv->strs[i];
}

static int missing(const gguf_meta *m, const char *key, kvlm_error *err) {
    return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: metadata '%s' is missing", m->path, key);
}

static int wrong_type(const gguf_meta *m, const gguf_kv *kv, const char *want, kvlm_error *err) {
    if (kv->type == GGUF_TYPE_ARRAY)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: metadata '%s': expected %s, found array of %s", m->path, kv->key,
                              want, gguf_type_name(kv->elem));
    return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: metadata '%s': expected %s, found %s", m->path, kv->key, want,
                          gguf_type_name(kv->type));
}

static int get_int(const gguf_meta *m, const gguf_kv *kv, int64_t lo, int64_t hi, int64_t *out, kvlm_error *err) {
    if (kv->type == GGUF_TYPE_ARRAY || !gguf_type_is_int(kv->type)) return wrong_type(m, kv, "an integer", err);
    int64_t v = gguf_kv_int(kv, 0);
    if (v < lo || v > hi || (kv->type == GGUF_TYPE_U64 && le(kv->data, 8) > (uint64_t)INT64_MAX))
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: metadata '%s': %lld is outside [%lld, %lld]", m->path, kv->key,
                              (long long)v, (long long)lo, (long long)hi);
    *out = v;
    return KVLM_OK;
}

int gguf_get_int(const gguf_meta *m, const char *key, int64_t lo, int64_t hi, int64_t *out, kvlm_error *err) {
    const gguf_kv *kv = gguf_meta_find(m, key);
    return kv ? get_int(m, kv, lo, hi, out, err) : missing(m, key, err);
}

int gguf_get_int_or(const gguf_meta *m, const char *key, int64_t lo, int64_t hi, int64_t def, int64_t *out,
                    kvlm_error *err) {
    const gguf_kv *kv = gguf_meta_find(m, key);
    if (!kv) {
        *out = def;
        return KVLM_OK;
    }
    return get_int(m, kv, lo, hi, out, err);
}

static int get_float(const gguf_meta *m, const gguf_kv *kv, double *out, kvlm_error *err) {
    if (kv->type == GGUF_TYPE_ARRAY || !(kv->type == GGUF_TYPE_F32 || kv->type == GGUF_TYPE_F64 || gguf_type_is_int(kv->type)))
        return wrong_type(m, kv, "a number", err);
    *out = gguf_kv_float(kv, 0);
    return KVLM_OK;
}

int gguf_get_float(const gguf_meta *m, const char *key, double *out, kvlm_error *err) {
    const gguf_kv *kv = gguf_meta_find(m, key);
    return kv ? get_float(m, kv, out, err) : missing(m, key, err);
}

int gguf_get_float_or(const gguf_meta *m, const char *key, double def, double *out, kvlm_error *err) {
    const gguf_kv *kv = gguf_meta_find(m, key);
    if (!kv) {
        *out = def;
        return KVLM_OK;
    }
    return get_float(m, kv, out, err);
}

int gguf_get_bool_or(const gguf_meta *m, const char *key, int def, int *out, kvlm_error *err) {
    const gguf_kv *kv = gguf_meta_find(m, key);
    if (!kv) {
        *out = def;
        return KVLM_OK;
    }
    if (kv->type != GGUF_TYPE_BOOL) return wrong_type(m, kv, "bool", err);
    *out = kv->data[0];
    return KVLM_OK;
}

int gguf_get_string(const gguf_meta *m, const char *key, const char **out, kvlm_error *err) {
    const gguf_kv *kv = gguf_meta_find(m, key);
    if (!kv) return missing(m, key, err);
    if (kv->type != GGUF_TYPE_STRING) return wrong_type(m, kv, "string", err);
    *out = kv->str;
    return KVLM_OK;
}

int gguf_get_array(const gguf_meta *m, const char *key, gguf_type elem, const gguf_kv **out, kvlm_error *err) {
    const gguf_kv *kv = gguf_meta_find(m, key);
    if (!kv) return missing(m, key, err);
    if (kv->type != GGUF_TYPE_ARRAY || (elem != GGUF_TYPE_COUNT && kv->elem != elem)) {
        char want[32];
        snprintf(want, sizeof want, "array of %s", elem == GGUF_TYPE_COUNT ? "any" : gguf_type_name(elem));
        return wrong_type(m, kv, want, err);
    }
    *out = kv;
    return KVLM_OK;
}
