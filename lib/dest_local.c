/* transport/dest.h for libsegd-cache: local directories only, read-only.
 * The snapshot reader (snapread/) reads through segd_dest; the
 * library links this file instead of transport/dest.c so that it carries
 * no HTTP/S3 client (libcurl): a bidder loads snapshots it has on disk
 * (`segd cache` and segd itself keep the http(s):// and s3:// sources). */
#include "transport/dest.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct segd_dest {
    char *base; /* the directory, without trailing slashes */
};

void segd_dest_opts_default(segd_dest_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->timeout_ms = 60000;
    o->max_retries = 5;
    o->backoff_ms = 200;
}

int segd_dest_is_remote(const char *url) { return strstr(url, "://") != NULL; }

void segd_dest_join(char *out, size_t cap, const char *base, const char *name)
{
    size_t len = strlen(base);
    while (len > 1 && base[len - 1] == '/')
        len--;
    snprintf(out, cap, "%.*s/%s", (int)len, base, name);
}

segd_err_t segd_dest_open(segd_dest_t **out, const char *url, const segd_dest_opts_t *opts,
                          char *errstr, size_t n)
{
    (void)opts;
    *out = NULL;
    if (!url || !*url)
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "empty snapshot directory");
    if (segd_dest_is_remote(url))
        return segd_errf(SEGD_ERR_CONFIG, errstr, n,
                         "%s: libsegd-cache reads local snapshot directories only", url);
    segd_dest_t *d = calloc(1, sizeof(*d));
    if (!d || !(d->base = strdup(url))) {
        free(d);
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    }
    *out = d;
    return SEGD_OK;
}

void segd_dest_close(segd_dest_t *d)
{
    if (!d)
        return;
    free(d->base);
    free(d);
}

static int bad_name(const char *name)
{
    return !*name || strchr(name, '/') || !strcmp(name, "..");
}

segd_err_t segd_dest_get_mem_in(segd_dest_t *d, const char *dir, const char *name,
                                segd_buf_t *out, char *errstr, size_t n)
{
    if (bad_name(name) || (dir && bad_name(dir)))
        return segd_errf(SEGD_ERR_INVALID, errstr, n, "bad object name '%s'", name);
    char folder[4096], path[4096];
    if (dir)
        segd_dest_join(folder, sizeof(folder), d->base, dir);
    segd_dest_join(path, sizeof(path), dir ? folder : d->base, name);
    out->len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return errno == ENOENT ? segd_errf(SEGD_ERR_NOTFOUND, errstr, n, "%s: not found", path)
                               : segd_errf(SEGD_ERR_IO, errstr, n, "open %s: %s", path,
                                           strerror(errno));
    segd_err_t err = SEGD_OK;
    char buf[1 << 16];
    size_t r;
    while (!err && (r = fread(buf, 1, sizeof(buf), f)) > 0)
        err = segd_buf_append(out, buf, r);
    if (!err && ferror(f))
        err = segd_errf(SEGD_ERR_IO, errstr, n, "read %s: %s", path, strerror(errno));
    fclose(f);
    if (err)
        out->len = 0;
    return err;
}

segd_err_t segd_dest_get_mem(segd_dest_t *d, const char *name, segd_buf_t *out, char *errstr,
                             size_t n)
{
    return segd_dest_get_mem_in(d, NULL, name, out, errstr, n);
}
