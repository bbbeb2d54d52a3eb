/*
 * The responses /v1/responses keeps for previous_response_id and
 * GET /v1/responses/{id}: a bounded in-memory store, lost at restart.
 * Each entry is a response id, its conversation (the chat turns it
 * continues from and its own answer, without the instructions) and its
 * whole body. At most RSTORE_MAX_ENTRIES entries and RSTORE_MAX_BYTES
 * bytes; an entry expires RSTORE_TTL_SECONDS after it was stored; when
 * full, the oldest entries go first. Thread-safe (its own mutex).
 */
#ifndef KVLM_SERVER_RESPONSES_STORE_H
#define KVLM_SERVER_RESPONSES_STORE_H

#include <jansson.h>
#include <stddef.h>

#define RSTORE_MAX_ENTRIES 1024
#define RSTORE_MAX_BYTES (64u << 20)
#define RSTORE_TTL_SECONDS 3600.0

typedef struct resp_store resp_store;

resp_store *rstore_create(size_t max_entries, size_t max_bytes, double ttl_seconds);
void rstore_free(resp_store *rs);
/* Keeps (a copy of) id's conversation text and body, at time now
 * (seconds); an entry larger than the whole store is not kept. -1 when
 * out of memory. */
int rstore_put(resp_store *rs, const char *id, const char *conversation, const char *body, double now);
/* The conversation of id (a new reference), or NULL: unknown or expired. */
json_t *rstore_conversation(resp_store *rs, const char *id, double now);
/* A malloc'ed copy of id's body, or NULL. */
char *rstore_body(resp_store *rs, const char *id, double now);
/* Entries held (expired ones are dropped on the next put or lookup). */
size_t rstore_count(resp_store *rs);

#endif
