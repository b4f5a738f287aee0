/* segd_err_t names and the errstr formatting helper shared by all modules. */
#include "base/err.h"

#include <stdarg.h>
#include <stdio.h>

const char *segd_err_str(segd_err_t err)
{
    switch (err) {
    case SEGD_OK: return "ok";
    case SEGD_ERR_NOMEM: return "out of memory";
    case SEGD_ERR_CORRUPT: return "corrupt record";
    case SEGD_ERR_INVALID: return "invalid argument";
    case SEGD_ERR_IO: return "I/O error";
    case SEGD_ERR_STORE: return "store error";
    case SEGD_ERR_KAFKA: return "kafka error";
    case SEGD_ERR_DECODE: return "decode error";
    case SEGD_ERR_LIMIT: return "limit exceeded";
    case SEGD_ERR_NOTFOUND: return "not found";
    case SEGD_ERR_HTTP: return "http error";
    case SEGD_ERR_CONFIG: return "configuration error";
    case SEGD_ERR_TIMEOUT: return "timed out";
    case SEGD_ERR_ABORTED: return "aborted";
    case SEGD_ERR_SCHEMA: return "unknown or incompatible schema";
    case SEGD_ERR_TOO_LATE: return "too late";
    case SEGD_ERR_BUSY: return "store in use";
    case SEGD_ERR_UNSORTED: return "input out of key order";
    }
    return "unknown error";
}

segd_err_t segd_errf(segd_err_t err, char *errstr, size_t errstr_size,
                     const char *fmt, ...)
{
    if (errstr && errstr_size > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(errstr, errstr_size, fmt, ap);
        va_end(ap);
    }
    return err;
}
