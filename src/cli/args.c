/* Command-line parsing helpers shared by the subcommands (see args.h). */
#include "cli/args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int arg_int(const char *flag, const char *s, long lo, long hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno) {
        fprintf(stderr, "kvlm: %s: '%s' is not an integer\n", flag, s);
        return -1;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "kvlm: %s: %ld is outside [%ld, %ld]\n", flag, v, lo, hi);
        return -1;
    }
    *out = (int)v;
    return 0;
}

int arg_u64(const char *flag, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (!*s || *end || errno || *s == '-') {
        fprintf(stderr, "kvlm: %s: '%s' is not a non-negative integer\n", flag, s);
        return -1;
    }
    *out = v;
    return 0;
}

int arg_float(const char *flag, const char *s, double lo, double hi, float *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v)) {
        fprintf(stderr, "kvlm: %s: '%s' is not a number\n", flag, s);
        return -1;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "kvlm: %s: %g is outside [%g, %g]\n", flag, v, lo, hi);
        return -1;
    }
    *out = (float)v;
    return 0;
}

int arg_floats(const char *flag, const char *s, double lo, double hi, float *out, int max, int *n) {
    char buf[512];
    if (strlen(s) >= sizeof buf) {
        fprintf(stderr, "kvlm: %s: list too long\n", flag);
        return -1;
    }
    strcpy(buf, s);
    int k = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (k == max) {
            fprintf(stderr, "kvlm: %s: at most %d values\n", flag, max);
            return -1;
        }
        if (arg_float(flag, t, lo, hi, &out[k])) return -1;
        k++;
    }
    if (!k) {
        fprintf(stderr, "kvlm: %s: no values given\n", flag);
        return -1;
    }
    *n = k;
    return 0;
}

int arg_ids(const char *flag, const char *s, int32_t **ids, size_t *n) {
    size_t cap = 16, k = 0;
    int32_t *v = malloc(cap * sizeof *v);
    const char *p = s;
    while (v) {
        while (*p == ' ' || *p == ',' || *p == '\t' || *p == '\n' || *p == '\r') p++;
        if (!*p) break;
        size_t w = strcspn(p, " ,\t\n\r");
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end != p + w || errno || x < 0 || x > INT32_MAX) {
            fprintf(stderr, "kvlm: %s: '%s' is not a list of token ids: '%.*s' is not a non-negative integer\n",
                    flag, s, (int)(w > 64 ? 64 : w), p);
            free(v);
            return -1;
        }
        if (k == cap) {
            int32_t *nv = realloc(v, (cap *= 2) * sizeof *v);
            if (!nv) {
                free(v);
                v = NULL;
                break;
            }
            v = nv;
        }
        v[k++] = (int32_t)x;
        p = end;
    }
    if (!v || k == 0) {
        fprintf(stderr, "kvlm: %s: %s\n", flag, v ? "no token ids given" : "out of memory");
        free(v);
        return -1;
    }
    *ids = v;
    *n = k;
    return 0;
}

char *arg_read_file(const char *flag, const char *path, size_t *len) {
    FILE *f = strcmp(path, "-") ? fopen(path, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "kvlm: %s: cannot read %s: %s\n", flag, path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        char *nb = cap > ((size_t)1 << 40) ? NULL : realloc(buf, cap * 2 + 1);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    int bad = ferror(f);
    if (f != stdin) fclose(f);
    if (bad || !buf) {
        fprintf(stderr, "kvlm: %s: cannot read %s: %s\n", flag, path, bad ? "read error" : "out of memory");
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

void cli_print_json(const json_t *doc) {
    char *s = json_dumps(doc, JSON_INDENT(2) | JSON_REAL_PRECISION(6));
    if (s) puts(s);
    free(s);
}
