/* The RESP2 request parser of the Redis-protocol front (cache/resp.h): bytes
 * in, one command's argv out, or "need more bytes", or a protocol error in
 * Redis's words. Pure: no sockets, no allocation, no state between calls,
 * so the server, the unit test and the fuzzer drive the same code.
 *
 * Both request forms redis-server accepts: multibulk (`*N\r\n$L\r\n...`,
 * what client libraries send) and inline (`PING\r\n`, what redis-cli's
 * pipe mode and `nc` send; words split on blanks, no quoting). The limits
 * keep a hostile client from making a connection hold more than
 * SEGD_RESP_MAX_REQUEST bytes of unanswered input. */
#ifndef SEGD_RESP_PARSE_H
#define SEGD_RESP_PARSE_H

#include <stddef.h>

#define SEGD_RESP_MAX_ARGS 1024           /* arguments of one command */
#define SEGD_RESP_MAX_ARG (64 * 1024)     /* bytes of one argument (bulk string) */
#define SEGD_RESP_MAX_INLINE (64 * 1024)  /* bytes of one inline command line */
#define SEGD_RESP_MAX_REQUEST (1024 * 1024) /* bytes of one command, framing included */
/* Redis 7.0's tighter limits for a connection that must authenticate and
 * has not yet: what AUTH and HELLO need, so that anyone who can connect but
 * knows no password makes the connection hold at most ~160 KiB of input,
 * not SEGD_RESP_MAX_REQUEST. */
#define SEGD_RESP_UNAUTH_MAX_ARGS 10
#define SEGD_RESP_UNAUTH_MAX_ARG 16384

typedef enum segd_resp_parse_rc {
    SEGD_RESP_PARSED = 0, /* *cmd holds a command of *used bytes (argc may be 0:
                           * an empty inline line, which Redis ignores) */
    SEGD_RESP_MORE = 1,   /* the bytes end inside a command: read more */
    SEGD_RESP_PROTO = 2,  /* not RESP, or over a limit: answer err, then close */
} segd_resp_parse_rc_t;

typedef struct segd_resp_cmd {
    size_t argc;
    /* Borrowed: point into the parsed bytes, valid while they are. Not
     * NUL-terminated (a bulk string may hold any byte). */
    const char *argv[SEGD_RESP_MAX_ARGS];
    size_t argl[SEGD_RESP_MAX_ARGS];
} segd_resp_cmd_t;

/* Parses the first command of buf[0..len), with the unauthenticated limits
 * above when unauth is set (a multibulk request only, as in Redis: an inline
 * line is bounded by SEGD_RESP_MAX_INLINE anyway). On SEGD_RESP_PROTO, err
 * holds the message to send after "-ERR " (Redis's own, e.g. "Protocol
 * error: invalid bulk length", "Protocol error: unauthenticated multibulk
 * length"). */
segd_resp_parse_rc_t segd_resp_parse(const char *buf, size_t len, int unauth,
                                     segd_resp_cmd_t *cmd, size_t *used, char *err,
                                     size_t err_size);

#endif
