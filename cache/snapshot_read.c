/* Snapshot reading: fetch a manifest, load and verify bucket files; see
 * snapshot_read.h. Files are checked whole (size, SHA-256) before a record
 * is decoded, and every record's bucket is checked against its file. */
#include "cache/snapshot_read.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/avro_file.h"
#include "wire/change.h"
#include "wire/snap_format.h"

segd_err_t segd_snapshot_manifest(const char *src_url, const segd_dest_opts_t *dopts,
                                  segd_manifest_t *m, char *errstr, size_t n)
{
    segd_manifest_init(m);
    segd_dest_t *d = NULL;
    segd_buf_t buf = {0};
    segd_err_t err = segd_dest_open(&d, src_url, dopts, errstr, n);
    if (!err)
        err = segd_dest_get_mem(d, SEGD_MANIFEST_NAME, &buf, errstr, n);
    if (err == SEGD_ERR_NOTFOUND)
        segd_errf(err, errstr, n, "%s: no %s (no snapshot, or one being written)", src_url,
                  SEGD_MANIFEST_NAME);
    if (!err)
        err = segd_manifest_parse((const char *)buf.data, buf.len, m, errstr, n);
    if (err)
        segd_manifest_free(m);
    segd_buf_free(&buf);
    segd_dest_close(d);
    return err;
}

typedef struct loader {
    segd_snapshot_cb cb;
    void *ctx;
    uint32_t bucket, buckets;
    segd_snapfmt_t format;
    uint64_t records, segments;
    segd_profile_t p;
    int wrong_bucket, stopped;
    char bad_user[96]; /* whose record did not decode, when readable */
} loader_t;

static int load_block(void *ctx, const uint8_t *block, size_t len, int64_t count)
{
    loader_t *l = ctx;
    const uint8_t *pos = block, *end = block + len;
    for (int64_t i = 0; i < count; i++) {
        const char *user;
        size_t ulen;
        if (segd_snapfmt_decode(l->format, &pos, end, &user, &ulen, &l->p) != SEGD_OK) {
            if (user)
                snprintf(l->bad_user, sizeof(l->bad_user), "the record of user %.*s is bad; ",
                         (int)(ulen < 64 ? ulen : 64), user);
            return -1;
        }
        if (segd_bucket_of(user, ulen, l->buckets) != l->bucket) {
            l->wrong_bucket = 1;
            return -1;
        }
        l->records++;
        l->segments += l->p.n;
        if (l->cb && l->cb(l->ctx, l->bucket, user, ulen, &l->p)) {
            l->stopped = 1;
            return 1;
        }
    }
    return pos == end ? 0 : -1;
}

static segd_err_t check_file(const segd_snapshot_file_t *f, const segd_buf_t *buf,
                             char *errstr, size_t n)
{
    if (buf->len != f->bytes)
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n, "%s: %zu bytes, manifest says %" PRIu64,
                         f->name, buf->len, f->bytes);
    char hex[65];
    segd_sha256_hex(buf->data, buf->len, hex);
    if (strcmp(hex, f->sha256))
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n, "%s: SHA-256 mismatch", f->name);
    return SEGD_OK;
}

static segd_err_t load_file(segd_dest_t *d, const segd_manifest_t *m,
                            const segd_snapshot_file_t *f, loader_t *l, segd_buf_t *buf,
                            char *errstr, size_t n)
{
    segd_err_t err = segd_dest_get_mem(d, f->name, buf, errstr, n);
    if (err == SEGD_ERR_NOTFOUND)
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n, "%s: missing", f->name);
    if (!err)
        err = check_file(f, buf, errstr, n);
    if (err)
        return err;
    l->bucket = f->bucket;
    l->buckets = m->buckets;
    l->format = m->format;
    l->bad_user[0] = '\0';
    l->records = l->segments = 0;
    char msg[256];
    err = segd_ocf_read(buf->data, buf->len, load_block, l, NULL, msg, sizeof(msg));
    if (l->stopped)
        return segd_errf(SEGD_ERR_INVALID, errstr, n, "load stopped by the caller");
    if (err)
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n, "%s: %s%s%s", f->name,
                         l->wrong_bucket ? "a record in the wrong bucket; " : "", l->bad_user,
                         msg);
    if (l->records != f->records || l->segments != f->segments)
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n,
                         "%s: %" PRIu64 " records / %" PRIu64 " segments, manifest says %" PRIu64
                         " / %" PRIu64, f->name, l->records, l->segments, f->records,
                         f->segments);
    return SEGD_OK;
}

segd_err_t segd_snapshot_load(const char *src_url, const segd_dest_opts_t *dopts,
                              const segd_manifest_t *m, segd_snapshot_cb cb, void *ctx,
                              char *errstr, size_t n)
{
    if (m->n_files != m->buckets)
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n, "manifest lists %zu files for %u buckets",
                         m->n_files, m->buckets);
    segd_dest_t *d = NULL;
    segd_buf_t buf = {0};
    loader_t l = {.cb = cb, .ctx = ctx};
    segd_profile_init(&l.p);
    uint64_t records = 0, segments = 0;
    segd_err_t err = segd_dest_open(&d, src_url, dopts, errstr, n);
    for (size_t i = 0; !err && i < m->n_files; i++) {
        err = load_file(d, m, &m->files[i], &l, &buf, errstr, n);
        records += l.records;
        segments += l.segments;
    }
    if (!err && (records != m->records || segments != m->segments))
        err = segd_errf(SEGD_ERR_CORRUPT, errstr, n, "totals differ from the manifest");
    segd_profile_free(&l.p);
    segd_buf_free(&buf);
    segd_dest_close(d);
    return err;
}

segd_err_t segd_snapshot_read(const char *src_url, const segd_dest_opts_t *dopts,
                              segd_manifest_t *m, segd_snapshot_cb cb, void *ctx,
                              char *errstr, size_t n)
{
    segd_err_t err = SEGD_OK;
    for (int attempt = 0; attempt < 3; attempt++) {
        err = segd_snapshot_manifest(src_url, dopts, m, errstr, n);
        if (err)
            return err;
        err = segd_snapshot_load(src_url, dopts, m, cb, ctx, errstr, n);
        if (err != SEGD_ERR_CORRUPT)
            return err;
        /* replaced while we read it? then the new one is whole: read that */
        segd_manifest_t now;
        char ignored[256];
        int replaced = 0;
        if (segd_snapshot_manifest(src_url, dopts, &now, ignored, sizeof(ignored)) == SEGD_OK) {
            replaced = now.created_at_ms != m->created_at_ms;
            segd_manifest_free(&now);
        }
        if (!replaced)
            return err;
        segd_manifest_free(m);
    }
    return err;
}
