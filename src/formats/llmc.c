/* llm.c GPT-2 checkpoint reader (see llmc.h). */
#include "formats/llmc.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "error.h"

#define LLMC_HEADER_INTS 256

static int32_t rd32(const unsigned char *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

int llmc_sniff(const unsigned char *data, size_t size) {
    return size >= 4 && rd32(data) == LLMC_MAGIC;
}

static int check_field(const char *path, const char *field, int v, int lo, int hi, kvlm_error *err) {
    if (v < lo || v > hi)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: header field %s = %d is outside [%d, %d]", path, field, v, lo, hi);
    return KVLM_OK;
}

int llmc_parse_header(const char *path, const unsigned char *d, size_t size, llmc_header *h, kvlm_error *err) {
    if (size < LLMC_HEADER_INTS * 4)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: file is shorter than the %d-byte llm.c header", path,
                              LLMC_HEADER_INTS * 4);
    if (rd32(d) != LLMC_MAGIC)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: header field magic = %d, expected %d", path, rd32(d), LLMC_MAGIC);
    h->version = rd32(d + 4);
    h->max_t = rd32(d + 8);
    h->vocab = rd32(d + 12);
    h->n_layer = rd32(d + 16);
    h->n_head = rd32(d + 20);
    h->channels = rd32(d + 24);
    h->padded_vocab = rd32(d + 28);
    if (h->version != 3 && h->version != 5)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: header field version = %d, expected 3 (fp32) or 5 (bf16)", path,
                              h->version);
    int rc;
    if ((rc = check_field(path, "max_seq_len", h->max_t, 1, 1 << 20, err)) ||
        (rc = check_field(path, "vocab_size", h->vocab, 1, 1 << 22, err)) ||
        (rc = check_field(path, "num_layers", h->n_layer, 1, 1024, err)) ||
        (rc = check_field(path, "num_heads", h->n_head, 1, 1024, err)) ||
        (rc = check_field(path, "channels", h->channels, 1, 1 << 16, err)) ||
        (rc = check_field(path, "padded_vocab_size", h->padded_vocab, h->vocab, 1 << 22, err)))
        return rc;
    if (h->channels % h->n_head)
        return kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: channels = %d is not a multiple of num_heads = %d", path,
                              h->channels, h->n_head);
    return KVLM_OK;
}

int llmc_read_header(const char *path, llmc_header *h, kvlm_error *err) {
    unsigned char d[LLMC_HEADER_INTS * 4];
    FILE *f = fopen(path, "rb");
    if (!f) return kvlm_error_set(err, KVLM_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t n = fread(d, 1, sizeof d, f);
    int bad = ferror(f);
    fclose(f);
    if (bad) return kvlm_error_set(err, KVLM_ERR_IO, "%s: read error", path);
    return llmc_parse_header(path, d, n, h, err);
}

void llmc_header_config(const llmc_header *h, kvlm_config *c) {
    memset(c, 0, sizeof *c);
    strcpy(c->arch, "gpt2");
    c->n_layer = h->n_layer;
    c->n_head = c->n_kv_head = h->n_head;
    c->n_embd = h->channels;
    c->head_dim = h->channels / h->n_head;
    c->n_ff = 4 * h->channels;
    c->n_ctx = h->max_t;
    c->vocab_size = h->vocab;
    c->eos_id = h->vocab == 50257 ? 50256 : -1;
    c->norm_eps = 1e-5f;
    c->weight_dtype = h->version == 5 ? KVLM_BF16 : KVLM_F32;
}

typedef struct llmc_param {
    const char *name; /* "%d" is the layer index for per-layer tensors */
    int per_layer;
    int64_t rows, cols; /* cols == 0 for vectors */
} llmc_param;

int llmc_load(tensor_set *ts, const char *path, llmc_header *h, kvlm_error *err) {
    mapped_file f;
    int rc = tensor_set_open(ts, &f, path, err);
    if (rc) return rc;
    if ((rc = llmc_parse_header(path, f.data, f.size, h, err))) {
        mapped_file_close(&f);
        return rc;
    }
    const int64_t C = h->channels, L = h->n_layer;
    const llmc_param params[] = {
        {"wte.weight", 0, h->padded_vocab, C},  {"wpe.weight", 0, h->max_t, C},
        {"h.%d.ln_1.weight", 1, C, 0},          {"h.%d.ln_1.bias", 1, C, 0},
        {"h.%d.attn.c_attn.weight", 1, 3 * C, C}, {"h.%d.attn.c_attn.bias", 1, 3 * C, 0},
        {"h.%d.attn.c_proj.weight", 1, C, C},   {"h.%d.attn.c_proj.bias", 1, C, 0},
        {"h.%d.ln_2.weight", 1, C, 0},          {"h.%d.ln_2.bias", 1, C, 0},
        {"h.%d.mlp.c_fc.weight", 1, 4 * C, C},  {"h.%d.mlp.c_fc.bias", 1, 4 * C, 0},
        {"h.%d.mlp.c_proj.weight", 1, C, 4 * C}, {"h.%d.mlp.c_proj.bias", 1, C, 0},
        {"ln_f.weight", 0, C, 0},               {"ln_f.bias", 0, C, 0},
    };
    const size_t np = sizeof params / sizeof params[0];
    const kvlm_dtype dt = h->version == 5 ? KVLM_BF16 : KVLM_F32;
    const size_t es = kvlm_dtype_size(dt);
    /* Total bytes the header implies; all factors are bounded above. */
    uint64_t need = LLMC_HEADER_INTS * 4;
    for (size_t i = 0; i < np; i++)
        need += (uint64_t)(params[i].per_layer ? L : 1) * params[i].rows * (params[i].cols ? params[i].cols : 1) * es;
    if (f.size != need) {
        rc = kvlm_error_set(err, KVLM_ERR_FORMAT, "%s: file has %zu bytes but its header implies %llu (truncated or mismatched)",
                            path, f.size, (unsigned long long)need);
        mapped_file_close(&f);
        return rc;
    }
    int fi = tensor_set_add_file(ts, &f);
    if (fi < 0) {
        mapped_file_close(&f);
        return kvlm_error_set(err, KVLM_ERR_NOMEM, "%s: out of memory", path);
    }
    ts->layout = LAYOUT_OUT_IN;
    const mapped_file *mf = &ts->files[fi];
    const unsigned char *p = mf->data + LLMC_HEADER_INTS * 4;
    for (size_t i = 0; i < np; i++) {
        const llmc_param *pp = &params[i];
        int64_t per = pp->rows * (pp->cols ? pp->cols : 1);
        for (int64_t l = 0; l < (pp->per_layer ? L : 1); l++) {
            char name[96];
            snprintf(name, sizeof name, pp->name, (int)l);
            tensor t = {.dtype = dt, .ndim = pp->cols ? 2 : 1, .shape = {pp->rows, pp->cols}, .data = p};
            if (tensor_set_add(ts, name, mf->path, &t)) return kvlm_error_set(err, KVLM_ERR_NOMEM, "%s: out of memory", path);
            p += (size_t)per * es;
        }
    }
    return KVLM_OK;
}
