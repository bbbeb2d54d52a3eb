/*
 * The bounded response store (see responses_store.h): a list in storage
 * order, oldest first, searched linearly (at most RSTORE_MAX_ENTRIES).
 */
#include "server/responses_store.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
    char *id, *conv, *body;
    size_t bytes;
    double stored;
    struct entry *next;
} entry;

struct resp_store {
    pthread_mutex_t mu;
    size_t max_entries, max_bytes, n, bytes;
    double ttl;
    entry *head, *tail;     /* oldest first */
};

resp_store *rstore_create(size_t max_entries, size_t max_bytes, double ttl_seconds) {
    resp_store *rs = calloc(1, sizeof *rs);
    if (!rs) return NULL;
    pthread_mutex_init(&rs->mu, NULL);
    rs->max_entries = max_entries;
    rs->max_bytes = max_bytes;
    rs->ttl = ttl_seconds;
    return rs;
}

static void entry_free(entry *e) {
    free(e->id);
    free(e->conv);
    free(e->body);
    free(e);
}

static void drop_head(resp_store *rs) {
    entry *e = rs->head;
    rs->head = e->next;
    if (!rs->head) rs->tail = NULL;
    rs->n--;
    rs->bytes -= e->bytes;
    entry_free(e);
}

/* Expired entries are the oldest: they are at the head. */
static void expire(resp_store *rs, double now) {
    while (rs->head && now - rs->head->stored > rs->ttl) drop_head(rs);
}

void rstore_free(resp_store *rs) {
    if (!rs) return;
    while (rs->head) drop_head(rs);
    pthread_mutex_destroy(&rs->mu);
    free(rs);
}

int rstore_put(resp_store *rs, const char *id, const char *conversation, const char *body, double now) {
    const size_t bytes = strlen(id) + strlen(conversation) + strlen(body) + sizeof(entry);
    if (bytes > rs->max_bytes || !rs->max_entries) return 0;
    entry *e = calloc(1, sizeof *e);
    if (!e || !(e->id = strdup(id)) || !(e->conv = strdup(conversation)) || !(e->body = strdup(body))) {
        if (e) entry_free(e);
        return -1;
    }
    e->bytes = bytes;
    e->stored = now;
    pthread_mutex_lock(&rs->mu);
    expire(rs, now);
    while (rs->head && (rs->n + 1 > rs->max_entries || rs->bytes + bytes > rs->max_bytes)) drop_head(rs);
    if (rs->tail) rs->tail->next = e;
    else rs->head = e;
    rs->tail = e;
    rs->n++;
    rs->bytes += bytes;
    pthread_mutex_unlock(&rs->mu);
    return 0;
}

static entry *find(resp_store *rs, const char *id, double now) {
    expire(rs, now);
    for (entry *e = rs->head; e; e = e->next)
        if (!strcmp(e->id, id)) return e;
    return NULL;
}

json_t *rstore_conversation(resp_store *rs, const char *id, double now) {
    pthread_mutex_lock(&rs->mu);
    entry *e = find(rs, id, now);
    json_t *conv = e ? json_loads(e->conv, 0, NULL) : NULL;
    pthread_mutex_unlock(&rs->mu);
    return conv;
}

char *rstore_body(resp_store *rs, const char *id, double now) {
    pthread_mutex_lock(&rs->mu);
    entry *e = find(rs, id, now);
    char *body = e ? strdup(e->body) : NULL;
    pthread_mutex_unlock(&rs->mu);
    return body;
}

size_t rstore_count(resp_store *rs) {
    pthread_mutex_lock(&rs->mu);
    size_t n = rs->n;
    pthread_mutex_unlock(&rs->mu);
    return n;
}
