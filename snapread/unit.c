/* Reading and checking one snapshot unit (snapread/unit.h): its manifest,
 * then each file fetched whole, checked, and decoded record by record, then
 * its members file. Every read goes through the caller's handle, so a unit
 * costs one open however many files it has. */
#define _GNU_SOURCE
#include "snapread/unit.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/partition.h"
#include "wire/avro_file.h"
#include "wire/digest.h"
#include "wire/snap_format.h"
#include "wire/snap_native.h"

segd_err_t segd_snapread_topology(segd_dest_t *d, segd_topology_t *t, char *errstr, size_t n)
{
    segd_buf_t buf = {0};
    segd_err_t err = segd_dest_get_mem(d, SEGD_TOPOLOGY_NAME, &buf, errstr, n);
    if (!err)
        err = segd_topology_parse((const char *)buf.data, buf.len, t, errstr, n);
    segd_buf_free(&buf);
    return err;
}

/* What one read of a unit carries from record to record. */
typedef struct loader {
    const segd_unit_read_opts_t *o;
    const char *dir;          /* the unit's folder under the handle's base */
    segd_partitioner_t partitioner;
    int32_t partition, partitions;
    segd_snapfmt_t format;    /* the unit's records_format, from its manifest */
    uint64_t records, segments, members;
    segd_profile_t p;
    int wrong_partition, stopped;
    int fed;           /* the caller has had records: a re-read must discard them first */
    char bad_user[96]; /* whose record did not decode, when readable */
} loader_t;

/* Hands one record to the caller; non-zero when the caller stops the read. */
static int deliver(loader_t *l, const char *user, size_t ulen, const uint8_t *rec,
                   size_t rec_len)
{
    const segd_unit_read_opts_t *o = l->o;
    l->fed |= o->on_profile || o->on_record;
    if ((o->on_profile && o->on_profile(o->ctx, l->partition, user, ulen, &l->p)) ||
        (o->on_record && o->on_record(o->ctx, l->partition, user, ulen, &l->p, rec, rec_len))) {
        l->stopped = 1;
        return 1;
    }
    return 0;
}

static int load_block(void *ctx, const uint8_t *block, size_t len, int64_t count)
{
    loader_t *l = ctx;
    const uint8_t *pos = block, *end = block + len;
    for (int64_t i = 0; i < count; i++) {
        const char *user;
        size_t ulen;
        const uint8_t *rec = NULL, *at = pos;
        size_t rec_len = 0;
        /* The native bytes go to on_record as they are. This first pass only
         * finds them; the full decode below checks them. */
        if (l->o->on_record && l->format == SEGD_SNAPFMT_NATIVE &&
            segd_snapnat_decode_raw(&at, end, &user, &ulen, &rec, &rec_len) != SEGD_OK)
            rec = NULL;
        if (segd_snapfmt_decode(l->format, &pos, end, &user, &ulen, &l->p) != SEGD_OK) {
            if (user)
                snprintf(l->bad_user, sizeof(l->bad_user), "the record of user %.*s is bad; ",
                         (int)(ulen < 64 ? ulen : 64), user);
            return -1;
        }
        if (segd_partition_of(l->partitioner, user, ulen, l->partitions) != l->partition) {
            l->wrong_partition = 1;
            return -1;
        }
        l->records++;
        l->segments += l->p.n;
        if (deliver(l, user, ulen, rec, rec_len))
            return 1;
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

/* The file into buf, its size and SHA-256 checked against the manifest. */
static segd_err_t fetch_file(segd_dest_t *d, const loader_t *l, const segd_snapshot_file_t *f,
                             segd_buf_t *buf, char *errstr, size_t n)
{
    segd_err_t err = segd_dest_get_mem_in(d, l->dir, f->name, buf, errstr, n);
    if (err == SEGD_ERR_NOTFOUND)
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n, "%s: missing", f->name);
    return err ? err : check_file(f, buf, errstr, n);
}

static segd_err_t load_file(segd_dest_t *d, const segd_snapshot_file_t *f, loader_t *l,
                            segd_buf_t *buf, char *errstr, size_t n)
{
    segd_err_t err = fetch_file(d, l, f, buf, errstr, n);
    if (err)
        return err;
    uint64_t records = l->records, segments = l->segments;
    l->bad_user[0] = '\0';
    char msg[256];
    err = segd_ocf_read(buf->data, buf->len, load_block, l, NULL, msg, sizeof(msg));
    if (l->stopped)
        return segd_errf(SEGD_ERR_INVALID, errstr, n, "load stopped by the caller");
    if (err)
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n, "%s: %s%s%s", f->name,
                         l->wrong_partition ? "a record of another partition; " : "",
                         l->bad_user, msg);
    if (l->records - records != f->records || l->segments - segments != f->segments)
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n,
                         "%s: %" PRIu64 " records / %" PRIu64 " segments, manifest says %" PRIu64
                         " / %" PRIu64, f->name, l->records - records,
                         l->segments - segments, f->records, f->segments);
    return SEGD_OK;
}

static int members_block(void *ctx, const uint8_t *block, size_t len, int64_t count)
{
    loader_t *l = ctx;
    const uint8_t *pos = block, *end = block + len;
    for (int64_t i = 0; i < count; i++) {
        segd_member_t m;
        if (segd_member_decode_next(&pos, end, &m) != SEGD_OK)
            return -1;
        if (segd_partition_of(l->partitioner, m.id, m.id_len, l->partitions) != l->partition) {
            l->wrong_partition = 1;
            return -1;
        }
        l->members++;
        if (l->o->on_member && l->o->on_member(l->o->member_ctx, l->partition, &m)) {
            l->stopped = 1;
            return 1;
        }
    }
    return pos == end ? 0 : -1;
}

/* The unit's identity members file (DESIGN §10.6), checked like the
 * profile files: size, SHA-256, every record, the count. */
static segd_err_t load_members(segd_dest_t *d, const segd_snapshot_file_t *f, loader_t *l,
                               segd_buf_t *buf, char *errstr, size_t n)
{
    segd_err_t err = fetch_file(d, l, f, buf, errstr, n);
    if (err)
        return err;
    char msg[256] = "";
    l->members = 0;
    l->wrong_partition = 0;
    err = segd_ocf_read(buf->data, buf->len, members_block, l, NULL, msg, sizeof(msg));
    if (l->stopped)
        return segd_errf(SEGD_ERR_INVALID, errstr, n, "load stopped by the caller");
    if (err)
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n, "%s: %s%s", f->name,
                         l->wrong_partition ? "an id of another partition; "
                                            : "a record that is not a MemberEvent; ",
                         msg);
    if (l->members != f->records)
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n,
                         "%s: %" PRIu64 " members, manifest says %" PRIu64, f->name,
                         l->members, f->records);
    return SEGD_OK;
}

/* SEGD_ERR_NOTFOUND stays itself only for the caller that asked
 * (absent_is_notfound); to every other reader a unit without a manifest is
 * a damaged snapshot. */
static segd_err_t fetch_manifest(segd_dest_t *d, const char *dir, int absent_is_notfound,
                                 segd_manifest_t *m, char *errstr, size_t n)
{
    segd_buf_t buf = {0};
    segd_manifest_init(m);
    segd_err_t err = segd_dest_get_mem_in(d, dir, SEGD_MANIFEST_NAME, &buf, errstr, n);
    if (err == SEGD_ERR_NOTFOUND && !absent_is_notfound)
        err = segd_errf(SEGD_ERR_CORRUPT, errstr, n, "missing (not exported yet?)");
    if (!err)
        err = segd_manifest_parse((const char *)buf.data, buf.len, m, errstr, n);
    segd_buf_free(&buf);
    return err;
}

static segd_err_t check_unit(const segd_topology_t *t, int32_t p, const segd_manifest_t *m,
                             char *errstr, size_t n)
{
    if (strcmp(m->topic, t->topic) || m->partition != p || m->partitions != t->partitions ||
        m->partitioner != t->partitioner)
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n,
                         "manifest says %s/%d of %d partitions by %s, the topology %s/%d of %d "
                         "by %s (left from before a repartition?)", m->topic, (int)m->partition,
                         (int)m->partitions, segd_partitioner_name(m->partitioner), t->topic,
                         (int)p, (int)t->partitions, segd_partitioner_name(t->partitioner));
    return SEGD_OK;
}

/* One attempt: manifest, then every file of it. Only the first attempt may
 * find no unit at all; later ones follow a manifest that was there. */
static segd_err_t load_unit_once(segd_dest_t *d, const segd_topology_t *t, loader_t *l,
                                 int first, segd_manifest_t *m, char *errstr, size_t n)
{
    segd_buf_t buf = {0};
    segd_err_t err = fetch_manifest(d, l->dir, first && l->o->absent_is_notfound, m, errstr, n);
    if (!err)
        err = check_unit(t, l->partition, m, errstr, n);
    l->format = m->records_format; /* units of one snapshot may differ */
    l->records = l->segments = 0;
    for (size_t i = 0; !err && i < m->n_files; i++)
        err = load_file(d, &m->files[i], l, &buf, errstr, n);
    if (!err && (l->records != m->records || l->segments != m->segments))
        err = segd_errf(SEGD_ERR_CORRUPT, errstr, n, "totals differ from the manifest");
    if (!err && m->has_members)
        err = load_members(d, &m->members, l, &buf, errstr, n);
    segd_buf_free(&buf);
    return err;
}

/* Whether a newer export replaced the unit's manifest since it was read. The
 * newer unit is whole, so it is worth reading. */
static int replaced(segd_dest_t *d, const char *dir, const segd_manifest_t *m)
{
    segd_manifest_t now;
    char ignored[256];
    int yes = 0;
    if (fetch_manifest(d, dir, 0, &now, ignored, sizeof(ignored)) == SEGD_OK)
        yes = now.created_at_ms != m->created_at_ms;
    segd_manifest_free(&now);
    return yes;
}

segd_err_t segd_snapread_unit(segd_dest_t *d, const segd_topology_t *t, int32_t p,
                              const segd_unit_read_opts_t *o, segd_manifest_t *m,
                              char *errstr, size_t n)
{
    char dir[32];
    segd_unit_dir_name(dir, sizeof(dir), p);
    loader_t l = {.o = o, .dir = dir, .partitioner = t->partitioner, .partition = p,
                  .partitions = t->partitions};
    segd_profile_init(&l.p);
    segd_manifest_init(m);
    segd_err_t err = SEGD_OK;
    for (int attempt = 0; attempt < 3; attempt++) {
        err = load_unit_once(d, t, &l, attempt == 0, m, errstr, n);
        if (err != SEGD_ERR_CORRUPT || !replaced(d, dir, m))
            break;
        segd_manifest_free(m);
        segd_manifest_init(m);
        /* The old unit may hold users and entries that the new one no
         * longer has (dropped below its W, or gone in a rebuilt store), so
         * what the caller took from it must not join the new one: it drops
         * them, or starts the load anew. */
        if (l.fed && (!o->on_discard || o->on_discard(o->ctx, t, p))) {
            err = segd_errf(SEGD_ERR_UNSORTED, errstr, n,
                            "unit %d replaced by a newer export while it was read: load it "
                            "anew", (int)p);
            break;
        }
        l.fed = 0;
    }
    segd_profile_free(&l.p);
    return err;
}
