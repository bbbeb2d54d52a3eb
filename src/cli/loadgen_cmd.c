/*
 * `kvlm loadgen`: load for an OpenAI-compatible server (kvlm serve or any
 * other), measured from the client side. Streaming /v1/completions
 * requests are sent either open-loop, with Poisson arrivals at --rate
 * requests/s (the arrival times do not wait for responses), or closed-loop
 * with --concurrency requests always in flight (1 is a loop of single
 * requests). Reported: request throughput, output tokens/s, and
 * mean/p50/p90/p99 of time to first token (TTFT), time per output token
 * (TPOT = (end-to-end - TTFT) / (output tokens - 1)), inter-token latency
 * (gaps between streamed events) and end-to-end latency; as a table or
 * --json.
 *
 * One thread, non-blocking sockets and poll(): plain HTTP/1.1 over TCP,
 * one connection per request (Connection: close), chunked or
 * length-delimited bodies, server-sent events parsed as they arrive.
 * Output tokens are the server's usage.completion_tokens (requested with
 * stream_options.include_usage), or the number of text events when a
 * server sends no usage.
 */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "server/posix_fd.h"

typedef struct lg_opts {
    char host[256];
    int port;
    double rate;
    int concurrency, n, prompt_len, vocab, max_tokens, allow_eos, json;
    float temperature;
    const char *prompt_file, *model;
    uint64_t seed;
} lg_opts;

typedef struct lg_req {
    int fd, state, status, failed;
    char *out;               /* request bytes */
    size_t out_len, out_pos;
    char *in;                /* response bytes: headers, then the decoded body */
    size_t in_len, in_cap, body_start, sse_pos;
    int chunked, head_done;
    size_t chunk_left;       /* chunked decoding: bytes left in the current chunk */
    char *raw;               /* chunked decoding: raw bytes not yet decoded */
    size_t raw_len, raw_cap;
    double t_start, t_first, t_last, t_end;
    int events, usage_tokens, done;
    double *gaps;            /* inter-event gaps */
    int n_gaps, cap_gaps;
} lg_req;

enum { ST_IDLE, ST_CONNECT, ST_SEND, ST_READ, ST_DONE };

/* ---------------------------------------------------------------- options */

static int parse_url(const char *url, lg_opts *o) {
    const char *p = url;
    if (!strncmp(p, "http://", 7)) p += 7;
    else if (strstr(p, "://")) {
        fprintf(stderr, "kvlm loadgen: --url: only http:// is supported\n");
        return -1;
    }
    o->port = 80;
    const char *end = p + strcspn(p, "/");
    const char *colon = NULL;
    if (*p == '[') { /* [IPv6]:port */
        const char *rb = memchr(p, ']', (size_t)(end - p));
        if (!rb) return -1;
        snprintf(o->host, sizeof o->host, "%.*s", (int)(rb - p - 1), p + 1);
        colon = rb + 1 < end && rb[1] == ':' ? rb + 1 : NULL;
    } else {
        colon = memchr(p, ':', (size_t)(end - p));
        snprintf(o->host, sizeof o->host, "%.*s", (int)((colon ? colon : end) - p), p);
    }
    if (colon) {
        char port[16];
        snprintf(port, sizeof port, "%.*s", (int)(end - colon - 1), colon + 1);
        if (arg_int("--url port", port, 1, 65535, &o->port)) return -1;
    }
    return o->host[0] ? 0 : -1;
}

static int parse_rate(const char *flag, const char *v, void *dst) {
    float f;
    if (arg_float(flag, v, 1e-6, 1e6, &f)) return -1;
    *(double *)dst = f;
    return 0;
}

static int parse(int argc, char **argv, lg_opts *o) {
    *o = (lg_opts){.concurrency = 0, .n = 32, .prompt_len = 32, .vocab = 200, .max_tokens = 64, .temperature = 1,
                   .seed = 1};
    const char *url = NULL;
    const cli_opt own[] = {
        CLI_STR("--url", "URL", "the server: http://HOST:PORT (required)", &url),
        CLI_FN("--rate", "R", "open loop: Poisson arrivals at R requests/s", parse_rate, &o->rate),
        CLI_INT("--concurrency", "C", "closed loop: C requests in flight (default 1)", &o->concurrency, 1, 4096),
        CLI_INT("-n", "N", "requests to send (default 32)", &o->n, 1, 1 << 24),
        CLI_STR("--prompt-file", "F", "prompts as text, one per line (used in turn)", &o->prompt_file),
        CLI_INT("--prompt-len", "L", "generated prompts of L token ids (default 32)", &o->prompt_len, 1, 1 << 20),
        CLI_INT("--vocab", "V", "generated ids are drawn from [0, V) (default 200)", &o->vocab, 1, 1 << 30),
        CLI_INT("--max-tokens", "N", "tokens to generate per request (default 64)", &o->max_tokens, 1, 1 << 20),
        CLI_FLOAT("--temperature", "T", "sampling temperature (default 1; seeds differ per request)", &o->temperature,
                  0, 2),
        CLI_SWITCH("--allow-eos", "let requests stop at end-of-text (default: ignore_eos, fixed lengths)",
                   &o->allow_eos, 1),
        CLI_STR("--model", "NAME", "the model field to send (default: none, the server's model)", &o->model),
        CLI_U64("--seed", "S", "seed of arrivals and generated prompts (default 1)", &o->seed),
        CLI_END,
    };
    cli_spec spec = {
        .cmd = "loadgen",
        .usage = "loadgen --url http://HOST:PORT [options]",
        .about = "Streaming /v1/completions load for an OpenAI-compatible server: throughput, TTFT,\n"
                 "TPOT, inter-token and end-to-end latency percentiles.\n",
        .groups = CLI_JSON,
        .unused = "the server holds the model; loadgen only sends requests",
        .opts = own,
        .json = &o->json,
    };
    if (cli_parse(&spec, argc, argv)) return -1;
    if (!url || parse_url(url, o)) return cli_usage_error(&spec, "give --url http://HOST:PORT");
    if (o->rate > 0 && o->concurrency > 0)
        return cli_usage_error(&spec, "give at most one of --rate and --concurrency");
    if (o->rate <= 0 && o->concurrency == 0) o->concurrency = 1;
    return 0;
}

/* Prompts from a file: its non-empty lines. */
static char **read_prompts(const char *path, int *n) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "kvlm loadgen: %s: cannot open: %s\n", path, strerror(errno));
        return NULL;
    }
    char **v = NULL, *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int k = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) line[--len] = 0;
        if (len == 0) continue;
        char **nv = realloc(v, (size_t)(k + 1) * sizeof *v);
        if (!nv) break;
        v = nv;
        v[k++] = strdup(line);
    }
    free(line);
    fclose(f);
    if (k == 0) fprintf(stderr, "kvlm loadgen: %s: no prompts (one per line)\n", path);
    *n = k;
    return v;
}

/* --------------------------------------------------------------- requests */

static uint64_t rng_next(uint64_t *s) {
    uint64_t x = (*s += 0x9e3779b97f4a7c15ull);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static double rng_unit(uint64_t *s) { return ((double)(rng_next(s) >> 11) + 0.5) / 9007199254740992.0; }

static char *request_bytes(const lg_opts *o, int index, char **prompts, int n_prompts, size_t *len) {
    json_t *body = json_object();
    if (prompts) {
        json_object_set_new(body, "prompt", json_string(prompts[index % n_prompts]));
    } else {
        uint64_t rs = o->seed * 1000003u + (uint64_t)index;
        json_t *ids = json_array();
        for (int i = 0; i < o->prompt_len; i++) json_array_append_new(ids, json_integer((json_int_t)(rng_next(&rs) % (uint64_t)o->vocab)));
        json_object_set_new(body, "prompt", ids);
    }
    if (o->model) json_object_set_new(body, "model", json_string(o->model));
    json_object_set_new(body, "max_tokens", json_integer(o->max_tokens));
    json_object_set_new(body, "temperature", json_real(o->temperature));
    json_object_set_new(body, "seed", json_integer(index));
    json_object_set_new(body, "stream", json_true());
    json_object_set_new(body, "stream_options", json_pack("{s:b}", "include_usage", 1));
    if (!o->allow_eos) json_object_set_new(body, "ignore_eos", json_true());
    char *b = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    if (!b) return NULL;
    size_t blen = strlen(b);
    int n = snprintf(NULL, 0, "POST /v1/completions HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                     "Accept: text/event-stream\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n%s",
                     o->host, o->port, blen, b);
    char *out = malloc((size_t)n + 1);
    if (out)
        snprintf(out, (size_t)n + 1, "POST /v1/completions HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                 "Accept: text/event-stream\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n%s",
                 o->host, o->port, blen, b);
    free(b);
    *len = out ? (size_t)n : 0;
    return out;
}

static int open_socket(const struct sockaddr_storage *sa, socklen_t sl) {
    int fd = socket_cloexec(sa->ss_family, SOCK_STREAM, 1);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (const struct sockaddr *)sa, sl) < 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    return fd;
}

static int append(char **buf, size_t *len, size_t *cap, const char *b, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 4096;
        while (c < *len + n + 1) c *= 2;
        char *nb = realloc(*buf, c);
        if (!nb) return -1;
        *buf = nb;
        *cap = c;
    }
    memcpy(*buf + *len, b, n);
    *len += n;
    (*buf)[*len] = 0;
    return 0;
}

static void add_gap(lg_req *r, double g) {
    if (r->n_gaps == r->cap_gaps) {
        int c = r->cap_gaps ? 2 * r->cap_gaps : 64;
        double *ng = realloc(r->gaps, (size_t)c * sizeof *ng);
        if (!ng) return;
        r->gaps = ng;
        r->cap_gaps = c;
    }
    r->gaps[r->n_gaps++] = g;
}

/* One server-sent event's data. */
static void on_event(lg_req *r, const char *data, double now) {
    if (!strcmp(data, "[DONE]")) {
        r->done = 1;
        return;
    }
    json_t *j = json_loads(data, 0, NULL);
    if (!j) return;
    if (json_object_get(j, "error")) r->failed = 1;
    json_t *u = json_object_get(j, "usage");
    if (json_is_object(u)) r->usage_tokens = (int)json_integer_value(json_object_get(u, "completion_tokens"));
    json_t *c = json_array_get(json_object_get(j, "choices"), 0);
    json_t *t = json_object_get(c, "text");
    if (!t) t = json_object_get(json_object_get(c, "delta"), "content");
    if (json_is_string(t) && json_string_length(t) > 0) {
        if (r->events == 0) r->t_first = now;
        else add_gap(r, now - r->t_last);
        r->t_last = now;
        r->events++;
    }
    json_decref(j);
}

/* Parses complete events in the decoded body. */
static void scan_events(lg_req *r, double now) {
    for (;;) {
        char *start = r->in + r->sse_pos;
        char *end = strstr(start, "\n\n");
        if (!end) return;
        *end = 0;
        for (char *line = start; line && line < end;) {
            char *nl = strchr(line, '\n');
            if (nl) *nl = 0;
            if (!strncmp(line, "data: ", 6)) on_event(r, line + 6, now);
            line = nl ? nl + 1 : NULL;
        }
        r->sse_pos = (size_t)(end + 2 - r->in);
    }
}

/* Chunked transfer decoding of r->raw into the body. */
static void dechunk(lg_req *r) {
    size_t p = 0;
    while (p < r->raw_len) {
        if (r->chunk_left == 0) {
            char *crlf = memmem(r->raw + p, r->raw_len - p, "\r\n", 2);
            if (!crlf) break;
            size_t size = strtoul(r->raw + p, NULL, 16);
            if (crlf == r->raw + p) { /* the CRLF ending a chunk */
                p += 2;
                continue;
            }
            p = (size_t)(crlf - r->raw) + 2;
            if (size == 0) {
                r->done = 1;
                p = r->raw_len;
                break;
            }
            r->chunk_left = size;
        }
        size_t take = r->raw_len - p < r->chunk_left ? r->raw_len - p : r->chunk_left;
        append(&r->in, &r->in_len, &r->in_cap, r->raw + p, take);
        p += take;
        r->chunk_left -= take;
    }
    memmove(r->raw, r->raw + p, r->raw_len - p);
    r->raw_len -= p;
}

static void on_bytes(lg_req *r, const char *b, size_t n, double now) {
    if (!r->head_done) {
        append(&r->in, &r->in_len, &r->in_cap, b, n);
        char *eoh = strstr(r->in, "\r\n\r\n");
        if (!eoh) return;
        r->head_done = 1;
        *eoh = 0;
        r->status = atoi(r->in + 9);
        for (char *h = r->in; *h; h++) *h = (char)(*h >= 'A' && *h <= 'Z' ? *h + 32 : *h);
        r->chunked = strstr(r->in, "transfer-encoding: chunked") != NULL;
        size_t rest = r->in_len - (size_t)(eoh + 4 - r->in);
        char *tail = malloc(rest + 1);
        if (tail) memcpy(tail, eoh + 4, rest);
        r->in_len = 0;
        r->sse_pos = 0;
        if (tail) {
            if (r->chunked) append(&r->raw, &r->raw_len, &r->raw_cap, tail, rest), dechunk(r);
            else append(&r->in, &r->in_len, &r->in_cap, tail, rest);
            free(tail);
        }
    } else if (r->chunked) {
        append(&r->raw, &r->raw_len, &r->raw_cap, b, n);
        dechunk(r);
    } else {
        append(&r->in, &r->in_len, &r->in_cap, b, n);
    }
    if (r->in) scan_events(r, now);
}

/* ------------------------------------------------------------- statistics */

typedef struct dist {
    double mean, p50, p90, p99;
    int n;
} dist;

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double pct(const double *v, int n, double q) {
    if (n == 0) return 0;
    double pos = q * (n - 1);
    int lo = (int)pos;
    return lo + 1 < n ? v[lo] + (pos - lo) * (v[lo + 1] - v[lo]) : v[lo];
}

static dist summarise(double *v, int n) {
    dist d = {.n = n};
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    for (int i = 0; i < n; i++) d.mean += v[i] / n;
    d.p50 = pct(v, n, 0.5);
    d.p90 = pct(v, n, 0.9);
    d.p99 = pct(v, n, 0.99);
    return d;
}

static json_t *dist_json(dist d) {
    return json_pack("{s:f,s:f,s:f,s:f,s:i}", "mean", d.mean * 1e3, "p50", d.p50 * 1e3, "p90", d.p90 * 1e3, "p99",
                     d.p99 * 1e3, "n", d.n);
}

static void report(const lg_opts *o, lg_req *reqs, int n, double duration) {
    double *ttft = calloc((size_t)n + 1, sizeof *ttft), *tpot = calloc((size_t)n + 1, sizeof *tpot),
           *e2e = calloc((size_t)n + 1, sizeof *e2e);
    int n_gaps = 0, ok = 0, n_tpot = 0;
    long long tokens = 0;
    for (int i = 0; i < n; i++) n_gaps += reqs[i].n_gaps;
    double *itl = calloc((size_t)n_gaps + 1, sizeof *itl);
    if (!ttft || !tpot || !e2e || !itl) return;
    n_gaps = 0;
    for (int i = 0; i < n; i++) {
        lg_req *r = &reqs[i];
        if (r->failed || r->status != 200 || !r->done || r->events == 0) continue;
        int out = r->usage_tokens > 0 ? r->usage_tokens : r->events;
        tokens += out;
        ttft[ok] = r->t_first - r->t_start;
        e2e[ok] = r->t_end - r->t_start;
        if (out > 1) tpot[n_tpot++] = (e2e[ok] - ttft[ok]) / (out - 1);
        ok++;
        for (int g = 0; g < r->n_gaps; g++) itl[n_gaps++] = r->gaps[g];
    }
    dist dt = summarise(ttft, ok), dp = summarise(tpot, n_tpot), di = summarise(itl, n_gaps), de = summarise(e2e, ok);
    double rps = ok / duration, tps = (double)tokens / duration;
    if (o->json) {
        json_t *j = json_pack("{s:i,s:i,s:i,s:f,s:f,s:f,s:I,s:i,s:o,s:o,s:o,s:o}", "requests", n, "ok", ok, "failed",
                              n - ok, "duration_s", duration, "request_throughput", rps, "output_tokens_per_s", tps,
                              "output_tokens", (json_int_t)tokens, "max_tokens", o->max_tokens, "ttft_ms",
                              dist_json(dt), "tpot_ms", dist_json(dp), "itl_ms", dist_json(di), "e2e_ms", dist_json(de));
        if (o->rate > 0) json_object_set_new(j, "rate", json_real(o->rate));
        else json_object_set_new(j, "concurrency", json_integer(o->concurrency));
        char *s = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(6));
        puts(s);
        free(s);
        json_decref(j);
    } else {
        if (o->rate > 0) printf("kvlm loadgen: %d requests at %.3g req/s (Poisson), %.2f s\n", n, o->rate, duration);
        else printf("kvlm loadgen: %d requests, concurrency %d, %.2f s\n", n, o->concurrency, duration);
        printf("ok / failed          %d / %d\n", ok, n - ok);
        printf("request throughput   %.3f req/s\n", rps);
        printf("output tokens/s      %.1f (%lld tokens)\n", tps, tokens);
        printf("%-20s %10s %10s %10s %10s\n", "latency (ms)", "mean", "p50", "p90", "p99");
        const char *names[] = {"TTFT", "TPOT", "inter-token", "end-to-end"};
        dist ds[] = {dt, dp, di, de};
        for (int k = 0; k < 4; k++)
            printf("%-20s %10.2f %10.2f %10.2f %10.2f\n", names[k], ds[k].mean * 1e3, ds[k].p50 * 1e3, ds[k].p90 * 1e3,
                   ds[k].p99 * 1e3);
    }
    free(ttft);
    free(tpot);
    free(e2e);
    free(itl);
}

/* -------------------------------------------------------------- the loop */

static int resolve(const lg_opts *o, struct sockaddr_storage *sa, socklen_t *sl) {
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", o->port);
    int rc = getaddrinfo(o->host, port, &hints, &res);
    if (rc || !res) {
        fprintf(stderr, "kvlm loadgen: %s: %s\n", o->host, gai_strerror(rc));
        return -1;
    }
    memcpy(sa, res->ai_addr, res->ai_addrlen);
    *sl = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

static void finish_req(lg_req *r, double now, int failed) {
    if (r->fd >= 0) close(r->fd);
    r->fd = -1;
    r->state = ST_DONE;
    r->t_end = now;
    if (failed) r->failed = 1;
}

/* Advances one request on its poll events. */
static void step_req(lg_req *r, short revents, double now) {
    if (r->state == ST_CONNECT && (revents & (POLLOUT | POLLERR | POLLHUP))) {
        int err = 0;
        socklen_t el = sizeof err;
        getsockopt(r->fd, SOL_SOCKET, SO_ERROR, &err, &el);
        if (err) {
            finish_req(r, now, 1);
            return;
        }
        r->state = ST_SEND;
    }
    if (r->state == ST_SEND && (revents & POLLOUT)) {
        ssize_t w = send(r->fd, r->out + r->out_pos, r->out_len - r->out_pos, MSG_NOSIGNAL);
        if (w < 0 && errno != EAGAIN) {
            finish_req(r, now, 1);
            return;
        }
        if (w > 0) r->out_pos += (size_t)w;
        if (r->out_pos == r->out_len) r->state = ST_READ;
    } else if (r->state == ST_READ && (revents & (POLLIN | POLLHUP | POLLERR))) {
        char buf[16384];
        ssize_t got = recv(r->fd, buf, sizeof buf, 0);
        if (got < 0 && errno == EAGAIN) return;
        if (got > 0) on_bytes(r, buf, (size_t)got, now);
        if (got <= 0 || r->done) finish_req(r, now, !r->done);
    }
}

static int run(const lg_opts *o, lg_req *reqs, char **prompts, int n_prompts, double *duration) {
    struct sockaddr_storage sa;
    socklen_t sl;
    if (resolve(o, &sa, &sl)) return -1;
    const int n = o->n, max_inflight = o->rate > 0 ? 1024 : o->concurrency;
    struct pollfd *pfd = calloc((size_t)n, sizeof *pfd);
    int *idx = calloc((size_t)n, sizeof *idx);
    if (!pfd || !idx) return -1;
    uint64_t rs = o->seed;
    const double t0 = kvlm_now();
    double next_arrival = t0;
    int started = 0, finished = 0;
    while (finished < n) {
        double now = kvlm_now();
        int inflight = started - finished;
        while (started < n && inflight < max_inflight && (o->rate <= 0 || now >= next_arrival)) {
            lg_req *r = &reqs[started];
            r->out = request_bytes(o, started, prompts, n_prompts, &r->out_len);
            r->t_start = o->rate > 0 ? next_arrival : now; /* open loop: latency counts from the arrival */
            r->fd = r->out ? open_socket(&sa, sl) : -1;
            r->state = ST_CONNECT;
            if (r->fd < 0) {
                finish_req(r, now, 1);
                finished++;
            }
            started++;
            inflight = started - finished;
            if (o->rate > 0) next_arrival += -log(rng_unit(&rs)) / o->rate;
        }
        int k = 0;
        for (int i = 0; i < started; i++)
            if (reqs[i].state != ST_DONE) {
                pfd[k] = (struct pollfd){.fd = reqs[i].fd, .events = reqs[i].state == ST_READ ? POLLIN : POLLOUT};
                idx[k++] = i;
            }
        int timeout = 100;
        if (o->rate > 0 && started < n) {
            double wait_ms = (next_arrival - now) * 1e3;
            timeout = wait_ms < 0 ? 0 : wait_ms < 100 ? (int)wait_ms + 1 : 100;
        }
        if (poll(pfd, (nfds_t)k, timeout) < 0 && errno != EINTR) break;
        now = kvlm_now();
        for (int i = 0; i < k; i++) {
            if (!pfd[i].revents) continue;
            step_req(&reqs[idx[i]], pfd[i].revents, now);
            if (reqs[idx[i]].state == ST_DONE) finished++;
        }
    }
    *duration = kvlm_now() - t0;
    free(pfd);
    free(idx);
    return 0;
}

int cli_loadgen(int argc, char **argv) {
    lg_opts o;
    if (parse(argc, argv, &o)) return EXIT_USAGE;
    int n_prompts = 0;
    char **prompts = NULL;
    if (o.prompt_file && !(prompts = read_prompts(o.prompt_file, &n_prompts))) return EXIT_USAGE;
    lg_req *reqs = calloc((size_t)o.n, sizeof *reqs);
    if (!reqs) return 1;
    for (int i = 0; i < o.n; i++) reqs[i].fd = -1;
    double duration = 0;
    int rc = run(&o, reqs, prompts, n_prompts, &duration);
    int ok = 0;
    for (int i = 0; i < o.n; i++) ok += !reqs[i].failed && reqs[i].status == 200 && reqs[i].done;
    if (!rc) report(&o, reqs, o.n, duration);
    if (!rc && ok == 0) fprintf(stderr, "kvlm loadgen: no request succeeded (is the server at %s:%d?)\n", o.host, o.port);
    for (int i = 0; i < o.n; i++) {
        free(reqs[i].out);
        free(reqs[i].in);
        free(reqs[i].raw);
        free(reqs[i].gaps);
    }
    free(reqs);
    for (int i = 0; i < n_prompts; i++) free(prompts[i]);
    free(prompts);
    return rc || ok == 0 ? 1 : 0;
}
