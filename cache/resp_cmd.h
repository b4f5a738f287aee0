/* The command layer of the Redis-protocol front: one parsed command
 * (cache/resp_parse.h) in, its RESP2 reply appended to a buffer out,
 * answered from the edge cache (cache/edge.h). No sockets, so the unit test
 * and the fuzzer run it as the server does.
 *
 * Data model: key = user id, member = segment id (decimal), score =
 * expires_at (Unix seconds); the live entries at the cache's clock only, so
 * a user without live segments is a missing key. Replies are byte-identical
 * to a redis-server holding those sorted sets: members ordered by (score,
 * member as a byte string), scores printed as Redis prints doubles, Redis's
 * error messages. Writes answer "-ERR read-only replica".
 *
 * Authentication (shared->password set): as redis-server with requirepass,
 * a connection runs nothing but AUTH, HELLO and QUIT until `AUTH password`,
 * `AUTH default password` or `HELLO 2 AUTH default password` succeeds;
 * anything else known answers "-NOAUTH Authentication required." (unknown
 * commands and wrong arities are answered first, as Redis 7.0 does), a
 * wrong password or another user name "-WRONGPASS ...". The only user is
 * "default".
 *
 * Threads: a worker (segd_resp_worker_t) belongs to one thread; any number
 * of workers share one segd_resp_shared_t. */
#ifndef SEGD_RESP_CMD_H
#define SEGD_RESP_CMD_H

#include <stdatomic.h>
#include <stdint.h>

#include "base/buf.h"
#include "cache/edge.h"
#include "cache/resp_order.h"
#include "cache/resp_parse.h"
#include "cache/resp_reply_cache.h"

/* What every worker of one server reads. */
typedef struct segd_resp_shared {
    segd_edge_t *edge;             /* borrowed; outlives the server */
    _Atomic int serving;           /* 0: data commands answer -LOADING */
    _Atomic int64_t connections;   /* open now (INFO, the gauge) */
    _Atomic uint64_t next_client_id;
    int64_t started_ms;            /* wall clock, for INFO uptime */
    int port;                      /* for INFO */
    size_t reply_cache_bytes;      /* each worker's reply cache; 0 = none */
    /* Redis's requirepass: the default user's password, NULL for none (every
     * connection then starts authenticated, as with a nopass default user).
     * Owned by the server (cache/resp.c), read-only while it runs. */
    const char *password;
    size_t password_len;
} segd_resp_shared_t;

/* The default of reply_cache_bytes (`segd cache --resp-reply-cache-mb`). */
#define SEGD_RESP_REPLY_CACHE_DEFAULT_MB 16

/* Commands by metrics label: every implemented command, plus "write" (any
 * write command) and "unknown". */
size_t segd_resp_command_count(void);
const char *segd_resp_command_name(size_t i);

typedef struct segd_resp_worker {
    segd_resp_shared_t *shared; /* borrowed */
    segd_entry_t *ents;         /* lookup scratch */
    size_t ents_cap;
    segd_resp_order_t sort;     /* an answer's order and its scratch */
    /* range replies already formatted (NULL: none kept), and the clock
     * second from which the answer being computed may change */
    segd_reply_cache_t *replies;
    int64_t until_s;
    /* [command][0 = ok, 1 = error]; written by the worker's thread only,
     * read by the metrics collector */
    _Atomic uint64_t (*counts)[2];
    /* range replies found in / missing from the reply cache (with one);
     * written by the worker's thread, read by the metrics collector */
    _Atomic uint64_t reply_hits, reply_misses;
} segd_resp_worker_t;

/* A worker with a reply cache of shared->reply_cache_bytes. */
segd_err_t segd_resp_worker_init(segd_resp_worker_t *w, segd_resp_shared_t *shared);
void segd_resp_worker_free(segd_resp_worker_t *w);

typedef struct segd_resp_client {
    uint64_t id;       /* CLIENT ID, HELLO */
    int authenticated; /* AUTH or HELLO AUTH succeeded (with a password set) */
} segd_resp_client_t;

/* Without a password every connection is authenticated, as with Redis's
 * nopass default user. The front parses an unauthenticated connection's
 * requests with the tighter limits (resp_parse.h). */
static inline int segd_resp_authenticated(const segd_resp_worker_t *w,
                                          const segd_resp_client_t *c)
{
    return !w->shared->password || c->authenticated;
}

/* Appends cmd's reply to out. Returns 0, 1 when the connection is to be
 * closed once the reply is sent (QUIT), or SEGD_ERR_NOMEM (out may hold a
 * partial reply then: close the connection). An empty command (argc 0)
 * appends nothing. */
int segd_resp_exec(segd_resp_worker_t *w, segd_resp_client_t *c, const segd_resp_cmd_t *cmd,
                   segd_buf_t *out);

/* "-ERR <msg>\r\n" with CR and LF in msg made blanks (the parser's errors). */
segd_err_t segd_resp_error(segd_buf_t *out, const char *msg);

#endif
