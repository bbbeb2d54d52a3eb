/*
 * kvlm measurement API: the entry points of kvlm's benchmarks and reports,
 * kept out of kvlm.h because a program that only generates text needs none
 * of them. Statistics of a next-token distribution and of a generated
 * sequence, the bytes a decode step reads, the machine's read bandwidth and
 * the paged-vs-contiguous attention benchmark. Same conventions as kvlm.h
 * (errors, handles); include it explicitly.
 */
#ifndef KVLM_MEASURE_H
#define KVLM_MEASURE_H

#include <stddef.h>
#include <stdint.h>

#include "kvlm.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* ----------------------------------------------------------- statistics */

typedef struct kvlm_dist_stats {
    double entropy;    /* nats */
    double top1;       /* probability of the most likely token */
    double top5;       /* mass of the 5 most likely tokens */
    int n90;           /* tokens needed to cover 90% of the mass */
    int support;       /* tokens with non-zero probability */
} kvlm_dist_stats;

/* Statistics of softmax(logits / temperature) (temperature > 0), or of the
 * distribution the sampler chain keeps when `chain` is non-NULL. Returns
 * 0, KVLM_ERR_ARG (an empty vocabulary, a temperature not above 0 without
 * a chain) or KVLM_ERR_NOMEM. */
int kvlm_dist_stats_compute(const float *logits, int vocab, float temperature,
                            kvlm_sampler *chain, kvlm_dist_stats *out,
                            kvlm_error *err);
/* Distinct ids / ids (0 for an empty sequence). */
double kvlm_distinct_ratio(const int32_t *ids, int n);
/* Share of the n - order + 1 order-grams of ids that already occurred
 * earlier in the same sequence (0 when there are none). */
double kvlm_repeated_ngram_rate(const int32_t *ids, int n, int order);

/* ------------------------------------------------------ decode roofline */

/* Bytes of weights read by one decode step (every matrix once, plus one
 * embedding row); the numerator of the bandwidth roofline. For a mixture
 * of experts, the active bytes per token: each layer's router, shared
 * expert and n_expert_used of its experts. */
size_t kvlm_model_decode_bytes(const kvlm_model *m);

/* The kernel that multiplies batches of rows (prefill, batched decode) by
 * each of m's f32 / f16 / bf16 weight matrices under isa: packed panels or
 * tiles straight from the stored weights. Both give the same bits; each
 * process times the two once per weight dtype and input width K and keeps
 * the faster (KVLM_FLOAT_BATCH=packed or =direct skips the timing). One
 * entry per distinct (dtype, K) of m's float matrices, measuring any not
 * yet measured; returns the number of entries (at most cap written), 0 if
 * m has no float matrices or isa has one kernel only. */
typedef struct kvlm_float_batch_choice {
    kvlm_dtype dtype;
    int cols;                    /* K: the matrices' input features */
    int direct;                  /* 1: tiles from the stored weights, 0: packed panels */
    int forced;                  /* chosen by KVLM_FLOAT_BATCH, nothing timed */
    double packed_us, direct_us; /* best time of each form on a 48 x K x 48 batch */
} kvlm_float_batch_choice;
int kvlm_model_float_batch(const kvlm_model *m, kvlm_isa isa, kvlm_float_batch_choice *out, int cap);

/* ----------------------------------------------------------- benchmarks */

/* Best-of-`passes` read bandwidth in bytes/s: `threads` threads (0: one per
 * processor the process may run on) read a buffer of
 * kvlm_read_bandwidth_buffer_bytes(bytes), alternating a sequential pass
 * and a pass in the decode matmul's pattern (several interleaved row
 * streams per thread, the next tile prefetched). 0 if the buffer cannot
 * be allocated. */
double kvlm_measure_read_bandwidth_threads(size_t bytes, int passes, int threads);
/* The same with threads 0. */
double kvlm_measure_read_bandwidth(size_t bytes, int passes);
/* Best-of-`passes` read bandwidth in bytes/s over the bytes one decode
 * step of m reads (kvlm_model_decode_bytes' ranges, in the memory they
 * live in: a file mapping or the loader's buffers), each range split
 * between `threads` threads (0: one per processor) and read sequentially
 * in whole 64-byte lines. 0 if m has no weights to read. */
double kvlm_measure_weight_read_bandwidth(const kvlm_model *m, int passes, int threads);
/* The buffer the measurement reads for a request of `bytes`: raised to at
 * least twice the largest cache sysfs reports (so it streams from DRAM),
 * rounded down to whole 32 KiB tiles. */
size_t kvlm_read_bandwidth_buffer_bytes(size_t bytes);

/* Attention read through a block table against the same context stored
 * contiguously: two KV pools for the model hold identical K/V for ctx_len
 * tokens, one as a single block of ctx_len tokens, one in blocks of
 * block_size (scatter 1: taken in random order from a pool 4x larger). A
 * pass is one query head over the whole context with the engine's decode
 * kernels (scores per block, softmax, weighted sum of V per block; the
 * heads of a KV group share each block's read, as in decode, and a pass's
 * time is the group's divided by its heads); a round sweeps every layer
 * and KV head (or repeats one query head, hot), and rounds alternate
 * the two layouts. Runs on the calling thread only and times that thread's
 * CPU time (time slices other processes take on a shared machine are not
 * counted). The two outputs are compared (KVLM_ERR_FORMAT if they differ). */
typedef struct kvlm_attn_bench_options {
    int ctx_len;           /* tokens attended over, 1..n_ctx; 0 means n_ctx */
    int block_size;        /* paged layout; 0 means 16 */
    int scatter;           /* 1: paged blocks scattered in the pool */
    int rounds;            /* timed rounds per layout; 0 means 5 */
    int hot;               /* 1: repeat one layer's one head (context in cache)
                              instead of sweeping every layer and head */
    kvlm_isa isa;
    kvlm_dtype kv_dtype;   /* KVLM_F32, KVLM_F16 or KVLM_Q8_0 */
    uint64_t seed;         /* K, V, queries and the scatter */
} kvlm_attn_bench_options;

/* Initialise with it: ctx_len 0 (the model's context window), block_size
 * 16, scatter 1, rounds 5, hot 0, isa KVLM_ISA_AUTO, kv_dtype KVLM_F32,
 * seed 1. (A zero-initialised struct keeps working; it differs in scatter
 * 0 and seed 0.) */
kvlm_attn_bench_options kvlm_attn_bench_default_params(void);

typedef struct kvlm_attn_bench_result {
    double contiguous_s, paged_s;               /* CPU seconds per pass, best round */
    double contiguous_median_s, paged_median_s; /* CPU seconds per pass, median round */
    double paired_ratio;                        /* median over rounds of paged / contiguous
                                                   timed back to back in that round */
    long passes_per_round;
    double max_abs_diff;                        /* between the two layouts' outputs */
} kvlm_attn_bench_result;

/* Returns 0 or a negative status (KVLM_ERR_ARG naming the option out of
 * range, KVLM_ERR_UNSUPPORTED, KVLM_ERR_NOMEM, KVLM_ERR_FORMAT). */
int kvlm_measure_attention(const kvlm_model *m, const kvlm_attn_bench_options *opt,
                           kvlm_attn_bench_result *res, kvlm_error *err);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* KVLM_MEASURE_H */
