/*
 * Filling a kvlm_error. Every failure path in the library goes through
 * kvlm_fail so messages are formatted one way and the status is returned
 * in the same statement: `return kvlm_fail(err, KVLM_ERR_FORMAT, "...")`.
 */
#ifndef KVLM_ERROR_H
#define KVLM_ERROR_H

#include "kvlm.h"

/* Formats the message into err (if non-NULL) and returns code. */
int kvlm_fail(kvlm_error *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Clears err to KVLM_OK with an empty message. */
void kvlm_error_clear(kvlm_error *err);

#endif
