/* segd error codes: the one error type every module returns.
 * 0 is success, negative values are segd's own; segd_err_str() names them.
 * Functions whose failure a user must read also fill an errstr buffer. */
#ifndef SEGD_ERR_H
#define SEGD_ERR_H

#include <stddef.h>

typedef enum segd_err {
    SEGD_OK = 0,
    SEGD_ERR_NOMEM = -1,    /* allocation failed */
    SEGD_ERR_CORRUPT = -2,  /* stored bytes do not decode */
    SEGD_ERR_INVALID = -3,  /* caller or input broke a contract */
    SEGD_ERR_IO = -4,       /* file system or RocksDB I/O */
    SEGD_ERR_STORE = -5,    /* RocksDB refused */
    SEGD_ERR_KAFKA = -6,    /* broker or client error */
    SEGD_ERR_DECODE = -7,   /* an event does not decode */
    SEGD_ERR_LIMIT = -8,    /* an event breaks a size limit */
    SEGD_ERR_NOTFOUND = -9, /* no such key / id */
    SEGD_ERR_HTTP = -10,    /* HTTP transfer failed */
    SEGD_ERR_CONFIG = -11,  /* bad configuration */
    SEGD_ERR_TIMEOUT = -12, /* a deadline passed (acks, catch-up, transfers) */
    SEGD_ERR_ABORTED = -13, /* stopped on request (signal, shutdown) */
    SEGD_ERR_SCHEMA = -14,  /* unknown or incompatible writer schema */
    SEGD_ERR_TOO_LATE = -15,/* an event older than what can still be applied exactly */
    SEGD_ERR_BUSY = -16,    /* the store is locked by another process */
    SEGD_ERR_UNSORTED = -17,/* input out of the key order a fast path needs */
} segd_err_t;

const char *segd_err_str(segd_err_t err);

/* Writes a formatted message into errstr (if non-NULL) and returns err. */
segd_err_t segd_errf(segd_err_t err, char *errstr, size_t errstr_size,
                     const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Test hooks: SEGD_STATIC makes a static function reachable from tests. */
#ifdef SEGD_TESTING
#define SEGD_STATIC
#else
#define SEGD_STATIC static
#endif

#endif
