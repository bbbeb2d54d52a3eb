/*
 * KV cache sizing maths, presets and capacity planning (see app/kv_sizing.h).
 *
 * The presets carry the shapes from each model's published config.json and
 * the published parameter counts; they are data for sizing, not models kvlm
 * can run. Formatting lives here too so that every command prints sizes
 * the same way (binary units, at most two decimals).
 */
#include "app/kv_sizing.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---------------------------------------------------------------- dtypes */

int kvs_numbers_bytes(kvlm_dtype t, uint64_t n, uint64_t *out) {
    int values = 0;
    const size_t block = kvlm_dtype_block(t, &values);
    if (!block || values <= 0) return -1;
    const uint64_t bl = (uint64_t)values;
    return kvs_mul(n / bl + (n % bl != 0), block, out);
}

double kvs_dtype_bytes(kvlm_dtype t) {
    int values = 0;
    const size_t block = kvlm_dtype_block(t, &values);
    return block && values > 0 ? (double)block / values : 0;
}

/* --------------------------------------------------------------- presets */

static const kvs_model presets[] = {
    /* name, label, arch, layers, query heads, KV heads, head dim, max context, params,
     * window, window layers, idle expert params */
    {"gpt2-124m", "GPT-2 124M", "gpt2", 12, 12, 12, 64, 1024, 124439808ull, 0, 0, 0},
    {"llama-3.1-8b", "Llama 3.1 8B", "llama", 32, 32, 8, 128, 131072, 8030261248ull, 0, 0, 0},
    {"mistral-7b", "Mistral 7B", "mistral", 32, 32, 8, 128, 32768, 7241732096ull, 0, 0, 0},
    {"qwen2.5-7b", "Qwen2.5 7B", "qwen2", 28, 28, 4, 128, 131072, 7615616512ull, 0, 0, 0},
    {"llama-2-70b", "Llama 2 70B", "llama", 80, 64, 8, 128, 4096, 68976648192ull, 0, 0, 0},
    {"llama-2-7b", "Llama 2 7B", "llama", 32, 32, 32, 128, 4096, 6738415616ull, 0, 0, 0},
    /* 128 experts of 768, 8 per token: 48 x 120 x 3 x 2048 x 768 idle */
    {"qwen3-30b-a3b", "Qwen3 30B-A3B", "qwen3moe", 48, 32, 4, 128, 40960, 30532122624ull, 0, 0, 27179089920ull},
    /* five window layers (512) to one global: 22 and 4 of 26 */
    {"gemma-3-1b", "Gemma 3 1B", "gemma3", 26, 4, 1, 256, 32768, 999885952ull, 512, 22, 0},
};
#define N_PRESETS (sizeof presets / sizeof presets[0])

const kvs_model *kvs_presets(size_t *n) {
    *n = N_PRESETS;
    return presets;
}

const kvs_model *kvs_preset_find(const char *name) {
    for (size_t i = 0; name && i < N_PRESETS; i++)
        if (!strcasecmp(name, presets[i].name)) return &presets[i];
    return NULL;
}

const char *kvs_preset_names(void) {
    return "gpt2-124m, llama-3.1-8b, mistral-7b, qwen2.5-7b, llama-2-70b, llama-2-7b, qwen3-30b-a3b, gemma-3-1b";
}

void kvs_model_from_config(kvs_model *m, const kvlm_config *c, const int *windows, const char *path) {
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", path);
    snprintf(m->label, sizeof m->label, "%s", path);
    snprintf(m->arch, sizeof m->arch, "%s", c->arch);
    m->n_layer = c->n_layer;
    m->n_head = c->n_head;
    m->n_kv_head = c->n_kv_head;
    m->head_dim = c->head_dim;
    m->max_ctx = c->n_ctx;
    if (windows) { /* per layer, from the model's files */
        for (int l = 0; l < c->n_layer; l++)
            if (windows[l] > 0 && windows[l] < c->n_ctx) {
                m->window = windows[l] > m->window ? windows[l] : m->window;
                m->window_layers++;
            }
    } else if (c->sliding_window > 0 && c->sliding_window < c->n_ctx) { /* one window on every layer */
        m->window = c->sliding_window;
        m->window_layers = c->n_layer;
    }
    m->idle_expert_params = (uint64_t)c->n_layer * (uint64_t)(c->n_expert - c->n_expert_used) * 3u *
                            (uint64_t)c->n_embd * (uint64_t)c->n_ff_expert;
}

/* ----------------------------------------------------------------- maths */

int kvs_mul(uint64_t a, uint64_t b, uint64_t *out) { return __builtin_mul_overflow(a, b, out) ? -1 : 0; }

/* m's shape as the library's config, with heads KV heads. */
static int per_token(const kvs_model *m, int heads, kvlm_dtype t, uint64_t *out) {
    kvlm_config c;
    memset(&c, 0, sizeof c);
    c.n_layer = m->n_layer;
    c.n_head = m->n_head;
    c.n_kv_head = heads;
    c.head_dim = m->head_dim;
    c.n_ctx = m->max_ctx;
    const size_t v = kvlm_kv_bytes_per_token(&c, t);
    if (!v) return -1;
    *out = (uint64_t)v;
    return 0;
}

int kvs_bytes_per_token(const kvs_model *m, kvlm_dtype t, uint64_t *out) {
    return per_token(m, m->n_kv_head, t, out);
}

int kvs_mha_bytes_per_token(const kvs_model *m, kvlm_dtype t, uint64_t *out) {
    return per_token(m, m->n_head, t, out);
}

int kvs_split_bytes_per_token(const kvs_model *m, kvlm_dtype t, uint64_t *global, uint64_t *window) {
    uint64_t all;
    if (kvs_bytes_per_token(m, t, &all)) return -1;
    const int wl = m->window > 0 && m->window_layers > 0 && m->window_layers <= m->n_layer ? m->window_layers : 0;
    *window = all / (uint64_t)m->n_layer * (uint64_t)wl;
    *global = all - *window;
    return 0;
}

int kvs_context_bytes(const kvs_model *m, kvlm_dtype t, uint64_t tokens, uint64_t *out) {
    uint64_t g, w, a, b;
    if (kvs_split_bytes_per_token(m, t, &g, &w)) return -1;
    const uint64_t kept = w && tokens > (uint64_t)m->window ? (uint64_t)m->window : tokens;
    if (kvs_mul(g, tokens, &a) || kvs_mul(w, kept, &b) || __builtin_add_overflow(a, b, out)) return -1;
    return 0;
}

int kvs_plan_compute(const kvs_plan_in *in, kvs_plan *out, kvlm_error *err) {
    memset(out, 0, sizeof *out);
    if (!in->bytes_per_token) return kvlm_error_set(err, KVLM_ERR_ARG, "bytes per token must be positive");
    if (!in->ctx_len) return kvlm_error_set(err, KVLM_ERR_ARG, "ctx-len must be positive");
    if (!in->block_size) return kvlm_error_set(err, KVLM_ERR_ARG, "block-size must be positive");
    if (!in->mean_len || in->mean_len > in->ctx_len)
        return kvlm_error_set(err, KVLM_ERR_ARG, "mean-len = %llu must be in [1, ctx-len = %llu]",
                              (unsigned long long)in->mean_len, (unsigned long long)in->ctx_len);
    const uint64_t blocks = in->mean_len / in->block_size + (in->mean_len % in->block_size != 0);
    uint64_t paged_tokens;
    if (kvs_mul(in->ctx_len, in->bytes_per_token, &out->contig_bytes))
        return kvlm_error_set(err, KVLM_ERR_ARG, "ctx-len x bytes per token does not fit in 64 bits");
    if (in->window_bytes_per_token > in->bytes_per_token)
        return kvlm_error_set(err, KVLM_ERR_ARG, "window layers' bytes per token exceed the whole");
    /* the window layers keep the blocks from the one holding M + 1 - W on */
    const uint64_t M = in->mean_len, W = in->window, wbpt = W ? in->window_bytes_per_token : 0;
    const uint64_t wblocks = blocks - (W && M + 1 > W ? (M + 1 - W) / in->block_size : 0);
    uint64_t global_part, window_part;
    if (kvs_mul(blocks, in->block_size, &paged_tokens) ||
        kvs_mul(paged_tokens, in->bytes_per_token - wbpt, &global_part) ||
        kvs_mul(wblocks * in->block_size, wbpt, &window_part) ||
        __builtin_add_overflow(global_part, window_part, &out->paged_bytes))
        return kvlm_error_set(err, KVLM_ERR_ARG, "ceil(mean-len / block-size) x block-size x bytes per token does not fit "
                                            "in 64 bits");
    out->paged_blocks = blocks;
    out->contig_util = (double)in->mean_len / (double)in->ctx_len;
    /* with a window, bytes held over bytes reserved: between steps a window
     * layer holds the W - 1 positions its next query reads besides its own */
    out->paged_util = wbpt ? (double)(M * (in->bytes_per_token - wbpt) + (M > W - 1 ? W - 1 : M) * wbpt) /
                                 (double)out->paged_bytes
                           : (double)in->mean_len / (double)paged_tokens;
    if (in->weights > in->memory) return KVLM_OK;
    out->weights_fit = 1;
    out->kv_memory = in->memory - in->weights;
    out->contig_requests = out->kv_memory / out->contig_bytes;
    out->paged_requests = out->kv_memory / out->paged_bytes;
    return KVLM_OK;
}

/* ------------------------------------------------------------ formatting */

char *kvs_human_bytes(uint64_t bytes, char *buf, size_t cap) {
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int k = 0;
    while (k < 6 && bytes >> (10 * (k + 1))) k++;
    /* hundredths of the unit, rounded half up; 128-bit so EiB cannot wrap */
    unsigned __int128 unit = (unsigned __int128)1 << (10 * k);
    uint64_t h = (uint64_t)(((unsigned __int128)bytes * 100 + unit / 2) / unit);
    if (h >= 102400 && k < 6) { /* 1023.996 KiB rounds to 1 MiB, not 1024 KiB */
        k++;
        unit <<= 10;
        h = (uint64_t)(((unsigned __int128)bytes * 100 + unit / 2) / unit);
    }
    uint64_t whole = h / 100, frac = h % 100;
    if (frac == 0) snprintf(buf, cap, "%llu %s", (unsigned long long)whole, units[k]);
    else if (frac % 10 == 0) snprintf(buf, cap, "%llu.%llu %s", (unsigned long long)whole,
                                      (unsigned long long)(frac / 10), units[k]);
    else snprintf(buf, cap, "%llu.%02llu %s", (unsigned long long)whole, (unsigned long long)frac, units[k]);
    return buf;
}

char *kvs_thousands(uint64_t v, char *buf, size_t cap) {
    char digits[32], tmp[48];
    int n = snprintf(digits, sizeof digits, "%llu", (unsigned long long)v), o = 0;
    for (int i = 0; i < n; i++) {
        if (i && (n - i) % 3 == 0) tmp[o++] = ',';
        tmp[o++] = digits[i];
    }
    tmp[o] = 0;
    snprintf(buf, cap, "%s", tmp);
    return buf;
}

int kvs_parse_size(const char *s, uint64_t *out) {
    static const struct { const char *suffix; uint64_t mult; } units[] = {
        {"", 1},
        {"B", 1},
        {"KB", 1000ull},
        {"KiB", 1ull << 10},
        {"MB", 1000000ull},
        {"MiB", 1ull << 20},
        {"GB", 1000000000ull},
        {"GiB", 1ull << 30},
        {"TB", 1000000000000ull},
        {"TiB", 1ull << 40},
    };
    if (!s || !isdigit((unsigned char)*s)) return -1;
    uint64_t whole = 0, frac = 0, scale = 1;
    const char *p = s;
    for (; isdigit((unsigned char)*p); p++)
        if (kvs_mul(whole, 10, &whole) || __builtin_add_overflow(whole, (uint64_t)(*p - '0'), &whole)) return -1;
    if (*p == '.') {
        p++;
        if (!isdigit((unsigned char)*p)) return -1;
        for (; isdigit((unsigned char)*p); p++) {
            if (scale >= 1000000000000000000ull) continue; /* digits past 1e-18 cannot change whole bytes */
            frac = frac * 10 + (uint64_t)(*p - '0');
            scale *= 10;
        }
    }
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcasecmp(p, units[i].suffix)) continue;
        uint64_t v;
        if (kvs_mul(whole, units[i].mult, &v)) return -1;
        uint64_t part = (uint64_t)((unsigned __int128)frac * units[i].mult / scale);
        if (__builtin_add_overflow(v, part, &v)) return -1;
        *out = v;
        return 0;
    }
    return -1;
}
