/*
 * The byte ranges of weights one decode step reads (decode_bytes.c), for
 * the roofline's numerator and for the read test over the weights
 * themselves (weight_bandwidth.c).
 */
#ifndef KVLM_MEASURE_DECODE_RANGES_H
#define KVLM_MEASURE_DECODE_RANGES_H

#include <stddef.h>

#include "kvlm.h"

typedef struct decode_range {
    const void *data;
    size_t bytes;
} decode_range;

/* Writes up to cap ranges (every weight matrix in full, the output head,
 * one row of each embedding table) and returns how many there are. */
int model_decode_ranges(const kvlm_model *m, decode_range *r, int cap);

#endif
