/* What every snapshot destination module shares (dest_int.h), below all of
 * them: the sink that a GET's body goes to, asprintf that returns the string,
 * and an IO error from errno. dest.c, dest_name.c, dest_dir.c and
 * dest_http.c call it; it calls none of them. */
#define _GNU_SOURCE
#include "transport/dest_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* asprintf returning the string or NULL (asprintf leaves its pointer
 * undefined on failure). Freed by the caller. */
char *segd_dest_printf(const char *fmt, ...)
{
    char *s = NULL;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&s, fmt, ap) < 0)
        s = NULL;
    va_end(ap);
    return s;
}

/* errno is read first: anything called later may change it. */
segd_err_t segd_dest_io_errf(char *errstr, size_t n, const char *what, const char *path)
{
    int e = errno ? errno : EIO;
    return segd_errf(SEGD_ERR_IO, errstr, n, "%s %s: %s", what, path, strerror(e));
}

segd_err_t segd_dest_sink_write(sink_t *s, const void *data, size_t len)
{
    if (s->file) {
        if (fwrite(data, 1, len, s->file) != len)
            s->err = SEGD_ERR_IO;
    } else if (s->buf) {
        if (segd_buf_reserve(s->buf, len)) {
            s->err = SEGD_ERR_NOMEM;
        } else {
            memcpy(s->buf->data + s->buf->len, data, len);
            s->buf->len += len;
        }
    }
    return s->err;
}

/* Every attempt starts from empty: a retried GET must not append. */
segd_err_t segd_dest_sink_reset(sink_t *s)
{
    s->errlen = 0;
    s->errbody[0] = 0;
    if (s->buf)
        s->buf->len = 0;
    if (s->file && (fseek(s->file, 0, SEEK_SET) || ftruncate(fileno(s->file), 0)))
        s->err = SEGD_ERR_IO;
    return s->err;
}
