/* The read loops of read_sum.h with 64-byte AVX-512 loads (one per line). */
#include <immintrin.h>

#include "measure/read_sum.h"

#define RS_NAME read_sum_avx512
#define RS_VEC __m512i
#define RS_LANES 8
#define RS_ZERO() _mm512_setzero_si512()
#define RS_LOAD(p) _mm512_load_si512((const void *)(p))
#define RS_ADD(a, b) _mm512_add_epi64(a, b)
#define RS_STORE(p, v) _mm512_storeu_si512((void *)(p), v)
#include "measure/read_sum_body.h"
