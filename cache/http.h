/* The edge cache's HTTP face (libmicrohttpd, its own thread pool):
 *   GET /v1/users/{id}  -> 200 {"user_id": ..., "segments": [{"id", "expires_at",
 *                          "ts_ms", "flags", "partner_id"}, ...]}, live entries at
 *                          the cache's clock sorted by id: the shape of
 *                          `segd get --json`; a user without live segments has
 *                          an empty array. 503 while the snapshot loads.
 *   GET /healthz        -> 200 {"status": "ok", ...} once serving, 503
 *                          {"status": "loading"} before; the caller's figures.
 * Anything else is 404 (405 for other methods). */
#ifndef SEGD_HTTP_H
#define SEGD_HTTP_H

#include <jansson.h>

#include "cache/edge.h"
#include "wire/profile_json.h"

typedef struct segd_http segd_http_t;

/* Fills a health object (the server adds "status"); runs on a server thread. */
typedef void (*segd_health_cb)(void *ctx, json_t *health);

/* listen: "HOST:PORT" (IPv4). edge is borrowed. */
segd_err_t segd_http_start(segd_http_t **out, const char *listen, segd_edge_t *edge,
                           segd_health_cb health, void *ctx, char *errstr,
                           size_t errstr_size);
/* Flips /healthz and lookups from 503 to serving. */
void segd_http_set_ready(segd_http_t *h, int ready);
void segd_http_stop(segd_http_t *h);

#endif
