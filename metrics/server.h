/* The metrics and health HTTP server (libmicrohttpd, one internal thread):
 *   GET /metrics -> 200, the registry in the Prometheus text format 0.0.4
 *   GET /healthz -> 200 {"status":"ok"} while the process runs
 *   GET /readyz  -> 200 or 503 with the JSON body the ready callback wrote
 * Anything else is 404 (405 for methods other than GET and HEAD).
 * Threads: start/stop from the owning thread; the callbacks run on the
 * server's thread. Ownership: the registry and ctx are borrowed and must
 * outlive the server. Used by `segd run` (metrics.listen); `segd cache`
 * serves the same endpoints on its own server through segd_metrics_reply. */
#ifndef SEGD_METRICS_SERVER_H
#define SEGD_METRICS_SERVER_H

#include "base/buf.h"
#include "base/err.h"
#include "metrics/registry.h"

typedef struct segd_metrics_server segd_metrics_server_t;

/* Writes a JSON object into body (empty = none) and returns 1 when ready. */
typedef int (*segd_ready_cb)(void *ctx, segd_buf_t *body);

/* Whether listen names an address: "" and "off" turn the server off. */
int segd_metrics_listen_enabled(const char *listen);

/* listen is "HOST:PORT" with an IPv4 address or a [bracketed] IPv6 one;
 * port 0 takes any free port. A malformed address is SEGD_ERR_CONFIG and a
 * port that cannot be bound (in use, no permission) SEGD_ERR_IO, both with
 * the reason in errstr. ready may be NULL, and then /readyz is always 200. */
segd_err_t segd_metrics_server_start(segd_metrics_server_t **out, const char *listen,
                                     segd_metrics_t *m, segd_ready_cb ready, void *ctx,
                                     char *errstr, size_t errstr_size);
/* The port bound (what port 0 turned into). */
int segd_metrics_server_port(const segd_metrics_server_t *s);
void segd_metrics_server_stop(segd_metrics_server_t *s); /* NULL is a no-op */

/* Answers a request on another libmicrohttpd server with the registry's
 * exposition (200, or 500 when out of memory); returns MHD's result. */
struct MHD_Connection;
int segd_metrics_reply(struct MHD_Connection *c, segd_metrics_t *m);

#endif
