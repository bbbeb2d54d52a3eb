/* kvlm_error helpers: kvlm_error_set, the one way a failure message is
 * formatted (see kvlm.h), and kvlm_error_clear (see error.h). */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>

int kvlm_error_set(kvlm_error *err, int code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

void kvlm_error_clear(kvlm_error *err) {
    if (err) {
        err->code = KVLM_OK;
        err->msg[0] = 0;
    }
}
