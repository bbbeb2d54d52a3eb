/*
 * The memory and disk tiers of the KV cache (runtime/kv_tiers.h): a hash
 * table and LRU list of block copies in memory, a hash table of this
 * cache's files on disk with an LRU order, and the writer thread with its
 * bounded queue. Knows block positions only as hash, parent, token ids
 * and payload bytes; nothing about the pool.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "error.h"
#include "runtime/kv_tiers.h"

#define NBUCKET 4096
#define QUEUE_MAX 64
#define QUEUE_BYTES ((size_t)64 << 20)
#define PREFETCH_MAX 1024
#define PREFETCH_BYTES ((size_t)128 << 20)

typedef struct rnode {
    uint64_t hash, parent;
    int32_t *tokens;
    unsigned char *payload;
    struct rnode *prev, *next, *chain;
} rnode;

typedef struct dnode {
    uint64_t hash, seq;
    size_t size;
    struct dnode *chain;
} dnode;

typedef struct job {
    uint64_t hash;
    unsigned char *file;
    size_t size;
} job;

/* Block copies in memory under their chain hash, least recently used at the head. */
typedef struct rlist {
    rnode *b[NBUCKET], *head, *tail;
    size_t bytes, blocks;
} rlist;

/* A block position to read ahead (kv_tiers_prefetch). */
typedef struct want {
    uint64_t hash, parent;
    int32_t *tokens;
} want;

struct kv_tiers {
    kv_block_file_head layout;
    size_t file_bytes, payload_bytes;
    /* memory tier (owner thread only) */
    size_t ram_cap;
    rlist ram;
    /* disk tier */
    char *dir;
    char prefix[33];   /* the fingerprint in hex, cut to 16 digits */
    size_t disk_cap;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_idle, cv_read;
    pthread_t writer, reader;
    int has_writer, has_reader, stop, busy, reading, writes_off, fail_after;
    uint64_t reading_hash; /* the file the reader reads now (when reading) */
    dnode *db[NBUCKET];
    size_t disk_files, disk_bytes;
    uint64_t seq, tmp_n;
    job q[QUEUE_MAX];
    int q_head, q_n;
    size_t q_bytes;
    /* read ahead (under mu): positions asked for, and files read and checked */
    want rq[PREFETCH_MAX];
    int rq_head, rq_n;
    rlist staged;
    kvlm_kv_stats c; /* the tier_* counters */
};

static size_t bucket(uint64_t h) { return (size_t)(h ^ (h >> 29)) & (NBUCKET - 1); }

/* ------------------------------------------------------------ memory */

static rnode *list_find(rlist *l, uint64_t h) {
    for (rnode *n = l->b[bucket(h)]; n; n = n->chain)
        if (n->hash == h) return n;
    return NULL;
}

static void list_drop(rlist *l, rnode *n, size_t bytes) {
    rnode **p = &l->b[bucket(n->hash)];
    while (*p != n) p = &(*p)->chain;
    *p = n->chain;
    if (n->prev) n->prev->next = n->next;
    else l->head = n->next;
    if (n->next) n->next->prev = n->prev;
    else l->tail = n->prev;
    l->bytes -= bytes;
    l->blocks--;
    free(n->tokens), free(n->payload), free(n);
}

/* A node for (hash, parent, tokens) with an unfilled payload at the tail of
 * l, after dropping the oldest until cap holds it. NULL without memory. */
static rnode *list_add(kv_tiers *t, rlist *l, size_t cap, uint64_t hash, uint64_t parent, const int32_t *tokens) {
    rnode *old = list_find(l, hash);
    if (old) list_drop(l, old, t->payload_bytes);
    while (l->bytes + t->payload_bytes > cap && l->head) list_drop(l, l->head, t->payload_bytes);
    rnode *n = calloc(1, sizeof *n);
    const size_t tb = (size_t)t->layout.block_size * sizeof(int32_t);
    if (n) n->tokens = malloc(tb), n->payload = malloc(t->payload_bytes);
    if (!n || !n->tokens || !n->payload) {
        if (n) free(n->tokens), free(n->payload);
        free(n);
        return NULL;
    }
    n->hash = hash, n->parent = parent;
    memcpy(n->tokens, tokens, tb);
    n->chain = l->b[bucket(hash)];
    l->b[bucket(hash)] = n;
    n->prev = l->tail;
    if (l->tail) l->tail->next = n;
    else l->head = n;
    l->tail = n;
    l->bytes += t->payload_bytes;
    l->blocks++;
    return n;
}

int kv_tiers_spill(kv_tiers *t, uint64_t hash, uint64_t parent, const int32_t *tokens,
                   const unsigned char *const *slices) {
    if (!t || t->ram_cap < t->payload_bytes) return 0;
    rnode *n = list_add(t, &t->ram, t->ram_cap, hash, parent, tokens);
    if (!n) return 0;
    for (int s = 0; s < t->layout.n_slices; s++)
        memcpy(n->payload + (size_t)s * t->layout.slice_bytes, slices[s], t->layout.slice_bytes);
    t->c.tier_spills++;
    return 1;
}

/* ------------------------------------------------------------ disk map (under mu) */

static void file_name(const kv_tiers *t, uint64_t h, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/%s-%016llx.kvb", t->dir, t->prefix, (unsigned long long)h);
}

static dnode *disk_find(kv_tiers *t, uint64_t h) {
    for (dnode *n = t->db[bucket(h)]; n; n = n->chain)
        if (n->hash == h) return n;
    return NULL;
}

static void disk_add(kv_tiers *t, uint64_t h, size_t size) {
    dnode *n = disk_find(t, h);
    if (n) {
        t->disk_bytes -= n->size;
    } else {
        if (!(n = calloc(1, sizeof *n))) return;
        n->hash = h;
        n->chain = t->db[bucket(h)];
        t->db[bucket(h)] = n;
        t->disk_files++;
    }
    n->size = size;
    n->seq = ++t->seq;
    t->disk_bytes += size;
}

/* Forgets h and removes its file. */
static void disk_remove(kv_tiers *t, uint64_t h) {
    dnode **p = &t->db[bucket(h)];
    while (*p && (*p)->hash != h) p = &(*p)->chain;
    char name[4200];
    file_name(t, h, name, sizeof name);
    unlink(name);
    if (!*p) return;
    dnode *n = *p;
    *p = n->chain;
    t->disk_files--;
    t->disk_bytes -= n->size;
    free(n);
}

/* Removes least recently used files until the bound holds. */
static void disk_trim(kv_tiers *t) {
    while (t->disk_bytes > t->disk_cap && t->disk_files) {
        dnode *oldest = NULL;
        for (int b = 0; b < NBUCKET; b++)
            for (dnode *n = t->db[b]; n; n = n->chain)
                if (!oldest || n->seq < oldest->seq) oldest = n;
        disk_remove(t, oldest->hash);
    }
}

/* ------------------------------------------------------------ writer */

static int write_all(int fd, const unsigned char *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return w < 0 ? errno : ENOSPC;
        p += w, n -= (size_t)w;
    }
    return 0;
}

/* Writes one file (tmp, then rename); 0 or an errno. */
static int write_file(kv_tiers *t, const job *j, uint64_t n) {
    char tmp[4200], name[4200];
    snprintf(tmp, sizeof tmp, "%s/.tmp-%ld-%llu", t->dir, (long)getpid(), (unsigned long long)n);
    file_name(t, j->hash, name, sizeof name);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return errno;
    int e = write_all(fd, j->file, j->size);
    if (close(fd) && !e) e = errno;
    if (!e && rename(tmp, name)) e = errno;
    if (e) unlink(tmp);
    return e;
}

static void *writer_main(void *arg) {
    kv_tiers *t = arg;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->q_n && !t->stop) pthread_cond_wait(&t->cv_work, &t->mu);
        if (!t->q_n) break;
        job j = t->q[t->q_head];
        t->busy = 1;
        const uint64_t n = ++t->tmp_n;
        const int fail = t->fail_after == 0, skip = t->writes_off;
        if (t->fail_after > 0) t->fail_after--;
        pthread_mutex_unlock(&t->mu);
        if (!skip && !fail) kv_block_file_stamp(j.file, j.size); /* the checksum, off the engine thread */
        int e = skip ? 0 : fail ? ENOSPC : write_file(t, &j, n);
        pthread_mutex_lock(&t->mu);
        t->q_head = (t->q_head + 1) % QUEUE_MAX;
        t->q_n--;
        t->q_bytes -= j.size;
        if (skip) {
            t->c.tier_writes_dropped++; /* queued before the tier stopped writing */
        } else if (e) {
            t->c.tier_write_errors++;
            if (!t->writes_off)
                fprintf(stderr, "kvlm: kv disk tier %s: write failed (%s); the tier stops writing\n", t->dir,
                        strerror(e));
            t->writes_off = 1;
        } else {
            t->c.tier_bytes_written += j.size;
            disk_add(t, j.hash, j.size);
            disk_trim(t);
        }
        free(j.file);
        t->busy = 0;
        if (!t->q_n) pthread_cond_broadcast(&t->cv_idle);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

void kv_tiers_write(kv_tiers *t, uint64_t hash, uint64_t parent, const int32_t *tokens,
                    const unsigned char *const *slices) {
    if (!t || !t->has_writer) return;
    pthread_mutex_lock(&t->mu);
    const int known = disk_find(t, hash) != NULL;
    for (int i = 0; i < t->q_n && !known; i++)
        if (t->q[(t->q_head + i) % QUEUE_MAX].hash == hash) {
            pthread_mutex_unlock(&t->mu);
            return;
        }
    const int full = t->writes_off || t->q_n == QUEUE_MAX || t->q_bytes + t->file_bytes > QUEUE_BYTES;
    if (full && !known) t->c.tier_writes_dropped++;
    pthread_mutex_unlock(&t->mu);
    if (known || full) return;
    unsigned char *file = malloc(t->file_bytes);
    if (file) { /* header, ids and a copy of the slices; the writer thread computes the checksum */
        kv_block_file_head h = t->layout;
        h.hash = hash, h.parent = parent;
        unsigned char *payload = kv_block_file_encode_head(&h, tokens, file);
        for (int s = 0; s < t->layout.n_slices; s++)
            memcpy(payload + (size_t)s * t->layout.slice_bytes, slices[s], t->layout.slice_bytes);
    }
    pthread_mutex_lock(&t->mu);
    if (!file || t->q_n == QUEUE_MAX) {
        t->c.tier_writes_dropped++;
        free(file);
    } else {
        t->q[(t->q_head + t->q_n) % QUEUE_MAX] = (job){.hash = hash, .file = file, .size = t->file_bytes};
        t->q_n++;
        t->q_bytes += t->file_bytes;
        pthread_cond_signal(&t->cv_work);
    }
    pthread_mutex_unlock(&t->mu);
}

void kv_tiers_flush(kv_tiers *t) {
    if (!t || !t->has_writer) return;
    pthread_mutex_lock(&t->mu);
    while (t->q_n || (t->has_reader && (t->rq_n || t->reading))) pthread_cond_wait(&t->cv_idle, &t->mu);
    pthread_mutex_unlock(&t->mu);
}

void kv_tiers_fail_writes_after(kv_tiers *t, int n) {
    pthread_mutex_lock(&t->mu);
    t->fail_after = n;
    pthread_mutex_unlock(&t->mu);
}

/* ------------------------------------------------------------ fetch */

/* Reads the file of hash whole: malloc'ed bytes and *n, or NULL (no file). */
static unsigned char *read_file(const char *name, size_t *n) {
    int fd = open(name, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat sb;
    unsigned char *buf = NULL;
    if (!fstat(fd, &sb) && sb.st_size >= 0 && (buf = malloc((size_t)sb.st_size + 1))) {
        size_t got = 0;
        while (got < (size_t)sb.st_size) {
            ssize_t r = read(fd, buf + got, (size_t)sb.st_size - got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) break;
            got += (size_t)r;
        }
        *n = got;
    }
    close(fd);
    return buf;
}

/* Checks a file's bytes for (hash, parent, tokens); on a bad file counts
 * it and removes it (under mu). Returns the payload or NULL. */
static const unsigned char *check_file(kv_tiers *t, const char *name, const unsigned char *buf, size_t n,
                                       uint64_t hash, uint64_t parent, const int32_t *tokens) {
    kv_block_file_head want = t->layout;
    want.hash = hash, want.parent = parent;
    const unsigned char *payload;
    kv_block_file_status st = kv_block_file_check(buf, n, &want, tokens, &payload);
    if (st == KV_BLOCK_FILE_OK) {
        t->c.tier_bytes_read += n;
        dnode *d = disk_find(t, hash);
        if (d) d->seq = ++t->seq;
        else disk_add(t, hash, n); /* written by another process sharing the directory */
        return payload;
    }
    t->c.tier_bad_files++;
    fprintf(stderr, "kvlm: kv disk tier: %s is %s; removed\n", name, kv_block_file_status_name(st));
    disk_remove(t, hash);
    return NULL;
}

static void copy_out(const kv_tiers *t, const unsigned char *payload, unsigned char *const *dst) {
    for (int s = 0; s < t->layout.n_slices; s++)
        memcpy(dst[s], payload + (size_t)s * t->layout.slice_bytes, t->layout.slice_bytes);
}

/* 1 when the reader is asked for, or reading, hash's file (under mu). */
static int pending(const kv_tiers *t, uint64_t hash) {
    if (t->reading && t->reading_hash == hash) return 1;
    for (int i = 0; i < t->rq_n; i++)
        if (t->rq[(t->rq_head + i) % PREFETCH_MAX].hash == hash) return 1;
    return 0;
}

int kv_tiers_fetch(kv_tiers *t, uint64_t hash, uint64_t parent, const int32_t *tokens, unsigned char *const *dst) {
    if (!t) return 0;
    const size_t tb = (size_t)t->layout.block_size * sizeof(int32_t);
    rnode *r = list_find(&t->ram, hash);
    if (r && r->parent == parent && !memcmp(r->tokens, tokens, tb)) {
        copy_out(t, r->payload, dst);
        list_drop(&t->ram, r, t->payload_bytes); /* back in the pool */
        t->c.tier_ram_hits++;
        return 1;
    }
    if (!t->dir) return 0;
    pthread_mutex_lock(&t->mu);
    while (pending(t, hash)) pthread_cond_wait(&t->cv_idle, &t->mu); /* the reader has it in hand: no second read */
    r = list_find(&t->staged, hash); /* read ahead and checked already */
    const int staged = r && r->parent == parent && !memcmp(r->tokens, tokens, tb);
    if (staged) {
        copy_out(t, r->payload, dst);
        list_drop(&t->staged, r, t->payload_bytes);
        t->c.tier_disk_hits++;
    }
    pthread_mutex_unlock(&t->mu);
    if (staged) return 2;
    char name[4200];
    file_name(t, hash, name, sizeof name);
    size_t n = 0;
    unsigned char *buf = read_file(name, &n);
    if (!buf) return 0;
    pthread_mutex_lock(&t->mu);
    const unsigned char *payload = check_file(t, name, buf, n, hash, parent, tokens);
    if (payload) t->c.tier_disk_hits++;
    pthread_mutex_unlock(&t->mu);
    if (payload) {
        copy_out(t, payload, dst);
        utimensat(AT_FDCWD, name, NULL, 0); /* the LRU order a restart reads */
    }
    free(buf);
    return payload ? 2 : 0;
}

/* ------------------------------------------------------------ read ahead */

void kv_tiers_prefetch(kv_tiers *t, uint64_t hash, uint64_t parent, const int32_t *tokens) {
    if (!t || !t->has_reader || list_find(&t->ram, hash)) return;
    int32_t *copy = malloc((size_t)t->layout.block_size * sizeof(int32_t));
    if (!copy) return;
    memcpy(copy, tokens, (size_t)t->layout.block_size * sizeof(int32_t));
    pthread_mutex_lock(&t->mu);
    if (t->rq_n < PREFETCH_MAX && !list_find(&t->staged, hash)) {
        t->rq[(t->rq_head + t->rq_n++) % PREFETCH_MAX] = (want){.hash = hash, .parent = parent, .tokens = copy};
        copy = NULL;
        pthread_cond_signal(&t->cv_read);
    }
    pthread_mutex_unlock(&t->mu);
    free(copy);
}

static void *reader_main(void *arg) {
    kv_tiers *t = arg;
    char name[4200];
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->rq_n && !t->stop) pthread_cond_wait(&t->cv_read, &t->mu);
        if (t->stop) break;
        want w = t->rq[t->rq_head];
        t->rq_head = (t->rq_head + 1) % PREFETCH_MAX;
        t->rq_n--;
        t->reading = 1;
        t->reading_hash = w.hash;
        pthread_mutex_unlock(&t->mu);
        file_name(t, w.hash, name, sizeof name);
        size_t n = 0;
        unsigned char *buf = read_file(name, &n);
        pthread_mutex_lock(&t->mu);
        const unsigned char *payload = buf ? check_file(t, name, buf, n, w.hash, w.parent, w.tokens) : NULL;
        rnode *r = payload ? list_add(t, &t->staged, PREFETCH_BYTES, w.hash, w.parent, w.tokens) : NULL;
        if (r) {
            memcpy(r->payload, payload, t->payload_bytes);
            t->c.tier_prefetched++;
        }
        free(buf), free(w.tokens);
        t->reading = 0;
        pthread_cond_broadcast(&t->cv_idle); /* a fetch may wait for this file */
    }
    while (t->rq_n) { /* stopping: what was asked for and not read */
        free(t->rq[t->rq_head].tokens);
        t->rq_head = (t->rq_head + 1) % PREFETCH_MAX;
        t->rq_n--;
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

void kv_tiers_stats(kv_tiers *t, kvlm_kv_stats *st) {
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    const kvlm_kv_stats *c = &t->c;
    st->tier_ram_hits = c->tier_ram_hits, st->tier_disk_hits = c->tier_disk_hits;
    st->tier_spills = c->tier_spills; /* tier_spill_refused is the pool's (kv_tier_hooks.c) */
    st->tier_ram_blocks = t->ram.blocks, st->tier_ram_bytes = t->ram.bytes;
    st->tier_prefetched = c->tier_prefetched;
    st->tier_disk_files = t->disk_files, st->tier_disk_bytes = t->disk_bytes;
    st->tier_bytes_read = c->tier_bytes_read, st->tier_bytes_written = c->tier_bytes_written;
    st->tier_writes_dropped = c->tier_writes_dropped, st->tier_write_errors = c->tier_write_errors;
    st->tier_bad_files = c->tier_bad_files;
    pthread_mutex_unlock(&t->mu);
}

const char *kv_tiers_dir(const kv_tiers *t) { return t ? t->dir : NULL; }
const kv_fingerprint *kv_tiers_fingerprint(const kv_tiers *t) { return &t->layout.fp; }
const char *kv_tiers_prefix(const kv_tiers *t) { return t->prefix; }

void kv_tiers_count_bad(kv_tiers *t) {
    pthread_mutex_lock(&t->mu);
    t->c.tier_bad_files++;
    pthread_mutex_unlock(&t->mu);
}

/* ------------------------------------------------------------ life */

typedef struct found_file {
    uint64_t hash;
    size_t size;
    struct timespec mtime;
} found_file;

static int by_mtime(const void *a, const void *b) {
    const struct timespec *x = &((const found_file *)a)->mtime, *y = &((const found_file *)b)->mtime;
    return x->tv_sec != y->tv_sec ? (x->tv_sec < y->tv_sec ? -1 : 1)
                                  : (x->tv_nsec < y->tv_nsec ? -1 : x->tv_nsec > y->tv_nsec);
}

/* This cache's files into the map (oldest first), stale tmp files removed. */
static int scan_dir(kv_tiers *t, kvlm_error *err) {
    DIR *d = opendir(t->dir);
    if (!d) return kvlm_error_set(err, KVLM_ERR_IO, "kv disk tier %s: %s", t->dir, strerror(errno));
    found_file *ff = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    char path[4200];
    while ((e = readdir(d))) {
        long pid;
        unsigned long long h;
        snprintf(path, sizeof path, "%s/%s", t->dir, e->d_name);
        if (sscanf(e->d_name, ".tmp-%ld-", &pid) == 1) {
            if (pid == (long)getpid() || (kill((pid_t)pid, 0) && errno == ESRCH)) unlink(path);
            continue;
        }
        if (strncmp(e->d_name, t->prefix, 16) || strlen(e->d_name) != 37 || strcmp(e->d_name + 33, ".kvb") ||
            sscanf(e->d_name + 17, "%16llx", &h) != 1)
            continue;
        struct stat sb;
        if (stat(path, &sb) || !S_ISREG(sb.st_mode)) continue;
        if (n == cap) {
            found_file *g = realloc(ff, (cap = cap ? 2 * cap : 64) * sizeof *ff);
            if (!g) break;
            ff = g;
        }
        ff[n++] = (found_file){.hash = h, .size = (size_t)sb.st_size, .mtime = sb.st_mtim};
    }
    closedir(d);
    if (n) qsort(ff, n, sizeof *ff, by_mtime);
    for (size_t i = 0; i < n; i++) disk_add(t, ff[i].hash, ff[i].size);
    free(ff);
    disk_trim(t);
    return KVLM_OK;
}

kv_tiers *kv_tiers_create(const kv_block_file_head *layout, size_t ram_bytes, const char *dir, size_t disk_bytes,
                          kvlm_error *err) {
    kv_tiers *t = calloc(1, sizeof *t);
    if (!t) return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory"), NULL;
    t->layout = *layout;
    t->payload_bytes = (size_t)layout->slice_bytes * (size_t)layout->n_slices;
    t->layout.payload_bytes = t->payload_bytes;
    t->file_bytes = kv_block_file_size(&t->layout);
    t->ram_cap = ram_bytes;
    t->disk_cap = disk_bytes ? disk_bytes : (size_t)1 << 30;
    t->fail_after = -1;
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv_work, NULL);
    pthread_cond_init(&t->cv_idle, NULL);
    pthread_cond_init(&t->cv_read, NULL);
    kv_fingerprint_hex(&layout->fp, t->prefix);
    t->prefix[16] = 0;
    if (dir && dir[0]) {
        if (!(t->dir = strdup(dir))) {
            kv_tiers_free(t);
            return kvlm_error_set(err, KVLM_ERR_NOMEM, "out of memory"), NULL;
        }
        if (mkdir(dir, 0755) && errno != EEXIST) {
            kvlm_error_set(err, KVLM_ERR_IO, "kv disk tier %s: cannot create it: %s", dir, strerror(errno));
            kv_tiers_free(t);
            return NULL;
        }
        if (scan_dir(t, err)) {
            kv_tiers_free(t);
            return NULL;
        }
        if (pthread_create(&t->writer, NULL, writer_main, t)) {
            kv_tiers_free(t);
            return kvlm_error_set(err, KVLM_ERR_NOMEM, "kv disk tier: cannot start its writer thread"), NULL;
        }
        t->has_writer = 1;
        if (!pthread_create(&t->reader, NULL, reader_main, t)) t->has_reader = 1; /* else: no read ahead */
    }
    return t;
}

void kv_tiers_free(kv_tiers *t) {
    if (!t) return;
    if (t->has_writer || t->has_reader) {
        pthread_mutex_lock(&t->mu);
        t->stop = 1;
        pthread_cond_broadcast(&t->cv_work);
        pthread_cond_broadcast(&t->cv_read);
        pthread_mutex_unlock(&t->mu);
        if (t->has_writer) pthread_join(t->writer, NULL);
        if (t->has_reader) pthread_join(t->reader, NULL);
    }
    while (t->ram.head) list_drop(&t->ram, t->ram.head, t->payload_bytes);
    while (t->staged.head) list_drop(&t->staged, t->staged.head, t->payload_bytes);
    for (int b = 0; b < NBUCKET; b++)
        for (dnode *n = t->db[b], *next; n; n = next) next = n->chain, free(n);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv_work);
    pthread_cond_destroy(&t->cv_idle);
    pthread_cond_destroy(&t->cv_read);
    free(t->dir);
    free(t);
}
