/* The edge cache's Redis-protocol (RESP2) face, `segd cache --resp ADDR`:
 * redis-cli, hiredis and other Redis clients read a user's live segments
 * as a sorted set (cache/resp_cmd.h has the commands and data model).
 *
 * Threads: `threads` workers, each with its own SO_REUSEPORT listening
 * socket on ADDR and its own epoll loop over non-blocking connections (the
 * kernel spreads connections over the workers; no lock on the read path but
 * the edge shard's). Pipelined commands are answered in order. Limits per
 * connection: a command of at most SEGD_RESP_MAX_REQUEST bytes (cache/
 * resp_parse.h; more is a protocol error and a close), and no more input
 * is read while more than 4 MiB of replies wait for the client. Limits per
 * server (segd_resp_opts_t, Redis's maxclients and timeout): at most
 * max_clients connections, a client past it answered `-ERR max number of
 * clients reached` and closed; a connection idle for idle_timeout_ms closed.
 * Ownership: edge and metrics are borrowed and must outlive the server. */
#ifndef SEGD_RESP_H
#define SEGD_RESP_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "cache/edge.h"
#include "metrics/registry.h"

typedef struct segd_resp segd_resp_t;

/* listen is "HOST:PORT", an IPv4 address or a host name that has one; port 0
 * takes any free port. threads is the number of workers, 1 to 256, and
 * metrics may be NULL. A bad address is SEGD_ERR_CONFIG and one that cannot
 * be bound SEGD_ERR_IO, with the reason in errstr. Data commands answer
 * -LOADING until segd_resp_set_ready, as a loading redis-server does. */
segd_err_t segd_resp_start(segd_resp_t **out, const char *listen, int threads,
                           segd_edge_t *edge, segd_metrics_t *metrics, char *errstr,
                           size_t errstr_size);
/* segd_resp_start with each worker's reply cache (cache/
 * resp_reply_cache.h) of reply_cache_bytes; 0 keeps no replies. The one
 * above uses SEGD_RESP_REPLY_CACHE_DEFAULT_MB (cache/resp_cmd.h). */
segd_err_t segd_resp_start_cached(segd_resp_t **out, const char *listen, int threads,
                                  size_t reply_cache_bytes, segd_edge_t *edge,
                                  segd_metrics_t *metrics, char *errstr, size_t errstr_size);

#define SEGD_RESP_MAX_CLIENTS_DEFAULT 10000 /* Redis's maxclients */

typedef struct segd_resp_opts {
    size_t reply_cache_bytes; /* each worker's reply cache; 0 keeps none */
    int max_clients;          /* open connections at most, over all workers; >= 1 */
    int64_t idle_timeout_ms;  /* a connection with neither input nor output progress
                               * this long is closed; 0 = never (Redis's default) */
    const char *password;     /* Redis's requirepass (cache/resp_cmd.h says what it
                               * guards); NULL = none. Copied: borrowed for the call */
} segd_resp_opts_t;

/* SEGD_RESP_REPLY_CACHE_DEFAULT_MB, SEGD_RESP_MAX_CLIENTS_DEFAULT, no idle timeout. */
void segd_resp_opts_default(segd_resp_opts_t *o);
segd_err_t segd_resp_start_opts(segd_resp_t **out, const char *listen, int threads,
                                const segd_resp_opts_t *o, segd_edge_t *edge,
                                segd_metrics_t *metrics, char *errstr, size_t errstr_size);
void segd_resp_set_ready(segd_resp_t *r, int ready);
/* The port bound (what port 0 turned into). */
int segd_resp_port(const segd_resp_t *r);
/* Stops the workers and closes every connection. NULL is a no-op. */
void segd_resp_stop(segd_resp_t *r);

#endif
