/* Raw text bytes as a JSON string (see json_text.h). */
#include "cli/json_text.h"

#include <stdlib.h>
#include <stdint.h>

#include "kvlm.h"

json_t *cli_json_text(const char *bytes, size_t n) {
    json_t *j = json_stringn(bytes ? bytes : "", n);
    if (j) return j;
    char *clean = n <= SIZE_MAX / 3 ? malloc(3 * n) : NULL;
    j = clean ? json_stringn(clean, kvlm_utf8_sanitize(bytes, n, clean)) : NULL;
    free(clean);
    return j ? j : json_null();
}
