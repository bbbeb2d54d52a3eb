/*
 * Token selection. Greedy when temperature is 0; otherwise the logits are
 * divided by the temperature, softmaxed, cut to the top k (if k > 0), cut to
 * the smallest set whose mass reaches top_p (at least one token kept),
 * renormalised, and one token is drawn with a seeded generator, so the same
 * seed gives the same tokens on every run and every machine.
 */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"

struct kvlm_sampler {
    kvlm_sampler_options o;
    int vocab;
    smp_rng rng;
    float *prob;
    int32_t *idx;
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

kvlm_sampler *kvlm_sampler_create(const kvlm_sampler_options *opt, int vocab, kvlm_error *err) {
    if (!opt || vocab < 1) { kvlm_fail(err, KVLM_ERR_ARG, "sampler: missing options or empty vocabulary"); return NULL; }
    if (!(opt->temperature >= 0 && opt->temperature <= 100)) {
        kvlm_fail(err, KVLM_ERR_ARG, "temperature = %g is outside [0, 100]", opt->temperature);
        return NULL;
    }
    if (opt->top_k < 0) { kvlm_fail(err, KVLM_ERR_ARG, "top_k = %d must be >= 0", opt->top_k); return NULL; }
    if (!(opt->top_p > 0 && opt->top_p <= 1)) {
        kvlm_fail(err, KVLM_ERR_ARG, "top_p = %g is outside (0, 1]", opt->top_p);
        return NULL;
    }
    kvlm_sampler *s = calloc(1, sizeof *s);
    if (s) {
        s->prob = malloc((size_t)vocab * sizeof(float));
        s->idx = malloc((size_t)vocab * sizeof(int32_t));
    }
    if (!s || !s->prob || !s->idx) {
        kvlm_sampler_free(s);
        kvlm_fail(err, KVLM_ERR_NOMEM, "out of memory");
        return NULL;
    }
    s->o = *opt;
    s->vocab = vocab;
    smp_rng_seed(&s->rng, opt->seed);
    return s;
}

void kvlm_sampler_free(kvlm_sampler *s) {
    if (!s) return;
    free(s->prob);
    free(s->idx);
    free(s);
}

static int32_t argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}


/* Reorders idx[0..n) so its first m entries are the smallest set of the
 * most likely tokens whose mass reaches target (3-way quickselect on
 * probability; ties at the boundary go in partition order). Returns m and
 * the kept mass. */
static int nucleus(const float *p, int32_t *idx, int n, double target, double *kept) {
    int lo = 0, hi = n, end = n;
    double need = target, total = 0;
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
            total += mg;
            need -= mg;
            end = g;
            while (end < e && need > 0) { need -= p[idx[end]]; total += p[idx[end++]]; }
            *kept = total;
            return end > 0 ? end : 1;
        } else {
            total += mg + me;
            need -= mg + me;
            lo = e;
            end = e;
        }
    }
    *kept = total;
    return end > 0 ? end : 1;
}

/* The k largest of x in descending order (ties: lower id first). */
static int select_top(const float *x, int n, int k, int32_t *out) {
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m == k && x[i] <= x[out[m - 1]]) continue;
        int j = m < k ? m++ : k - 1;
        while (j > 0 && x[out[j - 1]] < x[i]) { out[j] = out[j - 1]; j--; }
        out[j] = i;
    }
    return m;
}

int32_t kvlm_sampler_next(kvlm_sampler *s, const float *logits) {
    const int V = s->vocab;
    if (s->o.temperature == 0) return argmax(logits, V);
    const float inv_t = 1.0f / s->o.temperature;
    float mx = logits[argmax(logits, V)];
    double sum = 0;
    for (int i = 0; i < V; i++) {
        s->prob[i] = expf((logits[i] - mx) * inv_t);
        sum += s->prob[i];
        s->idx[i] = i;
    }
    int n = V;
    if ((s->o.top_k > 0 && s->o.top_k < V) || s->o.top_p < 1) {
        /* Top-k: the k best by insertion. Top-p alone: only tokens above
         * (1 - p) * sum / V can be in the nucleus (those below hold less
         * than 1 - p of the mass together); among the survivors the nucleus
         * is found by selection, without sorting the vocabulary. */
        if (s->o.top_k > 0 && s->o.top_k < V) {
            n = select_top(s->prob, V, s->o.top_k, s->idx);
            double kept = 0;
            for (int i = 0; i < n; i++) kept += s->prob[s->idx[i]];
            if (s->o.top_p < 1) { /* nucleus of what top-k kept: a prefix of the sorted list */
                double acc = 0;
                int keep = 0;
                while (keep < n && acc < s->o.top_p * kept) acc += s->prob[s->idx[keep++]];
                n = keep;
                kept = acc;
            }
            sum = kept;
        } else {
            double cut = (1.0 - s->o.top_p) * sum / V;
            n = 0;
            for (int i = 0; i < V; i++)
                if (s->prob[i] >= cut) s->idx[n++] = i;
            n = nucleus(s->prob, s->idx, n, s->o.top_p * sum, &sum);
        }
    }
    double u = smp_rng_uniform(&s->rng) * sum, acc = 0;
    for (int i = 0; i < n; i++) {
        acc += s->prob[s->idx[i]];
        if (u < acc) return s->idx[i];
    }
    return s->idx[n - 1];
}

int kvlm_top_logprobs(const float *logits, int vocab, int k, int32_t *ids, float *logprobs) {
    if (k > vocab) k = vocab;
    if (k <= 0) return 0;
    float mx = logits[argmax(logits, vocab)];
    double sum = 0;
    for (int i = 0; i < vocab; i++) sum += exp((double)logits[i] - mx);
    const float lse = mx + (float)log(sum);
    int n = select_top(logits, vocab, k, ids);
    for (int i = 0; i < n; i++) logprobs[i] = logits[ids[i]] - lse;
    return n;
}
