/*
 * Lookups in the embedded web page (see static_files.h): which file a URL
 * names, its media type, and If-None-Match against its entity tag.
 */
#include "server/static_files.h"

#include <string.h>

const static_file *static_find(const char *url) {
    if (!strcmp(url, "/")) url = "/index.html";
    for (size_t i = 0; i < static_files_count; i++)
        if (!strcmp(url, static_files[i].path)) return &static_files[i];
    return NULL;
}

const char *static_content_type(const char *path) {
    static const struct {
        const char *ext, *type;
    } types[] = {
        {".html", "text/html; charset=utf-8"},
        {".css", "text/css; charset=utf-8"},
        {".js", "text/javascript; charset=utf-8"},
        {".json", "application/json"},
        {".svg", "image/svg+xml"},
        {".png", "image/png"},
        {".ico", "image/x-icon"},
    };
    const char *dot = strrchr(path, '.');
    for (size_t i = 0; dot && i < sizeof types / sizeof types[0]; i++)
        if (!strcmp(dot, types[i].ext)) return types[i].type;
    return "application/octet-stream";
}

int static_etag_matches(const char *inm, const char *etag) {
    if (!inm) return 0;
    const size_t n = strlen(etag);
    for (const char *p = inm; *p;) {
        p += strspn(p, " \t,");
        if (*p == '*') return 1;
        if (!strncmp(p, "W/", 2)) p += 2;
        const size_t len = strcspn(p, ",");
        size_t l = len;
        while (l && (p[l - 1] == ' ' || p[l - 1] == '\t')) l--;
        if (l == n && !memcmp(p, etag, n)) return 1;
        p += len;
    }
    return 0;
}
