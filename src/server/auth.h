/*
 * The API key: which paths need it and whether a request's Authorization
 * header carries it ("Bearer KEY", the scheme case-insensitive), or
 * the x-api-key header. Compares
 * in time that depends on the lengths only, never on where the bytes
 * differ. Knows nothing about sockets or libmicrohttpd.
 */
#ifndef KVLM_SERVER_AUTH_H
#define KVLM_SERVER_AUTH_H

#include "server/server.h"

/* 1 when `path` needs the key under cfg (no key configured: never). Every
 * path but /health and /metrics does; those two when protected. */
int auth_required(const srv_config *cfg, const char *path);
/* 1 when the Authorization header value (may be NULL) carries cfg->api_key. */
int auth_ok(const srv_config *cfg, const char *authorization);
/* 1 when an x-api-key header value (may be NULL; Anthropic's clients send
 * the key there) is cfg->api_key. */
int auth_key_ok(const srv_config *cfg, const char *key);

#endif
