/* Raw text bytes in JSON bodies (see text_stream.h). */
#include "server/text_stream.h"

#include "kvlm.h"
#include "server/sbuf.h"

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
    sbuf clean = {0};
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = kvlm_utf8_char_len((const char *)p + i, n - i);
        if (k) {
            sbuf_add(&clean, p + i, k);
            i += k;
        } else {
            sbuf_add(&clean, "\xEF\xBF\xBD", 3); /* U+FFFD */
            i++;
        }
    }
    json_t *j = clean.failed ? NULL : json_stringn(clean.data ? clean.data : "", clean.len);
    sbuf_free(&clean);
    return j;
}
