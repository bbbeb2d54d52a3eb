/* Raw text bytes as a JSON string (see text_sink.h). */
#include "cli/text_sink.h"

#include <stdlib.h>
#include <string.h>

#include "kvlm.h"

json_t *cli_json_text(const char *bytes, size_t n) {
    json_t *j = json_stringn(bytes ? bytes : "", n);
    if (j) return j;
    char *clean = malloc(n * 3 + 1);
    if (!clean) return json_null();
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = kvlm_utf8_char_len(bytes + i, n - i);
        if (k) {
            memcpy(clean + o, bytes + i, k);
            o += k, i += k;
        } else {
            memcpy(clean + o, "\xEF\xBF\xBD", 3); /* U+FFFD */
            o += 3, i++;
        }
    }
    j = json_stringn(clean, o);
    free(clean);
    return j ? j : json_null();
}
