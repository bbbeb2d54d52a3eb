/*
 * The web page of `kvlm serve` (docs/web.md): the files of web/, embedded
 * in the binary at build time (tools/embed_files.c writes the table), and
 * their answers: GET and HEAD of "/" (index.html) and of "/NAME" for each
 * file, with its Content-Type, a strong ETag (304 on a matching
 * If-None-Match) and "Cache-Control: no-cache" (the browser revalidates,
 * so a new binary's page is never stale). They need no API key: the page
 * sends the key with its API calls.
 */
#ifndef KVLM_SERVER_STATIC_FILES_H
#define KVLM_SERVER_STATIC_FILES_H

#include <stddef.h>

typedef struct static_file {
    const char *path;          /* the URL path: "/index.html" */
    const unsigned char *data;
    size_t len;
    const char *etag;          /* quoted: "\"0123456789abcdef\"" */
} static_file;

/* Written by tools/embed_files.c (build/web_files.c). */
extern const static_file static_files[];
extern const size_t static_files_count;

/* The file served at url ("/" is "/index.html"), or NULL. */
const static_file *static_find(const char *url);
/* The Content-Type for a file name, from its extension. */
const char *static_content_type(const char *path);
/* Whether an If-None-Match value (a list of entity tags, or "*") matches
 * etag; weak tags (W/"...") compare by their opaque part, as RFC 9110 says
 * If-None-Match does. */
int static_etag_matches(const char *if_none_match, const char *etag);

#endif
