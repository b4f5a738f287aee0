/* Snapshot export; see snapshot.h. Bucket files are
 * written side by side from one key-order scan (each record goes to its
 * bucket's writer), so the store is read once. For a directory destination
 * they are written in place under temporary names and renamed; for remote
 * ones they are staged in a temporary directory and uploaded. */
#define _GNU_SOURCE
#include "publisher/snapshot.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "wire/avro_file.h"
#include "wire/snap_native.h"
#include "base/clock.h"

void segd_snapshot_opts_default(segd_snapshot_opts_t *o)
{
    memset(o, 0, sizeof(*o));
    o->buckets = SEGD_DEFAULT_BUCKETS;
    o->codec = segd_snapshot_default_codec(SEGD_SNAPFMT_AVRO);
    o->level = 1;
    o->threads = 2;
    o->changes_topic = "segments.changes";
    o->format = SEGD_SNAPFMT_AVRO;
    o->native_copy = 1;
    segd_dest_opts_default(&o->dest);
}

segd_ocf_codec_t segd_snapshot_default_codec(segd_snapfmt_t format)
{
    return format == SEGD_SNAPFMT_NATIVE ? SEGD_OCF_NULL : SEGD_OCF_DEFLATE;
}

static int is_remote(const char *url)
{
    return !strncmp(url, "http://", 7) || !strncmp(url, "https://", 8) ||
           !strncmp(url, "s3://", 5);
}

/* ---------- collecting the view's metadata ---------- */

static segd_err_t collect_meta(segd_store_view_t *v, segd_manifest_t *m, char *errstr,
                               size_t n)
{
    segd_err_t err = segd_store_view_positions(v, "offset", segd_manifest_add_input, m, errstr, n);
    if (!err && m->changes_topic)
        err = segd_store_view_positions(v, "changes", segd_manifest_add_change, m, errstr, n);
    if (!err)
        err = segd_store_view_retirements(v, segd_manifest_add_retirement, m, errstr, n);
    return err;
}

/* ---------- export ---------- */

typedef struct exporter {
    const segd_snapshot_opts_t *o;
    segd_store_t *store;
    segd_manifest_t *m;
    char dir[4096];         /* where bucket files are written */
    int in_place;           /* dir is the destination itself */
    segd_ocf_writer_t **w;  /* one per bucket */
    uint64_t *segments;     /* per bucket */
    double last_progress;
    _Atomic uint64_t records, entries;
    int64_t gen;            /* in every bucket file name: snapshots never share files */
    uint32_t published;     /* bucket files already at the destination */
    int lock_fd;            /* the destination directory's export lock; -1 = none */
} exporter_t;

/* One scanning thread: it writes the buckets b with b % lanes == lane. Every
 * lane reads the whole view (a scan costs ~1/12 of the encoding and
 * compression it feeds), so the buckets need no locks. */
typedef struct lane {
    exporter_t *x;
    segd_store_view_t *v;
    uint32_t lane, lanes;
    segd_err_t err;
    char errmsg[512];
    segd_snapnat_writer_t nat; /* native: rule and scratch */
} lane_t;

static void bucket_name(char *out, size_t cap, uint32_t b, int64_t gen)
{
    snprintf(out, cap, "bucket-%05u-%" PRId64 ".avro", b, gen);
}

static void staged_path(const exporter_t *x, uint32_t b, char *out, size_t cap)
{
    char name[64];
    bucket_name(name, sizeof(name), b, x->gen);
    snprintf(out, cap, "%s/%s%s", x->dir, name, x->in_place ? ".partial" : "");
}


static void progress(exporter_t *x, int final)
{
    if (!x->o->progress)
        return;
    double t = segd_mono_s();
    if (!final && t - x->last_progress < 0.5)
        return;
    x->last_progress = t;
    fprintf(stderr, "\rsnapshot: %" PRIu64 " users, %" PRIu64 " entries%s",
            (uint64_t)atomic_load(&x->records), (uint64_t)atomic_load(&x->entries),
            final ? "\n" : "");
}

/* Counts one record appended to bucket b's writer and commits it. */
static int record_done(lane_t *l, uint32_t b, uint64_t entries, segd_err_t err)
{
    exporter_t *x = l->x;
    if (!err)
        err = segd_ocf_writer_commit(x->w[b], l->errmsg, sizeof(l->errmsg));
    if (err) {
        l->err = err;
        if (err == SEGD_ERR_NOMEM)
            snprintf(l->errmsg, sizeof(l->errmsg), "out of memory");
        return 1;
    }
    x->segments[b] += entries;
    uint64_t r = atomic_fetch_add(&x->records, 1) + 1;
    atomic_fetch_add(&x->entries, entries);
    if (l->lane == 0 && (r & 1023) == 0)
        progress(x, 0);
    return 0;
}

static int export_record(void *ctx, const char *user, size_t user_len,
                         const segd_profile_t *p)
{
    lane_t *l = ctx;
    exporter_t *x = l->x;
    uint32_t b = segd_bucket_of(user, user_len, x->o->buckets);
    if (b % l->lanes != l->lane)
        return 0;
    return record_done(l, b, p->n,
                       segd_snaprec_encode(user, user_len, p, segd_ocf_writer_buf(x->w[b])));
}

/* Native: the lane decodes only its own buckets' values (the avro scan
 * decodes every record in every lane) and copies what needs no pruning. */
static int export_native(void *ctx, const char *user, size_t user_len, const uint8_t *value,
                         size_t value_len)
{
    lane_t *l = ctx;
    exporter_t *x = l->x;
    uint32_t b = segd_bucket_of(user, user_len, x->o->buckets);
    if (b % l->lanes != l->lane)
        return 0;
    int written = 0;
    uint64_t entries = 0;
    segd_err_t err = segd_snapnat_export(&l->nat, user, user_len, value, value_len,
                                         segd_ocf_writer_buf(x->w[b]), &entries, &written);
    if (err == SEGD_ERR_CORRUPT) { /* as the avro scan: no snapshot without this user */
        segd_policy_count_corrupt(segd_store_policy(x->store));
        l->err = err;
        snprintf(l->errmsg, sizeof(l->errmsg),
                 "the record of user %.*s does not decode: no snapshot", (int)user_len, user);
        return 1;
    }
    return err || written ? record_done(l, b, entries, err) : 0;
}

static void *lane_main(void *arg)
{
    lane_t *l = arg;
    segd_err_t err;
    if (l->x->o->format == SEGD_SNAPFMT_NATIVE) {
        segd_prune_t rule; /* as the avro scan's: read once, complete */
        segd_policy_rule(segd_store_policy(l->x->store), &rule, 1);
        segd_snapnat_writer_init(&l->nat, &rule, l->x->o->native_copy);
        err = segd_store_view_scan_raw(l->v, export_native, l, l->errmsg, sizeof(l->errmsg));
        segd_snapnat_writer_free(&l->nat);
    } else {
        err = segd_store_view_scan(l->v, export_record, l, l->errmsg, sizeof(l->errmsg));
    }
    if (err && !l->err)
        l->err = err;
    return NULL;
}

/* Runs the lanes (the first on this thread) and reports the first error. */
static segd_err_t scan_lanes(exporter_t *x, segd_store_view_t *v, char *errstr, size_t n)
{
    uint32_t lanes = x->o->threads ? x->o->threads : 1;
    if (lanes > x->o->buckets)
        lanes = x->o->buckets;
    lane_t *l = calloc(lanes, sizeof(*l));
    pthread_t *t = calloc(lanes, sizeof(*t));
    if (!l || !t) {
        free(l);
        free(t);
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    }
    uint32_t started = 1;
    for (uint32_t i = 0; i < lanes; i++)
        l[i] = (lane_t){.x = x, .v = v, .lane = i, .lanes = lanes};
    for (; started < lanes; started++)
        if (pthread_create(&t[started], NULL, lane_main, &l[started]))
            break;
    lane_main(&l[0]);
    for (uint32_t i = started; i < lanes; i++) /* lanes no thread could be made for */
        lane_main(&l[i]);
    for (uint32_t i = 1; i < started; i++)
        pthread_join(t[i], NULL);
    segd_err_t err = SEGD_OK;
    for (uint32_t i = 0; i < lanes && !err; i++)
        if (l[i].err)
            err = segd_errf(l[i].err, errstr, n, "%s", l[i].errmsg);
    free(l);
    free(t);
    return err;
}

static segd_err_t open_writers(exporter_t *x, char *errstr, size_t n)
{
    for (uint32_t b = 0; b < x->o->buckets; b++) {
        char path[4200];
        staged_path(x, b, path, sizeof(path));
        segd_err_t err = segd_ocf_writer_open_codec(&x->w[b], path,
                                                    segd_snapfmt_schema_json(x->o->format),
                                                    x->o->codec, x->o->level, errstr, n);
        if (err)
            return err;
    }
    return SEGD_OK;
}

static segd_err_t close_writers(exporter_t *x, char *errstr, size_t n)
{
    segd_err_t first = SEGD_OK;
    for (uint32_t b = 0; b < x->o->buckets; b++) {
        segd_ocf_info_t info;
        segd_snapshot_file_t *f = &x->m->files[b];
        segd_err_t err = segd_ocf_writer_close(x->w[b], &info, errstr, n);
        x->w[b] = NULL;
        if (err && !first)
            first = err;
        if (err)
            continue;
        bucket_name(f->name, sizeof(f->name), b, x->gen);
        f->bucket = b;
        f->records = info.records;
        f->segments = x->segments[b];
        f->bytes = info.bytes;
        memcpy(f->sha256, info.sha256, sizeof(f->sha256));
    }
    x->m->n_files = x->o->buckets;
    return first;
}

static void remove_staged(exporter_t *x)
{
    for (uint32_t b = 0; b < x->o->buckets; b++) {
        char path[4200];
        staged_path(x, b, path, sizeof(path));
        unlink(path);
    }
    if (!x->in_place)
        rmdir(x->dir);
}

/* Moves (directory) or uploads (remote) the bucket files. */
static segd_err_t publish_buckets(exporter_t *x, segd_dest_t *d, char *errstr, size_t n)
{
    for (uint32_t b = 0; b < x->o->buckets; b++) {
        char path[4200], final[4200];
        staged_path(x, b, path, sizeof(path));
        if (!x->in_place) {
            segd_err_t err = segd_dest_put_file(d, x->m->files[b].name, path, errstr, n);
            if (err)
                return err;
        } else {
            snprintf(final, sizeof(final), "%s/%s", x->dir, x->m->files[b].name);
            if (rename(path, final))
                return segd_errf(SEGD_ERR_IO, errstr, n, "rename %s: %s", path,
                                 strerror(errno));
        }
        x->published = b + 1;
    }
    return SEGD_OK;
}

/* Best effort: files no manifest will reference (a failed export's, or the
 * previous snapshot's once the new manifest is in place). A reader still
 * loading the previous snapshot then finds a file missing and starts over
 * from the new manifest. */
static void delete_files(segd_dest_t *d, const segd_snapshot_file_t *f, size_t nf,
                         const segd_manifest_t *keep)
{
    char err[256];
    for (size_t i = 0; i < nf; i++) {
        int kept = 0;
        for (size_t k = 0; keep && k < keep->n_files && !kept; k++)
            kept = !strcmp(keep->files[k].name, f[i].name);
        if (!kept && segd_dest_delete(d, f[i].name, err, sizeof(err)))
            fprintf(stderr, "segd: snapshot: could not delete %s: %s\n", f[i].name, err);
    }
}

static void read_old_manifest(segd_dest_t *d, segd_manifest_t *old)
{
    segd_buf_t buf = {0};
    char err[256];
    if (segd_dest_get_mem(d, SEGD_MANIFEST_NAME, &buf, err, sizeof(err)) == SEGD_OK &&
        segd_manifest_parse((const char *)buf.data, buf.len, old, err, sizeof(err)) != SEGD_OK)
        segd_manifest_free(old); /* not ours to clean up */
    segd_buf_free(&buf);
}

/* A killed export leaves staged bucket files and temporaries behind. */
static void remove_leftovers(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        const char *nm = e->d_name;
        size_t len = strlen(nm);
        int ours = !strncmp(nm, "bucket-", 7) || !strncmp(nm, SEGD_MANIFEST_NAME, 13);
        if (ours && ((len > 8 && !strcmp(nm + len - 8, ".partial")) || strstr(nm, ".tmp.")))
            unlinkat(dirfd(d), nm, 0);
    }
    if (d)
        closedir(d);
}

/* Exports into one directory take turns (flock on .segd-export.lock): the
 * holder knows that any staged file there belongs to a dead export. */
static segd_err_t lock_dir(exporter_t *x, const char *dir, char *errstr, size_t n)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/.segd-export.lock", dir);
    x->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (x->lock_fd < 0 || flock(x->lock_fd, LOCK_EX))
        return segd_errf(SEGD_ERR_IO, errstr, n, "%s: %s", path, strerror(errno));
    remove_leftovers(dir);
    return SEGD_OK;
}

static segd_err_t prepare_dir(exporter_t *x, const char *dest_url, char *errstr, size_t n)
{
    if (!is_remote(dest_url)) {
        x->in_place = 1;
        snprintf(x->dir, sizeof(x->dir), "%s", dest_url);
        return SEGD_OK; /* segd_dest_open created it */
    }
    const char *tmp = x->o->tmp_dir ? x->o->tmp_dir : getenv("TMPDIR");
    snprintf(x->dir, sizeof(x->dir), "%s/segd-snapshot-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(x->dir))
        return segd_errf(SEGD_ERR_IO, errstr, n, "staging directory %s: %s", x->dir,
                         strerror(errno));
    return SEGD_OK;
}

static segd_err_t write_snapshot(exporter_t *x, segd_store_t *s, segd_store_view_t *v,
                                 segd_dest_t *d, char *errstr, size_t n)
{
    segd_manifest_t *m = x->m;
    /* the scan skips records that do not decode (and counts them): a snapshot
     * without them would verify and load as if those users had nothing */
    uint64_t corrupt = segd_policy_corrupt_count(segd_store_policy(s));
    segd_err_t err = open_writers(x, errstr, n);
    if (!err)
        err = scan_lanes(x, v, errstr, n);
    uint64_t bad = segd_policy_corrupt_count(segd_store_policy(s)) - corrupt;
    if (!err && bad)
        err = segd_errf(SEGD_ERR_CORRUPT, errstr, n,
                        "%" PRIu64 " records do not decode: no snapshot (segd get names them)",
                        bad);
    if (!err) /* on failure the caller aborts the writers */
        err = close_writers(x, errstr, n);
    progress(x, 1);
    if (err)
        return err;
    m->records = atomic_load(&x->records);
    m->segments = atomic_load(&x->entries);
    m->horizon_ms = segd_policy_horizon_ms(segd_store_policy(s));
    /* read after the scan: at least the W it pruned with, so a cache skipping
     * deltas older than this skips every one that could undo a drop, and
     * none written after the view (those are newer than W + grace) */
    m->gc_watermark_ms = segd_store_gc_watermark(s);
    err = publish_buckets(x, d, errstr, n);
    if (err)
        return err;
    char *json = segd_manifest_dump(m, segd_ocf_codec_name(x->o->codec));
    if (!json)
        return segd_errf(SEGD_ERR_NOMEM, errstr, n, "out of memory");
    err = segd_dest_put_mem(d, SEGD_MANIFEST_NAME, json, strlen(json), errstr, n);
    free(json);
    return err;
}

segd_err_t segd_snapshot_export(segd_store_t *s, const char *dest_url,
                                const segd_snapshot_opts_t *o, segd_manifest_t *out,
                                char *errstr, size_t n)
{
    if (!o->buckets || (o->buckets & (o->buckets - 1)) || o->buckets > (1u << 16))
        return segd_errf(SEGD_ERR_CONFIG, errstr, n, "buckets must be a power of two <= 65536");
    segd_manifest_t local;
    segd_manifest_t *m = out ? out : &local;
    segd_manifest_init(m);
    exporter_t x = {.o = o, .store = s, .m = m, .lock_fd = -1};
    segd_dest_t *d = NULL;
    segd_store_view_t *v = NULL;
    x.w = calloc(o->buckets, sizeof(*x.w));
    x.segments = calloc(o->buckets, sizeof(*x.segments));
    m->files = calloc(o->buckets, sizeof(*m->files));
    m->buckets = o->buckets;
    m->format = o->format;
    m->created_at_ms = segd_wall_ms();
    x.gen = m->created_at_ms;
    m->now_ms = segd_policy_now_ms(segd_store_policy(s));
    m->changes_topic = o->changes_topic ? strdup(o->changes_topic) : NULL;
    segd_err_t err = !x.w || !x.segments || !m->files ? SEGD_ERR_NOMEM : SEGD_OK;
    if (!err)
        err = segd_dest_open(&d, dest_url, &o->dest, errstr, n);
    /* the old manifest stays valid (its files are untouched) until the new
     * one replaces it; its files go afterwards */
    segd_manifest_t old;
    segd_manifest_init(&old);
    if (!err && !is_remote(dest_url))
        err = lock_dir(&x, dest_url, errstr, n);
    if (!err)
        read_old_manifest(d, &old);
    if (!err)
        err = prepare_dir(&x, dest_url, errstr, n);
    if (!err)
        err = segd_store_view_open(s, &v, errstr, n);
    if (!err)
        err = collect_meta(v, m, errstr, n);
    if (!err)
        err = write_snapshot(&x, s, v, d, errstr, n);
    if (!err)
        delete_files(d, old.files, old.n_files, m);
    else if (d && x.published)
        delete_files(d, m->files, x.published, NULL);
    segd_manifest_free(&old);
    for (uint32_t b = 0; x.w && b < o->buckets; b++)
        segd_ocf_writer_abort(x.w[b]);
    if (x.dir[0] && (err || !x.in_place))
        remove_staged(&x);
    segd_store_view_close(v);
    segd_dest_close(d);
    if (x.lock_fd >= 0)
        close(x.lock_fd); /* releases the lock */
    free(x.w);
    free(x.segments);
    if (err == SEGD_ERR_NOMEM && errstr && !errstr[0])
        segd_errf(err, errstr, n, "out of memory");
    if (err || !out)
        segd_manifest_free(m);
    return err;
}
