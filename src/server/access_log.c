/*
 * Access log lines (see access_log.h). Text lines:
 *   2026-12-02T03:04:05.678Z 127.0.0.1 "POST /v1/completions" 200 tokens=12+40 ttft_ms=8.1 total_ms=310.4 bytes=812
 * JSON lines carry the same fields under the names time, client, method,
 * path, status, prompt_tokens, completion_tokens, ttft_ms, total_ms,
 * bytes (token counts and ttft_ms null when they do not apply). The path
 * is the request's, query string excluded; control characters and quotes
 * in it are replaced, so a line stays one line.
 */
#include "server/access_log.h"

#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

struct access_log {
    pthread_mutex_t mu;
    FILE *f;          /* stderr or the file */
    char *path;       /* NULL: stderr */
    int json;
};

access_log *access_log_open(const char *path, int json, kvlm_error *err) {
    access_log *l = calloc(1, sizeof *l);
    if (!l) {
        kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&l->mu, NULL);
    l->json = json;
    l->f = stderr;
    if (path) {
        l->path = strdup(path);
        l->f = l->path ? fopen(path, "a") : NULL;
        if (!l->f) {
            kvlm_error_set(err, KVLM_ERR_IO, "--access-log: cannot open '%s' for appending", path);
            access_log_close(l);
            return NULL;
        }
        setvbuf(l->f, NULL, _IOLBF, 0);
    }
    return l;
}

int access_log_reopen(access_log *l) {
    if (!l || !l->path) return 0;
    FILE *f = fopen(l->path, "a");
    if (!f) return -1;
    setvbuf(f, NULL, _IOLBF, 0);
    pthread_mutex_lock(&l->mu);
    FILE *old = l->f;
    l->f = f;
    pthread_mutex_unlock(&l->mu);
    if (old && old != stderr) fclose(old);
    return 0;
}

void access_log_close(access_log *l) {
    if (!l) return;
    if (l->f && l->f != stderr) fclose(l->f);
    pthread_mutex_destroy(&l->mu);
    free(l->path);
    free(l);
}

static void clean_path(const char *in, char *out, size_t cap) {
    size_t n = 0;
    for (; in && *in && *in != '?' && n + 1 < cap; in++)
        out[n++] = ((unsigned char)*in < 0x20 || *in == '"' || *in == '\\' || *in == 0x7f) ? '_' : *in;
    out[n] = 0;
}

void access_log_write(access_log *l, const access_entry *e) {
    if (!l) return;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char when[64], path[512], method[24];
    snprintf(when, sizeof when, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
             tm.tm_hour, tm.tm_min, tm.tm_sec, (int)(tv.tv_usec / 1000));
    clean_path(e->path, path, sizeof path);
    clean_path(e->method, method, sizeof method);
    const char *client = e->client ? e->client : "-";
    char *line = NULL;
    if (l->json) {
        json_t *o = json_pack("{s:s,s:s,s:s,s:s,s:i,s:o,s:o,s:o,s:f,s:I}", "time", when, "client", client, "method",
                              method, "path", path, "status", e->status, "prompt_tokens",
                              e->prompt_tokens >= 0 ? json_integer(e->prompt_tokens) : json_null(),
                              "completion_tokens",
                              e->completion_tokens >= 0 ? json_integer(e->completion_tokens) : json_null(), "ttft_ms",
                              e->ttft_ms >= 0 ? json_real(e->ttft_ms) : json_null(), "total_ms", e->total_ms,
                              "bytes", (json_int_t)e->bytes);
        line = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6)) : NULL;
        json_decref(o);
        if (!line) return;
    } else {
        char tokens[48] = "-", ttft[32] = "-";
        if (e->prompt_tokens >= 0) snprintf(tokens, sizeof tokens, "%d+%d", e->prompt_tokens, e->completion_tokens);
        if (e->ttft_ms >= 0) snprintf(ttft, sizeof ttft, "%.1f", e->ttft_ms);
        size_t cap = 1024;
        if (!(line = malloc(cap))) return;
        snprintf(line, cap, "%s %s \"%s %s\" %d tokens=%s ttft_ms=%s total_ms=%.1f bytes=%llu", when, client, method,
                 path, e->status, tokens, ttft, e->total_ms, e->bytes);
    }
    pthread_mutex_lock(&l->mu);
    fprintf(l->f, "%s\n", line);
    fflush(l->f);
    pthread_mutex_unlock(&l->mu);
    free(line);
}
