/* Snapshot reading: find the topology, load and verify each unit, fold the
 * units' manifests; see snapshot_read.h. Files are checked whole (size,
 * SHA-256) before a record is decoded, and every record's partition is
 * checked against its unit. Units are read by one or more threads, each
 * with destination handles of its own. */
#define _GNU_SOURCE
#include "cache/snapshot_read.h"

#include <dirent.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/partition.h"
#include "wire/snap_native.h"
#include "wire/avro_file.h"
#include "wire/change.h"
#include "wire/snap_format.h"


/* ---------- topology ---------- */

static segd_err_t fetch_topology(const char *url, const segd_dest_opts_t *dopts,
                                 segd_topology_t *t, char *errstr, size_t n)
{
    segd_dest_t *d = NULL;
    segd_buf_t buf = {0};
    segd_err_t err = segd_dest_open(&d, url, dopts, errstr, n);
    if (!err)
        err = segd_dest_get_mem(d, SEGD_TOPOLOGY_NAME, &buf, errstr, n);
    if (!err)
        err = segd_topology_parse((const char *)buf.data, buf.len, t, errstr, n);
    segd_buf_free(&buf);
    segd_dest_close(d);
    return err;
}

/* A local SRC = DEST: its one subdirectory holding a topology.json. */
static segd_err_t find_topic_dir(const char *src, char *topic_url, size_t cap, char *errstr,
                                 size_t n)
{
    DIR *d = opendir(src);
    struct dirent *e;
    int found = 0;
    while (d && (e = readdir(d))) {
        char path[4400];
        struct stat st;
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "%s/%s/%s", src, e->d_name, SEGD_TOPOLOGY_NAME);
        if (stat(path, &st) || !S_ISREG(st.st_mode))
            continue;
        if (found++) {
            closedir(d);
            return segd_errf(SEGD_ERR_INVALID, errstr, n,
                             "%s holds snapshots of several topics: name one (%s/<topic>)", src,
                             src);
        }
        segd_dest_join(topic_url, cap, src, e->d_name);
    }
    if (d)
        closedir(d);
    return found ? SEGD_OK : SEGD_ERR_NOTFOUND;
}

segd_err_t segd_snapshot_topology(const char *src, const segd_dest_opts_t *dopts,
                                  char *topic_url, size_t cap, segd_topology_t *t,
                                  char *errstr, size_t n)
{
    snprintf(topic_url, cap, "%s", src);
    segd_err_t err = fetch_topology(src, dopts, t, errstr, n);
    if (err != SEGD_ERR_NOTFOUND || segd_dest_is_remote(src))
        goto out;
    err = find_topic_dir(src, topic_url, cap, errstr, n);
    if (!err)
        err = fetch_topology(topic_url, dopts, t, errstr, n);
out:
    if (err == SEGD_ERR_NOTFOUND)
        segd_errf(err, errstr, n, "%s: no %s here nor in a topic directory under it (no "
                  "snapshot, or one being written)", src, SEGD_TOPOLOGY_NAME);
    return err;
}

/* ---------- one unit ---------- */

typedef struct loader {
    segd_snapshot_cb cb;
    segd_snapshot_member_cb mcb; /* a members file's records (NULL = verify only) */
    void *mctx;
    uint64_t members;
    segd_snapshot_rec_cb rcb; /* or this one (segd_snapshot_read_unit) */
    void *ctx;
    segd_partitioner_t partitioner;
    int32_t partition, partitions;
    segd_snapfmt_t format;    /* the unit's records_format, from its manifest */
    uint64_t records, segments;
    segd_profile_t p;
    int wrong_partition, stopped;
    int fed;           /* rcb has had records: a re-read must start the load anew */
    char bad_user[96]; /* whose record did not decode, when readable */
} loader_t;

static int load_block(void *ctx, const uint8_t *block, size_t len, int64_t count)
{
    loader_t *l = ctx;
    const uint8_t *pos = block, *end = block + len;
    for (int64_t i = 0; i < count; i++) {
        const char *user;
        size_t ulen;
        const uint8_t *rec = NULL, *at = pos;
        size_t rec_len = 0;
        if (l->rcb && l->format == SEGD_SNAPFMT_NATIVE && /* checked in full below */
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
        l->fed |= l->rcb != NULL;
        if ((l->cb && l->cb(l->ctx, l->partition, user, ulen, &l->p)) ||
            (l->rcb && l->rcb(l->ctx, l->partition, user, ulen, &l->p, rec, rec_len))) {
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

/* The file into buf, its size and SHA-256 checked against the manifest. */
static segd_err_t fetch_file(segd_dest_t *d, const segd_snapshot_file_t *f, segd_buf_t *buf,
                             char *errstr, size_t n)
{
    segd_err_t err = segd_dest_get_mem(d, f->name, buf, errstr, n);
    if (err == SEGD_ERR_NOTFOUND)
        return segd_errf(SEGD_ERR_CORRUPT, errstr, n, "%s: missing", f->name);
    return err ? err : check_file(f, buf, errstr, n);
}

static segd_err_t load_file(segd_dest_t *d, const segd_snapshot_file_t *f, loader_t *l,
                            segd_buf_t *buf, char *errstr, size_t n)
{
    segd_err_t err = fetch_file(d, f, buf, errstr, n);
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
        if (l->mcb && l->mcb(l->mctx, l->partition, &m)) {
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
    segd_err_t err = fetch_file(d, f, buf, errstr, n);
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

static segd_err_t fetch_manifest(segd_dest_t *d, segd_manifest_t *m, char *errstr, size_t n)
{
    segd_buf_t buf = {0};
    segd_manifest_init(m);
    segd_err_t err = segd_dest_get_mem(d, SEGD_MANIFEST_NAME, &buf, errstr, n);
    if (err == SEGD_ERR_NOTFOUND)
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

/* One attempt: manifest, then every file of it. */
static segd_err_t load_unit_once(segd_dest_t *d, const segd_topology_t *t, int32_t p,
                                 loader_t *l, segd_manifest_t *m, char *errstr, size_t n)
{
    segd_buf_t buf = {0};
    segd_err_t err = fetch_manifest(d, m, errstr, n);
    if (!err)
        err = check_unit(t, p, m, errstr, n);
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

/* Whether the unit's manifest is no longer the one read (a newer export
 * replaced it: that one is whole, read it). */
static int replaced(segd_dest_t *d, const segd_manifest_t *m)
{
    segd_manifest_t now;
    char ignored[256];
    int yes = 0;
    if (fetch_manifest(d, &now, ignored, sizeof(ignored)) == SEGD_OK)
        yes = now.created_at_ms != m->created_at_ms;
    segd_manifest_free(&now);
    return yes;
}

static segd_err_t load_unit(const char *topic_url, const segd_dest_opts_t *dopts,
                            const segd_topology_t *t, int32_t p, loader_t *l,
                            segd_manifest_t *m, char *errstr, size_t n)
{
    char dir[32], url[4400];
    segd_unit_dir_name(dir, sizeof(dir), p);
    segd_dest_join(url, sizeof(url), topic_url, dir);
    segd_dest_t *d = NULL;
    segd_err_t err = segd_dest_open(&d, url, dopts, errstr, n);
    for (int attempt = 0; !err && attempt < 3; attempt++) {
        err = load_unit_once(d, t, p, l, m, errstr, n);
        if (err != SEGD_ERR_CORRUPT || !replaced(d, m))
            break;
        segd_manifest_free(m);
        /* what a restore took from the old unit must not join the new one
         * (the old may hold entries the new dropped below its W) */
        if (l->fed) {
            segd_manifest_init(m);
            err = segd_errf(SEGD_ERR_UNSORTED, errstr, n,
                            "unit %d replaced by a newer export while it was read: load it "
                            "anew", (int)p);
        }
    }
    segd_dest_close(d);
    return err;
}

/* ---------- every unit ---------- */

typedef struct reader {
    const segd_snapshot_read_opts_t *o;
    const segd_dest_opts_t *dopts;
    char topic_url[4200];
    segd_topology_t t;
    segd_snapshot_cb cb;
    void *ctx;
    segd_manifest_t *units;   /* per partition */
    segd_err_t *errs;         /* per partition */
    char (*msgs)[512];        /* per partition */
    _Atomic int32_t next;
    _Atomic int failed;
    pthread_mutex_t mu;       /* serialises on_unit */
} reader_t;

static void report(reader_t *r, int32_t p)
{
    if (!r->o || !r->o->on_unit)
        return;
    segd_unit_report_t rep = {p, r->errs[p] ? NULL : &r->units[p], r->errs[p], r->msgs[p]};
    pthread_mutex_lock(&r->mu);
    r->o->on_unit(r->o->unit_ctx, &rep);
    pthread_mutex_unlock(&r->mu);
}

static void *read_units(void *arg)
{
    reader_t *r = arg;
    loader_t l = {.cb = r->cb, .ctx = r->ctx, .partitioner = r->t.partitioner,
                  .partitions = r->t.partitions, .mcb = r->o ? r->o->on_member : NULL,
                  .mctx = r->o ? r->o->member_ctx : NULL};
    segd_profile_init(&l.p);
    int keep_going = r->o && r->o->keep_going;
    for (;;) {
        int32_t p = atomic_fetch_add(&r->next, 1);
        if (p >= r->t.partitions || (!keep_going && atomic_load(&r->failed)))
            break;
        l.partition = p;
        r->errs[p] = load_unit(r->topic_url, r->dopts, &r->t, p, &l, &r->units[p], r->msgs[p],
                               sizeof(r->msgs[p]));
        if (r->errs[p])
            atomic_store(&r->failed, 1);
        report(r, p);
    }
    segd_profile_free(&l.p);
    return NULL;
}

static void run_threads(reader_t *r)
{
    uint32_t threads = r->o && r->o->threads > 1 ? r->o->threads : 1;
    if (threads > (uint32_t)r->t.partitions)
        threads = (uint32_t)r->t.partitions;
    pthread_t *tid = calloc(threads, sizeof(*tid));
    uint32_t started = 1;
    for (; tid && started < threads; started++)
        if (pthread_create(&tid[started], NULL, read_units, r))
            break;
    read_units(r);
    for (uint32_t i = 1; tid && i < started; i++)
        pthread_join(tid[i], NULL);
    free(tid);
}

/* The first failed unit names the error; the loaded ones fold into m. */
static segd_err_t fold_units(reader_t *r, segd_manifest_t *m, char *errstr, size_t n)
{
    segd_err_t first = SEGD_OK;
    size_t bad = 0;
    for (int32_t p = 0; p < r->t.partitions; p++) {
        int read = p < atomic_load(&r->next);
        if (read && !r->errs[p] && r->units[p].units) {
            segd_err_t err = segd_manifest_fold(m, &r->units[p], r->msgs[p], sizeof(r->msgs[p]));
            if (err)
                r->errs[p] = err;
        }
        if (read && r->errs[p] && !bad++)
            first = segd_errf(r->errs[p], errstr, n, "%s unit p-%05d: %s", r->t.topic, (int)p,
                              r->msgs[p]);
        segd_manifest_free(&r->units[p]);
    }
    if (bad > 1) {
        size_t len = strlen(errstr);
        snprintf(errstr + len, n > len ? n - len : 0, " (and %zu more units)", bad - 1);
    }
    return first;
}

segd_err_t segd_snapshot_read(const char *src_url, const segd_snapshot_read_opts_t *o,
                              segd_manifest_t *m, segd_snapshot_cb cb, void *ctx,
                              char *errstr, size_t n)
{
    segd_manifest_init(m);
    reader_t r = {.o = o, .dopts = o ? o->dest : NULL, .cb = cb, .ctx = ctx};
    segd_err_t err = segd_snapshot_topology(src_url, r.dopts, r.topic_url, sizeof(r.topic_url),
                                            &r.t, errstr, n);
    if (err)
        return err;
    size_t np = (size_t)r.t.partitions;
    r.units = calloc(np, sizeof(*r.units));
    r.errs = calloc(np, sizeof(*r.errs));
    r.msgs = calloc(np, sizeof(*r.msgs));
    if (!r.units || !r.errs || !r.msgs) {
        err = segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    } else {
        pthread_mutex_init(&r.mu, NULL);
        run_threads(&r);
        pthread_mutex_destroy(&r.mu);
        err = fold_units(&r, m, errstr, n);
    }
    free(r.units);
    free(r.errs);
    free(r.msgs);
    return err;
}

/* Whether the unit of partition p has a manifest at all. */
static segd_err_t unit_present(const char *topic_url, const segd_dest_opts_t *dopts,
                               int32_t p, char *errstr, size_t n)
{
    char dir[32], url[4400];
    segd_unit_dir_name(dir, sizeof(dir), p);
    segd_dest_join(url, sizeof(url), topic_url, dir);
    segd_dest_t *d = NULL;
    segd_buf_t buf = {0};
    segd_err_t err = segd_dest_open(&d, url, dopts, errstr, n);
    if (!err)
        err = segd_dest_get_mem(d, SEGD_MANIFEST_NAME, &buf, errstr, n);
    segd_buf_free(&buf);
    segd_dest_close(d);
    return err;
}

segd_err_t segd_snapshot_read_unit(const char *topic_url, int32_t partition, int32_t partitions,
                                   segd_partitioner_t partitioner,
                                   const segd_dest_opts_t *dopts, segd_manifest_t *m,
                                   segd_snapshot_rec_cb cb, void *ctx, char *errstr, size_t n)
{
    segd_topology_t t;
    segd_manifest_init(m);
    segd_err_t err = fetch_topology(topic_url, dopts, &t, errstr, n);
    if (err == SEGD_ERR_NOTFOUND)
        return segd_errf(err, errstr, n, "%s: no %s", topic_url, SEGD_TOPOLOGY_NAME);
    if (err)
        return err;
    if (partitions > 0 && t.partitions != partitions)
        return segd_errf(SEGD_ERR_NOTFOUND, errstr, n,
                         "%s: the snapshot has %d partitions, the topic %d: its units hold "
                         "other users", topic_url, (int)t.partitions, (int)partitions);
    if (partitions > 0 && t.partitioner != partitioner)
        return segd_errf(SEGD_ERR_NOTFOUND, errstr, n,
                         "%s: the snapshot's units are routed by %s, input.partitioner is %s: "
                         "they hold other users", topic_url,
                         segd_partitioner_name(t.partitioner), segd_partitioner_name(partitioner));
    if (partition < 0 || partition >= t.partitions)
        return segd_errf(SEGD_ERR_NOTFOUND, errstr, n, "%s: no partition %d", topic_url,
                         (int)partition);
    if ((err = unit_present(topic_url, dopts, partition, errstr, n)) == SEGD_ERR_NOTFOUND)
        return segd_errf(err, errstr, n, "%s: no unit for partition %d", topic_url,
                         (int)partition);
    if (err)
        return err;
    loader_t l = {.rcb = cb, .ctx = ctx, .partitioner = t.partitioner,
                  .partitions = t.partitions, .partition = partition};
    segd_profile_init(&l.p);
    err = load_unit(topic_url, dopts, &t, partition, &l, m, errstr, n);
    segd_profile_free(&l.p);
    return err;
}
