/*
 * Token selection: a chain of logits processors (penalties, logit bias,
 * temperature, top-k, top-p, min-p) in a configurable order, then a draw
 * from a seeded generator, so the same seed gives the same tokens on every
 * run and machine.
 *
 * The chain works on a candidate list (token ids) over a private copy of
 * the logits; filters shrink the list, temperature rescales it. Nothing in
 * a step sorts the whole vocabulary: top-k selects by insertion, and top-p
 * on an unsorted list first drops tokens that cannot be in the nucleus
 * (those below (1 - p) x mass / n hold less than 1 - p together), then
 * finds the nucleus of the rest with a histogram of their probabilities
 * (one pass; all tokens in buckets above the boundary bucket are in, in id
 * order) and a quickselect inside the boundary bucket.
 *
 * While no filter has run the candidates are the whole vocabulary in id
 * order (dense): then the passes over the row (temperature, max, exp and
 * sum, the top-p cut, min-p, argmax) run as vector kernels over contiguous
 * arrays (kernels/vec_softmax.h). Every probability comes from vec_expf,
 * whose bits are the same on every ISA, and sums are taken in a fixed
 * order, so the same seed draws the same tokens on every run, ISA and
 * machine. Probabilities computed once are reused while the logits and the
 * maximum they were shifted by are unchanged.
 */
#include "runtime/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "kernels/vec_softmax.h"

/* Nucleus histogram buckets: a probability in [0, 1] keyed by its float bits
 * >> 20 (exponent and 3 mantissa bits: buckets 1/8 of an octave wide; 1.0
 * is key 1016). NB_WAYS copies take every NB_WAYS-th token, so updates of
 * one bucket do not wait on each other; they are added in a fixed order. */
#define NB_SHIFT 20
#define NB_BUCKETS 1024
#define NB_WAYS 4
/* The draw sums the candidates' probabilities in blocks of this many (each
 * block in order, then the blocks in order), a fixed order that is not one
 * long chain of dependent additions. */
#define DRAW_BLOCK 16

enum { ST_PENALTIES, ST_BIAS, ST_TEMPERATURE, ST_TOP_K, ST_TOP_P, ST_MIN_P, ST_COUNT };
static const char *stage_names[ST_COUNT] = {"penalties", "bias", "temperature", "top_k", "top_p", "min_p"};
#define DEFAULT_ORDER "penalties,bias,temperature,top_k,top_p,min_p"

struct kvlm_sampler {
    kvlm_sampler_options o;
    int vocab;
    int order[ST_COUNT];
    smp_rng rng;
    const vec_softmax_ops *vk;
    int dense;           /* the candidates are all ids in order; idx not filled */
    int prob_ok;         /* prob[] holds vec_expf(logit - largest candidate logit) */
    float *logits;       /* working copy, indexed by token id */
    float *prob;         /* indexed by token id */
    int32_t *idx;        /* candidate ids */
    int32_t *tmp;        /* scratch list of ids */
    uint32_t *bcount;    /* nucleus histogram: count and mass per bucket */
    double *bmass;
    double *bsum;        /* draw: probability mass of each block of DRAW_BLOCK candidates */
    kvlm_logit_bias *bias;
    int32_t *hist;       /* penalty history (ring when penalty_window > 0) */
    int hist_n, hist_cap, hist_head;
    int *counts;         /* occurrences of each id in the history window */
    unsigned *stamp;     /* per-id marker so a penalty applies once per step */
    unsigned step;
};

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void smp_rng_seed(smp_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) { /* splitmix64 expansion of the seed */
        seed += 0x9e3779b97f4a7c15ull;
        uint64_t z = seed;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        r->s[i] = z ^ (z >> 31);
    }
}

double smp_rng_uniform(smp_rng *r) {
    uint64_t *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return (double)(out >> 11) * (1.0 / 9007199254740992.0);
}

kvlm_sampler_options kvlm_sampler_default_params(void) {
    return (kvlm_sampler_options){.temperature = 1.0f, .top_p = 1.0f, .repetition_penalty = 1.0f};
}

static int parse_order(const char *s, int *order, kvlm_error *err) {
    int seen[ST_COUNT] = {0}, n = 0;
    const char *p = s ? s : DEFAULT_ORDER;
    while (*p) {
        size_t len = strcspn(p, ",");
        int st = -1;
        for (int i = 0; i < ST_COUNT; i++)
            if (strlen(stage_names[i]) == len && !strncmp(p, stage_names[i], len)) st = i;
        if (st < 0 || seen[st] || n == ST_COUNT)
            return kvlm_error_set(err, KVLM_ERR_ARG, "sampler order '%s': expected each of %s exactly once", s,
                                  DEFAULT_ORDER);
        seen[st] = 1;
        order[n++] = st;
        p += len + (p[len] == ',');
    }
    if (n != ST_COUNT)
        return kvlm_error_set(err, KVLM_ERR_ARG, "sampler order '%s': expected each of %s exactly once", s, DEFAULT_ORDER);
    return KVLM_OK;
}

static int check_options(const kvlm_sampler_options *o, int vocab, kvlm_error *err) {
    if (!(o->temperature >= 0 && o->temperature <= 100))
        return kvlm_error_set(err, KVLM_ERR_ARG, "temperature = %g is outside [0, 100]", o->temperature);
    if (o->top_k < 0) return kvlm_error_set(err, KVLM_ERR_ARG, "top_k = %d must be >= 0", o->top_k);
    if (!(o->top_p > 0 && o->top_p <= 1)) return kvlm_error_set(err, KVLM_ERR_ARG, "top_p = %g is outside (0, 1]", o->top_p);
    if (!(o->min_p >= 0 && o->min_p <= 1)) return kvlm_error_set(err, KVLM_ERR_ARG, "min_p = %g is outside [0, 1]", o->min_p);
    if (!(o->repetition_penalty > 0 && o->repetition_penalty <= 100))
        return kvlm_error_set(err, KVLM_ERR_ARG, "repetition_penalty = %g is outside (0, 100]", o->repetition_penalty);
    if (!(o->frequency_penalty >= -2 && o->frequency_penalty <= 2))
        return kvlm_error_set(err, KVLM_ERR_ARG, "frequency_penalty = %g is outside [-2, 2]", o->frequency_penalty);
    if (!(o->presence_penalty >= -2 && o->presence_penalty <= 2))
        return kvlm_error_set(err, KVLM_ERR_ARG, "presence_penalty = %g is outside [-2, 2]", o->presence_penalty);
    if (o->penalty_window < 0) return kvlm_error_set(err, KVLM_ERR_ARG, "penalty_window = %d must be >= 0", o->penalty_window);
    if (o->n_logit_bias < 0 || (o->n_logit_bias > 0 && !o->logit_bias))
        return kvlm_error_set(err, KVLM_ERR_ARG, "logit_bias: %d entries but no array", o->n_logit_bias);
    for (int i = 0; i < o->n_logit_bias; i++) {
        if (o->logit_bias[i].id < 0 || o->logit_bias[i].id >= vocab)
            return kvlm_error_set(err, KVLM_ERR_ARG, "logit_bias: token id %d is outside the vocabulary [0, %d)",
                             o->logit_bias[i].id, vocab);
        if (!(o->logit_bias[i].bias >= -100 && o->logit_bias[i].bias <= 100))
            return kvlm_error_set(err, KVLM_ERR_ARG, "logit_bias: bias %g for token %d is outside [-100, 100]",
                                  o->logit_bias[i].bias, o->logit_bias[i].id);
    }
    return KVLM_OK;
}

kvlm_sampler *kvlm_sampler_create(const kvlm_sampler_options *opt, int vocab, kvlm_error *err) {
    if (!opt || vocab < 1) {
        kvlm_error_set(err, KVLM_ERR_ARG, "sampler: missing options or empty vocabulary");
        return NULL;
    }
    int order[ST_COUNT];
    if (check_options(opt, vocab, err) || parse_order(opt->order, order, err)) return NULL;
    kvlm_sampler *s = calloc(1, sizeof *s);
    if (!s) { kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory"); return NULL; }
    s->o = *opt;
    s->o.order = NULL; /* the caller's string is not kept */
    s->vocab = vocab;
    memcpy(s->order, order, sizeof order);
    s->logits = malloc((size_t)vocab * sizeof(float));
    s->prob = malloc((size_t)vocab * sizeof(float));
    s->idx = malloc((size_t)vocab * sizeof(int32_t));
    s->tmp = malloc((size_t)vocab * sizeof(int32_t));
    s->bcount = malloc(NB_WAYS * NB_BUCKETS * sizeof *s->bcount);
    s->bmass = malloc(NB_WAYS * NB_BUCKETS * sizeof *s->bmass);
    s->bsum = malloc(((size_t)vocab / DRAW_BLOCK + 1) * sizeof *s->bsum);
    s->counts = calloc((size_t)vocab, sizeof(int));
    s->stamp = calloc((size_t)vocab, sizeof(unsigned));
    s->hist_cap = opt->penalty_window > 0 ? opt->penalty_window : 256;
    s->hist = malloc((size_t)s->hist_cap * sizeof(int32_t));
    if (opt->n_logit_bias) {
        s->bias = malloc((size_t)opt->n_logit_bias * sizeof *s->bias);
        if (s->bias) memcpy(s->bias, opt->logit_bias, (size_t)opt->n_logit_bias * sizeof *s->bias);
        s->o.logit_bias = s->bias;
    }
    if (!s->logits || !s->prob || !s->idx || !s->tmp || !s->bcount || !s->bmass || !s->bsum || !s->counts || !s->stamp || !s->hist ||
        (opt->n_logit_bias && !s->bias)) {
        kvlm_sampler_free(s);
        kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
        return NULL;
    }
    smp_rng_seed(&s->rng, opt->seed);
    s->vk = vec_softmax_select(KVLM_ISA_AUTO);
    if (!s->vk) s->vk = &vec_softmax_scalar;
    return s;
}

int smp_use_isa(kvlm_sampler *s, kvlm_isa isa) {
    const vec_softmax_ops *vk = vec_softmax_select(isa);
    if (!vk) return -1;
    s->vk = vk;
    return 0;
}

void kvlm_sampler_free(kvlm_sampler *s) {
    if (!s) return;
    free(s->logits);
    free(s->prob);
    free(s->idx);
    free(s->tmp);
    free(s->bcount);
    free(s->bmass);
    free(s->bsum);
    free(s->counts);
    free(s->stamp);
    free(s->hist);
    free(s->bias);
    free(s);
}

void kvlm_sampler_reset(kvlm_sampler *s) {
    memset(s->counts, 0, (size_t)s->vocab * sizeof(int));
    s->hist_n = s->hist_head = 0;
}

void kvlm_sampler_accept(kvlm_sampler *s, const int32_t *ids, int n) {
    for (int i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= s->vocab) continue;
        if (s->o.penalty_window > 0) {
            if (s->hist_n == s->hist_cap) { /* drop the oldest */
                s->counts[s->hist[s->hist_head]]--;
                s->hist[s->hist_head] = id;
                s->hist_head = (s->hist_head + 1) % s->hist_cap;
            } else {
                s->hist[(s->hist_head + s->hist_n++) % s->hist_cap] = id;
            }
        } else {
            if (s->hist_n == s->hist_cap) {
                int32_t *nh = realloc(s->hist, (size_t)s->hist_cap * 2 * sizeof(int32_t));
                if (!nh) continue; /* history stops growing; penalties see what it holds */
                s->hist = nh;
                s->hist_cap *= 2;
            }
            s->hist[s->hist_n++] = id;
        }
        s->counts[id]++;
    }
}

static void apply_penalties(kvlm_sampler *s) {
    const kvlm_sampler_options *o = &s->o;
    if (o->repetition_penalty == 1 && o->frequency_penalty == 0 && o->presence_penalty == 0) return;
    if (++s->step == 0) { memset(s->stamp, 0, (size_t)s->vocab * sizeof(unsigned)); s->step = 1; }
    for (int i = 0; i < s->hist_n; i++) {
        int32_t id = s->hist[(s->hist_head + i) % s->hist_cap];
        if (s->stamp[id] == s->step) continue;
        s->stamp[id] = s->step;
        float *l = &s->logits[id];
        if (o->repetition_penalty != 1) *l = *l > 0 ? *l / o->repetition_penalty : *l * o->repetition_penalty;
        *l -= o->frequency_penalty * (float)s->counts[id] + o->presence_penalty;
    }
}

/* The k largest of x over ids in[0..n) into out, descending (ties: lower id). */
static int select_top(const float *x, const int32_t *in, int n, int k, int32_t *out) {
    int m = 0;
    for (int i = 0; i < n; i++) {
        int32_t id = in ? in[i] : i;
        if (m == k && (x[id] < x[out[m - 1]] || (x[id] == x[out[m - 1]] && id > out[m - 1]))) continue;
        int j = m < k ? m++ : k - 1;
        while (j > 0 && (x[out[j - 1]] < x[id] || (x[out[j - 1]] == x[id] && out[j - 1] > id))) {
            out[j] = out[j - 1];
            j--;
        }
        out[j] = id;
    }
    return m;
}

static int cmp_id(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

/* Reorders idx[0..n) so its first m entries are the smallest set of the most
 * likely tokens whose mass reaches target (3-way quickselect on probability;
 * of tokens tied at the boundary the lower ids are kept). Returns m >= 1. */
static int nucleus(const float *p, int32_t *idx, int n, double target) {
    int lo = 0, hi = n, end = n;
    double need = target;
    while (lo < hi) {
        const float piv = p[idx[lo + (hi - lo) / 2]];
        int g = lo, e = lo, l = hi; /* [lo,g) > piv, [g,e) == piv, [l,hi) < piv */
        double mg = 0, me = 0;
        while (e < l) {
            int32_t v = idx[e];
            if (p[v] > piv) { idx[e] = idx[g]; idx[g++] = v; e++; mg += p[v]; }
            else if (p[v] < piv) { idx[e] = idx[--l]; idx[l] = v; }
            else { e++; me += p[v]; }
        }
        if (mg >= need && g > lo) {
            hi = g;
        } else if (mg + me >= need) {
            need -= mg;
            end = g;
            qsort(idx + g, (size_t)(e - g), sizeof(int32_t), cmp_id); /* ties: lower ids first */
            while (end < e && need > 0) need -= p[idx[end++]];
            return end > 0 ? end : 1;
        } else {
            need -= mg + me;
            lo = end = e;
        }
    }
    return end > 0 ? end : 1;
}

/* Fills idx with the identity when the candidates are still dense. */
static void materialise(kvlm_sampler *s) {
    if (!s->dense) return;
    for (int i = 0; i < s->vocab; i++) s->idx[i] = i;
    s->dense = 0;
}

/* Largest logit among the candidates (NaNs ignored). */
static float candidate_max(const kvlm_sampler *s, int n) {
    if (s->dense) return s->vk->max(s->logits, (size_t)n);
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        if (s->logits[s->idx[i]] > mx) mx = s->logits[s->idx[i]];
    return mx;
}

static inline uint32_t bucket_of(float p) {
    uint32_t b;
    memcpy(&b, &p, sizeof b);
    b >>= NB_SHIFT;
    return b < NB_BUCKETS ? b : NB_BUCKETS - 1;
}

/* nucleus() for a long list: a histogram pass finds the bucket where the
 * mass (most likely first) reaches target; the tokens above it go first, in
 * their order in idx, and nucleus() picks the rest inside that bucket. */
static int nucleus_hist(kvlm_sampler *s, int n, double target) {
    const float *p = s->prob;
    int32_t *idx = s->idx;
    uint32_t *cnt = s->bcount;
    double *mass = s->bmass;
    memset(cnt, 0, NB_WAYS * NB_BUCKETS * sizeof *cnt);
    memset(mass, 0, NB_WAYS * NB_BUCKETS * sizeof *mass);
    for (int i = 0; i < n; i++) {
        const float v = p[idx[i]];
        const uint32_t b = (uint32_t)(i % NB_WAYS) * NB_BUCKETS + bucket_of(v);
        cnt[b]++;
        mass[b] += v;
    }
    for (int w = 1; w < NB_WAYS; w++)
        for (int b = 0; b < NB_BUCKETS; b++) {
            cnt[b] += cnt[w * NB_BUCKETS + b];
            mass[b] += mass[w * NB_BUCKETS + b];
        }
    double above = 0;
    int k = NB_BUCKETS - 1;
    for (; k > 0; k--) {
        if (cnt[k] && above + mass[k] >= target) break;
        above += mass[k];
    }
    int a = 0, nb = 0;
    for (int i = 0; i < n; i++) {
        const int32_t id = idx[i];
        const uint32_t b = bucket_of(p[id]);
        idx[a] = id; /* branch-free: a <= i, nb <= i */
        a += b > (uint32_t)k;
        s->tmp[nb] = id;
        nb += b == (uint32_t)k;
    }
    if (nb == 0) return a > 0 ? a : 1;
    memcpy(idx + a, s->tmp, (size_t)nb * sizeof(int32_t));
    return a + nucleus(p, idx + a, nb, target - above);
}

/* prob[id] = vec_expf(logit - max) over the candidates; returns their sum
 * (dense: in the kernel's lane order; otherwise in candidate order). */
static double candidate_probs(kvlm_sampler *s, int n) {
    double sum = 0;
    if (s->prob_ok && !s->dense) { /* still valid: every filter keeps the largest logit */
        for (int i = 0; i < n; i++) sum += s->prob[s->idx[i]];
        return sum;
    }
    const float mx = candidate_max(s, n);
    if (s->dense) {
        sum = s->vk->exp_sum(s->logits, s->prob, (size_t)n, mx);
    } else {
        for (int i = 0; i < n; i++) {
            int32_t id = s->idx[i];
            s->prob[id] = vec_expf(s->logits[id] - mx);
            sum += s->prob[id];
        }
    }
    s->prob_ok = 1;
    return sum;
}

/* The smallest float f with f >= c for every float compared against c. */
static float float_at_least(double c) {
    float f = (float)c;
    if ((double)f < c) f = nextafterf(f, INFINITY);
    return f;
}

/* Runs the chain; leaves the candidates in idx[0..n) and returns n.
 * *greedy tells whether temperature 0 was applied. */
static int run_chain(kvlm_sampler *s, const float *logits, int *greedy) {
    const kvlm_sampler_options *o = &s->o;
    const int V = s->vocab;
    memcpy(s->logits, logits, (size_t)V * sizeof(float));
    s->dense = 1;
    s->prob_ok = 0;
    int n = V, sorted = 0;
    *greedy = 0;
    for (int k = 0; k < ST_COUNT; k++) {
        switch (s->order[k]) {
        case ST_PENALTIES: apply_penalties(s); s->prob_ok = 0; break;
        case ST_BIAS:
            s->prob_ok = s->prob_ok && o->n_logit_bias == 0;
            for (int i = 0; i < o->n_logit_bias; i++)
                s->logits[o->logit_bias[i].id] =
                    o->logit_bias[i].bias <= -100 ? -INFINITY : s->logits[o->logit_bias[i].id] + o->logit_bias[i].bias;
            break;
        case ST_TEMPERATURE:
            if (o->temperature == 0) { *greedy = 1; break; }
            if (o->temperature == 1) break; /* x / 1 == x */
            if (s->dense) s->vk->div(s->logits, (size_t)n, o->temperature);
            else
                for (int i = 0; i < n; i++) s->logits[s->idx[i]] /= o->temperature;
            s->prob_ok = 0;
            break;
        case ST_TOP_K:
            if (o->top_k > 0 && o->top_k < n) {
                n = select_top(s->logits, s->dense ? NULL : s->idx, n, o->top_k, s->tmp);
                memcpy(s->idx, s->tmp, (size_t)n * sizeof(int32_t));
                s->dense = 0;
                sorted = 1;
            }
            break;
        case ST_TOP_P:
            if (o->top_p < 1 && n > 1) {
                /* "reaches p" with a relative slack for float rounding: probabilities
                 * that sum to exactly p on paper must stop there */
                double sum = candidate_probs(s, n), target = o->top_p * sum * (1 - 1e-6), acc = 0;
                if (sorted) {
                    int keep = 0;
                    while (keep < n && acc < target) acc += s->prob[s->idx[keep++]];
                    n = keep > 0 ? keep : 1;
                } else {
                    const float cut = float_at_least((1.0 - o->top_p) * sum / n);
                    int m = 0;
                    if (s->dense) {
                        m = (int)s->vk->keep_ge(s->prob, (size_t)n, cut, s->idx);
                        s->dense = 0;
                    } else {
                        for (int i = 0; i < n; i++)
                            if (s->prob[s->idx[i]] >= cut) s->idx[m++] = s->idx[i];
                    }
                    n = m > 256 ? nucleus_hist(s, m, target) : nucleus(s->prob, s->idx, m, target);
                }
            }
            break;
        case ST_MIN_P:
            if (o->min_p > 0 && n > 1) {
                const float floor_logit = candidate_max(s, n) + logf(o->min_p);
                int m = 0;
                if (s->dense) {
                    m = (int)s->vk->keep_ge(s->logits, (size_t)n, floor_logit, s->idx);
                    s->dense = 0;
                } else {
                    for (int i = 0; i < n; i++)
                        if (s->logits[s->idx[i]] >= floor_logit) s->idx[m++] = s->idx[i];
                }
                n = m;
            }
            break;
        }
    }
    return n;
}

/* Most likely candidate (ties: lower id). */
static int32_t best_candidate(const kvlm_sampler *s, int n) {
    if (s->dense) {
        const float mx = s->vk->max(s->logits, (size_t)n);
        for (int i = 0; i < n; i++)
            if (s->logits[i] == mx) return i;
        return 0; /* every logit NaN */
    }
    int32_t best = s->idx[0];
    for (int i = 1; i < n; i++) {
        int32_t id = s->idx[i];
        if (s->logits[id] > s->logits[best] || (s->logits[id] == s->logits[best] && id < best)) best = id;
    }
    return best;
}

/* The k-th candidate. */
static inline int32_t cand(const kvlm_sampler *s, int k) { return s->dense ? k : s->idx[k]; }

/* The candidates' probability mass in DRAW_BLOCK order; bsum[j] keeps
 * block j's share. */
static double block_sums(kvlm_sampler *s, int n) {
    double total = 0;
    for (int j = 0, i = 0; i < n; j++, i += DRAW_BLOCK) {
        const int end = i + DRAW_BLOCK < n ? i + DRAW_BLOCK : n;
        double b = 0;
        if (s->dense)
            for (int k = i; k < end; k++) b += s->prob[k];
        else
            for (int k = i; k < end; k++) b += s->prob[s->idx[k]];
        s->bsum[j] = b;
        total += b;
    }
    return total;
}

int32_t kvlm_sampler_next(kvlm_sampler *s, const float *logits) {
    int greedy;
    int n = run_chain(s, logits, &greedy);
    if (greedy || n == 1) return best_candidate(s, n);
    if (!s->prob_ok) candidate_probs(s, n);
    const double sum = block_sums(s, n);
    if (!(sum > 0)) return best_candidate(s, n); /* every candidate banned */
    const double u = smp_rng_uniform(&s->rng) * sum;
    double acc = 0;
    for (int j = 0, i = 0; i < n; j++, i += DRAW_BLOCK) {
        if (!(u < acc + s->bsum[j])) {
            acc += s->bsum[j];
            continue;
        }
        const int end = i + DRAW_BLOCK < n ? i + DRAW_BLOCK : n;
        for (int k = i; k < end; k++) {
            acc += s->prob[cand(s, k)];
            if (u < acc) return cand(s, k);
        }
        return cand(s, end - 1);
    }
    return cand(s, n - 1);
}

/* The chain's distribution as a dense row: p[id] is the probability
 * kvlm_sampler_next would draw id with (0 outside the candidates); greedy
 * (or a lone candidate) is a point mass on the argmax. Returns 1 when
 * the chain is greedy or left one candidate, 0 otherwise. */
int smp_probs(kvlm_sampler *s, const float *logits, float *p) {
    int greedy;
    const int n = run_chain(s, logits, &greedy);
    memset(p, 0, (size_t)s->vocab * sizeof *p);
    double sum = greedy || n == 1 ? 0 : candidate_probs(s, n);
    if (greedy || n == 1 || !(sum > 0)) {
        p[best_candidate(s, n)] = 1.0f;
        return 1;
    }
    for (int i = 0; i < n; i++) {
        const int32_t id = cand(s, i);
        p[id] = (float)(s->prob[id] / sum);
    }
    return 0;
}

int smp_vocab(const kvlm_sampler *s) { return s->vocab; }

double smp_uniform(kvlm_sampler *s) { return smp_rng_uniform(&s->rng); }

int32_t smp_draw(kvlm_sampler *s, const float *w) {
    double sum = 0;
    for (int i = 0; i < s->vocab; i++) sum += w[i];
    if (!(sum > 0)) return -1;
    const double u = smp_rng_uniform(&s->rng) * sum;
    double acc = 0;
    int32_t last = -1;
    for (int i = 0; i < s->vocab; i++) {
        if (w[i] <= 0) continue;
        acc += w[i];
        last = i;
        if (u < acc) return i;
    }
    return last;
}

static int by_prob_desc(const void *a, const void *b, void *arg) {
    const float *p = arg;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (p[x] != p[y]) return p[x] < p[y] ? 1 : -1;
    return x < y ? -1 : x > y;
}

int kvlm_sampler_candidates(kvlm_sampler *s, const float *logits, int32_t *ids, float *probs) {
    int greedy;
    int n = run_chain(s, logits, &greedy);
    double sum = candidate_probs(s, n);
    if (greedy || n == 1 || !(sum > 0)) {
        ids[0] = best_candidate(s, n);
        probs[0] = 1.0f;
        return 1;
    }
    materialise(s);
    memcpy(ids, s->idx, (size_t)n * sizeof(int32_t));
    qsort_r(ids, (size_t)n, sizeof(int32_t), by_prob_desc, s->prob);
    for (int i = 0; i < n; i++) probs[i] = (float)(s->prob[ids[i]] / sum);
    return n;
}

int kvlm_top_logprobs(const float *logits, int vocab, int k, int32_t *ids, float *logprobs) {
    if (k > vocab) k = vocab;
    if (k <= 0) return 0;
    float mx = -INFINITY;
    for (int i = 0; i < vocab; i++) mx = fmaxf(mx, logits[i]);
    double sum = 0;
    for (int i = 0; i < vocab; i++) sum += exp((double)logits[i] - mx);
    const float lse = mx + (float)log(sum);
    int n = select_top(logits, NULL, vocab, k, ids);
    for (int i = 0; i < n; i++) logprobs[i] = logits[ids[i]] - lse;
    return n;
}

double kvlm_logits_entropy(const float *logits, int vocab) {
    float mx = -INFINITY;
    for (int i = 0; i < vocab; i++) mx = fmaxf(mx, logits[i]);
    if (!isfinite(mx)) return NAN;
    /* H = log Z - E[x - max], with Z = sum exp(x - max) */
    double z = 0, wsum = 0;
    for (int i = 0; i < vocab; i++) {
        const double d = (double)logits[i] - mx;
        if (d == -INFINITY) continue;
        const double w = exp(d);
        z += w;
        wsum += w * d;
    }
    return log(z) - wsum / z;
}

float kvlm_token_logprob(const float *logits, int vocab, int32_t id) {
    float mx = -INFINITY;
    for (int i = 0; i < vocab; i++) mx = fmaxf(mx, logits[i]);
    double sum = 0;
    for (int i = 0; i < vocab; i++) sum += exp((double)logits[i] - mx);
    return (float)((double)logits[id] - mx - log(sum));
}
