/* The edge cache's HTTP face (libmicrohttpd, its own thread pool):
 *   GET /v1/users/{id}  -> 200 {"user_id": ..., "segments": [{"id", "expires_at",
 *                          "ts_ms", "flags", "partner_id"}, ...]}, live entries at
 *                          the cache's clock sorted by id: the shape of
 *                          `segd get --json`; a user without live segments has
 *                          an empty array. 503 while the snapshot loads.
 *   GET /healthz        -> 200 {"status": "ok", ...} once serving, 503
 *                          {"status": "loading"} before; the caller's figures.
 *   GET /readyz         -> 200 or 503 with the ready callback's JSON (503
 *                          {"ready":false,"reason":"loading"} before serving)
 *   GET /metrics        -> the registry (Prometheus text format 0.0.4), with
 *                          segd_cache_lookups_total and
 *                          segd_cache_lookup_seconds observed here
 * Anything else is 404 (405 for other methods). */
#ifndef SEGD_HTTP_H
#define SEGD_HTTP_H

#include <jansson.h>

#include "cache/edge.h"
#include "metrics/registry.h"
#include "metrics/server.h"
#include "wire/profile_json.h"

typedef struct segd_http segd_http_t;

/* Fills a health object (the server adds "status"); runs on a server thread. */
typedef void (*segd_health_cb)(void *ctx, json_t *health);

/* listen: "HOST:PORT" (IPv4). edge, metrics (NULL = no /metrics) and ctx
 * are borrowed and must outlive the server; ready (NULL = ready once
 * serving) is asked by /readyz once serving, with ctx. */
segd_err_t segd_http_start(segd_http_t **out, const char *listen, segd_edge_t *edge,
                           segd_health_cb health, segd_metrics_t *metrics,
                           segd_ready_cb ready, void *ctx, char *errstr,
                           size_t errstr_size);
/* Flips /healthz and lookups from 503 to serving. */
void segd_http_set_ready(segd_http_t *h, int ready);
void segd_http_stop(segd_http_t *h);

#endif
