/*
 * The access log: one line per finished HTTP request, on stderr or in a
 * file (reopened on request, for log rotation), as text or as one JSON
 * object per line. A line holds the time, the client address, method,
 * path, status, prompt and completion tokens, time to first token and
 * total milliseconds and the body bytes sent; never the request body or
 * any prompt text. One mutex around each write and the reopen.
 */
#ifndef KVLM_SERVER_ACCESS_LOG_H
#define KVLM_SERVER_ACCESS_LOG_H

#include "kvlm.h"

typedef struct access_log access_log;

typedef struct access_entry {
    const char *client;       /* numeric address */
    const char *method, *path;
    int status;
    int prompt_tokens, completion_tokens;   /* -1: not a completion */
    double ttft_ms;           /* < 0: no token was sent */
    double total_ms;
    unsigned long long bytes; /* response body bytes handed to the socket */
} access_entry;

/* path NULL: stderr. Returns NULL and fills err when the file cannot be opened. */
access_log *access_log_open(const char *path, int json, kvlm_error *err);
void access_log_write(access_log *l, const access_entry *e);
/* Reopens the file under the same name (no-op on stderr); 0 or -1. */
int access_log_reopen(access_log *l);
void access_log_close(access_log *l);

#endif
