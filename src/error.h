/*
 * Filling a kvlm_error inside the library. Every failure path goes through
 * kvlm_error_set (public, kvlm.h) so messages are formatted one way and the
 * status is returned in the same statement:
 * `return kvlm_error_set(err, KVLM_ERR_FORMAT, "...")`.
 */
#ifndef KVLM_ERROR_H
#define KVLM_ERROR_H

#include "kvlm.h"

/* Clears err to KVLM_OK with an empty message. */
void kvlm_error_clear(kvlm_error *err);

#endif
