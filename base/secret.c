/* Shared secrets: reading and constant-time comparison; see secret.h. */
#include "base/secret.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int segd_secret_equal(const void *secret, size_t secret_len, const void *guess,
                      size_t guess_len)
{
    const volatile unsigned char *s = secret, *g = guess;
    /* every byte of the guess is compared against the secret, wrapped
     * around, so the loop's length is the guess's and the first differing
     * byte does not end it; an empty secret never matches */
    unsigned diff = secret_len == 0 || secret_len != guess_len;
    for (size_t i = 0; i < guess_len; i++)
        diff |= (unsigned)(g[i] ^ (secret_len ? s[i % secret_len] : 0));
    return diff == 0;
}

/* The first line of f into buf; its length, or -1 when too long. */
static long read_line(FILE *f, char *buf, size_t cap)
{
    size_t n = fread(buf, 1, cap, f);
    if (n == cap)
        return -1;
    buf[n] = 0;
    if (n && buf[n - 1] == '\n')
        buf[--n] = 0;
    if (n && buf[n - 1] == '\r')
        buf[--n] = 0;
    return (long)n;
}

static segd_err_t check_secret(const char *what, const char *s, size_t n, char *errstr,
                               size_t en)
{
    if (n == 0)
        return segd_errf(SEGD_ERR_CONFIG, errstr, en, "%s: empty secret", what);
    if (n > SEGD_SECRET_MAX)
        return segd_errf(SEGD_ERR_CONFIG, errstr, en, "%s: secret longer than %d bytes",
                         what, SEGD_SECRET_MAX);
    if (strlen(s) != n || strpbrk(s, "\r\n"))
        return segd_errf(SEGD_ERR_CONFIG, errstr, en,
                         "%s: the secret must be one line (no CR, LF or NUL inside)", what);
    return SEGD_OK;
}

segd_err_t segd_secret_read(const char *what, const char *file, const char *env, char **out,
                            char *errstr, size_t errstr_size)
{
    *out = NULL;
    char *buf = calloc(1, SEGD_SECRET_MAX + 3);
    if (!buf)
        return SEGD_ERR_NOMEM;
    long n;
    if (file) {
        FILE *f = fopen(file, "rb");
        if (!f) {
            int e = errno;
            free(buf);
            return segd_errf(SEGD_ERR_CONFIG, errstr, errstr_size, "%s: %s", what,
                             strerror(e));
        }
        n = read_line(f, buf, SEGD_SECRET_MAX + 2);
        fclose(f);
    } else {
        const char *v = env ? getenv(env) : NULL;
        n = v ? (long)strlen(v) : 0;
        if (n <= SEGD_SECRET_MAX && v)
            memcpy(buf, v, (size_t)n);
    }
    segd_err_t err = n < 0 ? segd_errf(SEGD_ERR_CONFIG, errstr, errstr_size,
                                       "%s: secret longer than %d bytes", what,
                                       SEGD_SECRET_MAX)
                           : check_secret(what, buf, (size_t)n, errstr, errstr_size);
    if (err) {
        segd_secret_free(buf);
        return err;
    }
    *out = buf;
    return SEGD_OK;
}

void segd_secret_free(char *secret)
{
    if (!secret)
        return;
    size_t n = strlen(secret);
    volatile char *p = secret;
    for (size_t i = 0; i < n; i++)
        p[i] = 0;
    free(secret);
}
