/* Raw text bytes in JSON documents (see json_text.h). */
#include "app/json_text.h"

#include <stdint.h>
#include <stdlib.h>

#include "kvlm.h"

int ts_utf8_valid(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = kvlm_utf8_char_len((const char *)p + i, n - i);
        if (!k) return 0;
        i += k;
    }
    return 1;
}

json_t *ts_json_string(const char *s, size_t n) {
    json_t *j = NULL;
    if (ts_utf8_valid(s, n)) {
        j = json_stringn(s ? s : "", n);
    } else {
        char *clean = n <= SIZE_MAX / 3 ? malloc(3 * n) : NULL;
        j = clean ? json_stringn(clean, kvlm_utf8_sanitize(s, n, clean)) : NULL;
        free(clean);
    }
    return j ? j : json_null();
}
