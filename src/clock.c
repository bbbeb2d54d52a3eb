/* Monotonic wall clock for the figures kvlm reports. */
#include <time.h>

#include "kvlm.h"

double kvlm_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
