/* The edge cache's HTTP face (libmicrohttpd, its own thread pool). Every
 * response has a Content-Length (never chunked); connections are HTTP/1.1
 * keep-alive. The user objects have the shape of `segd get --json` plus
 * "known":
 *   {"user_id", "known", "segments": [{"id", "expires_at", "ts_ms", "flags",
 *    "partner_id"}, ...] [, "count_range": {"from", "to", "count"}]}
 * segments: the live entries at the cache's clock, sorted by id, that pass
 * the filters; count_range (asked for only): live entries with from <= id <=
 * to, before the other filters, as `segd get --count-range`.
 *
 *   GET /v1/users/{id}?expiring_after=S&updated_since_ms=MS&count_range=A:B
 *       &linked=true|false
 *       filters as segd get's --expiring-after (expires_at > S),
 *       --updated-since (ts_ms >= MS) and --count-range; 0 = no filter.
 *       linked=true (DESIGN §10.5): the segments of the join over the id's
 *       identity component (segd_edge_lookup_linked), and the object ends
 *       with "master" and "members" (master first, then bytewise), as
 *       `segd get --linked --json` prints them; known:true when the cache
 *       holds a profile of any member. No "missing_partitions": a cache
 *       loads every unit of its snapshot (a missing one fails the load) and
 *       tails every change partition, so it lacks no member's partition.
 *       200 with known:true when the cache holds a profile for the user
 *       (live segments or none: "segments": []), 404 with the same body and
 *       known:false for a user never seen. An unknown parameter -> 400
 *       {"error", "parameters": [names]}, a malformed value -> 400 naming it.
 *   POST /v1/users:batch  body {"users": [ids], "expiring_after": S,
 *       "updated_since_ms": MS, "count_range": "A:B", "linked": true}
 *       (filters optional, numbers as JSON integers or strings, linked a
 *       JSON boolean or "true"/"false") -> 200 {"results": [user
 *       object, ...]} in request order, "known" per result. More users than
 *       the batch limit (segd_http_set_batch_max, default 1000) or a body
 *       above 4096 + limit * 520 bytes -> 413; malformed JSON, an unknown
 *       field or a bad id -> 400.
 *   Both are 503 {"status": "loading"} until serving.
 *   GET /healthz        -> 200 {"status": "ok", ...} once serving, 503
 *                          {"status": "loading"} before; the caller's figures.
 *   GET /readyz         -> 200 or 503 with the ready callback's JSON (503
 *                          {"ready":false,"reason":"loading"} before serving)
 *   GET /metrics        -> the registry (Prometheus text format 0.0.4), with
 *                          the series of docs/metrics.md "segd cache" observed
 *                          here: segd_cache_lookups_total,
 *                          segd_cache_lookup_seconds,
 *                          segd_cache_http_requests_total{route,code},
 *                          segd_cache_http_request_seconds{route},
 *                          segd_cache_http_batch_users
 * Anything else is 404 (405 for a method a route does not take). With a
 * bearer token (segd_http_start_auth) every route but /healthz and /readyz
 * is 401 without it, before any of the above. */
#ifndef SEGD_HTTP_H
#define SEGD_HTTP_H

#include <jansson.h>

#include "cache/edge.h"
#include "metrics/registry.h"
#include "metrics/server.h"
#include "wire/profile_json.h"

typedef struct segd_http segd_http_t;

#define SEGD_HTTP_BATCH_MAX_DEFAULT 1000

/* Fills a health object (the server adds "status"); runs on a server thread. */
typedef void (*segd_health_cb)(void *ctx, json_t *health);

/* listen is "HOST:PORT", parsed as metrics/listen.h says. edge, metrics and
 * ctx are borrowed and must outlive the server; a NULL metrics serves no
 * /metrics. Once serving, /readyz asks ready(ctx); a NULL ready means ready
 * as soon as the server serves. */
segd_err_t segd_http_start(segd_http_t **out, const char *listen, segd_edge_t *edge,
                           segd_health_cb health, segd_metrics_t *metrics,
                           segd_ready_cb ready, void *ctx, char *errstr,
                           size_t errstr_size);
/* segd_http_start with access control: with a bearer_token (copied;
 * NULL = none) every request but GET /healthz and GET /readyz needs the
 * header "Authorization: Bearer <token>" (compared in constant time), and
 * without it, or with another token, is 401 {"error"} with
 * "WWW-Authenticate: Bearer realm=\"segd\"" (plus error="invalid_token"
 * for a wrong one, RFC 6750); a refused request's body is not kept. */
segd_err_t segd_http_start_auth(segd_http_t **out, const char *listen, segd_edge_t *edge,
                                segd_health_cb health, segd_metrics_t *metrics,
                                segd_ready_cb ready, void *ctx, const char *bearer_token,
                                char *errstr, size_t errstr_size);
/* Flips /healthz and lookups from 503 to serving. */
void segd_http_set_ready(segd_http_t *h, int ready);
/* Users one POST /v1/users:batch may ask for (and so its body cap). */
void segd_http_set_batch_max(segd_http_t *h, size_t users);
void segd_http_stop(segd_http_t *h);

#endif
