/*
 * Measurement statistics. Of a next-token distribution: entropy in nats,
 * top-1 probability, top-5 mass, tokens needed to cover 90% of the mass.
 * Of a generated sequence: distinct-token ratio and the repeated n-gram
 * rate (share of the n-grams that already occurred earlier in the same
 * sequence). Knows nothing about models; reads logits and ids.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "kvlm_measure.h"

static int cmp_desc(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* p sorted in descending order, summing to 1. */
static void stats_of_sorted(const double *p, int n, kvlm_dist_stats *out) {
    memset(out, 0, sizeof *out);
    double cum = 0;
    out->n90 = n;
    for (int i = 0; i < n; i++) {
        if (p[i] > 0) {
            out->entropy -= p[i] * log(p[i]);
            out->support++;
        }
        if (i < 5) out->top5 += p[i];
        cum += p[i];
        /* a tolerance for summation error: uniform over V needs ceil(0.9 V) */
        if (cum >= 0.9 - 1e-9 && out->n90 == n) out->n90 = i + 1;
    }
    out->top1 = n > 0 ? p[0] : 0;
}

int kvlm_dist_stats_compute(const float *logits, int vocab, float temperature, kvlm_sampler *chain,
                            kvlm_dist_stats *out, kvlm_error *err) {
    if (vocab < 1) return kvlm_error_set(err, KVLM_ERR_ARG, "empty vocabulary");
    if (!chain && !(temperature > 0))
        return kvlm_error_set(err, KVLM_ERR_ARG, "temperature = %g: statistics need a temperature above 0", temperature);
    double *p = malloc((size_t)vocab * sizeof(double));
    int32_t *ids = chain ? malloc((size_t)vocab * sizeof(int32_t)) : NULL;
    float *pf = chain ? malloc((size_t)vocab * sizeof(float)) : NULL;
    if (!p || (chain && (!ids || !pf))) {
        free(p), free(ids), free(pf);
        return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
    }
    int n = vocab;
    if (chain) {
        n = kvlm_sampler_candidates(chain, logits, ids, pf);
        for (int i = 0; i < n; i++) p[i] = pf[i];
    } else {
        double mx = -INFINITY, sum = 0;
        for (int i = 0; i < vocab; i++) mx = fmax(mx, (double)logits[i] / temperature);
        for (int i = 0; i < vocab; i++) sum += p[i] = exp((double)logits[i] / temperature - mx);
        for (int i = 0; i < vocab; i++) p[i] /= sum;
        qsort(p, (size_t)vocab, sizeof(double), cmp_desc);
    }
    stats_of_sorted(p, n, out);
    free(p), free(ids), free(pf);
    return KVLM_OK;
}

static int cmp_id(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return x < y ? -1 : x > y;
}

double kvlm_distinct_ratio(const int32_t *ids, int n) {
    if (n <= 0) return 0;
    int32_t *t = malloc((size_t)n * sizeof(int32_t));
    if (!t) return NAN;
    memcpy(t, ids, (size_t)n * sizeof(int32_t));
    qsort(t, (size_t)n, sizeof(int32_t), cmp_id);
    int distinct = 1;
    for (int i = 1; i < n; i++) distinct += t[i] != t[i - 1];
    free(t);
    return (double)distinct / n;
}

/* Open-addressing set of n-gram start positions, keyed by the n-gram. */
double kvlm_repeated_ngram_rate(const int32_t *ids, int n, int order) {
    if (order < 1 || n < order) return 0;
    const int grams = n - order + 1;
    size_t cap = 16;
    while (cap < (size_t)grams * 2) cap <<= 1;
    int *slot = malloc(cap * sizeof(int));
    if (!slot) return NAN;
    memset(slot, -1, cap * sizeof(int));
    int repeated = 0;
    for (int i = 0; i < grams; i++) {
        uint64_t h = 1469598103934665603ull;
        for (int k = 0; k < order; k++) h = (h ^ (uint32_t)ids[i + k]) * 1099511628211ull;
        size_t j = (size_t)(h ^ (h >> 29)) & (cap - 1);
        for (;; j = (j + 1) & (cap - 1)) {
            if (slot[j] < 0) {
                slot[j] = i;
                break;
            }
            if (!memcmp(ids + slot[j], ids + i, (size_t)order * sizeof(int32_t))) {
                repeated++;
                break;
            }
        }
    }
    free(slot);
    return (double)repeated / grams;
}
