/* Raw text bytes in JSON bodies (see json_text.h). */
#include "server/json_text.h"

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
    if (ts_utf8_valid(s, n)) return json_stringn(s ? s : "", n);
    char *clean = n <= SIZE_MAX / 3 ? malloc(3 * n) : NULL;
    json_t *j = clean ? json_stringn(clean, kvlm_utf8_sanitize(s, n, clean)) : NULL;
    free(clean);
    return j;
}
