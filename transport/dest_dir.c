/* The directory kind of snapshot destination: objects written to a
 * temporary file, synced and renamed into place (then the directory
 * synced), so a reader never sees a partial object; read back into a sink. */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "transport/dest_int.h"

/* ---------- directory ---------- */

static segd_err_t make_dir(const char *path, char *errstr, size_t n)
{
    struct stat st;
    if (!mkdir(path, 0755))
        return SEGD_OK;
    if (errno == EEXIST && !stat(path, &st) && S_ISDIR(st.st_mode))
        return SEGD_OK;
    if (errno == EEXIST)
        errno = ENOTDIR;
    return segd_dest_io_errf(errstr, n, "mkdir", path);
}

/* mkdir -p: existing directories are fine. */
segd_err_t segd_dest_mkdir_p(const char *path, char *errstr, size_t n)
{
    char *buf = strdup(path);
    if (!buf)
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    segd_err_t err = SEGD_OK;
    for (char *p = buf + 1; *p && !err; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        err = make_dir(buf, errstr, n);
        *p = '/';
    }
    if (!err)
        err = make_dir(buf, errstr, n);
    free(buf);
    return err;
}

/* 0, or -1 with errno set. */
static int write_all(int fd, const void *data, size_t len)
{
    const uint8_t *p = data;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            if (w == 0)
                errno = EIO;
            return -1;
        }
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

/* 0, or -1 with errno set. */
static int copy_into(int fd, const char *src_path)
{
    int in = open(src_path, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return -1;
    char buf[1 << 16];
    ssize_t r;
    int rc = 0;
    while (!rc && (r = read(in, buf, sizeof(buf))) != 0) {
        if (r < 0 && errno == EINTR)
            continue;
        rc = r < 0 ? -1 : write_all(fd, buf, (size_t)r);
    }
    int e = errno;
    close(in);
    errno = e;
    return rc;
}

/* A rename is durable only once its directory is synced. */
static int fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    errno = e;
    return rc;
}

/* Writes data (or the file src_path) to "name.tmp.<pid>" beside the target,
 * syncs it and renames it over the target: a reader sees the old object or
 * the whole new one, and a crash leaves at most a temporary file. */
segd_err_t segd_dest_dir_put(segd_dest_t *d, const char *name, const void *data, size_t len,
                             const char *src_path, char *errstr, size_t n)
{
    segd_err_t err = segd_dest_check_name(name, errstr, n);
    if (err)
        return err;
    char *final = segd_dest_object_path(d, NULL, name);
    char *tmp = final ? segd_dest_printf("%s.tmp.%d", final, (int)getpid()) : NULL;
    int fd = -1;
    if (!tmp) {
        err = segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
        goto out;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        err = segd_dest_io_errf(errstr, n, "create", tmp);
        goto out;
    }
    if (src_path ? copy_into(fd, src_path) : write_all(fd, data, len)) {
        err = segd_dest_io_errf(errstr, n, src_path ? "copy to" : "write", tmp);
        goto out_unlink;
    }
    int rc = fsync(fd);
    rc = close(fd) || rc;
    fd = -1;
    if (rc || rename(tmp, final)) {
        err = segd_dest_io_errf(errstr, n, "write", final);
        goto out_unlink;
    }
    if (fsync_dir(d->base))
        err = segd_dest_io_errf(errstr, n, "fsync", d->base);
    goto out;
out_unlink:
    unlink(tmp);
out:
    if (fd >= 0)
        close(fd);
    free(tmp);
    free(final);
    return err;
}

segd_err_t segd_dest_dir_delete(segd_dest_t *d, const char *name, char *errstr, size_t n)
{
    segd_err_t err = segd_dest_check_name(name, errstr, n);
    if (err)
        return err;
    char *path = segd_dest_object_path(d, NULL, name);
    if (!path)
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    if (unlink(path) && errno != ENOENT)
        err = segd_dest_io_errf(errstr, n, "delete", path);
    free(path);
    return err;
}

segd_err_t segd_dest_dir_get(segd_dest_t *d, const char *dir, const char *name, sink_t *s,
                             char *errstr, size_t n)
{
    segd_err_t err = segd_dest_check_object(dir, name, errstr, n);
    if (err)
        return err;
    char *path = segd_dest_object_path(d, dir, name);
    if (!path)
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    FILE *f = fopen(path, "rb");
    if (!f) {
        err = errno == ENOENT ? segd_errf(SEGD_ERR_NOTFOUND, errstr, n, "%s: not found", path)
                              : segd_dest_io_errf(errstr, n, "open", path);
        goto out;
    }
    char buf[1 << 16];
    size_t r;
    while (!err && (r = fread(buf, 1, sizeof(buf), f)) > 0)
        err = segd_dest_sink_write(s, buf, r);
    if (!err && ferror(f))
        err = segd_dest_io_errf(errstr, n, "read", path);
    else if (err)
        segd_errf(err, errstr, n, "copy %s: %s", path, segd_err_str(err));
    fclose(f);
out:
    free(path);
    return err;
}
