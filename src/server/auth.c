/*
 * API key checks (see auth.h).
 */
#include "server/auth.h"

#include <stddef.h>
#include <string.h>
#include <strings.h>

int auth_required(const srv_config *cfg, const char *path) {
    if (!cfg->api_key) return 0;
    if (!strcmp(path, "/health")) return cfg->protect_health;
    if (!strcmp(path, "/metrics")) return cfg->protect_metrics;
    return 1;
}

/* Equal strings, in time that depends on the lengths only. */
static int same(const char *a, size_t na, const char *b, size_t nb) {
    unsigned char diff = (unsigned char)(na != nb);
    for (size_t i = 0; i < nb; i++) diff |= (unsigned char)((i < na ? (unsigned char)a[i] : 0) ^ (unsigned char)b[i]);
    return diff == 0;
}

int auth_ok(const srv_config *cfg, const char *authorization) {
    if (!cfg->api_key) return 1;
    if (!authorization || strncasecmp(authorization, "Bearer ", 7)) return 0;
    const char *k = authorization + 7;
    while (*k == ' ') k++;
    size_t n = strlen(k);
    while (n && (k[n - 1] == ' ' || k[n - 1] == '\t')) n--;
    return same(k, n, cfg->api_key, strlen(cfg->api_key));
}

int auth_key_ok(const srv_config *cfg, const char *key) {
    if (!cfg->api_key) return 1;
    if (!key) return 0;
    size_t n = strlen(key);
    while (n && (key[n - 1] == ' ' || key[n - 1] == '\t')) n--;
    return same(key, n, cfg->api_key, strlen(cfg->api_key));
}
