/* File bytes, decompressed by magic; see source.h. Input is read in 256 KiB
 * pieces; zlib and libzstd keep no more than their windows. */
#include "load/source.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#define SOURCE_IN (256 * 1024)

struct segd_source {
    int fd;
    segd_source_kind_t kind;
    uint8_t *in;
    size_t in_pos, in_len;
    int in_eof, failed;
    int mid;        /* inside a gzip member or zstd frame */
    z_stream z;
    int z_ready;
    ZSTD_DCtx *zd;
    uint64_t consumed, size;
};

const char *segd_source_kind_name(segd_source_kind_t k)
{
    return k == SEGD_SOURCE_GZIP ? "gzip" : k == SEGD_SOURCE_ZSTD ? "zstd" : "plain";
}

segd_source_kind_t segd_source_kind(const segd_source_t *s) { return s->kind; }
uint64_t segd_source_consumed(const segd_source_t *s) { return s->consumed; }
uint64_t segd_source_size(const segd_source_t *s) { return s->size; }

static int refill(segd_source_t *s, char *errstr, size_t n)
{
    ssize_t r;
    do
        r = read(s->fd, s->in, SOURCE_IN);
    while (r < 0 && errno == EINTR);
    if (r < 0) {
        segd_errf(SEGD_ERR_IO, errstr, n, "read error: %s", strerror(errno));
        return -1;
    }
    s->in_pos = 0;
    s->in_len = (size_t)r;
    s->in_eof = r == 0;
    s->consumed += (uint64_t)r;
    return 0;
}

segd_err_t segd_source_open(segd_source_t **out, const char *path, char *errstr, size_t n)
{
    struct stat st;
    segd_source_t *s = calloc(1, sizeof(*s));
    if (!s || !(s->in = malloc(SOURCE_IN))) {
        free(s);
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    }
    s->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (s->fd < 0) {
        segd_errf(SEGD_ERR_IO, errstr, n, "cannot open %s: %s", path, strerror(errno));
        goto out_free;
    }
    if (fstat(s->fd, &st) || !S_ISREG(st.st_mode)) { /* a directory reads as empty */
        segd_errf(SEGD_ERR_IO, errstr, n, "%s: not a regular file", path);
        goto out_free;
    }
    s->size = (uint64_t)st.st_size;
    /* the magic: the first refill holds at least 4 bytes of any longer file */
    if (refill(s, errstr, n))
        goto out_free;
    while (!s->in_eof && s->in_len < 4) { /* a pipe-like short read: keep them */
        ssize_t r = read(s->fd, s->in + s->in_len, SOURCE_IN - s->in_len);
        if (r <= 0)
            break;
        s->in_len += (size_t)r;
        s->consumed += (uint64_t)r;
    }
    if (s->in_len >= 2 && s->in[0] == 0x1f && s->in[1] == 0x8b) {
        s->kind = SEGD_SOURCE_GZIP;
        if (inflateInit2(&s->z, 15 + 16) != Z_OK) {
            segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
            goto out_free;
        }
        s->z_ready = 1;
    } else if (s->in_len >= 4 && !memcmp(s->in, "\x28\xb5\x2f\xfd", 4)) {
        s->kind = SEGD_SOURCE_ZSTD;
        if (!(s->zd = ZSTD_createDCtx())) {
            segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
            goto out_free;
        }
    }
    *out = s;
    return SEGD_OK;
out_free:
    segd_source_close(s);
    return SEGD_ERR_IO;
}

void segd_source_close(segd_source_t *s)
{
    if (!s)
        return;
    if (s->fd >= 0)
        close(s->fd);
    if (s->z_ready)
        inflateEnd(&s->z);
    ZSTD_freeDCtx(s->zd);
    free(s->in);
    free(s);
}

static ssize_t fail(segd_source_t *s, char *errstr, size_t n, const char *what,
                    const char *detail)
{
    s->failed = 1;
    segd_errf(SEGD_ERR_DECODE, errstr, n, "%s%s%s after %llu bytes of input", what,
              detail ? ": " : "", detail ? detail : "", (unsigned long long)s->consumed);
    return -1;
}

/* One step of the decompressor over what input there is: bytes produced. */
static ssize_t step(segd_source_t *s, uint8_t *out, size_t cap, char *errstr, size_t n)
{
    if (s->kind == SEGD_SOURCE_GZIP) {
        if (!s->mid) {
            /* zero padding after a member (tape and block devices write it):
             * gzip -t accepts it as the end, so do we */
            while (s->in_pos < s->in_len && s->in[s->in_pos] == 0)
                s->in_pos++;
            if (s->in_pos == s->in_len)
                return 0; /* between members, nothing left: the end */
            inflateReset(&s->z);
            s->mid = 1;
        }
        s->z.next_in = s->in + s->in_pos;
        s->z.avail_in = (uInt)(s->in_len - s->in_pos);
        s->z.next_out = out;
        s->z.avail_out = (uInt)(cap > UINT32_MAX ? UINT32_MAX : cap);
        int rc = inflate(&s->z, Z_NO_FLUSH);
        size_t made = (size_t)(s->z.next_out - out);
        s->in_pos = (size_t)(s->z.next_in - s->in);
        if (rc == Z_STREAM_END)
            s->mid = 0;
        else if (rc != Z_OK && rc != Z_BUF_ERROR)
            return fail(s, errstr, n, "corrupt gzip data", s->z.msg ? s->z.msg : "error");
        return (ssize_t)made;
    }
    if (!s->mid && s->in_pos == s->in_len)
        return 0; /* between frames, nothing left: the end (a call would ask for more) */
    ZSTD_inBuffer ib = {s->in, s->in_len, s->in_pos};
    ZSTD_outBuffer ob = {out, cap, 0};
    size_t rc = ZSTD_decompressStream(s->zd, &ob, &ib);
    s->in_pos = ib.pos;
    if (ZSTD_isError(rc))
        return fail(s, errstr, n, "corrupt zstd data", ZSTD_getErrorName(rc));
    s->mid = rc != 0;
    return (ssize_t)ob.pos;
}

ssize_t segd_source_read(segd_source_t *s, void *buf, size_t cap, char *errstr, size_t n)
{
    if (s->failed)
        return segd_errf(SEGD_ERR_DECODE, errstr, n, "unreadable"), -1;
    if (cap == 0)
        return 0;
    for (;;) {
        if (s->in_pos == s->in_len && !s->in_eof && refill(s, errstr, n)) {
            s->failed = 1;
            return -1;
        }
        if (s->kind == SEGD_SOURCE_PLAIN) {
            size_t k = s->in_len - s->in_pos;
            if (k > cap)
                k = cap;
            memcpy(buf, s->in + s->in_pos, k);
            s->in_pos += k;
            if (k || s->in_eof)
                return (ssize_t)k;
            continue;
        }
        ssize_t made = step(s, buf, cap, errstr, n);
        if (made != 0)
            return made;
        if (s->in_pos == s->in_len && s->in_eof) {
            if (s->mid)
                return fail(s, errstr, n,
                            s->kind == SEGD_SOURCE_GZIP ? "truncated gzip stream"
                                                        : "truncated zstd stream",
                            NULL);
            return 0;
        }
    }
}
