/* The read loops of read_sum.h with 32-byte AVX2 loads (two per line). */
#include <immintrin.h>

#include "measure/read_sum.h"

#define RS_NAME read_sum_avx2
#define RS_VEC __m256i
#define RS_LANES 4
#define RS_ZERO() _mm256_setzero_si256()
#define RS_LOAD(p) _mm256_load_si256((const __m256i *)(p))
#define RS_ADD(a, b) _mm256_add_epi64(a, b)
#define RS_STORE(p, v) _mm256_storeu_si256((__m256i *)(p), v)
#include "measure/read_sum_body.h"
